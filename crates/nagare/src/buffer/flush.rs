//! The flush workers: each takes the next queued chunk, writes it to the
//! output with retries and backoff, and commits it (frees its bytes and its
//! file, answers the inputs waiting for its delivery).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nagare_core::metrics::PluginStats;
use nagare_core::output::FlushError;
use tokio::task::JoinHandle;

use super::{Buffer, Chunk, Queued};

impl Buffer {
    /// Starts the flush workers and the interval timer.
    pub fn start(self: &Arc<Self>) -> Vec<JoinHandle<()>> {
        let mut tasks = Vec::new();
        for _ in 0..self.cfg.flush_thread_count.max(1) {
            let b = self.clone();
            tasks.push(tokio::spawn(async move {
                while let Some(q) = b.next_chunk().await {
                    let events = q.chunk.count as u64;
                    b.in_flight.fetch_add(events, Relaxed);
                    if b.giving_up() {
                        b.keep_at_shutdown(q, None).await;
                    } else if let Some(q) = b.read_back(q).await {
                        match b.deliver(&q.chunk).await {
                            Delivery::Done { all_written } => b.commit(&q, all_written),
                            Delivery::Stopped { left } => b.keep_at_shutdown(q, left).await,
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

    async fn next_chunk(&self) -> Option<Queued> {
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
    pub(super) fn commit(&self, q: &Queued, delivered: bool) {
        self.free_file(q.slot.clone());
        self.forget(q, delivered);
    }

    /// Answers the inputs waiting for a chunk and frees its memory (its
    /// file, if any, is the caller's business).
    fn forget(&self, q: &Queued, delivered: bool) {
        let mut st = self.state.lock().expect("buffer state");
        for w in st.waiters.remove(&q.chunk.id).unwrap_or_default() {
            let _ = w.send(delivered);
        }
        st.kept.remove(&q.chunk.id);
        st.bytes -= q.held;
        self.stats.buffer_bytes.store(st.bytes as u64, Relaxed);
        self.stats.buffer_chunks.fetch_sub(1, Relaxed);
        drop(st);
        self.space.notify_waiters();
    }

    /// Where a chunk goes when shutdown gave up waiting for its output: a
    /// file buffer's chunk stays in its file (sent after the next start,
    /// whole: outputs that give events ids overwrite what a partial write
    /// stored); a memory buffer's unwritten entries (`left`, else the whole
    /// chunk) go to the secondary, else to a dead-letter file.
    async fn keep_at_shutdown(&self, q: Queued, left: Option<Chunk>) {
        let chunk = &q.chunk;
        if q.slot.is_some() {
            PluginStats::add(&self.shutdown.kept_on_disk, chunk.count as u64);
            // The file is not freed: recovery at the next start queues it.
            self.forget(&q, false);
            return;
        }
        let unwritten = left.as_ref().unwrap_or(chunk);
        let events = unwritten.count as u64;
        let handed_over = self.try_secondary(unwritten).await
            || self.dead_letters().is_some_and(|dir| {
                self.to_dead_letters(unwritten, &dir, "undelivered at shutdown", &[])
            });
        if handed_over {
            PluginStats::add(&self.shutdown.handed_over, events);
        } else {
            PluginStats::add(&self.shutdown.lost, events);
            PluginStats::add(&self.stats.lost, events);
            tracing::error!(output = %self.name, chunk = %chunk.id_hex(), events,
                "undelivered at shutdown and nowhere to keep it: lost");
        }
        self.forget(&q, false);
    }

    /// Writes one chunk, retrying with backoff; after the retry limit, or at
    /// once on an error that a retry cannot fix, the chunk goes to the
    /// secondary output. After a partial write only the entries left are
    /// sent again (as a part of the chunk: same id, same positions), and
    /// those refused for good go to the secondary output at once.
    async fn deliver(&self, whole: &Chunk) -> Delivery {
        let started = Instant::now();
        let mut attempt: u32 = 0;
        // The entries still to write after a partial write (None: all).
        let mut left: Option<Chunk> = None;
        let mut all_written = true;
        loop {
            let stop = self.give_up_now.notified();
            tokio::pin!(stop);
            stop.as_mut().enable();
            if self.giving_up() {
                return Delivery::Stopped { left };
            }
            let chunk = left.as_ref().unwrap_or(whole);
            let output = self.output();
            let written = tokio::select! {
                r = output.write(chunk) => r,
                _ = &mut stop => return Delivery::Stopped { left },
            };
            PluginStats::add(&self.stats.errors, u64::from(written.is_err()));
            let msg = match written {
                Ok(()) => {
                    self.count_written(chunk, chunk.count);
                    return Delivery::Done { all_written };
                }
                Err(FlushError::Permanent(msg)) => {
                    PluginStats::add(&self.stats.permanent_errors, 1);
                    tracing::error!(output = %self.name, chunk = %chunk.id_hex(), tag = %chunk.tag,
                        events = chunk.count, error = %msg,
                        "giving up on chunk: a retry cannot fix this error");
                    self.to_secondary(chunk).await;
                    return Delivery::Done { all_written: false };
                }
                Err(FlushError::Retry(msg)) => msg,
                Err(FlushError::Partial(p)) => {
                    let mut retry = p.retry;
                    retry.sort_unstable();
                    retry.dedup();
                    let undone = retry.len() + p.rejected.len();
                    self.count_written(chunk, chunk.count.saturating_sub(undone as u32));
                    if !p.rejected.is_empty() {
                        all_written = false;
                        self.refuse(chunk, &p.rejected).await;
                    }
                    if retry.is_empty() {
                        return Delivery::Done { all_written };
                    }
                    left = Some(chunk.select(&retry));
                    p.message
                }
            };
            let chunk = left.as_ref().unwrap_or(whole);
            let exhausted = self.cfg.retry_max_times.is_some_and(|m| attempt >= m)
                || started.elapsed() >= self.cfg.retry_timeout.0;
            if exhausted {
                tracing::error!(output = %self.name, chunk = %chunk.id_hex(), tag = %chunk.tag,
                    events = chunk.count, retries = attempt, error = %msg, "giving up on chunk");
                self.to_secondary(chunk).await;
                return Delivery::Done { all_written: false };
            }
            let wait = self.cfg.backoff(attempt);
            attempt += 1;
            PluginStats::add(&self.stats.retries, 1);
            tracing::warn!(output = %self.name, chunk = %chunk.id_hex(), retry = attempt,
                events = chunk.count, wait_ms = wait.as_millis() as u64, error = %msg,
                "flush failed; will retry");
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = &mut stop => return Delivery::Stopped { left },
            }
        }
    }

    /// Counts `events` of `chunk` delivered (bytes in proportion).
    fn count_written(&self, chunk: &Chunk, events: u32) {
        PluginStats::add(&self.stats.events_out, events as u64);
        let bytes = chunk.len as u64 * events as u64 / (chunk.count.max(1) as u64);
        PluginStats::add(&self.stats.bytes_out, bytes);
    }
}

/// How `deliver` ended.
enum Delivery {
    /// The output took every entry (`all_written`), or some or all went
    /// to the secondary output or dead letters.
    Done { all_written: bool },
    /// Shutdown gave up waiting; `left`: the entries still unwritten
    /// after a partial write (None: the whole chunk).
    Stopped { left: Option<Chunk> },
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use async_trait::async_trait;
    use nagare_core::metrics::PluginStats;
    use nagare_core::output::{FlushError, Output, PartialWrite};
    use nagare_core::units::Dur;

    use super::super::testing::append_chunk;
    use super::super::{Buffer, BufferConfig, Chunk};

    /// Takes entries whose number ([n, {}]) is a multiple of 3 at the
    /// first write; refuses n % 3 == 2 for good; asks for n % 3 == 1 again,
    /// and takes them at the second write.
    #[derive(Default)]
    struct Picky {
        writes: Mutex<Vec<Chunk>>,
        calls: AtomicU32,
    }

    #[async_trait]
    impl Output for Picky {
        async fn write(&self, chunk: &Chunk) -> Result<(), FlushError> {
            self.writes.lock().unwrap().push(chunk.clone());
            if self.calls.fetch_add(1, SeqCst) > 0 {
                return Ok(());
            }
            let mut p = PartialWrite {
                message: "429 for some".into(),
                ..PartialWrite::default()
            };
            for (i, entry) in chunk.raw_entries().enumerate() {
                match entry[1] % 3 {
                    1 => p.retry.push(i as u32),
                    2 => p.rejected.push((
                        i as u32,
                        format!("mapper_parsing_exception: n={}", entry[1]),
                    )),
                    _ => {}
                }
            }
            Err(FlushError::Partial(p))
        }
    }

    fn numbers(c: &Chunk) -> Vec<u8> {
        c.raw_entries().map(|e| e[1]).collect()
    }

    #[tokio::test]
    async fn a_partial_write_retries_only_the_entries_left_and_refuses_the_rest() {
        let dl = tempfile::tempdir().unwrap();
        let out = Arc::new(Picky::default());
        let cfg = BufferConfig {
            chunk_limit_records: Some(10),
            retry_wait: Dur(Duration::from_millis(1)),
            ..BufferConfig::default()
        };
        let stats = Arc::new(PluginStats::default());
        let b = Buffer::new("picky", cfg, stats.clone(), out.clone(), None, None);
        b.set_dead_letter_dir(dl.path().to_path_buf());
        append_chunk(&b, 0).await;
        super::super::testing::drain(&b).await;

        let writes = out.writes.lock().unwrap();
        assert_eq!(writes.len(), 2, "the whole chunk, then the part left");
        assert_eq!(numbers(&writes[0]), (0..10).collect::<Vec<u8>>());
        assert_eq!(numbers(&writes[1]), vec![1, 4, 7]);
        let part = &writes[1];
        assert_eq!(part.id, writes[0].id, "a part keeps its chunk's id");
        let positions: Vec<u32> = (0..part.count).map(|i| part.position(i)).collect();
        assert_eq!(positions, vec![1, 4, 7], "and its entries' positions");

        assert_eq!(PluginStats::get(&stats.events_out), 7);
        assert_eq!(PluginStats::get(&stats.to_secondary), 3);
        assert_eq!(PluginStats::get(&stats.lost), 0);
        assert_eq!(
            stats.refused(),
            vec![("mapper_parsing_exception".to_string(), 3)]
        );

        // The refused entries are a dead-letter chunk with their reasons.
        let dir = dl.path().join("picky");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert_eq!(files.len(), 2, "{files:?}");
        let chunk_file = files
            .iter()
            .find(|p| p.extension().unwrap() == "chunk")
            .unwrap();
        let r = super::super::recovery::read_chunk_file(chunk_file)
            .unwrap()
            .unwrap();
        assert_eq!(r.count, 3);
        assert_eq!(
            r.data.as_ref(),
            [0x92, 2, 0x80, 0x92, 5, 0x80, 0x92, 8, 0x80]
        );
        let reasons = std::fs::read_to_string(chunk_file.with_extension("reasons")).unwrap();
        assert_eq!(
            reasons,
            "2\tmapper_parsing_exception: n=2\n5\tmapper_parsing_exception: n=5\n8\tmapper_parsing_exception: n=8\n"
        );
    }

    /// An output that refuses everything for good.
    struct Refuse;

    #[async_trait]
    impl Output for Refuse {
        async fn write(&self, _: &Chunk) -> Result<(), FlushError> {
            Err(FlushError::Permanent("400 bad request".into()))
        }
    }

    #[tokio::test]
    async fn a_memory_buffer_without_secondary_keeps_what_its_output_gave_up_on() {
        let dl = tempfile::tempdir().unwrap();
        let cfg = BufferConfig {
            chunk_limit_records: Some(10),
            ..BufferConfig::default()
        };
        let stats = Arc::new(PluginStats::default());
        let b = Buffer::new("refused", cfg, stats.clone(), Arc::new(Refuse), None, None);
        b.set_dead_letter_dir(dl.path().to_path_buf());
        let sent = append_chunk(&b, 0).await;
        super::super::testing::drain(&b).await;
        assert_eq!(PluginStats::get(&stats.lost), 0);
        assert_eq!(PluginStats::get(&stats.to_secondary), 10);
        let files: Vec<_> = std::fs::read_dir(dl.path().join("refused"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(files.len(), 1);
        let r = super::super::recovery::read_chunk_file(&files[0])
            .unwrap()
            .unwrap();
        assert_eq!((r.count, r.data.as_ref()), (10, sent.as_slice()));
    }
}
