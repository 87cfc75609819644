//! `http`: events POSTed over HTTP, as Fluentd's in_http and Fluent Bit's
//! in_http take them.
//!
//! - `POST /<tag>` (or any path, with `tag`); the tag is the path without
//!   its leading `/`, else the `tag` option. With `tag_key`, a record whose
//!   field of that name holds a string gets that tag (the field stays).
//! - Bodies: a JSON object (one event), a JSON array of objects (a batch),
//!   NDJSON (one object per line), msgpack (a map, or an array of maps),
//!   or a form (`application/x-www-form-urlencoded`) with a `json=` or
//!   `msgpack=` field, as Fluentd's in_http.
//! - Event time: the `time` query (or form) parameter (epoch seconds,
//!   fractions allowed) for every event of the request; else the record's
//!   `time_key` field (default "time"; removed unless `keep_time_key`);
//!   else the time of arrival.
//!
//! JSON is written straight into the PackedForward entries while serde_json
//! reads it (the json parser's converter); no value tree per event. A bad
//! record refuses the whole request with a 400 naming its line (NDJSON) or
//! index (array); nothing of the request is taken.
//!
//! The listener (keep-alive, limits, auth, gzip/zstd, 503 while buffers are
//! full) is http_listener.rs, shared with the `opentelemetry` input.

use std::sync::Arc;

use bytes::Bytes;
use hyper::header;
use hyper::http::request::Parts;
use hyper::StatusCode;
use nagare_core::plugin::{BuildContext, OptionError};
use nagare_forward::msgpack::{
    read_array_len, read_map_len, read_str_or_bin, skip_value, write_map_len,
};
use nagare_forward::EventTime;
use tokio::task::JoinHandle;

use crate::inputs::common::http_listener::{
    self, http_listener_options, Body, Decode, Events, Reject,
};
use crate::inputs::{Input, InputContext, InputPlugin};
use crate::net::tls::TlsServer;
use crate::parsers::{Parser, ParserConfig, ParserType};

http_listener_options!(
    HttpInputConfig {
        /// The tag of requests to `/` (a path other than `/` is the tag).
        /// Without it, a POST to `/` is answered 404.
        #[serde(default)]
        tag: Option<String>,
        /// Take the tag from this field of each record when it holds a
        /// string (Fluent Bit's in_http); the field stays in the record.
        #[serde(default)]
        tag_key: Option<String>,
        /// The record field holding the event time (epoch seconds or a
        /// time string) (default "time", as Fluentd's in_http).
        #[serde_inline_default("time".into())]
        time_key: String,
        /// Keep `time_key` in the record (default false: removed once read).
        #[serde(default)]
        keep_time_key: bool,
    }
);

impl InputPlugin for HttpInputConfig {
    const TYPE: &'static str = "http";
    const DOC: &'static str = "Receives events POSTed over HTTP/1.1 as Fluentd's and Fluent Bit's in_http take them: JSON, JSON arrays, NDJSON, msgpack or form fields; gzip and zstd; bearer or basic auth; 503 while buffers are full (see [HTTP](http.md)).";

    fn build(self, cx: &mut BuildContext) -> Result<Box<dyn Input>, OptionError> {
        let tls = self.listener().check(cx)?;
        if let Some(t) = &self.tag {
            check_tag(t).map_err(|e| OptionError::new("tag", e))?;
        }
        if self.tag_key.as_deref() == Some("") {
            return Err(OptionError::new("tag_key", "must name a field"));
        }
        self.parser()
            .map_err(|e| OptionError::new("time_key", e.to_string()))?;
        Ok(Box::new(HttpInput { cfg: self, tls }))
    }
}

/// A built http input: its options and its TLS files, loaded.
struct HttpInput {
    cfg: HttpInputConfig,
    tls: Option<Arc<TlsServer>>,
}

impl HttpInputConfig {
    fn parser(&self) -> anyhow::Result<Parser> {
        Parser::new(&ParserConfig {
            kind: ParserType::Json,
            time_key: Some(self.time_key.clone()),
            keep_time_key: self.keep_time_key,
            ..ParserConfig::default()
        })
    }
}

