//! inotify for the tail machinery (`tail` and `directory` inputs): a file
//! created, moved or appended to under a watched folder wakes the tail loop
//! at once instead of at its next `refresh_interval` / `poll_interval`.
//!
//! Each path glob is watched at its deepest folder without glob characters,
//! with its whole subtree when a folder part of the glob has one (`**`, or
//! `*` in a folder name). The watch only wakes the loop: the loop's scan and
//! reads still decide what is new, so a lost event, a queue overflow or a
//! watch that cannot be set up costs latency, never lines; the timers stay
//! as the safety net. A folder that cannot be watched (missing, watch limit
//! reached, no inotify) is logged once and tried again at each refresh.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask, Watches};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// What the events since the last look ask of the loop.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Wake {
    /// A file appeared, moved or went away (or events were lost): expand the globs.
    pub rescan: bool,
    /// A file grew: read.
    pub read: bool,
}

impl Wake {
    pub fn any(self) -> bool {
        self.rescan || self.read
    }
    fn merge(&mut self, o: Wake) {
        self.rescan |= o.rescan;
        self.read |= o.read;
    }
}

/// A folder to watch for one or more globs.
struct Root {
    dir: PathBuf,
    recursive: bool,
    /// The watch is in place (set again after the folder went away).
    watched: bool,
    /// The last failure was logged (logged once until it works again).
    logged: bool,
}

pub(super) struct Watcher {
    input: String,
    fd: AsyncFd<Inotify>,
    watches: Watches,
    roots: Vec<Root>,
    /// Watched folders by descriptor: (folder, its subfolders are watched too).
    dirs: HashMap<WatchDescriptor, (PathBuf, bool)>,
    /// A subfolder watch failed (logged once: typically the watch limit).
    sub_failed_logged: bool,
    buf: Vec<u8>,
}

const DIR_EVENTS: WatchMask = WatchMask::CREATE
    .union(WatchMask::MODIFY)
    .union(WatchMask::MOVED_FROM)
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::DELETE)
    .union(WatchMask::DELETE_SELF)
    .union(WatchMask::MOVE_SELF)
    .union(WatchMask::ONLYDIR);

/// The deepest folder of `glob` without glob characters, and whether the
/// files it matches can be deeper than directly in it.
pub(super) fn glob_root(glob: &str) -> (PathBuf, bool) {
    let is_glob = |s: &str| s.contains(['*', '?', '[']);
    let parts: Vec<&str> = glob.split('/').collect();
    // The last part names files; only folder parts decide the root.
    let folders = &parts[..parts.len().saturating_sub(1)];
    let literal = folders.iter().take_while(|p| !is_glob(p)).count();
    let recursive = literal < folders.len() || parts.last().is_some_and(|p| p.contains("**"));
    let mut dir = folders[..literal].join("/");
    if dir.is_empty() && glob.starts_with('/') {
        dir = "/".into();
    }
    (PathBuf::from(dir), recursive)
}

impl Watcher {
    /// An inotify instance for these globs; None (logged) when the system
    /// has none to give: then the loop only polls.
    pub fn new(input: &str, globs: &[&str]) -> Option<Watcher> {
        let inotify = match Inotify::init() {
            Ok(i) => i,
            Err(e) => {
                tracing::warn!(input, error = %e, "cannot use inotify; polling only");
                return None;
            }
        };
        let watches = inotify.watches();
        // Inotify::init opens the descriptor non-blocking, as AsyncFd needs.
        // SAFETY: the Inotify owns its descriptor (closed only when it is
        // dropped, which the AsyncFd does) and always returns that one.
        let fd = match unsafe { AsyncFd::register_with_interest(inotify, Interest::READABLE) } {
            Ok(fd) => fd,
            Err(e) => {
                tracing::warn!(input, error = %e, "cannot use inotify; polling only");
                return None;
            }
        };
        let mut roots: Vec<Root> = Vec::new();
        for g in globs {
            let (dir, recursive) = glob_root(g);
            match roots.iter_mut().find(|r| r.dir == dir) {
                Some(r) => r.recursive |= recursive,
                None => roots.push(Root {
                    dir,
                    recursive,
                    watched: false,
                    logged: false,
                }),
            }
        }
        let mut w = Watcher {
            input: input.to_string(),
            fd,
            watches,
            roots,
            dirs: HashMap::new(),
            sub_failed_logged: false,
            buf: vec![0; 64 * 1024],
        };
        w.ensure();
        Some(w)
    }

