//! `splunk_hec`: sends each chunk to Splunk's HTTP Event Collector as one
//! request: to `/services/collector/event`, the events as concatenated
//! JSON objects (`{"time":…,"host":…,"source":…,"sourcetype":…,
//! "index":…,"fields":{…},"event":…}`), or to `/services/collector/raw`
//! (`mode = "raw"`), one line per event with the metadata in the query.
//!
//! Index, source, sourcetype and host are templates (`${tag}`,
//! `${record.FIELD}`, …); the event is the record (or one field,
//! `event_key`); the time is the event's, in epoch seconds with a
//! fraction.
//!
//! Answers (HEC's codes, from Splunk's documentation): 2xx delivered;
//! 401/403 (token disabled, missing, invalid) retried with the events
//! kept; 429, 503 (server busy, queues full) and other 5xx retried; 413
//! splits the request in halves; a 400 with an `invalid-event-number`
//! (codes 6 invalid data format, 12/13 event field missing or blank, 15
//! indexed fields) refuses that event alone: Splunk indexed the ones
//! before it, the ones after are sent again; any other 400 or 4xx refuses
//! the request's events (secondary output or dead letters, counted by
//! reason).

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;

use async_trait::async_trait;
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::StatusCode;
use nagare_core::json::{write_string, write_value};
use nagare_core::output::OutputPlugin;
use nagare_core::output::{FlushError, Output};
use nagare_core::plugin::{BuildContext, OptionError};
use nagare_core::record::{value_text, FieldPath};
use serde::Deserialize;

use crate::buffer::Chunk;
use crate::formats::template::Template;
use crate::net::http_client::{http_client_options, HttpSender, PartSent, Undelivered};

/// Which HEC endpoint the requests go to.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum HecMode {
    /// `/services/collector/event`: one JSON object per event.
    #[default]
    Event,
    /// `/services/collector/raw`: one line per event; index, source,
    /// sourcetype and host in the query (so per chunk: templates may not
    /// read record fields).
    Raw,
}

http_client_options!(
    /// The `splunk_hec` output (`token`, or `bearer_token` or
    /// `username`/`password` for a server behind a proxy that wants them).
    SplunkHecOutputConfig {
        /// The collector URL, e.g.
        /// "https://splunk:8088/services/collector/event" (or
        /// ".../services/collector/raw" with `mode = "raw"`). Required.
        endpoint: String,
        /// "event" (default) or "raw".
        #[serde(default)]
        mode: HecMode,
        /// The HEC token, sent as `Authorization: Splunk <token>`.
        #[serde(default)]
        token: Option<String>,
        /// The index (template: `${tag}`, `${tag_parts[N]}`,
        /// `${hostname}`, `${record.FIELD}`); default: none (the token's
        /// default index).
        #[serde(default)]
        index: Option<String>,
        /// The source (template); default: none.
        #[serde(default)]
        source: Option<String>,
        /// The sourcetype (template); default: none.
        #[serde(default)]
        sourcetype: Option<String>,
        /// The host (template, e.g. "${hostname}"); default: none (Splunk
        /// uses the sender's address).
        #[serde(default)]
        host: Option<String>,
        /// The record field sent as the event (its value as it is: a
        /// string, a number, a map); default: none: the whole record.
        #[serde(default)]
        event_key: Option<String>,
        /// `[output.fields]`: indexed fields, name = template (mode
        /// "event" only); empty values left out.
        #[serde(default)]
        fields: BTreeMap<String, String>,
        /// `X-Splunk-Request-Channel` (a GUID; Splunk needs one on the raw
        /// endpoint and with indexer acknowledgement).
        #[serde(default)]
        channel: Option<String>,
    }
);

impl OutputPlugin for SplunkHecOutputConfig {
    const TYPE: &'static str = "splunk_hec";
    const DOC: &'static str = "Sends each chunk to Splunk's HTTP Event Collector as one request (event endpoint: concatenated JSON events with index, source, sourcetype, host and fields from templates; or the raw endpoint), optionally gzip'd; HEC's answers mapped to retry, split or refuse, an invalid event refused alone (see [Search outputs](outputs-search.md)).";

