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
use serde::Deserialize;

use super::stdout::{default_message_key, render_entry};
use super::{FlushError, Output};
use crate::buffer::Chunk;
use crate::formats::Format;
use crate::plugin::{BuildContext, OptionError, OutputPlugin};

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum FileCompression {
    Gzip,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// File path template, e.g. "/var/log/nagare/${tag}/%Y-%m-%d.log".
    pub path: String,
    /// "json" (default), "ltsv", "msgpack" or "single_value".
    #[serde(default)]
    pub format: Format,
    /// The field written by format "single_value" (default "message").
    #[serde(default = "default_message_key")]
    pub message_key: String,
    /// Append to the named file (default true); false gives each chunk its own file.
    #[serde(default = "crate::config::yes")]
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

    /// Appends `data` to `path` whole or not at all: a write that fails
    /// half-way (disk full) is cut back off, so a retry does not leave the
    /// first half of the group in the file twice.
    fn append(&self, path: &Path, data: &[u8]) -> std::io::Result<()> {
        create_parent(path)?;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        path.hash(&mut h);
        let _turn = self.turns[h.finish() as usize % FILE_TURNS]
            .lock()
            .expect("file turn");
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
            std::fmt::Write::write_fmt(&mut timed, format_args!("{}", dt.format(&p))).map_err(|_| {
                FlushError::Permanent(format!("bad strftime field in path {:?}", self.cfg.path))
            })?;
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

#[async_trait]
impl Output for FileOutput {
    async fn write(&self, chunk: &Chunk) -> Result<(), FlushError> {
        // Group consecutive events by the file they go to.
        let mut groups: Vec<(PathBuf, Vec<u8>)> = Vec::new();
        let mut last_secs = None;
        for (time, record, entry) in chunk.entries() {
            let same = last_secs == Some(time.secs) || (!self.has_time && !groups.is_empty());
            if !same {
                let p = self.render_path(&chunk.tag, time.secs)?;
                if groups.last().map(|g| &g.0) != Some(&p) {
                    let mut buf = self.spare.lock().expect("spare buffers").pop().unwrap_or_default();
                    // JSON lines of small records are about 1.5x their msgpack.
                    buf.reserve(chunk.len + chunk.len / 2);
                    groups.push((p, buf));
                }
                last_secs = Some(time.secs);
            }
            let buf = &mut groups.last_mut().expect("a group").1;
            render_entry(
                self.cfg.format,
                &self.cfg.message_key,
                &chunk.tag,
                time,
                record,
                entry,
                buf,
            );
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
            let m = m.strip_prefix(&format!("{}: ", cx.name)).unwrap_or(&m).to_string();
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

    #[test]
    fn path_template() {
        let f = FileOutput::new(
            FileConfig {
                path: "/logs/${tag}/%Y-%m-%d.log".into(),
                format: Format::Json,
                message_key: "message".into(),
                append: true,
                compress: None,
            },
            "file#0",
        )
        .unwrap();
        assert_eq!(
            f.render_path("web.access", 86400 * 365).unwrap(),
            PathBuf::from("/logs/web.access/1971-01-01.log")
        );
    }
}
