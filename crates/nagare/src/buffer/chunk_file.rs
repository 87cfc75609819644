//! Chunk files of the file buffer: one file (a "slot") per live chunk,
//! fsync'd with group commit, and reused once its chunk was delivered.
//!
//! Layout of `<path>/slot-<hex>.chunk`:
//!
//! ```text
//! header:  "NAGAREB" version(u8=3) created(u64 unix secs) chunk id(16) tag_len(u16) tag
//! records: chunk id(16) len(u32) count(u32) crc32(u32) ids_len(u32) ids payload
//!          ids = the senders' chunk ids of the batch, each u16 length + bytes;
//!          crc32 covers ids and payload
//! ```
//!
//! All integers are big-endian. Each record is one appended batch; its
//! payload is PackedForward entries, so recovery is a read, not a parse. A
//! header that carried the chunk's count and checksum could not stay
//! append-only, so each record carries its own.
//!
//! Why slots are reused: creating, growing and deleting one file per chunk
//! cost more CPU than writing the data (inode and block allocation, page
//! cache teardown), and an fsync of a new file has to journal its metadata.
//! A delivered chunk's file is marked free (`"NAGAREF"` over the magic) and
//! the next chunk overwrites it from the start. Its old bytes past the new
//! chunk's records are ignored: every record starts with its chunk's id, so
//! the first record with another id ends the chunk. A record's body is
//! written before its header, so a write cut short (kill -9, full disk)
//! never leaves a header over a half-written body.
//!
//! Reading the files back at start (torn tails, quarantine) is in
//! `recovery`; dead-letter files (same format) in `dead_letters`.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use nagare_core::holder::{LockError, PidLock};

use super::recovery::Recovered;

pub(super) const MAGIC: &[u8; 7] = b"NAGAREB";
/// Replaces MAGIC in a slot whose chunk was delivered.
pub(super) const FREE_MAGIC: &[u8; 7] = b"NAGAREF";
pub(super) const VERSION: u8 = 3;
pub(super) const ID_LEN: usize = 16;
pub(super) const RECORD_HEADER: usize = ID_LEN + 16;
/// Free slots kept for reuse at most; more are deleted.
const MAX_FREE_SLOTS: usize = 64;

pub struct FileStore {
    dir: PathBuf,
    /// Held open for the flock that keeps a second process out.
    _lock: PidLock,
    /// Slots whose chunks were delivered, ready for new chunks.
    free: Mutex<Vec<Arc<Slot>>>,
    /// How many free slots to keep (about as many as chunks fit the buffer).
    keep_free: usize,
}

/// fsyncs of one chunk file that may run at once. With one, an append that
/// just missed the running fsync waits for two; without a bound, every
/// append pays for its own (context switches and a device flush each, which
/// costs more CPU than the data). Measured on the relay with acks: 2 gave
/// the most events per second at 4 and 16 connections.
const FSYNCS_IN_FLIGHT: u64 = 2;

/// One chunk file, with group commit: an fsync covers every record written
/// before it started, so appends waiting at the same time share one. An
/// append that finds only fsyncs running that started before its record was
/// written starts its own at once (up to FSYNCS_IN_FLIGHT) rather than
/// queueing behind them.
pub struct Slot {
    pub(super) file: File,
    pub path: PathBuf,
    /// Records appended so far (over every chunk the slot held).
    written: AtomicU64,
    /// Records known to be on disk; waiters watch it.
    synced: tokio::sync::watch::Sender<u64>,
    /// The most records an fsync that was started covers.
    covering: AtomicU64,
    /// fsyncs running now.
    inflight: AtomicU64,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Slot({})", self.path.display())
    }
}

impl Slot {
    pub(super) fn new(file: File, path: PathBuf) -> Arc<Slot> {
        Arc::new(Slot {
            file,
            path,
            written: AtomicU64::new(0),
            synced: tokio::sync::watch::Sender::new(0),
            covering: AtomicU64::new(0),
            inflight: AtomicU64::new(0),
        })
    }

