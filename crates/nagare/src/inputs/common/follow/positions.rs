//! The tail input's position file (`position_db`): how far each followed
//! file (by inode) has been read, so a restart goes on where it stopped.
//!
//! One JSON object per line, `{"path": …, "inode": …, "offset": …}`. JSON
//! escapes whatever a path holds (tabs, newlines); a path that is not UTF-8
//! is kept byte for byte as `"path_hex"` instead of `"path"`. The path is
//! for people reading the file: positions are found by inode.
//!
//! Saving is crash-safe: the whole file is written to `<db>.tmp`, fsync'd,
//! renamed over the old one, and the folder fsync'd, so after a crash the
//! file is the old one or the new one, never a mix. Saves are skipped while
//! nothing changed and come at most every [`SAVE_EVERY`] while files are
//! being read in bulk (each costs two fsyncs); an idle or stopping input
//! saves at once.
//!
//! The tab-separated format of earlier releases (`path<TAB>inode<TAB>offset`)
//! is still read, so an upgrade does not read every file again; the next save
//! writes the new format.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nagare_core::holder::{LockError, PidLock};
use serde::{Deserialize, Serialize};

/// While files are read in bulk, positions are saved at most this often.
pub const SAVE_EVERY: Duration = Duration::from_secs(1);

/// One line of the position file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    path: Option<String>,
    /// The path's bytes as hex, when they are not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    path_hex: Option<String>,
    inode: u64,
    offset: u64,
}

pub struct Positions {
    /// The position file; None keeps positions in memory only.
    db: Option<PathBuf>,
    /// (path, offset) by inode.
    by_inode: HashMap<u64, (PathBuf, u64)>,
    /// Positions imported from another collector (import.rs), by inode:
    /// used for a file this file does not know yet, when the path matches.
    imported: HashMap<u64, (PathBuf, u64)>,
    /// The position file did not exist when loaded: the first start.
    fresh: bool,
    /// Changed since the last save.
    dirty: bool,
    /// A save that is not urgent waits until then.
    next_save: Instant,
    /// `<position_db>.lock`, held while running: two processes (or two
    /// inputs) saving one position file would lose each other's offsets.
    _lock: Option<PidLock>,
}

/// Takes `<position_db>.lock`, naming the process that holds it.
fn lock(db: &Path, input: &str) -> anyhow::Result<PidLock> {
    let mut lock_path = db.as_os_str().to_owned();
    lock_path.push(".lock");
    let lock_path = PathBuf::from(lock_path);
    PidLock::acquire(&lock_path).map_err(|e| match e {
        LockError::Io(e) => anyhow::anyhow!("{input}: cannot open {}: {e}", lock_path.display()),
        held => anyhow::anyhow!(
            "{input}: position_db {} is {held} (lock {}); give each tail input its own position_db",
            db.display(),
            lock_path.display()
        ),
    })
}

impl Positions {
    /// Takes the position file's lock and reads it (none yet is fine).
    /// Lines that cannot be read are skipped with a warning naming file and
    /// line.
    pub fn load(db: Option<&Path>, input: &str) -> anyhow::Result<Self> {
        let lock = match db {
            Some(db) => Some(lock(db, input)?),
            None => None,
        };
        let mut p = Self::read(db, input)?;
        p._lock = lock;
        Ok(p)
    }

