//! `file`: writes events to files named by a template.
//!
//! The path may contain strftime fields (from each event's time, UTC) and
//! `${tag}`, so files are sliced by time and tag. With `append = true` (the
//! default) every chunk is appended to the file its events name, which is how
//! a receiver unifies many senders into one file; with `append = false` each
//! chunk gets its own file with the chunk id before the extension.
//!
//! A retried chunk is written once: an append that fails half-way is cut
//! back off its file, and the groups (one per file) that an earlier attempt
//! wrote whole are not written again (see `Appends`).

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use nagare_core::output::OutputPlugin;
use nagare_core::output::{FlushError, Output};
use nagare_core::plugin::{serde_inline_default, BuildContext, OptionError};
use serde::Deserialize;

use crate::buffer::Chunk;
use crate::formats::Format;
use crate::formats::{render_entry, DEFAULT_MESSAGE_KEY};

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum FileCompression {
    Gzip,
}

#[serde_inline_default]
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// File path template, e.g. "/var/log/nagare/${tag}/%Y-%m-%d.log".
    pub path: String,
    /// "json" (default), "ltsv", "msgpack" or "single_value".
    #[serde(default)]
    pub format: Format,
    /// The field written by format "single_value" (default "message").
    #[serde_inline_default(DEFAULT_MESSAGE_KEY.into())]
    pub message_key: String,
    /// Append to the named file (default true); false gives each chunk its own file.
    #[serde_inline_default(true)]
    pub append: bool,
    /// "gzip" compresses each write as one gzip member (".gz" is added to the name).
    #[serde(default)]
    pub compress: Option<FileCompression>,
}

pub struct FileOutput {
    cfg: FileConfig,
    has_time: bool,
    appends: Arc<Appends>,
    /// Text buffers of earlier writes, used again: a fresh one of a chunk's
    /// size costs a zeroed page per 4 KiB (a tenth of a syslog → file
    /// relay's CPU at 100 B went to clearing pages).
    spare: Arc<Mutex<Vec<Vec<u8>>>>,
}

/// Spare text buffers kept, and the largest kept.
const SPARE_BUFFERS: usize = 4;
const SPARE_MAX: usize = 16 << 20;

/// Files that take turns: a failed append is cut back to where it started,
/// which would also cut another worker's append made in the meantime.
const FILE_TURNS: usize = 64;
/// Chunks whose partial progress is remembered. Only chunks being retried
/// need it (at most `flush_thread_count` at a time); the others were given
/// up on, and their entries are dropped oldest first.
const REMEMBERED_CHUNKS: usize = 256;

/// What makes a retried chunk idempotent with `append = true`.
struct Appends {
    /// Per file (striped by path hash): appends to one file never overlap.
    turns: [Mutex<()>; FILE_TURNS],
    /// Groups of a chunk (by chunk id) that an earlier attempt wrote whole.
    done: Mutex<VecDeque<([u8; 16], usize)>>,
}

impl Appends {
    fn new() -> Appends {
        Appends {
            turns: std::array::from_fn(|_| Mutex::new(())),
            done: Mutex::new(VecDeque::new()),
        }
    }

    /// Groups of chunk `id` written whole by earlier attempts.
    fn written(&self, id: &[u8; 16]) -> usize {
        let done = self.done.lock().expect("file output progress");
        done.iter().find(|(c, _)| c == id).map_or(0, |(_, n)| *n)
    }

    /// Remembers (`Some`) or forgets (`None`) how many groups of chunk `id` are written.
    fn set_written(&self, id: &[u8; 16], groups: Option<usize>) {
        let mut done = self.done.lock().expect("file output progress");
        done.retain(|(c, _)| c != id);
        if let Some(n) = groups.filter(|n| *n > 0) {
            if done.len() >= REMEMBERED_CHUNKS {
                done.pop_front();
            }
            done.push_back((*id, n));
        }
    }

    /// The turn of `path`'s file: appends to one file never overlap.
    fn turn(&self, path: &Path) -> std::sync::MutexGuard<'_, ()> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        path.hash(&mut h);
        self.turns[h.finish() as usize % FILE_TURNS]
            .lock()
            .expect("file turn")
    }

    /// Appends `data` to `path` whole or not at all: a write that fails
    /// half-way (disk full) is cut back off, so a retry does not leave the
    /// first half of the group in the file twice.
    fn append(&self, path: &Path, data: &[u8]) -> std::io::Result<()> {
        create_parent(path)?;
        let _turn = self.turn(path);
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        let before = f.metadata()?.len();
        f.write_all(data).inspect_err(|_| {
            if let Err(e) = f.set_len(before) {
                tracing::error!(file = %path.display(), error = %e,
                    "cannot remove a partly written group of events; a retry will write them again after it");
            }
        })
    }
}

