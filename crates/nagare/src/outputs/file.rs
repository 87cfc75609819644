//! `file`: writes events to files named by a template.
//!
//! The path may contain strftime fields (from each event's time, UTC) and
//! `${tag}`, so files are sliced by time and tag. With `append = true` (the
//! default) every chunk is appended to the file its events name, which is how
//! a receiver unifies many senders into one file; with `append = false` each
//! chunk gets its own file with the chunk id before the extension.

use std::io::Write;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use serde::Deserialize;

use super::stdout::{default_message_key, render_entry};
use super::{FlushError, Output};
use crate::buffer::Chunk;
use crate::formats::Format;
use crate::plugin::{BuildContext, OptionError, OutputPlugin};
use std::sync::Arc;

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
    #[serde(default = "yes")]
    pub append: bool,
    /// "gzip" compresses each write as one gzip member (".gz" is added to the name).
    #[serde(default)]
    pub compress: Option<FileCompression>,
}

fn yes() -> bool {
    true
}

pub struct FileOutput {
    cfg: FileConfig,
    has_time: bool,
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
        })
    }

    fn render_path(&self, tag: &str, secs: u32) -> PathBuf {
        let mut p = self
            .cfg
            .path
            .replace("${tag}", &safe_tag(tag, self.has_time));
        if self.has_time {
            let dt = chrono::DateTime::from_timestamp(secs as i64, 0).unwrap_or_default();
            p = dt.format(&p).to_string();
        }
        if self.cfg.compress.is_some() && !p.ends_with(".gz") {
            p.push_str(".gz");
        }
        PathBuf::from(p)
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

fn write_file(path: &Path, data: &[u8], gzip: bool, append: bool) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir)?;
        }
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(append)
        .write(true)
        .truncate(!append)
        .open(path)?;
    if gzip {
        let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(data)?;
        f.write_all(&z.finish()?)
    } else {
        f.write_all(data)
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
                let p = self.render_path(&chunk.tag, time.secs);
                if groups.last().map(|g| &g.0) != Some(&p) {
                    groups.push((p, Vec::with_capacity(chunk.len)));
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
        let gzip = self.cfg.compress.is_some();
        let append = self.cfg.append;
        let id = chunk.id_hex();
        tokio::task::spawn_blocking(move || {
            for (i, (path, data)) in groups.into_iter().enumerate() {
                let path = if append {
                    path
                } else {
                    with_chunk_id(&path, &format!("{id}_{i}"))
                };
                write_file(&path, &data, gzip, append)
                    .map_err(|e| FlushError::Retry(format!("writing {}: {e}", path.display())))?;
            }
            Ok(())
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
            f.render_path("web.access", 86400 * 365),
            PathBuf::from("/logs/web.access/1971-01-01.log")
        );
    }
}
