//! `loki`: pushes each chunk to Grafana Loki's push API
//! (`/loki/api/v1/push`) as protobuf compressed with snappy (Loki's
//! default) or as JSON (`format = "json"`, optionally gzip'd).
//!
//! Each event becomes one entry of a stream: the stream's labels are the
//! `labels` templates (`${tag}`, `${record.FIELD}`, …) rendered for the
//! event, the entry's line the record as JSON without the fields the
//! labels and `structured_metadata` read (or one field, `line_key`), and
//! its structured metadata the `structured_metadata` templates. The
//! entries of one stream are sorted by time within a request (Loki
//! refuses an entry older than the one before it in its stream when
//! unordered writes are off).
//!
//! Label cardinality is capped: past `max_label_sets` distinct label sets
//! (since start), an event whose set is new goes to the overflow stream
//! (the labels that read no record field, plus `overflow_label="true"`);
//! its fields stay in its line. Counted (`label_overflow_events_total`)
//! and logged.
//!
//! A chunk goes in requests of at most `max_request_size` of lines (of
//! about one size: http_client.rs `even_parts`),
//! `request_concurrency` of them in flight at once (http_client.rs
//! `send_parts`): more requests in flight helped under load, not on a
//! quiet machine (docs/benchmarks/loki.md).
//!
//! Loki answers a whole request, not each entry: a 400 naming streams
//! (entries out of order, too old, too new, too long) means Loki took the
//! other streams' entries and refused some of the named streams'. The
//! named streams' entries are refused (secondary output or dead letters,
//! counted by reason), the rest counted delivered: a retry would only get
//! the same answer. A 401/403 is retried with the events kept; a 413
//! splits the request in halves and sends them again.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use async_trait::async_trait;
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::StatusCode;
use nagare_core::metrics::PluginStats;
use nagare_core::output::OutputPlugin;
use nagare_core::output::{FlushError, Output};
use nagare_core::plugin::{BuildContext, OptionError};
use nagare_core::record::{map_at, pair_at, value_text, FieldPath};
use nagare_core::units::Size;
use nagare_forward::EventTime;
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, WireType};
use serde::Deserialize;

use crate::buffer::Chunk;
use crate::formats::template::Template;
use crate::net::http_client::{
    even_parts, http_client_options, Compress, HttpSender, PartSent, Undelivered,
};

/// The body of a push request.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum LokiFormat {
    /// Loki's PushRequest protobuf, snappy-compressed (Loki's own clients' form).
    #[default]
    Protobuf,
    /// The JSON form of the push API (`{"streams":[…]}`).
    Json,
}

fn default_labels() -> BTreeMap<String, String> {
    BTreeMap::from([("tag".to_string(), "${tag}".to_string())])
}

http_client_options!(
    /// The `loki` output (`compress = "gzip"` only with `format = "json"`:
    /// a protobuf body is snappy-compressed already).
    LokiOutputConfig {
        /// The push URL, e.g. "http://127.0.0.1:3100/loki/api/v1/push" or
        /// "https://…" (TLS, with `tls`). Required.
        endpoint: String,
        /// "protobuf" (default: snappy-compressed protobuf) or "json".
        #[serde(default)]
        format: LokiFormat,
        /// `[output.labels]`: label name = template (`${tag}`,
        /// `${tag_parts[N]}`, `${hostname}`, `${record.FIELD}`, text). A
        /// label whose text is empty for an event is left out. Default:
        /// `{ tag = "${tag}" }`.
        #[serde(default = "default_labels")]
        labels: BTreeMap<String, String>,
        /// `[output.structured_metadata]`: name = template, sent as each
        /// entry's structured metadata (empty values left out).
        #[serde(default)]
        structured_metadata: BTreeMap<String, String>,
        /// The record field whose text is the line (default: none: the
        /// line is the record as JSON).
        #[serde(default)]
        line_key: Option<String>,
        /// Keep the top-level fields the labels and structured metadata
        /// read in the JSON line (default false: they are removed, as they
        /// are in the stream's labels already).
        #[serde(default)]
        keep_label_fields: bool,
        /// The most distinct label sets sent since start (default 1000);
        /// an event whose set is new past it goes to the overflow stream.
        #[serde_inline_default(1000)]
        max_label_sets: usize,
        /// The label that marks the overflow stream (default
        /// "nagare_overflow").
        #[serde_inline_default("nagare_overflow".into())]
        overflow_label: String,
        /// The largest request, counted as the entries' lines and
        /// structured metadata before compression: a chunk larger is
        /// pushed in several requests of about one size,
        /// `request_concurrency` of them at once (default "1MiB": fewer,
        /// larger requests cost the server and nagare less CPU per event;
        /// Loki's distributor takes 4 MiB after compression by default,
        /// and a request answered 413 is cut in halves anyway).
        #[serde_inline_default(Size::mib(1))]
        max_request_size: Size,
        /// The tenant: sent as `X-Scope-OrgID` (default: none).
        #[serde(default)]
        tenant: Option<String>,
    }
);

