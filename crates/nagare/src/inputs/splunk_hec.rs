//! `splunk_hec`: Splunk's HTTP Event Collector, so that what sends to
//! Splunk (Splunk's logging libraries, the OpenTelemetry Collector's and
//! Vector's `splunk_hec` sinks, Fluent Bit's and Fluentd's splunk outputs)
//! can send to nagare, as Fluent Bit's in_splunk.
//!
//! - `POST /services/collector/event` (also `/services/collector` and the
//!   `/1.0` paths): one or more JSON objects, concatenated (`{"event":..,
//!   "time":..,"host":..,"source":..,"sourcetype":..,"index":..,
//!   "fields":{..}}`). Each becomes one event whose record is the object
//!   as sent without `time`; `time` (epoch seconds, fractions allowed) is
//!   the event time, else the time of arrival. An object without `event`,
//!   or with an empty one, refuses the request (400, code 12 or 13, with
//!   `invalid-event-number`), as Splunk does; nothing of it is taken.
//! - `POST /services/collector/raw`: each line of the body is one event,
//!   `{"event": "<line>"}` plus the `host`, `source`, `sourcetype` and
//!   `index` query parameters when given.
//! - Tokens: `Authorization: Splunk <token>` (or HTTP basic with the token
//!   as the password), one of `tokens`; 401 (code 2 or 3) without one, 403
//!   (code 4) for another.
//! - Indexer acknowledgement (`indexer_acknowledgement = true`): a request
//!   needs a channel (`X-Splunk-Request-Channel` or `?channel=`, a GUID)
//!   and its answer carries an `ackId`, counted per channel. That answer
//!   is given only once the events are in every matched output's buffer
//!   (with `ack = "delivered"`: delivered downstream), so
//!   `POST /services/collector/ack` answers true for every id the channel
//!   was given, and false for any other.
//! - While a matched buffer is full: 503 `{"text":"Server is busy",
//!   "code":9}`, which HEC clients retry. `GET /services/collector/health`
//!   answers `{"text":"HEC is healthy","code":17}`.
//!
//! The listener (keep-alive, limits, gzip/zstd, HTTPS) is
//! http_listener.rs, shared with the `http` input.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{self, HeaderValue};
use hyper::http::request::Parts;
use hyper::{Method, Response, StatusCode};
use nagare_core::json::write_string;
use nagare_core::plugin::{BuildContext, OptionError};
use nagare_forward::EventTime;
use serde::Deserialize;
use tokio::task::JoinHandle;

use crate::inputs::common::http_listener::{
    self, http_listener_options, Answered, Body, Decode, Events, Reject,
};
use crate::inputs::{Input, InputContext, InputPlugin};
use crate::net::tls::TlsServer;
use crate::parsers::{Parser, ParserConfig, ParserType};

http_listener_options!(
    SplunkHecInputConfig {
        /// The tag of the events (default "splunk.hec").
        #[serde_inline_default("splunk.hec".into())]
        tag: String,
        /// The HEC tokens accepted (`Authorization: Splunk <token>`); empty
        /// (default): no token is asked for.
        #[serde(default)]
        tokens: Vec<String>,
        /// Indexer acknowledgement: requests must name a channel and their
        /// answers carry an `ackId` that `/services/collector/ack` reports
        /// (default false).
        #[serde(default)]
        indexer_acknowledgement: bool,
        /// Channels remembered for acknowledgements at most; a request on a
        /// new channel past it is answered 503, "Server is busy" (default
        /// 10000).
        #[serde_inline_default(10_000)]
        max_channels: usize,
    }
);

impl InputPlugin for SplunkHecInputConfig {
    const TYPE: &'static str = "splunk_hec";
    const DOC: &'static str = "Receives events sent to Splunk's HTTP Event Collector (`/services/collector/event` and `/raw`), with tokens, channels and indexer acknowledgements given once the events are in the buffers; 503 \"Server is busy\" while buffers are full (see [Migrating senders](migration-senders.md)).";