    fn build(self, cx: &mut BuildContext) -> Result<Arc<dyn Output>, OptionError> {
        Ok(Arc::new(self.output(cx)?))
    }
}

impl SplunkHecOutputConfig {
    fn output(self, cx: &mut BuildContext) -> Result<SplunkHecOutput, OptionError> {
        let mut defaults = Vec::new();
        match &self.token {
            Some(_) if self.bearer_token.is_some() || self.username.is_some() => {
                return Err(OptionError::new(
                    "token",
                    "set either `token` or `bearer_token`/`username`, not both (one Authorization header)",
                ))
            }
            Some(t) => defaults.push((
                header::AUTHORIZATION,
                HeaderValue::try_from(format!("Splunk {t}"))
                    .map_err(|_| OptionError::new("token", "not valid in a header"))?,
            )),
            None => cx.warn(
                "token",
                "no HEC token: Splunk answers 401 without one (only compatible servers take it)",
            ),
        }
        if let Some(c) = &self.channel {
            defaults.push((
                HeaderName::from_static("x-splunk-request-channel"),
                HeaderValue::try_from(c.as_str())
                    .map_err(|_| OptionError::new("channel", "not valid in a header"))?,
            ));
        }
        let content_type = match self.mode {
            HecMode::Event => "application/json",
            HecMode::Raw => "text/plain",
        };
        defaults.push((header::CONTENT_TYPE, HeaderValue::from_static(content_type)));
        let sender = self.http_sender("endpoint", &self.endpoint, defaults, cx)?;
        let meta = |key: &str, t: &Option<String>| -> Result<Option<Template>, OptionError> {
            let Some(t) = t else { return Ok(None) };
            let t = Template::parse(t).map_err(|e| OptionError::new(key, e))?;
            if self.mode == HecMode::Raw && t.reads_record() {
                return Err(OptionError::new(
                    key,
                    "mode = \"raw\" sends it once per request: use ${tag}, ${hostname} or text, not ${record.…}",
                ));
            }
            Ok(Some(t))
        };
        let metadata = [
            ("index", meta("index", &self.index)?),
            ("source", meta("source", &self.source)?),
            ("sourcetype", meta("sourcetype", &self.sourcetype)?),
            ("host", meta("host", &self.host)?),
        ]
        .into_iter()
        .filter_map(|(k, t)| t.map(|t| (k, t)))
        .collect();
        if self.mode == HecMode::Raw && !self.fields.is_empty() {
            return Err(OptionError::new(
                "fields",
                "the raw endpoint takes no indexed fields: use mode = \"event\"",
            ));
        }
        let fields = self
            .fields
            .iter()
            .map(|(k, t)| {
                Template::parse(t)
                    .map(|t| (k.clone(), t))
                    .map_err(|e| OptionError::new(format!("fields.{k}"), e))
            })
            .collect::<Result<_, _>>()?;
        let event_key = match &self.event_key {
            Some(k) => Some(FieldPath::parse(k).map_err(|e| OptionError::new("event_key", e))?),
            None => None,
        };
        Ok(SplunkHecOutput {
            sender,
            metadata,
            fields,
            event_key,
            cfg: self,
        })
    }
}

struct SplunkHecOutput {
    cfg: SplunkHecOutputConfig,
    sender: HttpSender,
    /// ("index" | "source" | "sourcetype" | "host", template)
    metadata: Vec<(&'static str, Template)>,
    fields: Vec<(String, Template)>,
    event_key: Option<FieldPath>,
}

/// One event's part of a body, and its index in the chunk.
struct Event {
    index: u32,
    body: Vec<u8>,
}

#[async_trait]
impl Output for SplunkHecOutput {
    async fn write(&self, chunk: &Chunk) -> Result<(), FlushError> {
        let events = self.events(chunk);
        let path = match self.cfg.mode {
            HecMode::Event => self.sender.client().endpoint().path.clone(),
            HecMode::Raw => self.raw_path(&chunk.tag),
        };
        // One request; one answered 413 is cut in halves (http_client.rs).
        let (path, events) = (&path, &events);
        self.sender
            .send_parts(
                "splunk_hec",
                std::iter::once(0..events.len()),
                |i| events[i].index,
                |r| async move { self.send(path, &events[r]).await },
            )
            .await
            .finish(chunk.count)
    }
}

/// HEC's error codes, named for the `refused` counter.
fn code_name(code: u64) -> &'static str {
    match code {
        5 => "no_data",
        6 => "invalid_data_format",
        7 => "incorrect_index",
        10 => "data_channel_missing",
        11 => "invalid_data_channel",
        12 => "event_field_required",
        13 => "event_field_blank",
        15 => "indexed_fields_error",
        _ => "splunk_400",
    }
}

