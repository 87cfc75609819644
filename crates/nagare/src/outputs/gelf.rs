//! `gelf`: sends each event as a GELF 1.1 message, as Graylog reads it,
//! over UDP (compressed with gzip or zlib, or not; cut into GELF chunks when
//! larger than `packet_size`) or TCP (plain JSON, each message ended by a
//! NUL byte, over TLS with `[output.tls]`).
//!
//! The message is built from the record as Fluent Bit's out_gelf builds it:
//! `short_message` from `gelf_short_message_key` (the whole record as JSON
//! when the record has no such field, since Graylog needs one),
//! `full_message`, `host` (this machine's name when missing) and `level`
//! from their keys, `timestamp` from the event time (or from
//! `gelf_timestamp_key`), and every other field as an additional field
//! `_<name>`: maps flattened with "_" (`kubernetes.pod_name` becomes
//! `_kubernetes_pod_name`), arrays written as JSON text, booleans as "true"
//! and "false", nulls left out, characters GELF does not allow in a name
//! replaced by "_", and `id` written `__id` (GELF reserves `_id`).

use std::io::Write;
use std::sync::Arc;

use async_trait::async_trait;
use nagare_core::output::OutputPlugin;
use nagare_core::output::{FlushError, Output, PartialWrite};
use nagare_core::plugin::{serde_inline_default, BuildContext, OptionError};
use nagare_core::units::Dur;
use nagare_forward::EventTime;
use rmpv::Value;
use serde::Deserialize;
use tokio::net::UdpSocket;
use tokio::sync::OnceCell;

use crate::buffer::Chunk;
use crate::formats::DEFAULT_MESSAGE_KEY;
use crate::net::connection::Connection;
use crate::net::connection::{check_address, DEFAULT_TIMEOUT};
use crate::net::tls::{TlsClient, TlsOptions};

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// Datagrams, chunked past `packet_size` (default).
    #[default]
    Udp,
    /// One connection, messages ended by a NUL byte.
    Tcp,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    /// gzip, as Docker's gelf driver sends by default (default).
    #[default]
    Gzip,
    /// zlib, as Fluent Bit's and graypy's UDP senders do.
    Zlib,
    /// Plain JSON.
    None,
}

/// Most chunks of one message (GELF 1.1).
const MAX_CHUNKS: usize = 128;
/// magic, id, number, count.
const CHUNK_HEADER: usize = 12;

#[serde_inline_default]
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GelfOutputConfig {
    /// "HOST:PORT" of the GELF input (Graylog's port is 12201). Required.
    pub address: String,
    /// "udp" (default) or "tcp".
    #[serde(default)]
    pub protocol: Protocol,
    /// Over UDP: "gzip" (default), "zlib" or "none". Messages over TCP are
    /// never compressed (Graylog's TCP input reads plain JSON).
    #[serde(default)]
    pub compression: Compression,
    /// Over UDP: the largest datagram (default 1420, as Docker and Fluent
    /// Bit send); a larger message is cut into GELF chunks of this size.
    /// A message that needs more than 128 chunks cannot be sent over UDP
    /// and is rejected (to the secondary output or dead letters).
    #[serde_inline_default(1420)]
    pub packet_size: usize,
    /// The field sent as `short_message` (default "message").
    #[serde_inline_default(DEFAULT_MESSAGE_KEY.into())]
    pub gelf_short_message_key: String,
    /// The field sent as `full_message` (default "full_message").
    #[serde_inline_default("full_message".into())]
    pub gelf_full_message_key: String,
    /// The field sent as `host` (default "host"); this machine's name when
    /// the record has none.
    #[serde_inline_default("host".into())]
    pub gelf_host_key: String,
    /// The field sent as `level` (default "level"): a number 0-7 or a
    /// syslog severity name such as "err" or "warning"; another value is
    /// sent as the additional field `_level`.
    #[serde_inline_default("level".into())]
    pub gelf_level_key: String,
    /// A field holding the time as seconds since the epoch (a number),
    /// sent as `timestamp` instead of the event time.
    #[serde(default)]
    pub gelf_timestamp_key: Option<String>,
    /// Over TCP: connecting, and writing a chunk, may take this long
    /// before the chunk is retried (default "10s").
    #[serde_inline_default(DEFAULT_TIMEOUT)]
    pub timeout: Dur,
    /// Over TCP: TLS to the server (`[output.tls]`), as Graylog's GELF TCP
    /// input with TLS takes it; see docs/tls.md.
    #[serde(default)]
    pub tls: Option<TlsOptions>,
}

