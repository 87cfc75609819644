//! Output buffers, both types: chunks of batch bytes keyed by tag, with
//! limits, overflow handling, flush workers and retries. A file buffer adds
//! chunk files on disk, paging past its memory limit, recovery at start and
//! dead letters.
//!
//! Chunk life: staged (appending) → queued (closed by size, record count or
//! `flush_interval`) → flushing → committed. The buffer, not the output,
//! owns retries, backoff and the hand-over to the secondary output.
//!
//! Where things are:
//! - `config`: the `[output.buffer]` options;
//! - `chunk`: chunks in memory (staging, closed chunks, splitting big batches);
//! - `append`: taking batches in, the limits and the overflow actions;
//! - `flush`: the flush workers, retries with backoff, commit;
//! - `dead_letters`: where a chunk goes when its output gave up on it;
//! - `chunk_file`: a file buffer's chunk files (format, group-commit fsync, reuse);
//! - `paging`: a file buffer's chunks kept on disk only past `memory_limit_size`;
//! - `recovery`: reading chunk files back at start, quarantine of damaged ones.

mod append;
mod chunk;
mod chunk_file;
mod config;
mod dead_letters;
mod flush;
mod paging;
mod recovery;
#[cfg(test)]
mod testing;

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use tokio::sync::{oneshot, Notify};

pub use chunk::{Chunk, SHARE_THRESHOLD};
pub use chunk_file::FileStore;
pub use config::{BufferConfig, BufferType, OverflowAction, SyncMode};
pub use recovery::read_chunk_file;

use crate::outputs::Output;
use crate::stats::PluginStats;
use chunk::Staging;
use chunk_file::Slot;
use recovery::Recovered;

#[derive(Default)]
struct State {
    staged: HashMap<Arc<str>, Staging>,
    queue: VecDeque<Chunk>,
    /// Bytes held by staged, queued and in-flight chunks (`Chunk::held`:
    /// the memory they keep alive, or their length on disk).
    bytes: usize,
    /// Of those, bytes of queued chunks kept on disk only (file buffer).
    disk_only: usize,
    closing: bool,
    /// Inputs waiting for a chunk's delivery (`ack = "delivered"`), by chunk id.
    waiters: HashMap<[u8; 16], Vec<oneshot::Sender<bool>>>,
}

/// The buffer in front of one output (memory or file type).
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
    /// Events of chunks the flush workers hold (being written or retried).
    in_flight: AtomicU64,
    /// Wakes flush workers out of a write or a retry wait when giving up.
    give_up_now: Notify,
    /// Set when shutdown stops waiting (`give_up`): chunks no longer go to
    /// the output but to where they are kept (see flush.rs). A memory
    /// buffer without a secondary writes them here (`[system] dead_letter_dir`).
    shutdown_dead_letters: OnceLock<PathBuf>,
    /// What giving up did with the chunks left, in events.
    pub shutdown: ShutdownTally,
}

/// Where the events undelivered at shutdown went.
#[derive(Debug, Default)]
pub struct ShutdownTally {
    /// To the secondary output or a dead-letter file (replayable).
    pub handed_over: AtomicU64,
    /// Left in the file buffer's chunk files, sent after the next start.
    pub kept_on_disk: AtomicU64,
    /// Nowhere could take them.
    pub lost: AtomicU64,
}

impl Buffer {
    /// A buffer in front of `output`; with `store` (a file buffer) the
    /// chunks recovered from it are queued first.
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
            recovered_ids = recovery::queue_recovered(&mut state, &stats, recovered);
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
            in_flight: AtomicU64::new(0),
            give_up_now: Notify::new(),
            shutdown_dead_letters: OnceLock::new(),
            shutdown: ShutdownTally::default(),
        })
    }

    fn new_id(&self) -> [u8; 16] {
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&self.id_seed.to_be_bytes());
        id[8..].copy_from_slice(&self.next_id.fetch_add(1, Relaxed).to_be_bytes());
        id
    }

    /// A delivered (or dropped) chunk's file is freed for reuse.
    fn free_file(&self, slot: Option<Arc<Slot>>) {
        if let (Some(store), Some(slot)) = (&self.store, slot) {
            store.release(slot);
        }
    }

    /// The senders' chunk ids kept in the chunks recovered at start (once).
    pub fn take_recovered_ids(&self) -> Vec<Bytes> {
        std::mem::take(&mut *self.recovered_ids.lock().expect("recovered ids"))
    }

    /// Bytes still held (staged, queued or in flight).
    #[cfg(test)]
    pub fn held_bytes(&self) -> usize {
        self.state.lock().expect("buffer state").bytes
    }

    /// (events, chunks) not delivered yet: staged, queued and in flight.
    pub fn pending(&self) -> (u64, usize) {
        let st = self.state.lock().expect("buffer state");
        let staged = st.staged.values().map(|s| s.count as u64).sum::<u64>();
        let queued = st.queue.iter().map(|c| c.count as u64).sum::<u64>();
        let chunks = st.staged.len() + st.queue.len();
        (staged + queued + self.in_flight.load(Relaxed), chunks)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether appending `len` bytes now would wait or be refused (the
    /// buffer is at `total_limit_size` and drops nothing to make room): an
    /// input that can tell its sender "try later" (HTTP 503) asks this
    /// first instead of holding the sender.
    pub fn is_full(&self, len: usize) -> bool {
        if self.cfg.overflow_action == OverflowAction::DropOldestChunk {
            return false;
        }
        let st = self.state.lock().expect("buffer state");
        st.closing || (st.bytes > 0 && st.bytes + len > self.cfg.total_limit_size.0 as usize)
    }

    /// Shutdown stops waiting for the output: the chunk being written and
    /// every chunk still queued go, without more tries of the output, to the
    /// file buffer's chunk files (sent after the next start), else the
    /// secondary output, else a dead-letter file under `dead_letters`
    /// (`nagare replay` sends it). Call after `close`.
    pub fn give_up(&self, dead_letters: PathBuf) {
        let _ = self.shutdown_dead_letters.set(dead_letters);
        self.give_up_now.notify_waiters();
    }

    /// Shutdown stopped waiting for the output (`give_up`).
    fn giving_up(&self) -> bool {
        self.shutdown_dead_letters.get().is_some()
    }
}