impl SplunkHecOutput {
    /// Each event's text in the request body.
    fn events(&self, chunk: &Chunk) -> Vec<Event> {
        let mut out = Vec::with_capacity(chunk.count as usize);
        let (mut scratch, mut text) = (Vec::new(), Vec::new());
        for (i, (time, rec, _)) in chunk.entries().enumerate() {
            let mut b = Vec::with_capacity(rec.len() * 2 + 64);
            let event = self
                .event_key
                .as_ref()
                .map_or(Some((0, rec.len())), |k| k.find(rec));
            match self.cfg.mode {
                HecMode::Raw => {
                    if let Some((a, z)) = event {
                        if self.event_key.is_some() {
                            b.extend_from_slice(value_text(&rec[a..z], &mut scratch));
                        } else {
                            write_value(&mut b, rec);
                        }
                    }
                    b.push(b'\n');
                }
                HecMode::Event => {
                    let _ = write!(
                        b,
                        "{{\"time\":{}.{:09}",
                        time.secs,
                        time.nanos.min(999_999_999)
                    );
                    for (k, t) in &self.metadata {
                        text.clear();
                        t.render(&chunk.tag, rec, &mut scratch, &mut text);
                        if !text.is_empty() {
                            let _ = write!(b, ",\"{k}\":");
                            write_string(&mut b, &text);
                        }
                    }
                    let mut first = true;
                    for (k, t) in &self.fields {
                        text.clear();
                        t.render(&chunk.tag, rec, &mut scratch, &mut text);
                        if text.is_empty() {
                            continue;
                        }
                        b.extend_from_slice(if first { b",\"fields\":{" } else { b"," });
                        first = false;
                        write_string(&mut b, k.as_bytes());
                        b.push(b':');
                        write_string(&mut b, &text);
                    }
                    if !first {
                        b.push(b'}');
                    }
                    b.extend_from_slice(b",\"event\":");
                    match event {
                        Some((a, z)) => write_value(&mut b, &rec[a..z]),
                        // No such field: the event would be refused
                        // (code 12); an empty string is refused too
                        // (13), so the record goes whole.
                        None => write_value(&mut b, rec),
                    };
                    b.extend_from_slice(b"}\n");
                }
            }
            out.push(Event {
                index: i as u32,
                body: b,
            });
        }
        out
    }

    /// The raw endpoint's path with the chunk's metadata in the query.
    fn raw_path(&self, tag: &str) -> String {
        use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
        let mut path = self.sender.client().endpoint().path.clone();
        for (k, t) in &self.metadata {
            let v = t.render_string(tag, &[0x80]);
            if v.is_empty() {
                continue;
            }
            path.push(if path.contains('?') { '&' } else { '?' });
            path.push_str(k);
            path.push('=');
            path.extend(utf8_percent_encode(&v, NON_ALPHANUMERIC));
        }
        path
    }