impl OutputPlugin for LokiOutputConfig {
    const TYPE: &'static str = "loki";
    const DOC: &'static str = "Pushes each chunk to Grafana Loki's push API as snappy-compressed protobuf or JSON, with labels and structured metadata from templates, a cap on distinct label sets, entries sorted per stream; a 400 naming streams refuses only their entries (see [Search outputs](outputs-search.md)).";

    fn build(self, cx: &mut BuildContext) -> Result<Arc<dyn Output>, OptionError> {
        Ok(Arc::new(self.output(cx)?))
    }
}

impl LokiOutputConfig {
    fn output(self, cx: &mut BuildContext) -> Result<LokiOutput, OptionError> {
        let mut defaults = Vec::new();
        if let Some(t) = &self.tenant {
            let v = HeaderValue::try_from(t.as_str())
                .map_err(|_| OptionError::new("tenant", "not valid in a header"))?;
            defaults.push((HeaderName::from_static("x-scope-orgid"), v));
        }
        let content_type = match self.format {
            LokiFormat::Protobuf if self.compress == Compress::Gzip => {
                return Err(OptionError::new(
                    "compress",
                    "\"gzip\" is for format = \"json\": a protobuf body is snappy-compressed already",
                ))
            }
            LokiFormat::Protobuf => "application/x-protobuf",
            LokiFormat::Json => "application/json",
        };
        defaults.push((header::CONTENT_TYPE, HeaderValue::from_static(content_type)));
        let sender = self.http_sender("endpoint", &self.endpoint, defaults, cx)?;
        if self.labels.is_empty() {
            return Err(OptionError::new(
                "labels",
                "Loki needs at least one label per stream: e.g. labels = { tag = \"${tag}\" }",
            ));
        }
        if self.max_label_sets == 0 {
            return Err(OptionError::new("max_label_sets", "must be at least 1"));
        }
        let mut removed = HashSet::new();
        let labels = templates("labels", &self.labels, true, &mut removed)?;
        check_label_name("overflow_label", &self.overflow_label)?;
        if self.labels.contains_key(&self.overflow_label) {
            return Err(OptionError::new(
                "overflow_label",
                format!("{:?} is one of `labels` too", self.overflow_label),
            ));
        }
        let mut removed_overflow = HashSet::new();
        let metadata = templates(
            "structured_metadata",
            &self.structured_metadata,
            false,
            &mut removed_overflow,
        )?;
        removed.extend(removed_overflow.iter().cloned());
        if self.keep_label_fields {
            removed.clear();
            removed_overflow.clear();
        }
        let line_key = match &self.line_key {
            Some(k) => Some(FieldPath::parse(k).map_err(|e| OptionError::new("line_key", e))?),
            None => None,
        };
        Ok(LokiOutput {
            sender,
            labels,
            metadata,
            removed,
            removed_overflow,
            line_key,
            known: Mutex::new(HashSet::new()),
            overflowed: AtomicU64::new(0),
            stats: OnceLock::new(),
            cfg: self,
        })
    }
}

/// Loki's (Prometheus') label names: `[a-zA-Z_][a-zA-Z0-9_]*`.
fn check_label_name(key: &str, name: &str) -> Result<(), OptionError> {
    let ok = name
        .bytes()
        .enumerate()
        .all(|(i, b)| b == b'_' || b.is_ascii_alphabetic() || (i > 0 && b.is_ascii_digit()));
    if ok && !name.is_empty() {
        Ok(())
    } else {
        Err(OptionError::new(
            key,
            format!(
                "{name:?} is not a label name: letters, digits and '_', not starting with a digit"
            ),
        ))
    }
}

/// Parses name = template pairs; notes the top-level fields they read.
fn templates(
    key: &str,
    map: &BTreeMap<String, String>,
    label_names: bool,
    removed: &mut HashSet<Vec<u8>>,
) -> Result<Vec<(String, Template)>, OptionError> {
    map.iter()
        .map(|(name, t)| {
            let k = format!("{key}.{name}");
            if label_names {
                check_label_name(&k, name)?;
            }
            let t = Template::parse(t).map_err(|e| OptionError::new(&k, e))?;
            removed.extend(t.top_level_keys().map(<[u8]>::to_vec));
            Ok((name.clone(), t))
        })
        .collect()
}

struct LokiOutput {
    cfg: LokiOutputConfig,
    sender: HttpSender,
    labels: Vec<(String, Template)>,
    metadata: Vec<(String, Template)>,
    /// Top-level fields left out of a JSON line.
    removed: HashSet<Vec<u8>>,
    /// Those of an overflow stream's line: its labels do not hold the
    /// record's fields, so only the structured metadata's are left out.
    removed_overflow: HashSet<Vec<u8>>,
    line_key: Option<FieldPath>,
    /// The label sets sent since start (their `{…}` text), up to
    /// `max_label_sets`.
    known: Mutex<HashSet<String>>,
    /// Events sent to the overflow stream since start.
    overflowed: AtomicU64,
    /// The output's counters (`label_overflow_events_total`), once the
    /// daemon runs it.
    stats: OnceLock<Arc<PluginStats>>,
}

