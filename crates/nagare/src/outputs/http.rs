//! `http`: POSTs each chunk to an HTTP endpoint as NDJSON, a JSON array or
//! msgpack, as Fluentd's and Fluent Bit's out_http do.
//!
//! Each record is written with its event time in `time_key` (epoch seconds
//! with nanoseconds, default "time") and, with `tag_key`, its tag, so the
//! `http` input of another nagare, Fluentd's in_http and Fluent Bit's
//! in_http take the events back with their times. `${tag}` in the
//! endpoint's path is replaced by the chunk's tag.
//!
//! The client (keep-alive, connections, retry rules) is http_client.rs,
//! shared with the `opentelemetry` output.

use std::io::Write;
use std::sync::Arc;

use async_trait::async_trait;
use hyper::header::{self, HeaderValue};
use nagare_core::output::OutputPlugin;
use nagare_core::output::{FlushError, Output};
use nagare_core::plugin::{BuildContext, OptionError};
use nagare_forward::msgpack::{read_map_len, write_array_len, write_map_len, write_str};
use nagare_forward::EventTime;
use serde::Deserialize;

use crate::buffer::Chunk;
use crate::net::http_client::{http_client_options, HttpSender};

/// How a chunk's events are written in a request body.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum BodyFormat {
    /// One JSON object per line (application/x-ndjson).
    #[default]
    Ndjson,
    /// One JSON array of objects (application/json).
    JsonArray,
    /// One msgpack array of maps (application/msgpack).
    Msgpack,
}

http_client_options!(
    /// The `http` output.
    HttpOutputConfig {
        /// "http://HOST[:PORT]/PATH" or "https://…" (TLS, with `tls`);
        /// `${tag}` in the path becomes the chunk's tag. Required.
        endpoint: String,
        /// "ndjson" (default, sent as `application/x-ndjson`; Fluent Bit's
        /// in_http wants NDJSON labelled `application/json`: set
        /// `Content-Type` in `headers`), "json_array" (`application/json`)
        /// or "msgpack" (`application/msgpack`; Fluent Bit's in_http does
        /// not take it).
        #[serde(default)]
        format: BodyFormat,
        /// The record field the event time is written to, as epoch seconds
        /// with nanoseconds (default "time"; "" writes no time).
        #[serde_inline_default("time".into())]
        time_key: String,
        /// The record field the tag is written to (default: none).
        #[serde(default)]
        tag_key: Option<String>,
    }
);

impl OutputPlugin for HttpOutputConfig {
    const TYPE: &'static str = "http";
    const DOC: &'static str = "POSTs each chunk to an HTTP endpoint as NDJSON, a JSON array or msgpack, optionally gzip'd, over keep-alive connections; retries connection errors, 5xx and 429 (see [HTTP](http.md)).";

    fn build(self, cx: &mut BuildContext) -> Result<Arc<dyn Output>, OptionError> {
        let content_type = match self.format {
            BodyFormat::Ndjson => "application/x-ndjson",
            BodyFormat::JsonArray => "application/json",
            BodyFormat::Msgpack => "application/msgpack",
        };
        // A `Content-Type` in `headers` replaces nagare's own; one naming the
        // other family than the body (msgpack labelled JSON, JSON labelled
        // msgpack) makes the receiver misread every request: say so at check.
        if let Some(ct) = self
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
            .map(|(_, v)| v.to_ascii_lowercase())
        {
            let says_msgpack = ct.contains("msgpack");
            let body_msgpack = self.format == BodyFormat::Msgpack;
            if says_msgpack != body_msgpack {
                cx.warn(
                    "headers",
                    format!(
                        "Content-Type {ct:?} does not match the body of format {:?} ({content_type}): the receiver reads the body by its content type",
                        match self.format {
                            BodyFormat::Ndjson => "ndjson",
                            BodyFormat::JsonArray => "json_array",
                            BodyFormat::Msgpack => "msgpack",
                        }
                    ),
                );
            }
        }
        let defaults = vec![(header::CONTENT_TYPE, HeaderValue::from_static(content_type))];
        Ok(Arc::new(HttpOutput {
            sender: self.http_sender("endpoint", &self.endpoint, defaults, cx)?,
            cfg: self,
        }))
    }
}

struct HttpOutput {
    cfg: HttpOutputConfig,
    sender: HttpSender,
}

#[async_trait]
impl Output for HttpOutput {
    async fn write(&self, chunk: &Chunk) -> Result<(), FlushError> {
        let path = self
            .sender
            .client()
            .endpoint()
            .path
            .replace("${tag}", &chunk.tag);
        let answer = self.sender.post(&path, self.body(chunk), &[]).await?;
        match self.sender.client().judge(answer).await {
            Ok(_) => Ok(()),
            // Fluent Bit's in_http answers this (400) to any content type but
            // JSON: name the fix beside its answer.
            Err(FlushError::Permanent(m)) if m.contains("invalid 'Content-Type'") => {
                Err(FlushError::Permanent(format!(
                    "{m} (Fluent Bit's in_http answers so to anything but application/json; it takes format = \"json_array\", or \"ndjson\" with Content-Type = \"application/json\" in [output.headers], and no msgpack)"
                )))
            }
            Err(e) => Err(e),
        }
    }
}

