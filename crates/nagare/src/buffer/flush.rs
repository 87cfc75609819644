//! The flush workers: each takes the next queued chunk, writes it to the
//! output with retries and backoff, and commits it (frees its bytes and its
//! file, answers the inputs waiting for its delivery).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nagare_core::metrics::PluginStats;
use nagare_core::output::FlushError;
use tokio::task::JoinHandle;

use super::{Buffer, Chunk};

impl Buffer {
    /// Starts the flush workers and the interval timer.
    pub fn start(self: &Arc<Self>) -> Vec<JoinHandle<()>> {
        let mut tasks = Vec::new();
        for _ in 0..self.cfg.flush_thread_count.max(1) {
            let b = self.clone();
            tasks.push(tokio::spawn(async move {
                while let Some(chunk) = b.next_chunk().await {
                    let events = chunk.count as u64;
                    b.in_flight.fetch_add(events, Relaxed);
                    if b.giving_up() {
                        b.keep_at_shutdown(chunk).await;
                    } else if let Some(chunk) = b.read_back(chunk).await {
                        match b.deliver(&chunk).await {
                            Some(delivered) => b.commit(&chunk, delivered),
                            None => b.keep_at_shutdown(chunk).await,
                        }
                    }
                    b.in_flight.fetch_sub(events, Relaxed);
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
        self.free_file(super::slot_of(chunk));
        self.forget(chunk, delivered);
    }

    /// Answers the inputs waiting for a chunk and frees its memory (its
    /// file, if any, is the caller's business).
    fn forget(&self, chunk: &Chunk, delivered: bool) {
        let mut st = self.state.lock().expect("buffer state");
        for w in st.waiters.remove(&chunk.id).unwrap_or_default() {
            let _ = w.send(delivered);
        }
        st.kept.remove(&chunk.id);
        st.bytes -= chunk.held;
        self.stats.buffer_bytes.store(st.bytes as u64, Relaxed);
        self.stats.buffer_chunks.fetch_sub(1, Relaxed);
        drop(st);
        self.space.notify_waiters();
    }

    /// Where a chunk goes when shutdown gave up waiting for its output: a
    /// file buffer's chunk stays in its file (sent after the next start);
    /// a memory buffer's goes to the secondary, else to a dead-letter file.
    async fn keep_at_shutdown(&self, chunk: Chunk) {
        let events = chunk.count as u64;
        if chunk.file.is_some() {
            PluginStats::add(&self.shutdown.kept_on_disk, events);
            // The file is not freed: recovery at the next start queues it.
            self.forget(&chunk, false);
            return;
        }
        let handed_over = self.try_secondary(&chunk).await
            || match self.shutdown_dead_letters.get() {
                Some(dir) => {
                    self.to_dead_letters(&chunk, &dir.join(&self.name), "undelivered at shutdown")
                }
                None => false,
            };
        if handed_over {
            PluginStats::add(&self.shutdown.handed_over, events);
        } else {
            PluginStats::add(&self.shutdown.lost, events);
            PluginStats::add(&self.stats.lost, events);
            tracing::error!(output = %self.name, chunk = %chunk.id_hex(), events,
                "undelivered at shutdown and nowhere to keep it: lost");
        }
        self.forget(&chunk, false);
    }

    /// Writes one chunk, retrying with backoff; after the retry limit, or at
    /// once on an error that a retry cannot fix, the chunk goes to the
    /// secondary output.
    /// Returns whether the output itself took the chunk; `None` when
    /// shutdown gave up waiting (`give_up`) before either happened.
    async fn deliver(&self, chunk: &Chunk) -> Option<bool> {
        let started = Instant::now();
        let mut attempt: u32 = 0;
        loop {
            let stop = self.give_up_now.notified();
            tokio::pin!(stop);
            stop.as_mut().enable();
            if self.giving_up() {
                return None;
            }
            let output = self.output();
            let written = tokio::select! {
                r = output.write(chunk) => r,
                _ = &mut stop => return None,
            };
            let err = match written {
                Ok(()) => {
                    PluginStats::add(&self.stats.events_out, chunk.count as u64);
                    PluginStats::add(&self.stats.bytes_out, chunk.len as u64);
                    return Some(true);
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
                    return Some(false);
                }
            };
            let exhausted = self.cfg.retry_max_times.is_some_and(|m| attempt >= m)
                || started.elapsed() >= self.cfg.retry_timeout.0;
            if exhausted {
                tracing::error!(output = %self.name, chunk = %chunk.id_hex(), tag = %chunk.tag,
                    events = chunk.count, retries = attempt, error = %msg, "giving up on chunk");
                self.to_secondary(chunk).await;
                return Some(false);
            }
            let wait = self.cfg.backoff(attempt);
            attempt += 1;
            PluginStats::add(&self.stats.retries, 1);
            tracing::warn!(output = %self.name, chunk = %chunk.id_hex(), retry = attempt,
                wait_ms = wait.as_millis() as u64, error = %msg, "flush failed; will retry");
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = &mut stop => return None,
            }
        }
    }
}