struct GelfOutput {
    cfg: GelfOutputConfig,
    hostname: String,
    tcp: Connection,
    udp: OnceCell<UdpSocket>,
}

/// GELF's number for a syslog severity name.
fn level_number(s: &str) -> Option<u8> {
    let s = s.trim().to_ascii_lowercase();
    if let Ok(n) = s.parse::<u8>() {
        return (n <= 7).then_some(n);
    }
    Some(match s.as_str() {
        "emerg" | "emergency" | "panic" => 0,
        "alert" => 1,
        "crit" | "critical" | "fatal" => 2,
        "err" | "error" => 3,
        "warn" | "warning" => 4,
        "notice" => 5,
        "info" | "informational" => 6,
        "debug" | "trace" => 7,
        _ => return None,
    })
}

/// A value as text: strings as they are, anything else as JSON.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        Value::Binary(b) => String::from_utf8_lossy(b).into_owned(),
        other => json_text(other),
    }
}

fn json_text(v: &Value) -> String {
    let mut enc = Vec::new();
    let _ = rmpv::encode::write_value(&mut enc, v);
    let mut out = Vec::new();
    nagare_core::json::write_value(&mut out, &enc);
    String::from_utf8_lossy(&out).into_owned()
}

/// A GELF additional field's name: `_` and the name, with what GELF does
/// not allow (anything but letters, digits, `_`, `.` and `-`) made `_`.
fn field_name(prefix: &str, key: &str) -> String {
    let mut name = String::with_capacity(prefix.len() + key.len() + 1);
    name.push_str(prefix);
    for c in key.chars() {
        name.push(if c.is_alphanumeric() || matches!(c, '_' | '.' | '-') {
            c
        } else {
            '_'
        });
    }
    name
}

/// Writes `,"<name>":<value>` for an additional field, maps flattened.
fn additional(out: &mut Vec<u8>, name: &str, v: &Value) {
    let put = |out: &mut Vec<u8>, value: serde_json::Value| {
        out.push(b',');
        let _ = serde_json::to_writer(&mut *out, name);
        out.push(b':');
        let _ = serde_json::to_writer(&mut *out, &value);
    };
    match v {
        Value::Nil => {}
        Value::Map(m) => {
            for (k, v) in m {
                additional(out, &field_name(&format!("{name}_"), &text(k)), v);
            }
        }
        Value::Integer(i) => match (i.as_i64(), i.as_u64()) {
            (Some(n), _) => put(out, n.into()),
            (_, Some(n)) => put(out, n.into()),
            _ => put(out, i.to_string().into()),
        },
        Value::F32(f) => put(
            out,
            serde_json::Number::from_f64(*f as f64)
                .map_or_else(|| f.to_string().into(), Into::into),
        ),
        Value::F64(f) => put(
            out,
            serde_json::Number::from_f64(*f).map_or_else(|| f.to_string().into(), Into::into),
        ),
        other => put(out, text(other).into()),
    }
}

