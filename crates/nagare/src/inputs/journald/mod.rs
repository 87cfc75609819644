//! `journald`: reads the systemd journal, like fluent-plugin-systemd,
//! Fluent Bit's in_systemd and Vector's journald source.
//!
//! The journal is read through `journalctl --output=export --follow`
//! (Vector's way), not by binding libsystemd's sd-journal nor by reading the
//! journal file format here: journalctl is systemd's own reader, so the file
//! format (compression, keyed hashes, new versions), rotation, vacuuming,
//! journald restarts and corrupt files are systemd's business; nagare needs
//! no libsystemd at build or run time (its binary stays static-friendly and
//! starts on hosts without systemd), and a crash in the reader cannot take
//! the daemon down. The export format is the exact one (every byte of a
//! binary field, repeated fields), and cheap to read: export.rs. The cost is
//! one extra process and a pipe; docs/benchmarks/journald.md measures it.
//!
//! Each entry becomes an event: its time is `__REALTIME_TIMESTAMP`, its
//! record the entry's fields (all but the `__` addressing fields, or the
//! ones `fields` names), values as text (bytes when they are not UTF-8), a
//! field the entry holds several times as an array. The cursor of the last
//! entry appended to the outputs' buffers is saved (cursor.rs) and
//! journalctl restarted after it, so nothing is lost or read twice across
//! restarts of journalctl or nagare.

mod cursor;
mod export;

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use nagare_core::metrics::PluginStats;
use nagare_core::plugin::{serde_inline_default, BuildContext, OptionError};
use nagare_core::units::Size;
use nagare_forward::msgpack::{write_array_len, write_bin_header, write_map_len, write_str};
use nagare_forward::EventTime;
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use self::cursor::Cursor;
use self::export::{Entry, ExportReader};
use crate::inputs::common::append::append_batch;
use crate::inputs::{Input, InputContext, InputPlugin};
use crate::router::LiveRouter;

#[serde_inline_default]
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JournaldConfig {
    /// The events' tag; `${record.FIELD}` is replaced by the entry's value
    /// of that field, "unknown" when it has none (e.g.
    /// "journal.${record._SYSTEMD_UNIT}"). Default "journal".
    #[serde_inline_default("journal".into())]
    pub tag: String,
    /// A journal directory to read (journalctl's `--directory`, e.g. a
    /// /var/log/journal mounted from the host); default: the system journal
    /// (/var/log/journal and /run/log/journal).
    #[serde(default)]
    pub directory: Option<String>,
    /// journalctl's matches: "FIELD=value" (e.g. "_SYSTEMD_UNIT=nginx.service");
    /// matches of one field are ORed, of different fields ANDed, and "+"
    /// between two groups ORs the groups. Default: every entry.
    #[serde(default)]
    pub matches: Vec<String>,
    /// The fields kept in each record (e.g. ["MESSAGE", "PRIORITY",
    /// "_SYSTEMD_UNIT", "_PID"]); default: every field but the `__`
    /// addressing fields (`__CURSOR`, `__REALTIME_TIMESTAMP`,
    /// `__MONOTONIC_TIMESTAMP`), which are kept only when named here.
    #[serde(default)]
    pub fields: Vec<String>,
    /// File that keeps the cursor of the last entry read across restarts
    /// (saved like tail's `position_db`).
    #[serde(default)]
    pub cursor_file: Option<String>,
    /// Without a saved cursor: read the whole journal (true) or only the
    /// entries written from nagare's start on (default false).
    #[serde(default)]
    pub read_from_head: bool,
    /// The journalctl program (default "journalctl", found on PATH).
    #[serde_inline_default("journalctl".into())]
    pub journalctl_path: String,
    /// Longest field value kept whole (default "1MiB"); a longer one is cut
    /// to this size, the record gets `"nagare_truncated": true`, and it is
    /// counted as an error.
    #[serde_inline_default(crate::inputs::common::DEFAULT_MAX_LINE)]
    pub max_field_size: Size,
}

impl InputPlugin for JournaldConfig {
    const TYPE: &'static str = "journald";
    const DOC: &'static str = "Reads the systemd journal (or a journal `directory`) through `journalctl --output=export --follow`: each entry becomes an event timed by `__REALTIME_TIMESTAMP` whose record holds its fields; `matches` select entries, the tag can name a field (`journal.${record._SYSTEMD_UNIT}`), and a `cursor_file` lets a restart go on where it stopped (see [Host sources](host-sources.md#journald)).";

