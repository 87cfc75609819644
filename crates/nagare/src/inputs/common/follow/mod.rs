//! The file follower of the `tail` and `directory` inputs: follows files
//! matching globs and turns each line into an event `{"message": "<line>"}`
//! (parser `none`) or the record its parser makes (`[input.parser]`, see
//! parsers/), like Fluentd's in_tail.
//!
//! Files are read in big blocks and split on newlines with memchr; a batch's
//! entries are written straight into one buffer (no allocation per line). The
//! position of every file (by inode) is saved after its batch is in the
//! outputs' buffers (positions.rs), so a restart neither re-reads nor skips
//! lines beyond the last unsaved batch. Rotation by rename (a new inode at
//! the path: the old file is read to its end first), copytruncate (the file
//! got shorter: read again from the start) and deletion are detected on
//! every scan.
//!
//! With `watch` (default), inotify (fswatch.rs) wakes the loop as soon as a
//! file appears or grows; the refresh and poll timers stay as the fallback.

mod fswatch;
mod import;
pub(crate) mod positions;

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use nagare_core::metrics::PluginStats;
use nagare_core::plugin::{serde_inline_default, OptionError};
use nagare_core::units::{Dur, Size};
use nagare_forward::EventTime;
use positions::Positions;
use serde::Deserialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::append::append_batch;
use super::lines::{encode_line, tag_for};
use crate::parsers::{Parser, ParserConfig};
use crate::router::LiveRouter;

#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn list(&self) -> Vec<String> {
        match self {
            OneOrMany::One(s) => vec![s.clone()],
            OneOrMany::Many(v) => v.clone(),
        }
    }
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum LongLines {
    /// Cut a longer line into pieces of max_line_size (default).
    #[default]
    Split,
    /// Drop the longer line (counted as an error of the input, and logged).
    Skip,
}

/// Fields read from a container log file's name (`container_fields`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ContainerFields {
    /// None (default).
    #[default]
    None,
    /// The kubelet's `/var/log/containers/<pod>_<namespace>_<container>-<id>.log`:
    /// a map `kubernetes` with `pod_name`, `namespace_name`,
    /// `container_name` and `container_id`.
    Kubernetes,
    /// Docker's `/var/lib/docker/containers/<id>/<id>-json.log`: `container_id`.
    Docker,
}

#[serde_inline_default]
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TailConfig {
    /// A glob or a list of globs of the files to follow.
    pub path: OneOrMany,
    /// Globs (matched against the whole path or the file name) to leave out.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// The events' tag; a `*` is replaced by the file's path with `/` as `.`
    /// (`app.*` + /var/log/a.log = `app.var.log.a.log`).
    pub tag: String,
    /// File that keeps each file's read position across restarts.
    #[serde(default)]
    pub position_db: Option<String>,
    /// Moving over from Fluentd: its in_tail `pos_file`. At the first start
    /// (no `position_db` file yet) each file resumes where Fluentd left it
    /// when its path and inode both still match; other files are read as
    /// new. Needs `position_db`.
    #[serde(default)]
    pub import_fluentd_pos_file: Option<String>,
    /// Moving over from Fluent Bit: its tail `DB` (an SQLite file), read the
    /// same way as `import_fluentd_pos_file`. Needs `position_db`.
    #[serde(default)]
    pub import_fluent_bit_db: Option<String>,
    /// Read files found at start from their beginning (default false: from their end).
    #[serde(default)]
    pub read_from_head: bool,
    /// How often the globs are expanded again to find new files (default "1s").
    #[serde_inline_default(DEFAULT_REFRESH)]
    pub refresh_interval: Dur,
    /// How often followed files are checked for new lines (default "100ms").
    #[serde_inline_default(DEFAULT_POLL)]
    pub poll_interval: Dur,
    /// Watch the files' folders with inotify: new files and lines are read at
    /// once, the timers above are only the fallback (default true).
    #[serde_inline_default(true)]
    pub watch: bool,
    /// Longest line kept whole (default "1MiB").
    #[serde_inline_default(super::DEFAULT_MAX_LINE)]
    pub max_line_size: Size,
    /// What happens to a longer line: "split" (default) or "skip".
    #[serde(default)]
    pub long_lines: LongLines,
    /// Add the file's path to each record under this key.
    #[serde(default)]
    pub path_key: Option<String>,
    /// Add fields read from a container log file's name: "kubernetes"
    /// (`kubernetes.pod_name`, `namespace_name`, `container_name`,
    /// `container_id` from `<pod>_<namespace>_<container>-<id>.log`),
    /// "docker" (`container_id` from `<id>-json.log`) or "none" (default).
    /// See [Container logs](containers.md).
    #[serde(default)]
    pub container_fields: ContainerFields,
    /// Lines per batch at most (default 10000).
    #[serde_inline_default(10_000)]
    pub batch_lines: usize,
    /// `[input.parser]`: how a line becomes a record (default type "none").
    #[serde(default)]
    pub parser: Option<Box<ParserConfig>>,
}