    fn build(self, cx: &mut BuildContext) -> Result<Box<dyn Input>, OptionError> {
        let tls = self.listener().check(cx)?;
        if self.tag.is_empty()
            || self
                .tag
                .contains(|c: char| c.is_whitespace() || c.is_control() || c == '/')
        {
            return Err(OptionError::new(
                "tag",
                "must be a tag (dotted words, no spaces)",
            ));
        }
        if self.tokens.iter().any(|t| t.trim().is_empty()) {
            return Err(OptionError::new("tokens", "a token must not be empty"));
        }
        if self.max_channels == 0 {
            return Err(OptionError::new("max_channels", "must be at least 1"));
        }
        Ok(Box::new(HecInput { cfg: self, tls }))
    }
}

struct HecInput {
    cfg: SplunkHecInputConfig,
    tls: Option<Arc<TlsServer>>,
}

#[async_trait::async_trait]
impl Input for HecInput {
    async fn start(self: Box<Self>, cx: InputContext) -> anyhow::Result<Vec<JoinHandle<()>>> {
        let decode = Arc::new(HecDecode::new(&self.cfg)?);
        http_listener::start(
            &cx.name,
            <SplunkHecInputConfig as InputPlugin>::TYPE,
            self.cfg.listener(),
            self.tls,
            decode,
            cx.router,
            cx.stats,
            cx.shutdown,
        )
        .await
    }
}

/// What the requests of one input share.
pub struct HecDecode {
    tag: String,
    tokens: Vec<String>,
    acks: bool,
    max_channels: usize,
    /// The json parser with `time` as the time key (removed).
    parser: Parser,
    /// Per channel, the next ack id.
    channels: Mutex<HashMap<String, u64>>,
}

/// Splunk's answers: text and code.
const TOKEN_REQUIRED: &str = "Token is required";
const INVALID_AUTH: &str = "Invalid authorization";
const INVALID_TOKEN: &str = "Invalid token";
const NO_DATA: &str = "No data";
const INVALID_FORMAT: &str = "Invalid data format";
const BUSY: &str = "Server is busy";
const CHANNEL_MISSING: &str = "Data channel is missing";
const INVALID_CHANNEL: &str = "Invalid data channel";
const EVENT_REQUIRED: &str = "Event field is required";
const EVENT_BLANK: &str = "Event field cannot be blank";
const ACK_DISABLED: &str = "ACK is disabled";
const NOT_FOUND: &str = "The requested URL was not found on this server.";

const CODES: [(&str, u32); 11] = [
    (TOKEN_REQUIRED, 2),
    (INVALID_AUTH, 3),
    (INVALID_TOKEN, 4),
    (NO_DATA, 5),
    (INVALID_FORMAT, 6),
    (BUSY, 9),
    (CHANNEL_MISSING, 10),
    (INVALID_CHANNEL, 11),
    (EVENT_REQUIRED, 12),
    (EVENT_BLANK, 13),
    (ACK_DISABLED, 14),
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    Event,
    Raw,
    Ack,
    Health,
}

fn endpoint(path: &str) -> Option<Endpoint> {
    let path = path.trim_end_matches('/');
    let path = path.strip_suffix("/1.0").unwrap_or(path);
    match path {
        "/services/collector" | "/services/collector/event" => Some(Endpoint::Event),
        "/services/collector/raw" => Some(Endpoint::Raw),
        "/services/collector/ack" => Some(Endpoint::Ack),
        "/services/collector/health" => Some(Endpoint::Health),
        _ => None,
    }
}

/// A query parameter, percent-decoded.
fn param(query: Option<&str>, name: &str) -> Option<String> {
    query?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then(|| {
            percent_encoding::percent_decode_str(&v.replace('+', " "))
                .decode_utf8_lossy()
                .into_owned()
        })
    })
}

#[derive(Deserialize)]
struct AckQuery {
    acks: Vec<u64>,
}

fn json(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=UTF-8"),
    );
    r
}

impl HecDecode {
    pub fn new(cfg: &SplunkHecInputConfig) -> anyhow::Result<HecDecode> {
        Ok(HecDecode {
            tag: cfg.tag.clone(),
            tokens: cfg.tokens.clone(),
            acks: cfg.indexer_acknowledgement,
            max_channels: cfg.max_channels,
            parser: Parser::new(&ParserConfig {
                kind: ParserType::Json,
                time_key: Some("time".into()),
                keep_time_key: false,
                ..ParserConfig::default()
            })?,
            channels: Mutex::new(HashMap::new()),
        })
    }

