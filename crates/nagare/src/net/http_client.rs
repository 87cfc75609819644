//! What the `http` and `opentelemetry` outputs share: an HTTP/1.1 client
//! (hyper) that keeps connections alive and opens more while flush workers
//! send at once, and the answer rules: 2xx delivered; connection errors,
//! timeouts, 5xx and 429 retried (after the server's `Retry-After`); any
//! other status permanent (the chunk goes to the secondary output).
//!
//! An `https://` endpoint is reached over TLS (tls.rs), configured by the
//! output's `tls` table when it has one; `http://` is plain TCP, and a
//! `tls` table with it is an error (the URL would say one thing and the
//! connection do another).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::{Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use nagare_core::output::FlushError;
use nagare_core::plugin::{BuildContext, OptionError};
use serde::Deserialize;

use crate::net::tls::{TlsClient, TlsOptions};

/// Where requests go: parsed from an `endpoint` option.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// "HOST:PORT" to connect to.
    pub authority: String,
    /// The path and query; may hold `${tag}`.
    pub path: String,
    /// `https://`: TLS.
    pub https: bool,
}

impl Endpoint {
    /// Parses "http://HOST[:PORT]/PATH" (port 80 by default) or
    /// "https://HOST[:PORT]/PATH" (port 443 by default).
    pub fn parse(key: &str, url: &str) -> Result<Endpoint, OptionError> {
        let bad = |m: String| OptionError::new(key, m);
        // `${tag}` is not a valid URI character sequence: check with a stand-in.
        let uri: Uri = url
            .replace("${tag}", "TAG")
            .parse()
            .map_err(|e| bad(format!("{url:?} is not a URL: {e}")))?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => {
                return Err(bad(format!(
                    "{url:?}: expected http://HOST:PORT/PATH or https://HOST:PORT/PATH"
                )))
            }
        };
        let host = uri
            .host()
            .ok_or_else(|| bad(format!("{url:?} has no host")))?;
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let after_authority = url
            .split_once("://")
            .map(|(_, rest)| rest.find('/').map_or("/", |i| &rest[i..]))
            .unwrap_or("/");
        Ok(Endpoint {
            authority: format!("{host}:{port}"),
            path: after_authority.to_string(),
            https,
        })
    }

    /// The TLS client of this endpoint: the URL's scheme says whether
    /// there is TLS, `tls` how it is set up (`https://` without a `tls`
    /// table: the system's trust store, the URL's host as the name).
    pub fn tls(
        &self,
        opts: Option<&TlsOptions>,
        cx: &mut BuildContext,
    ) -> Result<Option<Arc<TlsClient>>, OptionError> {
        match (self.https, opts) {
            (false, None) => Ok(None),
            (false, Some(o)) if !o.enable => Ok(None),
            (false, Some(_)) => Err(OptionError::new(
                "tls",
                "the endpoint is http://: write https:// to send over TLS",
            )),
            (true, Some(o)) if !o.enable => Err(OptionError::new(
                "tls.enable",
                "is false but the endpoint is https://: write http:// to send without TLS",
            )),
            (true, Some(o)) => TlsClient::build(Some(o), cx),
            (true, None) => TlsClient::build(Some(&TlsOptions::default()), cx),
        }
    }
}

/// Idle keep-alive connections to one endpoint.
pub struct Client {
    endpoint: Endpoint,
    tls: Option<Arc<TlsClient>>,
    timeout: Duration,
    idle: Mutex<Vec<SendRequest<Full<Bytes>>>>,
    /// The longest `Retry-After` honoured before the chunk goes back to the
    /// buffer's own backoff.
    max_retry_after: Duration,
}

/// The part of an answer the outputs look at.
pub struct Answer {
    pub status: StatusCode,
    pub body: Bytes,
    /// The `Retry-After` header in seconds.
    pub retry_after: Option<Duration>,
}

/// Response bodies are read up to this size (an error text is short).
const MAX_ANSWER: usize = 1 << 20;

