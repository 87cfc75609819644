//! What the HTTP outputs share: their options ([`http_client_options!`]),
//! the headers and compression of each request ([`HttpSender`]), an HTTP/1.1 client
//! (hyper) that keeps connections alive and opens more while flush workers
//! send at once, and the answer rules (`Client::judge`, one for every HTTP
//! output): 2xx delivered; connection errors, timeouts, 5xx and 429
//! retried (after the server's `Retry-After`); 401/403 retried with the
//! events kept and an error naming the peer; 413 cuts the request in
//! halves (`send_parts`); any other status permanent (the chunk goes to
//! the secondary output or dead letters).
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

    /// What an answer means for the chunk — the one answer rule of every
    /// HTTP output: Ok for 2xx; Retry for 5xx and 429 (after sleeping the
    /// server's Retry-After, up to a minute); Retry for 401 and 403 too,
    /// with an error naming the peer and the credentials (wrong or
    /// expired credentials are fixed or rotated while the events wait in
    /// the buffer: refusing them for good would send every event to dead
    /// letters for a mistake in one option); Permanent for every other
    /// status. The outputs look at 413 (`send_parts` cuts the request)
    /// and at their own per-item answers before this.
    pub async fn judge(&self, a: Answer) -> Result<Answer, FlushError> {
        let status = a.status;
        if status.is_success() {
            return Ok(a);
        }
        let text = String::from_utf8_lossy(&a.body[..a.body.len().min(300)])
            .trim()
            .to_string();
        let at = &self.endpoint.authority;
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(FlushError::Retry(format!(
                "{at} answered {status}: the server refused the credentials; check the \
                 output's `bearer_token`, `username`/`password`, `api_key`, `tenant` or \
                 `Authorization` header and the rights of that user; the events are kept \
                 and retried: {text}"
            )));
        }
        let what = format!("{at} answered {status}: {text}");
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

/// Declares an HTTP output's options struct with the options every HTTP
/// output takes appended (compression, headers, authentication, timeout,
/// TLS), and `http_sender()` to build its [`HttpSender`]. The plugin
/// declares its own `endpoint` (its doc says what the URL names).
macro_rules! http_client_options {
    ($($plugin:tt)*) => {
        nagare_core::option_group! {
            [$($plugin)*]
            fields {
                /// "none" (default) or "gzip" (the body gzip'd, with
                /// `Content-Encoding: gzip`).
                #[serde(default)]
                pub compress: crate::net::http_client::Compress,
                /// More request headers (`[output.headers]`, name = value).
                /// One header of each name is sent: these win over the ones
                /// nagare sets itself (`Content-Type`, `Authorization`, …).
                #[serde(default)]
                pub headers: std::collections::BTreeMap<String, String>,
                /// Send `Authorization: Bearer <token>`.
                #[serde(default)]
                pub bearer_token: Option<String>,
                /// Send HTTP basic authentication as this user (with `password`).
                #[serde(default)]
                pub username: Option<String>,
                /// The password of `username`.
                #[serde(default)]
                pub password: Option<String>,
                /// Requests of one chunk in flight at once when the output
                /// sends a chunk in several (elasticsearch's
                /// `bulk_max_size`, loki's `max_request_size`, the halves of
                /// a request answered 413): the next body is built while
                /// the others wait for their answers (default 4; each
                /// flush worker, `flush_thread_count`, sends its own chunk).
                #[serde_inline_default(4)]
                pub request_concurrency: usize,
                /// A request without an answer for this long is retried
                /// (default "30s").
                #[serde_inline_default(nagare_core::units::Dur::secs(30))]
                pub timeout: nagare_core::units::Dur,
                /// TLS settings of an `https://` endpoint (`[output.tls]`:
                /// `ca`, `server_name`, and `cert` and `key` for a client
                /// certificate); `https://` alone uses the system's trust
                /// store. See docs/tls.md.
                #[serde(default)]
                pub tls: Option<crate::net::tls::TlsOptions>,
            }
            impl {
                /// The client of the URL in option `key` (`url`), sending
                /// `defaults` (the plugin's own headers, e.g. its
                /// `Content-Type`) unless `headers` names them.
                fn http_sender(
                    &self,
                    key: &str,
                    url: &str,
                    defaults: Vec<(hyper::header::HeaderName, hyper::header::HeaderValue)>,
                    cx: &mut nagare_core::plugin::BuildContext,
                ) -> Result<crate::net::http_client::HttpSender, nagare_core::plugin::OptionError> {
                    crate::net::http_client::HttpSender::new(
                        crate::net::http_client::SenderOptions {
                            key,
                            url,
                            compress: self.compress,
                            headers: &self.headers,
                            bearer_token: self.bearer_token.as_deref(),
                            username: self.username.as_deref(),
                            password: self.password.as_deref(),
                            timeout: self.timeout.0,
                            tls: self.tls.as_ref(),
                            concurrency: self.request_concurrency,
                        },
                        defaults,
                        cx,
                    )
                }
            }
        }
    };
}
pub(crate) use http_client_options;