/// How often tail and directory inputs expand their globs again: "1s".
pub(crate) const DEFAULT_REFRESH: Dur = Dur::secs(1);
/// How often tail and directory inputs check followed files: "100ms".
pub(crate) const DEFAULT_POLL: Dur = Dur::millis(100);

/// Read size per file per step.
const BLOCK: usize = 1 << 20;

/// How long a rotated (renamed or deleted) file is still read after the
/// scan noticed it: a writer may still be finishing its last lines there
/// (inotify notices a rename at once, polling only at the next refresh).
const ROTATE_WAIT: Duration = Duration::from_secs(5);

/// Shortest time between two loop turns woken by inotify is poll_interval,
/// at most this: a file written line by line wakes the loop no more often
/// than polling would (its lines are then read in one batch), so an event
/// storm costs no more than polling; the first line after a quiet spell,
/// and a new file, are read at once. (Capped: with a long poll_interval the
/// watch is what finds lines, and must not wait that long between turns.)
const MAX_WAKE_GAP: Duration = Duration::from_millis(100);

struct Followed {
    path: PathBuf,
    file: File,
    inode: u64,
    /// Offset of the first byte not yet turned into an event.
    offset: u64,
    /// Bytes read past `offset` and not yet turned into events: lines a full
    /// batch left over and the start of an unfinished line (about a block at
    /// most, or one long line).
    partial: Vec<u8>,
    /// Inside a line longer than max_line_size that is being skipped.
    skipping: bool,
    /// Renamed or deleted (since then): read on for ROTATE_WAIT, then to
    /// the end, then forget.
    retired: Option<Instant>,
    /// Parser "multiline": the event being gathered (lines joined with
    /// "\n"), the file bytes it covers (just past `offset`: the position is
    /// saved before it, so a restart reads it again), and when it last grew.
    ml: Option<Vec<u8>>,
    ml_bytes: u64,
    ml_at: Instant,
    /// Parsers "cri" and "docker": the pieces of lines being joined (the
    /// bytes they cover are held past `offset` like a multiline event's,
    /// in `ml_bytes`).
    joiner: Option<crate::parsers::partial::Joiner>,
    /// msgpack pairs every record of the file gets (`path_key`,
    /// `container_fields`), and their count.
    extra: Vec<u8>,
    extra_n: usize,
    /// The last read reached the file's end.
    drained: bool,
    tag: Arc<str>,
    /// When the file last gave new bytes (for the directory input's remove_after).
    grew_at: Instant,
}

impl Followed {
    /// A file followed from `offset` on, with nothing read yet.
    fn new(path: PathBuf, file: File, inode: u64, offset: u64, tag: Arc<str>) -> Followed {
        Followed {
            path,
            file,
            inode,
            offset,
            partial: Vec::new(),
            skipping: false,
            retired: None,
            ml: None,
            ml_bytes: 0,
            ml_at: Instant::now(),
            joiner: None,
            extra: Vec::new(),
            extra_n: 0,
            drained: false,
            tag,
            grew_at: Instant::now(),
        }
    }

    /// Rotated away for ROTATE_WAIT: what it holds now is all it gets.
    fn gone(&self) -> bool {
        self.retired.is_some_and(|t| t.elapsed() >= ROTATE_WAIT)
    }
}

/// What the `directory` input changes in the tail machinery.
#[derive(Default)]
pub struct DirectoryMode {
    /// Tags are made from the path relative to this folder.
    pub root: PathBuf,
    /// Remove a file once it was read to its end and has not grown for this long.
    pub remove_after: Option<Duration>,
}

