//! `opentelemetry`: OTLP/HTTP logs (`POST /v1/logs`, protobuf or JSON), as
//! OpenTelemetry SDKs and the Collector's otlphttp exporter send them. Each
//! log record becomes one event in the layout of formats/otlp.rs, all of a
//! request under one tag. gRPC is not served.
//!
//! The listener (keep-alive, limits, auth, gzip/zstd, 503 with Retry-After
//! while buffers are full, which OTLP exporters retry) is
//! http_listener.rs, shared with the `http` input.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{self, HeaderValue};
use hyper::http::request::Parts;
use hyper::{Response, StatusCode};
use nagare_core::plugin::{BuildContext, OptionError};
use nagare_forward::EventTime;
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use prost::Message;
use tokio::task::JoinHandle;

use crate::inputs::common::http_listener::{
    self, http_listener_options, Body, Decode, Events, Reject,
};
use crate::inputs::{Input, InputContext, InputPlugin};
use crate::net::tls::TlsServer;

http_listener_options!(OtlpInputConfig {
    /// The tag of the events (default "otlp.logs").
    #[serde_inline_default("otlp.logs".into())]
    tag: String,
});

/// The path OTLP/HTTP exporters post logs to.
const LOGS_PATH: &str = "/v1/logs";

impl InputPlugin for OtlpInputConfig {
    const TYPE: &'static str = "opentelemetry";
    const DOC: &'static str = "Receives OpenTelemetry logs over OTLP/HTTP (`POST /v1/logs`, protobuf or JSON; no gRPC); each log record becomes an event (see [OpenTelemetry](opentelemetry.md)).";

    fn build(self, cx: &mut BuildContext) -> Result<Box<dyn Input>, OptionError> {
        let tls = self.listener().check(cx)?;
        if self.tag.is_empty() || self.tag.contains(char::is_whitespace) {
            return Err(OptionError::new(
                "tag",
                "must be a tag (dotted words, no spaces)",
            ));
        }
        Ok(Box::new(OtlpInput { cfg: self, tls }))
    }
}

/// A built opentelemetry input: its options and its TLS files, loaded.
struct OtlpInput {
    cfg: OtlpInputConfig,
    tls: Option<Arc<TlsServer>>,
}

#[async_trait::async_trait]
impl Input for OtlpInput {
    async fn start(self: Box<Self>, cx: InputContext) -> anyhow::Result<Vec<JoinHandle<()>>> {
        let decode = Arc::new(OtlpDecode {
            tag: self.cfg.tag.clone(),
        });
        http_listener::start(
            &cx.name,
            <OtlpInputConfig as InputPlugin>::TYPE,
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

struct OtlpDecode {
    tag: String,
}

/// The body encodings of OTLP/HTTP.
fn is_json(head: &Parts) -> Result<bool, Reject> {
    let ct = head
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match ct.as_str() {
        "application/x-protobuf" | "application/protobuf" => Ok(false),
        "application/json" => Ok(true),
        other => Err(Reject::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("Content-Type {other:?}: OTLP/HTTP sends application/x-protobuf or application/json"),
        )),
    }
}

impl Decode for OtlpDecode {
    fn tag_hint(&self, _head: &Parts) -> Option<String> {
        Some(self.tag.clone())
    }

    fn decode(&self, head: &Parts, body: Body) -> Result<Vec<Events>, Reject> {
        let body = body.joined();
        if head.uri.path() != LOGS_PATH {
            return Err(Reject::new(
                StatusCode::NOT_FOUND,
                format!(
                    "{}: this input takes logs at {LOGS_PATH} (no traces or metrics)",
                    head.uri.path()
                ),
            ));
        }
        let req = if is_json(head)? {
            serde_json::from_slice::<ExportLogsServiceRequest>(&body)
                .map_err(|e| Reject::bad(format!("bad OTLP JSON: {e}")))?
        } else {
            ExportLogsServiceRequest::decode(body)
                .map_err(|e| Reject::bad(format!("bad OTLP protobuf: {e}")))?
        };
        let mut entries = Vec::new();
        let count = crate::formats::otlp::write_entries(&req, EventTime::now(), &mut entries);
        Ok(vec![Events {
            tag: self.tag.clone(),
            entries,
            count,
        }])
    }

    /// An ExportLogsServiceResponse (empty: every record taken) in the
    /// request's encoding.
    fn accepted(&self, head: &Parts) -> Response<Full<Bytes>> {
        let json = is_json(head).unwrap_or(false);
        let resp = ExportLogsServiceResponse::default();
        let (body, ct) = if json {
            (Bytes::from_static(b"{}"), "application/json")
        } else {
            (Bytes::from(resp.encode_to_vec()), "application/x-protobuf")
        };
        let mut r = Response::new(Full::new(body));
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
        r
    }
}