    /// Checks the request's token.
    fn authorize(&self, head: &Parts) -> Result<(), Reject> {
        if self.tokens.is_empty() {
            return Ok(());
        }
        let Some(given) = head.headers.get(header::AUTHORIZATION) else {
            return Err(Reject::new(StatusCode::UNAUTHORIZED, TOKEN_REQUIRED));
        };
        let given = given.to_str().unwrap_or("");
        let (scheme, value) = given.split_once(' ').unwrap_or((given, ""));
        let token = if scheme.eq_ignore_ascii_case("splunk") {
            value.trim().as_bytes().to_vec()
        } else if scheme.eq_ignore_ascii_case("basic") {
            use base64::Engine as _;
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(value.trim())
                .unwrap_or_default();
            match decoded.iter().position(|&b| b == b':') {
                Some(i) => decoded[i + 1..].to_vec(),
                None => return Err(Reject::new(StatusCode::UNAUTHORIZED, INVALID_AUTH)),
            }
        } else {
            return Err(Reject::new(StatusCode::UNAUTHORIZED, INVALID_AUTH));
        };
        if self.tokens.iter().any(|t| same(&token, t.as_bytes())) {
            Ok(())
        } else {
            Err(Reject::new(StatusCode::FORBIDDEN, INVALID_TOKEN))
        }
    }

    /// The request's channel: required with acknowledgements.
    fn channel(&self, head: &Parts) -> Result<Option<String>, Reject> {
        let c = head
            .headers
            .get("x-splunk-request-channel")
            .map(|v| v.to_str().unwrap_or("?").to_string())
            .or_else(|| param(head.uri.query(), "channel"));
        match c {
            None if self.acks => Err(Reject::bad(CHANNEL_MISSING)),
            Some(c) if !is_guid(&c) => Err(Reject::bad(format!(
                "{INVALID_CHANNEL}: {c:?} is not a GUID"
            ))),
            c => Ok(c),
        }
    }

    /// An `/services/collector/event` body: concatenated JSON objects.
    pub fn events(&self, body: &[u8]) -> Result<Events, Reject> {
        let mut entries = Vec::with_capacity(body.len() + body.len() / 8);
        let now = EventTime::now().to_bytes();
        let mut count = 0u32;
        let objects =
            serde_json::Deserializer::from_slice(body).into_iter::<&serde_json::value::RawValue>();
        for (i, obj) in objects.enumerate() {
            let bad =
                |what: &str, detail: String| Reject::bad(format!("{what} (event {i}: {detail})"));
            let obj = obj.map_err(|e| bad(INVALID_FORMAT, e.to_string()))?;
            let at = entries.len();
            entries.push(0x92);
            entries.extend_from_slice(&now);
            let time =
                crate::parsers::json::parse(&self.parser, obj.get().as_bytes(), &[], &mut entries)
                    .map_err(|e| bad(INVALID_FORMAT, e))?;
            if let Some(t) = time {
                entries[at + 1..at + 11].copy_from_slice(&t.to_bytes());
            }
            let rec = &entries[at + 11..];
            match nagare_core::record::find_key(rec, 0, b"event")
                .and_then(|(v, _)| rec.get(v).copied())
            {
                None | Some(0xc0) => return Err(bad(EVENT_REQUIRED, "no `event` field".into())),
                Some(0xa0) => return Err(bad(EVENT_BLANK, "`event` is \"\"".into())),
                Some(_) => {}
            }
            count += 1;
        }
        if count == 0 {
            return Err(Reject::bad(NO_DATA));
        }
        Ok(Events {
            tag: self.tag.clone(),
            entries,
            count,
        })
    }

