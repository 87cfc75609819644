//! The memory buffer and its flush workers.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::sync::{oneshot, Notify};
use tokio::task::JoinHandle;

use super::file::{ChunkFile, FileStore, Recovered, Slot, SyncTicket};
use super::{BufferConfig, OverflowAction, SyncMode};
use crate::outputs::{FlushError, Output};
use crate::stats::PluginStats;

/// Batches at least this big are kept as they arrived (shared, not copied);
/// smaller ones are copied together so a chunk does not become thousands of
/// tiny pieces.
const SHARE_THRESHOLD: usize = 32 * 1024;

/// A closed chunk: one tag and its events as PackedForward entries, held in
/// one or more segments that together form the payload.
#[derive(Debug, Clone)]
pub struct Chunk {
    /// Unique id, stable across retries (sent as the forward `chunk` option).
    pub id: [u8; 16],
    pub tag: Arc<str>,
    pub segments: Vec<Bytes>,
    /// Total payload bytes of all segments.
    pub len: usize,
    pub count: u32,
    /// The chunk's file, for a file buffer: freed once the chunk is committed.
    pub file: Option<Arc<Slot>>,
}

impl Chunk {
    /// A file buffer's chunk whose events are on disk only, read back before it is sent.
    fn on_disk_only(&self) -> bool {
        self.segments.is_empty() && self.len > 0
    }

    pub fn id_hex(&self) -> String {
        hex::encode(self.id)
    }

    /// Every event of the chunk: (time, record, whole entry).
    pub fn entries(&self) -> impl Iterator<Item = (nagare_forward::EventTime, &[u8], &[u8])> {
        self.segments
            .iter()
            .flat_map(|s| crate::formats::entries(s))
    }

    /// The payload in one piece (copies unless there is a single segment).
    pub fn contiguous(&self) -> Bytes {
        match self.segments.as_slice() {
            [one] => one.clone(),
            many => {
                let mut b = BytesMut::with_capacity(self.len);
                for s in many {
                    b.extend_from_slice(s);
                }
                b.freeze()
            }
        }
    }
}

struct Staging {
    /// The chunk id, fixed when the chunk starts (it names the chunk file).
    id: [u8; 16],
    segments: Vec<Bytes>,
    /// Small batches copied together; becomes a segment when closed.
    small: BytesMut,
    len: usize,
    count: u32,
    created: Instant,
    /// The chunk's file, for a file buffer.
    file: Option<ChunkFile>,
}

impl Staging {
    fn push(&mut self, part: &Bytes) {
        if part.len() >= SHARE_THRESHOLD {
            if !self.small.is_empty() {
                self.segments.push(self.small.split().freeze());
            }
            self.segments.push(part.clone());
        } else {
            // Grows by doubling: a fixed up-front reserve per staged tag would
            // hold memory that total_limit_size does not count.
            self.small.extend_from_slice(part);
        }
        self.len += part.len();
    }

    fn into_segments(mut self) -> Vec<Bytes> {
        if !self.small.is_empty() {
            self.segments.push(self.small.freeze());
        }
        self.segments
    }
}

#[derive(Default)]
struct State {
    staged: HashMap<Arc<str>, Staging>,
    queue: VecDeque<Chunk>,
    /// Bytes of staged, queued and in-flight chunks.
    bytes: usize,
    /// Of those, bytes of queued chunks kept on disk only (file buffer).
    disk_only: usize,
    closing: bool,
    /// Inputs waiting for a chunk's delivery (`ack = "delivered"`), by chunk id.
    waiters: HashMap<[u8; 16], Vec<oneshot::Sender<bool>>>,
}

/// A file buffer keeps a queued chunk on disk only (its events are read back
/// when it is sent) while the chunks held in memory pass `memory_limit`: so
/// `total_limit_size` may be far bigger than memory.
fn keep_on_disk_if_over(st: &mut State, chunk: &mut Chunk, memory_limit: usize) {
    if chunk.file.is_some() && st.bytes - st.disk_only > memory_limit {
        chunk.segments = Vec::new();
        st.disk_only += chunk.len;
    }
}

