//! `opentelemetry`: sends each chunk as one OTLP/HTTP logs export request
//! (protobuf or JSON) to an OpenTelemetry Collector or any OTLP receiver.
//! Records are read in the layout of formats/otlp.rs (what the
//! `opentelemetry` input writes); a plain record becomes a map body. gRPC
//! is not spoken.
//!
//! The client (keep-alive, connections, retries on connection errors, 5xx
//! and 429 with Retry-After; other statuses permanent) is http_client.rs,
//! shared with the `http` output.

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
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceResponse;
use prost::Message;
use serde::Deserialize;

use crate::buffer::Chunk;
use crate::formats::otlp::RequestBuilder;
use crate::net::http_client::Compress;
use crate::net::http_client::{self, Client, Endpoint};

/// The OTLP/HTTP body encoding.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Encoding {
    /// application/x-protobuf
    #[default]
    Protobuf,
    /// application/json (OTLP's JSON mapping)
    Json,
}

#[serde_inline_default]
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OtlpOutputConfig {
    /// The logs endpoint, "http://HOST:PORT/v1/logs" or "https://…" (TLS,
    /// with `tls`). Required.
    pub endpoint: String,
    /// "protobuf" (default) or "json".
    #[serde(default)]
    pub encoding: Encoding,
    /// "none" (default) or "gzip".
    #[serde(default)]
    pub compress: Compress,
    /// More request headers (`[output.headers]`, name = value).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Send `Authorization: Bearer <token>`.
    #[serde(default)]
    pub bearer_token: Option<String>,
    /// A request without an answer for this long is retried (default "30s").
    #[serde_inline_default(Dur::secs(30))]
    pub timeout: Dur,
    /// TLS settings of an `https://` endpoint (`[output.tls]`: `ca`,
    /// `server_name`, and `cert` and `key` for a client certificate);
    /// `https://` alone uses the system's trust store. See docs/tls.md.
    #[serde(default)]
    pub tls: Option<crate::net::tls::TlsOptions>,
}

impl OutputPlugin for OtlpOutputConfig {
    const TYPE: &'static str = "opentelemetry";
    const DOC: &'static str = "Sends each chunk as an OTLP/HTTP logs export (protobuf or JSON; no gRPC) to an OpenTelemetry Collector or receiver (see [OpenTelemetry](opentelemetry.md)).";

    fn build(self, cx: &mut BuildContext) -> Result<Arc<dyn Output>, OptionError> {
        let endpoint = Endpoint::parse("endpoint", &self.endpoint)?;
        let tls = endpoint.tls(self.tls.as_ref(), cx)?;
        let mut headers = http_client::check_headers("headers", &self.headers)?;
        if let Some(auth) = http_client::authorization(self.bearer_token.as_deref(), None)? {
            headers.push((header::AUTHORIZATION, auth));
        }
        let ct = match self.encoding {
            Encoding::Protobuf => "application/x-protobuf",
            Encoding::Json => "application/json",
        };
        headers.push((header::CONTENT_TYPE, HeaderValue::from_static(ct)));
        if self.compress == Compress::Gzip {
            headers.push((header::CONTENT_ENCODING, HeaderValue::from_static("gzip")));
        }
        Ok(Arc::new(OtlpOutput {
            client: Client::new(endpoint, tls, self.timeout.0),
            headers,
            cfg: self,
        }))
    }
}

struct OtlpOutput {
    cfg: OtlpOutputConfig,
    client: Client,
    headers: Vec<(HeaderName, HeaderValue)>,
}

#[async_trait]
impl Output for OtlpOutput {
    async fn write(&self, chunk: &Chunk) -> Result<(), FlushError> {
        let mut b = RequestBuilder::default();
        for seg in &chunk.segments {
            b.add_entries(seg);
        }
        let req = b.finish();
        let mut body = match self.cfg.encoding {
            Encoding::Protobuf => req.encode_to_vec(),
            Encoding::Json => serde_json::to_vec(&req)
                .map_err(|e| FlushError::Permanent(format!("OTLP JSON: {e}")))?,
        };
        if self.cfg.compress == Compress::Gzip {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            gz.write_all(&body)
                .map_err(|e| FlushError::Retry(format!("gzip: {e}")))?;
            body = gz
                .finish()
                .map_err(|e| FlushError::Retry(format!("gzip: {e}")))?;
        }
        let path = self.client.endpoint().path.clone();
        let mut r = self.client.request(&path);
        for (k, v) in &self.headers {
            r = r.header(k, v);
        }
        let r = r
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| FlushError::Permanent(format!("building the request: {e}")))?;
        let answer = self.client.send(r).await.map_err(FlushError::Retry)?;
        let answer = self.client.judge(answer).await?;
        // A partial success names records the receiver rejected for good:
        // retrying cannot help, so they are reported, not resent.
        let resp = match self.cfg.encoding {
            Encoding::Protobuf => ExportLogsServiceResponse::decode(answer.body).ok(),
            Encoding::Json => serde_json::from_slice(&answer.body).ok(),
        };
        if let Some(p) = resp.and_then(|r| r.partial_success) {
            if p.rejected_log_records > 0 {
                tracing::warn!(endpoint = %self.cfg.endpoint, rejected = p.rejected_log_records,
                    message = %p.error_message, "the OTLP receiver rejected some log records");
            }
        }
        Ok(())
    }
}