    /// An `/services/collector/raw` body: one event per line.
    pub fn raw(&self, query: Option<&str>, body: &[u8]) -> Result<Events, Reject> {
        let meta: Vec<(&str, String)> = ["host", "source", "sourcetype", "index"]
            .into_iter()
            .filter_map(|k| param(query, k).map(|v| (k, v)))
            .collect();
        let now = EventTime::now().to_bytes();
        let mut entries = Vec::with_capacity(body.len() + body.len() / 4);
        let mut count = 0u32;
        for line in body.split(|&b| b == b'\n') {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.iter().all(|b| b.is_ascii_whitespace()) {
                continue;
            }
            entries.push(0x92);
            entries.extend_from_slice(&now);
            nagare_forward::msgpack::write_map_len(&mut entries, 1 + meta.len());
            nagare_forward::msgpack::write_str(&mut entries, b"event");
            nagare_forward::msgpack::write_str(&mut entries, line);
            for (k, v) in &meta {
                nagare_forward::msgpack::write_str(&mut entries, k.as_bytes());
                nagare_forward::msgpack::write_str(&mut entries, v.as_bytes());
            }
            count += 1;
        }
        if count == 0 {
            return Err(Reject::bad(NO_DATA));
        }
        Ok(Events {
            tag: self.tag.clone(),
            entries,
            count,
        })
    }

    /// The next ack id of `channel`.
    fn ack_id(&self, channel: &str) -> Result<u64, Reject> {
        let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        let known = channels.len();
        let next = match channels.get_mut(channel) {
            Some(n) => n,
            None if known >= self.max_channels => {
                return Err(Reject::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!(
                        "{BUSY}: max_channels ({}) channels in use",
                        self.max_channels
                    ),
                ))
            }
            None => channels.entry(channel.to_string()).or_insert(0),
        };
        let id = *next;
        *next += 1;
        Ok(id)
    }

    /// `{"acks":{"0":true,..}}` for a `/services/collector/ack` body.
    fn ack_answer(&self, channel: &str, body: &[u8]) -> Result<Vec<u8>, Reject> {
        let q: AckQuery = serde_json::from_slice(body).map_err(|e| {
            Reject::bad(format!(
                "{INVALID_FORMAT} (expected {{\"acks\":[ids]}}: {e})"
            ))
        })?;
        let issued = self
            .channels
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(channel)
            .copied();
        let Some(issued) = issued else {
            return Err(Reject::bad(format!(
                "{INVALID_CHANNEL}: no events were sent on {channel:?}"
            )));
        };
        let mut out = b"{\"acks\":{".to_vec();
        for (i, id) in q.acks.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.push(b'"');
            out.extend_from_slice(itoa::Buffer::new().format(*id).as_bytes());
            // Ids are given only in answers sent once the events were in
            // the buffers: every id given is done.
            out.extend_from_slice(if *id < issued {
                b"\":true"
            } else {
                b"\":false"
            });
        }
        out.extend_from_slice(b"}}");
        Ok(out)
    }
}