impl FileOutput {
    pub fn new(cfg: FileConfig, name: &str) -> anyhow::Result<Self> {
        if cfg.path.trim().is_empty() {
            anyhow::bail!("{name}: must not be empty");
        }
        // Reject a template chrono cannot render before any event arrives.
        let probe = chrono::DateTime::from_timestamp(0, 0).unwrap_or_default();
        // fmt::Write into a String returns the formatter's error;
        // io::Write::write_fmt would panic on it.
        let mut s = String::new();
        std::fmt::Write::write_fmt(
            &mut s,
            format_args!("{}", probe.format(&cfg.path.replace("${tag}", "tag"))),
        )
        .map_err(|_| {
            anyhow::anyhow!(
                "{name}: {:?} has a %-field strftime does not know (known: %Y %m %d %H %M %S …; write %% for a %)",
                cfg.path
            )
        })?;
        Ok(FileOutput {
            has_time: cfg.path.contains('%'),
            cfg,
            appends: Arc::new(Appends::new()),
            spare: Arc::new(Mutex::new(Vec::new())),
        })
    }

    fn render_path(&self, tag: &str, secs: u32) -> Result<PathBuf, FlushError> {
        let mut p = self
            .cfg
            .path
            .replace("${tag}", &safe_tag(tag, self.has_time));
        if self.has_time {
            let dt = chrono::DateTime::from_timestamp(secs as i64, 0).unwrap_or_default();
            let mut timed = String::new();
            // fmt::Write returns a bad field's error; io::Write would panic.
            std::fmt::Write::write_fmt(&mut timed, format_args!("{}", dt.format(&p))).map_err(
                |_| {
                    FlushError::Permanent(format!("bad strftime field in path {:?}", self.cfg.path))
                },
            )?;
            p = timed;
        }
        if self.cfg.compress.is_some() && !p.ends_with(".gz") {
            p.push_str(".gz");
        }
        Ok(PathBuf::from(p))
    }
}

/// A tag as a path part: no directory separators, no parent references, and
/// `%` escaped when the template is also a strftime format.
fn safe_tag(tag: &str, escape_percent: bool) -> String {
    let mut t = tag.replace(['/', '\\'], "_");
    if t.is_empty() || t.starts_with("..") || t == "." {
        t.insert(0, '_');
    }
    if escape_percent {
        t = t.replace('%', "%%");
    }
    t
}

fn with_chunk_id(path: &Path, id: &str) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let new = match name.find('.') {
        Some(i) if i > 0 => format!("{}.{id}{}", &name[..i], &name[i..]),
        _ => format!("{name}.{id}"),
    };
    path.with_file_name(new)
}

fn create_parent(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => std::fs::create_dir_all(dir),
        _ => Ok(()),
    }
}

/// A chunk's own file (`append = false`): written again whole on a retry.
fn write_new_file(path: &Path, data: &[u8]) -> std::io::Result<()> {
    create_parent(path)?;
    std::fs::write(path, data)
}

/// One gzip member holding `data`.
fn gzip(data: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(data)?;
    z.finish()
}

/// Whether a retry can fix a failed write: a permission error, or a path
/// that names a directory, runs through a regular file (`AlreadyExists`
/// comes from creating a directory where a file is) or is too long, stays
/// wrong however long the buffer waits; a full disk or an I/O error may not.
fn write_error(path: &Path, e: std::io::Error) -> FlushError {
    use std::io::ErrorKind::*;
    let msg = format!("writing {}: {e}", path.display());
    match e.kind() {
        PermissionDenied | IsADirectory | NotADirectory | AlreadyExists | InvalidFilename => {
            FlushError::Permanent(msg)
        }
        _ => FlushError::Retry(msg),
    }
}

/// Text handed to the writer thread at a time when a chunk is streamed:
/// big enough that a write costs little per line, small enough that the
/// writer starts on a chunk's first lines while the rest is being rendered.
const PIECE: usize = 256 << 10;