#[async_trait::async_trait]
impl Input for HttpInput {
    async fn start(self: Box<Self>, cx: InputContext) -> anyhow::Result<Vec<JoinHandle<()>>> {
        let cfg = self.cfg;
        let decode = Arc::new(HttpDecode::new(&cfg)?);
        http_listener::start(
            &cx.name,
            <HttpInputConfig as InputPlugin>::TYPE,
            cfg.listener(),
            self.tls,
            decode,
            cx.router,
            cx.stats,
            cx.shutdown,
        )
        .await
    }
}

/// A tag is dotted words: no spaces, slashes or control characters.
fn check_tag(t: &str) -> Result<(), String> {
    if t.is_empty() {
        return Err("must not be empty".into());
    }
    match t
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || *c == '/')
    {
        Some(c) => Err(format!("{t:?} is not a tag: it holds {c:?}")),
        None => Ok(()),
    }
}

/// How requests become events (public for the fuzz target).
pub struct HttpDecode {
    /// The json parser with `time_key`: writes records as msgpack.
    parser: Parser,
    tag: Option<String>,
    tag_key: Option<String>,
    time_key: String,
    keep_time_key: bool,
}

impl HttpDecode {
    /// The decoder of `cfg`'s input.
    pub fn new(cfg: &HttpInputConfig) -> anyhow::Result<HttpDecode> {
        Ok(HttpDecode {
            parser: cfg.parser()?,
            tag: cfg.tag.clone(),
            tag_key: cfg.tag_key.clone(),
            time_key: cfg.time_key.clone(),
            keep_time_key: cfg.keep_time_key,
        })
    }
}

/// How a body is encoded.
#[derive(Clone, Copy, PartialEq, Eq)]
enum BodyKind {
    /// An object, an array of objects, or (when that fails with trailing
    /// data) NDJSON.
    Json,
    Msgpack,
}

/// The Content-Types of NDJSON bodies.
const BODY_NDJSON: [&str; 6] = [
    "application/x-ndjson",
    "application/ndjson",
    "application/jsonl",
    "application/x-jsonlines",
    "application/json-lines",
    "application/jsonlines",
];

impl Decode for HttpDecode {
    fn tag_hint(&self, head: &Parts) -> Option<String> {
        self.tag_of(head.uri.path()).ok()
    }

    fn decode(&self, head: &Parts, body: Body) -> Result<Vec<Events>, Reject> {
        let tag = self.tag_of(head.uri.path())?;
        let mut time = param(head.uri.query().unwrap_or(""), "time");
        let mime = head
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let forced = |time: Option<Vec<u8>>| match time {
            Some(t) => param_time(&String::from_utf8_lossy(&t)).map(Some),
            None => Ok(None),
        };
        if BODY_NDJSON.contains(&mime.as_str()) {
            // Read across the body's pieces as they came, without joining them.
            let pieces: Vec<&[u8]> = body.pieces().iter().map(|p| &p[..]).collect();
            let mut out = Batches::new(tag, self.tag_key.as_deref(), forced(time)?, body.size());
            self.ndjson(&pieces, &mut out)?;
            return Ok(out.done());
        }
        let body = body.joined();
        let (kind, data): (BodyKind, Bytes) = match mime.as_str() {
            // curl -d sends JSON with the form type: taken as JSON.
            "application/x-www-form-urlencoded"
                if matches!(
                    body.iter().find(|b| !b.is_ascii_whitespace()),
                    Some(b'{' | b'[')
                ) =>
            {
                (BodyKind::Json, body)
            }
            "application/x-www-form-urlencoded" => {
                let form = std::str::from_utf8(&body)
                    .map_err(|_| Reject::bad("a form body must be ASCII (percent-encoded)"))?;
                time = time.or_else(|| param(form, "time"));
                if let Some(j) = param(form, "json") {
                    (BodyKind::Json, Bytes::from(j))
                } else if let Some(m) = param(form, "msgpack") {
                    (BodyKind::Msgpack, Bytes::from(m))
                } else {
                    return Err(Reject::bad("a form body needs a `json` or `msgpack` field"));
                }
            }
            "application/msgpack" | "application/x-msgpack" | "application/vnd.msgpack" => {
                (BodyKind::Msgpack, body)
            }
            "" | "application/json" | "text/json" | "text/plain" => (BodyKind::Json, body),
            other => {
                return Err(Reject::new(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    format!(
                        "Content-Type {other:?} is not supported: send application/json, \
                         application/x-ndjson, application/msgpack or a form"
                    ),
                ))
            }
        };
        let mut out = Batches::new(tag, self.tag_key.as_deref(), forced(time)?, data.len());
        match kind {
            BodyKind::Json => self.json(&data, &mut out)?,
            BodyKind::Msgpack => self.msgpack(&data, &mut out)?,
        }
        Ok(out.done())
    }
}

