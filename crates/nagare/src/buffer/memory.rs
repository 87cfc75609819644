//! The memory buffer and its flush workers.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::{BufferConfig, OverflowAction};
use crate::outputs::{FlushError, Output};
use crate::stats::PluginStats;

/// A closed chunk: one tag and its events as PackedForward entries.
#[derive(Debug, Clone)]
pub struct Chunk {
    /// Unique id, stable across retries (sent as the forward `chunk` option).
    pub id: [u8; 16],
    pub tag: Arc<str>,
    pub data: Bytes,
    pub count: u32,
}

impl Chunk {
    pub fn id_hex(&self) -> String {
        hex::encode(self.id)
    }
}

struct Staging {
    data: BytesMut,
    count: u32,
    created: Instant,
}

#[derive(Default)]
struct State {
    staged: HashMap<Arc<str>, Staging>,
    queue: VecDeque<Chunk>,
    /// Bytes of staged, queued and in-flight chunks.
    bytes: usize,
    closing: bool,
}

/// Why an append was refused.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    #[error("buffer of {0} is full (overflow_action = \"throw\")")]
    Full(String),
    #[error("buffer of {0} is shutting down")]
    Closed(String),
}

pub struct Buffer {
    cfg: BufferConfig,
    name: String,
    state: Mutex<State>,
    /// Wakes flush workers when a chunk is queued.
    queued: Notify,
    /// Wakes blocked writers when space is freed.
    space: Notify,
    stats: Arc<PluginStats>,
    output: Arc<dyn Output>,
    secondary: Option<(Arc<dyn Output>, Arc<PluginStats>)>,
    next_id: AtomicU64,
    id_seed: u64,
}

impl Buffer {
    pub fn new(
        name: &str,
        cfg: BufferConfig,
        stats: Arc<PluginStats>,
        output: Arc<dyn Output>,
        secondary: Option<(Arc<dyn Output>, Arc<PluginStats>)>,
    ) -> Arc<Buffer> {
        Arc::new(Buffer {
            cfg,
            name: name.to_string(),
            state: Mutex::new(State::default()),
            queued: Notify::new(),
            space: Notify::new(),
            stats,
            output,
            secondary,
            next_id: AtomicU64::new(0),
            id_seed: rand::random(),
        })
    }