    fn build(self, cx: &mut BuildContext) -> Result<Box<dyn Input>, OptionError> {
        let tag = TagTemplate::parse(&self.tag).map_err(|e| OptionError::new("tag", e))?;
        for (i, m) in self.matches.iter().enumerate() {
            check_match(m).map_err(|e| OptionError::new(format!("matches[{i}]"), e))?;
        }
        for (i, f) in self.fields.iter().enumerate() {
            if !valid_field_name(f) {
                return Err(OptionError::new(
                    format!("fields[{i}]"),
                    format!("{f:?} is not a journal field name (capital letters, digits and _, not starting with a digit)"),
                ));
            }
        }
        if self.journalctl_path.trim().is_empty() {
            return Err(OptionError::new("journalctl_path", "must name a program"));
        }
        if self.max_field_size.0 == 0 {
            return Err(OptionError::new(
                "max_field_size",
                "must be at least 1 byte",
            ));
        }
        match &self.cursor_file {
            Some(p) => cx.writes_file("cursor_file", p),
            None => cx.warn(
                "cursor_file",
                "no cursor_file: after a restart, reading starts again as at the first start (entries are skipped or read twice); set one, e.g. cursor_file = \"/var/lib/nagare/journald.cursor\"",
            ),
        }
        Ok(Box::new(Journald { cfg: self, tag }))
    }
}