impl GelfOutput {
    /// One event's GELF JSON.
    fn message(&self, out: &mut Vec<u8>, time: EventTime, record: &[u8]) {
        let cfg = &self.cfg;
        let fields = match rmpv::decode::read_value(&mut &record[..]) {
            Ok(Value::Map(m)) => m,
            // Records are maps; anything else is sent whole as the message.
            Ok(other) => vec![(Value::from(DEFAULT_MESSAGE_KEY), other)],
            Err(_) => Vec::new(),
        };
        let get = |k: &str| {
            fields
                .iter()
                .find(|(kk, _)| kk.as_str() == Some(k))
                .map(|(_, v)| v)
        };
        let short = get(&cfg.gelf_short_message_key)
            .filter(|v| !matches!(v, Value::Nil))
            .map(text)
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| json_text(&Value::Map(fields.clone())));
        let host = get(&cfg.gelf_host_key)
            .filter(|v| !matches!(v, Value::Nil))
            .map(text)
            .unwrap_or_else(|| self.hostname.clone());
        out.extend_from_slice(b"{\"version\":\"1.1\",\"host\":");
        let _ = serde_json::to_writer(&mut *out, &host);
        out.extend_from_slice(b",\"short_message\":");
        let _ = serde_json::to_writer(&mut *out, &short);
        if let Some(full) = get(&cfg.gelf_full_message_key).filter(|v| !matches!(v, Value::Nil)) {
            out.extend_from_slice(b",\"full_message\":");
            let _ = serde_json::to_writer(&mut *out, &text(full));
        }
        let mut level_field = None;
        if let Some(level) = get(&cfg.gelf_level_key) {
            match level_number(&text(level)) {
                Some(n) => {
                    let _ = write!(out, ",\"level\":{n}");
                }
                None => level_field = Some(level),
            }
        }
        let ts = cfg
            .gelf_timestamp_key
            .as_deref()
            .and_then(get)
            .and_then(|v| match v {
                Value::Integer(i) => i.as_f64(),
                Value::F32(f) => Some(*f as f64),
                Value::F64(f) => Some(*f),
                _ => None,
            })
            .filter(|f| f.is_finite() && *f >= 0.0);
        match ts {
            Some(f) => {
                let _ = write!(out, ",\"timestamp\":{f}");
            }
            None => {
                let _ = write!(
                    out,
                    ",\"timestamp\":{}.{:06}",
                    time.secs,
                    time.nanos.min(999_999_999) / 1000
                );
            }
        }
        if let Some(level) = level_field {
            additional(out, "_level", level);
        }
        let taken = [
            Some(cfg.gelf_short_message_key.as_str()),
            Some(cfg.gelf_full_message_key.as_str()),
            Some(cfg.gelf_host_key.as_str()),
            Some(cfg.gelf_level_key.as_str()),
            cfg.gelf_timestamp_key.as_deref(),
        ];
        for (k, v) in &fields {
            let k = text(k);
            if taken.contains(&Some(k.as_str())) {
                continue;
            }
            // GELF reserves `_id` (Graylog's own).
            let name = if k == "id" {
                "__id".to_string()
            } else {
                field_name("_", &k)
            };
            additional(out, &name, v);
        }
        out.push(b'}');
    }

    fn compress(&self, json: Vec<u8>) -> Vec<u8> {
        let level = flate2::Compression::default();
        match self.cfg.compression {
            Compression::None => json,
            Compression::Gzip => {
                let mut e =
                    flate2::write::GzEncoder::new(Vec::with_capacity(json.len() / 2), level);
                let _ = e.write_all(&json);
                e.finish().unwrap_or_default()
            }
            Compression::Zlib => {
                let mut e =
                    flate2::write::ZlibEncoder::new(Vec::with_capacity(json.len() / 2), level);
                let _ = e.write_all(&json);
                e.finish().unwrap_or_default()
            }
        }
    }

    async fn udp(&self) -> Result<&UdpSocket, FlushError> {
        self.udp
            .get_or_try_init(|| async {
                let local = if self.cfg.address.starts_with('[') {
                    "[::]:0"
                } else {
                    "0.0.0.0:0"
                };
                let s = UdpSocket::bind(local).await?;
                s.connect(&self.cfg.address).await?;
                Ok(s)
            })
            .await
            .map_err(|e: std::io::Error| {
                FlushError::Retry(format!("UDP to {}: {e}", self.cfg.address))
            })
    }
}