/// A stream of one request: its labels (sorted by name) and `{…}` text.
#[derive(Debug, Clone, PartialEq)]
struct Stream {
    labels: Vec<(String, String)>,
    text: String,
    /// The overflow stream (label sets past `max_label_sets`).
    overflow: bool,
}

/// A chunk made ready to send: its streams, its entries (grouped by
/// stream, sorted by time within each) and their lines one after another
/// in one buffer (one allocation a chunk, not one an event).
struct Prepared {
    streams: Vec<Stream>,
    entries: Vec<Entry>,
    /// The lines, valid UTF-8: JSON written by `nagare_core::json`, or a
    /// field's text made valid where it was not.
    lines: Vec<u8>,
}

impl Prepared {
    fn line(&self, e: &Entry) -> &[u8] {
        &self.lines[e.line.clone()]
    }
}

/// One event, ready to send.
#[derive(Debug, Clone)]
struct Entry {
    stream: usize,
    time: EventTime,
    /// Its line in `Prepared::lines`.
    line: std::ops::Range<usize>,
    metadata: Vec<(String, String)>,
    /// Its index in the chunk.
    index: u32,
}

#[async_trait]
impl Output for LokiOutput {
    async fn write(&self, chunk: &Chunk) -> Result<(), FlushError> {
        let prepared = self.prepare(chunk);
        // Requests of at most max_request_size, up to request_concurrency
        // at once (the next one is built while others wait); one answered
        // 413 is cut in halves (http_client.rs).
        let parts = request_parts(&prepared.entries, self.cfg.max_request_size.0 as usize);
        let p = &prepared;
        self.sender
            .send_parts(
                "loki",
                parts,
                |i| p.entries[i].index,
                |r| async move { self.send(p, &p.entries[r]).await },
            )
            .await
            .finish(chunk.count)
    }

    fn attach(&self, stats: &Arc<PluginStats>) {
        let _ = self.stats.set(stats.clone());
    }
}

/// Ranges of `entries` whose lines and metadata add up to at most `max`
/// bytes (one entry at least), of about one size (http_client.rs
/// `even_parts`).
fn request_parts(entries: &[Entry], max: usize) -> Vec<std::ops::Range<usize>> {
    let sizes: Vec<usize> = entries
        .iter()
        .map(|e| {
            // The line, the metadata and about 16 bytes of framing and time.
            e.line.len()
                + e.metadata
                    .iter()
                    .map(|(k, v)| k.len() + v.len() + 4)
                    .sum::<usize>()
                + 16
        })
        .collect();
    even_parts(&sizes, max)
}

impl LokiOutput {
    /// The chunk's streams and entries, the entries grouped by stream and
    /// sorted by time within each (a stable sort: events of the same time
    /// keep their order).
    fn prepare(&self, chunk: &Chunk) -> Prepared {
        let mut streams: Vec<Stream> = Vec::new();
        // A label set's text → its stream (the overflow stream for a set
        // past the cap); the overflow stream's own text too.
        let mut by_text: HashMap<String, usize> = HashMap::new();
        let mut entries = Vec::with_capacity(chunk.count as usize);
        // About the chunk's size: JSON of msgpack is a little longer.
        let mut lines = Vec::with_capacity(chunk.len + chunk.len / 4);
        let (mut scratch, mut buf, mut key) = (Vec::new(), Vec::new(), String::new());
        let mut overflow_now = 0u64;
        // Labels that read no record field (the default `{tag="${tag}"}`)
        // are one stream for the whole chunk: rendered once, not per event
        // (rendering, escaping and hashing the label text per event were a
        // tenth of the output's CPU).
        let per_event = self.labels.iter().any(|(_, t)| t.reads_record());
        let mut chunk_stream = None;
        for (index, (time, rec, _)) in chunk.entries().enumerate() {
            let stream = match chunk_stream {
                Some(s) => s,
                None => self.stream_of(
                    chunk,
                    rec,
                    &mut key,
                    &mut buf,
                    &mut scratch,
                    &mut streams,
                    &mut by_text,
                ),
            };
            if !per_event {
                chunk_stream = Some(stream);
            }
            let removed = if streams[stream].overflow {
                overflow_now += 1;
                &self.removed_overflow
            } else {
                &self.removed
            };
            let mut metadata = Vec::new();
            for (name, t) in &self.metadata {
                buf.clear();
                t.render(&chunk.tag, rec, &mut scratch, &mut buf);
                if !buf.is_empty() {
                    metadata.push((name.clone(), lossy(&buf)));
                }
            }
            let start = lines.len();
            match &self.line_key {
                Some(k) => {
                    if let Some((a, b)) = k.find(rec) {
                        let text = value_text(&rec[a..b], &mut scratch);
                        lines.extend_from_slice(String::from_utf8_lossy(text).as_bytes());
                    }
                }
                // Valid UTF-8 as written (nagare_core::json replaces what
                // is not): not checked again.
                None => json_without(&mut lines, rec, removed),
            }
            entries.push(Entry {
                stream,
                time,
                line: start..lines.len(),
                metadata,
                index: index as u32,
            });
        }
        if overflow_now > 0 {
            if let Some(stats) = self.stats.get() {
                PluginStats::add(&stats.label_overflow, overflow_now);
            }
            let total = self.overflowed.fetch_add(overflow_now, Ordering::Relaxed) + overflow_now;
            tracing::warn!(
                output = "loki",
                events = overflow_now,
                total,
                max_label_sets = self.cfg.max_label_sets,
                "events with a new label set past max_label_sets sent to the overflow stream ({}=\"true\")",
                self.cfg.overflow_label
            );
        }
        entries.sort_by_key(|e| (e.stream, e.time.secs, e.time.nanos));
        Prepared {
            streams,
            entries,
            lines,
        }
    }

