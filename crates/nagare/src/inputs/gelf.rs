//! `gelf`: GELF 1.1 messages (Graylog's format, and Docker's `gelf` log
//! driver) over UDP or TCP, as Graylog's GELF inputs take them.
//!
//! Over UDP a datagram holds one message, plain JSON or compressed (gzip or
//! zlib, told by its first bytes), or one chunk of a message: `0x1e 0x0f`,
//! an 8-byte message id, the chunk's number and the count of chunks (at
//! most 128), then its part. The chunks of a message are kept (by sender
//! and id) until all came, then joined and decompressed; a message whose
//! chunks do not all come within `chunk_timeout` is dropped and logged, as
//! Graylog does. Over TCP each message is plain JSON ended by a NUL byte.
//!
//! The record is the message's fields: `short_message` under
//! `short_message_key` (default "message", as Logstash's gelf input does),
//! `full_message`, `host`, `level` and the others under their own names,
//! and the additional fields (`_name`) without their underscore
//! (`strip_leading_underscore`, as Logstash does; kept with it when the
//! name without it is taken). `timestamp` (seconds since the epoch, with a
//! fraction) becomes the event time and `version` is dropped.
//!
//! Bad input costs only itself: a message that is not GELF (not JSON, not
//! an object, a broken compression, larger than `max_message_size` once
//! decompressed or joined) is dropped, counted as an error and logged with
//! the sender and the reason; the socket goes on.

use std::collections::HashMap;
use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nagare_core::metrics::PluginStats;
use nagare_core::plugin::{BuildContext, OptionError};
use nagare_core::units::{Dur, Size};
use nagare_forward::msgpack::{write_map_len, write_str};
use nagare_forward::EventTime;
use serde::Deserialize;
use tokio::task::JoinHandle;

use crate::formats::json_msgpack::{self, object_to_msgpack, JsonError, Picked, Top};
use crate::inputs::common::connection_options;
use crate::inputs::common::sockets::framing::Framing;
use crate::inputs::common::sockets::{self, Batches, Decoder, Endpoint, Peer, Settings};
use crate::inputs::{Input, InputContext, InputPlugin};
use crate::net::tls::TlsServer;

/// The transport of a gelf input.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// Datagrams: plain, gzip or zlib, chunked or not (default).
    #[default]
    Udp,
    /// Plain JSON messages, each ended by a NUL byte.
    Tcp,
}

connection_options!(
    /// The `gelf` input.
    GelfInputConfig {
        /// "HOST:PORT" to listen on (Graylog's port is 12201). Required.
        bind: String,
        /// "udp" (default) or "tcp".
        #[serde(default)]
        protocol: Protocol,
        /// The events' tag. Required.
        tag: String,
        /// Largest message kept, once joined from its chunks and
        /// decompressed (default "1MiB"); a larger one is dropped and
        /// logged. It also bounds what one compressed datagram may inflate to.
        #[serde_inline_default(Size::mib(1))]
        max_message_size: Size,
        /// How long the chunks of one UDP message may take to come (default
        /// "5s", Graylog's); then what came is dropped and logged.
        #[serde_inline_default(Dur::secs(5))]
        chunk_timeout: Dur,
        /// Chunked UDP messages being joined at once, at most (default
        /// 1000); the chunks of a further message are dropped and logged.
        #[serde_inline_default(1000)]
        max_pending_messages: usize,
        /// The key `short_message` is put under (default "message", as
        /// Logstash does; "short_message" keeps GELF's name).
        #[serde_inline_default("message".into())]
        short_message_key: String,
        /// Additional fields (`_name`) lose their underscore (default true,
        /// as Logstash does); false keeps GELF's names.
        #[serde_inline_default(true)]
        strip_leading_underscore: bool,
        /// Add the sender's IP address to each record under this key.
        #[serde(default)]
        source_address_key: Option<String>,
    }
);

impl GelfInputConfig {
    fn endpoint(&self) -> Result<Endpoint, OptionError> {
        let addr =
            nagare_core::address::resolve(&self.bind).map_err(|e| OptionError::new("bind", e))?;
        Ok(match self.protocol {
            Protocol::Udp => Endpoint::Udp(addr),
            Protocol::Tcp => Endpoint::Tcp(addr),
        })
    }