impl HttpOutput {
    /// The chunk's events in the body format.
    fn body(&self, chunk: &Chunk) -> Vec<u8> {
        let mut out = Vec::with_capacity(chunk.len + chunk.len / 2);
        let fields = Fields {
            time_key: (!self.cfg.time_key.is_empty()).then_some(self.cfg.time_key.as_str()),
            tag: self.cfg.tag_key.as_deref().map(|k| (k, &*chunk.tag)),
        };
        match self.cfg.format {
            BodyFormat::Ndjson => {
                for seg in &chunk.segments {
                    for (time, rec, _) in nagare_core::record::entries(seg) {
                        fields.json(&mut out, time, rec);
                        out.push(b'\n');
                    }
                }
            }
            BodyFormat::JsonArray => {
                out.push(b'[');
                for seg in &chunk.segments {
                    for (time, rec, _) in nagare_core::record::entries(seg) {
                        if out.len() > 1 {
                            out.push(b',');
                        }
                        fields.json(&mut out, time, rec);
                    }
                }
                out.push(b']');
            }
            BodyFormat::Msgpack => {
                write_array_len(&mut out, chunk.count as usize);
                for seg in &chunk.segments {
                    for (time, rec, _) in nagare_core::record::entries(seg) {
                        fields.msgpack(&mut out, time, rec);
                    }
                }
            }
        }
        out
    }
}

/// The fields written in front of each record's own.
struct Fields<'a> {
    time_key: Option<&'a str>,
    /// (tag_key, tag)
    tag: Option<(&'a str, &'a str)>,
}

impl Fields<'_> {
    /// `{"<time_key>":<secs.nanos>,"<tag_key>":"<tag>",<record's fields>}`
    fn json(&self, out: &mut Vec<u8>, time: EventTime, rec: &[u8]) {
        use nagare_core::json::{write_string, write_value};
        out.push(b'{');
        let mut first = true;
        if let Some(k) = self.time_key {
            write_string(out, k.as_bytes());
            out.push(b':');
            write_epoch(out, time);
            first = false;
        }
        if let Some((k, tag)) = self.tag {
            if !first {
                out.push(b',');
            }
            write_string(out, k.as_bytes());
            out.push(b':');
            write_string(out, tag.as_bytes());
            first = false;
        }
        // The record's own fields, without its braces.
        let at = out.len();
        write_value(out, rec);
        if out.get(at) == Some(&b'{') {
            out.remove(at);
            if out.len() > at + 1 && !first {
                out.insert(at, b',');
            }
        } else {
            // Not a map: kept whole under "record".
            let v = out.split_off(at);
            if !first {
                out.push(b',');
            }
            out.extend_from_slice(b"\"record\":");
            out.extend_from_slice(&v);
            out.push(b'}');
        }
    }

    /// The record map with the time (an EventTime) and tag in front.
    fn msgpack(&self, out: &mut Vec<u8>, time: EventTime, rec: &[u8]) {
        let (n, body) = read_map_len(rec, 0).unwrap_or((0, rec.len()));
        let extra = self.time_key.is_some() as usize + self.tag.is_some() as usize;
        write_map_len(out, n + extra);
        if let Some(k) = self.time_key {
            write_str(out, k.as_bytes());
            out.extend_from_slice(&time.to_bytes());
        }
        if let Some((k, tag)) = self.tag {
            write_str(out, k.as_bytes());
            write_str(out, tag.as_bytes());
        }
        out.extend_from_slice(&rec[body..]);
    }
}

/// Epoch seconds with nine decimals, e.g. 1700000000.123456789.
fn write_epoch(out: &mut Vec<u8>, t: EventTime) {
    let _ = write!(out, "{}.{:09}", t.secs, t.nanos.min(999_999_999));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json_of(f: &Fields, rec: serde_json::Value) -> serde_json::Value {
        let mut mp = Vec::new();
        nagare_core::json::msgpack_from_json(&rec, &mut mp);
        let mut out = Vec::new();
        f.json(&mut out, EventTime::new(5, 7), &mp);
        serde_json::from_slice(&out)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out)))
    }

    #[test]
    fn json_records_get_time_and_tag_first() {
        let both = Fields {
            time_key: Some("time"),
            tag: Some(("tag", "a.b")),
        };
        let v = json_of(&both, serde_json::json!({"k": 1}));
        assert_eq!(
            v,
            serde_json::json!({"time": 5.000000007, "tag": "a.b", "k": 1})
        );
        assert_eq!(
            json_of(&both, serde_json::json!({})),
            serde_json::json!({"time": 5.000000007, "tag": "a.b"})
        );
        let none = Fields {
            time_key: None,
            tag: None,
        };
        assert_eq!(
            json_of(&none, serde_json::json!({"k": 1})),
            serde_json::json!({"k": 1})
        );
        assert_eq!(json_of(&none, serde_json::json!({})), serde_json::json!({}));
    }
}