    /// The stream of one event: its label set rendered (`key`, the
    /// set's text, written once per event; the labels themselves are read
    /// back from it for a new stream only), found or added.
    // The buffers are the caller's, reused from event to event.
    #[allow(clippy::too_many_arguments)]
    fn stream_of(
        &self,
        chunk: &Chunk,
        rec: &[u8],
        key: &mut String,
        buf: &mut Vec<u8>,
        scratch: &mut Vec<u8>,
        streams: &mut Vec<Stream>,
        by_text: &mut HashMap<String, usize>,
    ) -> usize {
        key.clear();
        key.push('{');
        for (name, t) in &self.labels {
            buf.clear();
            t.render(&chunk.tag, rec, scratch, buf);
            if buf.is_empty() {
                continue;
            }
            if key.len() > 1 {
                key.push_str(", ");
            }
            key.push_str(name);
            key.push_str("=\"");
            escape_label_value(key, &String::from_utf8_lossy(buf));
            key.push('"');
        }
        if key.len() == 1 {
            // Loki refuses a stream without labels.
            key.push_str("tag=\"");
            escape_label_value(key, &chunk.tag);
            key.push('"');
        }
        key.push('}');
        match by_text.get(key.as_str()) {
            Some(&s) => s,
            None => {
                let s = self.new_stream(key, streams, by_text);
                by_text.insert(key.clone(), s);
                s
            }
        }
    }

    /// The stream of a label set this chunk has not met yet: its own, or
    /// past the cap the overflow stream (the labels that read no record
    /// field, and the mark).
    fn new_stream(
        &self,
        text: &str,
        streams: &mut Vec<Stream>,
        by_text: &mut HashMap<String, usize>,
    ) -> usize {
        let mut labels = parse_label_text(text).map(|(l, _)| l).unwrap_or_default();
        if self.admit(text) {
            streams.push(Stream {
                labels,
                text: text.to_string(),
                overflow: false,
            });
            return streams.len() - 1;
        }
        labels.retain(|(n, _)| {
            self.labels
                .iter()
                .any(|(name, t)| name == n && !t.reads_record())
        });
        labels.push((self.cfg.overflow_label.clone(), "true".to_string()));
        labels.sort();
        let text = label_text(&labels);
        if let Some(&s) = by_text.get(&text) {
            return s;
        }
        streams.push(Stream {
            labels,
            text: text.clone(),
            overflow: true,
        });
        by_text.insert(text, streams.len() - 1);
        streams.len() - 1
    }

    /// Whether a label set may be sent: known, or new under the cap.
    fn admit(&self, text: &str) -> bool {
        let mut known = self.known.lock().expect("label sets");
        if known.contains(text) {
            return true;
        }
        if known.len() < self.cfg.max_label_sets {
            known.insert(text.to_string());
            return true;
        }
        false
    }