    /// Sets up the watches still missing (at start and at each refresh).
    /// Called before the scan, so a file created meanwhile is found by it.
    pub fn ensure(&mut self) {
        for i in 0..self.roots.len() {
            if self.roots[i].watched {
                continue;
            }
            let (dir, recursive) = (self.roots[i].dir.clone(), self.roots[i].recursive);
            let shown = if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                &dir
            };
            match self.watches.add(shown, DIR_EVENTS) {
                Ok(wd) => {
                    let r = &mut self.roots[i];
                    r.watched = true;
                    if r.logged {
                        tracing::info!(input = %self.input, path = %shown.display(), "watching the folder again");
                    }
                    r.logged = false;
                    let e = self.dirs.entry(wd).or_insert((dir.clone(), false));
                    e.1 |= recursive;
                    if recursive {
                        self.add_subdirs(&dir);
                    }
                }
                Err(e) => {
                    let r = &mut self.roots[i];
                    if !r.logged {
                        r.logged = true;
                        tracing::warn!(input = %self.input, path = %shown.display(), error = %e,
                            "cannot watch the folder (inotify); polling it, retried at each refresh");
                    }
                }
            }
        }
    }

    /// Watches every folder under `dir` (symlinks are not followed: no loops).
    fn add_subdirs(&mut self, dir: &Path) {
        let mut todo = vec![dir.to_path_buf()];
        let mut seen = HashSet::new();
        while let Some(d) = todo.pop() {
            let list = if d.as_os_str().is_empty() {
                std::fs::read_dir(".")
            } else {
                std::fs::read_dir(&d)
            };
            let Ok(list) = list else { continue };
            for ent in list.flatten() {
                if !ent.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                let sub = d.join(ent.file_name());
                match self.watches.add(&sub, DIR_EVENTS | WatchMask::DONT_FOLLOW) {
                    Ok(wd) => {
                        if seen.insert(wd.clone()) {
                            self.dirs.insert(wd, (sub.clone(), true));
                            todo.push(sub);
                        }
                    }
                    Err(e) => {
                        if !self.sub_failed_logged {
                            self.sub_failed_logged = true;
                            tracing::warn!(input = %self.input, path = %sub.display(), error = %e,
                                "cannot watch a subfolder (inotify); polling it");
                        }
                    }
                }
            }
        }
    }

    /// Takes the events already queued, without waiting.
    pub fn drain(&mut self, interesting: &(dyn Fn(&Path) -> bool + Sync)) -> Wake {
        let mut wake = Wake::default();
        loop {
            let events = match self.fd.get_mut().read_events(&mut self.buf) {
                Ok(ev) => ev
                    .map(|e| (e.wd, e.mask, e.name.map(|n| n.to_os_string())))
                    .collect::<Vec<_>>(),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return wake,
                Err(e) => {
                    tracing::debug!(input = %self.input, error = %e, "cannot read inotify events");
                    return wake;
                }
            };
            if events.is_empty() {
                return wake;
            }
            wake.merge(self.handle(events, interesting));
        }
    }

    /// Waits until an event worth a loop turn arrives, then takes all that
    /// are queued (one wake for a whole storm of them).
    pub async fn wait(&mut self, interesting: &(dyn Fn(&Path) -> bool + Sync)) -> Wake {
        loop {
            let mut guard = match self.fd.readable_mut().await {
                Ok(g) => g,
                // Not expected for an inotify descriptor; the timers go on.
                Err(_) => return std::future::pending().await,
            };
            guard.clear_ready();
            drop(guard);
            let wake = self.drain(interesting);
            if wake.any() {
                return wake;
            }
        }
    }

    fn handle(
        &mut self,
        events: Vec<(WatchDescriptor, EventMask, Option<OsString>)>,
        interesting: &(dyn Fn(&Path) -> bool + Sync),
    ) -> Wake {
        let mut wake = Wake::default();
        for (wd, mask, name) in events {
            if mask.contains(EventMask::Q_OVERFLOW) {
                // Events were lost: the scan finds whatever they were.
                wake.rescan = true;
                continue;
            }
            if mask.intersects(EventMask::IGNORED | EventMask::DELETE_SELF | EventMask::MOVE_SELF) {
                // The folder went away (or moved): watch it again at a refresh.
                if let Some((dir, _)) = self.dirs.remove(&wd) {
                    for r in self.roots.iter_mut().filter(|r| r.dir == dir) {
                        r.watched = false;
                    }
                    if mask.intersects(EventMask::MOVE_SELF) {
                        let _ = self.watches.remove(wd);
                    }
                }
                wake.rescan = true;
                continue;
            }
            let Some((dir, recursive)) = self.dirs.get(&wd).cloned() else {
                continue;
            };
            let path = match &name {
                Some(n) => dir.join(n),
                None => dir.clone(),
            };
            if mask.contains(EventMask::ISDIR) {
                if recursive && mask.intersects(EventMask::CREATE | EventMask::MOVED_TO) {
                    // A new subfolder (maybe with files already): watch it,
                    // then the scan finds what it holds.
                    match self.watches.add(&path, DIR_EVENTS | WatchMask::DONT_FOLLOW) {
                        Ok(sub) => {
                            self.dirs.insert(sub, (path.clone(), true));
                            self.add_subdirs(&path);
                        }
                        Err(e) => {
                            if !self.sub_failed_logged {
                                self.sub_failed_logged = true;
                                tracing::warn!(input = %self.input, path = %path.display(), error = %e,
                                    "cannot watch a subfolder (inotify); polling it");
                            }
                        }
                    }
                    wake.rescan = true;
                } else if recursive {
                    wake.rescan = true;
                }
                continue;
            }
            if !interesting(&path) {
                continue;
            }
            if mask.intersects(
                EventMask::CREATE | EventMask::MOVED_TO | EventMask::MOVED_FROM | EventMask::DELETE,
            ) {
                wake.rescan = true;
            } else {
                wake.read = true;
            }
        }
        wake
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_are_the_literal_folders() {
        let r = |g: &str| {
            let (d, rec) = glob_root(g);
            (d.to_string_lossy().into_owned(), rec)
        };
        assert_eq!(r("/var/log/*.log"), ("/var/log".into(), false));
        assert_eq!(r("/var/log/app.log"), ("/var/log".into(), false));
        assert_eq!(r("/var/log/**/*.log"), ("/var/log".into(), true));
        assert_eq!(r("/var/*/x/a.log"), ("/var".into(), true));
        assert_eq!(r("/*.log"), ("/".into(), false));
        assert_eq!(r("logs/*.log"), ("logs".into(), false));
        assert_eq!(r("*.log"), ("".into(), false));
        assert_eq!(r("/d/**"), ("/d".into(), true));
    }
}