/// A channel is a GUID: 8-4-4-4-12 hex digits.
fn is_guid(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() == 5
        && parts
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(p, n)| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Compares secrets in a time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Decode for HecDecode {
    fn tag_hint(&self, _head: &Parts) -> Option<String> {
        Some(self.tag.clone())
    }

    fn answer_head(&self, head: &Parts) -> Result<Option<Response<Full<Bytes>>>, Reject> {
        let Some(ep) = endpoint(head.uri.path()) else {
            return Err(Reject::new(StatusCode::NOT_FOUND, NOT_FOUND));
        };
        if ep == Endpoint::Health {
            return Ok(Some(json(
                StatusCode::OK,
                Bytes::from_static(br#"{"text":"HEC is healthy","code":17}"#),
            )));
        }
        self.authorize(head)?;
        if ep == Endpoint::Ack && !self.acks {
            return Err(Reject::bad(ACK_DISABLED));
        }
        Ok(None)
    }

    fn decode(&self, head: &Parts, body: Body) -> Result<Vec<Events>, Reject> {
        self.decode_answered(head, body).map(|(e, _)| e)
    }

    fn decode_answered(&self, head: &Parts, body: Body) -> Result<Answered, Reject> {
        let channel = self.channel(head)?;
        let body = body.joined();
        let ep = endpoint(head.uri.path());
        if ep == Some(Endpoint::Ack) {
            let channel = channel.ok_or_else(|| Reject::bad(CHANNEL_MISSING))?;
            let answer = self.ack_answer(&channel, &body)?;
            return Ok((Vec::new(), Some(json(StatusCode::OK, answer))));
        }
        let events = match ep {
            Some(Endpoint::Raw) => self.raw(head.uri.query(), &body)?,
            _ => self.events(&body)?,
        };
        let mut answer = br#"{"text":"Success","code":0"#.to_vec();
        if let (true, Some(c)) = (self.acks, &channel) {
            answer.extend_from_slice(b",\"ackId\":");
            answer.extend_from_slice(itoa::Buffer::new().format(self.ack_id(c)?).as_bytes());
        }
        answer.push(b'}');
        Ok((vec![events], Some(json(StatusCode::OK, answer))))
    }

    /// Splunk's error body: `{"text":..,"code":..}` (and
    /// `invalid-event-number` for a bad event).
    fn refusal(&self, status: StatusCode, message: &str) -> Response<Full<Bytes>> {
        let (text, code) = CODES
            .iter()
            .find(|(t, _)| message.starts_with(t))
            .map(|&(t, c)| (t, c))
            .unwrap_or(match status {
                StatusCode::SERVICE_UNAVAILABLE => (BUSY, 9),
                StatusCode::INTERNAL_SERVER_ERROR => ("Internal server error", 8),
                StatusCode::NOT_FOUND => (NOT_FOUND, 404),
                _ => (INVALID_FORMAT, 6),
            });
        let mut b = b"{\"text\":".to_vec();
        write_string(&mut b, text.as_bytes());
        b.extend_from_slice(b",\"code\":");
        b.extend_from_slice(itoa::Buffer::new().format(code).as_bytes());
        if let Some(n) = message
            .split_once("(event ")
            .and_then(|(_, r)| r.split(':').next()?.parse::<u64>().ok())
        {
            b.extend_from_slice(b",\"invalid-event-number\":");
            b.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
        }
        if message != text {
            b.extend_from_slice(b",\"detail\":");
            write_string(&mut b, message.as_bytes());
        }
        b.push(b'}');
        json(status, b)
    }

    fn takes(&self, method: &Method) -> bool {
        *method == Method::POST
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::common::mutations;

    fn decoder() -> HecDecode {
        let cfg: SplunkHecInputConfig = toml::from_str("bind = \"127.0.0.1:0\"").unwrap();
        HecDecode::new(&cfg).unwrap()
    }

    #[test]
    fn mutated_bodies_never_panic() {
        let d = decoder();
        let good = br#"{"event":{"k":[1,"x"]},"time":1714557600.5,"host":"h","fields":{"f":"v"}}{"event":"b","time":"12"}"#;
        mutations(good, |b| {
            for e in [d.events(b), d.raw(Some("host=h"), b)]
                .into_iter()
                .flatten()
            {
                assert_eq!(
                    nagare_core::record::entries(&e.entries).count(),
                    e.count as usize
                );
            }
        });
    }

    #[test]
    fn events_raw_and_refusals() {
        let d = decoder();
        let e = d
            .events(br#"{"event":"a","time":1714557600.5,"host":"h"}{"event":{"k":1},"fields":{"f":"v"}}"#)
            .unwrap();
        assert_eq!(e.count, 2);
        let recs: Vec<_> = nagare_core::record::entries(&e.entries).collect();
        assert_eq!(recs[0].0, EventTime::new(1714557600, 500_000_000));
        assert!(nagare_core::record::field(recs[0].1, b"time").is_none());
        assert!(nagare_core::record::find_key(recs[1].1, 0, b"fields").is_some());
        let r = d.events(br#"{"event":"a"} {"host":"x"}"#).unwrap_err();
        assert!(r.message.starts_with(EVENT_REQUIRED), "{}", r.message);
        let a = d.refusal(r.status, &r.message);
        assert_eq!(a.status(), StatusCode::BAD_REQUEST);
        assert!(d
            .events(br#"{"event":""}"#)
            .unwrap_err()
            .message
            .starts_with(EVENT_BLANK));
        assert!(d
            .events(b"{\"event\":")
            .unwrap_err()
            .message
            .starts_with(INVALID_FORMAT));
        assert!(d.events(b"  ").unwrap_err().message.starts_with(NO_DATA));
        let raw = d
            .raw(Some("host=web&sourcetype=acc%20ess"), b"l1\r\nl2\n\n")
            .unwrap();
        assert_eq!(raw.count, 2);
        assert!(is_guid("0aeeac95-ac74-4aa9-b30d-6c4c0ac581ba"));
        assert!(!is_guid("nope"));
    }
}