    /// Reads the position file without taking its lock.
    fn read(db: Option<&Path>, input: &str) -> anyhow::Result<Self> {
        let mut p = Positions {
            db: db.map(Path::to_path_buf),
            by_inode: HashMap::new(),
            imported: HashMap::new(),
            fresh: false,
            dirty: false,
            next_save: Instant::now(),
            _lock: None,
        };
        let Some(db) = db else { return Ok(p) };
        let bytes = match std::fs::read(db) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                p.fresh = true;
                return Ok(p);
            }
            Err(e) => anyhow::bail!("{input}: cannot read position_db {}: {e}", db.display()),
        };
        for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
            if line.is_empty() {
                continue;
            }
            match parse_line(line) {
                Some((ino, path, offset, legacy)) => {
                    p.by_inode.insert(ino, (path, offset));
                    // Rewrite an old-format file in the new format soon.
                    p.dirty |= legacy;
                }
                None => tracing::warn!(input = %input, path = %db.display(), line = i + 1,
                    "position_db: unreadable line skipped (that file is read as if new)"),
            }
        }
        Ok(p)
    }

    /// Whether `path` is the position file or its temp file (its own writes
    /// must not wake the input).
    pub fn is_own_file(&self, path: &Path) -> bool {
        let Some(db) = &self.db else { return false };
        let p = path.as_os_str().as_bytes();
        p.strip_prefix(db.as_os_str().as_bytes())
            .is_some_and(|rest| rest.is_empty() || rest == b".tmp" || rest == b".lock")
    }

    pub fn offset(&self, inode: u64) -> Option<u64> {
        self.by_inode.get(&inode).map(|(_, off)| *off)
    }

    /// Whether the position file did not exist yet: the first start.
    pub fn is_fresh(&self) -> bool {
        self.fresh
    }

    /// Adds positions another collector saved; `offset_at` uses them for
    /// files this input does not know yet.
    pub fn import(&mut self, found: impl IntoIterator<Item = super::import::Imported>) {
        for i in found {
            self.imported.insert(i.inode, (i.path, i.offset));
        }
    }

    /// Where to resume the file `path` with `inode`: its own position, else
    /// an imported one whose path and inode both match (an inode alone may
    /// have been reused by another file since).
    pub fn offset_at(&self, inode: u64, path: &Path) -> Option<u64> {
        self.offset(inode).or_else(|| {
            self.imported
                .get(&inode)
                .filter(|(p, _)| p == path)
                .map(|(_, off)| *off)
        })
    }

    pub fn set(&mut self, inode: u64, path: &Path, offset: u64) {
        match self.by_inode.get_mut(&inode) {
            Some((p, off)) => {
                if p != path {
                    *p = path.to_path_buf();
                }
                *off = offset;
            }
            None => {
                self.by_inode.insert(inode, (path.to_path_buf(), offset));
            }
        }
        self.dirty = true;
    }

    pub fn forget(&mut self, inode: u64) {
        self.dirty |= self.by_inode.remove(&inode).is_some();
    }

    /// Saves if anything changed: at once with `now` (idle or stopping),
    /// otherwise at most every [`SAVE_EVERY`].
    pub fn save(&mut self, now: bool) -> std::io::Result<()> {
        let Some(db) = &self.db else { return Ok(()) };
        if !self.dirty || (!now && Instant::now() < self.next_save) {
            return Ok(());
        }
        let mut entries: Vec<_> = self.by_inode.iter().collect();
        entries.sort_by_key(|(ino, _)| **ino);
        let mut text = Vec::new();
        for (ino, (path, offset)) in entries {
            serde_json::to_writer(&mut text, &line_for(*ino, path, *offset))?;
            text.push(b'\n');
        }
        write_durably(db, &text)?;
        self.dirty = false;
        self.next_save = Instant::now() + SAVE_EVERY;
        Ok(())
    }
}

fn line_for(inode: u64, path: &Path, offset: u64) -> Line {
    let bytes = path.as_os_str().as_bytes();
    let (path, path_hex) = match std::str::from_utf8(bytes) {
        Ok(s) => (Some(s.to_string()), None),
        Err(_) => (None, Some(hex::encode(bytes))),
    };
    Line {
        path,
        path_hex,
        inode,
        offset,
    }
}

/// (inode, path, offset, whether the line was in the old format).
fn parse_line(line: &[u8]) -> Option<(u64, PathBuf, u64, bool)> {
    if let Ok(l) = serde_json::from_slice::<Line>(line) {
        let path = match (l.path, l.path_hex) {
            (Some(p), None) => PathBuf::from(p),
            (None, Some(h)) => PathBuf::from(OsStr::from_bytes(&hex::decode(h).ok()?)),
            _ => return None,
        };
        return Some((l.inode, path, l.offset, false));
    }
    // The old `path<TAB>inode<TAB>offset`: inode and offset are the last two
    // fields, so a path with tabs in it still reads right. (A path with a
    // newline broke its line in two; the piece with the numbers reads right,
    // the other is skipped.)
    let mut fields = line.rsplitn(3, |&b| b == b'\t');
    let offset = std::str::from_utf8(fields.next()?).ok()?.parse().ok()?;
    let inode = std::str::from_utf8(fields.next()?).ok()?.parse().ok()?;
    let path = PathBuf::from(OsStr::from_bytes(fields.next()?));
    Some((inode, path, offset, true))
}