/// What the renderer hands the writer thread of a streamed chunk.
enum Piece {
    /// The next group of events goes to this file (its index in the chunk).
    Open(usize, PathBuf),
    /// More text of the open group.
    Text(Vec<u8>),
}

/// The writer thread of a streamed chunk: appends each group's pieces to
/// its file as they come, holding the file's turn for the whole group, so
/// a group still lands whole or not at all (a failed write cuts the file
/// back to where the group began).
fn write_pieces(
    pieces: tokio::sync::mpsc::Receiver<Piece>,
    id: [u8; 16],
    appends: &Appends,
    spare: &Mutex<Vec<Vec<u8>>>,
) -> Result<(), FlushError> {
    let mut pieces = pieces;
    // The open group: its index, path, file, and the file's length before it.
    let mut open: Option<(usize, PathBuf, std::fs::File, u64)> = None;
    let mut turn = None;
    let mut done_groups = None;
    let result = (|| {
        while let Some(piece) = pieces.blocking_recv() {
            match piece {
                Piece::Open(i, path) => {
                    // The group before is written whole.
                    done_groups = Some(i);
                    open = None;
                    turn = None;
                    create_parent(&path).map_err(|e| write_error(&path, e))?;
                    turn = Some(appends.turn(&path));
                    let f = std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&path)
                        .map_err(|e| write_error(&path, e))?;
                    let before = f.metadata().map_err(|e| write_error(&path, e))?.len();
                    open = Some((i, path, f, before));
                }
                Piece::Text(text) => {
                    let (_, path, f, before) = open.as_mut().expect("a group is open");
                    if let Err(e) = f.write_all(&text) {
                        if let Err(e) = f.set_len(*before) {
                            tracing::error!(file = %path.display(), error = %e,
                                "cannot remove a partly written group of events; a retry will write them again after it");
                        }
                        return Err(write_error(path, e));
                    }
                    let mut kept = spare.lock().expect("spare buffers");
                    // A piece ends after the entry that filled it: one huge record makes a huge piece.
                    if kept.len() < SPARE_BUFFERS && text.capacity() <= SPARE_MAX {
                        let mut text = text;
                        text.clear();
                        kept.push(text);
                    }
                }
            }
        }
        Ok(())
    })();
    drop(turn);
    match &result {
        // The groups before the open one are in their files.
        Err(_) => appends.set_written(&id, open.as_ref().map(|o| o.0).or(done_groups)),
        Ok(()) => appends.set_written(&id, None),
    }
    result
}

impl FileOutput {
    /// One event as a line of the configured format.
    fn render(
        &self,
        tag: &str,
        time: nagare_forward::EventTime,
        record: &[u8],
        entry: &[u8],
        out: &mut Vec<u8>,
    ) {
        render_entry(
            self.cfg.format,
            &self.cfg.message_key,
            tag,
            time,
            record,
            entry,
            out,
        );
    }

    /// Consecutive events that go to the same file form a group (both ways
    /// of writing a chunk walk it so). Returns the file of a new group when
    /// the event of second `secs` starts one, None when it belongs to the
    /// `current` group. The path is rendered only when the second changes.
    fn next_group(
        &self,
        tag: &str,
        secs: u32,
        last_secs: &mut Option<u32>,
        current: Option<&Path>,
    ) -> Result<Option<PathBuf>, FlushError> {
        if *last_secs == Some(secs) || (!self.has_time && current.is_some()) {
            return Ok(None);
        }
        *last_secs = Some(secs);
        let p = self.render_path(tag, secs)?;
        Ok((current != Some(p.as_path())).then_some(p))
    }

    /// Appends a chunk while rendering it: the text goes to a writer thread
    /// piece by piece, so rendering the next lines and writing the last
    /// ones overlap (with one flush worker, a chunk's JSON and its write
    /// took turns, each leaving the other core idle).
    async fn write_streamed(&self, chunk: &Chunk) -> Result<(), FlushError> {
        let (tx, rx) = tokio::sync::mpsc::channel(2);
        let (id, appends, spare) = (chunk.id, self.appends.clone(), self.spare.clone());
        let written = appends.written(&id);
        let writer = tokio::task::spawn_blocking(move || write_pieces(rx, id, &appends, &spare));
        let rendered = self.render_pieces(chunk, written, &tx).await;
        drop(tx);
        let wrote = writer
            .await
            .map_err(|e| FlushError::Retry(format!("file writer task: {e}")))?;
        // A writer's error comes first: the renderer stops because of it.
        wrote.and(rendered)
    }

