//! `opentelemetry`: sends each chunk as one OTLP/HTTP logs export request
//! (protobuf or JSON) to an OpenTelemetry Collector or any OTLP receiver.
//! Records are read in the layout of formats/otlp.rs (what the
//! `opentelemetry` input writes); a plain record becomes a map body. gRPC
//! is not spoken.
//!
//! The client (keep-alive, connections, retries on connection errors, 5xx
//! and 429 with Retry-After; other statuses permanent) is http_client.rs,
//! shared with the `http` output.

use std::sync::Arc;

use async_trait::async_trait;
use hyper::header::{self, HeaderValue};
use nagare_core::output::OutputPlugin;
use nagare_core::output::{FlushError, Output};
use nagare_core::plugin::{BuildContext, OptionError};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceResponse;
use prost::Message;
use serde::Deserialize;

use crate::buffer::Chunk;
use crate::formats::otlp::RequestBuilder;
use crate::net::http_client::{http_client_options, HttpSender};

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

http_client_options!(
    /// The `opentelemetry` output.
    OtlpOutputConfig {
        /// The logs endpoint, "http://HOST:PORT/v1/logs" or "https://…"
        /// (TLS, with `tls`). Required.
        endpoint: String,
        /// "protobuf" (default) or "json".
        #[serde(default)]
        encoding: Encoding,
    }
);

impl OutputPlugin for OtlpOutputConfig {
    const TYPE: &'static str = "opentelemetry";
    const DOC: &'static str = "Sends each chunk as an OTLP/HTTP logs export (protobuf or JSON; no gRPC) to an OpenTelemetry Collector or receiver (see [OpenTelemetry](opentelemetry.md)).";

    fn build(self, cx: &mut BuildContext) -> Result<Arc<dyn Output>, OptionError> {
        let ct = match self.encoding {
            Encoding::Protobuf => "application/x-protobuf",
            Encoding::Json => "application/json",
        };
        let defaults = vec![(header::CONTENT_TYPE, HeaderValue::from_static(ct))];
        Ok(Arc::new(OtlpOutput {
            sender: self.http_sender("endpoint", &self.endpoint, defaults, cx)?,
            cfg: self,
        }))
    }
}

struct OtlpOutput {
    cfg: OtlpOutputConfig,
    sender: HttpSender,
}

#[async_trait]
impl Output for OtlpOutput {
    async fn write(&self, chunk: &Chunk) -> Result<(), FlushError> {
        let mut b = RequestBuilder::default();
        for seg in &chunk.segments {
            b.add_entries(seg);
        }
        let req = b.finish();
        let body = match self.cfg.encoding {
            Encoding::Protobuf => req.encode_to_vec(),
            Encoding::Json => serde_json::to_vec(&req)
                .map_err(|e| FlushError::Permanent(format!("OTLP JSON: {e}")))?,
        };
        let client = self.sender.client();
        let answer = self.sender.post(&client.endpoint().path, body, &[]).await?;
        let answer = client.judge(answer).await?;
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