    fn settings(&self, tls: Option<Arc<TlsServer>>) -> Settings {
        let udp = self.protocol == Protocol::Udp;
        Settings {
            // Over TCP each message ends with a NUL byte.
            framing: Framing::Lines { delimiter: vec![0] },
            // A datagram is at most 64 KiB; the whole message is bounded
            // by the decoder once joined and decompressed.
            max_message: if udp {
                65536
            } else {
                self.max_message_size.0 as usize
            },
            max_connections: self.max_connections,
            idle_timeout: self.idle_timeout.0,
            datagram_is_message: true,
            tls,
        }
    }

    /// What this input makes of `feed` (datagrams over UDP, a connection's
    /// bytes over TCP), without sockets: for the fuzz target `gelf` and
    /// the test that replays its seeds (fuzz/, docs/fuzzing.md).
    #[doc(hidden)]
    pub fn replay(&self, feed: sockets::Feed<'_>) -> sockets::Replayed {
        let d = self.decoder("replay", Arc::new(PluginStats::default()));
        sockets::replay(&self.settings(None), &d, feed)
    }

    fn decoder(&self, name: &str, stats: Arc<PluginStats>) -> GelfDecoder {
        GelfDecoder {
            name: name.to_string(),
            tag: self.tag.clone(),
            max: self.max_message_size.0 as usize,
            chunks: self.protocol == Protocol::Udp,
            timeout: self.chunk_timeout.0,
            max_pending: self.max_pending_messages,
            short_message_key: self.short_message_key.clone(),
            strip: self.strip_leading_underscore,
            source_address_key: self.source_address_key.clone(),
            stats,
            pending: Mutex::new(Pending::default()),
        }
    }
}

/// The chunks of one message that came so far.
struct Partial {
    first: Instant,
    count: u8,
    /// Emptied when the message was dropped: its later chunks are ignored.
    parts: Vec<Option<Vec<u8>>>,
    dropped: bool,
    got: usize,
    bytes: usize,
}

#[derive(Default)]
struct Pending {
    /// By (sender's address, message id).
    messages: HashMap<(String, [u8; 8]), Partial>,
    last_sweep: Option<Instant>,
}

/// GELF's chunk magic.
const CHUNK_MAGIC: [u8; 2] = [0x1e, 0x0f];
/// magic, id, number, count.
const CHUNK_HEADER: usize = 12;
/// Most chunks of one message (GELF 1.1).
const MAX_CHUNKS: u8 = 128;

struct GelfDecoder {
    name: String,
    tag: String,
    max: usize,
    /// UDP: datagrams may be chunks.
    chunks: bool,
    timeout: Duration,
    max_pending: usize,
    short_message_key: String,
    strip: bool,
    source_address_key: Option<String>,
    stats: Arc<PluginStats>,
    pending: Mutex<Pending>,
}

impl GelfDecoder {
    fn bad(&self, peer: &Peer, reason: &str) -> bool {
        tracing::warn!(input = %self.name, peer = %peer.label, reason = %reason, "GELF message dropped");
        false
    }

