//! The HTTP client object_store (the S3 protocol of the s3 output, the Blob
//! service protocol of the azure_blob output) sends its
//! requests with: hyper's HTTP/1.1 client over our TCP and rustls code
//! (tls.rs), so an `https://` endpoint takes the output's `tls` table (a
//! private CA, a client certificate) like every other TLS client of
//! nagare, and no second HTTP and TLS stack (reqwest, aws-lc-rs) is built in.
//!
//! Connections are kept alive per host (virtual-hosted-style requests go
//! to `BUCKET.HOST`), one request at a time each; more open while flush
//! workers and multipart parts send at once. Every request has a deadline
//! (`timeout`): its connection, the body sent and the answer read.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use http_body_util::BodyExt;
use hyper::client::conn::http1::SendRequest;
use hyper::header;
use hyper_util::rt::TokioIo;
use object_store::client::{
    ClientOptions, HttpClient, HttpConnector, HttpError, HttpErrorKind, HttpRequest,
    HttpRequestBody, HttpResponse, HttpResponseBody, HttpService,
};

use crate::net::tls::TlsClient;

/// Idle connections kept per host.
const IDLE_PER_HOST: usize = 32;

/// object_store's [`HttpConnector`]: hands out one shared [`ObjectHttp`].
#[derive(Debug, Clone)]
pub struct ObjectConnector(Arc<ObjectHttp>);

impl ObjectConnector {
    /// `tls`: the client of `https://` endpoints (None: `https://` is refused).
    pub fn new(tls: Option<Arc<TlsClient>>, timeout: Duration) -> ObjectConnector {
        ObjectConnector(Arc::new(ObjectHttp {
            tls,
            timeout,
            idle: Mutex::new(HashMap::new()),
        }))
    }
}

impl HttpConnector for ObjectConnector {
    fn connect(&self, _options: &ClientOptions) -> object_store::Result<HttpClient> {
        Ok(HttpClient::new(Shared(self.0.clone())))
    }
}

#[derive(Debug)]
struct Shared(Arc<ObjectHttp>);

#[async_trait]
impl HttpService for Shared {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        self.0.call(req).await
    }
}

/// "HOST:PORT" and whether over TLS: the key of idle connections.
type Host = (String, bool);

pub struct ObjectHttp {
    tls: Option<Arc<TlsClient>>,
    timeout: Duration,
    idle: Mutex<HashMap<Host, Vec<SendRequest<HttpRequestBody>>>>,
}

impl std::fmt::Debug for ObjectHttp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectHttp")
            .field("tls", &self.tls.is_some())
            .field("timeout", &self.timeout)
            .finish()
    }
}

fn err(kind: HttpErrorKind, m: String) -> HttpError {
    HttpError::new(kind, std::io::Error::other(m))
}

impl ObjectHttp {
    async fn call(&self, req: HttpRequest) -> Result<HttpResponse, HttpError> {
        let uri = req.uri().clone();
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(err(HttpErrorKind::Request, format!("{uri}: not http(s)"))),
        };
        let host = uri
            .host()
            .ok_or_else(|| err(HttpErrorKind::Request, format!("{uri}: no host")))?;
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let authority = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        // hyper's HTTP/1 client writes the URI as given: the origin form
        // (path and query), with the host in the Host header.
        let (mut parts, body) = req.into_parts();
        parts.uri = uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .parse()
            .map_err(|e| err(HttpErrorKind::Request, format!("{uri}: {e}")))?;
        if let Some(a) = uri.authority() {
            let value = header::HeaderValue::from_str(a.as_str())
                .map_err(|e| err(HttpErrorKind::Request, format!("{uri}: {e}")))?;
            parts.headers.insert(header::HOST, value);
        }
        let req = hyper::Request::from_parts(parts, body);
        let key = (authority, https);
        let work = async {
            let mut conn = self.connection(&key).await?;
            let resp = conn.send_request(req).await.map_err(|e| {
                let kind = if e.is_incomplete_message() || e.is_canceled() || e.is_closed() {
                    HttpErrorKind::Interrupted
                } else {
                    HttpErrorKind::Request
                };
                err(kind, format!("{}: {e}", key.0))
            })?;
            let (parts, body) = resp.into_parts();
            // Answers to PUT and POST are short XML documents: read whole,
            // so the connection is free again before it goes back idle.
            let body = body.collect().await.map_err(|e| {
                err(
                    HttpErrorKind::Interrupted,
                    format!("{}: reading the answer: {e}", key.0),
                )
            })?;
            if conn.is_ready() {
                let mut idle = self.idle.lock().expect("idle connections");
                let list = idle.entry(key.clone()).or_default();
                if list.len() < IDLE_PER_HOST {
                    list.push(conn);
                }
            }
            Ok(HttpResponse::from_parts(
                parts,
                HttpResponseBody::from(body.to_bytes()),
            ))
        };
        tokio::time::timeout(self.timeout, work)
            .await
            .unwrap_or_else(|_| {
                Err(err(
                    HttpErrorKind::Timeout,
                    format!("{}: no answer within {:?}", key.0, self.timeout),
                ))
            })
    }

    async fn connection(&self, key: &Host) -> Result<SendRequest<HttpRequestBody>, HttpError> {
        loop {
            let conn = self
                .idle
                .lock()
                .expect("idle connections")
                .get_mut(key)
                .and_then(|l| l.pop());
            match conn {
                // A connection the server closed while idle is dropped.
                Some(mut c) => {
                    if c.ready().await.is_ok() {
                        return Ok(c);
                    }
                }
                None => return self.connect(key).await,
            }
        }
    }

    async fn connect(&self, key: &Host) -> Result<SendRequest<HttpRequestBody>, HttpError> {
        let (at, https) = key;
        let tcp = tokio::net::TcpStream::connect(at.as_str())
            .await
            .map_err(|e| {
                err(
                    HttpErrorKind::Connect,
                    format!("cannot connect to {at}: {e}"),
                )
            })?;
        let _ = tcp.set_nodelay(true);
        let tls = match (https, &self.tls) {
            (false, _) => None,
            (true, Some(t)) => Some(t.clone()),
            (true, None) => {
                return Err(err(
                    HttpErrorKind::Connect,
                    format!("{at}: https:// without a TLS client"),
                ))
            }
        };
        let s = crate::net::tls::connect(&tls, tcp, at)
            .await
            .map_err(|e| err(HttpErrorKind::Connect, format!("{at}: {e}")))?;
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s))
            .await
            .map_err(|e| err(HttpErrorKind::Connect, format!("{at}: {e}")))?;
        let at = at.clone();
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(address = %at, error = %e, "object storage connection ended");
            }
        });
        Ok(send)
    }
}