/// Replaces `path` with `data` so that a crash leaves the old or the new
/// content: temp file, fsync, rename, fsync of the folder.
fn write_durably(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(data)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn odd_paths() -> Vec<PathBuf> {
        vec![
            PathBuf::from("/var/log/plain.log"),
            PathBuf::from("/logs/tab\there and\nnewline.log"),
            PathBuf::from("/logs/quote\" back\\slash {x}.log"),
            PathBuf::from(OsStr::from_bytes(b"/logs/latin1-\xe9\xff.log")),
        ]
    }

    #[test]
    fn any_path_survives_a_save_and_load() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("tail.pos");
        let mut p = Positions::load(Some(&db), "t").unwrap();
        for (i, path) in odd_paths().iter().enumerate() {
            p.set(100 + i as u64, path, 1000 * i as u64 + 7);
        }
        p.save(true).unwrap();
        assert!(!dir.path().join("tail.pos.tmp").exists());

        let text = std::fs::read_to_string(&db).unwrap();
        assert_eq!(text.lines().count(), 4, "{text}");
        assert!(
            text.contains(r#""path":"/logs/tab\there and\nnewline.log""#),
            "{text}"
        );
        assert!(
            text.contains(r#""path_hex":"2f6c6f67732f6c6174696e312de9ff2e6c6f67""#),
            "{text}"
        );

        let q = Positions::read(Some(&db), "t").unwrap();
        for (i, path) in odd_paths().iter().enumerate() {
            let ino = 100 + i as u64;
            assert_eq!(q.by_inode[&ino], (path.clone(), 1000 * i as u64 + 7));
        }
        assert!(!q.dirty, "a file in the current format needs no rewrite");
    }

    #[test]
    fn the_old_tab_separated_format_is_read_and_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("tail.pos");
        // As the previous release wrote it, including what a tab and a
        // newline in a path did to it, and a broken line.
        std::fs::write(
            &db,
            b"/var/log/a.log\t11\t300\n/logs/tab\there.log\t12\t40\n/logs/new\nline.log\t13\t5\ngarbage\n",
        )
        .unwrap();
        let mut p = Positions::load(Some(&db), "t").unwrap();
        assert_eq!(p.offset(11), Some(300));
        assert_eq!(p.offset(12), Some(40));
        assert_eq!(p.by_inode[&12].0, PathBuf::from("/logs/tab\there.log"));
        assert_eq!(p.offset(13), Some(5));
        assert_eq!(p.by_inode.len(), 3);

        p.save(false).unwrap();
        let text = std::fs::read_to_string(&db).unwrap();
        assert!(
            text.lines().all(|l| l.starts_with('{')),
            "saved in the new format at once: {text}"
        );
        let q = Positions::read(Some(&db), "t").unwrap();
        assert_eq!(q.by_inode, p.by_inode);
    }

    #[test]
    fn saves_only_changes_and_at_most_every_second_while_busy() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("tail.pos");
        let mut p = Positions::load(Some(&db), "t").unwrap();
        p.save(true).unwrap();
        assert!(!db.exists(), "nothing changed, nothing written");
        p.set(1, Path::new("/a"), 10);
        p.save(true).unwrap();
        p.set(1, Path::new("/a"), 20);
        // Busy, and the last save is recent: it waits.
        p.next_save = Instant::now() + Duration::from_secs(3600);
        p.save(false).unwrap();
        assert_eq!(Positions::read(Some(&db), "t").unwrap().offset(1), Some(10));
        p.save(true).unwrap();
        assert_eq!(Positions::read(Some(&db), "t").unwrap().offset(1), Some(20));
        p.forget(1);
        p.save(true).unwrap();
        assert_eq!(std::fs::read_to_string(&db).unwrap(), "");
    }

    #[test]
    fn own_files() {
        let p = Positions::read(Some(Path::new("/x/tail.pos")), "t").unwrap();
        assert!(p.is_own_file(Path::new("/x/tail.pos")));
        assert!(p.is_own_file(Path::new("/x/tail.pos.tmp")));
        assert!(p.is_own_file(Path::new("/x/tail.pos.lock")));
        assert!(!p.is_own_file(Path::new("/x/tail.pos2")));
        assert!(!p.is_own_file(Path::new("/x/app.log")));
    }
}