    /// One chunk: the whole message once its last chunk came.
    fn chunk(&self, msg: &[u8], peer: &Peer) -> Result<Option<Vec<u8>>, String> {
        if msg.len() < CHUNK_HEADER {
            return Err(format!("a chunk of {} bytes has no full header", msg.len()));
        }
        let id: [u8; 8] = msg[2..10].try_into().expect("8 bytes");
        let (seq, count) = (msg[10], msg[11]);
        if count == 0 || count > MAX_CHUNKS || seq >= count {
            return Err(format!(
                "chunk {seq} of {count}: GELF allows 1 to {MAX_CHUNKS} chunks, numbered from 0"
            ));
        }
        let part = &msg[CHUNK_HEADER..];
        let now = Instant::now();
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        // Messages whose chunks stopped coming go, at most once a second.
        if p.last_sweep
            .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1))
        {
            p.last_sweep = Some(now);
            let timeout = self.timeout;
            let mut expired = 0;
            p.messages.retain(|(from, id), m| {
                let keep = now.duration_since(m.first) < timeout;
                if !keep && !m.dropped {
                    expired += 1;
                    tracing::warn!(input = %self.name, peer = %from, id = %hex(id),
                        reason = %format!("{} of {} chunks came within {}", m.got, m.count,
                            humantime::format_duration(timeout)),
                        "GELF message dropped");
                }
                keep
            });
            PluginStats::add(&self.stats.errors, expired);
        }
        let key = (peer.label.clone(), id);
        if !p.messages.contains_key(&key) {
            if count == 1 {
                return Ok(Some(part.to_vec()));
            }
            if p.messages.len() >= self.max_pending {
                return Err(format!(
                    "{} chunked messages are being joined already (max_pending_messages)",
                    p.messages.len()
                ));
            }
            p.messages.insert(
                key.clone(),
                Partial {
                    first: now,
                    count,
                    parts: vec![None; count as usize],
                    dropped: false,
                    got: 0,
                    bytes: 0,
                },
            );
        }
        let m = p.messages.get_mut(&key).expect("inserted");
        // `seq < count` was checked against this chunk's count; `parts` has
        // the first chunk's: a chunk that says another count (and a number
        // past the first's) must be refused before `parts` is indexed.
        if m.dropped || (m.count == count && m.parts[seq as usize].is_some()) {
            // A repeated chunk adds nothing; those of a dropped message are ignored.
            return Ok(None);
        }
        let reason = if m.count != count {
            Some(format!(
                "a chunk says {count} chunks, an earlier one {}",
                m.count
            ))
        } else if m.bytes + part.len() > self.max {
            Some(format!(
                "its chunks pass max_message_size ({} bytes)",
                self.max
            ))
        } else {
            None
        };
        if let Some(reason) = reason {
            // Kept, empty, until chunk_timeout so its later chunks are not
            // taken for a new message.
            m.dropped = true;
            m.parts = Vec::new();
            return Err(format!("message {}: {reason}", hex(&id)));
        }
        m.bytes += part.len();
        m.parts[seq as usize] = Some(part.to_vec());
        m.got += 1;
        if m.got < m.count as usize {
            return Ok(None);
        }
        let m = p.messages.remove(&key).expect("there");
        drop(p);
        let mut whole = Vec::with_capacity(m.bytes);
        for part in m.parts.into_iter().flatten() {
            whole.extend_from_slice(&part);
        }
        Ok(Some(whole))
    }

    /// A message's JSON: decompressed when it is gzip or zlib.
    fn inflate<'a>(&self, msg: &'a [u8]) -> Result<std::borrow::Cow<'a, [u8]>, String> {
        let limit = self.max as u64 + 1;
        let mut out = Vec::new();
        let r = match msg {
            [0x1f, 0x8b, ..] => flate2::read::GzDecoder::new(msg)
                .take(limit)
                .read_to_end(&mut out)
                .map_err(|e| format!("bad gzip: {e}")),
            // zlib: CMF 0x78 (deflate, 32K window) and a valid check.
            [0x78, f, ..] if (0x7800u16 | *f as u16).is_multiple_of(31) => {
                flate2::read::ZlibDecoder::new(msg)
                    .take(limit)
                    .read_to_end(&mut out)
                    .map_err(|e| format!("bad zlib: {e}"))
            }
            _ => {
                if msg.len() > self.max {
                    return Err(format!(
                        "{} bytes: larger than max_message_size ({} bytes)",
                        msg.len(),
                        self.max
                    ));
                }
                return Ok(msg.into());
            }
        };
        r?;
        if out.len() > self.max {
            return Err(format!(
                "larger than max_message_size ({} bytes) once decompressed",
                self.max
            ));
        }
        Ok(out.into())
    }

    /// The event of one whole message.
    fn event(
        &self,
        msg: &[u8],
        peer: &Peer,
        now: EventTime,
        out: &mut Batches,
    ) -> Result<(), String> {
        let json = self.inflate(msg)?;
        let mut json = &json[..];
        // Some senders end a datagram with a NUL or a newline.
        while let [rest @ .., 0 | b'\n' | b'\r' | b' '] = json {
            json = rest;
        }
        // The fields are written as msgpack straight from the JSON
        // (formats::json_msgpack: no tree of values), then rearranged.
        let mut fields = Vec::with_capacity(json.len() + 16);
        let top = Top {
            pick: Some(b"timestamp"),
            keep_picked: true,
            extra: &[],
        };
        let picked = match object_to_msgpack(json, &top, &mut fields) {
            Ok(p) => p,
            Err(JsonError::NotAnObject) => {
                let what = serde_json::from_slice(json).map_or("value", |v| kind(&v));
                return Err(format!("a JSON {what} is not a GELF message (an object)"));
            }
            Err(JsonError::Syntax(e)) => {
                let head = String::from_utf8_lossy(&json[..json.len().min(40)]).into_owned();
                return Err(format!("not GELF JSON ({e}); it starts {head:?}"));
            }
        };
        let time = picked.and_then(|p| match p {
            Picked::Text(t) => seconds(&serde_json::from_slice(t).unwrap_or_default()),
            Picked::Value(v) => seconds(&v),
        });
        // The record as a map keeps it: a key set twice keeps its first
        // place and its last value.
        let mut record: Vec<(&[u8], Field)> = Vec::with_capacity(16);
        fn insert<'a>(record: &mut Vec<(&'a [u8], Field)>, k: &'a [u8], v: Field) {
            match record.iter_mut().find(|(rk, _)| *rk == k) {
                Some(slot) => slot.1 = v,
                None => record.push((k, v)),
            }
        }
        let mut extra = Vec::new();
        for (k, v) in json_msgpack::pairs(&fields) {
            match k {
                b"version" => {}
                b"timestamp" if time.is_some() => {}
                b"short_message" => {
                    insert(&mut record, self.short_message_key.as_bytes(), Field::At(v))
                }
                _ if self.strip && k.len() > 1 && k[0] == b'_' => extra.push((k, v)),
                _ => insert(&mut record, k, Field::At(v)),
            }
        }
        for (k, v) in extra {
            // Kept with its underscore when the name without it is taken.
            let key = if record.iter().any(|(rk, _)| *rk == &k[1..]) {
                k
            } else {
                &k[1..]
            };
            insert(&mut record, key, Field::At(v));
        }
        if let Some(k) = &self.source_address_key {
            insert(&mut record, k.as_bytes(), Field::Peer);
        }
        let time = time.unwrap_or(now);
        out.push(&self.tag, |buf| {
            buf.push(0x92);
            buf.extend_from_slice(&time.to_bytes());
            write_map_len(buf, record.len());
            for (k, v) in &record {
                write_str(buf, k);
                match v {
                    Field::At(r) => buf.extend_from_slice(&fields[r.clone()]),
                    Field::Peer => write_str(buf, peer.address.as_bytes()),
                }
            }
        });
        Ok(())
    }
}