pub async fn start(
    name: &str,
    cfg: TailConfig,
    router: LiveRouter,
    stats: Arc<PluginStats>,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<Vec<JoinHandle<()>>> {
    start_with(name, cfg, None, router, stats, shutdown).await
}

/// Starts the tail machinery, for `tail` or (with `dir`) the `directory` input.
pub async fn start_with(
    name: &str,
    cfg: TailConfig,
    dir: Option<DirectoryMode>,
    router: LiveRouter,
    stats: Arc<PluginStats>,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<Vec<JoinHandle<()>>> {
    let parser = Parser::new(&cfg.parser.as_deref().cloned().unwrap_or_default())
        .map_err(|e| anyhow::anyhow!("{name}: [input.parser]: {e}"))?;
    let globs: Vec<glob::Pattern> = cfg
        .path
        .list()
        .iter()
        .map(|g| {
            glob::Pattern::new(g).map_err(|e| anyhow::anyhow!("{name}: bad path glob {g:?}: {e}"))
        })
        .collect::<anyhow::Result<_>>()?;
    let excludes: Vec<glob::Pattern> = cfg
        .exclude
        .iter()
        .map(|g| {
            glob::Pattern::new(g)
                .map_err(|e| anyhow::anyhow!("{name}: bad exclude glob {g:?}: {e}"))
        })
        .collect::<anyhow::Result<_>>()?;
    let mut positions = Positions::load(cfg.position_db.as_deref().map(Path::new), name)?;
    import_positions(name, &cfg, &mut positions)?;
    let mut tailer = Tailer {
        name: name.to_string(),
        positions,
        positions_failing: false,
        cfg,
        parser,
        globs,
        excludes,
        router,
        stats,
        files: HashMap::new(),
        first_scan: true,
        dir,
    };
    let mut watcher = if tailer.cfg.watch {
        let globs: Vec<&str> = tailer.globs.iter().map(|g| g.as_str()).collect();
        fswatch::Watcher::new(name, &globs)
    } else {
        None
    };
    let mut sd = shutdown;
    Ok(vec![tokio::spawn(async move {
        let mut last_scan = Instant::now();
        let mut first = true;
        let mut rescan = false;
        loop {
            let turn = Instant::now();
            let refresh = first || last_scan.elapsed() >= tailer.cfg.refresh_interval.0;
            first = false;
            if refresh {
                // Watches that could not be set up are tried again first,
                // so a file created meanwhile is found by this scan.
                if let Some(w) = &mut watcher {
                    w.ensure();
                }
                last_scan = Instant::now();
            }
            if refresh || rescan {
                tailer.scan();
                rescan = false;
            }
            let busy = tailer.read_all().await;
            let stopping = *sd.borrow();
            tailer.save_positions(!busy || stopping);
            if stopping {
                return;
            }
            // Events that came during this turn: a busy loop turns again
            // anyway, an idle one must not sleep past them (but still waits
            // out the gap below, so a write storm cannot spin it).
            let mut wake = fswatch::Wake::default();
            if let Some(w) = &mut watcher {
                wake = w.drain(&|p| tailer.interesting(p));
                rescan |= wake.rescan;
            }
            if busy {
                continue;
            }
            let woken = if wake.any() {
                Some(wake)
            } else {
                tokio::select! {
                _ = tokio::time::sleep(tailer.idle_for(last_scan)) => None,
                _ = sd.changed() => None,
                w = async {
                    match &mut watcher {
                        Some(w) => w.wait(&|p| tailer.interesting(p)).await,
                        None => std::future::pending().await,
                    }
                } => Some(w),
                }
            };
            if let Some(w) = woken {
                rescan |= w.rescan;
                // Coalesce a burst: whatever comes within the gap is read in
                // the same turn.
                let gap = tailer.cfg.poll_interval.0.min(MAX_WAKE_GAP);
                if let Some(rest) = gap.checked_sub(turn.elapsed()) {
                    tokio::time::sleep(rest).await;
                }
                if let Some(w) = &mut watcher {
                    rescan |= w.drain(&|p| tailer.interesting(p)).rescan;
                }
            }
        }
    })])
}

struct Tailer {
    name: String,
    cfg: TailConfig,
    parser: Parser,
    globs: Vec<glob::Pattern>,
    excludes: Vec<glob::Pattern>,
    router: LiveRouter,
    stats: Arc<PluginStats>,
    /// Followed files by inode.
    files: HashMap<u64, Followed>,
    /// How far each file was read, kept in `position_db`.
    positions: Positions,
    /// The last save failed (and was logged).
    positions_failing: bool,
    first_scan: bool,
    dir: Option<DirectoryMode>,
}

impl Tailer {
    /// Whether an inotify event about `path` concerns this input: a path its
    /// globs match or a file it follows (a rotated one keeps its old path),
    /// not its own position database.
    fn interesting(&self, path: &Path) -> bool {
        if self.positions.is_own_file(path) {
            return false;
        }
        // While a rotated file is read on, its new name is unknown here:
        // any event in the folders may be its writer's.
        self.globs.iter().any(|g| g.matches_path(path))
            || self
                .files
                .values()
                .any(|f| f.path == path || f.retired.is_some())
    }

    /// How long the idle loop may sleep: the poll interval, or less when
    /// the next refresh (scan) is due sooner or a rotated file is due to be
    /// let go.
    fn idle_for(&self, last_scan: Instant) -> Duration {
        let refresh = self
            .cfg
            .refresh_interval
            .0
            .saturating_sub(last_scan.elapsed());
        self.files
            .values()
            .filter_map(|f| f.retired)
            .map(|t| ROTATE_WAIT.saturating_sub(t.elapsed()))
            .fold(self.cfg.poll_interval.0.min(refresh), Duration::min)
    }

    fn excluded(&self, p: &Path) -> bool {
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        self.excludes
            .iter()
            .any(|e| e.matches_path(p) || e.matches(&name))
    }

    /// Expands the globs: starts following new files, retires rotated and
    /// deleted ones, and notices truncation.
    fn scan(&mut self) {
        let mut seen = HashMap::new();
        for g in &self.globs {
            for p in glob::glob(g.as_str()).into_iter().flatten().flatten() {
                if !self.excluded(&p) && p.is_file() {
                    if let Ok(m) = std::fs::metadata(&p) {
                        seen.insert(m.ino(), p);
                    }
                }
            }
        }
        // Files whose path now holds another inode, or that are gone: read
        // what is left, then drop them.
        for f in self.files.values_mut() {
            if !seen.contains_key(&f.inode) {
                f.retired.get_or_insert_with(Instant::now);
            }
        }
        for (ino, path) in seen {
            if let Some(f) = self.files.get_mut(&ino) {
                f.path = path;
                f.retired = None; // renamed back under a glob
                continue;
            }
            let Ok(mut file) = File::open(&path) else {
                continue;
            };
            let len = file.metadata().map(|m| m.len()).unwrap_or(0);
            let saved = self.positions.offset_at(ino, &path);
            let offset = match saved {
                Some(off) if off <= len => off,
                Some(_) => 0, // shorter than the saved position: truncated meanwhile
                None if self.first_scan && !self.cfg.read_from_head => len,
                None => 0, // a file that appeared while running is read whole
            };
            if file.seek(SeekFrom::Start(offset)).is_err() {
                continue;
            }
            tracing::info!(input = %self.name, path = %path.display(), offset, "following file");
            let tag: Arc<str> = Arc::from(match &self.dir {
                Some(d) => tag_for(&self.cfg.tag, path.strip_prefix(&d.root).unwrap_or(&path)),
                None => tag_for(&self.cfg.tag, &path),
            });
            let mut f = Followed::new(path, file, ino, offset, tag);
            f.joiner = self.parser.joiner(self.cfg.max_line_size.0 as usize);
            (f.extra, f.extra_n) = record_extra(&self.name, &self.cfg, &f.path);
            self.files.insert(ino, f);
        }
        self.first_scan = false;
    }

    /// Reads new lines from every followed file and appends them; returns
    /// whether there was anything (then the next step comes at once).
    async fn read_all(&mut self) -> bool {
        let mut busy = false;
        let mut inodes: Vec<u64> = self.files.keys().copied().collect();
        // Rotated files first: with cri and docker a line's pieces may
        // straddle a rotation, and the new file's pieces must find the old
        // file's (carried over below) before they are read.
        inodes.sort_by_key(|i| self.files[i].retired.is_none());
        for ino in inodes {
            let Some(mut f) = self.files.remove(&ino) else {
                continue;
            };
            if f.joiner.is_some() && f.retired.is_none() && self.rotated_unread(&f.path) {
                busy = true;
                self.files.insert(ino, f);
                continue;
            }
            let max_line = self.cfg.max_line_size.0 as usize;
            let (batch, consumed, done) = match read_lines(
                &mut f,
                &self.cfg,
                &self.parser,
                max_line,
                &self.stats,
                &self.name,
            ) {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(input = %self.name, path = %f.path.display(), error = %e, "cannot read; will retry");
                    self.files.insert(ino, f);
                    continue;
                }
            };
            if let Some((entries, count)) = batch {
                busy = true;
                if !self.append(&f.tag, entries, count).await {
                    // Shutting down: the position is not advanced, so these
                    // lines are read again after a restart.
                    self.files.insert(ino, f);
                    return false;
                }
            }
            if consumed > 0 {
                f.grew_at = Instant::now();
                f.offset += consumed;
                self.positions.set(ino, &f.path, f.offset);
            }
            f.drained = done;
            if done && f.retired.is_some() {
                self.carry_pieces(&mut f);
            }
            if f.gone() && done {
                tracing::info!(input = %self.name, path = %f.path.display(), "file rotated or removed; read to its end");
                self.positions.forget(ino);
                continue;
            }
            if !done {
                busy = true;
            }
            let idle_for = self.dir.as_ref().and_then(|d| d.remove_after);
            if let Some(wait) = idle_for {
                let held = f.ml.is_some() || f.joiner.as_ref().is_some_and(|j| !j.is_empty());
                if done && f.partial.is_empty() && !held && f.grew_at.elapsed() >= wait {
                    // Drop box: shipped and quiet for remove_after.
                    match std::fs::remove_file(&f.path) {
                        Ok(()) => {
                            tracing::info!(input = %self.name, path = %f.path.display(), "shipped; file removed");
                            self.positions.forget(ino);
                            continue;
                        }
                        Err(e) => {
                            tracing::warn!(input = %self.name, path = %f.path.display(), error = %e, "cannot remove a shipped file")
                        }
                    }
                }
            }
            self.files.insert(ino, f);
        }
        busy
    }

    /// A rotated file that was at `path` and is not read to its end yet
    /// (cri, docker: its held pieces may belong to the new file's first line).
    fn rotated_unread(&self, path: &Path) -> bool {
        self.files
            .values()
            .any(|o| o.retired.is_some() && o.path == path && !o.drained && o.joiner.is_some())
    }

    /// A rotated file read to its end gives the pieces it holds (the start
    /// of a line whose rest the runtime wrote to the new file) to the file
    /// now at its path. After a restart in between, the carried pieces are
    /// not read again (the rotated file is no longer followed).
    fn carry_pieces(&mut self, old: &mut Followed) {
        let Some(j) = &mut old.joiner else {
            return;
        };
        if j.is_empty() {
            return;
        }
        let Some(new) = self
            .files
            .values_mut()
            .find(|n| n.retired.is_none() && n.path == old.path)
        else {
            return;
        };
        let at = new.offset + new.ml_bytes;
        if let Some(nj) = &mut new.joiner {
            j.carry_into(nj, at);
        }
    }

    /// False when shutting down: the lines will be read again after a restart.
    async fn append(&self, tag: &str, entries: Bytes, count: u32) -> bool {
        append_batch(
            &self.name,
            &self.router,
            &self.stats,
            tag,
            entries,
            count,
            false,
        )
        .await
    }

    /// Saves the positions: at once with `now`, else when due (see positions.rs).
    /// A failure is logged once, until a save succeeds again.
    fn save_positions(&mut self, now: bool) {
        match self.positions.save(now) {
            Ok(()) if self.positions_failing => {
                self.positions_failing = false;
                tracing::info!(input = %self.name, path = ?self.cfg.position_db, "position database saved again");
            }
            Ok(()) => {}
            Err(e) if !self.positions_failing => {
                self.positions_failing = true;
                tracing::warn!(input = %self.name, path = ?self.cfg.position_db, error = %e,
                    "cannot save the position database; a restart would read lines again");
            }
            Err(_) => {}
        }
    }
}

/// A batch read from a file: PackedForward entries and their count.
type Lines = (Bytes, u32);

/// Reads up to one block from `f` and turns its complete lines into entries.
/// Returns the entries and their count (when there were lines), the bytes
/// consumed from the file, and whether the file is at its end for now.
fn read_lines(
    f: &mut Followed,
    cfg: &TailConfig,
    parser: &Parser,
    max_line: usize,
    stats: &PluginStats,
    name: &str,
) -> std::io::Result<(Option<Lines>, u64, bool)> {
    // copytruncate: the file is now shorter than what was read.
    let len = f.file.metadata()?.len();
    let read_end = f.offset + f.ml_bytes + f.partial.len() as u64;
    if len < read_end {
        tracing::info!(input = %name, path = %f.path.display(), "file truncated; reading from its start");
        f.file.seek(SeekFrom::Start(0))?;
        f.offset = 0;
        f.partial.clear();
        f.skipping = false;
        f.ml = None;
        f.ml_bytes = 0;
        if let Some(j) = &mut f.joiner {
            j.clear();
        }
    }
    // Another block is read only while less than one is buffered (or no
    // whole line is): a batch of batch_lines short lines consumes less than a
    // block, and reading on regardless grew the buffer towards the size of a
    // fast-growing file and moved all of it forward after every batch.
    let start = f.partial.len();
    let mut at_end = false;
    if start < BLOCK || memchr::memchr(b'\n', &f.partial).is_none() {
        f.partial.resize(start + BLOCK, 0);
        let read = f.file.read(&mut f.partial[start..]);
        // On an error too: no zeros of the unread block stay buffered.
        f.partial.truncate(start + read.as_ref().map_or(0, |n| *n));
        at_end = read? < BLOCK;
    }
    let parse_errors = std::cell::Cell::new(0u64);
    let path = f.path.to_string_lossy();
    // Entries of 100-byte lines are about 1.2 times the lines.
    let mut out = Vec::with_capacity(f.partial.len() + f.partial.len() / 4);
    let now = EventTime::now();
    let count = std::cell::Cell::new(0u32);
    let mut pos = 0;
    let data = &f.partial[..];
    let (extra, extra_n) = (&f.extra[..], f.extra_n);
    let emit = |line: &[u8], out: &mut Vec<u8>| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        count.set(count.get() + 1);
        if extra_n == 0 {
            let path_key = cfg.path_key.as_deref().map(|k| (k, path.as_ref()));
            if !encode_line(out, now, line, parser, path_key) {
                parse_errors.set(parse_errors.get() + 1);
            }
            return;
        }
        let at = out.len();
        if !encode_line(out, now, line, parser, None) {
            parse_errors.set(parse_errors.get() + 1);
        }
        // [time, record]: the record's map header is after 0x92 and the
        // 10 bytes of the time.
        add_fields(out, at + 11, extra, extra_n);
    };
    // Parser "multiline": lines are gathered into events first; `at` is
    // where the line starts in `data` (the pending event may have started
    // before it: at -ml_before).
    let multiline = parser.multiline();
    let continuation = parser.multiline_continuation();
    let ml_before = f.ml_bytes;
    let mut pend = f.ml.take();
    let mut pend_start = -(ml_before as i64);
    let mut fed = false;
    // cri and docker: the joiner gets each line with its file offset.
    let base = f.offset + ml_before;
    let mut joiner = f.joiner.take();
    let join = |j: &mut crate::parsers::partial::Joiner,
                line: Option<(&[u8], u64)>,
                all: bool,
                out: &mut Vec<u8>| {
        let mut sink = crate::parsers::partial::Sink {
            out,
            now,
            extra,
            extra_n,
        };
        let w = match line {
            Some((line, at)) => j.feed(line.strip_suffix(b"\r").unwrap_or(line), at, &mut sink),
            None => j.flush(all, &mut sink),
        };
        count.set(count.get() + w.events);
        parse_errors.set(parse_errors.get() + w.errors as u64);
        if w.truncated > 0 {
            PluginStats::add(&stats.errors, w.truncated as u64);
            tracing::warn!(input = %name, path = %f.path.display(), limit = max_line,
                "a joined line longer than max_line_size: cut, its event has `truncated` (bytes left out)");
        }
    };
    let mut feed = |line: &[u8], at: usize, out: &mut Vec<u8>| {
        if let Some(j) = &mut joiner {
            join(j, Some((line, base + at as u64)), false, out);
            return;
        }
        let Some((first, _)) = multiline else {
            emit(line, out);
            return;
        };
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        fed = true;
        let starts = first.is_match(line);
        match &mut pend {
            Some(p) if !starts && continuation.is_none_or(|c| c.is_match(line)) => {
                p.push(b'\n');
                p.extend_from_slice(line);
                // Bounded: an event past max_line_size goes out as it is.
                if p.len() > max_line {
                    emit(p, out);
                    pend = None;
                }
            }
            _ => {
                if let Some(p) = pend.take() {
                    emit(&p, out);
                }
                if !starts && continuation.is_some() {
                    // With continuation rules, a line that neither starts
                    // nor continues an event is one of its own.
                    emit(line, out);
                    return;
                }
                pend = Some(line.to_vec());
                pend_start = at as i64;
            }
        }
    };
    while let Some(nl) = memchr::memchr(b'\n', &data[pos..]) {
        let line = &data[pos..pos + nl];
        if f.skipping {
            f.skipping = false; // the end of a skipped long line
        } else if line.len() > max_line {
            long_line(line, cfg, max_line, stats, name, &f.path, &mut |l| {
                feed(l, pos, &mut out)
            });
        } else {
            feed(line, pos, &mut out);
        }
        pos += nl + 1;
        if count.get() as usize >= cfg.batch_lines {
            break;
        }
    }
    // A partial line that already exceeds the limit is handled now, so memory stays bounded.
    let rest = data.len() - pos;
    if rest > max_line && memchr::memchr(b'\n', &data[pos..]).is_none() {
        if !f.skipping {
            long_line(
                &data[pos..],
                cfg,
                max_line,
                stats,
                name,
                &f.path,
                &mut |l| feed(l, pos, &mut out),
            );
        }
        f.skipping = cfg.long_lines == LongLines::Skip;
        pos = data.len();
    }
    f.partial.drain(..pos);
    let done = at_end && memchr::memchr(b'\n', &f.partial).is_none();
    // A retired (rotated) file's unterminated last line is an event too.
    if f.gone() && done && !f.partial.is_empty() {
        let last = std::mem::take(&mut f.partial);
        feed(&last, pos, &mut out);
        pos += last.len();
    }
    // The gathered event goes out at the end of a rotated file, or when no
    // line came for the flush interval; else it waits (not yet consumed).
    let mut ml_after = 0u64;
    if let (Some(p), Some((_, flush))) = (pend, multiline) {
        if fed {
            f.ml_at = Instant::now();
        }
        if done && (f.gone() || f.ml_at.elapsed() >= flush) {
            emit(&p, &mut out);
        } else {
            ml_after = (pos as i64 - pend_start) as u64;
            f.ml = Some(p);
        }
    }
    if let Some(j) = &mut joiner {
        if done {
            join(j, None, f.gone(), &mut out);
        }
        // The position stays before the first byte still held.
        if let Some(from) = j.held_from() {
            ml_after = base + pos as u64 - from;
        }
    }
    f.joiner = joiner;
    f.ml_bytes = ml_after;
    let consumed = ml_before + pos as u64 - ml_after;
    if parse_errors.get() > 0 {
        PluginStats::add(&stats.errors, parse_errors.get());
        tracing::debug!(input = %name, path = %f.path.display(), lines = parse_errors.get(), "lines that did not parse kept with parse_error");
    }
    let count = count.get();
    // `out` was sized for the whole buffered block, but batch_lines short
    // lines fill a fraction of it; the buffer keeps big batches as they are,
    // with their allocation, so the spare capacity is given back (in place).
    out.shrink_to_fit();
    // A file read to its end keeps its partial line, not a read block: with
    // many files followed, idle ones would each hold a block.
    if done && f.partial.capacity() > 2 * f.partial.len() + 4096 {
        f.partial.shrink_to_fit();
    }
    let batch = (count > 0).then(|| (Bytes::from(out), count));
    Ok((batch, consumed, done))
}