/// A journal field name as journald accepts it.
fn valid_field_name(f: &str) -> bool {
    !f.is_empty()
        && f.len() <= 64
        && !f.as_bytes()[0].is_ascii_digit()
        && f.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

fn check_match(m: &str) -> Result<(), String> {
    if m == "+" {
        return Ok(());
    }
    match m.split_once('=') {
        Some((field, _)) if valid_field_name(field) => Ok(()),
        _ => Err(format!(
            "{m:?} is not a match: write \"FIELD=value\" (e.g. \"_SYSTEMD_UNIT=nginx.service\") or \"+\""
        )),
    }
}

/// The tag with `${record.FIELD}` parts.
#[derive(Debug, Clone)]
enum TagPart {
    Text(String),
    Field(String),
}

#[derive(Debug, Clone)]
struct TagTemplate(Vec<TagPart>);

/// A tag part for an entry that lacks the field (as Fluent Bit's in_systemd).
const UNKNOWN: &str = "unknown";

impl TagTemplate {
    fn parse(s: &str) -> Result<TagTemplate, String> {
        if s.trim().is_empty() {
            return Err("must not be empty".into());
        }
        let mut parts = Vec::new();
        let mut rest = s;
        while let Some(i) = rest.find("${") {
            if i > 0 {
                parts.push(TagPart::Text(rest[..i].to_string()));
            }
            let Some(end) = rest[i..].find('}') else {
                return Err(format!("{s:?}: `${{` without its `}}`"));
            };
            let inner = &rest[i + 2..i + end];
            let Some(name) = inner.strip_prefix("record.") else {
                return Err(format!(
                    "{s:?}: `${{{inner}}}`: a tag names a field as `${{record.FIELD}}` (e.g. \"journal.${{record._SYSTEMD_UNIT}}\")"
                ));
            };
            if !valid_field_name(name) {
                return Err(format!("{s:?}: {name:?} is not a journal field name"));
            }
            parts.push(TagPart::Field(name.to_string()));
            rest = &rest[i + end + 1..];
        }
        if !rest.is_empty() {
            parts.push(TagPart::Text(rest.to_string()));
        }
        Ok(TagTemplate(parts))
    }

    fn fields(&self) -> impl Iterator<Item = &str> {
        self.0.iter().filter_map(|p| match p {
            TagPart::Field(f) => Some(f.as_str()),
            TagPart::Text(_) => None,
        })
    }

    /// The whole tag when it names no field.
    fn constant(&self) -> Option<String> {
        match &self.0[..] {
            [] => Some(String::new()),
            [TagPart::Text(t)] => Some(t.clone()),
            _ => None,
        }
    }

    fn render(&self, entry: &Entry<'_>, out: &mut String) {
        out.clear();
        for p in &self.0 {
            match p {
                TagPart::Text(t) => out.push_str(t),
                TagPart::Field(f) => match entry.get(f.as_bytes()) {
                    Some(v) if !v.is_empty() => out.push_str(&String::from_utf8_lossy(v)),
                    _ => out.push_str(UNKNOWN),
                },
            }
        }
    }
}

struct Journald {
    cfg: JournaldConfig,
    tag: TagTemplate,
}

#[async_trait::async_trait]
impl Input for Journald {
    async fn start(self: Box<Self>, cx: InputContext) -> anyhow::Result<Vec<JoinHandle<()>>> {
        let cursor = Cursor::load(
            self.cfg.cursor_file.as_deref().map(std::path::Path::new),
            &cx.name,
        )?;
        let reader = Reader {
            name: cx.name.clone(),
            encoder: Encoder::new(&self.cfg, self.tag.clone()),
            cfg: self.cfg,
            router: cx.router,
            stats: cx.stats,
            cursor,
            saving_failed: false,
        };
        // The first start shows a missing journalctl at once, as an error
        // of the daemon's start; later ones are retried.
        let child = reader.spawn()?;
        let shutdown = cx.shutdown;
        Ok(vec![tokio::spawn(async move {
            reader.run(child, shutdown).await
        })])
    }
}

/// Turns entries into PackedForward entries.
struct Encoder {
    tag: TagTemplate,
    constant_tag: Option<String>,
    /// Fields kept; empty: all but the `__` ones.
    keep: Vec<Vec<u8>>,
    /// Reused: (first index, count) of each kept key in the entry.
    firsts: Vec<(usize, u32)>,
}

impl Encoder {
    fn new(cfg: &JournaldConfig, tag: TagTemplate) -> Encoder {
        Encoder {
            constant_tag: tag.constant(),
            tag,
            keep: cfg.fields.iter().map(|f| f.as_bytes().to_vec()).collect(),
            firsts: Vec::new(),
        }
    }

    fn keeps(&self, key: &[u8]) -> bool {
        if self.keep.is_empty() {
            !key.starts_with(b"__")
        } else {
            self.keep.iter().any(|k| k == key)
        }
    }

    /// Appends `[time, record]` for `entry` to `out`.
    fn encode(&mut self, entry: &Entry<'_>, out: &mut Vec<u8>) {
        let time = entry
            .get(b"__REALTIME_TIMESTAMP")
            .and_then(|v| std::str::from_utf8(v).ok()?.parse::<u64>().ok())
            .map(|us| EventTime::new((us / 1_000_000) as u32, (us % 1_000_000) as u32 * 1000))
            .unwrap_or_else(EventTime::now);
        out.push(0x92);
        out.extend_from_slice(&time.to_bytes());
        self.firsts.clear();
        for i in 0..entry.len() {
            let (key, _, _) = entry.field(i);
            if !self.keeps(key) {
                continue;
            }
            match self
                .firsts
                .iter_mut()
                .find(|(j, _)| entry.field(*j).0 == key)
            {
                Some((_, n)) => *n += 1,
                None => self.firsts.push((i, 1)),
            }
        }
        write_map_len(out, self.firsts.len() + entry.cut as usize);
        for &(i, n) in &self.firsts {
            let (key, value, binary) = entry.field(i);
            write_str(out, key);
            if n == 1 {
                write_value(out, value, binary);
                continue;
            }
            // A field the entry holds several times: all its values, in order.
            write_array_len(out, n as usize);
            for j in i..entry.len() {
                let (k, v, b) = entry.field(j);
                if k == key {
                    write_value(out, v, b);
                }
            }
        }
        if entry.cut {
            write_str(out, b"nagare_truncated");
            out.push(0xc3);
        }
    }
}

/// A value as text, or as bytes when it is not UTF-8 (journalctl writes
/// text-form values only when they are printable UTF-8).
fn write_value(out: &mut Vec<u8>, v: &[u8], binary: bool) {
    if binary && std::str::from_utf8(v).is_err() {
        write_bin_header(out, v.len());
        out.extend_from_slice(v);
    } else {
        write_str(out, v);
    }
}

/// The batches of one read, by tag.
#[derive(Default)]
struct Batches {
    /// (tag, entries, count), in the order the tags came.
    by_tag: Vec<(String, Vec<u8>, u32)>,
    /// The cursor of the last entry.
    last_cursor: Vec<u8>,
    entries: u64,
    cut: u64,
}

impl Batches {
    fn clear(&mut self) {
        self.by_tag.clear();
        self.last_cursor.clear();
        self.entries = 0;
        self.cut = 0;
    }

    fn buffer(&mut self, tag: &str) -> &mut (String, Vec<u8>, u32) {
        let i = match self.by_tag.iter().position(|(t, _, _)| t == tag) {
            Some(i) => i,
            None => {
                self.by_tag.push((tag.to_string(), Vec::new(), 0));
                self.by_tag.len() - 1
            }
        };
        &mut self.by_tag[i]
    }
}

/// The longest a restart of journalctl waits after it failed.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A journalctl that ran this long before it ended is restarted at once.
const RAN_FINE: Duration = Duration::from_secs(10);
/// What one read from journalctl's pipe takes at most, and the size asked
/// for the pipe.
const READ_SIZE: usize = 1 << 20;

/// Asks for a pipe of `READ_SIZE` (Linux gives 64 KiB): journalctl then
/// writes and nagare reads in bigger pieces, with fewer wake-ups of each.
/// Refused beyond /proc/sys/fs/pipe-max-size for a user without
/// CAP_SYS_RESOURCE: the default pipe then works as well, a little slower.
fn grow_pipe(stdout: &tokio::process::ChildStdout) {
    use std::os::fd::AsRawFd;
    // SAFETY: fcntl on a descriptor the ChildStdout owns and keeps open.
    unsafe {
        libc::fcntl(
            stdout.as_raw_fd(),
            libc::F_SETPIPE_SZ,
            READ_SIZE as libc::c_int,
        )
    };
}
/// Lines of journalctl's stderr logged per run at most.
const STDERR_LINES: usize = 50;

struct Reader {
    name: String,
    cfg: JournaldConfig,
    encoder: Encoder,
    router: LiveRouter,
    stats: Arc<PluginStats>,
    cursor: Cursor,
    saving_failed: bool,
}

/// Why reading one journalctl ended.
enum Ended {
    Stopping,
    /// It ended or its output was not the export format.
    Exited,
}

impl Reader {
    /// journalctl's arguments: resume after the cursor, or start at the
    /// head or the tail.
    fn args(&self) -> Vec<String> {
        let mut a = vec![
            "--output=export".to_string(),
            "--follow".into(),
            "--no-pager".into(),
            // Undo --follow's "the last 10 entries" (the start is chosen below).
            "--no-tail".into(),
        ];
        if let Some(d) = &self.cfg.directory {
            a.push(format!("--directory={d}"));
        }
        if !self.cfg.fields.is_empty() {
            // Only what is kept (and what the tag names) crosses the pipe.
            let mut f: Vec<&str> = self.cfg.fields.iter().map(String::as_str).collect();
            f.extend(self.encoder.tag.fields());
            a.push(format!("--output-fields={}", f.join(",")));
        }
        match self.cursor.get() {
            // Not --after-cursor: journalctl 252 skips one entry after
            // seeking, which is the wrong one when the cursor's entry is
            // gone (vacuumed). From the cursor on, and its own entry, when
            // it is still there, dropped here (`read`).
            Some(c) => a.push(format!("--cursor={c}")),
            None if self.cfg.read_from_head => {}
            None => {
                a.retain(|x| x != "--no-tail");
                a.push("--lines=0".into());
            }
        }
        a.extend(self.cfg.matches.iter().cloned());
        a
    }

    fn spawn(&self) -> anyhow::Result<tokio::process::Child> {
        let args = self.args();
        let child = tokio::process::Command::new(&self.cfg.journalctl_path)
            .args(&args)
            .env("SYSTEMD_COLORS", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            // Its own process group: a Ctrl-C at nagare's terminal stops
            // nagare (which then stops journalctl), not journalctl first.
            .process_group(0)
            .spawn()
            .map_err(|e| {
                anyhow::anyhow!(
                    "{}: cannot run {:?}: {e} (journalctl comes with systemd; set journalctl_path if it is elsewhere)",
                    self.name,
                    self.cfg.journalctl_path
                )
            })?;
        tracing::info!(input = %self.name, command = %format!("{} {}", self.cfg.journalctl_path, args.join(" ")), "reading the journal");
        Ok(child)
    }

    async fn run(mut self, first: tokio::process::Child, mut shutdown: watch::Receiver<bool>) {
        let mut child = Some(first);
        let mut backoff = Duration::from_secs(1);
        loop {
            if let Some(c) = child.take() {
                let started = Instant::now();
                let ended = self.read(c, &mut shutdown).await;
                self.save(true);
                if matches!(ended, Ended::Stopping) {
                    return;
                }
                if started.elapsed() >= RAN_FINE {
                    backoff = Duration::from_secs(1);
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = shutdown.changed() => {}
            }
            if *shutdown.borrow() {
                return;
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
            match self.spawn() {
                Ok(c) => child = Some(c),
                Err(e) => tracing::warn!(input = %self.name, error = %e, "will retry"),
            }
        }
    }

    /// Reads one journalctl to its end (or until nagare stops).
    async fn read(
        &mut self,
        mut child: tokio::process::Child,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Ended {
        let mut stdout = child.stdout.take().expect("piped stdout");
        grow_pipe(&stdout);
        let stderr = child.stderr.take().expect("piped stderr");
        let name = self.name.clone();
        let stderr_task = tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            let mut last = Vec::new();
            let mut n = 0;
            while let Ok(Some(l)) = lines.next_line().await {
                n += 1;
                if n <= STDERR_LINES {
                    tracing::warn!(input = %name, "journalctl: {}", l.chars().take(4096).collect::<String>());
                }
                last = l.into_bytes();
            }
            String::from_utf8_lossy(&last).into_owned()
        });
        let mut parser = ExportReader::new(self.cfg.max_field_size.0 as usize);
        let mut chunk = vec![0u8; READ_SIZE];
        let mut batches = Batches::default();
        let mut tag = String::new();
        let mut read_any = false;
        // The entry of the cursor journalctl started at, if it is still in
        // the journal: the first one it gives (it was read before).
        let mut resumed_at = self.cursor.get().map(|c| c.as_bytes().to_vec());
        let ended = loop {
            if *shutdown.borrow() {
                break Ended::Stopping;
            }
            let due = self.cursor.due();
            let n = tokio::select! {
                r = stdout.read(&mut chunk) => match r {
                    Ok(0) => break Ended::Exited,
                    Ok(n) => n,
                    Err(e) => {
                        tracing::warn!(input = %self.name, error = %e, "cannot read journalctl's output");
                        break Ended::Exited;
                    }
                },
                _ = async {
                    match due {
                        Some(t) => tokio::time::sleep_until(t.into()).await,
                        None => std::future::pending().await,
                    }
                } => {
                    self.save(false);
                    continue;
                }
                _ = shutdown.changed() => continue,
            };
            read_any = true;
            parser.feed(&chunk[..n]);
            let encoder = &mut self.encoder;
            let parsed = parser.parse(|e| {
                if let Some(c) = resumed_at.take() {
                    if e.get(b"__CURSOR") == Some(&c[..]) {
                        return;
                    }
                }
                let tag = match &encoder.constant_tag {
                    Some(t) => t.as_str(),
                    None => {
                        encoder.tag.render(&e, &mut tag);
                        tag.as_str()
                    }
                };
                let b = batches.buffer(tag);
                encoder.encode(&e, &mut b.1);
                b.2 += 1;
                batches.entries += 1;
                batches.cut += e.cut as u64;
                if let Some(c) = e.get(b"__CURSOR") {
                    batches.last_cursor.clear();
                    batches.last_cursor.extend_from_slice(c);
                }
            });
            if !self.append(&mut batches).await {
                break Ended::Stopping;
            }
            if let Err(e) = parsed {
                tracing::error!(input = %self.name, error = %e, "journalctl's output is not the export format; restarting it after the last entry read");
                break Ended::Exited;
            }
            self.save(false);
        };
        let _ = child.start_kill();
        let status = child.wait().await;
        let last_err = match tokio::time::timeout(Duration::from_secs(1), stderr_task).await {
            Ok(Ok(s)) => s,
            _ => String::new(),
        };
        if matches!(ended, Ended::Exited) {
            let how = match status {
                Ok(s) => s.to_string(),
                Err(e) => e.to_string(),
            };
            tracing::warn!(input = %self.name, status = %how, last_error = %last_err, read_any,
                "journalctl ended; restarting it after the last entry read");
        }
        ended
    }

    /// Appends what one read gave; the cursor moves once it is all in the
    /// buffers. False when an output refused (nagare stops: the entries are
    /// read again after the restart).
    async fn append(&mut self, batches: &mut Batches) -> bool {
        if batches.entries == 0 {
            return true;
        }
        if batches.cut > 0 {
            PluginStats::add(&self.stats.errors, batches.cut);
            tracing::warn!(input = %self.name, entries = batches.cut, max_field_size = self.cfg.max_field_size.0,
                "entries with a field longer than max_field_size: cut, marked \"nagare_truncated\"");
        }
        for (tag, entries, count) in &mut batches.by_tag {
            if *count == 0 {
                continue;
            }
            let bytes = Bytes::from(std::mem::take(entries));
            let n = std::mem::take(count);
            if !append_batch(&self.name, &self.router, &self.stats, tag, bytes, n, false).await {
                return false;
            }
        }
        if !batches.last_cursor.is_empty() {
            self.cursor.set(&batches.last_cursor);
        }
        batches.clear();
        true
    }

    /// Saves the cursor (at once with `now`, else when due); a failure is
    /// logged once until a save works again.
    fn save(&mut self, now: bool) {
        match self.cursor.save(now) {
            Ok(()) => self.saving_failed = false,
            Err(e) => {
                if !self.saving_failed {
                    tracing::error!(input = %self.name, path = ?self.cfg.cursor_file, error = %e,
                        "cannot save the cursor (a restart would read entries again)");
                }
                self.saving_failed = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry_stream() -> Vec<u8> {
        let mut s = b"__CURSOR=s=a;i=1\n__REALTIME_TIMESTAMP=1700000000123456\nMESSAGE=hello\n_SYSTEMD_UNIT=a.service\nTAG=x\nTAG=y\n".to_vec();
        s.extend_from_slice(b"BIN\n");
        s.extend_from_slice(&3u64.to_le_bytes());
        s.extend_from_slice(&[0xff, 0, 1]);
        s.extend_from_slice(b"\n\n");
        s
    }

    fn encode(cfg: &str) -> (String, rmpv::Value, EventTime) {
        let cfg: JournaldConfig = toml::from_str(cfg).unwrap();
        let tag = TagTemplate::parse(&cfg.tag).unwrap();
        let mut enc = Encoder::new(&cfg, tag);
        let mut r = ExportReader::new(1 << 20);
        r.feed(&entry_stream());
        let mut out = Vec::new();
        let mut t = String::new();
        r.parse(|e| {
            enc.tag.render(&e, &mut t);
            enc.encode(&e, &mut out);
        })
        .unwrap();
        let v = rmpv::decode::read_value(&mut &out[..]).unwrap();
        let time = match &v[0] {
            rmpv::Value::Ext(0, b) => EventTime::new(
                u32::from_be_bytes(b[..4].try_into().unwrap()),
                u32::from_be_bytes(b[4..].try_into().unwrap()),
            ),
            other => panic!("{other:?}"),
        };
        (t, v[1].clone(), time)
    }

    #[test]
    fn records_tags_and_times() {
        let (tag, rec, time) = encode("tag = \"journal.${record._SYSTEMD_UNIT}.${record.NOPE}\"");
        assert_eq!(tag, "journal.a.service.unknown");
        assert_eq!(time, EventTime::new(1_700_000_000, 123_456_000));
        let want = rmpv::Value::Map(vec![
            ("MESSAGE".into(), "hello".into()),
            ("_SYSTEMD_UNIT".into(), "a.service".into()),
            (
                "TAG".into(),
                rmpv::Value::Array(vec!["x".into(), "y".into()]),
            ),
            ("BIN".into(), rmpv::Value::Binary(vec![0xff, 0, 1])),
        ]);
        assert_eq!(rec, want);

        let (_, rec, _) = encode("fields = [\"MESSAGE\", \"__CURSOR\"]");
        let want = rmpv::Value::Map(vec![
            ("__CURSOR".into(), "s=a;i=1".into()),
            ("MESSAGE".into(), "hello".into()),
        ]);
        assert_eq!(rec, want);
    }

    #[test]
    fn options_are_checked() {
        assert!(TagTemplate::parse("a.${record.x}").is_err());
        assert!(TagTemplate::parse("a.${tag}").is_err());
        assert!(TagTemplate::parse("a.${record.X").is_err());
        assert!(TagTemplate::parse("").is_err());
        assert!(check_match("_SYSTEMD_UNIT=a.service").is_ok());
        assert!(check_match("+").is_ok());
        assert!(check_match("unit=a").is_err());
        assert!(check_match("nomatch").is_err());
    }
}
