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

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{self, HeaderName, HeaderValue};
use nagare_core::output::OutputPlugin;
use nagare_core::output::{FlushError, Output};
use nagare_core::plugin::{serde_inline_default, BuildContext, OptionError};
use nagare_core::units::Dur;
use nagare_forward::msgpack::{read_map_len, write_array_len, write_map_len, write_str};
use nagare_forward::EventTime;
use serde::Deserialize;

use crate::buffer::Chunk;
use crate::net::http_client::Compress;
use crate::net::http_client::{self, Client, Endpoint};

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

#[serde_inline_default]
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpOutputConfig {
    /// "http://HOST[:PORT]/PATH" or "https://…" (TLS, with `tls`);
    /// `${tag}` in the path becomes the chunk's tag. Required.
    pub endpoint: String,
    /// "ndjson" (default), "json_array" or "msgpack".
    #[serde(default)]
    pub format: BodyFormat,
    /// "none" (default) or "gzip" (Content-Encoding: gzip).
    #[serde(default)]
    pub compress: Compress,
    /// The record field the event time is written to, as epoch seconds
    /// with nanoseconds (default "time"; "" writes no time).
    #[serde_inline_default("time".into())]
    pub time_key: String,
    /// The record field the tag is written to (default: none).
    #[serde(default)]
    pub tag_key: Option<String>,
    /// More request headers (`[output.headers]`, name = value).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Send `Authorization: Bearer <token>`.
    #[serde(default)]
    pub bearer_token: Option<String>,
    /// Send HTTP basic authentication as this user (with `password`).
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub password: Option<String>,
    /// A request without an answer for this long is retried (default "30s").
    #[serde_inline_default(Dur::secs(30))]
    pub timeout: Dur,
    /// TLS settings of an `https://` endpoint (`[output.tls]`: `ca`,
    /// `server_name`, and `cert` and `key` for a client certificate);
    /// `https://` alone uses the system's trust store. See docs/tls.md.
    #[serde(default)]
    pub tls: Option<crate::net::tls::TlsOptions>,
}

impl OutputPlugin for HttpOutputConfig {
    const TYPE: &'static str = "http";
    const DOC: &'static str = "POSTs each chunk to an HTTP endpoint as NDJSON, a JSON array or msgpack, optionally gzip'd, over keep-alive connections; retries connection errors, 5xx and 429 (see [HTTP](http.md)).";

    fn build(self, cx: &mut BuildContext) -> Result<Arc<dyn Output>, OptionError> {
        let endpoint = Endpoint::parse("endpoint", &self.endpoint)?;
        let tls = endpoint.tls(self.tls.as_ref(), cx)?;
        let mut headers = http_client::check_headers("headers", &self.headers)?;
        let user = match (&self.username, &self.password) {
            (Some(u), p) => Some((u.as_str(), p.as_deref().unwrap_or(""))),
            (None, Some(_)) => return Err(OptionError::new("password", "set `username` too")),
            (None, None) => None,
        };
        if let Some(auth) = http_client::authorization(self.bearer_token.as_deref(), user)? {
            headers.push((header::AUTHORIZATION, auth));
        }
        let content_type = match self.format {
            BodyFormat::Ndjson => "application/x-ndjson",
            BodyFormat::JsonArray => "application/json",
            BodyFormat::Msgpack => "application/msgpack",
        };
        headers.push((header::CONTENT_TYPE, HeaderValue::from_static(content_type)));
        if self.compress == Compress::Gzip {
            headers.push((header::CONTENT_ENCODING, HeaderValue::from_static("gzip")));
        }
        Ok(Arc::new(HttpOutput {
            client: Client::new(endpoint, tls, self.timeout.0),
            headers,
            cfg: self,
        }))
    }
}

struct HttpOutput {
    cfg: HttpOutputConfig,
    client: Client,
    headers: Vec<(HeaderName, HeaderValue)>,
}

#[async_trait]
impl Output for HttpOutput {
    async fn write(&self, chunk: &Chunk) -> Result<(), FlushError> {
        let mut body = self.body(chunk);
        if self.cfg.compress == Compress::Gzip {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(&body)
                .map_err(|e| FlushError::Retry(format!("gzip: {e}")))?;
            body = gz
                .finish()
                .map_err(|e| FlushError::Retry(format!("gzip: {e}")))?;
        }
        let path = self.client.endpoint().path.replace("${tag}", &chunk.tag);
        let mut req = self.client.request(&path);
        for (k, v) in &self.headers {
            req = req.header(k, v);
        }
        let req = req.body(Full::new(Bytes::from(body))).map_err(|e| {
            FlushError::Permanent(format!("building the request for {path:?}: {e}"))
        })?;
        let answer = self.client.send(req).await.map_err(FlushError::Retry)?;
        self.client.judge(answer).await.map(|_| ())
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
