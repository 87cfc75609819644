//! The tap hub: live copies of routed batches for `nagare tap` (the
//! command, cli/tap.rs), which the monitor serves as `GET /api/tap` (the
//! tap endpoint, monitor/tap_endpoint.rs, a subscriber of this hub).
//!
//! The inputs offer every batch to `offer` after the filter chain, with the
//! tag it is routed by. With nobody tapping that is one relaxed atomic load
//! per batch. A tapper gets refcounted copies of the batch's bytes through a
//! bounded channel; when the channel is full the batch is skipped (and
//! counted, so the tapper can say so): a slow tapper never holds up the
//! pipeline.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use nagare_core::pattern::Pattern;
use tokio::sync::mpsc;

/// Batches a tapper may have waiting before new ones are skipped.
pub const CHANNEL_BATCHES: usize = 256;

/// How many tappers are subscribed: the only thing the hot path reads.
static TAPPERS: AtomicUsize = AtomicUsize::new(0);
static HUB: RwLock<Vec<Tapper>> = RwLock::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// A routed batch as a tapper receives it.
pub struct Tapped {
    pub tag: String,
    pub parts: Vec<Bytes>,
    pub count: u32,
}

struct Tapper {
    id: u64,
    patterns: Vec<Pattern>,
    tx: mpsc::Sender<Tapped>,
    /// Events skipped because the channel was full.
    skipped: Arc<AtomicU64>,
}

/// Offers a routed batch to the tappers whose pattern matches `tag`.
#[inline]
pub fn offer(tag: &str, parts: &[Bytes], count: u32) {
    if TAPPERS.load(Relaxed) == 0 || count == 0 {
        return;
    }
    offer_to_tappers(tag, parts, count);
}

#[cold]
fn offer_to_tappers(tag: &str, parts: &[Bytes], count: u32) {
    let hub = HUB.read().unwrap_or_else(|e| e.into_inner());
    for t in hub.iter() {
        if !t.patterns.iter().any(|p| p.matches(tag)) {
            continue;
        }
        let batch = Tapped {
            tag: tag.to_string(),
            parts: parts.to_vec(),
            count,
        };
        if t.tx.try_send(batch).is_err() {
            t.skipped.fetch_add(u64::from(count), Relaxed);
        }
    }
}

/// A tapper's end: batches arrive on `rx` (closed by `close_all`);
/// dropping it unsubscribes.
pub struct Subscription {
    pub rx: mpsc::Receiver<Tapped>,
    id: u64,
    skipped: Arc<AtomicU64>,
}

impl Subscription {
    /// Events skipped since the last call because the channel was full.
    pub fn take_skipped(&self) -> u64 {
        self.skipped.swap(0, Relaxed)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut hub = HUB.write().unwrap_or_else(|e| e.into_inner());
        hub.retain(|t| t.id != self.id);
        TAPPERS.store(hub.len(), Relaxed);
    }
}

/// Starts tapping the batches whose tag matches one of `patterns`.
pub fn subscribe(patterns: Vec<Pattern>) -> Subscription {
    let (tx, rx) = mpsc::channel(CHANNEL_BATCHES);
    let id = NEXT_ID.fetch_add(1, Relaxed);
    let skipped = Arc::new(AtomicU64::new(0));
    let mut hub = HUB.write().unwrap_or_else(|e| e.into_inner());
    hub.push(Tapper {
        id,
        patterns,
        tx,
        skipped: skipped.clone(),
    });
    TAPPERS.store(hub.len(), Relaxed);
    Subscription { rx, id, skipped }
}

/// Ends every tap (the daemon is stopping): their channels close.
pub fn close_all() {
    let mut hub = HUB.write().unwrap_or_else(|e| e.into_inner());
    hub.clear();
    TAPPERS.store(0, Relaxed);
}

/// What a tapper keeps of the events it receives: one in `sample`, at most
/// `rate` per second (0: no limit), with a burst of one second's worth.
pub struct Limiter {
    sample: u64,
    rate: f64,
    tokens: f64,
    last: std::time::Instant,
    /// Events seen so far (for the one-in-`sample` choice).
    seen: u64,
    /// Events sampled in but over the rate, since the last `take_limited`.
    limited: u64,
}

impl Limiter {
    pub fn new(sample: u64, rate: f64) -> Limiter {
        Limiter {
            sample: sample.max(1),
            rate,
            tokens: rate.max(1.0),
            last: std::time::Instant::now(),
            seen: 0,
            limited: 0,
        }
    }

    /// Whether to keep the next event.
    pub fn keep(&mut self) -> bool {
        let n = self.seen;
        self.seen += 1;
        if !n.is_multiple_of(self.sample) {
            return false;
        }
        if self.rate <= 0.0 {
            return true;
        }
        self.refill();
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            self.limited += 1;
            false
        }
    }

    /// Whether a batch of `count` events may have one to keep; if not, the
    /// events are counted as seen (and over the rate) without looking at
    /// them, so a tapper of a busy tag does not decode what it cannot show.
    pub fn wants_any(&mut self, count: u32) -> bool {
        if self.rate <= 0.0 {
            return true;
        }
        self.refill();
        if self.tokens >= 1.0 {
            return true;
        }
        let count = u64::from(count);
        // Events of seen..seen+count that the sampling would have kept.
        let first = (self.sample - self.seen % self.sample) % self.sample;
        if first < count {
            self.limited += (count - 1 - first) / self.sample + 1;
        }
        self.seen += count;
        false
    }

    fn refill(&mut self) {
        let now = std::time::Instant::now();
        let dt = now.duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + dt * self.rate).min(self.rate.max(1.0));
    }

    /// Events that `keep` refused for the rate since the last call.
    pub fn take_limited(&mut self) -> u64 {
        std::mem::take(&mut self.limited)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limiter_keeps_one_in_sample_and_at_most_rate() {
        let mut l = Limiter::new(3, 0.0);
        let kept: Vec<bool> = (0..7).map(|_| l.keep()).collect();
        assert_eq!(kept, [true, false, false, true, false, false, true]);
        // A burst of one second's worth, then nothing until time passes.
        let mut l = Limiter::new(1, 5.0);
        let kept = (0..20).filter(|_| l.keep()).count();
        assert!((5..=6).contains(&kept), "{kept}");
        assert_eq!(l.take_limited() as usize, 20 - kept);
        assert_eq!(l.take_limited(), 0);
        // Out of tokens: a whole batch is counted without being looked at,
        // the sampled-out events not as over the rate.
        let mut l = Limiter::new(4, 2.0);
        assert!(l.wants_any(1) && l.keep());
        assert!(l.wants_any(10));
        let kept = (0..10).filter(|_| l.keep()).count();
        assert_eq!((kept, l.take_limited()), (1, 1));
        assert!(!l.wants_any(10));
        assert_eq!(l.take_limited(), 3);
    }

    #[tokio::test]
    async fn a_full_channel_skips_and_counts_and_dropping_unsubscribes() {
        let sub = subscribe(Pattern::parse_list("tapped.only").unwrap());
        let part = [Bytes::from_static(b"x")];
        for _ in 0..CHANNEL_BATCHES + 3 {
            offer("tapped.only", &part, 2);
        }
        offer("tapped.other", &part, 1);
        assert_eq!(sub.take_skipped(), 6);
        assert_eq!(sub.take_skipped(), 0);
        let mut sub = sub;
        let first = sub.rx.recv().await.unwrap();
        assert_eq!((first.tag.as_str(), first.count), ("tapped.only", 2));
        let id = sub.id;
        drop(sub);
        assert!(!HUB.read().unwrap().iter().any(|t| t.id == id));
    }
}