/// The options of [`http_client_options!`], borrowed.
pub struct SenderOptions<'a> {
    pub key: &'a str,
    pub url: &'a str,
    pub compress: Compress,
    pub headers: &'a std::collections::BTreeMap<String, String>,
    pub bearer_token: Option<&'a str>,
    pub username: Option<&'a str>,
    pub password: Option<&'a str>,
    pub timeout: Duration,
    pub tls: Option<&'a TlsOptions>,
    /// `request_concurrency`.
    pub concurrency: usize,
}

/// An HTTP output's client: its endpoint's connections, the headers every
/// request carries (one of each name) and the body's compression.
pub struct HttpSender {
    client: Client,
    headers: Vec<(HeaderName, HeaderValue)>,
    gzip: bool,
    /// Requests of one chunk in flight at once (`send_parts`).
    concurrency: usize,
}

impl HttpSender {
    pub fn new(
        o: SenderOptions,
        defaults: Vec<(HeaderName, HeaderValue)>,
        cx: &mut BuildContext,
    ) -> Result<HttpSender, OptionError> {
        if o.concurrency == 0 {
            return Err(OptionError::new(
                "request_concurrency",
                "must be at least 1",
            ));
        }
        let endpoint = Endpoint::parse(o.key, o.url)?;
        let tls = endpoint.tls(o.tls, cx)?;
        let mut headers = check_headers("headers", o.headers)?;
        let user = match (o.username, o.password) {
            (Some(u), p) => Some((u, p.unwrap_or(""))),
            (None, Some(_)) => return Err(OptionError::new("password", "set `username` too")),
            (None, None) => None,
        };
        let mut ours = defaults;
        if let Some(auth) = authorization(o.bearer_token, user)? {
            ours.push((header::AUTHORIZATION, auth));
        }
        let gzip = o.compress == Compress::Gzip;
        if gzip {
            ours.push((header::CONTENT_ENCODING, HeaderValue::from_static("gzip")));
        }
        // The user's header of a name wins over ours.
        for (name, value) in ours {
            if !headers.iter().any(|(n, _)| *n == name) {
                headers.push((name, value));
            }
        }
        Ok(HttpSender {
            client: Client::new(endpoint, tls, o.timeout),
            headers,
            gzip,
            concurrency: o.concurrency,
        })
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The value of header `name` that requests carry.
    pub fn header(&self, name: &HeaderName) -> Option<&HeaderValue> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// POSTs `body` (gzip'd if asked) to `path` with the headers and
    /// `extra` ones (per request, e.g. a tenant), and reads the answer;
    /// a connection error or a timeout is `Retry`. The answer's status is
    /// the caller's to judge (`Client::judge`, or per item).
    pub async fn post(
        &self,
        path: &str,
        body: Vec<u8>,
        extra: &[(HeaderName, HeaderValue)],
    ) -> Result<Answer, FlushError> {
        let body = if self.gzip {
            use std::io::Write as _;
            let mut gz = flate2::write::GzEncoder::new(
                Vec::with_capacity(body.len() / 4),
                flate2::Compression::fast(),
            );
            gz.write_all(&body)
                .and_then(|()| gz.finish())
                .map_err(|e| FlushError::Retry(format!("gzip: {e}")))?
        } else {
            body
        };
        let mut req = self.client.request(path);
        for (k, v) in self.headers.iter().chain(extra) {
            req = req.header(k, v);
        }
        let req = req.body(Full::new(Bytes::from(body))).map_err(|e| {
            FlushError::Permanent(format!("building the request for {path:?}: {e}"))
        })?;
        self.client.send(req).await.map_err(FlushError::Retry)
    }
}

/// What became of a chunk's entries sent in several requests (a body
/// the server found too large, split in halves; or one answer naming some
/// entries): one outcome for the buffer.
#[derive(Debug, Default)]
pub struct Outcomes {
    retry: Vec<u32>,
    rejected: Vec<(u32, String)>,
    /// The first reason for a retry, for the log.
    message: Option<String>,
}

impl Outcomes {
    /// These entries may be taken later.
    pub fn retry(&mut self, which: impl IntoIterator<Item = u32>, why: &str) {
        self.retry.extend(which);
        self.message.get_or_insert_with(|| why.to_string());
    }

    /// These entries can never be taken as they are; `why` starts with the
    /// reason's name and a ':' (the `refused` counter's label).
    pub fn reject(&mut self, which: impl IntoIterator<Item = u32>, why: &str) {
        self.rejected
            .extend(which.into_iter().map(|i| (i, why.to_string())));
    }

