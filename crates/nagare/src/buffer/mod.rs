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

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;
use tokio::sync::{oneshot, Notify};

pub use chunk::{Chunk, COPY_APART_THRESHOLD, SHARE_THRESHOLD};
pub use chunk_file::FileStore;
pub use config::{BufferConfig, BufferType, OverflowAction, SyncMode};
pub use recovery::read_chunk_file;

use chunk::Staging;
use chunk_file::Slot;
use nagare_core::metrics::PluginStats;
use nagare_core::output::Output;
use recovery::Recovered;

#[derive(Default)]
struct State {
    staged: HashMap<Arc<str>, Staging>,
    queue: VecDeque<Queued>,
    /// Bytes held by staged, queued and in-flight chunks (`Queued::held`:
    /// the memory they keep alive, or their length on disk).
    bytes: usize,
    /// Of those, bytes of queued chunks kept on disk only (file buffer).
    disk_only: usize,
    closing: bool,
    /// Inputs waiting for a chunk's delivery (`ack = "delivered"`), by chunk id.
    waiters: HashMap<[u8; 16], Vec<oneshot::Sender<bool>>>,
    /// Ids of the chunks kept whole for their sender (`Origin`) that are
    /// queued or being flushed: the same sender chunk appended again
    /// meanwhile (resent before its ack came) is not stored twice.
    kept: HashSet<[u8; 16]>,
}

/// A closed chunk in the queue: the chunk its output is given, and what
/// only the buffer needs to account for it.
struct Queued {
    chunk: Chunk,
    /// Bytes charged against `total_limit_size`: the memory its segments
    /// keep alive (payload plus spare capacity), or its payload length once
    /// it is kept on disk only.
    held: usize,
    /// A file buffer's chunk file, freed once the chunk is committed.
    slot: Option<Arc<Slot>>,
}

/// A sender's chunk that the forward input keeps whole (`keep_chunks`): its
/// events go into chunks of their own, queued at once, whose ids are derived
/// from the sender's chunk id, from which of the filter chain's batches they
/// are (`batch`), from this buffer's output name and tag, and from the piece
/// (a batch bigger than `chunk_limit_size` is cut). The same events resent
/// by the sender, here or through another nagare with the same
/// configuration, get the same ids, so the next nagare's dedup window drops
/// the copy.
#[derive(Debug, Clone, Copy)]
pub struct Origin<'a> {
    pub id: &'a [u8],
    pub batch: u32,
}

impl Origin<'_> {
    /// The id of piece `piece` of this batch in the buffer of `output`, for `tag`:
    /// XXH3-128 of the fields, each with its length first (so no two
    /// different field lists hash the same bytes).
    pub fn chunk_id(&self, output: &str, tag: &str, piece: u32) -> [u8; 16] {
        let mut b = Vec::with_capacity(32 + self.id.len() + output.len() + tag.len());
        for field in [self.id, output.as_bytes(), tag.as_bytes()] {
            b.extend_from_slice(&(field.len() as u32).to_be_bytes());
            b.extend_from_slice(field);
        }
        b.extend_from_slice(&self.batch.to_be_bytes());
        b.extend_from_slice(&piece.to_be_bytes());
        xxhash_rust::xxh3::xxh3_128(&b).to_be_bytes()
    }
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
    /// The output and its secondary; a reload that changed their options
    /// (not the buffer's) replaces them, and the chunks stay (`replace_output`).
    output: RwLock<Arc<dyn Output>>,
    secondary: RwLock<Option<Secondary>>,
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
    /// the output but to where they are kept (see flush.rs).
    giving_up: AtomicBool,
    /// `[system] dead_letter_dir`: where a memory buffer without a
    /// secondary output writes the chunks (or entries) its output gave up
    /// on, in a folder named after the output (a file buffer writes them
    /// under its own path). None only in unit tests: they are counted lost.
    dead_letter_dir: RwLock<Option<PathBuf>>,
    /// What giving up did with the chunks left, in events.
    pub shutdown: ShutdownTally,
}

/// A secondary output and its counters.
pub type Secondary = (Arc<dyn Output>, Arc<PluginStats>);

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
        secondary: Option<Secondary>,
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
            output: RwLock::new(output),
            secondary: RwLock::new(secondary),
            next_id: AtomicU64::new(0),
            id_seed: rand::random(),
            last_disk_log: AtomicU64::new(0),
            store,
            recovered_ids: Mutex::new(recovered_ids),
            in_flight: AtomicU64::new(0),
            give_up_now: Notify::new(),
            giving_up: AtomicBool::new(false),
            dead_letter_dir: RwLock::new(None),
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
        let queued = st.queue.iter().map(|q| q.chunk.count as u64).sum::<u64>();
        let chunks = st.staged.len() + st.queue.len();
        (staged + queued + self.in_flight.load(Relaxed), chunks)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The file buffer's directory (None for a memory buffer).
    pub fn dir(&self) -> Option<&std::path::Path> {
        self.store.as_ref().map(|s| s.dir())
    }

    pub fn stats(&self) -> &Arc<PluginStats> {
        &self.stats
    }

    /// Reload: the output (and secondary) built from the new options take
    /// the chunks from the next write on; a write under way finishes with
    /// the old one. Returns the old secondary's counters (to unregister).
    pub fn replace_output(
        &self,
        output: Arc<dyn Output>,
        secondary: Option<Secondary>,
    ) -> Option<Arc<PluginStats>> {
        *self.output.write().expect("buffer output") = output;
        let old = std::mem::replace(
            &mut *self.secondary.write().expect("buffer secondary"),
            secondary,
        );
        old.map(|(_, st)| st)
    }

    /// The secondary output's counters.
    pub fn secondary_stats(&self) -> Option<Arc<PluginStats>> {
        self.secondary().map(|(_, st)| st)
    }

    /// Lets the output close its connections (after the flush workers ended).
    pub async fn stop_output(&self) {
        self.output().stop().await;
    }

    fn output(&self) -> Arc<dyn Output> {
        self.output.read().expect("buffer output").clone()
    }

    fn secondary(&self) -> Option<Secondary> {
        self.secondary.read().expect("buffer secondary").clone()
    }

    /// Shutdown stops waiting for the output: the chunk being written and
    /// every chunk still queued go, without more tries of the output, to the
    /// file buffer's chunk files (sent after the next start), else the
    /// secondary output, else a dead-letter file under `dead_letters`
    /// (`nagare replay` sends it). Call after `close`.
    pub fn give_up(&self, dead_letters: PathBuf) {
        self.set_dead_letter_dir(dead_letters);
        self.giving_up.store(true, Relaxed);
        self.give_up_now.notify_waiters();
    }

    /// Sets `[system] dead_letter_dir` (at start and at each reload).
    pub fn set_dead_letter_dir(&self, dir: PathBuf) {
        *self.dead_letter_dir.write().expect("dead letter dir") = Some(dir);
    }

    /// Where this buffer writes dead letters: under the file buffer's path,
    /// else in its folder of `[system] dead_letter_dir`.
    fn dead_letters(&self) -> Option<PathBuf> {
        match &self.store {
            Some(store) => Some(store.dir().join("dead-letters")),
            None => self
                .dead_letter_dir
                .read()
                .expect("dead letter dir")
                .as_ref()
                .map(|d| d.join(&self.name)),
        }
    }

    /// Shutdown stopped waiting for the output (`give_up`).
    fn giving_up(&self) -> bool {
        self.giving_up.load(Relaxed)
    }
}