    fn new_id(&self) -> [u8; 16] {
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&self.id_seed.to_be_bytes());
        id[8..].copy_from_slice(&self.next_id.fetch_add(1, Relaxed).to_be_bytes());
        id
    }

    fn close_staged(&self, st: &mut State, tag: &Arc<str>) {
        if let Some(s) = st.staged.remove(tag) {
            if s.count > 0 {
                st.queue.push_back(Chunk {
                    id: self.new_id(),
                    tag: tag.clone(),
                    data: s.data.freeze(),
                    count: s.count,
                });
                PluginStats::add(&self.stats.buffer_chunks, 1);
                self.queued.notify_one();
            }
        }
    }

    /// Appends a batch: `parts` are PackedForward entries holding `count`
    /// events in total. Waits while the buffer is full and the overflow
    /// action is `block`.
    pub async fn append(&self, tag: &str, parts: &[Bytes], count: u32) -> Result<(), AppendError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        loop {
            let space = self.space.notified();
            tokio::pin!(space);
            {
                let mut st = self.state.lock().expect("buffer state");
                if st.closing {
                    return Err(AppendError::Closed(self.name.clone()));
                }
                // A batch larger than the whole limit is let in when the buffer is
                // empty, or it could never be accepted.
                let over = st.bytes > 0 && st.bytes + len > self.cfg.total_limit_size.0 as usize;
                if over {
                    match self.cfg.overflow_action {
                        OverflowAction::Block => {
                            space.as_mut().enable();
                        }
                        OverflowAction::Throw => {
                            PluginStats::add(&self.stats.rejected, count as u64);
                            return Err(AppendError::Full(self.name.clone()));
                        }
                        OverflowAction::DropOldestChunk => {
                            if let Some(old) = st.queue.pop_front() {
                                st.bytes -= old.data.len();
                                PluginStats::add(&self.stats.dropped, old.count as u64);
                                self.stats.buffer_chunks.fetch_sub(1, Relaxed);
                                tracing::warn!(output = %self.name, events = old.count, tag = %old.tag,
                                    "buffer full: dropped the oldest chunk (overflow_action = drop_oldest_chunk)");
                                continue;
                            }
                            // Nothing queued to drop (all in flight): wait instead.
                            space.as_mut().enable();
                        }
                    }
                } else {
                    self.append_locked(&mut st, tag, parts, count, len);
                    return Ok(());
                }
            }
            space.await;
        }
    }

    fn append_locked(&self, st: &mut State, tag: &str, parts: &[Bytes], count: u32, len: usize) {
        let limit = self.cfg.chunk_limit_size.0 as usize;
        let rec_limit = self.cfg.chunk_limit_records.unwrap_or(u32::MAX);
        let key: Arc<str> = match st.staged.get_key_value(tag) {
            Some((k, s))
                if s.count > 0 && (s.data.len() + len > limit || s.count + count > rec_limit) =>
            {
                let k = k.clone();
                self.close_staged(st, &k);
                k
            }
            Some((k, _)) => k.clone(),
            None => Arc::from(tag),
        };
        let s = st.staged.entry(key.clone()).or_insert_with(|| Staging {
            data: BytesMut::with_capacity(len.max(limit.min(1 << 20))),
            count: 0,
            created: Instant::now(),
        });
        for p in parts {
            s.data.extend_from_slice(p);
        }
        s.count += count;
        let full = s.data.len() >= limit || s.count >= rec_limit;
        st.bytes += len;
        self.stats.buffer_bytes.store(st.bytes as u64, Relaxed);
        PluginStats::add(&self.stats.events_in, count as u64);
        PluginStats::add(&self.stats.bytes_in, len as u64);
        if full {
            self.close_staged(st, &key);
        }
    }

    /// Queues staged chunks older than `flush_interval` (all of them when `all`).
    fn enqueue_due(&self, all: bool) {
        let mut st = self.state.lock().expect("buffer state");
        let due: Vec<Arc<str>> = st
            .staged
            .iter()
            .filter(|(_, s)| all || s.created.elapsed() >= self.cfg.flush_interval.0)
            .map(|(k, _)| k.clone())
            .collect();
        for k in due {
            self.close_staged(&mut st, &k);
        }
    }

    async fn next_chunk(&self) -> Option<Chunk> {
        loop {
            let queued = self.queued.notified();
            tokio::pin!(queued);
            queued.as_mut().enable();
            {
                let mut st = self.state.lock().expect("buffer state");
                if let Some(c) = st.queue.pop_front() {
                    return Some(c);
                }
                if st.closing && st.staged.is_empty() {
                    // Wake the other workers so they see the end too.
                    self.queued.notify_waiters();
                    return None;
                }
            }
            queued.await;
        }
    }

    fn commit(&self, chunk: &Chunk) {
        let mut st = self.state.lock().expect("buffer state");
        st.bytes -= chunk.data.len();
        self.stats.buffer_bytes.store(st.bytes as u64, Relaxed);
        self.stats.buffer_chunks.fetch_sub(1, Relaxed);
        drop(st);
        self.space.notify_waiters();
    }

    /// Writes one chunk, retrying with backoff; after the retry limit the
    /// chunk goes to the secondary output.
    async fn deliver(&self, chunk: &Chunk) {
        let started = Instant::now();
        let mut attempt: u32 = 0;
        loop {
            let err = match self.output.write(chunk).await {
                Ok(()) => {
                    PluginStats::add(&self.stats.events_out, chunk.count as u64);
                    PluginStats::add(&self.stats.bytes_out, chunk.data.len() as u64);
                    return;
                }
                Err(e) => e,
            };
            PluginStats::add(&self.stats.errors, 1);
            let FlushError::Retry(msg) = &err;
            let exhausted = self.cfg.retry_max_times.is_some_and(|m| attempt >= m)
                || started.elapsed() >= self.cfg.retry_timeout.0;
            if exhausted {
                tracing::error!(output = %self.name, chunk = %chunk.id_hex(), tag = %chunk.tag,
                    events = chunk.count, retries = attempt, error = %msg, "giving up on chunk");
                self.to_secondary(chunk).await;
                return;
            }
            let wait = self.cfg.backoff(attempt);
            attempt += 1;
            PluginStats::add(&self.stats.retries, 1);
            tracing::warn!(output = %self.name, chunk = %chunk.id_hex(), retry = attempt,
                wait_ms = wait.as_millis() as u64, error = %msg, "flush failed; will retry");
            tokio::time::sleep(wait).await;
        }
    }

    async fn to_secondary(&self, chunk: &Chunk) {
        if let Some((out, stats)) = &self.secondary {
            // The secondary gets a few quick tries of its own.
            for attempt in 0..3u32 {
                match out.write(chunk).await {
                    Ok(()) => {
                        PluginStats::add(&self.stats.to_secondary, chunk.count as u64);
                        PluginStats::add(&stats.events_in, chunk.count as u64);
                        PluginStats::add(&stats.events_out, chunk.count as u64);
                        return;
                    }
                    Err(e) => {
                        PluginStats::add(&stats.errors, 1);
                        tracing::error!(output = %stats.name, chunk = %chunk.id_hex(), attempt, error = %e, "secondary output failed");
                        tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
                    }
                }
            }
        }
        PluginStats::add(&self.stats.lost, chunk.count as u64);
        tracing::error!(output = %self.name, chunk = %chunk.id_hex(), events = chunk.count,
            "chunk discarded: retries exhausted and no secondary output took it");
    }

    /// Starts the flush workers and the interval timer.
    pub fn start(self: &Arc<Self>) -> Vec<JoinHandle<()>> {
        let mut tasks = Vec::new();
        for _ in 0..self.cfg.flush_thread_count.max(1) {
            let b = self.clone();
            tasks.push(tokio::spawn(async move {
                while let Some(chunk) = b.next_chunk().await {
                    b.deliver(&chunk).await;
                    b.commit(&chunk);
                }
            }));
        }
        let b = self.clone();
        let tick =
            (self.cfg.flush_interval.0 / 4).clamp(Duration::from_millis(5), Duration::from_secs(1));
        tokio::spawn(async move {
            let mut iv = tokio::time::interval(tick);
            iv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                iv.tick().await;
                if b.state.lock().expect("buffer state").closing {
                    break;
                }
                b.enqueue_due(false);
            }
        });
        tasks
    }

    /// Stops taking events and queues everything staged; the workers exit
    /// once the queue is empty.
    pub fn close(&self) {
        let mut st = self.state.lock().expect("buffer state");
        st.closing = true;
        let tags: Vec<Arc<str>> = st.staged.keys().cloned().collect();
        for k in tags {
            self.close_staged(&mut st, &k);
        }
        drop(st);
        self.queued.notify_waiters();
        self.space.notify_waiters();
    }

    /// Events still held (staged, queued or in flight).
    pub fn held_bytes(&self) -> usize {
        self.state.lock().expect("buffer state").bytes
    }
}
