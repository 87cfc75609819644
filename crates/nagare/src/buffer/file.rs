//! Chunk files of the file buffer: one file (a "slot") per live chunk,
//! recovered at start, and reused once its chunk was delivered.
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
//! A record cut short by the end of the file (torn tail) is truncated away;
//! a record whose checksum fails moves the whole file to `<path>/quarantine/`.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};

const MAGIC: &[u8; 7] = b"NAGAREB";
/// Replaces MAGIC in a slot whose chunk was delivered.
const FREE_MAGIC: &[u8; 7] = b"NAGAREF";
const VERSION: u8 = 3;
const ID_LEN: usize = 16;
const RECORD_HEADER: usize = ID_LEN + 16;
/// Free slots kept for reuse at most; more are deleted.
const MAX_FREE_SLOTS: usize = 64;

pub struct FileStore {
    dir: PathBuf,
    /// Held open for the flock that keeps a second process out.
    _lock: File,
    /// Slots whose chunks were delivered, ready for new chunks.
    free: Mutex<Vec<Arc<Slot>>>,
    /// How many free slots to keep (about as many as chunks fit the buffer).
    keep_free: usize,
}

/// A chunk found on disk at start.
pub struct Recovered {
    pub id: [u8; 16],
    pub tag: String,
    /// The events; empty when the chunk was left on disk only (see `FileStore::open`).
    pub data: Bytes,
    /// Payload bytes of the chunk.
    pub len: usize,
    pub count: u32,
    /// The chunk's file, opened for reuse (set by the buffer's recovery).
    pub slot: Option<Arc<Slot>>,
    /// The senders' chunk ids stored with the batches (for the dedup window).
    pub ids: Vec<Bytes>,
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
    file: File,
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
    fn new(file: File, path: PathBuf) -> Arc<Slot> {
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
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&lock_path)
            .map_err(|e| format!("{output}: cannot open {}: {e}", lock_path.display()))?;
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a descriptor we own; no memory is involved.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(format!(
                "{output}: buffer path {} is in use by another nagare process (lock {}); give each output its own path",
                dir.display(),
                lock_path.display()
            ));
        }
        let store = FileStore {
            dir: dir.to_path_buf(),
            _lock: lock,
            free: Mutex::new(Vec::new()),
            keep_free: keep_free.clamp(1, MAX_FREE_SLOTS),
        };
        let recovered = store.recover(output, memory_limit);
        Ok((store, recovered))
    }

    fn recover(&self, output: &str, memory_limit: usize) -> Vec<Recovered> {
        let mut found: Vec<(std::time::SystemTime, PathBuf)> = fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "chunk"))
            .map(|p| {
                let t = fs::metadata(&p)
                    .and_then(|m| m.modified())
                    .unwrap_or(std::time::UNIX_EPOCH);
                (t, p)
            })
            .collect();
        found.sort();
        let mut out = Vec::new();
        let mut in_memory = 0;
        for (_, path) in found {
            match read_chunk(&path) {
                Ok(Some(mut r)) => match open_slot(&path) {
                    Ok(slot) => {
                        r.slot = Some(slot);
                        if in_memory + r.len <= memory_limit {
                            in_memory += r.len;
                        } else {
                            r.data = Bytes::new();
                        }
                        out.push(r)
                    }
                    Err(e) => tracing::error!(output = %output, file = %path.display(), error = %e,
                        "cannot open a recovered buffer chunk for writing; it is delivered but not reused"),
                },
                Ok(None) => match open_slot(&path) {
                    Ok(slot) => self.release(slot),
                    Err(_) => {
                        let _ = fs::remove_file(&path);
                    }
                },
                Err(why) => self.quarantine(&path, &why, output),
            }
        }
        if !out.is_empty() {
            let events: u64 = out.iter().map(|r| r.count as u64).sum();
            tracing::info!(output = %output, chunks = out.len(), events, path = %self.dir.display(),
                "recovered buffered chunks");
        }
        out
    }

    pub fn quarantine(&self, path: &Path, why: &str, output: &str) {
        let qdir = self.dir.join("quarantine");
        let dest = qdir.join(path.file_name().unwrap_or_default());
        let moved = fs::create_dir_all(&qdir).and_then(|_| fs::rename(path, &dest));
        match moved {
            Ok(()) => {
                tracing::error!(output = %output, file = %path.display(), moved_to = %dest.display(),
                reason = %why, "corrupt buffer chunk quarantined")
            }
            Err(e) => tracing::error!(output = %output, file = %path.display(), reason = %why,
                error = %e, "corrupt buffer chunk could not be moved to quarantine"),
        }
    }

    /// Starts the file of a new chunk: a free slot when there is one.
    pub fn create(&self, id: &[u8; 16], tag: &str) -> io::Result<ChunkFile> {
        let reused = self.free.lock().expect("free slots").pop();
        let slot = match reused {
            Some(slot) => slot,
            None => {
                let path = self.dir.join(format!("slot-{}.chunk", hex::encode(id)));
                let file = OpenOptions::new()
                    .create_new(true)
                    .read(true)
                    .write(true)
                    .open(&path)?;
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

    /// Writes a chunk whose retries ran out to `<path>/dead-letters/`, in the
    /// chunk file format (`nagare replay` sends such files); returns the file.
    pub fn write_dead_letter(
        &self,
        id: &[u8; 16],
        tag: &str,
        segments: &[Bytes],
        count: u32,
    ) -> io::Result<PathBuf> {
        let dir = self.dir.join("dead-letters");
        fs::create_dir_all(&dir)?;
        let path = dir.join(format!("{}.chunk", hex::encode(id)));
        let file = OpenOptions::new()
            .create_new(true)
            .read(true)
            .write(true)
            .open(&path)?;
        let slot = Slot::new(file, path.clone());
        let written = start_chunk(slot.clone(), id, tag)
            .and_then(|mut f| f.append(segments, count, &[]))
            .and_then(|()| slot.file.sync_data());
        if let Err(e) = written {
            let _ = fs::remove_file(&path);
            return Err(e);
        }
        Ok(path)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

fn open_slot(path: &Path) -> io::Result<Arc<Slot>> {
    let file = OpenOptions::new().read(true).write(true).open(path)?;
    Ok(Slot::new(file, path.to_path_buf()))
}

/// Writes the header of chunk `id` at the start of `slot`.
fn start_chunk(slot: Arc<Slot>, id: &[u8; 16], tag: &str) -> io::Result<ChunkFile> {
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

/// Reads a chunk file (buffer chunk or dead letter) for `nagare replay`.
pub fn read_chunk_file(path: &Path) -> Result<Option<Recovered>, String> {
    read_chunk(path)
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

/// Reads a chunk file: `Ok(None)` for a free slot or a chunk without events
/// (nothing to deliver), `Err` for a corrupt one. A torn last record is cut
/// off.
fn read_chunk(path: &Path) -> Result<Option<Recovered>, String> {
    let mut raw = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut raw))
        .map_err(|e| format!("cannot read: {e}"))?;
    if raw.len() >= 7 && &raw[..7] == FREE_MAGIC {
        return Ok(None);
    }
    if raw.is_empty() {
        return Ok(None); // created, then the disk filled up before the header
    }
    if raw.len() < 8 || &raw[..7] != MAGIC {
        return Err("not a nagare chunk file (bad magic)".into());
    }
    if raw[7] != VERSION {
        return Err(format!("unknown chunk format version {}", raw[7]));
    }
    const TAG_AT: usize = 16 + ID_LEN + 2;
    if raw.len() < TAG_AT {
        return Err("header cut short".into());
    }
    let id: [u8; 16] = raw[16..16 + ID_LEN].try_into().expect("16 bytes");
    let tag_len = u16::from_be_bytes([raw[TAG_AT - 2], raw[TAG_AT - 1]]) as usize;
    let mut pos = TAG_AT + tag_len;
    if raw.len() < pos {
        return Err("header cut short".into());
    }
    let tag = String::from_utf8(raw[TAG_AT..pos].to_vec()).map_err(|_| "tag is not UTF-8")?;
    let mut data = BytesMut::with_capacity(raw.len() - pos);
    let mut count = 0u32;
    let mut ids = Vec::new();
    let mut torn = false;
    // Records of this chunk run until the end of the file, or until bytes
    // that do not start with its id (left from the slot's previous chunk).
    while raw.len() - pos >= ID_LEN && raw[pos..pos + ID_LEN] == id {
        if raw.len() - pos < RECORD_HEADER {
            torn = true;
            break;
        }
        let be = |i: usize| u32::from_be_bytes([raw[i], raw[i + 1], raw[i + 2], raw[i + 3]]);
        let h = pos + ID_LEN;
        let (len, n, crc, ids_len) = (be(h) as usize, be(h + 4), be(h + 8), be(h + 12) as usize);
        let id_start = pos + RECORD_HEADER;
        let start = id_start.saturating_add(ids_len);
        if raw.len() < start || raw.len() - start < len {
            torn = true;
            break;
        }
        let id_block = &raw[id_start..start];
        let payload = &raw[start..start + len];
        let mut h = crc32fast::Hasher::new();
        h.update(id_block);
        h.update(payload);
        if h.finalize() != crc {
            return Err(format!("checksum mismatch in the record at byte {pos}"));
        }
        let mut p = 0;
        while p + 2 <= id_block.len() {
            let n = u16::from_be_bytes([id_block[p], id_block[p + 1]]) as usize;
            let end = (p + 2 + n).min(id_block.len());
            ids.push(Bytes::copy_from_slice(&id_block[p + 2..end]));
            p = end;
        }
        if nagare_forward::count_entries(payload).ok() != Some(n) {
            return Err(format!(
                "record at byte {pos} does not hold {n} whole entries"
            ));
        }
        data.extend_from_slice(payload);
        count += n;
        pos = start + len;
    }
    if torn || (pos < raw.len() && raw.len() - pos < ID_LEN && raw[pos..] == id[..raw.len() - pos])
    {
        // Crash in the middle of an append: keep the whole records only.
        let f = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| format!("cannot truncate: {e}"))?;
        f.set_len(pos as u64)
            .map_err(|e| format!("cannot truncate: {e}"))?;
        tracing::warn!(file = %path.display(), kept_bytes = pos, dropped_bytes = raw.len() - pos,
            "buffer chunk had a torn tail (crash during a write); truncated to its last whole record");
    }
    if count == 0 {
        return Ok(None);
    }
    Ok(Some(Recovered {
        id,
        ids,
        tag,
        len: data.len(),
        data: data.freeze(),
        count,
        slot: None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(i: u8) -> Bytes {
        // [i, {}]
        Bytes::from(vec![0x92, i & 0x7f, 0x80])
    }

    #[test]
    fn recovers_truncates_torn_tail_and_quarantines_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let (store, rec) = FileStore::open(dir.path(), "t", 4, usize::MAX).unwrap();
        assert!(rec.is_empty());
        let mut a = store.create(&[1; 16], "app.a").unwrap();
        a.append(&[entry(1), entry(2)], 2, &[Bytes::from_static(b"\xa2c1")])
            .unwrap();
        a.append(&[entry(3)], 1, &[]).unwrap();
        a.append(&[entry(4), entry(5)], 2, &[]).unwrap();
        let mut b = store.create(&[2; 16], "app.b").unwrap();
        b.append(&[entry(4)], 1, &[]).unwrap();
        // A torn tail on a: its last record cut in the middle.
        let a_path = a.slot().path.clone();
        let len = fs::metadata(&a_path).unwrap().len();
        OpenOptions::new()
            .write(true)
            .open(&a_path)
            .unwrap()
            .set_len(len - 2)
            .unwrap();
        // Corruption in b: flip a payload byte.
        let b_path = b.slot().path.clone();
        let mut raw = fs::read(&b_path).unwrap();
        let last = raw.len() - 1;
        raw[last] ^= 0xff;
        fs::write(&b_path, raw).unwrap();
        assert!(
            FileStore::open(dir.path(), "t", 4, usize::MAX).is_err(),
            "a second open while the first holds the lock must fail"
        );
        drop(store);

        let (store, rec) = FileStore::open(dir.path(), "t", 4, usize::MAX).unwrap();
        assert_eq!(rec.len(), 1);
        assert_eq!((rec[0].tag.as_str(), rec[0].count), ("app.a", 3));
        assert_eq!(rec[0].id, [1; 16]);
        assert_eq!(rec[0].ids, vec![Bytes::from_static(b"\xa2c1")]);
        assert_eq!(
            &rec[0].data[..],
            &[0x92, 1, 0x80, 0x92, 2, 0x80, 0x92, 3, 0x80]
        );
        assert!(dir
            .path()
            .join("quarantine")
            .join(b_path.file_name().unwrap())
            .exists());
        // The torn tail was cut off on disk too.
        assert!(fs::metadata(&a_path).unwrap().len() < len - 2);
        drop((store, rec));
        let (_store, again) = FileStore::open(dir.path(), "t", 4, usize::MAX).unwrap();
        assert_eq!(again[0].count, 3);
    }

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
        assert!(read_chunk(&slot.path).unwrap().is_none());
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

    #[test]
    fn dead_letters_are_chunk_files() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = FileStore::open(dir.path(), "t", 4, usize::MAX).unwrap();
        let path = store
            .write_dead_letter(&[9; 16], "dl", &[entry(1), entry(2)], 2)
            .unwrap();
        let r = read_chunk_file(&path).unwrap().unwrap();
        assert_eq!((r.id, r.tag.as_str(), r.count), ([9; 16], "dl", 2));
    }
}