/// The datagrams of one message: itself, or its GELF chunks (None when it
/// needs more than 128).
fn datagrams(payload: &[u8], packet_size: usize, id: u64) -> Option<Vec<Vec<u8>>> {
    if payload.len() <= packet_size {
        return Some(vec![payload.to_vec()]);
    }
    let per = packet_size - CHUNK_HEADER;
    let count = payload.len().div_ceil(per);
    if count > MAX_CHUNKS {
        return None;
    }
    Some(
        payload
            .chunks(per)
            .enumerate()
            .map(|(i, part)| {
                let mut d = Vec::with_capacity(CHUNK_HEADER + part.len());
                d.extend_from_slice(&[0x1e, 0x0f]);
                d.extend_from_slice(&id.to_be_bytes());
                d.push(i as u8);
                d.push(count as u8);
                d.extend_from_slice(part);
                d
            })
            .collect(),
    )
}

#[async_trait]
impl Output for GelfOutput {
    async fn write(&self, chunk: &Chunk) -> Result<(), FlushError> {
        match self.cfg.protocol {
            Protocol::Udp => {
                let sock = self.udp().await?;
                let mut rejected = Vec::new();
                for (i, (time, record, _)) in chunk.entries().enumerate() {
                    let mut json = Vec::with_capacity(512);
                    self.message(&mut json, time, record);
                    let payload = self.compress(json);
                    let Some(datagrams) = datagrams(&payload, self.cfg.packet_size, rand::random())
                    else {
                        rejected.push((
                            i as u32,
                            format!(
                                "too large for GELF over UDP: {} bytes{} need more than 128 chunks of {}",
                                payload.len(),
                                if self.cfg.compression == Compression::None { "" } else { " compressed" },
                                self.cfg.packet_size
                            ),
                        ));
                        continue;
                    };
                    for d in datagrams {
                        if let Err(e) = sock.send(&d).await {
                            // What was not sent is retried; what was sent stays sent.
                            return Err(FlushError::Partial(PartialWrite {
                                retry: (i as u32..chunk.count).collect(),
                                rejected,
                                message: format!("sending to {}: {e}", self.cfg.address),
                            }));
                        }
                    }
                }
                if rejected.is_empty() {
                    Ok(())
                } else {
                    Err(FlushError::Partial(PartialWrite {
                        message: format!("{} events too large for UDP", rejected.len()),
                        retry: Vec::new(),
                        rejected,
                    }))
                }
            }
            Protocol::Tcp => {
                let mut out = Vec::with_capacity(chunk.len * 2);
                for (time, record, _) in chunk.entries() {
                    self.message(&mut out, time, record);
                    out.push(0);
                }
                self.tcp.send(&out).await
            }
        }
    }
}

impl OutputPlugin for GelfOutputConfig {
    const TYPE: &'static str = "gelf";
    const DOC: &'static str = "Sends events as GELF messages, as Graylog reads them, over UDP (gzip or zlib, chunked) or TCP (see [GELF](gelf.md)).";