    /// Sends one request with `part`'s entries.
    async fn send(&self, p: &Prepared, part: &[Entry]) -> PartSent {
        let streams = &p.streams;
        let body = match self.cfg.format {
            LokiFormat::Protobuf => {
                // The protobuf is only snappy's input: written into a
                // buffer each thread keeps, not a new one a request (fresh
                // pages of a request-sized buffer cost a tenth of the
                // output's CPU in page faults).
                thread_local!(static PROTOBUF: std::cell::RefCell<Vec<u8>> =
                    const { std::cell::RefCell::new(Vec::new()) });
                let compressed = PROTOBUF.with_borrow_mut(|buf| {
                    push_request(p, part, buf);
                    let body = snap::raw::Encoder::new().compress_vec(buf);
                    if buf.capacity() > KEPT_PROTOBUF {
                        *buf = Vec::new();
                    }
                    body
                });
                match compressed {
                    Ok(b) => b,
                    Err(e) => return PartSent::Reject(format!("snappy: {e}")),
                }
            }
            // gzip'd by the sender when `compress = "gzip"`.
            LokiFormat::Json => push_json(p, part),
        };
        let client = self.sender.client();
        let answer = match self.sender.post(&client.endpoint().path, body, &[]).await {
            Ok(a) => a,
            Err(FlushError::Retry(e)) => return PartSent::Retry(e),
            Err(e) => return PartSent::Reject(format!("request: {e}")),
        };
        let authority = &client.endpoint().authority;
        let text = String::from_utf8_lossy(&answer.body).trim().to_string();
        match answer.status {
            StatusCode::PAYLOAD_TOO_LARGE => {
                return PartSent::TooLarge(format!("too_large: {authority} answered 413: {text}"))
            }
            StatusCode::BAD_REQUEST => {
                // Loki took the other streams' entries.
                let refused = refused_streams(&text);
                if !refused.is_empty() {
                    let undone = part
                        .iter()
                        .enumerate()
                        .filter_map(|(i, e)| {
                            let (_, why) = refused
                                .iter()
                                .find(|(labels, _)| *labels == streams[e.stream].labels)?;
                            Some((i, Undelivered::Reject(why.clone())))
                        })
                        .collect();
                    return PartSent::Some(undone);
                }
            }
            _ => {}
        }
        // 401/403, 429, 5xx: retried; other statuses refused.
        match client.judge(answer).await {
            Ok(_) => PartSent::Ok,
            Err(FlushError::Retry(e)) => PartSent::Retry(e),
            Err(e) => PartSent::Reject(format!("loki_{}: {e}", text_status(&e))),
        }
    }
}

/// The status code in a judge's message ("… answered 400 Bad Request: …").
fn text_status(e: &FlushError) -> String {
    let s = e.to_string();
    s.split_once(" answered ")
        .and_then(|(_, r)| r.get(..3))
        .unwrap_or("error")
        .to_string()
}

fn lossy(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => s.to_string(),
        Err(_) => String::from_utf8_lossy(b).into_owned(),
    }
}

/// `{a="x", b="y"}`: Loki's text of a label set (labels sorted by name).
fn label_text(labels: &[(String, String)]) -> String {
    let mut s = String::from("{");
    for (i, (k, v)) in labels.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        s.push_str(k);
        s.push_str("=\"");
        escape_label_value(&mut s, v);
        s.push('"');
    }
    s.push('}');
    s
}

/// Appends a label value as Loki writes it between quotes.
fn escape_label_value(s: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
}

/// Reads a label set written as `{a="x", b="y"}` at the start of `s`:
/// its labels sorted by name and the length read.
fn parse_label_text(s: &str) -> Option<(Vec<(String, String)>, usize)> {
    let b = s.as_bytes();
    if b.first() != Some(&b'{') {
        return None;
    }
    let mut i = 1;
    let mut labels = Vec::new();
    loop {
        while b.get(i).is_some_and(|c| *c == b' ' || *c == b',') {
            i += 1;
        }
        if b.get(i) == Some(&b'}') {
            labels.sort();
            return Some((labels, i + 1));
        }
        let eq = i + s[i..].find('=')?;
        let name = s[i..eq].trim().to_string();
        if b.get(eq + 1) != Some(&b'"') {
            return None;
        }
        let mut value = String::new();
        let mut chars = s[eq + 2..].char_indices();
        let end = loop {
            let (at, c) = chars.next()?;
            match c {
                '"' => break eq + 2 + at + 1,
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                c => value.push(c),
            }
        };
        labels.push((name, value));
        i = end;
    }
}

/// The streams a 400 answer of Loki names, with the reason of each (its
/// name, ':', Loki's line): the ingester's "entry with timestamp … ignored,
/// reason: 'entry out of order' for stream: {…}," and the distributor's
/// "entry for stream '{…}' has timestamp too old: …".
fn refused_streams(body: &str) -> Vec<(Vec<(String, String)>, String)> {
    let mut out: Vec<(Vec<(String, String)>, String)> = Vec::new();
    for line in body.lines() {
        let at = ["for stream: ", "for stream '", "stream '"]
            .iter()
            .find_map(|m| line.find(m).map(|i| i + m.len()));
        let Some((labels, _)) = at.and_then(|i| parse_label_text(&line[i..])) else {
            continue;
        };
        let reason = if line.contains("out of order") {
            "out_of_order"
        } else if line.contains("too far behind") {
            "too_far_behind"
        } else if line.contains("too old") {
            "too_old"
        } else if line.contains("too new") {
            "too_new"
        } else if line.contains("Max entry size") || line.contains("line too long") {
            "line_too_long"
        } else {
            "loki_400"
        };
        if !out.iter().any(|(l, _)| *l == labels) {
            let line: String = line.trim_end_matches(',').chars().take(300).collect();
            out.push((labels, format!("{reason}: {line}")));
        }
    }
    out
}