impl HttpDecode {
    fn tag_of(&self, path: &str) -> Result<String, Reject> {
        let raw = path.trim_start_matches('/');
        if raw.is_empty() {
            return self.tag.clone().ok_or_else(|| {
                Reject::new(
                    StatusCode::NOT_FOUND,
                    "POST to /<tag> (this input has no `tag` for requests to /)",
                )
            });
        }
        let tag = percent_encoding::percent_decode_str(raw)
            .decode_utf8()
            .map_err(|_| Reject::bad("the path (the tag) is not UTF-8"))?;
        check_tag(&tag).map_err(|e| Reject::new(StatusCode::NOT_FOUND, format!("path: {e}")))?;
        Ok(tag.into_owned())
    }

    /// One record, already cut out of the body, through the json parser.
    fn json_record(&self, text: &[u8], out: &mut Batches) -> Result<(), String> {
        let at = out.start_entry();
        let time = crate::parsers::json::parse(&self.parser, text, &[], &mut out.buf);
        match time {
            Ok(t) => {
                out.end_entry(at, t);
                Ok(())
            }
            Err(e) => {
                out.buf.truncate(at);
                Err(e)
            }
        }
    }

    fn json(&self, body: &[u8], out: &mut Batches) -> Result<(), Reject> {
        match body.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'[') => {
                let items: Vec<&serde_json::value::RawValue> = serde_json::from_slice(body)
                    .map_err(|e| Reject::bad(format!("bad JSON array: {e}")))?;
                for (i, item) in items.iter().enumerate() {
                    self.json_record(item.get().as_bytes(), out)
                        .map_err(|e| Reject::bad(format!("record {i} of the array: {e}")))?;
                }
                Ok(())
            }
            Some(b'{') => match self.json_record(body, out) {
                Ok(()) => Ok(()),
                // Several objects: NDJSON sent as application/json (Fluent
                // Bit's json_lines), or objects one after another (its
                // json_stream).
                Err(e) if e.contains("trailing characters") => self.json_stream(body, out),
                Err(e) => Err(Reject::bad(e)),
            },
            Some(_) => Err(Reject::bad("expected a JSON object or an array of objects")),
            None => Err(Reject::bad("empty body")),
        }
    }

    /// JSON objects one after another, with or without whitespace or
    /// newlines between them.
    fn json_stream(&self, body: &[u8], out: &mut Batches) -> Result<(), Reject> {
        let values =
            serde_json::Deserializer::from_slice(body).into_iter::<&serde_json::value::RawValue>();
        for (i, v) in values.enumerate() {
            let v = v.map_err(|e| Reject::bad(format!("record {i} of the JSON stream: {e}")))?;
            self.json_record(v.get().as_bytes(), out)
                .map_err(|e| Reject::bad(format!("record {i} of the JSON stream: {e}")))?;
        }
        Ok(())
    }

    /// NDJSON in `pieces` (the body as it arrived): lines inside a piece are
    /// read where they are; only a line cut by a piece's end is copied.
    fn ndjson(&self, pieces: &[&[u8]], out: &mut Batches) -> Result<(), Reject> {
        // Lines found with memchr: a byte-at-a-time split of the body took
        // 40 % of the input's CPU at 1 KiB events, more than the JSON.
        let mut n = 0;
        let mut cut = Vec::new();
        for piece in pieces {
            let mut start = 0;
            for end in memchr::memchr_iter(b'\n', piece) {
                n += 1;
                if cut.is_empty() {
                    self.ndjson_line(&piece[start..end], n, out)?;
                } else {
                    cut.extend_from_slice(&piece[start..end]);
                    self.ndjson_line(&cut, n, out)?;
                    cut.clear();
                }
                start = end + 1;
            }
            cut.extend_from_slice(&piece[start..]);
        }
        // The last line without its newline.
        if !cut.is_empty() {
            self.ndjson_line(&cut, n + 1, out)?;
        }
        Ok(())
    }

    /// Line `n` (from 1) of an NDJSON body; a blank one is skipped.
    fn ndjson_line(&self, line: &[u8], n: usize, out: &mut Batches) -> Result<(), Reject> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            return Ok(());
        }
        self.json_record(line, out)
            .map_err(|e| Reject::bad(format!("line {n}: {e}")))
    }

    /// A msgpack body: one value or a run of values, as the senders write
    /// them: a map (a record; Fluentd's out_http writes one after another),
    /// an array of maps, or an event `[time, {record}]` or, as Fluent
    /// Bit's out_http sends its chunk, `[[time, {metadata}], {record}]`.
    fn msgpack(&self, body: &[u8], out: &mut Batches) -> Result<(), Reject> {
        let bad = |what: &str| Reject::bad(format!("bad msgpack body: {what}"));
        let mut p = 0;
        let mut i = 0;
        while p < body.len() {
            let e = skip_value(body, p).map_err(|e| bad(&format!("value {i}: {e}")))?;
            self.msgpack_value(&body[p..e], out)
                .map_err(|m| bad(&format!("value {i}: {m}")))?;
            p = e;
            i += 1;
        }
        if i == 0 {
            return Err(bad("empty body"));
        }
        Ok(())
    }

    /// One value of a msgpack body (see `msgpack`).
    fn msgpack_value(&self, v: &[u8], out: &mut Batches) -> Result<(), String> {
        if read_map_len(v, 0).is_ok() {
            return self.msgpack_record(v, None, out);
        }
        let (n, first) = read_array_len(v, 0)
            .map_err(|_| "expected a map, an array of maps or an event".to_string())?;
        if n == 0 {
            return Ok(());
        }
        let second = skip_value(v, first).map_err(|e| e.to_string())?;
        if n == 2 && read_map_len(v, second).is_ok() && read_map_len(v, first).is_err() {
            // An event: its head is the time, or [time, {metadata}].
            let head = &v[first..second];
            let time = match read_array_len(head, 0) {
                Ok((_, t)) => {
                    let t_end = skip_value(head, t).map_err(|e| e.to_string())?;
                    msgpack_time(&head[t..t_end])
                }
                Err(_) => msgpack_time(head),
            };
            let time = time.ok_or("an event's time is not a number or an EventTime")?;
            return self.msgpack_record(&v[second..], Some(time), out);
        }
        let mut p = first;
        for i in 0..n {
            let e = skip_value(v, p).map_err(|e| e.to_string())?;
            self.msgpack_record(&v[p..e], None, out)
                .map_err(|m| format!("record {i} of the array: {m}"))?;
            p = e;
        }
        Ok(())
    }

    /// A msgpack map: copied, without its `time_key` pair when that holds
    /// a time (a number or an EventTime), unless `keep_time_key`; else its
    /// time is `event_time` (an event's own), else the arrival's.
    fn msgpack_record(
        &self,
        rec: &[u8],
        event_time: Option<EventTime>,
        out: &mut Batches,
    ) -> Result<(), String> {
        let (n, mut p) = read_map_len(rec, 0).map_err(|_| "a record is not a map".to_string())?;
        let mut time = None;
        let mut skip = None;
        for _ in 0..n {
            let key = read_str_or_bin(rec, p).map_err(|e| e.to_string())?;
            let v = match key {
                Some((_, e)) => e,
                None => skip_value(rec, p).map_err(|e| e.to_string())?,
            };
            let end = skip_value(rec, v).map_err(|e| e.to_string())?;
            if key.is_some_and(|(s, e)| &rec[s..e] == self.time_key.as_bytes()) {
                time = msgpack_time(&rec[v..end]);
                if time.is_some() && !self.keep_time_key {
                    skip = Some((p, end));
                }
            }
            p = end;
        }
        let at = out.start_entry();
        match skip {
            Some((s, e)) => {
                write_map_len(&mut out.buf, n - 1);
                let (_, body_start) = read_map_len(rec, 0).map_err(|e| e.to_string())?;
                out.buf.extend_from_slice(&rec[body_start..s]);
                out.buf.extend_from_slice(&rec[e..]);
            }
            None => out.buf.extend_from_slice(rec),
        }
        out.end_entry(at, time.or(event_time));
        Ok(())
    }
}

