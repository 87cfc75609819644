//! Chunk files of the file buffer: one append-only file per chunk, recovered
//! at start.
//!
//! Layout of `<path>/<chunk id>.chunk`:
//!
//! ```text
//! header:  "NAGAREB" version(u8=1) created(u64 unix secs) tag_len(u16) tag
//! records: len(u32) count(u32) crc32(u32) ids_len(u32) ids payload
//!          ids = the senders' chunk ids of the batch, each u16 length + bytes;
//!          crc32 covers ids and payload
//! ```
//!
//! All integers are big-endian. Each record is one appended batch; its
//! payload is PackedForward entries, so recovery is a read, not a parse. A
//! header that carried the chunk's count and checksum could not stay
//! append-only, so each record carries its own; a record cut short by a crash
//! (torn tail) is truncated away, and a record whose checksum fails moves the
//! whole file to `<path>/quarantine/`.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

const MAGIC: &[u8; 7] = b"NAGAREB";
const VERSION: u8 = 2;
const RECORD_HEADER: usize = 16;

pub struct FileStore {
    dir: PathBuf,
    /// Held open for the flock that keeps a second process out.
    _lock: File,
}

/// A chunk found on disk at start.
pub struct Recovered {
    pub id: [u8; 16],
    pub tag: String,
    pub data: Bytes,
    pub count: u32,
    pub path: PathBuf,
    /// The senders' chunk ids stored with the batches (for the dedup window).
    pub ids: Vec<Bytes>,
}

/// A chunk file with group commit: an fsync covers every record written
/// before it started, so appends waiting at the same time share one fsync.
pub struct SyncedFile {
    file: File,
    /// Records appended so far.
    written: AtomicU64,
    /// Records known to be on disk.
    synced: AtomicU64,
    /// One fsync at a time; waiters behind it usually find their record synced.
    lock: tokio::sync::Mutex<()>,
}

impl SyncedFile {
    fn new(file: File) -> Arc<SyncedFile> {
        Arc::new(SyncedFile {
            file,
            written: AtomicU64::new(0),
            synced: AtomicU64::new(0),
            lock: tokio::sync::Mutex::new(()),
        })
    }

    /// Returns once record number `record` (and all before it) is on disk.
    pub async fn sync_to(self: &Arc<Self>, record: u64) -> io::Result<()> {
        if self.synced.load(Ordering::Acquire) >= record {
            return Ok(());
        }
        let _one_at_a_time = self.lock.lock().await;
        if self.synced.load(Ordering::Acquire) >= record {
            return Ok(());
        }
        let upto = self.written.load(Ordering::Acquire);
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.file.sync_data())
            .await
            .map_err(io::Error::other)??;
        self.synced.fetch_max(upto, Ordering::Release);
        Ok(())
    }
}

/// What an append must wait for before its ack: record `record` of `file`.
#[derive(Clone)]
pub struct SyncTicket {
    pub file: Arc<SyncedFile>,
    pub record: u64,
}

pub struct ChunkFile {
    /// Shared, so fsyncs run outside the buffer's lock, grouped.
    file: Arc<SyncedFile>,
    pub path: PathBuf,
    /// Bytes of whole records (and the header) written so far.
    len: u64,
}

