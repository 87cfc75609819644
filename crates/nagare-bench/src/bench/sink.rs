//! The built-in sink: a forward-protocol server that decodes every frame with
//! the codec crate, counts events and payload per 100 ms, answers acks, and
//! verifies `seq` numbers (missing and duplicates).
//!
//! A sink lives for a whole system's matrix; [`Sink::begin`] starts a new run
//! with its own tag, so late events of an earlier run are counted as stray,
//! never as this run's.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bytes::BytesMut;
use nagare_forward::msgpack::{
    read_array_len, read_map_len, read_str_or_bin, read_uint, skip_value,
};
use nagare_forward::{encode_ack, scan_frame, EventTime, Limits, ScanError};

/// Seen `seq` values, a bitmap grown on demand (up to 2^32 values).
#[derive(Debug, Default)]
pub struct SeqSet {
    words: Vec<u64>,
    unique: u64,
    max_plus_one: u64,
}

/// Largest seq tracked; above it a seq counts as bad.
pub const MAX_SEQ: u64 = 1 << 32;

impl SeqSet {
    /// Marks `seq`; returns Some(true) for a duplicate, None when out of range.
    pub fn insert(&mut self, seq: u64) -> Option<bool> {
        if seq >= MAX_SEQ {
            return None;
        }
        let w = (seq / 64) as usize;
        if w >= self.words.len() {
            let want = (w + 1)
                .max(self.words.len() * 2)
                .min((MAX_SEQ / 64) as usize);
            self.words.resize(want, 0);
        }
        let m = 1u64 << (seq % 64);
        let dup = self.words[w] & m != 0;
        self.words[w] |= m;
        if !dup {
            self.unique += 1;
            self.max_plus_one = self.max_plus_one.max(seq + 1);
        }
        Some(dup)
    }

    pub fn unique(&self) -> u64 {
        self.unique
    }

    pub fn max_plus_one(&self) -> u64 {
        self.max_plus_one
    }

    /// How many distinct seqs below `n` were seen.
    pub fn count_below(&self, n: u64) -> u64 {
        let n = n.min(MAX_SEQ);
        let full = ((n / 64) as usize).min(self.words.len());
        let mut c: u64 = self.words[..full]
            .iter()
            .map(|w| w.count_ones() as u64)
            .sum();
        if full < self.words.len() && n & 63 != 0 {
            c += (self.words[full] & ((1u64 << (n & 63)) - 1)).count_ones() as u64;
        }
        c
    }

    pub fn contains(&self, seq: u64) -> bool {
        let w = (seq / 64) as usize;
        w < self.words.len() && self.words[w] & (1 << (seq % 64)) != 0
    }
}

/// Width of one timeline bucket.
pub const BUCKET: Duration = Duration::from_millis(100);
const BUCKETS: usize = 36_000; // one hour

/// Counters of one run.
pub struct RunCounters {
    /// Only frames with this tag count; None accepts every tag.
    pub tag: Option<String>,
    pub start: Instant,
    pub events: AtomicU64,
    pub payload: AtomicU64,
    pub frames: AtomicU64,
    pub acks: AtomicU64,
    pub duplicates: AtomicU64,
    pub no_seq: AtomicU64,
    pub bad_seq: AtomicU64,
    /// Events with another tag (late arrivals of an earlier run).
    pub stray: AtomicU64,
    pub errors: AtomicU64,
    /// ns after `start` of the last event (+1; 0 = none yet).
    pub last_ns: AtomicI64,
    pub seqs: Mutex<SeqSet>,
    timeline: Vec<AtomicU64>,
}