    /// The outcome of the chunk of `count` entries: Ok when nothing is
    /// left undone, Retry when every entry is, otherwise Partial.
    pub fn finish(mut self, count: u32) -> Result<(), FlushError> {
        if self.retry.is_empty() && self.rejected.is_empty() {
            return Ok(());
        }
        if self.rejected.is_empty() && self.retry.len() == count as usize {
            return Err(FlushError::Retry(self.message.unwrap_or_default()));
        }
        self.retry.sort_unstable();
        self.rejected.sort_unstable_by_key(|(i, _)| *i);
        let message = match self.message {
            Some(first) => format!(
                "{} of {count} events to send again ({first}); {} refused",
                self.retry.len(),
                self.rejected.len()
            ),
            None => format!(
                "{} of {count} events refused: {}",
                self.rejected.len(),
                self.rejected.first().map_or("", |(_, w)| w.as_str())
            ),
        };
        Err(FlushError::Partial(nagare_core::output::PartialWrite {
            retry: self.retry,
            rejected: self.rejected,
            message,
        }))
    }
}

/// Cuts entries of these `sizes` (bytes each) into requests of at most
/// `max` bytes (an entry larger alone), of about equal size: as few as
/// `max` allows, each near the remaining total divided by the requests
/// left. Cutting greedily at `max` instead leaves a small last request
/// (a 1.1 MiB chunk at 256 KiB: four full and one of 70 KiB), which then
/// goes alone after the others and keeps a flush worker waiting on a
/// round trip for a few events: requests of a chunk sent at once finish
/// at about the same time when they are of a size.
pub fn even_parts(sizes: &[usize], max: usize) -> Vec<std::ops::Range<usize>> {
    let max = max.max(1);
    let total: usize = sizes.iter().sum();
    let target = |remaining: usize| remaining.div_ceil(remaining.div_ceil(max).max(1));
    // Cut before entry i when it would pass `max` (greedy, `goal` None),
    // or when the part is nearer its goal without it than with it.
    let cut = |even: bool| {
        let (mut remaining, mut goal) = (total, target(total));
        let mut out = Vec::new();
        let (mut a, mut cur) = (0, 0);
        for (i, &s) in sizes.iter().enumerate() {
            if i > a && (cur + s > max || (even && cur + s / 2 > goal)) {
                out.push(a..i);
                remaining -= cur;
                goal = target(remaining);
                (a, cur) = (i, 0);
            }
            cur += s;
        }
        if sizes.len() > a {
            out.push(a..sizes.len());
        }
        out
    };
    let (even, greedy) = (cut(true), cut(false));
    // Entries large beside `max` can make the even cut need more
    // requests than the greedy one: then the greedy one.
    if even.len() <= greedy.len() {
        even
    } else {
        greedy
    }
}

/// How one request of some of a chunk's entries went.
pub enum PartSent {
    /// Every entry of the part delivered.
    Ok,
    /// None delivered; they may be taken later.
    Retry(String),
    /// None can ever be taken as sent ("reason: text").
    Reject(String),
    /// 413: the body is larger than the server takes ("reason: text").
    TooLarge(String),
    /// Some entries (by position within the part) not delivered; the
    /// others were.
    Some(Vec<(usize, Undelivered)>),
}

/// An entry of a part the server did not take.
pub enum Undelivered {
    Retry(String),
    Reject(String),
}

impl HttpSender {
    /// Sends a chunk's entries in `parts` (ranges of positions in the
    /// output's list of them; `index` gives each position's index in the
    /// chunk) with `send`, up to `request_concurrency` requests at once:
    /// the next part's body is built while others wait for their answers.
    /// A part answered 413 is cut in halves and sent again; one entry
    /// alone too large is refused with the part's reason. The one path
    /// for 413 of every HTTP output that cuts a chunk.
    pub async fn send_parts<F, Fut>(
        &self,
        output: &str,
        parts: impl IntoIterator<Item = std::ops::Range<usize>>,
        index: impl Fn(usize) -> u32,
        send: F,
    ) -> Outcomes
    where
        F: Fn(std::ops::Range<usize>) -> Fut,
        Fut: std::future::Future<Output = PartSent>,
    {
        use futures_util::stream::{FuturesUnordered, StreamExt as _};
        let mut outcomes = Outcomes::default();
        let mut todo: std::collections::VecDeque<_> =
            parts.into_iter().filter(|r| !r.is_empty()).collect();
        let mut running = FuturesUnordered::new();
        loop {
            while running.len() < self.concurrency {
                let Some(r) = todo.pop_front() else { break };
                let sent = send(r.clone());
                running.push(async move { (r, sent.await) });
            }
            let Some((r, sent)) = running.next().await else {
                break;
            };
            match sent {
                PartSent::Ok => {}
                PartSent::TooLarge(why) if r.len() > 1 => {
                    let mid = r.start + r.len() / 2;
                    tracing::warn!(output, events = r.len(), error = %why,
                        "request too large: sending it in two halves");
                    todo.push_front(mid..r.end);
                    todo.push_front(r.start..mid);
                }
                PartSent::TooLarge(why) => outcomes.reject([index(r.start)], &why),
                PartSent::Retry(why) => outcomes.retry(r.map(&index), &why),
                PartSent::Reject(why) => outcomes.reject(r.map(&index), &why),
                PartSent::Some(list) => {
                    for (i, u) in list {
                        match u {
                            Undelivered::Retry(why) => outcomes.retry([index(r.start + i)], &why),
                            Undelivered::Reject(why) => outcomes.reject([index(r.start + i)], &why),
                        }
                    }
                }
            }
        }
        outcomes
    }
}

impl HttpSender {
    /// GETs `path` with the headers requests carry but those of a body
    /// (`Content-Type`, `Content-Encoding`): a healthcheck's request.
    pub async fn get(&self, path: &str) -> Result<Answer, String> {
        let mut req = self.client.request(path).method(hyper::Method::GET);
        for (k, v) in &self.headers {
            if k != header::CONTENT_TYPE && k != header::CONTENT_ENCODING {
                req = req.header(k, v);
            }
        }
        let req = req
            .body(Full::new(Bytes::new()))
            .map_err(|e| format!("building the request for {path:?}: {e}"))?;
        self.client.send(req).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sender(user: &[(&str, &str)], bearer: Option<&str>) -> HttpSender {
        let headers = user
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let o = SenderOptions {
            key: "endpoint",
            url: "http://127.0.0.1:9/in",
            compress: Compress::Gzip,
            headers: &headers,
            bearer_token: bearer,
            username: None,
            password: None,
            timeout: Duration::from_secs(1),
            tls: None,
            concurrency: 1,
        };
        let ours = vec![(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-ndjson"),
        )];
        HttpSender::new(o, ours, &mut BuildContext::new("http#0")).unwrap()
    }

    #[test]
    fn even_parts_are_of_about_one_size_and_at_most_max() {
        // 8,000 lines of 146 bytes (a 1 MiB chunk of benches/loki.sh) at
        // 256 KiB: five parts of 1,600 lines, not four of 1,795 and one of 820.
        let sizes = vec![146; 8000];
        let parts = even_parts(&sizes, 256 << 10);
        let lens: Vec<usize> = parts.iter().map(|r| r.len()).collect();
        assert_eq!(lens, [1600; 5]);
        assert_eq!(parts.last().unwrap().end, 8000);
        for max in [1, 30, 100, 1000, 1 << 20] {
            let sizes: Vec<usize> = (0..500).map(|i| 1 + (i * 37) % 90).collect();
            let parts = even_parts(&sizes, max);
            assert_eq!(parts.first().unwrap().start, 0);
            assert_eq!(parts.last().unwrap().end, 500);
            assert!(parts.windows(2).all(|w| w[0].end == w[1].start));
            for r in &parts {
                let n: usize = sizes[r.clone()].iter().sum();
                assert!(n <= max || r.len() == 1, "{r:?} of {n} bytes at {max}");
            }
            // No more requests than cutting at `max` makes.
            let (mut greedy, mut cur) = (1, 0);
            for &s in &sizes {
                if cur > 0 && cur + s > max {
                    (greedy, cur) = (greedy + 1, 0);
                }
                cur += s;
            }
            assert!(parts.len() <= greedy, "{max}: {} > {greedy}", parts.len());
        }
        // An entry larger than max goes alone; nothing goes empty.
        assert_eq!(
            even_parts(&[10, 10, 50, 10, 20], 30),
            vec![0..2, 2..3, 3..5]
        );
        assert!(even_parts(&[], 30).is_empty());
        assert_eq!(even_parts(&[5], 1), vec![0..1]);
    }

    #[test]
    fn one_header_of_each_name_the_users_winning() {
        let s = sender(
            &[("content-type", "application/json"), ("X-A", "1")],
            Some("t"),
        );
        let names: Vec<&str> = s.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["x-a", "content-type", "authorization", "content-encoding"]
        );
        assert_eq!(s.header(&header::CONTENT_TYPE).unwrap(), "application/json");
        let s = sender(&[("Authorization", "Splunk abc")], Some("t"));
        assert_eq!(s.header(&header::AUTHORIZATION).unwrap(), "Splunk abc");
        assert_eq!(
            s.header(&header::CONTENT_TYPE).unwrap(),
            "application/x-ndjson"
        );
    }
}