/// Adds `n` msgpack key/value pairs (`extra`) to the map that starts at
/// `map_at` and ends `out` (its header grows when the count needs it).
fn add_fields(out: &mut Vec<u8>, map_at: usize, extra: &[u8], n: usize) {
    let (old, len) = match out[map_at] {
        b @ 0x80..=0x8f => ((b & 0x0f) as usize, 1),
        0xde => (
            u16::from_be_bytes([out[map_at + 1], out[map_at + 2]]) as usize,
            3,
        ),
        0xdf => (
            u32::from_be_bytes(out[map_at + 1..map_at + 5].try_into().expect("4 bytes")) as usize,
            5,
        ),
        _ => return, // not a map: nothing the fields could join
    };
    let mut header = Vec::with_capacity(5);
    nagare_forward::msgpack::write_map_len(&mut header, old + n);
    out.splice(map_at..map_at + len, header);
    out.extend_from_slice(extra);
}

/// The pairs every record of the file at `path` gets: `path_key`, the
/// fields of `container_fields`.
fn record_extra(name: &str, cfg: &TailConfig, path: &Path) -> (Vec<u8>, usize) {
    use nagare_forward::msgpack::{write_map_len, write_str};
    let mut b = Vec::new();
    let mut n = 0;
    if let Some(k) = &cfg.path_key {
        write_str(&mut b, k.as_bytes());
        write_str(&mut b, path.to_string_lossy().as_bytes());
        n += 1;
    }
    let file = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    match cfg.container_fields {
        ContainerFields::None => {}
        ContainerFields::Kubernetes => match kubernetes_names(&file) {
            Some([pod, ns, container, id]) => {
                write_str(&mut b, b"kubernetes");
                write_map_len(&mut b, 4);
                for (k, v) in [
                    ("pod_name", pod),
                    ("namespace_name", ns),
                    ("container_name", container),
                    ("container_id", id),
                ] {
                    write_str(&mut b, k.as_bytes());
                    write_str(&mut b, v.as_bytes());
                }
                n += 1;
            }
            None => tracing::warn!(input = %name, path = %path.display(),
                "file name is not <pod>_<namespace>_<container>-<id>.log: no kubernetes fields"),
        },
        ContainerFields::Docker => match file.strip_suffix("-json.log") {
            Some(id) if !id.is_empty() => {
                write_str(&mut b, b"container_id");
                write_str(&mut b, id.as_bytes());
                n += 1;
            }
            _ => tracing::warn!(input = %name, path = %path.display(),
                "file name is not <id>-json.log: no container_id"),
        },
    }
    (b, n)
}