impl RunCounters {
    fn new(tag: Option<String>) -> Self {
        RunCounters {
            tag,
            start: Instant::now(),
            events: AtomicU64::new(0),
            payload: AtomicU64::new(0),
            frames: AtomicU64::new(0),
            acks: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            no_seq: AtomicU64::new(0),
            bad_seq: AtomicU64::new(0),
            stray: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            last_ns: AtomicI64::new(0),
            seqs: Mutex::new(SeqSet::default()),
            timeline: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Events that arrived in `[from, to)` after the run's start.
    pub fn events_between(&self, from: Duration, to: Duration) -> u64 {
        let a = (from.as_nanos() / BUCKET.as_nanos()) as usize;
        let b = ((to.as_nanos() / BUCKET.as_nanos()) as usize).min(BUCKETS);
        self.timeline[a.min(b)..b]
            .iter()
            .map(|x| x.load(Ordering::Relaxed))
            .sum()
    }

    /// Per-bucket counts up to `to`.
    pub fn timeline(&self, to: Duration) -> Vec<u64> {
        let b = ((to.as_nanos() / BUCKET.as_nanos()) as usize + 1).min(BUCKETS);
        self.timeline[..b]
            .iter()
            .map(|x| x.load(Ordering::Relaxed))
            .collect()
    }

    pub fn unique(&self) -> u64 {
        self.seqs.lock().unwrap().unique()
    }

    /// Time of the last event, if any.
    pub fn last_event(&self) -> Option<Instant> {
        match self.last_ns.load(Ordering::Relaxed) {
            0 => None,
            n => Some(self.start + Duration::from_nanos((n - 1) as u64)),
        }
    }

    /// The verification summary against `sent` events with seqs `[0, sent)`.
    pub fn verify(&self, sent: u64) -> Verify {
        let s = self.seqs.lock().unwrap();
        let in_range = s.count_below(sent);
        Verify {
            received: self.events.load(Ordering::Relaxed),
            unique: s.unique(),
            missing: sent - in_range.min(sent),
            duplicates: self.duplicates.load(Ordering::Relaxed),
            unexpected: s.unique() - in_range,
            no_seq: self.no_seq.load(Ordering::Relaxed),
            bad_seq: self.bad_seq.load(Ordering::Relaxed),
            stray: self.stray.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
        }
    }
}

/// Loss and duplicate check of one run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Verify {
    /// Events of this run's tag that arrived (duplicates included).
    pub received: u64,
    /// Distinct seq values seen.
    pub unique: u64,
    /// Seqs in `[0, sent)` never seen.
    pub missing: u64,
    /// Events whose seq had been seen before.
    pub duplicates: u64,
    /// Distinct seqs at or above `sent` (never sent: corruption).
    pub unexpected: u64,
    /// Events without a seq.
    pub no_seq: u64,
    /// Seqs of 2^32 or more.
    pub bad_seq: u64,
    /// Events with another tag.
    pub stray: u64,
    /// Protocol errors and streams cut inside a frame.
    pub errors: u64,
}

impl Verify {
    /// No loss, no duplicates, nothing unexpected.
    pub fn clean(&self) -> bool {
        self.missing == 0
            && self.duplicates == 0
            && self.unexpected == 0
            && self.no_seq == 0
            && self.bad_seq == 0
            && self.errors == 0
    }
}

struct Shared {
    run: RwLock<Arc<RunCounters>>,
    stop: AtomicBool,
    conns: Mutex<Vec<Conn>>,
    limits: Limits,
}

enum Conn {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// A running sink.
pub struct Sink {
    addr: SocketAddr,
    unix: Option<PathBuf>,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl Sink {
    /// Listens on `addr` (TCP) and, if given, a UNIX socket path.
    pub fn start(addr: &str, unix: Option<PathBuf>) -> Result<Sink> {
        let ln = TcpListener::bind(addr).with_context(|| format!("sink: binding {addr}"))?;
        let local = ln.local_addr()?;
        ln.set_nonblocking(true)?;
        let shared = Arc::new(Shared {
            run: RwLock::new(Arc::new(RunCounters::new(None))),
            stop: AtomicBool::new(false),
            conns: Mutex::new(Vec::new()),
            limits: Limits::default(),
        });
        let mut threads = vec![spawn_acceptor(
            shared.clone(),
            move || ln.accept().map(|(s, _)| s),
            |s: &TcpStream| {
                s.set_nonblocking(false).ok();
                s.set_nodelay(true).ok();
                s.try_clone().ok().map(Conn::Tcp)
            },
        )];
        if let Some(p) = &unix {
            let _ = std::fs::remove_file(p);
            let ul =
                UnixListener::bind(p).with_context(|| format!("sink: binding {}", p.display()))?;
            ul.set_nonblocking(true)?;
            threads.push(spawn_acceptor(
                shared.clone(),
                move || ul.accept().map(|(s, _)| s),
                |s: &UnixStream| {
                    s.set_nonblocking(false).ok();
                    s.try_clone().ok().map(Conn::Unix)
                },
            ));
        }
        Ok(Sink {
            addr: local,
            unix,
            shared,
            threads,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Starts a new run: fresh counters; only `tag` counts (None: any tag).
    pub fn begin(&self, tag: Option<&str>) -> Arc<RunCounters> {
        let c = Arc::new(RunCounters::new(tag.map(str::to_owned)));
        *self.shared.run.write().unwrap() = c.clone();
        c
    }

    /// The current run's counters.
    pub fn current(&self) -> Arc<RunCounters> {
        self.shared.run.read().unwrap().clone()
    }

    /// Stops listening and closes every connection.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for c in self.shared.conns.lock().unwrap().drain(..) {
            match c {
                Conn::Tcp(s) => {
                    let _ = s.shutdown(std::net::Shutdown::Both);
                }
                Conn::Unix(s) => {
                    let _ = s.shutdown(std::net::Shutdown::Both);
                }
            }
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        if let Some(p) = &self.unix {
            let _ = std::fs::remove_file(p);
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Accepts connections until the sink stops: `prepare` sets a new stream's
/// options and gives the clone kept for shutdown; each stream is served on
/// its own thread.
fn spawn_acceptor<S: Read + Write + Send + 'static>(
    sh: Arc<Shared>,
    accept: impl Fn() -> std::io::Result<S> + Send + 'static,
    prepare: impl Fn(&S) -> Option<Conn> + Send + 'static,
) -> JoinHandle<()> {
    std::thread::spawn(move || loop {
        if sh.stop.load(Ordering::Relaxed) {
            return;
        }
        match accept() {
            Ok(s) => {
                if let Some(c) = prepare(&s) {
                    sh.conns.lock().unwrap().push(c);
                }
                let sh = sh.clone();
                std::thread::spawn(move || serve(s, &sh));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    })
}

fn serve<S: Read + Write>(mut s: S, sh: &Shared) {
    let mut buf = BytesMut::with_capacity(256 << 10);
    let mut tmp = vec![0u8; 256 << 10];
    let mut ack = Vec::with_capacity(64);
    let mut seqs = Vec::new();
    loop {
        let n = match s.read(&mut tmp) {
            Ok(0) | Err(_) => {
                if !buf.is_empty() {
                    sh.run
                        .read()
                        .unwrap()
                        .errors
                        .fetch_add(1, Ordering::Relaxed);
                }
                return;
            }
            Ok(n) => n,
        };
        buf.extend_from_slice(&tmp[..n]);
        loop {
            match scan_frame(&buf, &sh.limits) {
                Ok(Some(sc)) => {
                    let frame = buf.split_to(sc.len).freeze();
                    let run = sh.run.read().unwrap().clone();
                    match sc.into_frame(frame, &sh.limits, EventTime::now()) {
                        Ok(f) => {
                            let ours = match run.tag.as_deref() {
                                None => true,
                                Some(t) => t == f.tag,
                            };
                            if ours {
                                if count_entries(&f.entries, &run, &mut seqs).is_err() {
                                    run.errors.fetch_add(1, Ordering::Relaxed);
                                }
                                run.frames.fetch_add(1, Ordering::Relaxed);
                            } else {
                                run.stray.fetch_add(f.count as u64, Ordering::Relaxed);
                            }
                            if let Some(c) = &f.chunk {
                                ack.clear();
                                encode_ack(&mut ack, c);
                                // Counted first: the sender may finish as soon as it reads the ack.
                                if ours {
                                    run.acks.fetch_add(1, Ordering::Relaxed);
                                }
                                if s.write_all(&ack).is_err() {
                                    return;
                                }
                            }
                        }
                        Err(_) => {
                            run.errors.fetch_add(1, Ordering::Relaxed);
                            return;
                        }
                    }
                }
                Ok(None) => break,
                Err(_) => {
                    sh.run
                        .read()
                        .unwrap()
                        .errors
                        .fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
        }
    }
}

/// The seq of an entry whose record has no `seq` key: the leading digits of
/// its message (`"0000000042 xxxx"`), as the file-transfer case writes them.
fn seq_from_message(m: &[u8]) -> Option<u64> {
    let d = m.iter().take_while(|c| c.is_ascii_digit()).count();
    if d == 0 || d > 19 || (d < m.len() && m[d] != b' ') {
        return None;
    }
    std::str::from_utf8(&m[..d]).ok()?.parse().ok()
}

/// Walks a PackedForward payload: counts events and payload bytes, checks seqs.
/// `seqs` is the connection's reused scratch for the frame's seqs.
fn count_entries(
    e: &[u8],
    run: &RunCounters,
    seqs: &mut Vec<Option<u64>>,
) -> Result<(), ScanError> {
    let mut p = 0;
    let mut events = 0u64;
    let mut payload = 0u64;
    seqs.clear();
    while p < e.len() {
        let (n, q) = read_array_len(e, p)?;
        let end_of_time = skip_value(e, q)?;
        let (m, mut q) = read_map_len(e, end_of_time)?;
        let mut seq = None;
        let mut msg: Option<(usize, usize)> = None;
        for _ in 0..m {
            let key = read_str_or_bin(e, q)?;
            let vpos = match key {
                Some((_, b)) => b,
                None => skip_value(e, q)?,
            };
            let k = key.map(|(a, b)| &e[a..b]);
            match k {
                Some(b"seq") => {
                    if let Some((v, next)) = read_uint(e, vpos)? {
                        seq = Some(v);
                        q = next;
                        continue;
                    }
                }
                Some(b"message") | Some(b"log") if msg.is_none() => {
                    if let Some(span) = read_str_or_bin(e, vpos)? {
                        msg = Some(span);
                        q = span.1;
                        continue;
                    }
                }
                _ => {}
            }
            q = skip_value(e, vpos)?;
        }
        // Any further array elements (none in canonical entries).
        for _ in 2..n {
            q = skip_value(e, q)?;
        }
        p = q;
        if let Some((a, b)) = msg {
            payload += (b - a) as u64;
            if seq.is_none() {
                seq = seq_from_message(&e[a..b]);
            }
        }
        events += 1;
        seqs.push(seq);
    }
    {
        let mut set = run.seqs.lock().unwrap();
        let (mut dups, mut none, mut bad) = (0, 0, 0);
        for s in seqs.drain(..) {
            match s {
                None => none += 1,
                Some(v) => match set.insert(v) {
                    Some(true) => dups += 1,
                    Some(false) => {}
                    None => bad += 1,
                },
            }
        }
        if dups > 0 {
            run.duplicates.fetch_add(dups, Ordering::Relaxed);
        }
        if none > 0 {
            run.no_seq.fetch_add(none, Ordering::Relaxed);
        }
        if bad > 0 {
            run.bad_seq.fetch_add(bad, Ordering::Relaxed);
        }
    }
    run.events.fetch_add(events, Ordering::Relaxed);
    run.payload.fetch_add(payload, Ordering::Relaxed);
    let since = run.start.elapsed();
    let b = (since.as_nanos() / BUCKET.as_nanos()) as usize;
    if b < BUCKETS {
        run.timeline[b].fetch_add(events, Ordering::Relaxed);
    }
    run.last_ns
        .fetch_max(since.as_nanos() as i64 + 1, Ordering::Relaxed);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seq_from_message_reads_leading_digits() {
        assert_eq!(seq_from_message(b"0000000042 xxxx"), Some(42));
        assert_eq!(seq_from_message(b"0000000042"), Some(42));
        assert_eq!(seq_from_message(b"42x"), None);
        assert_eq!(seq_from_message(b"hello"), None);
    }

    #[test]
    fn seq_set_counts_duplicates_and_range() {
        let mut s = SeqSet::default();
        assert_eq!(s.insert(5), Some(false));
        assert_eq!(s.insert(5), Some(true));
        assert_eq!(s.insert(100_000), Some(false));
        assert_eq!(s.insert(MAX_SEQ), None);
        assert_eq!(s.unique(), 2);
        assert_eq!(s.max_plus_one(), 100_001);
        assert!(s.contains(5) && !s.contains(6));
    }
}
