//! The spill file: an append-only file of `(tag, count, entries)` records that
//! holds events the memory buffer had no room for, read back in order.
//!
//! Record layout: `u32 LE tag length, tag, u32 LE count, u32 LE entries
//! length, entries` (entries are concatenated msgpack `[time, record]`).
//! A file left by an earlier process is read from the start; a torn record
//! at its end (a crash mid-write) is cut off.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const HEADER: usize = 12;
const WBUF_FLUSH: usize = 64 << 10;
/// Appended records reach the file and are fsync'd at most this long after
/// they were appended, so a kill -9 (or power loss) loses at most this much.
pub(crate) const SYNC_INTERVAL: std::time::Duration = std::time::Duration::from_millis(200);

pub(crate) struct Spill {
    path: PathBuf,
    file: File,
    /// Bytes already in the file.
    file_len: u64,
    /// Next byte to read.
    read_pos: u64,
    /// Appended records not yet written to the file.
    wbuf: Vec<u8>,
    limit: u64,
    /// Events in the spill (file + wbuf) not yet read back.
    events: u64,
    /// Events in `wbuf`, not yet in the file.
    wbuf_events: u64,
    /// Events written to the file since it was opened (what `stats.spilled` counts).
    written: u64,
    /// When the oldest record not yet fsync'd was appended.
    unsynced_since: Option<std::time::Instant>,
}

pub(crate) struct SpillRecord {
    pub tag: String,
    pub count: u32,
    pub entries: Vec<u8>,
}

impl Spill {
    pub fn open(path: &Path, limit: u64) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let len = file.metadata()?.len();
        let mut s = Spill {
            path: path.to_path_buf(),
            file,
            file_len: len,
            read_pos: 0,
            wbuf: Vec::new(),
            limit,
            events: 0,
            wbuf_events: 0,
            written: 0,
            unsynced_since: None,
        };
        // Count what an earlier process left, cutting off a torn tail.
        let mut pos = 0u64;
        let mut hdr = [0u8; HEADER];
        loop {
            if pos + HEADER as u64 > len {
                break;
            }
            s.file.read_exact_at(&mut hdr[..4], pos)?;
            let tl = u32::from_le_bytes(hdr[..4].try_into().unwrap()) as u64;
            if pos + 4 + tl + 8 > len {
                break;
            }
            let mut rest = [0u8; 8];
            s.file.read_exact_at(&mut rest, pos + 4 + tl)?;
            let count = u32::from_le_bytes(rest[..4].try_into().unwrap()) as u64;
            let el = u32::from_le_bytes(rest[4..].try_into().unwrap()) as u64;
            let end = pos + 4 + tl + 8 + el;
            if end > len {
                break;
            }
            s.events += count;
            pos = end;
        }
        if pos != len {
            s.file.set_len(pos)?;
            s.file_len = pos;
        }
        Ok(s)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn is_empty(&self) -> bool {
        self.events == 0
    }

    pub fn events(&self) -> u64 {
        self.events
    }

    /// Appends a record; `Ok(false)` when the size limit leaves no room.
    pub fn append(&mut self, tag: &str, count: u32, entries: &[u8]) -> io::Result<bool> {
        let n = (HEADER + tag.len() + entries.len()) as u64;
        if self.file_len + self.wbuf.len() as u64 + n > self.limit {
            return Ok(false);
        }
        self.wbuf
            .extend_from_slice(&(tag.len() as u32).to_le_bytes());
        self.wbuf.extend_from_slice(tag.as_bytes());
        self.wbuf.extend_from_slice(&count.to_le_bytes());
        self.wbuf
            .extend_from_slice(&(entries.len() as u32).to_le_bytes());
        self.wbuf.extend_from_slice(entries);
        self.events += count as u64;
        self.wbuf_events += count as u64;
        self.unsynced_since
            .get_or_insert_with(std::time::Instant::now);
        if self.wbuf.len() >= WBUF_FLUSH {
            self.sync_wbuf()?;
        }
        Ok(true)
    }

    fn sync_wbuf(&mut self) -> io::Result<()> {
        if !self.wbuf.is_empty() {
            self.file.write_all_at(&self.wbuf, self.file_len)?;
            self.file_len += self.wbuf.len() as u64;
            self.wbuf.clear();
            self.written += self.wbuf_events;
            self.wbuf_events = 0;
        }
        Ok(())
    }

    /// Events written to the file since it was opened (not those still in
    /// the write buffer).
    pub fn written(&self) -> u64 {
        self.written
    }

    /// When the records appended first since the last fsync are due to be
    /// on disk (None: nothing waits).
    pub fn sync_due(&self) -> Option<std::time::Instant> {
        self.unsynced_since.map(|t| t + SYNC_INTERVAL)
    }

    /// Writes buffered records to the file and syncs it.
    pub fn persist(&mut self) -> io::Result<()> {
        self.sync_wbuf()?;
        self.file.sync_data()?;
        self.unsynced_since = None;
        Ok(())
    }

