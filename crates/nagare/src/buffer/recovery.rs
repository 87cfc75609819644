//! Recovery of a file buffer at start: every chunk file in the buffer
//! directory is read back (oldest first) and queued again. A record cut short
//! by the end of the file (torn tail: a crash during a write) is truncated
//! away; a file whose records do not check out (checksum, entry count, magic,
//! version) moves to `<path>/quarantine/` with a log line, and the daemon
//! starts anyway.

use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use nagare_core::metrics::PluginStats;

use super::chunk_file::{
    open_slot, FileStore, Slot, FREE_MAGIC, ID_LEN, MAGIC, RECORD_HEADER, VERSION,
};
use super::{Chunk, Queued, State};

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

/// Queues the recovered chunks in a new buffer's state; returns the
/// senders' chunk ids they hold (for the inputs' dedup windows).
pub(super) fn queue_recovered(
    state: &mut State,
    stats: &PluginStats,
    recovered: Vec<Recovered>,
) -> Vec<Bytes> {
    let mut ids = Vec::new();
    for r in recovered {
        ids.extend(r.ids);
        state.bytes += r.len;
        PluginStats::add(&stats.buffer_chunks, 1);
        // Recovery left the chunks past memory_limit_size on disk only.
        let segments = if r.data.is_empty() {
            state.disk_only += r.len;
            Vec::new()
        } else {
            vec![r.data]
        };
        state.queue.push_back(Queued {
            chunk: Chunk {
                id: r.id,
                tag: Arc::from(r.tag.as_str()),
                len: r.len,
                segments,
                count: r.count,
                positions: None,
            },
            held: r.len,
            slot: r.slot,
        });
    }
    stats.buffer_bytes.store(state.bytes as u64, Relaxed);
    stats
        .buffer_disk_only_bytes
        .store(state.disk_only as u64, Relaxed);
    ids
}

impl FileStore {
    /// Reads every chunk file in the directory back, oldest first. The
    /// chunks past the first `memory_limit` bytes come back without their
    /// events (empty `data`): they stay on disk only.
    pub(super) fn recover(&self, output: &str, memory_limit: usize) -> Vec<Recovered> {
        let mut found: Vec<(std::time::SystemTime, PathBuf)> = fs::read_dir(self.dir())
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
            match read_chunk_file(&path) {
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
            tracing::info!(output = %output, chunks = out.len(), events, path = %self.dir().display(),
                "recovered buffered chunks");
        }
        out
    }

    /// Moves a damaged chunk file to `<path>/quarantine/`.
    pub fn quarantine(&self, path: &Path, why: &str, output: &str) {
        let qdir = self.dir().join("quarantine");
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
}

/// Reads a chunk file (buffer chunk or dead letter; also for `nagare
/// replay`): `Ok(None)` for a free slot or a chunk without events (nothing
/// to deliver), `Err` for a corrupt one. A torn last record is cut off.
pub fn read_chunk_file(path: &Path) -> Result<Option<Recovered>, String> {
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
    use super::super::testing::entry;
    use super::*;

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
}