/// A value of the record: in the message's fields, or the sender's address.
enum Field {
    At(std::ops::Range<usize>),
    Peer,
}

fn kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

fn hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// GELF's `timestamp`: seconds since the epoch with an optional fraction
/// (a number, or a string holding one, as some senders write it).
fn seconds(v: &serde_json::Value) -> Option<EventTime> {
    let s = match v {
        serde_json::Value::Number(n) => n.to_string(),
        serde_json::Value::String(s) => s.trim().to_string(),
        _ => return None,
    };
    // From the text, so a fraction such as .123 is exact.
    let (whole, frac) = match s.split_once('.') {
        Some((_, "")) => return None,
        Some((w, f)) => (w, f),
        None => (&s[..], ""),
    };
    let digits = |t: &str| t.bytes().all(|c| c.is_ascii_digit());
    if whole.is_empty() || !digits(whole) || !digits(frac) {
        return None;
    }
    let secs: u32 = whole.parse().ok()?;
    let frac = &frac[..frac.len().min(9)];
    let nanos = if frac.is_empty() {
        0
    } else {
        frac.parse::<u32>().ok()? * 10u32.pow(9 - frac.len() as u32)
    };
    Some(EventTime::new(secs, nanos))
}

impl Decoder for GelfDecoder {
    fn decode(&self, msg: &[u8], peer: &Peer, now: EventTime, out: &mut Batches) -> bool {
        let whole;
        let msg = if self.chunks && msg.starts_with(&CHUNK_MAGIC) {
            match self.chunk(msg, peer) {
                Ok(Some(m)) => {
                    whole = m;
                    &whole[..]
                }
                Ok(None) => return true,
                Err(e) => return self.bad(peer, &e),
            }
        } else {
            msg
        };
        match self.event(msg, peer, now, out) {
            Ok(()) => true,
            Err(e) => self.bad(peer, &e),
        }
    }
}