/// Cuts a batch into pieces of at most `max_count` events and about
/// `max_len` bytes (a single bigger event stays whole), at entry boundaries,
/// without copying.
fn split_batch(parts: &[Bytes], max_count: u32, max_len: usize) -> Vec<(Vec<Bytes>, u32)> {
    let mut out = Vec::new();
    let (mut cur, mut cur_n, mut cur_len) = (Vec::new(), 0u32, 0usize);
    for part in parts {
        let (mut start, mut pos) = (0, 0);
        while pos < part.len() {
            // Entries were checked on the way in; a failure would be a bug, and
            // keeping the rest of the part whole is the safe answer.
            let end = nagare_forward::msgpack::skip_value(part, pos).unwrap_or(part.len());
            let size = end - pos;
            if cur_n > 0 && (cur_n >= max_count || cur_len + size > max_len) {
                if pos > start {
                    cur.push(part.slice(start..pos));
                }
                out.push((std::mem::take(&mut cur), cur_n));
                (cur_n, cur_len, start) = (0, 0, pos);
            }
            cur_n += 1;
            cur_len += size;
            pos = end;
        }
        if pos > start {
            cur.push(part.slice(start..pos));
        }
    }
    if cur_n > 0 {
        out.push((cur, cur_n));
    }
    out
}

/// Milliseconds since the Unix epoch (an atomic can hold it, unlike Instant).
fn unix_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Chunk file records to have on disk after an append, when the sync policy asks for it.
type SyncHandle = SyncTicket;

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
    /// When the last disk error was logged (unix ms).
    last_disk_log: AtomicU64,
    /// Chunk files, for `type = "file"`.
    store: Option<FileStore>,
    /// Senders' chunk ids found in recovered chunks, for the inputs' dedup windows.
    recovered_ids: Mutex<Vec<Bytes>>,
}