    /// Reads records in order until about `max_bytes` of entries were read.
    pub fn read(&mut self, max_bytes: usize) -> io::Result<Vec<SpillRecord>> {
        self.sync_wbuf()?;
        let mut out = Vec::new();
        let mut got = 0usize;
        while self.read_pos < self.file_len && (got < max_bytes || out.is_empty()) {
            let mut l4 = [0u8; 4];
            self.file.read_exact_at(&mut l4, self.read_pos)?;
            let tl = u32::from_le_bytes(l4) as usize;
            let mut tag = vec![0u8; tl];
            self.file.read_exact_at(&mut tag, self.read_pos + 4)?;
            let mut rest = [0u8; 8];
            self.file
                .read_exact_at(&mut rest, self.read_pos + 4 + tl as u64)?;
            let count = u32::from_le_bytes(rest[..4].try_into().unwrap());
            let el = u32::from_le_bytes(rest[4..].try_into().unwrap()) as usize;
            let mut entries = vec![0u8; el];
            self.file
                .read_exact_at(&mut entries, self.read_pos + (HEADER + tl) as u64)?;
            self.read_pos += (HEADER + tl + el) as u64;
            self.events -= count as u64;
            got += el;
            out.push(SpillRecord {
                tag: String::from_utf8(tag)
                    .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "spill tag"))?,
                count,
                entries,
            });
        }
        if self.read_pos >= self.file_len {
            // Drained: start the file over.
            self.file.set_len(0)?;
            self.file_len = 0;
            self.read_pos = 0;
        } else {
            // Keep a restart from sending what was read again: compact when the
            // read part is large (rare; the drain usually empties the file).
            if self.read_pos > (64 << 20) {
                self.compact()?;
            }
        }
        Ok(out)
    }

    /// Writes `records` in front of what the file holds (they are older),
    /// then syncs: used at close for events that were not delivered in time.
    pub fn prepend_and_persist(&mut self, records: &[(String, u32, Vec<u8>)]) -> io::Result<()> {
        self.sync_wbuf()?;
        let mut tmp_path = self.path.clone().into_os_string();
        tmp_path.push(".tmp");
        let tmp_path = PathBuf::from(tmp_path);
        let tmp = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp_path)?;
        let mut pos = 0u64;
        let mut rec = Vec::new();
        for (tag, count, entries) in records {
            rec.clear();
            rec.extend_from_slice(&(tag.len() as u32).to_le_bytes());
            rec.extend_from_slice(tag.as_bytes());
            rec.extend_from_slice(&count.to_le_bytes());
            rec.extend_from_slice(&(entries.len() as u32).to_le_bytes());
            rec.extend_from_slice(entries);
            tmp.write_all_at(&rec, pos)?;
            pos += rec.len() as u64;
            self.events += *count as u64;
            self.written += *count as u64;
        }
        let mut off = self.read_pos;
        let mut chunk = vec![0u8; 1 << 20];
        while off < self.file_len {
            let n = ((self.file_len - off) as usize).min(chunk.len());
            self.file.read_exact_at(&mut chunk[..n], off)?;
            tmp.write_all_at(&chunk[..n], pos)?;
            off += n as u64;
            pos += n as u64;
        }
        tmp.sync_data()?;
        std::fs::rename(&tmp_path, &self.path)?;
        self.file = tmp;
        self.file_len = pos;
        self.read_pos = 0;
        Ok(())
    }

    fn compact(&mut self) -> io::Result<()> {
        let mut rest = vec![0u8; (self.file_len - self.read_pos) as usize];
        self.file.read_exact_at(&mut rest, self.read_pos)?;
        self.file.write_all_at(&rest, 0)?;
        self.file.set_len(rest.len() as u64)?;
        self.file_len = rest.len() as u64;
        self.read_pos = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_read_in_order_and_reopen() {
        let dir = std::env::temp_dir().join(format!("nagare-spill-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("s.bin");
        let _ = std::fs::remove_file(&p);
        let mut s = Spill::open(&p, 1 << 20).unwrap();
        for i in 0..10u8 {
            assert!(s.append("t", 1, &[i]).unwrap());
        }
        s.persist().unwrap();
        drop(s);
        // A torn tail is cut off at reopen.
        let f = OpenOptions::new().append(true).open(&p).unwrap();
        use std::io::Write;
        (&f).write_all(&[5, 0, 0, 0, b'x']).unwrap();
        let mut s = Spill::open(&p, 1 << 20).unwrap();
        assert_eq!(s.events(), 10);
        let recs = s.read(3).unwrap();
        assert_eq!(recs.len(), 3);
        assert_eq!(recs[2].entries, vec![2]);
        let recs = s.read(1 << 20).unwrap();
        assert_eq!(recs.len(), 7);
        assert_eq!(recs[6].entries, vec![9]);
        assert!(s.is_empty());
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 0);
        // The limit is enforced.
        let mut small = Spill::open(&dir.join("small.bin"), 20).unwrap();
        assert!(small.append("t", 1, &[0; 4]).unwrap());
        assert!(!small.append("t", 1, &[0; 4]).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