impl FileStore {
    /// Opens (creating) the buffer directory, takes its lock and recovers
    /// every chunk in it, oldest first.
    pub fn open(dir: &Path, output: &str) -> Result<(FileStore, Vec<Recovered>), String> {
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
        };
        let recovered = store.recover(output);
        Ok((store, recovered))
    }

    fn recover(&self, output: &str) -> Vec<Recovered> {
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
        for (_, path) in found {
            match read_chunk(&path) {
                Ok(Some(r)) => out.push(r),
                Ok(None) => {
                    let _ = fs::remove_file(&path);
                }
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

    fn quarantine(&self, path: &Path, why: &str, output: &str) {
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

    /// Starts the file of a new chunk.
    pub fn create(&self, id: &[u8; 16], tag: &str) -> io::Result<ChunkFile> {
        create_chunk_file(&self.dir, id, tag)
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
        let mut f = create_chunk_file(&dir, id, tag)?;
        f.append(segments, count, &[])?;
        f.file.file.sync_data()?;
        Ok(f.path)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Writes every byte of `bufs` (std's write_all_vectored is not stable yet).
fn write_all_vectored(mut f: &File, bufs: &[&[u8]]) -> io::Result<()> {
    let (mut i, mut off) = (0, 0);
    while i < bufs.len() {
        let slices: Vec<io::IoSlice> = std::iter::once(io::IoSlice::new(&bufs[i][off..]))
            .chain(bufs[i + 1..].iter().map(|b| io::IoSlice::new(b)))
            .take(1024)
            .collect();
        let mut n = match f.write_vectored(&slices) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
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

fn create_chunk_file(dir: &Path, id: &[u8; 16], tag: &str) -> io::Result<ChunkFile> {
    let path = dir.join(format!("{}.chunk", hex::encode(id)));
    let mut file = OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(&path)?;
    let mut h = Vec::with_capacity(19 + tag.len());
    h.extend_from_slice(MAGIC);
    h.push(VERSION);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    h.extend_from_slice(&now.to_be_bytes());
    h.extend_from_slice(&(tag.len() as u16).to_be_bytes());
    h.extend_from_slice(tag.as_bytes());
    if let Err(e) = file.write_all(&h) {
        // A disk that filled up mid-header leaves no half-made chunk behind.
        let _ = fs::remove_file(&path);
        return Err(e);
    }
    Ok(ChunkFile {
        file: SyncedFile::new(file),
        path,
        len: h.len() as u64,
    })
}

impl ChunkFile {
    /// Appends one batch as a record: the header and the batch's parts go
    /// out in vectored writes, without first being copied together.
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
        head[..4].copy_from_slice(&(len as u32).to_be_bytes());
        head[4..8].copy_from_slice(&count.to_be_bytes());
        head[8..12].copy_from_slice(&crc.finalize().to_be_bytes());
        head[12..].copy_from_slice(&(id_block.len() as u32).to_be_bytes());
        let mut bufs: Vec<&[u8]> = Vec::with_capacity(parts.len() + 2);
        bufs.push(&head);
        bufs.push(&id_block);
        bufs.extend(parts.iter().map(|p| &p[..]));
        match write_all_vectored(&self.file.file, &bufs) {
            Ok(()) => {
                self.len += (RECORD_HEADER + id_block.len() + len) as u64;
                self.file.written.fetch_add(1, Ordering::AcqRel);
                Ok(())
            }
            Err(e) => {
                // A short write (disk full) must not leave half a record that
                // later records would follow.
                let _ = self.file.file.set_len(self.len);
                Err(e)
            }
        }
    }

    /// What the last append waits for to be durable.
    pub fn ticket(&self) -> SyncTicket {
        SyncTicket {
            file: self.file.clone(),
            record: self.file.written.load(Ordering::Acquire),
        }
    }
}

/// Reads a chunk file: `Ok(None)` for a chunk without events (nothing to
/// deliver), `Err` for a corrupt one. A torn last record is cut off.
fn read_chunk(path: &Path) -> Result<Option<Recovered>, String> {
    let name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .ok_or("bad file name")?;
    let id: [u8; 16] = hex::decode(name)
        .ok()
        .and_then(|v| v.try_into().ok())
        .ok_or("file name is not a chunk id")?;
    let mut raw = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut raw))
        .map_err(|e| format!("cannot read: {e}"))?;
    if raw.len() < 18 || &raw[..7] != MAGIC {
        return Err("not a nagare chunk file (bad magic)".into());
    }
    if raw[7] != VERSION {
        return Err(format!("unknown chunk format version {}", raw[7]));
    }
    let tag_len = u16::from_be_bytes([raw[16], raw[17]]) as usize;
    let mut pos = 18 + tag_len;
    if raw.len() < pos {
        return Err("header cut short".into());
    }
    let tag = String::from_utf8(raw[18..pos].to_vec()).map_err(|_| "tag is not UTF-8")?;
    let mut data = BytesMut::with_capacity(raw.len() - pos);
    let mut count = 0u32;
    let mut ids = Vec::new();
    while pos < raw.len() {
        if raw.len() - pos < RECORD_HEADER {
            break; // torn record header
        }
        let be = |i: usize| u32::from_be_bytes([raw[i], raw[i + 1], raw[i + 2], raw[i + 3]]);
        let (len, n, crc, ids_len) = (
            be(pos) as usize,
            be(pos + 4),
            be(pos + 8),
            be(pos + 12) as usize,
        );
        let id_start = pos + RECORD_HEADER;
        let start = id_start.saturating_add(ids_len);
        if raw.len() < start || raw.len() - start < len {
            break; // torn record
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
    if pos < raw.len() {
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
        data: data.freeze(),
        count,
        path: path.to_path_buf(),
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
        let (store, rec) = FileStore::open(dir.path(), "t").unwrap();
        assert!(rec.is_empty());
        let mut a = store.create(&[1; 16], "app.a").unwrap();
        a.append(&[entry(1), entry(2)], 2, &[Bytes::from_static(b"\xa2c1")])
            .unwrap();
        a.append(&[entry(3)], 1, &[]).unwrap();
        let mut b = store.create(&[2; 16], "app.b").unwrap();
        b.append(&[entry(4)], 1, &[]).unwrap();
        // A torn tail on a: half a record.
        let mut f = OpenOptions::new().append(true).open(&a.path).unwrap();
        f.write_all(&[0, 0, 0, 9, 0, 0]).unwrap();
        // Corruption in b: flip a payload byte.
        let mut raw = fs::read(&b.path).unwrap();
        let last = raw.len() - 1;
        raw[last] ^= 0xff;
        fs::write(&b.path, raw).unwrap();
        assert!(
            FileStore::open(dir.path(), "t").is_err(),
            "a second open while the first holds the lock must fail"
        );
        drop(store);

        let (_store, rec) = FileStore::open(dir.path(), "t").unwrap();
        assert_eq!(rec.len(), 1);
        assert_eq!((rec[0].tag.as_str(), rec[0].count), ("app.a", 3));
        assert_eq!(
            &rec[0].data[..],
            &[0x92, 1, 0x80, 0x92, 2, 0x80, 0x92, 3, 0x80]
        );
        assert!(dir
            .path()
            .join("quarantine")
            .join(b.path.file_name().unwrap())
            .exists());
        // The torn tail was cut off on disk too.
        let (_, again) = (drop(_store), FileStore::open(dir.path(), "t").unwrap().1);
        assert_eq!(again[0].count, 3);
    }
}