impl Buffer {
    pub fn new(
        name: &str,
        cfg: BufferConfig,
        stats: Arc<PluginStats>,
        output: Arc<dyn Output>,
        secondary: Option<(Arc<dyn Output>, Arc<PluginStats>)>,
        store: Option<(FileStore, Vec<Recovered>)>,
    ) -> Arc<Buffer> {
        let mut state = State::default();
        let mut recovered_ids = Vec::new();
        let store = store.map(|(store, recovered)| {
            for r in recovered {
                recovered_ids.extend(r.ids);
                state.bytes += r.len;
                PluginStats::add(&stats.buffer_chunks, 1);
                // Recovery left the chunks past memory_limit_size on disk only.
                let segments = if r.data.is_empty() {
                    state.disk_only += r.len;
                    Vec::new()
                } else {
                    vec![r.data]
                };
                state.queue.push_back(Chunk {
                    id: r.id,
                    tag: Arc::from(r.tag.as_str()),
                    len: r.len,
                    segments,
                    count: r.count,
                    file: r.slot,
                });
            }
            stats.buffer_bytes.store(state.bytes as u64, Relaxed);
            stats
                .buffer_disk_only_bytes
                .store(state.disk_only as u64, Relaxed);
            store
        });
        Arc::new(Buffer {
            cfg,
            name: name.to_string(),
            state: Mutex::new(state),
            queued: Notify::new(),
            space: Notify::new(),
            stats,
            output,
            secondary,
            next_id: AtomicU64::new(0),
            id_seed: rand::random(),
            last_disk_log: AtomicU64::new(0),
            store,
            recovered_ids: Mutex::new(recovered_ids),
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
            if s.count == 0 {
                // Started, but its first write failed: nothing to keep.
                if let Some(f) = s.file {
                    self.free_file(Some(f.slot().clone()));
                }
            } else {
                let (id, len, count) = (s.id, s.len, s.count);
                let file = s.file.as_ref().map(|f| f.slot().clone());
                let mut chunk = Chunk {
                    id,
                    tag: tag.clone(),
                    segments: s.into_segments(),
                    len,
                    count,
                    file,
                };
                if self.store.is_some() {
                    keep_on_disk_if_over(st, &mut chunk, self.cfg.memory_limit_size.0 as usize);
                    self.show_disk_only(st);
                }
                st.queue.push_back(chunk);
                PluginStats::add(&self.stats.buffer_chunks, 1);
                self.queued.notify_one();
            }
        }
    }

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
                // empty, or it could never be accepted.
                let over = st.bytes > 0 && st.bytes + len > self.cfg.total_limit_size.0 as usize;
                if !over {
                    match self.append_pieces(&mut st, tag, parts, count, len, ids) {
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
                            if let Some(old) = st.queue.pop_front() {
                                st.bytes -= old.len;
                                if old.on_disk_only() {
                                    st.disk_only -= old.len;
                                    self.show_disk_only(&st);
                                }
                                self.free_file(old.file.clone());
                                for w in st.waiters.remove(&old.id).unwrap_or_default() {
                                    let _ = w.send(false);
                                }
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

    /// Stages a batch; returns the chunk file's handle when it may need an
    /// fsync, and the id of the chunk the batch went into.
    fn append_locked(
        &self,
        st: &mut State,
        tag: &str,
        parts: &[Bytes],
        count: u32,
        len: usize,
        ids: &[Bytes],
    ) -> Result<(Option<SyncHandle>, [u8; 16]), AppendError> {
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
            let id = self.new_id();
            let file = match &self.store {
                Some(store) => Some(
                    store
                        .create(&id, &key)
                        .map_err(|e| self.disk_error(store, e))?,
                ),
                None => None,
            };
            st.staged.insert(
                key.clone(),
                Staging {
                    id,
                    segments: Vec::new(),
                    small: BytesMut::new(),
                    len: 0,
                    count: 0,
                    created: Instant::now(),
                    file,
                },
            );
        }
        let s = st.staged.get_mut(&key).expect("staged chunk");
        let mut handle = None;
        if let Some(f) = &mut s.file {
            let store = self.store.as_ref().expect("file buffer");
            f.append(parts, count, ids)
                .map_err(|e| self.disk_error(store, e))?;
            handle = Some(f.ticket());
        }
        for p in parts {
            s.push(p);
        }
        s.count += count;
        let full = s.len >= limit || s.count >= rec_limit;
        st.bytes += len;
        self.stats.buffer_bytes.store(st.bytes as u64, Relaxed);
        PluginStats::add(&self.stats.events_in, count as u64);
        PluginStats::add(&self.stats.bytes_in, len as u64);
        let id = s.id;
        if full {
            self.close_staged(st, &key);
        }
        Ok((handle, id))
    }

    /// Registers a waiter for the delivery of chunk `id`.
    fn wait_delivery(&self, st: &mut State, id: [u8; 16]) -> oneshot::Receiver<bool> {
        let (tx, rx) = oneshot::channel();
        st.waiters.entry(id).or_default().push(tx);
        rx
    }

    /// Appends a batch, split at entry boundaries when it is bigger than a
    /// whole chunk may be; returns the last chunk file handle (for fsync) and
    /// the ids of the chunks the batch went into.
    fn append_pieces(
        &self,
        st: &mut State,
        tag: &str,
        parts: &[Bytes],
        count: u32,
        len: usize,
        sender_ids: &[Bytes],
    ) -> Result<(Vec<SyncHandle>, Vec<[u8; 16]>), AppendError> {
        let max_len = self.cfg.chunk_limit_size.0 as usize;
        let max_count = self.cfg.chunk_limit_records.unwrap_or(u32::MAX);
        let mut chunk_ids = Vec::new();
        // Every chunk file the pieces went into must be synced, not just the last.
        let mut files: Vec<SyncHandle> = Vec::new();
        if len <= max_len && count <= max_count {
            let (f, id) = self.append_locked(st, tag, parts, count, len, sender_ids)?;
            return Ok((f.into_iter().collect(), vec![id]));
        }
        for (piece, n) in split_batch(parts, max_count, max_len) {
            let plen = piece.iter().map(|p| p.len()).sum();
            let (f, id) = self.append_locked(st, tag, &piece, n, plen, sender_ids)?;
            if let Some(t) = f {
                match files.iter_mut().find(|x| Arc::ptr_eq(&x.slot, &t.slot)) {
                    Some(x) => x.record = x.record.max(t.record),
                    None => files.push(t),
                }
            }
            if chunk_ids.last() != Some(&id) {
                chunk_ids.push(id);
            }
        }
        Ok((files, chunk_ids))
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
    async fn sync(&self, files: Vec<SyncHandle>, durable: bool) -> Result<(), AppendError> {
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

    /// A delivered (or dropped) chunk's file is freed for reuse.
    fn free_file(&self, slot: Option<Arc<Slot>>) {
        if let (Some(store), Some(slot)) = (&self.store, slot) {
            store.release(slot);
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

    fn commit(&self, chunk: &Chunk, delivered: bool) {
        self.free_file(chunk.file.clone());
        let mut st = self.state.lock().expect("buffer state");
        for w in st.waiters.remove(&chunk.id).unwrap_or_default() {
            let _ = w.send(delivered);
        }
        st.bytes -= chunk.len;
        self.stats.buffer_bytes.store(st.bytes as u64, Relaxed);
        self.stats.buffer_chunks.fetch_sub(1, Relaxed);
        drop(st);
        self.space.notify_waiters();
    }

    fn show_disk_only(&self, st: &State) {
        self.stats
            .buffer_disk_only_bytes
            .store(st.disk_only as u64, Relaxed);
    }

    /// Reads a chunk kept on disk only back from its file. A file that no
    /// longer holds the chunk (damaged on disk) is quarantined and its events
    /// counted as lost: `None`.
    async fn read_back(&self, mut chunk: Chunk) -> Option<Chunk> {
        let slot = match &chunk.file {
            Some(slot) if chunk.on_disk_only() => slot.clone(),
            _ => return Some(chunk),
        };
        let path = slot.path.clone();
        let read = tokio::task::spawn_blocking(move || super::file::read_chunk_file(&path))
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
        {
            let mut st = self.state.lock().expect("buffer state");
            st.disk_only -= chunk.len;
            self.show_disk_only(&st);
        }
        let why = match read {
            Ok(Some(r))
                if r.id == chunk.id && r.count == chunk.count && r.data.len() == chunk.len =>
            {
                chunk.segments = vec![r.data];
                return Some(chunk);
            }
            Ok(Some(r)) => format!(
                "holds {} events in {} bytes, {} in {} were written",
                r.count,
                r.data.len(),
                chunk.count,
                chunk.len
            ),
            Ok(None) => "holds no events".to_string(),
            Err(e) => e,
        };
        if let Some(store) = &self.store {
            store.quarantine(&slot.path, &why, &self.name);
        }
        PluginStats::add(&self.stats.lost, chunk.count as u64);
        tracing::error!(output = %self.name, chunk = %chunk.id_hex(), events = chunk.count,
            file = %slot.path.display(), reason = %why,
            "a chunk kept on disk only cannot be read back; its events are lost");
        // The file went to quarantine: it must not be reused.
        chunk.file = None;
        self.commit(&chunk, false);
        None
    }

    /// Writes one chunk, retrying with backoff; after the retry limit the
    /// chunk goes to the secondary output.
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
            let FlushError::Retry(msg) = &err;
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
        // A file buffer's default secondary: a dead-letter file `nagare replay` can send.
        if let Some(store) = &self.store {
            match store.write_dead_letter(&chunk.id, &chunk.tag, &chunk.segments, chunk.count) {
                Ok(path) => {
                    PluginStats::add(&self.stats.to_secondary, chunk.count as u64);
                    tracing::error!(output = %self.name, chunk = %chunk.id_hex(), events = chunk.count,
                        file = %path.display(), "chunk written to the dead-letter file (send it again with `nagare replay`)");
                    return;
                }
                Err(e) => tracing::error!(output = %self.name, chunk = %chunk.id_hex(),
                    path = %store.dir().display(), error = %e, "cannot write the dead-letter file"),
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

    /// The senders' chunk ids kept in the chunks recovered at start (once).
    pub fn take_recovered_ids(&self) -> Vec<Bytes> {
        std::mem::take(&mut *self.recovered_ids.lock().expect("recovered ids"))
    }

    /// Events still held (staged, queued or in flight).
    pub fn held_bytes(&self) -> usize {
        self.state.lock().expect("buffer state").bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::units::Size;
    use async_trait::async_trait;

    /// Records every chunk it is given.
    #[derive(Default)]
    struct Collect(Mutex<Vec<Chunk>>);

    #[async_trait]
    impl Output for Collect {
        async fn write(&self, chunk: &Chunk) -> Result<(), FlushError> {
            self.0.lock().unwrap().push(chunk.clone());
            Ok(())
        }
    }

    fn buffer(cfg: BufferConfig) -> (Arc<Buffer>, Arc<Collect>) {
        let out = Arc::new(Collect::default());
        let b = Buffer::new(
            "test",
            cfg,
            Arc::new(PluginStats::default()),
            out.clone(),
            None,
            None,
        );
        (b, out)
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

    #[test]
    fn split_batch_cuts_at_entry_boundaries() {
        // 7 entries [i, {}] of 3 bytes each, over two parts.
        let e = |i: u8| vec![0x92, i, 0x80];
        let p1: Vec<u8> = (0..4).flat_map(e).collect();
        let p2: Vec<u8> = (4..7).flat_map(e).collect();
        let parts = [Bytes::from(p1), Bytes::from(p2)];
        let pieces = split_batch(&parts, 3, 1000);
        let counts: Vec<u32> = pieces.iter().map(|p| p.1).collect();
        assert_eq!(counts, vec![3, 3, 1]);
        let joined: Vec<u8> = pieces
            .iter()
            .flat_map(|p| p.0.iter().flat_map(|b| b.to_vec()))
            .collect();
        assert_eq!(joined, (0..7).flat_map(e).collect::<Vec<u8>>());
        let by_size = split_batch(&parts, u32::MAX, 7);
        assert_eq!(
            by_size.iter().map(|p| p.1).collect::<Vec<_>>(),
            vec![2, 2, 2, 1]
        );
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

    /// A file buffer in `dir` that keeps at most `memory_limit` bytes in
    /// memory, with chunks of 10 entries.
    fn paging_buffer(dir: &std::path::Path, memory_limit: u64) -> (Arc<Buffer>, Arc<Collect>) {
        paging_buffer_with(dir, memory_limit, BufferConfig::default())
    }

    fn paging_buffer_with(
        dir: &std::path::Path,
        memory_limit: u64,
        cfg: BufferConfig,
    ) -> (Arc<Buffer>, Arc<Collect>) {
        let out = Arc::new(Collect::default());
        let store = FileStore::open(dir, "test", 16, usize::MAX).unwrap();
        assert!(store.1.is_empty());
        let cfg = BufferConfig {
            kind: crate::buffer::BufferType::File,
            chunk_limit_records: Some(10),
            memory_limit_size: Size(memory_limit),
            ..cfg
        };
        let stats = Arc::new(PluginStats::default());
        let b = Buffer::new("test", cfg, stats, out.clone(), None, Some(store));
        (b, out)
    }

    /// Appends chunk number `c`: 10 entries [c*10+i, {}] of 3 bytes.
    async fn append_chunk(b: &Buffer, c: u8) -> Vec<u8> {
        let entries: Vec<u8> = (0..10u8).flat_map(|i| [0x92, c * 10 + i, 0x80]).collect();
        b.append("t", &[Bytes::from(entries.clone())], 10, false, false, &[])
            .await
            .unwrap();
        entries
    }

    /// The first entry's number ([n, {}]) of every delivered chunk.
    fn first_seqs(out: &Collect) -> Vec<u8> {
        let chunks = out.0.lock().unwrap();
        chunks.iter().map(|c| c.contiguous()[1]).collect()
    }

    async fn drain(b: &Arc<Buffer>) {
        let tasks = b.start();
        b.close();
        for t in tasks {
            t.await.unwrap();
        }
    }

    #[tokio::test]
    async fn a_file_buffer_keeps_chunks_past_its_memory_limit_on_disk_only() {
        let dir = tempfile::tempdir().unwrap();
        let (b, out) = paging_buffer(dir.path(), 60);
        let mut want = Vec::new();
        for c in 0..10u8 {
            want.extend(append_chunk(&b, c).await);
        }
        // 30 bytes per chunk: the first two fit the 60 bytes, the rest wait on disk.
        let on_disk = |b: &Buffer| {
            let st = b.state.lock().unwrap();
            st.queue.iter().filter(|c| c.on_disk_only()).count()
        };
        assert_eq!(on_disk(&b), 8);
        assert_eq!(PluginStats::get(&b.stats.buffer_disk_only_bytes), 8 * 30);
        drain(&b).await;
        let chunks = out.0.lock().unwrap();
        let got: Vec<u8> = chunks
            .iter()
            .flat_map(|c| c.contiguous().to_vec())
            .collect();
        assert_eq!(got, want, "every chunk read back whole and in order");
        assert_eq!(PluginStats::get(&b.stats.buffer_disk_only_bytes), 0);
        assert_eq!(b.held_bytes(), 0);
    }

    #[tokio::test]
    async fn drop_oldest_chunk_drops_chunks_kept_on_disk_only_too() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = BufferConfig {
            total_limit_size: Size(90),
            overflow_action: OverflowAction::DropOldestChunk,
            ..Default::default()
        };
        let (b, out) = paging_buffer_with(dir.path(), 30, cfg);
        for c in 0..6u8 {
            append_chunk(&b, c).await;
        }
        // Three 30-byte chunks fit; the oldest went for each of the next three.
        assert_eq!(PluginStats::get(&b.stats.dropped), 30);
        assert_eq!(b.held_bytes(), 90);
        let on_disk: usize = {
            let st = b.state.lock().unwrap();
            st.queue
                .iter()
                .filter(|c| c.on_disk_only())
                .map(|c| c.len)
                .sum()
        };
        assert!(on_disk > 0);
        assert_eq!(
            PluginStats::get(&b.stats.buffer_disk_only_bytes),
            on_disk as u64
        );
        drain(&b).await;
        let firsts = first_seqs(&out);
        assert_eq!(
            firsts,
            vec![30, 40, 50],
            "the three newest chunks delivered"
        );
        assert_eq!(PluginStats::get(&b.stats.buffer_disk_only_bytes), 0);
    }

    #[tokio::test]
    async fn a_chunk_damaged_on_disk_is_quarantined_and_counted_the_rest_delivered() {
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().unwrap();
        let (b, out) = paging_buffer(dir.path(), 0);
        for c in 0..3u8 {
            append_chunk(&b, c).await;
        }
        let damaged = {
            let st = b.state.lock().unwrap();
            assert!(st.queue.iter().all(|c| c.on_disk_only()));
            st.queue[1].file.as_ref().unwrap().path.clone()
        };
        std::fs::OpenOptions::new()
            .write(true)
            .open(&damaged)
            .unwrap()
            .write_all_at(b"JUNK", 0)
            .unwrap();
        drain(&b).await;
        let firsts = first_seqs(&out);
        assert_eq!(firsts, vec![0, 20], "chunks 0 and 2 delivered");
        assert_eq!(PluginStats::get(&b.stats.lost), 10);
        assert!(dir
            .path()
            .join("quarantine")
            .join(damaged.file_name().unwrap())
            .exists());
        assert!(!damaged.exists());
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
}
