//! The journald input's cursor file: the journal cursor of the last entry
//! that is in the outputs' buffers, so a restart goes on right after it
//! (`journalctl --cursor`, that entry itself dropped).
//!
//! The file holds the cursor and a newline. It is saved as tail saves its
//! positions (temp file, fsync, rename, fsync of the folder: a crash leaves
//! the old or the new cursor, never a mix), only after the entries up to it
//! were appended, at most every [`SAVE_EVERY`] while entries keep coming
//! and at once when the input stops. So a clean stop and start loses and
//! repeats nothing; a crash repeats at most the last second's entries.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nagare_core::holder::{LockError, PidLock};

use crate::inputs::common::follow::positions::write_durably;

/// While entries come, the cursor is saved at most this often.
pub const SAVE_EVERY: Duration = Duration::from_secs(1);

pub struct Cursor {
    /// The cursor file; None keeps the cursor in memory only (across
    /// restarts of journalctl, not of nagare).
    path: Option<PathBuf>,
    /// The cursor of the last entry appended.
    current: Option<String>,
    /// `current` changed since the last save.
    dirty: bool,
    last_save: Instant,
    /// `<cursor_file>.lock` while running: two inputs saving one cursor file
    /// would each resume from the other's position.
    _lock: Option<PidLock>,
}

/// Whether `c` looks like a cursor journalctl wrote (`s=…;i=…;b=…;m=…;t=…;x=…`):
/// journalctl refuses a malformed one and would then never start.
fn well_formed(c: &str) -> bool {
    !c.is_empty()
        && c.split(';').all(|part| {
            part.split_once('=').is_some_and(|(k, v)| {
                k.len() == 1 && !v.is_empty() && v.bytes().all(|b| b.is_ascii_alphanumeric())
            })
        })
}

impl Cursor {
    /// Takes the file's lock and reads the saved cursor (none yet is fine;
    /// an unreadable one is logged and ignored).
    pub fn load(path: Option<&Path>, input: &str) -> anyhow::Result<Cursor> {
        let mut c = Cursor {
            path: path.map(Path::to_path_buf),
            current: None,
            dirty: false,
            last_save: Instant::now(),
            _lock: None,
        };
        let Some(path) = path else { return Ok(c) };
        let mut lock_path = path.as_os_str().to_owned();
        lock_path.push(".lock");
        let lock_path = PathBuf::from(lock_path);
        c._lock = Some(PidLock::acquire(&lock_path).map_err(|e| match e {
            LockError::Io(e) => {
                anyhow::anyhow!("{input}: cannot open {}: {e}", lock_path.display())
            }
            held => anyhow::anyhow!(
                "{input}: cursor_file {} is {held} (lock {}); give each journald input its own cursor_file",
                path.display(),
                lock_path.display()
            ),
        })?);
        match std::fs::read_to_string(path) {
            Ok(text) if well_formed(text.trim()) => c.current = Some(text.trim().to_string()),
            Ok(text) if text.trim().is_empty() => {}
            Ok(text) => tracing::warn!(input = %input, path = %path.display(),
                cursor = %text.trim().chars().take(200).collect::<String>(),
                "cursor_file does not hold a journal cursor; ignored (starting as if there were none)"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => anyhow::bail!("{input}: cannot read cursor_file {}: {e}", path.display()),
        }
        Ok(c)
    }

    /// The cursor to resume after, if any.
    pub fn get(&self) -> Option<&str> {
        self.current.as_deref()
    }

    /// The entries up to `cursor` are in the outputs' buffers.
    pub fn set(&mut self, cursor: &[u8]) {
        if self.current.as_deref().map(str::as_bytes) != Some(cursor) {
            self.current = Some(String::from_utf8_lossy(cursor).into_owned());
            self.dirty = true;
        }
    }

    /// When the next save is due (None: nothing to save).
    pub fn due(&self) -> Option<Instant> {
        (self.dirty && self.path.is_some()).then(|| self.last_save + SAVE_EVERY)
    }

    /// Saves if it changed: at once with `now`, else when due.
    pub fn save(&mut self, now: bool) -> std::io::Result<()> {
        let (Some(path), Some(cursor)) = (&self.path, &self.current) else {
            return Ok(());
        };
        if !self.dirty || (!now && self.last_save.elapsed() < SAVE_EVERY) {
            return Ok(());
        }
        write_durably(path, format!("{cursor}\n").as_bytes())?;
        self.dirty = false;
        self.last_save = Instant::now();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: &str = "s=f7fe7af262ca49a5aa2723c1cce1528f;i=4d9;b=9d1dcef6c9c6424ea97a2e503969c255;m=2543dc448;t=66154403f80d6;x=f1453bb4714bdd03";

    #[test]
    fn saved_durably_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("j.cursor");
        let mut c = Cursor::load(Some(&f), "j").unwrap();
        assert_eq!(c.get(), None);
        c.set(C.as_bytes());
        assert!(c.due().is_some());
        c.save(true).unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), format!("{C}\n"));
        assert!(!dir.path().join("j.cursor.tmp").exists());
        assert!(c.due().is_none(), "saved: nothing due");
        // A second input on the same file is refused while this one runs.
        let e = Cursor::load(Some(&f), "k").err().unwrap().to_string();
        assert!(
            e.contains("give each journald input its own cursor_file"),
            "{e}"
        );
        drop(c);
        assert_eq!(Cursor::load(Some(&f), "j").unwrap().get(), Some(C));
    }

    #[test]
    fn a_damaged_file_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("j.cursor");
        std::fs::write(&f, "not a cursor\n").unwrap();
        assert_eq!(Cursor::load(Some(&f), "j").unwrap().get(), None);
        assert!(well_formed(C));
        assert!(!well_formed("s=1;i="));
    }
}