/// A msgpack number (epoch seconds) or EventTime as an event time.
fn msgpack_time(v: &[u8]) -> Option<EventTime> {
    if v.len() == 10 && v[0] == 0xd7 && v[1] == 0 {
        return Some(EventTime::from_payload(&v[2..]));
    }
    let secs = match rmpv::decode::read_value(&mut &v[..]).ok()? {
        rmpv::Value::Integer(i) => i.as_f64()?,
        rmpv::Value::F32(f) => f as f64,
        rmpv::Value::F64(f) => f,
        _ => return None,
    };
    epoch_time(secs)
}

fn epoch_time(secs: f64) -> Option<EventTime> {
    (secs.is_finite() && (0.0..4_294_967_296.0).contains(&secs)).then(|| {
        let whole = secs.trunc();
        EventTime::new(
            whole as u32,
            ((secs - whole) * 1e9).round().min(999_999_999.0) as u32,
        )
    })
}

/// The `time` parameter: epoch seconds; 0 means "now", as in Fluentd.
fn param_time(t: &str) -> Result<EventTime, Reject> {
    let secs: f64 = t
        .trim()
        .parse()
        .map_err(|_| Reject::bad(format!("parameter time={t:?} is not epoch seconds")))?;
    if secs == 0.0 {
        return Ok(EventTime::now());
    }
    epoch_time(secs).ok_or_else(|| Reject::bad(format!("parameter time={t:?} is out of range")))
}