impl InputPlugin for GelfInputConfig {
    const TYPE: &'static str = "gelf";
    const DOC: &'static str = "Receives GELF messages (Graylog's format, Docker's `gelf` log driver) over UDP (chunked, gzip or zlib) or TCP (NUL-ended) (see [GELF](gelf.md)).";

    fn build(self, cx: &mut BuildContext) -> Result<Box<dyn Input>, OptionError> {
        let endpoint = self.endpoint()?;
        cx.listen("bind", endpoint.listen());
        if self.tag.trim().is_empty() {
            return Err(OptionError::new("tag", "must not be empty"));
        }
        if self.max_pending_messages == 0 {
            return Err(OptionError::new(
                "max_pending_messages",
                "must be at least 1",
            ));
        }
        if self.short_message_key.is_empty() {
            return Err(OptionError::new("short_message_key", "must not be empty"));
        }
        self.check_connections()?;
        let on = self.tls.as_ref().is_some_and(|t| t.enable);
        if on && self.protocol != Protocol::Tcp {
            return Err(OptionError::new(
                "tls",
                "TLS is for TCP: set protocol = \"tcp\" (no TLS over UDP)",
            ));
        }
        let tls = TlsServer::build(self.tls.as_ref(), cx)?;
        Ok(Box::new(GelfInput { cfg: self, tls }))
    }
}

/// A built gelf input: its options and its TLS files, loaded.
struct GelfInput {
    cfg: GelfInputConfig,
    tls: Option<Arc<TlsServer>>,
}

