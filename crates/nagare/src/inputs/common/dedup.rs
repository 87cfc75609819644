//! Chunk ids recently acknowledged by a forward input, so a sender's resend of
//! a chunk that was already stored (its ack got lost) is acked again without
//! being stored twice. nagare's forward output resends a chunk with the same
//! id, and so does Fluentd's out_forward.
//!
//! The window is bounded (oldest ids are forgotten first) and optionally kept
//! in a file, one hex id per line, so it survives a restart.

use std::collections::{HashSet, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use bytes::Bytes;

pub struct RecentIds {
    cap: usize,
    inner: Mutex<Inner>,
}

struct Inner {
    set: HashSet<Bytes>,
    order: VecDeque<Bytes>,
    log: Option<Log>,
}

struct Log {
    path: PathBuf,
    file: File,
    lines: usize,
}

impl RecentIds {
    /// `cap` ids at most; with `path`, loads the ids saved there and keeps
    /// appending to it.
    pub fn open(cap: usize, path: Option<&Path>) -> Result<RecentIds, String> {
        let mut inner = Inner {
            set: HashSet::new(),
            order: VecDeque::new(),
            log: None,
        };
        if let Some(path) = path {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)
                    .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            }
            let mut lines = 0;
            if let Ok(f) = File::open(path) {
                for line in BufReader::new(f).lines() {
                    let line = line.map_err(|e| format!("reading {}: {e}", path.display()))?;
                    // A line torn by a crash is not valid hex: skip it.
                    if let Ok(id) = hex::decode(line.trim()) {
                        push(&mut inner, cap, Bytes::from(id));
                        lines += 1;
                    }
                }
            }
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
            inner.log = Some(Log {
                path: path.to_path_buf(),
                file,
                lines,
            });
        }
        Ok(RecentIds {
            cap,
            inner: Mutex::new(inner),
        })
    }

    pub fn contains(&self, id: &[u8]) -> bool {
        self.inner.lock().expect("recent ids").set.contains(id)
    }

    /// Remembers ids that were just stored and acked.
    pub fn insert_all(&self, ids: &[Bytes]) {
        let mut g = self.inner.lock().expect("recent ids");
        let mut text = String::new();
        for id in ids {
            push(&mut g, self.cap, Bytes::copy_from_slice(id));
            text.push_str(&hex::encode(id));
            text.push('\n');
        }
        let cap = self.cap;
        let Inner { order, log, .. } = &mut *g;
        if let Some(log) = log {
            if let Err(e) = log.file.write_all(text.as_bytes()) {
                tracing::warn!(path = %log.path.display(), error = %e, "cannot save acked chunk ids");
            }
            log.lines += ids.len();
            if log.lines > 2 * cap.max(1) {
                log.compact(order);
            }
        }
    }
}

impl Log {
    /// Rewrites the file with the ids still in the window.
    fn compact(&mut self, order: &VecDeque<Bytes>) {
        let tmp = self.path.with_extension("tmp");
        let text: String = order.iter().map(|id| hex::encode(id) + "\n").collect();
        let res = std::fs::write(&tmp, text.as_bytes())
            .and_then(|_| std::fs::rename(&tmp, &self.path))
            .and_then(|_| OpenOptions::new().append(true).open(&self.path));
        match res {
            Ok(f) => {
                self.file = f;
                self.lines = order.len();
            }
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot compact the acked chunk ids file")
            }
        }
    }
}

fn push(inner: &mut Inner, cap: usize, id: Bytes) {
    if cap == 0 || inner.set.contains(&id) {
        return;
    }
    if inner.order.len() >= cap {
        if let Some(old) = inner.order.pop_front() {
            inner.set.remove(&old);
        }
    }
    inner.set.insert(id.clone());
    inner.order.push_back(id);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_window_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ids");
        let r = RecentIds::open(3, Some(&path)).unwrap();
        for i in 0..5u8 {
            r.insert_all(&[Bytes::from(vec![0xa1, b'a' + i])]);
        }
        assert!(!r.contains(&[0xa1, b'a']), "the oldest ids are forgotten");
        assert!(r.contains(&[0xa1, b'e']));
        drop(r);
        let r = RecentIds::open(3, Some(&path)).unwrap();
        assert!(r.contains(&[0xa1, b'c']) && r.contains(&[0xa1, b'e']));
        assert!(!r.contains(&[0xa1, b'b']));
        let lines = std::fs::read_to_string(&path).unwrap().lines().count();
        assert!(lines <= 6, "the file is compacted: {lines} lines");
    }
}