    /// Returns once record number `record` (and all before it) is on disk.
    pub async fn sync_to(self: &Arc<Self>, record: u64) -> io::Result<()> {
        let mut synced = self.synced.subscribe();
        let mut yielded = false;
        loop {
            if *synced.borrow_and_update() >= record {
                return Ok(());
            }
            if self.covering.load(Ordering::Acquire) >= record {
                // A running fsync covers this record: wait for it.
                let _ = synced.changed().await;
                continue;
            }
            if !yielded {
                // Connections whose frames are ready to append on this worker
                // go first, so the fsync covers their records too (fewer
                // fsyncs per frame: measured +5-10% acked events/s and less
                // CPU). Before counting this fsync in: no await may come
                // between that count and the spawn below, or a dropped
                // waiter would leave it counted forever.
                yielded = true;
                tokio::task::yield_now().await;
                continue;
            }
            if self.inflight.fetch_add(1, Ordering::AcqRel) >= FSYNCS_IN_FLIGHT {
                self.inflight.fetch_sub(1, Ordering::AcqRel);
                let _ = synced.changed().await;
                continue;
            }
            let upto = self.written.load(Ordering::Acquire);
            self.covering.fetch_max(upto, Ordering::AcqRel);
            // The bookkeeping after the fsync runs on the blocking thread, so
            // it happens even when this future is dropped while waiting.
            let me = self.clone();
            return tokio::task::spawn_blocking(move || {
                let done = me.file.sync_data();
                me.inflight.fetch_sub(1, Ordering::AcqRel);
                match &done {
                    Ok(()) => me.synced.send_modify(|s| *s = (*s).max(upto)),
                    Err(_) => {
                        // Waiters that counted on this fsync try their own.
                        me.covering.store(*me.synced.borrow(), Ordering::Release);
                        me.synced.send_modify(|_| {});
                    }
                }
                done
            })
            .await
            .map_err(io::Error::other)?;
        }
    }
}

/// What an append must wait for before its ack: record `record` of `slot`.
#[derive(Clone)]
pub struct SyncTicket {
    pub slot: Arc<Slot>,
    pub record: u64,
}

/// The file of a chunk being filled.
pub struct ChunkFile {
    /// Shared, so fsyncs run outside the buffer's lock, grouped.
    slot: Arc<Slot>,
    id: [u8; 16],
    /// Bytes of the header and whole records written so far.
    len: u64,
}

impl FileStore {
    /// Opens (creating) the buffer directory, takes its lock and recovers
    /// every chunk in it, oldest first. `keep_free` bounds the free slots
    /// kept for reuse. The chunks past the first `memory_limit` bytes come
    /// back without their events (empty `data`): they stay on disk only.
    pub fn open(
        dir: &Path,
        output: &str,
        keep_free: usize,
        memory_limit: usize,
    ) -> Result<(FileStore, Vec<Recovered>), String> {
        fs::create_dir_all(dir)
            .map_err(|e| format!("{output}: cannot create buffer path {}: {e}", dir.display()))?;
        let lock_path = dir.join("buffer.lock");
        let lock = PidLock::acquire(&lock_path).map_err(|e| match e {
            LockError::Io(e) => format!("{output}: cannot open {}: {e}", lock_path.display()),
            held => format!(
                "{output}: buffer path {} is {held} (lock {}); give each output its own path",
                dir.display(),
                lock_path.display()
            ),
        })?;
        let store = FileStore {
            dir: dir.to_path_buf(),
            _lock: lock,
            free: Mutex::new(Vec::new()),
            keep_free: keep_free.clamp(1, MAX_FREE_SLOTS),
        };
        let recovered = store.recover(output, memory_limit);
        Ok((store, recovered))
    }

    /// Starts the file of a new chunk: a free slot when there is one.
    pub fn create(&self, id: &[u8; 16], tag: &str) -> io::Result<ChunkFile> {
        let reused = self.free.lock().expect("free slots").pop();
        let slot = match reused {
            Some(slot) => slot,
            None => {
                let (file, path) = create_unique(&self.dir, &format!("slot-{}", hex::encode(id)))?;
                Slot::new(file, path)
            }
        };
        match start_chunk(slot.clone(), id, tag) {
            Ok(f) => Ok(f),
            Err(e) => {
                // A disk that filled up mid-header: the slot stays free.
                self.release(slot);
                Err(e)
            }
        }
    }