/// The value of `name` in a query string or form body, percent-decoded
/// (as bytes: a msgpack field is binary).
fn param(query: &str, name: &str) -> Option<Vec<u8>> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then(|| {
            let v = v.replace('+', " ");
            percent_encoding::percent_decode_str(&v).collect()
        })
    })
}

/// The entries of a request, one batch per tag in order of first use.
struct Batches {
    /// Entries of the request's own tag (most requests have only these).
    buf: Vec<u8>,
    count: u32,
    tag: String,
    tag_key: Option<Vec<u8>>,
    /// The `time` parameter, which wins over each record's time.
    forced: Option<EventTime>,
    now: EventTime,
    /// Batches of other tags (tag_key), in order of first use.
    others: Vec<Events>,
}

impl Batches {
    /// `size`: the body's; its msgpack entries take about as much (JSON's
    /// quotes and colons are a little more than the entry's time), allocated
    /// once instead of doubled up to it.
    fn new(tag: String, tag_key: Option<&str>, forced: Option<EventTime>, size: usize) -> Batches {
        Batches {
            buf: Vec::with_capacity(size + size / 8),
            count: 0,
            tag,
            tag_key: tag_key.map(|k| k.as_bytes().to_vec()),
            forced,
            now: EventTime::now(),
            others: Vec::new(),
        }
    }

    /// Starts an entry: `[time placeholder, ` then the caller writes the record.
    fn start_entry(&mut self) -> usize {
        let at = self.buf.len();
        self.buf.push(0x92);
        self.buf.extend_from_slice(&self.now.to_bytes());
        at
    }