/// Pod, namespace, container and container id from the kubelet's
/// `<pod>_<namespace>_<container>-<id>.log` (pod, namespace and container
/// names are DNS names: no `_`; the id is the part after the last `-`).
pub(crate) fn kubernetes_names(file: &str) -> Option<[&str; 4]> {
    let stem = file.strip_suffix(".log")?;
    let mut parts = stem.splitn(3, '_');
    let (pod, ns, rest) = (parts.next()?, parts.next()?, parts.next()?);
    let (container, id) = rest.rsplit_once('-')?;
    if [pod, ns, container, id].iter().any(|s| s.is_empty()) || rest.contains('_') {
        return None;
    }
    Some([pod, ns, container, id])
}

fn long_line(
    line: &[u8],
    cfg: &TailConfig,
    max_line: usize,
    stats: &PluginStats,
    name: &str,
    path: &Path,
    emit: &mut dyn FnMut(&[u8]),
) {
    PluginStats::add(&stats.errors, 1);
    match cfg.long_lines {
        LongLines::Split => {
            tracing::warn!(input = %name, path = %path.display(), bytes = line.len(), limit = max_line,
                "line longer than max_line_size: split into pieces");
            for piece in line.chunks(max_line.max(1)) {
                emit(piece);
            }
        }
        LongLines::Skip => {
            tracing::warn!(input = %name, path = %path.display(), bytes = line.len(), limit = max_line,
                "line longer than max_line_size: skipped");
        }
    }
}

