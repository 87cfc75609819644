//! The flush workers: each takes the next queued chunk, writes it to the
//! output with retries and backoff, and commits it (frees its bytes and its
//! file, answers the inputs waiting for its delivery).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use super::{Buffer, Chunk};
use crate::outputs::FlushError;
use crate::stats::PluginStats;

impl Buffer {
    /// Starts the flush workers and the interval timer.
    pub fn start(self: &Arc<Self>) -> Vec<JoinHandle<()>> {
        let mut tasks = Vec::new();
        for _ in 0..self.cfg.flush_thread_count.max(1) {
            let b = self.clone();
            tasks.push(tokio::spawn(async move {
                while let Some(chunk) = b.next_chunk().await {
                    let Some(chunk) = b.read_back(chunk).await else {
                        continue;
                    };
                    let delivered = b.deliver(&chunk).await;
                    b.commit(&chunk, delivered);
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

    /// Frees a chunk that was delivered or given up on.
    pub(super) fn commit(&self, chunk: &Chunk, delivered: bool) {
        self.free_file(chunk.file.clone());
        let mut st = self.state.lock().expect("buffer state");
        for w in st.waiters.remove(&chunk.id).unwrap_or_default() {
            let _ = w.send(delivered);
        }
        st.bytes -= chunk.held;
        self.stats.buffer_bytes.store(st.bytes as u64, Relaxed);
        self.stats.buffer_chunks.fetch_sub(1, Relaxed);
        drop(st);
        self.space.notify_waiters();
    }

    /// Writes one chunk, retrying with backoff; after the retry limit, or at
    /// once on an error that a retry cannot fix, the chunk goes to the
    /// secondary output.
    /// Returns whether the output itself took the chunk.
    async fn deliver(&self, chunk: &Chunk) -> bool {
        let started = Instant::now();
        let mut attempt: u32 = 0;
        loop {
            let err = match self.output.write(chunk).await {
                Ok(()) => {
                    PluginStats::add(&self.stats.events_out, chunk.count as u64);
                    PluginStats::add(&self.stats.bytes_out, chunk.len as u64);
                    return true;
                }
                Err(e) => e,
            };
            PluginStats::add(&self.stats.errors, 1);
            let msg = match &err {
                FlushError::Retry(msg) => msg,
                FlushError::Permanent(msg) => {
                    PluginStats::add(&self.stats.permanent_errors, 1);
                    tracing::error!(output = %self.name, chunk = %chunk.id_hex(), tag = %chunk.tag,
                        events = chunk.count, error = %msg,
                        "giving up on chunk: a retry cannot fix this error");
                    self.to_secondary(chunk).await;
                    return false;
                }
            };
            let exhausted = self.cfg.retry_max_times.is_some_and(|m| attempt >= m)
                || started.elapsed() >= self.cfg.retry_timeout.0;
            if exhausted {
                tracing::error!(output = %self.name, chunk = %chunk.id_hex(), tag = %chunk.tag,
                    events = chunk.count, retries = attempt, error = %msg, "giving up on chunk");
                self.to_secondary(chunk).await;
                return false;
            }
            let wait = self.cfg.backoff(attempt);
            attempt += 1;
            PluginStats::add(&self.stats.retries, 1);
            tracing::warn!(output = %self.name, chunk = %chunk.id_hex(), retry = attempt,
                wait_ms = wait.as_millis() as u64, error = %msg, "flush failed; will retry");
            tokio::time::sleep(wait).await;
        }
    }
}