    fn build(self, cx: &mut BuildContext) -> Result<Arc<dyn Output>, OptionError> {
        check_address(&self.address)?;
        // A chunk needs its 12-byte header and some data; a datagram is at most 64 KiB.
        if !(CHUNK_HEADER + 1..=65_507).contains(&self.packet_size) {
            return Err(OptionError::new(
                "packet_size",
                format!("{} is not between 13 and 65507 bytes", self.packet_size),
            ));
        }
        if self.protocol != Protocol::Tcp && self.tls.as_ref().is_some_and(|t| t.enable) {
            return Err(OptionError::new(
                "tls",
                "TLS is for TCP: set protocol = \"tcp\" (no TLS over UDP)",
            ));
        }
        let hostname = gethostname::gethostname().to_string_lossy().into_owned();
        let tls = TlsClient::build(self.tls.as_ref(), cx)?;
        let tcp = Connection::new(&self.address, self.timeout.0, tls);
        Ok(Arc::new(GelfOutput {
            cfg: self,
            hostname,
            tcp,
            udp: OnceCell::new(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(extra: &str) -> GelfOutput {
        let cfg: GelfOutputConfig =
            toml::from_str(&format!("address = \"127.0.0.1:12201\"\n{extra}")).unwrap();
        GelfOutput {
            cfg,
            hostname: "here".into(),
            tcp: Connection::new("127.0.0.1:1", std::time::Duration::from_secs(1), None),
            udp: OnceCell::new(),
        }
    }

    fn gelf(o: &GelfOutput, record: serde_json::Value) -> serde_json::Value {
        let mut mp = Vec::new();
        nagare_core::json::msgpack_from_json(&record, &mut mp);
        let mut out = Vec::new();
        o.message(&mut out, EventTime::new(1_700_000_000, 123_456_789), &mp);
        serde_json::from_slice(&out)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out)))
    }

    #[test]
    fn record_to_gelf() {
        let o = output("");
        let g = gelf(
            &o,
            serde_json::json!({"message":"hi","host":"web","level":"warning","id":5,"ok":true,
                "n":null,"kubernetes":{"pod name":"p","labels":{"app":"x"}},"list":[1,"a"],"f":1.5}),
        );
        assert_eq!(
            g,
            serde_json::json!({"version":"1.1","host":"web","short_message":"hi","level":4,
                "timestamp":1_700_000_000.123456,"__id":5,"_ok":"true","_kubernetes_pod_name":"p",
                "_kubernetes_labels_app":"x","_list":"[1,\"a\"]","_f":1.5})
        );
        // No message: the record as JSON; no host: this machine's; an unknown level kept.
        let g = gelf(
            &o,
            serde_json::json!({"log":"x","level":"chatty","full_message":"long"}),
        );
        assert_eq!(
            g["short_message"],
            r#"{"log":"x","level":"chatty","full_message":"long"}"#
        );
        assert_eq!(g["host"], "here");
        assert_eq!(g["_level"], "chatty");
        assert_eq!(g["full_message"], "long");
        assert!(g.get("level").is_none());
        // Keys mapped, a timestamp field.
        let o = output("gelf_short_message_key = \"log\"\ngelf_timestamp_key = \"ts\"\ngelf_level_key = \"sev\"");
        let g = gelf(&o, serde_json::json!({"log":"l","ts":12.5,"sev":3}));
        assert_eq!(g["short_message"], "l");
        assert_eq!(g["timestamp"], 12.5);
        assert_eq!(g["level"], 3);
        assert!(g.get("_ts").is_none() && g.get("_log").is_none());
    }

    #[test]
    fn chunking() {
        let payload: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        let d = datagrams(&payload, 1420, 42).unwrap();
        assert_eq!(d.len(), 4);
        let mut joined = Vec::new();
        for (i, c) in d.iter().enumerate() {
            assert!(c.len() <= 1420);
            assert_eq!(&c[..2], &[0x1e, 0x0f]);
            assert_eq!(&c[2..10], &42u64.to_be_bytes());
            assert_eq!((c[10], c[11]), (i as u8, 4));
            joined.extend_from_slice(&c[12..]);
        }
        assert_eq!(joined, payload);
        assert_eq!(datagrams(&payload[..1420], 1420, 1).unwrap().len(), 1);
        assert!(datagrams(&[0u8; 128 * 100 + 1], 112, 1).is_none());
        assert_eq!(datagrams(&[0u8; 128 * 100], 112, 1).unwrap().len(), 128);
    }
}