    async fn send(&self, path: &str, part: &[Event]) -> PartSent {
        let mut body = Vec::with_capacity(part.iter().map(|e| e.body.len()).sum());
        for e in part {
            body.extend_from_slice(&e.body);
        }
        // gzip'd by the sender when `compress = "gzip"`.
        let answer = match self.sender.post(path, body, &[]).await {
            Ok(a) => a,
            Err(FlushError::Retry(e)) => return PartSent::Retry(e),
            Err(e) => return PartSent::Reject(format!("request: {e}")),
        };
        let client = self.sender.client();
        let authority = &client.endpoint().authority;
        let text = String::from_utf8_lossy(&answer.body[..answer.body.len().min(300)])
            .trim()
            .to_string();
        match answer.status {
            StatusCode::PAYLOAD_TOO_LARGE => {
                return PartSent::TooLarge(format!("too_large: {authority} answered 413: {text}"))
            }
            StatusCode::BAD_REQUEST => {
                let v: serde_json::Value = serde_json::from_slice(&answer.body).unwrap_or_default();
                let code = v["code"].as_u64().unwrap_or(u64::MAX);
                let why = format!("{}: {authority} answered 400: {text}", code_name(code));
                return match v["invalid-event-number"].as_u64() {
                    // Splunk indexed the events before the invalid one;
                    // the ones after it are sent again.
                    Some(n) if matches!(code, 6 | 12 | 13 | 15) && (n as usize) < part.len() => {
                        let n = n as usize;
                        let again = format!("sent again after an invalid event: {why}");
                        let mut undone = vec![(n, Undelivered::Reject(why))];
                        undone.extend(
                            (n + 1..part.len()).map(|i| (i, Undelivered::Retry(again.clone()))),
                        );
                        PartSent::Some(undone)
                    }
                    _ => PartSent::Reject(why),
                };
            }
            _ => {}
        }
        // 401/403, 429, 5xx: retried; other statuses refused.
        match client.judge(answer).await {
            Ok(_) => PartSent::Ok,
            Err(FlushError::Retry(e)) => PartSent::Retry(e),
            Err(e) => PartSent::Reject(format!("splunk_rejected: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nagare_forward::EventTime;

    fn output(t: &str) -> SplunkHecOutput {
        let cfg: SplunkHecOutputConfig = toml::from_str(t).unwrap();
        cfg.output(&mut BuildContext::new("splunk_hec#0")).unwrap()
    }

    fn chunk(events: &[serde_json::Value]) -> Chunk {
        let mut payload = Vec::new();
        for rec in events {
            payload.push(0x92);
            payload.extend_from_slice(&EventTime::new(1_700_000_000, 120_000_000).to_bytes());
            nagare_core::json::msgpack_from_json(rec, &mut payload);
        }
        Chunk::in_memory([1; 16], "app.web".into(), payload, events.len() as u32)
    }

    #[test]
    fn events_carry_metadata_fields_and_time() {
        let o = output(
            r#"endpoint = "http://127.0.0.1:1/services/collector/event"
               index = "logs_${tag_parts[0]}"
               sourcetype = "${record.kind}"
               fields = { env = "prod", user = "${record.user}" }"#,
        );
        let ev = o.events(&chunk(&[
            serde_json::json!({"kind": "access", "user": "u1", "n": 1}),
            serde_json::json!({"n": 2}),
        ]));
        let parsed: Vec<serde_json::Value> = ev
            .iter()
            .map(|e| serde_json::from_slice(&e.body).unwrap())
            .collect();
        assert_eq!(
            parsed[0],
            serde_json::json!({"time": 1700000000.12, "index": "logs_app", "sourcetype": "access",
                "fields": {"env": "prod", "user": "u1"}, "event": {"kind": "access", "user": "u1", "n": 1}})
        );
        assert_eq!(
            parsed[1],
            serde_json::json!({"time": 1700000000.12, "index": "logs_app",
                "fields": {"env": "prod"}, "event": {"n": 2}})
        );
        let raw = output(
            r#"endpoint = "http://127.0.0.1:1/services/collector/raw"
               mode = "raw"
               event_key = "msg"
               source = "${tag}"
               index = "main""#,
        );
        let ev = raw.events(&chunk(&[serde_json::json!({"msg": "hello"})]));
        assert_eq!(ev[0].body, b"hello\n");
        assert_eq!(
            raw.raw_path("a.b"),
            "/services/collector/raw?index=main&source=a%2Eb"
        );
    }

    #[test]
    fn options_are_checked() {
        let bad = |t: &str| {
            let cfg: SplunkHecOutputConfig = toml::from_str(t).unwrap();
            cfg.build(&mut BuildContext::new("s#0"))
                .err()
                .unwrap()
                .to_string()
        };
        assert!(
            bad("endpoint = \"http://h:1/raw\"\nmode = \"raw\"\nindex = \"${record.x}\"")
                .contains("once per request")
        );
        assert!(
            bad("endpoint = \"http://h:1/raw\"\nmode = \"raw\"\nfields = { a = \"b\" }")
                .contains("no indexed fields")
        );
    }
}