#[async_trait::async_trait]
impl Input for GelfInput {
    async fn start(self: Box<Self>, cx: InputContext) -> anyhow::Result<Vec<JoinHandle<()>>> {
        let cfg = &self.cfg;
        let endpoint = cfg
            .endpoint()
            .map_err(|e| anyhow::anyhow!("{}: {e}", cx.name))?;
        let settings = cfg.settings(self.tls.clone());
        let decoder = cfg.decoder(&cx.name, cx.stats.clone());
        sockets::start(endpoint, settings, Box::new(decoder), cx).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn decoder(extra: &str) -> GelfDecoder {
        let cfg: GelfInputConfig =
            toml::from_str(&format!("bind = \"127.0.0.1:12201\"\ntag = \"g\"\n{extra}")).unwrap();
        cfg.decoder("in", Arc::new(PluginStats::default()))
    }

    fn peer() -> Peer {
        Peer {
            label: "192.0.2.1:4000".into(),
            address: "192.0.2.1".into(),
        }
    }

    /// (time, record) of each event decoded from `msgs`, in order.
    fn events(d: &GelfDecoder, msgs: &[Vec<u8>]) -> Vec<(EventTime, serde_json::Value)> {
        let mut out = Batches::default();
        let now = EventTime::new(1_700_000_000, 0);
        for m in msgs {
            d.decode(m, &peer(), now, &mut out);
        }
        let mut all = Vec::new();
        for (tag, bytes, n) in out.take() {
            assert_eq!(tag, "g");
            let mut rd = &bytes[..];
            for _ in 0..n {
                let v = rmpv::decode::read_value(&mut rd).unwrap();
                let t = match &v[0] {
                    rmpv::Value::Ext(0, b) => EventTime::from_payload(b),
                    other => panic!("time {other}"),
                };
                let mut j = Vec::new();
                let mut enc = Vec::new();
                rmpv::encode::write_value(&mut enc, &v[1]).unwrap();
                nagare_core::json::write_value(&mut j, &enc);
                all.push((t, serde_json::from_slice(&j).unwrap()));
            }
            assert!(rd.is_empty());
        }
        all
    }

    const MSG: &str = r#"{"version":"1.1","host":"web-1","short_message":"GET /","full_message":"GET / HTTP/1.1\n200","timestamp":1385053862.3072,"level":6,"_user_id":9001,"_path":"/x","_host":"inner","facility":"nginx"}"#;

    #[test]
    fn fields_become_the_record() {
        let d = decoder("source_address_key = \"from\"");
        let ev = events(&d, &[MSG.as_bytes().to_vec()]);
        assert_eq!(ev.len(), 1);
        let (t, r) = &ev[0];
        assert_eq!(*t, EventTime::new(1_385_053_862, 307_200_000));
        assert_eq!(
            r,
            &serde_json::json!({"host":"web-1","message":"GET /","full_message":"GET / HTTP/1.1\n200",
                "level":6,"facility":"nginx","user_id":9001,"path":"/x","_host":"inner","from":"192.0.2.1"})
        );
        // GELF's names kept.
        let d = decoder("short_message_key = \"short_message\"\nstrip_leading_underscore = false");
        let (_, r) = &events(&d, &[MSG.as_bytes().to_vec()])[0];
        assert_eq!(r["short_message"], "GET /");
        assert_eq!(r["_user_id"], 9001);
        assert!(r.get("user_id").is_none());
    }

    fn gzip(b: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    }

    fn zlib(b: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    }

    fn chunks(id: u64, payload: &[u8], size: usize) -> Vec<Vec<u8>> {
        let parts: Vec<&[u8]> = payload.chunks(size).collect();
        parts
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let mut c = vec![0x1e, 0x0f];
                c.extend_from_slice(&id.to_be_bytes());
                c.push(i as u8);
                c.push(parts.len() as u8);
                c.extend_from_slice(p);
                c
            })
            .collect()
    }

    #[test]
    fn compressed_and_chunked() {
        let d = decoder("");
        let big = format!(
            r#"{{"version":"1.1","host":"h","short_message":"{}","timestamp":1}}"#,
            "x".repeat(20_000)
        );
        let mut msgs = vec![gzip(MSG.as_bytes()), zlib(MSG.as_bytes())];
        // Chunks out of order, interleaved with another message, one repeated.
        let mut a = chunks(1, big.as_bytes(), 1000);
        let b = chunks(2, &gzip(MSG.as_bytes()), 40);
        a.reverse();
        a.insert(5, a[3].clone());
        for (i, c) in a.into_iter().enumerate() {
            msgs.push(c);
            if let Some(c) = b.get(i) {
                msgs.push(c.clone());
            }
        }
        let ev = events(&d, &msgs);
        assert_eq!(ev.len(), 4, "{ev:?}");
        assert_eq!(ev[0].1["message"], "GET /");
        assert_eq!(ev[1].1["message"], "GET /");
        assert_eq!(ev[2].1["message"], "GET /");
        assert_eq!(ev[3].1["message"].as_str().unwrap().len(), 20_000);
        assert_eq!(ev[3].0, EventTime::new(1, 0));
        assert_eq!(ev[2].0, EventTime::new(1_385_053_862, 307_200_000));
        assert!(d.pending.lock().unwrap().messages.is_empty());
    }

    #[test]
    fn bounds() {
        // Larger than max_message_size once inflated: dropped.
        let d = decoder("max_message_size = \"1KiB\"");
        let big = format!(r#"{{"short_message":"{}"}}"#, "y".repeat(5000));
        let bomb = gzip(big.as_bytes());
        assert!(bomb.len() < 1024);
        assert!(events(&d, &[bomb]).is_empty());
        // Chunks past the size: the message goes, its later chunks ignored.
        assert!(events(&d, &chunks(7, big.as_bytes(), 600)).is_empty());
        let p = d.pending.lock().unwrap();
        assert_eq!(p.messages.len(), 1);
        assert!(p.messages.values().all(|m| m.dropped && m.parts.is_empty()));
        drop(p);
        // Pending messages at most max_pending_messages.
        let d = decoder("max_pending_messages = 2");
        let firsts: Vec<Vec<u8>> = (0..3)
            .map(|i| chunks(i, MSG.as_bytes(), 50)[0].clone())
            .collect();
        assert!(events(&d, &firsts).is_empty());
        assert_eq!(d.pending.lock().unwrap().messages.len(), 2);
        // Timed out ones go at the next chunk.
        let d = decoder("chunk_timeout = \"0s\"");
        let c = chunks(1, MSG.as_bytes(), 50);
        assert!(events(&d, &c[..2]).is_empty());
        d.pending.lock().unwrap().last_sweep = None;
        assert!(events(&d, &chunks(2, MSG.as_bytes(), 50)[..1]).is_empty());
        assert_eq!(d.pending.lock().unwrap().messages.len(), 1);
        assert_eq!(d.stats.errors.load(std::sync::atomic::Ordering::Relaxed), 1);
    }

    #[test]
    fn timestamps() {
        assert_eq!(seconds(&serde_json::json!(12)), Some(EventTime::new(12, 0)));
        assert_eq!(
            seconds(&serde_json::json!("12.5")),
            Some(EventTime::new(12, 500_000_000))
        );
        assert_eq!(seconds(&serde_json::json!(-1)), None);
        assert_eq!(seconds(&serde_json::json!("x")), None);
        assert_eq!(seconds(&serde_json::json!("1.")), None);
        assert_eq!(seconds(&serde_json::json!("1.2e3")), None);
        // Not a time: kept as a field.
        let d = decoder("");
        let (t, r) = &events(
            &d,
            &[br#"{"short_message":"m","timestamp":"soon"}"#.to_vec()],
        )[0];
        assert_eq!(*t, EventTime::new(1_700_000_000, 0));
        assert_eq!(r["timestamp"], "soon");
    }

    /// Found by the `gelf` fuzz target: a chunk saying more chunks than an
    /// earlier one of its message, numbered past the earlier count, indexed
    /// the earlier one's parts out of bounds (a panic from one datagram).
    /// Now the message is dropped, and the next message comes through.
    #[test]
    fn a_chunk_with_another_count_past_the_first_is_refused() {
        let d = decoder("");
        let mut first = chunks(9, MSG.as_bytes(), MSG.len() / 5 + 1);
        assert_eq!(first.len(), 5);
        let mut odd = first[0].clone();
        odd[10] = 15; // chunk 15 …
        odd[11] = 16; // … of 16
        let mut out = Batches::default();
        let now = EventTime::new(1, 0);
        assert!(d.decode(&first.remove(0), &peer(), now, &mut out));
        assert!(!d.decode(&odd, &peer(), now, &mut out));
        for c in &first {
            d.decode(c, &peer(), now, &mut out);
        }
        assert!(out.take().is_empty(), "the message was dropped");
        assert_eq!(events(&d, &[MSG.as_bytes().to_vec()]).len(), 1);
    }

    /// Any bytes, chunked or not, compressed or not: no panic, and a good
    /// message after them still comes through.
    #[test]
    fn never_panics_on_bad_input() {
        let d = decoder("max_message_size = \"64KiB\"");
        let mut goods = vec![
            MSG.as_bytes().to_vec(),
            gzip(MSG.as_bytes()),
            zlib(MSG.as_bytes()),
        ];
        goods.extend(chunks(5, &gzip(MSG.as_bytes()), 30));
        for good in &goods {
            crate::inputs::common::mutations(good, |m| {
                let mut out = Batches::default();
                d.decode(m, &peer(), EventTime::new(1, 0), &mut out);
            });
        }
        d.pending.lock().unwrap().messages.clear();
        let ev = events(&d, &[MSG.as_bytes().to_vec()]);
        assert_eq!(ev.len(), 1);
        for bad in [
            &b"[1,2]"[..],
            b"\"s\"",
            b"{",
            b"\x1e\x0f",
            b"\x1f\x8b\x08\x00",
            b"\x78\x9c\x00",
        ] {
            assert!(events(&d, &[bad.to_vec()]).is_empty());
        }
    }
}