/// The record as a JSON object without the top-level keys in `removed`
/// (a record that is not a map: its JSON whole).
fn json_without(out: &mut Vec<u8>, rec: &[u8], removed: &HashSet<Vec<u8>>) {
    use nagare_core::json::{write_string, write_value};
    let Some((n, mut p)) = map_at(rec, 0).filter(|_| !removed.is_empty()) else {
        write_value(out, rec);
        return;
    };
    out.push(b'{');
    let mut first = true;
    for _ in 0..n {
        let Some(pair) = pair_at(rec, p) else { break };
        let key = pair.key.map(|(a, b)| &rec[a..b]);
        if !key.is_some_and(|k| removed.contains(k)) {
            if !first {
                out.push(b',');
            }
            first = false;
            match key {
                Some(k) => write_string(out, k),
                // A key that is not a string: its JSON as the key's text.
                None => {
                    let mut k = Vec::new();
                    write_value(&mut k, &rec[p..pair.value]);
                    write_string(out, &k);
                }
            }
            out.push(b':');
            write_value(out, &rec[pair.value..pair.end]);
        }
        p = pair.end;
    }
    out.push(b'}');
}

// Loki's push.proto (pkg/push/push.proto), the fields a client sends:
//   PushRequest   { repeated StreamAdapter streams = 1; }
//   StreamAdapter { string labels = 1; repeated EntryAdapter entries = 2; }
//   EntryAdapter  { google.protobuf.Timestamp timestamp = 1; string line = 2;
//                   repeated LabelPairAdapter structuredMetadata = 3; }
//   LabelPairAdapter { string name = 1; string value = 2; }
//   Timestamp     { int64 seconds = 1; int32 nanos = 2; }
// Written straight from the entries with prost's wire primitives: no
// message structs to fill and copy the lines into.

fn len_field(tag: u32, len: usize) -> usize {
    // key (tag < 16: one byte) + length + bytes
    let _ = tag;
    1 + encoded_len_varint(len as u64) + len
}

fn timestamp_len(t: EventTime) -> usize {
    let mut n = 0;
    if t.secs != 0 {
        n += 1 + encoded_len_varint(u64::from(t.secs));
    }
    if t.nanos != 0 {
        n += 1 + encoded_len_varint(u64::from(t.nanos));
    }
    n
}

fn pair_len(k: &str, v: &str) -> usize {
    len_field(1, k.len()) + len_field(2, v.len())
}

/// The largest protobuf buffer a thread keeps between requests (a
/// request of the default `max_request_size`, and some).
const KEPT_PROTOBUF: usize = 4 << 20;

fn entry_len(e: &Entry) -> usize {
    len_field(1, timestamp_len(e.time))
        + len_field(2, e.line.len())
        + e.metadata
            .iter()
            .map(|(k, v)| len_field(3, pair_len(k, v)))
            .sum::<usize>()
}

fn put_bytes(out: &mut Vec<u8>, tag: u32, b: &[u8]) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(b.len() as u64, out);
    out.extend_from_slice(b);
}

fn put_len(out: &mut Vec<u8>, tag: u32, len: usize) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(len as u64, out);
}

/// The PushRequest of `part` (entries grouped by stream) in protobuf, in
/// `out` (cleared first).
fn push_request(p: &Prepared, part: &[Entry], out: &mut Vec<u8>) {
    let streams = &p.streams;
    out.clear();
    out.reserve(part.iter().map(|e| e.line.len() + 32).sum());
    for group in part.chunk_by(|a, b| a.stream == b.stream) {
        let labels = &streams[group[0].stream].text;
        let stream_len = len_field(1, labels.len())
            + group
                .iter()
                .map(|e| len_field(2, entry_len(e)))
                .sum::<usize>();
        put_len(out, 1, stream_len);
        put_bytes(out, 1, labels.as_bytes());
        for e in group {
            put_len(out, 2, entry_len(e));
            put_len(out, 1, timestamp_len(e.time));
            if e.time.secs != 0 {
                encode_key(1, WireType::Varint, out);
                encode_varint(u64::from(e.time.secs), out);
            }
            if e.time.nanos != 0 {
                encode_key(2, WireType::Varint, out);
                encode_varint(u64::from(e.time.nanos), out);
            }
            put_bytes(out, 2, p.line(e));
            for (k, v) in &e.metadata {
                put_len(out, 3, pair_len(k, v));
                put_bytes(out, 1, k.as_bytes());
                put_bytes(out, 2, v.as_bytes());
            }
        }
    }
}