    /// Frees a delivered chunk's slot: kept for the next chunk, or deleted
    /// when enough free ones are kept already.
    pub fn release(&self, slot: Arc<Slot>) {
        let mut free = self.free.lock().expect("free slots");
        if free.len() < self.keep_free && slot.file.write_all_at(FREE_MAGIC, 0).is_ok() {
            free.push(slot);
            return;
        }
        drop(free);
        if let Err(e) = fs::remove_file(&slot.path) {
            tracing::warn!(file = %slot.path.display(), error = %e, "cannot remove a delivered chunk file");
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

pub(super) fn open_slot(path: &Path) -> io::Result<Arc<Slot>> {
    let file = OpenOptions::new().read(true).write(true).open(path)?;
    Ok(Slot::new(file, path.to_path_buf()))
}

/// Writes the header of chunk `id` at the start of `slot`.
pub(super) fn start_chunk(slot: Arc<Slot>, id: &[u8; 16], tag: &str) -> io::Result<ChunkFile> {
    let mut h = Vec::with_capacity(18 + ID_LEN + tag.len());
    h.extend_from_slice(MAGIC);
    h.push(VERSION);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    h.extend_from_slice(&now.to_be_bytes());
    h.extend_from_slice(id);
    h.extend_from_slice(&(tag.len() as u16).to_be_bytes());
    h.extend_from_slice(tag.as_bytes());
    slot.file.write_all_at(&h, 0)?;
    Ok(ChunkFile {
        slot,
        id: *id,
        len: h.len() as u64,
    })
}

/// Writes every byte of `bufs` at `offset` (positional and vectored: std
/// has neither together).
fn write_all_vectored_at(f: &File, bufs: &[&[u8]], mut offset: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let (mut i, mut off) = (0, 0);
    while i < bufs.len() {
        let iov: Vec<libc::iovec> = std::iter::once(&bufs[i][off..])
            .chain(bufs[i + 1..].iter().copied())
            .take(1024)
            .map(|b| libc::iovec {
                iov_base: b.as_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            })
            .collect();
        // SAFETY: every iovec points into a slice borrowed for this call.
        let n = unsafe {
            libc::pwritev(
                f.as_raw_fd(),
                iov.as_ptr(),
                iov.len() as libc::c_int,
                offset as libc::off_t,
            )
        };
        let mut n = match n {
            0 => return Err(io::ErrorKind::WriteZero.into()),
            n if n < 0 => {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            n => n as usize,
        };
        offset += n as u64;
        while i < bufs.len() && n >= bufs[i].len() - off {
            n -= bufs[i].len() - off;
            i += 1;
            off = 0;
        }
        off += n;
    }
    Ok(())
}

impl ChunkFile {
    /// Appends one batch as a record: the batch's parts go out in vectored
    /// writes, without first being copied together, and the record header
    /// after them (see the module comment).
    ///
    /// `ids` are the senders' chunk ids of the batch: kept with the data, so
    /// a restarted nagare still knows which resends it already stored.
    pub fn append(&mut self, parts: &[Bytes], count: u32, ids: &[Bytes]) -> io::Result<()> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let mut id_block = Vec::new();
        for id in ids {
            let n = id.len().min(u16::MAX as usize);
            id_block.extend_from_slice(&(n as u16).to_be_bytes());
            id_block.extend_from_slice(&id[..n]);
        }
        let mut crc = crc32fast::Hasher::new();
        crc.update(&id_block);
        for p in parts {
            crc.update(p);
        }
        let mut head = [0u8; RECORD_HEADER];
        head[..ID_LEN].copy_from_slice(&self.id);
        head[ID_LEN..ID_LEN + 4].copy_from_slice(&(len as u32).to_be_bytes());
        head[ID_LEN + 4..ID_LEN + 8].copy_from_slice(&count.to_be_bytes());
        head[ID_LEN + 8..ID_LEN + 12].copy_from_slice(&crc.finalize().to_be_bytes());
        head[ID_LEN + 12..].copy_from_slice(&(id_block.len() as u32).to_be_bytes());
        let mut body: Vec<&[u8]> = Vec::with_capacity(parts.len() + 1);
        body.push(&id_block);
        body.extend(parts.iter().map(|p| &p[..]));
        let file = &self.slot.file;
        write_all_vectored_at(file, &body, self.len + RECORD_HEADER as u64)?;
        file.write_all_at(&head, self.len)?;
        self.len += (RECORD_HEADER + id_block.len() + len) as u64;
        self.slot.written.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// What the last append waits for to be durable.
    pub fn ticket(&self) -> SyncTicket {
        SyncTicket {
            slot: self.slot.clone(),
            record: self.slot.written.load(Ordering::Acquire),
        }
    }

    /// The slot, to keep with the chunk until it is delivered.
    pub fn slot(&self) -> &Arc<Slot> {
        &self.slot
    }
}

/// Creates `dir/<stem>.chunk`, or `<stem>-1.chunk`, `<stem>-2.chunk`… when
/// that name is taken. A chunk id names the file it starts, and ids derived
/// from a sender's chunk (the forward input's `keep_chunks`) come again when
/// the sender resends that chunk: the file of the first copy may still be
/// there (in use, or kept free for reuse). The name is only a name: the id
/// that counts is the one in the header.
pub(super) fn create_unique(dir: &Path, stem: &str) -> io::Result<(File, PathBuf)> {
    let mut n = 0u32;
    loop {
        let path = if n == 0 {
            dir.join(format!("{stem}.chunk"))
        } else {
            dir.join(format!("{stem}-{n}.chunk"))
        };
        match OpenOptions::new()
            .create_new(true)
            .read(true)
            .write(true)
            .open(&path)
        {
            Ok(f) => return Ok((f, path)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::recovery::read_chunk_file;
    use super::super::testing::entry;
    use super::*;

    #[test]
    fn a_delivered_chunks_file_is_reused_and_its_old_bytes_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = FileStore::open(dir.path(), "t", 1, usize::MAX).unwrap();
        let mut a = store
            .create(&[1; 16], "long.tag.of.the.first.chunk")
            .unwrap();
        for i in 0..20 {
            a.append(&[entry(i)], 1, &[]).unwrap();
        }
        let slot = a.slot().clone();
        store.release(slot.clone());
        // The free slot holds nothing to deliver.
        assert!(read_chunk_file(&slot.path).unwrap().is_none());
        // The next chunk overwrites it; the first chunk's records after it are
        // not the new chunk's.
        let mut b = store.create(&[2; 16], "b").unwrap();
        assert!(Arc::ptr_eq(b.slot(), &slot), "the free slot is reused");
        b.append(&[entry(7), entry(8)], 2, &[]).unwrap();
        // Two more live chunks need new files; freed, one is kept
        // (`keep_free` = 1) and the other deleted.
        let c = store.create(&[3; 16], "c").unwrap();
        let d = store.create(&[4; 16], "d").unwrap();
        assert!(!Arc::ptr_eq(c.slot(), &slot));
        let (c_path, d_path) = (c.slot().path.clone(), d.slot().path.clone());
        store.release(c.slot().clone());
        store.release(d.slot().clone());
        assert!(c_path.exists());
        assert!(!d_path.exists());
        drop(store);

        let (store, rec) = FileStore::open(dir.path(), "t", 1, usize::MAX).unwrap();
        assert_eq!(rec.len(), 1);
        assert_eq!(
            (rec[0].id, rec[0].tag.as_str(), rec[0].count),
            ([2; 16], "b", 2)
        );
        assert_eq!(&rec[0].data[..], &[0x92, 7, 0x80, 0x92, 8, 0x80]);
        // The free file found at start is reused.
        let d = store.create(&[5; 16], "e").unwrap();
        assert_eq!(d.slot().path, c_path);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_syncs_all_finish_even_when_some_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = FileStore::open(dir.path(), "t", 4, usize::MAX).unwrap();
        let mut f = store.create(&[1; 16], "t").unwrap();
        let mut tasks = Vec::new();
        for i in 0..200u8 {
            f.append(&[entry(i)], 1, &[]).unwrap();
            let t = f.ticket();
            if i % 3 == 0 {
                // A waiter that gives up at once (its connection closed).
                let _ =
                    tokio::time::timeout(std::time::Duration::ZERO, t.slot.sync_to(t.record)).await;
            } else {
                tasks.push(tokio::spawn(async move { t.slot.sync_to(t.record).await }));
            }
        }
        let all = async {
            for t in tasks {
                t.await.unwrap().unwrap();
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(20), all)
            .await
            .expect("every sync finishes");
        assert_eq!(*f.slot().synced.borrow(), 200);
        // A dropped waiter's fsync may still be running on its blocking
        // thread after every other waiter was answered (the timer can fire
        // after its waiter started one); it must uncount itself when done.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while f.slot().inflight.load(Ordering::Acquire) != 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "an fsync stayed counted in flight"
            );
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    }

    #[tokio::test]
    async fn a_waiter_dropped_at_its_first_pause_leaves_nothing_counted() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = FileStore::open(dir.path(), "t", 4, usize::MAX).unwrap();
        let mut f = store.create(&[1; 16], "t").unwrap();
        for round in 1..=3u8 {
            f.append(&[entry(round)], 1, &[]).unwrap();
            let t = f.ticket();
            // Polled once (it pauses to let other appends go first), then dropped.
            let mut first = Box::pin(t.slot.sync_to(t.record));
            assert!(futures_poll_once(first.as_mut()).await.is_none());
            drop(first);
            assert_eq!(f.slot().inflight.load(Ordering::Acquire), 0);
        }
        let t = f.ticket();
        tokio::time::timeout(std::time::Duration::from_secs(20), t.slot.sync_to(t.record))
            .await
            .expect("a later sync is not blocked")
            .unwrap();
    }

    /// Polls a future once: `Some` with its output if it finished.
    async fn futures_poll_once<F: std::future::Future + Unpin>(f: F) -> Option<F::Output> {
        let mut f = Some(f);
        std::future::poll_fn(|cx| {
            let fut = f.as_mut().expect("polled once");
            std::task::Poll::Ready(match std::pin::Pin::new(fut).poll(cx) {
                std::task::Poll::Ready(v) => Some(v),
                std::task::Poll::Pending => None,
            })
        })
        .await
    }
}