/// The checks `tail`, `directory` and `fuse` share: globs that compile and
/// a parser that builds.
pub(crate) fn check_globs_and_parser(
    key: &str,
    globs: &[String],
    exclude: &[String],
    parser: Option<&ParserConfig>,
) -> Result<(), OptionError> {
    for (k, list) in [(key, globs), ("exclude", exclude)] {
        for g in list {
            glob::Pattern::new(g)
                .map_err(|e| OptionError::new(k, format!("bad glob {g:?}: {e}")))?;
        }
    }
    crate::parsers::check_options("parser", &parser.cloned().unwrap_or_default())
}

/// Imports another collector's positions at the first start (see
/// `import_fluentd_pos_file`); logs what it found, and ignores them once
/// nagare has positions of its own.
fn import_positions(name: &str, cfg: &TailConfig, positions: &mut Positions) -> anyhow::Result<()> {
    let sources = [
        ("import_fluentd_pos_file", &cfg.import_fluentd_pos_file),
        ("import_fluent_bit_db", &cfg.import_fluent_bit_db),
    ];
    for (key, path) in sources {
        let Some(path) = path else { continue };
        if !positions.is_fresh() {
            tracing::info!(input = %name, key, path = %path,
                "position_db exists: positions were imported at the first start, not again");
            continue;
        }
        let found = if key == "import_fluentd_pos_file" {
            let (found, skipped) = import::fluentd_pos_file(Path::new(path))
                .map_err(|e| anyhow::anyhow!("{name}: {key}: {e}"))?;
            for s in skipped {
                tracing::warn!(input = %name, key, "{s}: skipped");
            }
            found
        } else {
            import::fluent_bit_db(Path::new(path))
                .map_err(|e| anyhow::anyhow!("{name}: {key}: {e}"))?
        };
        tracing::info!(input = %name, key, path = %path, files = found.len(),
            "imported positions: files whose path and inode match resume there");
        positions.import(found);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_names_from_the_file_name() {
        assert_eq!(
            kubernetes_names("web-7d4b9c-x2x_shop_nginx-0123abcd.log"),
            Some(["web-7d4b9c-x2x", "shop", "nginx", "0123abcd"])
        );
        assert_eq!(
            kubernetes_names("p_ns_side-car-ffff.log"),
            Some(["p", "ns", "side-car", "ffff"])
        );
        assert_eq!(kubernetes_names("p_ns_c.log"), None);
        assert_eq!(kubernetes_names("plain.log"), None);
        assert_eq!(kubernetes_names("p_ns_c-1.log.gz"), None);
    }

    #[test]
    fn fields_join_a_map_of_any_size() {
        for n in [1usize, 14, 15, 16, 70_000] {
            let mut out = vec![0x92];
            nagare_forward::msgpack::write_map_len(&mut out, n);
            for i in 0..n {
                nagare_forward::msgpack::write_str(&mut out, format!("k{i}").as_bytes());
                out.push(0x01);
            }
            add_fields(&mut out, 1, &[0xa1, b'x', 0x02], 1);
            let mut rd = &out[1..];
            let v = rmpv::decode::read_value(&mut rd).unwrap();
            assert!(rd.is_empty());
            let m = v.as_map().unwrap();
            assert_eq!(m.len(), n + 1);
            assert_eq!(m[n].0.as_str(), Some("x"));
        }
    }

    #[test]
    fn tags_embed_the_path() {
        assert_eq!(
            tag_for("app.*", Path::new("/var/log/foo.log")),
            "app.var.log.foo.log"
        );
        assert_eq!(tag_for("fixed", Path::new("/x")), "fixed");
    }

    /// A file far bigger than a block, of lines so short that a batch
    /// (batch_lines) consumes less than a block per step: the buffered bytes
    /// must stay near one block (they used to grow towards the file's size,
    /// all of them moved forward after every batch), and every line must
    /// come out once, in order, with the byte count adding up.
    #[test]
    fn short_lines_keep_the_read_buffer_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("short.log");
        let lines = 400_000u32; // 11 bytes each: 4.4 MB, over 4 blocks
        let mut text = Vec::with_capacity(lines as usize * 11);
        for i in 0..lines {
            text.extend_from_slice(format!("{i:010}\n").as_bytes());
        }
        std::fs::write(&path, &text).unwrap();
        let cfg: TailConfig = toml::from_str(&format!(
            "path = {:?}\ntag = \"t\"\nbatch_lines = 1000",
            path.display().to_string()
        ))
        .unwrap();
        let parser = Parser::new(&ParserConfig::default()).unwrap();
        let stats = PluginStats::default();
        let file = File::open(&path).unwrap();
        let mut f = Followed::new(path.clone(), file, 0, 0, Arc::from("t"));
        let (mut events, mut consumed, mut steps) = (0u32, 0u64, 0);
        let mut next = 0u32;
        loop {
            let (batch, n, done) = read_lines(&mut f, &cfg, &parser, 1 << 20, &stats, "t").unwrap();
            assert!(
                f.partial.len() <= 2 * BLOCK,
                "step {steps}: {} bytes buffered",
                f.partial.len()
            );
            if let Some((entries, count)) = batch {
                assert!(count <= 1000);
                events += count;
                for (_, record, _) in nagare_core::record::entries(&entries) {
                    let msg = nagare_core::record::field(record, b"message").unwrap();
                    assert_eq!(msg, format!("{next:010}").as_bytes());
                    next += 1;
                }
            }
            consumed += n;
            steps += 1;
            if done {
                break;
            }
            assert!(steps < 10_000, "no end reached");
        }
        assert_eq!((events, next, consumed), (lines, lines, text.len() as u64));
    }
}
