//! Taking batches in: staging them into chunks, the limits
//! (`chunk_limit_*`, `total_limit_size`) and the overflow actions, and the
//! fsync a file buffer owes an acked batch.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, TryLockError};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::oneshot;

use super::chunk::{split_batch, Chunk, Staging, COPY_APART_THRESHOLD, SHARE_THRESHOLD};
use super::chunk_file::{FileStore, SyncTicket};
use super::paging::keep_on_disk_if_over;
use super::{Buffer, Origin, OverflowAction, Queued, State, SyncMode};

/// What staging a batch gave: the chunk files to sync for it, and the ids
/// of the chunks it went into.
type Staged = (Vec<SyncTicket>, Vec<[u8; 16]>);

/// Where the chunks a batch goes into get their ids.
#[derive(Clone, Copy)]
enum ChunkIds<'a> {
    /// The tag's staged chunk, or a new one with a fresh id.
    Fresh,
    /// Chunks of their own, with ids derived from the sender's (`append_kept`).
    Derived(Origin<'a>),
}
use nagare_core::metrics::PluginStats;

/// Why an append was refused.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    #[error("buffer of {0} is full (overflow_action = \"throw\")")]
    Full(String),
    #[error("buffer of {0} is shutting down")]
    Closed(String),
    #[error("buffer of {0} cannot write to disk: {1}")]
    Disk(String, String),
}