impl Client {
    pub fn new(endpoint: Endpoint, tls: Option<Arc<TlsClient>>, timeout: Duration) -> Client {
        Client {
            endpoint,
            tls,
            timeout,
            idle: Mutex::new(Vec::new()),
            max_retry_after: Duration::from_secs(60),
        }
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// A request to `path` with the Host header set.
    pub fn request(&self, path: &str) -> hyper::http::request::Builder {
        Request::post(path).header(header::HOST, &self.endpoint.authority)
    }

    /// Sends a request on an idle connection or a new one and reads the
    /// answer; Err is a connection error or a timeout (retryable).
    pub async fn send(&self, req: Request<Full<Bytes>>) -> Result<Answer, String> {
        let work = async {
            let mut conn = self.connection().await?;
            let resp = conn
                .send_request(req)
                .await
                .map_err(|e| format!("{}: {e}", self.endpoint.authority))?;
            let status = resp.status();
            let retry_after = retry_after(resp.headers());
            let body = Limited::new(resp.into_body(), MAX_ANSWER)
                .collect()
                .await
                .map_err(|e| format!("{}: reading the answer: {e}", self.endpoint.authority))?
                .to_bytes();
            // hyper knows when the server asked to close.
            if conn.is_ready() {
                self.idle.lock().expect("idle connections").push(conn);
            }
            Ok(Answer {
                status,
                body,
                retry_after,
            })
        };
        tokio::time::timeout(self.timeout, work)
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "{}: no answer within timeout ({:?})",
                    self.endpoint.authority, self.timeout
                ))
            })
    }

    async fn connection(&self) -> Result<SendRequest<Full<Bytes>>, String> {
        loop {
            let conn = self.idle.lock().expect("idle connections").pop();
            match conn {
                Some(mut c) => {
                    // A connection the server closed while idle is dropped.
                    if c.ready().await.is_ok() {
                        return Ok(c);
                    }
                }
                None => return self.connect().await,
            }
        }
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, String> {
        let at = &self.endpoint.authority;
        let tcp = tokio::net::TcpStream::connect(at)
            .await
            .map_err(|e| format!("cannot connect to {at}: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let s = crate::net::tls::connect(&self.tls, tcp, at)
            .await
            .map_err(|e| format!("{at}: {e}"))?;
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s))
            .await
            .map_err(|e| format!("{at}: {e}"))?;
        let at = at.clone();
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(address = %at, error = %e, "http connection ended");
            }
        });
        Ok(send)
    }

    /// What an answer means for the chunk: Ok for 2xx; Retry for 5xx and
    /// 429 (after sleeping the server's Retry-After, up to a minute);
    /// Permanent for every other status.
    pub async fn judge(&self, a: Answer) -> Result<Answer, FlushError> {
        let status = a.status;
        if status.is_success() {
            return Ok(a);
        }
        let text = String::from_utf8_lossy(&a.body[..a.body.len().min(300)])
            .trim()
            .to_string();
        let what = format!("{} answered {status}: {text}", self.endpoint.authority);
        if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS {
            if let Some(wait) = a.retry_after {
                tokio::time::sleep(wait.min(self.max_retry_after)).await;
            }
            return Err(FlushError::Retry(what));
        }
        Err(FlushError::Permanent(what))
    }
}

/// The `Retry-After` header in seconds (the HTTP-date form is not used by
/// log receivers; it counts as absent).
fn retry_after(headers: &hyper::HeaderMap) -> Option<Duration> {
    let v = headers.get(header::RETRY_AFTER)?.to_str().ok()?;
    v.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// Checks the `headers` option: names and values HTTP accepts.
pub fn check_headers(
    key: &str,
    headers: &std::collections::BTreeMap<String, String>,
) -> Result<Vec<(HeaderName, HeaderValue)>, OptionError> {
    headers
        .iter()
        .map(|(k, v)| {
            let name = HeaderName::try_from(k.as_str())
                .map_err(|_| OptionError::new(format!("{key}.{k}"), "not a header name"))?;
            let value = HeaderValue::try_from(v.as_str())
                .map_err(|_| OptionError::new(format!("{key}.{k}"), "not a header value"))?;
            Ok((name, value))
        })
        .collect()
}

/// `Authorization` for a bearer token or basic user and password.
pub fn authorization(
    bearer_token: Option<&str>,
    user: Option<(&str, &str)>,
) -> Result<Option<HeaderValue>, OptionError> {
    use base64::Engine as _;
    let text = match (bearer_token, user) {
        (Some(_), Some(_)) => {
            return Err(OptionError::new(
                "bearer_token",
                "set either `bearer_token` or `username`/`password`, not both",
            ))
        }
        (Some(t), None) => format!("Bearer {t}"),
        (None, Some((u, p))) => format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
        ),
        (None, None) => return Ok(None),
    };
    HeaderValue::try_from(text)
        .map(Some)
        .map_err(|_| OptionError::new("bearer_token", "not valid in a header"))
}

/// The body's compression.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Compress {
    #[default]
    None,
    Gzip,
}