    /// Ends the entry started at `at`: its time, and its tag by `tag_key`.
    fn end_entry(&mut self, at: usize, time: Option<EventTime>) {
        if let Some(t) = self.forced.or(time) {
            self.buf[at + 1..at + 11].copy_from_slice(&t.to_bytes());
        }
        let moved = self.tag_key.as_deref().and_then(|k| {
            let tag = nagare_core::record::field(&self.buf[at + 11..], k)?;
            let tag = std::str::from_utf8(tag).ok()?;
            (tag != self.tag && check_tag(tag).is_ok()).then(|| tag.to_string())
        });
        match moved {
            None => self.count += 1,
            Some(tag) => {
                let i = match self.others.iter().position(|b| b.tag == tag) {
                    Some(i) => i,
                    None => {
                        self.others.push(Events {
                            tag,
                            entries: Vec::new(),
                            count: 0,
                        });
                        self.others.len() - 1
                    }
                };
                let b = &mut self.others[i];
                b.entries.extend_from_slice(&self.buf[at..]);
                b.count += 1;
                self.buf.truncate(at);
            }
        }
    }

    fn done(mut self) -> Vec<Events> {
        // The buffer counts a big batch at its length: the allocation it
        // keeps alive must be about that (records moved by tag_key, or a
        // body that was mostly spaces).
        if self.buf.capacity() > self.buf.len() + self.buf.len() / 4 + 4096 {
            self.buf.shrink_to_fit();
        }
        let mut all = Vec::with_capacity(1 + self.others.len());
        all.push(Events {
            tag: self.tag,
            entries: self.buf,
            count: self.count,
        });
        all.extend(self.others);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoder(tag_key: Option<&str>) -> HttpDecode {
        let cfg: HttpInputConfig = toml::from_str(&format!(
            "bind = \"127.0.0.1:0\"\n{}",
            tag_key.map_or(String::new(), |k| format!("tag_key = \"{k}\"\n"))
        ))
        .unwrap();
        HttpDecode {
            parser: cfg.parser().unwrap(),
            tag: None,
            tag_key: cfg.tag_key.clone(),
            time_key: cfg.time_key.clone(),
            keep_time_key: false,
        }
    }

    fn one(b: impl Into<Bytes>) -> Body {
        Body::from(b.into())
    }

    fn request(path: &str, ctype: &str) -> Parts {
        let (parts, ()) = hyper::Request::post(path)
            .header("content-type", ctype)
            .body(())
            .unwrap()
            .into_parts();
        parts
    }

    fn records(e: &Events) -> Vec<(EventTime, serde_json::Value)> {
        nagare_core::record::entries(&e.entries)
            .map(|(t, rec, _)| {
                let mut j = Vec::new();
                nagare_core::json::write_value(&mut j, rec);
                (t, serde_json::from_slice(&j).unwrap())
            })
            .collect()
    }

    /// Fluent Bit's out_http `Format gelf`: a GELF object per line, as
    /// application/json; with `time_key = "timestamp"` its time is the
    /// event's (milliseconds, as Fluent Bit writes it).
    #[test]
    fn gelf_lines_with_their_timestamp() {
        let cfg: HttpInputConfig =
            toml::from_str("bind = \"127.0.0.1:0\"\ntime_key = \"timestamp\"").unwrap();
        let d = HttpDecode::new(&cfg).unwrap();
        let body = "{\"version\":\"1.1\",\"short_message\":\"m\",\"_seq\":8,\"timestamp\":1700000008.123}\n\
                    {\"version\":\"1.1\",\"short_message\":\"n\",\"_ok\":\"true\",\"timestamp\":1700000009.5}\n";
        let b = d
            .decode(&request("/gelf", "application/json"), one(body))
            .unwrap();
        let r = records(&b[0]);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].0.secs, 1_700_000_008);
        assert!(
            (r[0].0.nanos as i64 - 123_000_000).abs() < 1000,
            "{:?}",
            r[0].0
        );
        assert_eq!(r[1].0, EventTime::new(1_700_000_009, 500_000_000));
        assert_eq!(
            r[0].1,
            serde_json::json!({"version": "1.1", "short_message": "m", "_seq": 8})
        );
    }

    #[test]
    fn json_array_with_record_times() {
        let d = decoder(None);
        let body = r#"[{"a":1,"time":1700000000.5},{"b":"x"}]"#;
        let b = d
            .decode(&request("/app.web", "application/json"), one(body))
            .unwrap();
        assert_eq!((b.len(), b[0].tag.as_str(), b[0].count), (1, "app.web", 2));
        let r = records(&b[0]);
        assert_eq!(r[0].0, EventTime::new(1_700_000_000, 500_000_000));
        assert_eq!(r[0].1, serde_json::json!({"a": 1}));
        assert_eq!(r[1].1, serde_json::json!({"b": "x"}));
    }

    #[test]
    fn ndjson_errors_name_the_line() {
        let d = decoder(None);
        let body = "{\"a\":1}\n\n{\"a\":2}\n{\"a\":\n";
        let e = d
            .decode(&request("/t", "application/x-ndjson"), one(body))
            .unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        assert!(e.message.starts_with("line 4: "), "{}", e.message);
        // CRLF lines, and a last line without its newline.
        let e = d
            .decode(
                &request("/t", "application/x-ndjson"),
                one("{\"a\":1}\r\n{\"a\":"),
            )
            .unwrap_err();
        assert!(e.message.starts_with("line 2: "), "{}", e.message);
        let b = d
            .decode(
                &request("/t", "application/x-ndjson"),
                one("{\"a\":1}\r\n\r\n{\"a\":2}"),
            )
            .unwrap();
        assert_eq!(b[0].count, 2);
        // NDJSON sent as application/json is taken too.
        let b = d
            .decode(
                &request("/t", "application/json"),
                one("{\"a\":1}\n{\"a\":2}\n"),
            )
            .unwrap();
        assert_eq!(b[0].count, 2);
    }

    #[test]
    fn ndjson_lines_cut_by_the_bodys_pieces_are_read_whole() {
        let d = decoder(None);
        let text = "{\"a\":1}\r\n\n{\"a\":2,\"b\":\"xyz\"}\n{\"a\":3}";
        let whole = d
            .decode(
                &request("/t?time=1700000000", "application/x-ndjson"),
                one(text),
            )
            .unwrap();
        assert_eq!(whole[0].count, 3);
        // Every way of cutting the body in three gives the same entries.
        for i in 0..=text.len() {
            for j in i..=text.len() {
                let mut body = Body::default();
                for p in [&text[..i], &text[i..j], &text[j..]] {
                    body.push(Bytes::copy_from_slice(p.as_bytes()));
                }
                let b = d
                    .decode(&request("/t?time=1700000000", "application/x-ndjson"), body)
                    .unwrap();
                assert_eq!(
                    (b[0].count, records(&b[0])),
                    (3, records(&whole[0])),
                    "{i} {j}"
                );
            }
        }
        // A bad line cut in two is named by its number.
        let mut body = Body::default();
        body.push(Bytes::from("{\"a\":1}\n{\"a\""));
        body.push(Bytes::from(":}\n{\"a\":3}\n"));
        let e = d
            .decode(&request("/t?time=1700000000", "application/x-ndjson"), body)
            .unwrap_err();
        assert!(e.message.starts_with("line 2: "), "{}", e.message);
    }

    #[test]
    fn tag_key_splits_batches_and_form_fields_decode() {
        let d = decoder(Some("t"));
        let body = "json=%5B%7B%22t%22%3A%22x.y%22%7D%2C%7B%22n%22%3A1%7D%5D&time=1700000001";
        let b = d
            .decode(
                &request("/in", "application/x-www-form-urlencoded"),
                one(body),
            )
            .unwrap();
        assert_eq!(b.len(), 2);
        assert_eq!((b[0].tag.as_str(), b[0].count), ("in", 1));
        assert_eq!((b[1].tag.as_str(), b[1].count), ("x.y", 1));
        assert_eq!(records(&b[1])[0].0, EventTime::new(1_700_000_001, 0));
    }

    /// What Fluent Bit's out_http sends with `Format msgpack`: its chunk as
    /// it is, a run of events `[[EventTime, {metadata}], {record}]`; and
    /// what Fluentd's out_http sends with `<format> @type msgpack`: maps one
    /// after another; and forward-style `[time, {record}]` events.
    #[test]
    fn msgpack_runs_of_records_and_events() {
        use rmpv::Value;
        let d = decoder(None);
        let et = |s: u32, ns: u32| {
            let mut b = s.to_be_bytes().to_vec();
            b.extend_from_slice(&ns.to_be_bytes());
            Value::Ext(0, b)
        };
        let mut body = Vec::new();
        for i in 0..3u32 {
            let event = Value::Array(vec![
                Value::Array(vec![et(1_700_000_000 + i, 5), Value::Map(vec![])]),
                Value::Map(vec![("log".into(), format!("line {i}").into())]),
            ]);
            rmpv::encode::write_value(&mut body, &event).unwrap();
        }
        let b = d
            .decode(&request("/fb", "application/msgpack"), one(body))
            .unwrap();
        assert_eq!(
            records(&b[0]),
            (0..3u32)
                .map(|i| (
                    EventTime::new(1_700_000_000 + i, 5),
                    serde_json::json!({"log": format!("line {i}")})
                ))
                .collect::<Vec<_>>()
        );
        let mut body = Vec::new();
        for i in 0..2u64 {
            let rec = Value::Map(vec![("n".into(), i.into())]);
            rmpv::encode::write_value(&mut body, &rec).unwrap();
        }
        let event = Value::Array(vec![
            1_700_000_009u64.into(),
            Value::Map(vec![("n".into(), 2.into())]),
        ]);
        rmpv::encode::write_value(&mut body, &event).unwrap();
        let b = d
            .decode(&request("/fd", "application/msgpack"), one(body))
            .unwrap();
        let r = records(&b[0]);
        let ns: Vec<_> = r.iter().map(|(_, v)| v["n"].as_u64().unwrap()).collect();
        assert_eq!(ns, vec![0, 1, 2]);
        assert_eq!(r[2].0, EventTime::new(1_700_000_009, 0));
        // A value that is none of these is refused, naming it.
        let mut body = Vec::new();
        rmpv::encode::write_value(&mut body, &Value::Map(vec![])).unwrap();
        rmpv::encode::write_value(&mut body, &Value::from("text")).unwrap();
        let e = d
            .decode(&request("/bad", "application/msgpack"), one(body))
            .err()
            .unwrap();
        assert!(e.message.contains("value 1"), "{}", e.message);
    }

    /// Fluent Bit's out_http `Format json_stream`: objects one after
    /// another, without newlines.
    #[test]
    fn json_objects_one_after_another() {
        let d = decoder(None);
        let b = d
            .decode(
                &request("/s", "application/json"),
                one(&b"{\"a\":1}{\"a\":2} {\"a\":3}\n{\"a\":4}"[..]),
            )
            .unwrap();
        let a: Vec<_> = records(&b[0])
            .iter()
            .map(|(_, v)| v["a"].as_u64().unwrap())
            .collect();
        assert_eq!(a, vec![1, 2, 3, 4]);
    }

    #[test]
    fn msgpack_records_lose_their_time_field() {
        let d = decoder(None);
        let mut body = Vec::new();
        rmpv::encode::write_value(
            &mut body,
            &rmpv::Value::Array(vec![rmpv::Value::Map(vec![
                ("time".into(), 1_700_000_002u64.into()),
                ("k".into(), "v".into()),
            ])]),
        )
        .unwrap();
        let b = d
            .decode(&request("/m", "application/msgpack"), one(body.clone()))
            .unwrap();
        let r = records(&b[0]);
        assert_eq!(
            r[0],
            (
                EventTime::new(1_700_000_002, 0),
                serde_json::json!({"k": "v"})
            )
        );
        body.pop();
        assert!(d
            .decode(&request("/m", "application/msgpack"), one(body))
            .is_err());
    }

    #[test]
    fn paths_that_are_not_tags() {
        let d = decoder(None);
        for path in ["/", "/a/b", "/a%20b"] {
            let e = d
                .decode(&request(path, "application/json"), one("{}"))
                .unwrap_err();
            assert_eq!(e.status, StatusCode::NOT_FOUND, "{path}");
        }
    }
}