/// The push request of `part` in JSON: `{"streams":[{"stream":{labels},
/// "values":[["<unix nanoseconds>","<line>",{metadata}],…]},…]}`.
fn push_json(p: &Prepared, part: &[Entry]) -> Vec<u8> {
    use nagare_core::json::write_string;
    let streams = &p.streams;
    let mut out = Vec::with_capacity(part.iter().map(|e| e.line.len() + 48).sum());
    out.extend_from_slice(b"{\"streams\":[");
    for (g, group) in part.chunk_by(|a, b| a.stream == b.stream).enumerate() {
        if g > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"stream\":{");
        for (i, (k, v)) in streams[group[0].stream].labels.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_string(&mut out, k.as_bytes());
            out.push(b':');
            write_string(&mut out, v.as_bytes());
        }
        out.extend_from_slice(b"},\"values\":[");
        for (i, e) in group.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let ns = u64::from(e.time.secs) * 1_000_000_000 + u64::from(e.time.nanos);
            let _ = write!(out, "[\"{ns}\",");
            write_string(&mut out, p.line(e));
            if !e.metadata.is_empty() {
                out.extend_from_slice(b",{");
                for (j, (k, v)) in e.metadata.iter().enumerate() {
                    if j > 0 {
                        out.push(b',');
                    }
                    write_string(&mut out, k.as_bytes());
                    out.push(b':');
                    write_string(&mut out, v.as_bytes());
                }
                out.push(b'}');
            }
            out.push(b']');
        }
        out.extend_from_slice(b"]}");
    }
    out.extend_from_slice(b"]}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // The messages of push.proto as prost structs: the test decodes what
    // `push_request` wrote with prost's own decoder.
    #[derive(Clone, PartialEq, prost::Message)]
    struct PushRequest {
        #[prost(message, repeated, tag = "1")]
        streams: Vec<StreamAdapter>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct StreamAdapter {
        #[prost(string, tag = "1")]
        labels: String,
        #[prost(message, repeated, tag = "2")]
        entries: Vec<EntryAdapter>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct EntryAdapter {
        #[prost(message, optional, tag = "1")]
        timestamp: Option<Timestamp>,
        #[prost(string, tag = "2")]
        line: String,
        #[prost(message, repeated, tag = "3")]
        structured_metadata: Vec<LabelPair>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct LabelPair {
        #[prost(string, tag = "1")]
        name: String,
        #[prost(string, tag = "2")]
        value: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct Timestamp {
        #[prost(int64, tag = "1")]
        seconds: i64,
        #[prost(int32, tag = "2")]
        nanos: i32,
    }

    fn line<'a>(p: &'a Prepared, e: &Entry) -> &'a str {
        std::str::from_utf8(p.line(e)).unwrap()
    }

    fn output(toml_text: &str) -> LokiOutput {
        let cfg: LokiOutputConfig = toml::from_str(toml_text).unwrap();
        cfg.output(&mut BuildContext::new("loki#0")).unwrap()
    }

    fn chunk(events: &[(u32, serde_json::Value)]) -> Chunk {
        let mut payload = Vec::new();
        for (t, rec) in events {
            payload.push(0x92);
            payload.extend_from_slice(&EventTime::new(*t, 7).to_bytes());
            nagare_core::json::msgpack_from_json(rec, &mut payload);
        }
        Chunk::in_memory([1; 16], "app.web".into(), payload, events.len() as u32)
    }

    #[test]
    fn streams_group_and_sort_entries_and_lines_leave_label_fields_out() {
        let o = output(
            r#"endpoint = "http://127.0.0.1:1/loki/api/v1/push"
               labels = { job = "${tag_parts[0]}", level = "${record.level}" }
               structured_metadata = { trace = "${record.trace}" }"#,
        );
        let c = chunk(&[
            (
                30,
                serde_json::json!({"level": "info", "msg": "c", "trace": "t1"}),
            ),
            (10, serde_json::json!({"level": "warn", "msg": "b"})),
            (20, serde_json::json!({"level": "info", "msg": "a"})),
        ]);
        let p = o.prepare(&c);
        let (streams, entries) = (&p.streams, &p.entries);
        assert_eq!(streams[0].text, r#"{job="app", level="info"}"#);
        assert_eq!(streams[1].text, r#"{job="app", level="warn"}"#);
        let got: Vec<_> = entries
            .iter()
            .map(|e| (e.stream, e.time.secs, line(&p, e), e.index))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, 20, r#"{"msg":"a"}"#, 2),
                (0, 30, r#"{"msg":"c"}"#, 0),
                (1, 10, r#"{"msg":"b"}"#, 1)
            ]
        );
        assert_eq!(entries[1].metadata, vec![("trace".into(), "t1".into())]);
        assert!(entries[0].metadata.is_empty());

        let mut body = b"what a request before left".to_vec();
        push_request(&p, entries, &mut body);
        let decoded = <PushRequest as prost::Message>::decode(&body[..]).unwrap();
        assert_eq!(decoded.streams.len(), 2);
        assert_eq!(decoded.streams[0].labels, streams[0].text);
        let e = &decoded.streams[0].entries[1];
        assert_eq!(e.line, r#"{"msg":"c"}"#);
        assert_eq!(
            e.timestamp,
            Some(Timestamp {
                seconds: 30,
                nanos: 7
            })
        );
        assert_eq!(
            e.structured_metadata,
            vec![LabelPair {
                name: "trace".into(),
                value: "t1".into()
            }]
        );
        assert_eq!(decoded.streams[1].entries[0].line, r#"{"msg":"b"}"#);

        let json: serde_json::Value = serde_json::from_slice(&push_json(&p, entries)).unwrap();
        assert_eq!(
            json["streams"][0],
            serde_json::json!({"stream": {"job": "app", "level": "info"},
                "values": [["20000000007", "{\"msg\":\"a\"}"], ["30000000007", "{\"msg\":\"c\"}", {"trace": "t1"}]]})
        );
    }

    #[test]
    fn label_sets_past_the_cap_go_to_the_overflow_stream() {
        let o = output(
            r#"endpoint = "http://127.0.0.1:1/loki/api/v1/push"
               labels = { job = "${tag}", user = "${record.user}" }
               max_label_sets = 2
               line_key = "msg""#,
        );
        let c = chunk(&[
            (1, serde_json::json!({"user": "a", "msg": "1"})),
            (2, serde_json::json!({"user": "b", "msg": "2"})),
            (3, serde_json::json!({"user": "c", "msg": "3"})),
            (4, serde_json::json!({"user": "a", "msg": "4"})),
        ]);
        let p = o.prepare(&c);
        let texts: Vec<_> = p.streams.iter().map(|s| s.text.as_str()).collect();
        assert_eq!(
            texts,
            vec![
                r#"{job="app.web", user="a"}"#,
                r#"{job="app.web", user="b"}"#,
                r#"{job="app.web", nagare_overflow="true"}"#
            ]
        );
        let lines: Vec<_> = p.entries.iter().map(|e| (e.stream, line(&p, e))).collect();
        assert_eq!(lines, vec![(0, "1"), (0, "4"), (1, "2"), (2, "3")]);
        assert_eq!(o.overflowed.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_400_naming_streams_refuses_only_their_entries() {
        // Loki's ingester (out of order; too far behind with unordered
        // writes) and distributor (too old) texts.
        let body = "entry with timestamp 2024-01-01 00:00:01 +0000 UTC ignored, reason: 'entry out of order' for stream: {job=\"app\", level=\"warn\"},\n\
            entry with timestamp 2024-01-01 00:00:02 +0000 UTC ignored, reason: 'entry out of order' for stream: {job=\"app\", level=\"warn\"},\n\
            entry for stream '{level=\"a \\\"q\\\" b\", job=\"x\"}' has timestamp too old: 2020-01-01T00:00:00Z, oldest acceptable timestamp is: 2024-01-01T00:00:00Z\n\
            total ignored: 3 out of 10";
        let r = refused_streams(body);
        assert_eq!(r.len(), 2);
        assert_eq!(
            r[0].0,
            vec![
                ("job".into(), "app".into()),
                ("level".into(), "warn".into())
            ]
        );
        assert!(r[0].1.starts_with("out_of_order: entry with timestamp"));
        assert_eq!(
            r[1].0,
            vec![
                ("job".into(), "x".into()),
                ("level".into(), "a \"q\" b".into())
            ]
        );
        assert!(r[1].1.starts_with("too_old: "));
        assert!(refused_streams("error parsing labels").is_empty());
        // Our own text reads back as the same labels.
        let labels = vec![
            ("a".to_string(), "x\"\\\n}".to_string()),
            ("b".into(), "".into()),
        ];
        assert_eq!(parse_label_text(&label_text(&labels)).unwrap().0, labels);
    }

    #[test]
    fn requests_are_cut_by_the_size_of_lines_and_metadata() {
        let e = |n: usize, meta: usize| Entry {
            stream: 0,
            time: EventTime::new(1, 0),
            line: 0..n,
            metadata: (0..meta).map(|_| ("k".into(), "v".into())).collect(),
            index: 0,
        };
        // Each entry counts its line, 16 bytes, and k + v + 4 per metadata.
        let entries = vec![e(84, 0), e(84, 0), e(78, 1), e(184, 0), e(10, 0)];
        assert_eq!(request_parts(&entries, 1000), vec![0..5]);
        assert_eq!(request_parts(&entries, 200), vec![0..2, 2..3, 3..4, 4..5]);
        // One entry larger than the limit still goes, alone.
        assert_eq!(
            request_parts(&entries, 1),
            vec![0..1, 1..2, 2..3, 3..4, 4..5]
        );
        assert!(request_parts(&[], 10).is_empty());
    }

    #[test]
    fn options_are_checked() {
        let bad = |t: &str| {
            let cfg: LokiOutputConfig = toml::from_str(t).unwrap();
            cfg.build(&mut BuildContext::new("loki#0"))
                .err()
                .unwrap()
                .to_string()
        };
        let e = "endpoint = \"http://127.0.0.1:1/x\"\n";
        assert!(bad(&format!("{e}compress = \"gzip\"")).contains("json"));
        assert!(bad(&format!("{e}labels = {{ \"a-b\" = \"x\" }}")).contains("not a label name"));
        assert!(bad(&format!("{e}labels = {{ a = \"${{nope}}\" }}")).contains("labels.a"));
        assert!(bad(&format!("{e}labels = {{}}")).contains("at least one label"));
    }
}