    /// Renders the groups of a chunk from group `skip` on into pieces for
    /// the writer; stops early when the writer has stopped (its error is
    /// the one to report).
    async fn render_pieces(
        &self,
        chunk: &Chunk,
        skip: usize,
        tx: &tokio::sync::mpsc::Sender<Piece>,
    ) -> Result<(), FlushError> {
        let new_buf = || {
            let mut b = self
                .spare
                .lock()
                .expect("spare buffers")
                .pop()
                .unwrap_or_default();
            b.reserve(PIECE + PIECE / 4);
            b
        };
        let mut group: Option<(usize, PathBuf)> = None;
        let mut buf = Vec::new();
        let mut last_secs = None;
        for (time, record, entry) in chunk.entries() {
            let current = group.as_ref().map(|g| g.1.as_path());
            if let Some(p) = self.next_group(&chunk.tag, time.secs, &mut last_secs, current)? {
                let i = group.as_ref().map_or(0, |g| g.0 + 1);
                if !buf.is_empty()
                    && tx
                        .send(Piece::Text(std::mem::take(&mut buf)))
                        .await
                        .is_err()
                {
                    return Ok(());
                }
                if i >= skip && tx.send(Piece::Open(i, p.clone())).await.is_err() {
                    return Ok(());
                }
                group = Some((i, p));
            }
            if group.as_ref().is_some_and(|g| g.0 < skip) {
                // Written whole by an earlier attempt.
                continue;
            }
            if buf.capacity() == 0 {
                buf = new_buf();
            }
            self.render(&chunk.tag, time, record, entry, &mut buf);
            if buf.len() >= PIECE
                && tx
                    .send(Piece::Text(std::mem::take(&mut buf)))
                    .await
                    .is_err()
            {
                return Ok(());
            }
        }
        if !buf.is_empty() {
            let _ = tx.send(Piece::Text(buf)).await;
        }
        Ok(())
    }
}

#[async_trait]
impl Output for FileOutput {
    async fn write(&self, chunk: &Chunk) -> Result<(), FlushError> {
        if self.cfg.append && self.cfg.compress.is_none() {
            return self.write_streamed(chunk).await;
        }
        // Group consecutive events by the file they go to.
        let mut groups: Vec<(PathBuf, Vec<u8>)> = Vec::new();
        let mut last_secs = None;
        for (time, record, entry) in chunk.entries() {
            let current = groups.last().map(|g| g.0.as_path());
            if let Some(p) = self.next_group(&chunk.tag, time.secs, &mut last_secs, current)? {
                let mut buf = self
                    .spare
                    .lock()
                    .expect("spare buffers")
                    .pop()
                    .unwrap_or_default();
                // JSON lines of small records are about 1.5x their msgpack.
                buf.reserve(chunk.len + chunk.len / 2);
                groups.push((p, buf));
            }
            let buf = &mut groups.last_mut().expect("a group").1;
            self.render(&chunk.tag, time, record, entry, buf);
        }
        let compress = self.cfg.compress.is_some();
        let append = self.cfg.append;
        let (id, appends, spare) = (chunk.id, self.appends.clone(), self.spare.clone());
        tokio::task::spawn_blocking(move || {
            let written = if append { appends.written(&id) } else { 0 };
            let result = (|| {
                for (i, (path, data)) in groups.iter().enumerate().skip(written) {
                    let path = if append {
                        path.clone()
                    } else {
                        with_chunk_id(path, &format!("{}_{i}", hex::encode(id)))
                    };
                    let done = (|| {
                        let zipped;
                        let data: &[u8] = if compress {
                            zipped = gzip(data)?;
                            &zipped
                        } else {
                            data
                        };
                        if append {
                            appends.append(&path, data)
                        } else {
                            write_new_file(&path, data)
                        }
                    })();
                    if let Err(e) = done {
                        if append {
                            // The groups before this one are in their files.
                            appends.set_written(&id, Some(i));
                        }
                        return Err(write_error(&path, e));
                    }
                }
                if append && written > 0 {
                    appends.set_written(&id, None);
                }
                Ok(())
            })();
            let mut kept = spare.lock().expect("spare buffers");
            for (_, mut buf) in groups {
                if kept.len() < SPARE_BUFFERS && buf.capacity() <= SPARE_MAX {
                    buf.clear();
                    kept.push(buf);
                }
            }
            result
        })
        .await
        .map_err(|e| FlushError::Retry(format!("file writer task: {e}")))?
    }
}