/// Milliseconds since the Unix epoch (an atomic can hold it, unlike Instant).
fn unix_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Buffer {
    /// Appends a batch: `parts` are PackedForward entries holding `count`
    /// events in total. Waits while the buffer is full and the overflow
    /// action is `block`.
    ///
    /// With a file buffer the batch is written to its chunk file first; when
    /// `durable` (the sender waits for an ack) or `sync = "always"`, the file
    /// is fsync'd before this returns.
    ///
    /// With `delivery`, the returned receivers (one per chunk the batch went
    /// into) resolve once that chunk was delivered (true) or given up on (false).
    ///
    /// Parts shorter than `SHARE_THRESHOLD` are copied into the chunk; longer
    /// ones are kept as they are, with the allocation they are a slice of,
    /// and counted at their length: an input hands them over only in
    /// allocations of about their own size (the forward input reads a big
    /// frame into an allocation of its own), or memory would pass
    /// `total_limit_size` unseen. Batches from `COPY_APART_THRESHOLD` up are
    /// copied before the lock is taken (see `copy_apart`).
    pub async fn append(
        &self,
        tag: &str,
        parts: &[Bytes],
        count: u32,
        durable: bool,
        delivery: bool,
        ids: &[Bytes],
    ) -> Result<Vec<oneshot::Receiver<bool>>, AppendError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let apart = self.copy_apart(parts, len, count);
        let (parts, share_from) = match &apart {
            Some(copy) => (std::slice::from_ref(copy), COPY_APART_THRESHOLD),
            None => (parts, SHARE_THRESHOLD),
        };
        self.append_with(count, len, durable, delivery, |st| {
            let fresh = ChunkIds::Fresh;
            self.append_pieces(st, tag, parts, count, len, ids, fresh, share_from)
        })
        .await
    }

    /// Appends a sender's chunk kept whole (see `Origin`): into chunks of
    /// its own, queued at once, with ids derived from the sender's. A piece
    /// whose chunk is still queued or being flushed (the sender resent it
    /// before its ack came) is not stored again; with `delivery`, its
    /// receiver resolves when that chunk is delivered. The sender waits for
    /// an ack, so a file buffer fsyncs as for any acked batch.
    pub async fn append_kept(
        &self,
        tag: &str,
        parts: &[Bytes],
        count: u32,
        delivery: bool,
        origin: Origin<'_>,
    ) -> Result<Vec<oneshot::Receiver<bool>>, AppendError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let sender = [Bytes::copy_from_slice(origin.id)];
        let apart = self.copy_apart(parts, len, count);
        let (parts, share_from) = match &apart {
            Some(copy) => (std::slice::from_ref(copy), COPY_APART_THRESHOLD),
            None => (parts, SHARE_THRESHOLD),
        };
        self.append_with(count, len, true, delivery, |st| {
            let ids = ChunkIds::Derived(origin);
            self.append_pieces(st, tag, parts, count, len, &sender, ids, share_from)
        })
        .await
    }

    /// A batch of `COPY_APART_THRESHOLD` up to `SHARE_THRESHOLD` bytes that
    /// fits in one chunk, copied into an allocation of its own size, before
    /// the buffer's lock is taken, when another task holds that lock now:
    /// connections copy in parallel, and the staged chunk takes the copy as
    /// a segment under the lock. While the lock is free (one busy
    /// connection, or few) the batch is copied under it as smaller ones are:
    /// one copy either way, but no allocation per batch and no chunk of
    /// many segments, which cost a relay of one connection about 5% (100 B
    /// events, session 18). Bigger parts are shared; a batch cut over
    /// several chunks keeps the old way, as its pieces would share one
    /// allocation.
    fn copy_apart(&self, parts: &[Bytes], len: usize, count: u32) -> Option<Bytes> {
        let fits = len <= self.cfg.chunk_limit_size.0 as usize
            && count <= self.cfg.chunk_limit_records.unwrap_or(u32::MAX);
        if !fits || !(COPY_APART_THRESHOLD..SHARE_THRESHOLD).contains(&len) {
            return None;
        }
        // Only a hint (the lock may be taken or freed right after), which
        // decides where the copy is made, never what the chunk holds.
        let busy = matches!(self.state.try_lock(), Err(TryLockError::WouldBlock));
        #[cfg(test)]
        let busy = busy || tests::LOCK_SEEN_BUSY.with(|b| b.get());
        if !busy {
            return None;
        }
        let mut copy = Vec::with_capacity(len);
        parts.iter().for_each(|p| copy.extend_from_slice(p));
        Some(Bytes::from(copy))
    }

    /// The limits, overflow actions, delivery waiters and fsync around
    /// `stage`, which puts a batch of `count` events and `len` bytes into
    /// chunks and returns the files to sync and the chunks' ids.
    async fn append_with(
        &self,
        count: u32,
        len: usize,
        durable: bool,
        delivery: bool,
        mut stage: impl FnMut(&mut State) -> Result<Staged, AppendError>,
    ) -> Result<Vec<oneshot::Receiver<bool>>, AppendError> {
        let mut disk_wait = false;
        loop {
            let space = self.space.notified();
            tokio::pin!(space);
            // The lock must be gone before any await: decide inside, act after.
            let staged = {
                let mut st = self.state.lock().expect("buffer state");
                if st.closing {
                    return Err(AppendError::Closed(self.name.clone()));
                }
                // A batch larger than the whole limit is let in when the buffer is
                // empty, or it could never be accepted. `bytes` is the memory
                // the chunks hold (more than their payload while a staged
                // chunk's copy allocation has room left), so the buffer may
                // pass the limit by one such allocation.
                let over = st.bytes > 0 && st.bytes + len > self.cfg.total_limit_size.0 as usize;
                if !over {
                    match stage(&mut st) {
                        Ok((files, ids)) => {
                            let rx = if delivery {
                                ids.iter()
                                    .map(|id| self.wait_delivery(&mut st, *id))
                                    .collect()
                            } else {
                                Vec::new()
                            };
                            Some((files, rx))
                        }
                        // Disk full or unwritable: "block" waits for space (delivered
                        // chunks free theirs), "throw" and "drop_oldest_chunk" refuse.
                        Err(AppendError::Disk(..))
                            if self.cfg.overflow_action == OverflowAction::Block =>
                        {
                            disk_wait = true;
                            None
                        }
                        Err(e) => return Err(e),
                    }
                } else {
                    match self.cfg.overflow_action {
                        OverflowAction::Block => {
                            space.as_mut().enable();
                        }
                        OverflowAction::Throw => {
                            PluginStats::add(&self.stats.rejected, count as u64);
                            return Err(AppendError::Full(self.name.clone()));
                        }
                        OverflowAction::DropOldestChunk => {
                            if self.drop_oldest(&mut st) {
                                continue;
                            }
                            // Nothing queued to drop (all in flight): wait instead.
                            space.as_mut().enable();
                        }
                    }
                    None
                }
            };
            match staged {
                Some((file, rx)) => return self.sync(file, durable).await.map(|()| rx),
                None if disk_wait => {
                    disk_wait = false;
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                None => space.await,
            }
        }
    }

    /// Whether `append` would take a batch of `len` bytes now, without
    /// waiting for space or refusing it (the buffer is not full, or makes
    /// room by dropping old chunks). For inputs whose protocol answers
    /// "try later" instead of holding the sender (scribe's TRY_LATER). Only
    /// a hint: another input may fill the buffer before the append.
    pub fn has_room(&self, len: usize) -> bool {
        let st = self.state.lock().expect("buffer state");
        !st.closing
            && (st.bytes == 0
                || st.bytes + len <= self.cfg.total_limit_size.0 as usize
                || self.cfg.overflow_action == OverflowAction::DropOldestChunk)
    }

    /// Waits until `has_room(len)`, or `deadline`, or the buffer closes;
    /// returns whether there is room. For inputs that hold a caller briefly
    /// before answering "try later" (scribe's `wait_for_room`): a chunk
    /// delivered meanwhile lets the call in, and a Scribe client does not
    /// back off for a moment's full buffer.
    pub async fn wait_room(&self, len: usize, deadline: tokio::time::Instant) -> bool {
        loop {
            let space = self.space.notified();
            tokio::pin!(space);
            // Registered before the check, so a free between the two wakes us.
            space.as_mut().enable();
            if self.has_room(len) {
                return true;
            }
            if self.state.lock().expect("buffer state").closing
                || tokio::time::timeout_at(deadline, space).await.is_err()
            {
                return self.has_room(len);
            }
        }
    }

    /// `overflow_action = "drop_oldest_chunk"`: drops the oldest queued
    /// chunk; false when none is queued.
    fn drop_oldest(&self, st: &mut State) -> bool {
        let Some(old) = st.queue.pop_front() else {
            return false;
        };
        st.bytes -= old.held;
        self.free_file(old.slot);
        let old = old.chunk;
        if old.on_disk_only() {
            st.disk_only -= old.len;
            self.show_disk_only(st);
        }
        for w in st.waiters.remove(&old.id).unwrap_or_default() {
            let _ = w.send(false);
        }
        st.kept.remove(&old.id);
        PluginStats::add(&self.stats.dropped, old.count as u64);
        self.stats.buffer_chunks.fetch_sub(1, Relaxed);
        tracing::warn!(output = %self.name, events = old.count, tag = %old.tag,
            "buffer full: dropped the oldest chunk (overflow_action = drop_oldest_chunk)");
        true
    }

    /// Stages a batch; returns the chunk file's handle when it may need an
    /// fsync, and the id of the chunk the batch went into. A chunk this
    /// starts gets `new_id`, or a fresh id. Parts of `share_from` bytes or
    /// more are shared, not copied (`Staging::push`).
    #[allow(clippy::too_many_arguments)]
    fn append_locked(
        &self,
        st: &mut State,
        tag: &str,
        parts: &[Bytes],
        count: u32,
        len: usize,
        ids: &[Bytes],
        new_id: Option<[u8; 16]>,
        share_from: usize,
    ) -> Result<(Option<SyncTicket>, [u8; 16]), AppendError> {
        let limit = self.cfg.chunk_limit_size.0 as usize;
        let rec_limit = self.cfg.chunk_limit_records.unwrap_or(u32::MAX);
        let key: Arc<str> = match st.staged.get_key_value(tag) {
            Some((k, s)) if s.count > 0 && (s.len + len > limit || s.count + count > rec_limit) => {
                let k = k.clone();
                self.close_staged(st, &k);
                k
            }
            Some((k, _)) => k.clone(),
            None => Arc::from(tag),
        };
        if !st.staged.contains_key(&key) {
            let id = new_id.unwrap_or_else(|| self.new_id());
            let file = match &self.store {
                Some(store) => Some(
                    store
                        .create(&id, &key)
                        .map_err(|e| self.disk_error(store, e))?,
                ),
                None => None,
            };
            st.staged.insert(key.clone(), Staging::new(id, file));
        }
        let s = st.staged.get_mut(&key).expect("staged chunk");
        let mut handle = None;
        if let Some(f) = &mut s.file {
            let store = self.store.as_ref().expect("file buffer");
            f.append(parts, count, ids)
                .map_err(|e| self.disk_error(store, e))?;
            handle = Some(f.ticket());
        }
        let before = s.held;
        parts.iter().for_each(|p| s.push(p, limit, share_from));
        s.count += count;
        let full = s.len >= limit || s.count >= rec_limit;
        // `held` may have gone down (see `Staging::push`); `bytes` includes
        // what it was.
        st.bytes = st.bytes - before + s.held;
        self.stats.buffer_bytes.store(st.bytes as u64, Relaxed);
        PluginStats::add(&self.stats.events_in, count as u64);
        PluginStats::add(&self.stats.bytes_in, len as u64);
        let id = s.id;
        if full {
            self.close_staged(st, &key);
        }
        Ok((handle, id))
    }

    /// Appends a batch, split at entry boundaries when it is bigger than a
    /// whole chunk may be; returns the chunk files to sync and the ids of
    /// the chunks the batch went into.
    ///
    /// With `ChunkIds::Derived` (a sender's chunk kept whole) each piece is
    /// a chunk of its own with its derived id, queued at once, after the
    /// tag's staged chunk (so chunks leave in the order their events came);
    /// a piece whose chunk is still queued or being flushed (the sender
    /// resent it before its ack came) is not stored again.
    #[allow(clippy::too_many_arguments)]
    fn append_pieces(
        &self,
        st: &mut State,
        tag: &str,
        parts: &[Bytes],
        count: u32,
        len: usize,
        sender_ids: &[Bytes],
        chunk_ids: ChunkIds<'_>,
        share_from: usize,
    ) -> Result<Staged, AppendError> {
        let max_len = self.cfg.chunk_limit_size.0 as usize;
        let max_count = self.cfg.chunk_limit_records.unwrap_or(u32::MAX);
        let whole = len <= max_len && count <= max_count;
        if whole && matches!(chunk_ids, ChunkIds::Fresh) {
            let (f, id) =
                self.append_locked(st, tag, parts, count, len, sender_ids, None, share_from)?;
            return Ok((f.into_iter().collect(), vec![id]));
        }
        if let ChunkIds::Derived(_) = chunk_ids {
            self.close_staged(st, tag);
        }
        let pieces = if whole {
            vec![(parts.to_vec(), count)]
        } else {
            split_batch(parts, max_count, max_len)
        };
        let mut ids = Vec::new();
        // Every chunk file the pieces went into must be synced, not just the last.
        let mut files: Vec<SyncTicket> = Vec::new();
        for (i, (piece, n)) in pieces.into_iter().enumerate() {
            let plen = piece.iter().map(|p| p.len()).sum();
            let derived = match chunk_ids {
                ChunkIds::Fresh => None,
                ChunkIds::Derived(origin) => {
                    let id = origin.chunk_id(&self.name, tag, i as u32);
                    if !st.kept.insert(id) {
                        tracing::debug!(output = %self.name, chunk = %hex::encode(id), events = n,
                            "a sender's chunk resent while its first copy is still queued: not stored twice");
                        ids.push(id);
                        continue;
                    }
                    Some(id)
                }
            };
            let appended =
                self.append_locked(st, tag, &piece, n, plen, sender_ids, derived, share_from);
            if let Some(id) = derived {
                // Queued at once; a chunk whose first write failed is freed.
                self.close_staged(st, tag);
                if appended.is_err() {
                    st.kept.remove(&id);
                }
            }
            let (f, id) = appended?;
            if let Some(t) = f {
                match files.iter_mut().find(|x| Arc::ptr_eq(&x.slot, &t.slot)) {
                    Some(x) => x.record = x.record.max(t.record),
                    None => files.push(t),
                }
            }
            if ids.last() != Some(&id) {
                ids.push(id);
            }
        }
        Ok((files, ids))
    }

    /// Closes a tag's staged chunk and queues it for the flush workers.
    pub(super) fn close_staged(&self, st: &mut State, tag: &str) {
        if let Some((tag, s)) = st.staged.remove_entry(tag) {
            if s.count == 0 {
                // Started, but its first write failed: nothing to keep.
                if let Some(f) = s.file {
                    self.free_file(Some(f.slot().clone()));
                }
            } else {
                self.queue_staging(st, tag, s);
            }
        }
    }

    /// Queues a closed chunk for the flush workers.
    fn queue_staging(&self, st: &mut State, tag: Arc<str>, s: Staging) {
        let (id, len, count, staged_held) = (s.id, s.len, s.count, s.held);
        let file = s.file.as_ref().map(|f| f.slot().clone());
        let (segments, held) = s.into_segments();
        // Closing may have copied the last batches into a tighter allocation.
        st.bytes -= staged_held - held;
        self.stats.buffer_bytes.store(st.bytes as u64, Relaxed);
        let mut queued = Queued {
            chunk: Chunk {
                id,
                tag,
                segments,
                len,
                count,
                positions: None,
            },
            held,
            slot: file,
        };
        if self.store.is_some() {
            keep_on_disk_if_over(st, &mut queued, self.cfg.memory_limit_size.0 as usize);
            self.show_disk_only(st);
        }
        st.queue.push_back(queued);
        PluginStats::add(&self.stats.buffer_chunks, 1);
        self.queued.notify_one();
    }

    /// Queues staged chunks older than `flush_interval` (all of them when `all`).
    pub(super) fn enqueue_due(&self, all: bool) {
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

    /// Registers a waiter for the delivery of chunk `id`.
    fn wait_delivery(&self, st: &mut State, id: [u8; 16]) -> oneshot::Receiver<bool> {
        let (tx, rx) = oneshot::channel();
        st.waiters.entry(id).or_default().push(tx);
        rx
    }

    fn disk_error(&self, store: &FileStore, e: std::io::Error) -> AppendError {
        PluginStats::add(&self.stats.errors, 1);
        // While the disk stays full, say so every 10 s, not on every retry.
        let now = unix_millis();
        let last = self.last_disk_log.load(Relaxed);
        if now.saturating_sub(last) >= 10_000
            && self
                .last_disk_log
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_ok()
        {
            let what = if self.cfg.overflow_action == OverflowAction::Block {
                "waiting for space (overflow_action = block); the inputs feeding it are paused"
            } else {
                "batch refused; the sender keeps it"
            };
            tracing::error!(output = %self.name, path = %store.dir().display(), error = %e,
                "cannot write to the buffer directory: {what}");
        }
        AppendError::Disk(self.name.clone(), format!("{}: {e}", store.dir().display()))
    }

    /// Makes a chunk file's new record durable when the policy asks for it.
    async fn sync(&self, files: Vec<SyncTicket>, durable: bool) -> Result<(), AppendError> {
        let wanted = match self.cfg.sync {
            SyncMode::Always => true,
            SyncMode::Ack => durable,
            SyncMode::Never => false,
        };
        if !wanted {
            return Ok(());
        }
        for t in files {
            t.slot
                .sync_to(t.record)
                .await
                .map_err(|e| AppendError::Disk(self.name.clone(), format!("fsync: {e}")))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::chunk::SHARE_THRESHOLD;
    use super::super::testing::{buffer, drain};
    use super::*;
    use crate::buffer::BufferConfig;
    use nagare_core::units::Size;
    use std::cell::Cell;

    thread_local! {
        /// Makes `copy_apart` act as if another task held the buffer's lock
        /// (a test on one thread cannot make that happen at the right moment).
        pub(super) static LOCK_SEEN_BUSY: Cell<bool> = const { Cell::new(false) };
    }

    #[tokio::test]
    async fn big_batches_are_shared_small_ones_copied_together() {
        let (b, out) = buffer(BufferConfig::default());
        let big = Bytes::from(vec![0x90u8; SHARE_THRESHOLD]);
        let small = Bytes::from_static(&[0x90, 0x90]);
        b.append("t", &[small.clone(), small.clone()], 2, false, false, &[])
            .await
            .unwrap();
        b.append("t", std::slice::from_ref(&big), 1, false, false, &[])
            .await
            .unwrap();
        b.append("t", std::slice::from_ref(&small), 1, false, false, &[])
            .await
            .unwrap();
        let tasks = b.start();
        b.close();
        for t in tasks {
            t.await.unwrap();
        }
        let chunks = out.0.lock().unwrap();
        assert_eq!(chunks.len(), 1);
        let c = &chunks[0];
        assert_eq!((c.count, c.len), (4, SHARE_THRESHOLD + 6));
        assert_eq!(c.segments.len(), 3);
        assert_eq!(c.segments[0].len(), 4);
        assert_eq!(
            c.segments[1].as_ptr(),
            big.as_ptr(),
            "the big batch is not copied"
        );
        assert_eq!(c.contiguous().len(), c.len);
    }

    /// Appends a small, a mid-size (two parts) and a small batch of
    /// one-byte entries (empty arrays, then empty maps, so the contents
    /// show the order) with `copy_apart` seeing the lock busy or free;
    /// checks the flushed chunk's contents and that nothing stays held.
    /// Returns the bytes held before the flush, the chunk's segment
    /// lengths and whether a segment is the mid batch's own allocation.
    async fn small_mid_small(busy: bool) -> (usize, Vec<usize>, bool) {
        LOCK_SEEN_BUSY.with(|b| b.set(busy));
        let (b, out) = buffer(BufferConfig::default());
        let small = Bytes::from_static(&[0x90, 0x90]);
        let mid = [
            Bytes::from(vec![0x80u8; COPY_APART_THRESHOLD]),
            Bytes::from(vec![0x80u8; 1000]),
        ];
        let n = (COPY_APART_THRESHOLD + 1000) as u32;
        let small = std::slice::from_ref(&small);
        for (parts, count) in [(small, 2), (&mid[..], n), (small, 2)] {
            b.append("t", parts, count, false, false, &[])
                .await
                .unwrap();
        }
        let held = b.held_bytes();
        drain(&b).await;
        let chunks = out.0.lock().unwrap();
        assert_eq!(chunks.len(), 1);
        let c = &chunks[0];
        assert_eq!(c.count as usize, 4 + COPY_APART_THRESHOLD + 1000);
        let mut want = vec![0x90u8; 2];
        want.extend(std::iter::repeat_n(0x80u8, COPY_APART_THRESHOLD + 1000));
        want.extend([0x90, 0x90]);
        assert_eq!(c.contiguous(), &want[..]);
        assert_eq!(b.held_bytes(), 0);
        let shared = c
            .segments
            .iter()
            .any(|s| s.as_ptr_range().contains(&mid[0].as_ptr()));
        (held, c.segments.iter().map(|s| s.len()).collect(), shared)
    }

    #[tokio::test]
    async fn mid_size_batches_are_copied_apart_in_order_and_counted_at_their_length() {
        let (held, seg_lens, shared) = small_mid_small(true).await;
        // The first run of small batches, sealed by the mid batch (its
        // spare room given back), the mid batch at its length (its copy is an
        // allocation of its own size) and the second run's 4 KiB allocation.
        assert_eq!(held, 2 + COPY_APART_THRESHOLD + 1000 + 4096);
        assert_eq!(seg_lens, vec![2, COPY_APART_THRESHOLD + 1000, 2]);
        assert!(
            !shared,
            "copied, not shared: the input's allocation is not kept"
        );
    }

    #[tokio::test]
    async fn mid_size_batches_are_copied_under_the_lock_while_it_is_free() {
        let (_, seg_lens, shared) = small_mid_small(false).await;
        // All three in the staged chunk's own copy block(s), in order; none
        // is a segment of its own size, none shares the input's allocation.
        assert!(seg_lens.iter().all(|n| *n != COPY_APART_THRESHOLD + 1000));
        assert!(!shared);
    }

    #[tokio::test]
    async fn a_batch_bigger_than_a_chunk_is_split() {
        let (b, out) = buffer(BufferConfig {
            chunk_limit_records: Some(100),
            ..Default::default()
        });
        let entries: Vec<u8> = (0..250u32)
            .flat_map(|i| [0x92, (i % 100) as u8, 0x80])
            .collect();
        b.append("t", &[Bytes::from(entries)], 250, false, false, &[])
            .await
            .unwrap();
        let tasks = b.start();
        b.close();
        for t in tasks {
            t.await.unwrap();
        }
        let counts: Vec<u32> = out.0.lock().unwrap().iter().map(|c| c.count).collect();
        assert_eq!(counts, vec![100, 100, 50]);
    }

    #[tokio::test]
    async fn chunks_close_at_the_size_limit_and_keep_order() {
        let (b, out) = buffer(BufferConfig {
            chunk_limit_size: Size(10),
            ..Default::default()
        });
        let tasks = b.start();
        for i in 0..10u8 {
            b.append("t", &[Bytes::from(vec![i; 4])], 1, false, false, &[])
                .await
                .unwrap();
        }
        b.close();
        for t in tasks {
            t.await.unwrap();
        }
        let chunks = out.0.lock().unwrap();
        let all: Vec<u8> = chunks
            .iter()
            .flat_map(|c| c.contiguous().to_vec())
            .collect();
        let want: Vec<u8> = (0..10u8).flat_map(|i| [i; 4]).collect();
        assert_eq!(all, want);
        assert!(chunks.iter().all(|c| c.len <= 12));
        assert_eq!(b.held_bytes(), 0);
    }

    #[tokio::test]
    async fn the_buffer_counts_the_memory_its_chunks_hold() {
        let (b, _) = buffer(BufferConfig {
            chunk_limit_size: Size(100_000),
            ..Default::default()
        });
        // 1000 empty-array entries of one byte: copied into the chunk.
        let part = || [Bytes::from(vec![0x90u8; 1000])];
        b.append("t", &part(), 1000, false, false, &[])
            .await
            .unwrap();
        assert_eq!(b.held_bytes(), 4096, "the first copy allocation");
        for _ in 0..90 {
            b.append("t", &part(), 1000, false, false, &[])
                .await
                .unwrap();
        }
        // 91,000 bytes: the allocation doubled up to the chunk limit, no further.
        assert_eq!(b.held_bytes(), 100_000);
        // Closed nearly full: kept as it is.
        b.enqueue_due(true);
        assert_eq!(b.held_bytes(), 100_000);
        // 10,000 bytes in a 16 KiB allocation, closed by the interval: copied
        // to an allocation of their size.
        for _ in 0..10 {
            b.append("u", &part(), 1000, false, false, &[])
                .await
                .unwrap();
        }
        assert_eq!(b.held_bytes(), 100_000 + 16_384);
        b.enqueue_due(true);
        assert_eq!(b.held_bytes(), 100_000 + 10_000);
        // A shared batch is counted at its length.
        let big = Bytes::from(vec![0x90u8; SHARE_THRESHOLD]);
        b.append(
            "v",
            std::slice::from_ref(&big),
            SHARE_THRESHOLD as u32,
            false,
            false,
            &[],
        )
        .await
        .unwrap();
        assert_eq!(b.held_bytes(), 110_000 + SHARE_THRESHOLD);
        assert_eq!(
            PluginStats::get(&b.stats.buffer_bytes),
            b.held_bytes() as u64
        );
        drain(&b).await;
        assert_eq!(b.held_bytes(), 0);
    }

    #[tokio::test]
    async fn throw_refuses_when_full_and_drop_oldest_makes_room() {
        let full = |action| BufferConfig {
            total_limit_size: Size(8),
            chunk_limit_size: Size(4),
            overflow_action: action,
            ..Default::default()
        };
        let (b, _) = buffer(full(OverflowAction::Throw));
        b.append("t", &[Bytes::from(vec![1u8; 4])], 1, false, false, &[])
            .await
            .unwrap();
        b.append("t", &[Bytes::from(vec![2u8; 4])], 1, false, false, &[])
            .await
            .unwrap();
        assert!(matches!(
            b.append("t", &[Bytes::from(vec![3u8; 4])], 1, false, false, &[])
                .await,
            Err(AppendError::Full(_))
        ));
        assert_eq!(PluginStats::get(&b.stats.rejected), 1);

        let (b, _) = buffer(full(OverflowAction::DropOldestChunk));
        for i in 0..3u8 {
            b.append("t", &[Bytes::from(vec![i; 4])], 1, false, false, &[])
                .await
                .unwrap();
        }
        assert_eq!(PluginStats::get(&b.stats.dropped), 1);
        assert_eq!(b.held_bytes(), 8);
    }

    #[tokio::test]
    async fn a_shared_batch_after_many_small_ones_gives_their_spare_room_back() {
        let (b, _) = buffer(BufferConfig {
            chunk_limit_size: Size(1 << 20),
            ..Default::default()
        });
        // 65 KiB of small batches: copied into an allocation of 128 KiB.
        for _ in 0..65 {
            b.append(
                "t",
                &[Bytes::from(vec![0x90u8; 1024])],
                1024,
                false,
                false,
                &[],
            )
            .await
            .unwrap();
        }
        assert_eq!(b.held_bytes(), 128 << 10);
        // A shared batch seals them, shrinking their allocation by more
        // than the batch adds: the held bytes go down (this underflowed).
        let big = Bytes::from(vec![0x90u8; SHARE_THRESHOLD]);
        b.append("t", std::slice::from_ref(&big), 1, false, false, &[])
            .await
            .unwrap();
        assert_eq!(b.held_bytes(), (65 << 10) + SHARE_THRESHOLD);
    }

    #[tokio::test]
    async fn a_kept_sender_chunk_is_a_chunk_of_its_own_with_a_derived_id() {
        let (b, out) = buffer(BufferConfig {
            chunk_limit_records: Some(4),
            ..Default::default()
        });
        let e = |i: u8| [0x92, i, 0x80];
        // Events of the tag staged before the sender's chunk leave first.
        b.append("t", &[Bytes::from(e(0).to_vec())], 1, false, false, &[])
            .await
            .unwrap();
        let origin = Origin {
            id: b"sender-chunk-1",
            batch: 0,
        };
        let two = [Bytes::from([e(1), e(2)].concat())];
        b.append_kept("t", &two, 2, false, origin).await.unwrap();
        // Resent before its ack came, while the first copy is queued.
        b.append_kept("t", &two, 2, false, origin).await.unwrap();
        // Bigger than a chunk (4 records): cut, each piece its own id.
        let other = Origin {
            id: b"sender-chunk-2",
            batch: 0,
        };
        let six = [Bytes::from((3..9).flat_map(e).collect::<Vec<u8>>())];
        b.append_kept("t", &six, 6, false, other).await.unwrap();
        drain(&b).await;
        let chunks = out.0.lock().unwrap();
        let got: Vec<(u32, u8)> = chunks
            .iter()
            .map(|c| (c.count, c.contiguous()[1]))
            .collect();
        assert_eq!(got, vec![(1, 0), (2, 1), (4, 3), (2, 7)]);
        assert_eq!(chunks[1].id, origin.chunk_id("test", "t", 0));
        assert_eq!(chunks[2].id, other.chunk_id("test", "t", 0));
        assert_eq!(chunks[3].id, other.chunk_id("test", "t", 1));
    }

    #[test]
    fn derived_ids_depend_on_every_field_and_on_nothing_else() {
        let o = Origin {
            id: b"abc",
            batch: 0,
        };
        // Another nagare with the same output derives the same id.
        assert_eq!(o.chunk_id("out", "t", 0), o.chunk_id("out", "t", 0));
        let ids = [
            o.chunk_id("out", "t", 0),
            o.chunk_id("out", "t", 1),
            o.chunk_id("out", "u", 0),
            o.chunk_id("out2", "t", 0),
            Origin {
                id: b"abd",
                batch: 0,
            }
            .chunk_id("out", "t", 0),
            Origin {
                id: b"abc",
                batch: 1,
            }
            .chunk_id("out", "t", 0),
            // The fields are length-prefixed: moving a byte across a
            // boundary changes the id.
            Origin {
                id: b"ab",
                batch: 0,
            }
            .chunk_id("cout", "t", 0),
        ];
        let distinct: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len());
    }
}