impl OutputPlugin for FileConfig {
    const TYPE: &'static str = "file";
    const DOC: &'static str = "Writes events to files.";

    fn build(self, cx: &mut BuildContext) -> Result<Arc<dyn Output>, OptionError> {
        // Files are created below the part of the path before its first
        // placeholder: that folder must be writable.
        let fixed = self.path.split(['%', '$']).next().unwrap_or("");
        let dir = match fixed.rfind('/') {
            Some(0) => "/",
            Some(i) => &fixed[..i],
            None => ".",
        };
        cx.writes_in("path", dir);
        let out = FileOutput::new(self, &cx.name).map_err(|e| {
            let m = format!("{e:#}");
            let m = m
                .strip_prefix(&format!("{}: ", cx.name))
                .unwrap_or(&m)
                .to_string();
            OptionError::new("path", m)
        })?;
        Ok(Arc::new(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_id_goes_before_the_extension() {
        assert_eq!(
            with_chunk_id(Path::new("/a/b/app.log"), "x1"),
            PathBuf::from("/a/b/app.x1.log")
        );
        assert_eq!(
            with_chunk_id(Path::new("/a/b/app"), "x1"),
            PathBuf::from("/a/b/app.x1")
        );
    }

    #[test]
    fn tags_cannot_escape_the_directory() {
        assert_eq!(safe_tag("../../etc/passwd", false), "_.._.._etc_passwd");
        assert_eq!(safe_tag("a%Y", true), "a%%Y");
    }

    /// `n` entries `[secs, {"m": "<i> xxx…"}]` of about 100 bytes each.
    fn entries(secs: u32, n: usize, out: &mut Vec<u8>) {
        for i in 0..n {
            let m = format!("{i} {}", "x".repeat(90));
            out.extend_from_slice(&[0x92, 0xce]);
            out.extend_from_slice(&secs.to_be_bytes());
            out.extend_from_slice(&[0x81, 0xa1, b'm', 0xd9, m.len() as u8]);
            out.extend_from_slice(m.as_bytes());
        }
    }

    /// A file output writing JSON lines, appending, to `path`.
    fn json_appending_to(path: &str) -> FileOutput {
        let cfg = FileConfig {
            path: path.into(),
            format: Format::Json,
            message_key: "message".into(),
            append: true,
            compress: None,
        };
        FileOutput::new(cfg, "file#0").unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_streamed_chunk_is_retried_without_writing_a_group_twice() {
        let dir = tempfile::tempdir().unwrap();
        let f = json_appending_to(&format!("{}/%S.log", dir.path().display()));
        // Second 1: many pieces' worth of text; second 2: a few lines.
        let mut payload = Vec::new();
        entries(1, 20_000, &mut payload);
        entries(2, 3, &mut payload);
        let chunk = Chunk::in_memory([7; 16], "t".into(), payload, 20_003);
        let (one, two) = (dir.path().join("01.log"), dir.path().join("02.log"));
        // The second group's file cannot be opened: the first is written
        // whole, the attempt fails.
        std::fs::create_dir(&two).unwrap();
        assert!(f.write(&chunk).await.is_err());
        let lines = |p: &Path| std::fs::read_to_string(p).unwrap().lines().count();
        assert_eq!(lines(&one), 20_000);
        // The retry writes only the second group.
        std::fs::remove_dir(&two).unwrap();
        f.write(&chunk).await.unwrap();
        assert_eq!((lines(&one), lines(&two)), (20_000, 3));
        let text = std::fs::read_to_string(&one).unwrap();
        assert!(text
            .lines()
            .enumerate()
            .all(|(i, l)| l.contains(&format!("\"m\":\"{i} x"))));
        // A chunk written whole in one go is forgotten: writing it again appends it again.
        f.write(&chunk).await.unwrap();
        assert_eq!((lines(&one), lines(&two)), (40_000, 6));
    }

    #[test]
    fn path_template() {
        let f = json_appending_to("/logs/${tag}/%Y-%m-%d.log");
        assert_eq!(
            f.render_path("web.access", 86400 * 365).unwrap(),
            PathBuf::from("/logs/web.access/1971-01-01.log")
        );
    }
}
