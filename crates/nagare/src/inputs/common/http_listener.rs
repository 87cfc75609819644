//! What the `http` and `opentelemetry` inputs share: an HTTP/1.1 listener
//! (keep-alive, a connection limit, a header timeout against slow clients),
//! authentication (bearer token, basic), the request body (size limit, gzip
//! and zstd), and handing the decoded batches to the router with the answer
//! HTTP gives: 200 once every batch is in every matched output's buffer
//! (durably for file buffers; with `ack = "delivered"`, once delivered),
//! 503 with `Retry-After` while a buffer is full, never accept-and-drop.
//!
//! A plugin says how a body becomes batches ([`Decode`]); this module does
//! the rest. Connections are served over any `AsyncRead + AsyncWrite`
//! stream: with `tls`, the accepted socket does its TLS handshake in its
//! connection's task (net/tls.rs logs a failed one with the peer and reason)
//! and HTTPS is served over the TLS stream.
//!
//! The options are declared by [`http_listener_options!`], which appends
//! them to a plugin's own options struct (serde's `flatten` would lose the
//! line numbers of errors and cannot deny unknown keys).

use std::convert::Infallible;
use std::io::Read;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::http::request::Parts;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use nagare_core::metrics::PluginStats;
use nagare_core::plugin::{BuildContext, Listen, OptionError};
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;

use crate::inputs::common::listeners::stopped;
use crate::inputs::common::AckMode;
use crate::net::tls::{TlsOptions, TlsServer};
use crate::router::LiveRouter;

/// A user allowed by HTTP basic authentication.
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BasicUser {
    pub username: String,
    pub password: String,
}

/// Declares an HTTP input's options struct with the listener options
/// appended, and `listener()` to read them.
macro_rules! http_listener_options {
    ($($plugin:tt)*) => {
        nagare_core::option_group! {
            [$($plugin)*]
            fields {
                /// "HOST:PORT" to listen on. Required.
                pub bind: String,
                /// Largest request body, before and after decompression; a
                /// larger one is answered 413 (default "32MiB").
                #[serde_inline_default(nagare_core::units::Size::mib(32))]
                pub max_body_size: nagare_core::units::Size,
                /// Connections open at once; more are closed at accept, with a
                /// log line (default 1024).
                #[serde_inline_default(crate::inputs::common::DEFAULT_MAX_CONNECTIONS)]
                pub max_connections: usize,
                /// A client must send a request's headers within this time, or
                /// its connection is closed (slow clients) (default "10s").
                #[serde_inline_default(nagare_core::units::Dur::secs(10))]
                pub header_timeout: nagare_core::units::Dur,
                /// A client must send a request's body within this time, or it is
                /// answered 408 (default "60s").
                #[serde_inline_default(nagare_core::units::Dur::mins(1))]
                pub body_timeout: nagare_core::units::Dur,
                /// Require `Authorization: Bearer <token>`.
                #[serde(default)]
                pub bearer_token: Option<String>,
                /// Require HTTP basic authentication as one of these users
                /// ([[input.users]] with `username`, `password`).
                #[serde(default)]
                pub users: Vec<crate::inputs::common::http_listener::BasicUser>,
                /// When to answer 200: "buffered" (default; every batch is in
                /// every matched output's buffer, fsync'd for file buffers) or
                /// "delivered" (every matched output delivered it downstream).
                #[serde(default)]
                pub ack: crate::inputs::common::AckMode,
                /// The `Retry-After` of a 503 while a buffer is full (default "1s").
                #[serde_inline_default(nagare_core::units::Dur::secs(1))]
                pub retry_after: nagare_core::units::Dur,
                /// While a matched output's buffer is full, a request waits this
                /// long for room before its body is decoded (default "1s"; "0s"
                /// answers 503 at once). A buffer that is full only until the
                /// output's next delivery then costs the client a short wait,
                /// not a 503, a back-off and the whole body sent and decoded
                /// again (as the forward input stops reading meanwhile).
                #[serde_inline_default(crate::inputs::common::DEFAULT_WAIT_FOR_ROOM)]
                pub wait_for_room: nagare_core::units::Dur,
                /// HTTPS (`[input.tls]`: `cert`, `key`, and `ca` to require
                /// client certificates); see docs/tls.md.
                #[serde(default)]
                pub tls: Option<crate::net::tls::TlsOptions>,
            }
            impl {
                fn listener(&self) -> crate::inputs::common::http_listener::ListenerOptions {
                    crate::inputs::common::http_listener::ListenerOptions {
                        bind: self.bind.clone(),
                        max_body_size: self.max_body_size.0 as usize,
                        max_connections: self.max_connections,
                        header_timeout: self.header_timeout.0,
                        body_timeout: self.body_timeout.0,
                        bearer_token: self.bearer_token.clone(),
                        users: self.users.clone(),
                        ack: self.ack,
                        retry_after: self.retry_after.0,
                        wait_for_room: self.wait_for_room.0,
                        tls: self.tls.clone(),
                    }
                }
            }
        }
    };
}
pub(crate) use http_listener_options;

/// The listener options of one input, read from its section.
#[derive(Debug, Clone)]
pub struct ListenerOptions {
    pub bind: String,
    pub max_body_size: usize,
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub bearer_token: Option<String>,
    pub users: Vec<BasicUser>,
    pub ack: AckMode,
    pub retry_after: Duration,
    pub wait_for_room: Duration,
    pub tls: Option<TlsOptions>,
}

impl ListenerOptions {
    /// Whether the listener's own authentication (bearer, basic) is on.
    fn auth(&self) -> bool {
        self.bearer_token.is_some() || !self.users.is_empty()
    }

    /// The build-time checks; tells `cx` the address. Gives the TLS side
    /// with its files loaded (None without TLS), for [`start`].
    pub fn check(&self, cx: &mut BuildContext) -> Result<Option<Arc<TlsServer>>, OptionError> {
        let addr =
            nagare_core::address::resolve(&self.bind).map_err(|e| OptionError::new("bind", e))?;
        cx.listen("bind", Listen::Tcp(addr));
        super::check_max_connections(self.max_connections)?;
        if self.max_body_size == 0 {
            return Err(OptionError::new("max_body_size", "must be at least 1 byte"));
        }
        if self.bearer_token.as_deref() == Some("") {
            return Err(OptionError::new("bearer_token", "must not be empty"));
        }
        TlsServer::build(self.tls.as_ref(), cx)
    }
}

/// Events of one tag decoded from a request: PackedForward entries.
#[derive(Debug)]
pub struct Events {
    pub tag: String,
    pub entries: Vec<u8>,
    pub count: u32,
}

/// A request the plugin refuses: the status and a message for the client.
#[derive(Debug)]
pub struct Reject {
    pub status: StatusCode,
    pub message: String,
}

impl Reject {
    pub fn bad(message: impl Into<String>) -> Reject {
        Reject {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }
    pub fn new(status: StatusCode, message: impl Into<String>) -> Reject {
        Reject {
            status,
            message: message.into(),
        }
    }
}

/// A request body as it arrived: hyper's pieces (up to about 400 KiB
/// each), which a decoder that can work across them (NDJSON) reads without
/// joining them; joining a 1 MB body was 9 % of the http input's CPU.
#[derive(Debug, Default)]
pub struct Body {
    pieces: Vec<Bytes>,
    len: usize,
}

impl Body {
    /// Its size in bytes.
    pub fn size(&self) -> usize {
        self.len
    }
    pub fn pieces(&self) -> &[Bytes] {
        &self.pieces
    }
    /// Adds the next piece.
    pub fn push(&mut self, piece: Bytes) {
        if !piece.is_empty() {
            self.len += piece.len();
            self.pieces.push(piece);
        }
    }
    /// The body in one piece (copied only when it came in several).
    pub fn joined(mut self) -> Bytes {
        match self.pieces.len() {
            0 => Bytes::new(),
            1 => self.pieces.pop().unwrap_or_default(),
            _ => {
                let mut all = Vec::with_capacity(self.len);
                for p in &self.pieces {
                    all.extend_from_slice(p);
                }
                Bytes::from(all)
            }
        }
    }
}

impl From<Bytes> for Body {
    fn from(b: Bytes) -> Body {
        Body {
            len: b.len(),
            pieces: if b.is_empty() { Vec::new() } else { vec![b] },
        }
    }
}

/// A request's events and, when it has its own, the answer once they are taken.
pub type Answered = (Vec<Events>, Option<Response<Full<Bytes>>>);

/// How one input type turns requests into events.
pub trait Decode: Send + Sync + 'static {
    /// The batches in a request's (decompressed) body, or why it is refused.
    fn decode(&self, head: &Parts, body: Body) -> Result<Vec<Events>, Reject>;

    /// The tag a request's events most likely get (from its path or the
    /// input's options), so the request can wait for room in its outputs'
    /// buffers before its body is decoded; None: no wait.
    fn tag_hint(&self, _head: &Parts) -> Option<String> {
        None
    }

    /// The answer once the events are accepted (default: 200, no body).
    fn accepted(&self, _head: &Parts) -> Response<Full<Bytes>> {
        Response::new(Full::new(Bytes::new()))
    }

    /// Like [`Decode::decode`], with the answer to give once the events are
    /// taken when it depends on the body (per-item results of an
    /// Elasticsearch `_bulk`, a Splunk HEC ack id); None: [`Decode::accepted`].
    fn decode_answered(&self, head: &Parts, body: Body) -> Result<Answered, Reject> {
        Ok((self.decode(head, body)?, None))
    }

    /// Answers a request that brings no events from its head alone (the
    /// `GET /` version check of an Elasticsearch client, a health check),
    /// or refuses it (a token of the protocol's own scheme); None (default):
    /// only `POST` is taken, its body decoded.
    fn answer_head(&self, _head: &Parts) -> Result<Option<Response<Full<Bytes>>>, Reject> {
        Ok(None)
    }

    /// Whether a request of this method brings events (default: POST
    /// only; Elasticsearch clients send `_bulk` with PUT too).
    fn takes(&self, method: &hyper::Method) -> bool {
        *method == hyper::Method::POST
    }

    /// The answer to a refused request (default: the message as text).
    fn refusal(&self, status: StatusCode, message: &str) -> Response<Full<Bytes>> {
        answer(status, message)
    }

    /// The status of a request refused while a buffer is full (default 503;
    /// Elasticsearch clients retry a 429).
    fn busy_status(&self) -> StatusCode {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

struct Ctx {
    name: String,
    opts: ListenerOptions,
    decode: Arc<dyn Decode>,
    router: LiveRouter,
    stats: Arc<PluginStats>,
    tls: Option<Arc<TlsServer>>,
    connections: Arc<Semaphore>,
    /// Clones live as long as connections; the count tells when all are done.
    live: Arc<()>,
}

/// Binds the listener and spawns its accept loop; the returned tasks end
/// once shutdown was signalled and every connection finished its request.
#[allow(clippy::too_many_arguments)]
pub async fn start(
    name: &str,
    kind: &str,
    opts: ListenerOptions,
    tls: Option<Arc<TlsServer>>,
    decode: Arc<dyn Decode>,
    router: LiveRouter,
    stats: Arc<PluginStats>,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<Vec<JoinHandle<()>>> {
    let addr: SocketAddr = tokio::net::lookup_host(opts.bind.as_str())
        .await
        .map_err(|e| anyhow::anyhow!("{name}: cannot resolve bind {:?}: {e}", opts.bind))?
        .next()
        .ok_or_else(|| anyhow::anyhow!("{name}: bind {:?} resolves to nothing", opts.bind))?;
    let l = crate::net::listen::tcp_listener(addr)
        .map_err(|e| anyhow::anyhow!("{name}: cannot listen on {addr}: {e}"))?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    tracing::info!(input = %name, %addr, %scheme, "{kind} input listening");
    let ctx = Arc::new(Ctx {
        name: name.to_string(),
        tls,
        connections: Arc::new(Semaphore::new(opts.max_connections)),
        opts,
        decode,
        router,
        stats,
        live: Arc::new(()),
    });
    let accept = tokio::spawn(accept(l, ctx.clone(), shutdown.clone()));
    let waiter = {
        let mut sd = shutdown;
        tokio::spawn(async move {
            stopped(&mut sd).await;
            while Arc::strong_count(&ctx.live) > 1 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    Ok(vec![accept, waiter])
}

async fn accept(l: TcpListener, ctx: Arc<Ctx>, shutdown: watch::Receiver<bool>) {
    let mut sd = shutdown.clone();
    loop {
        tokio::select! {
            _ = stopped(&mut sd) => return,
            r = l.accept() => match r {
                Ok((s, peer)) => {
                    let Ok(permit) = ctx.connections.clone().try_acquire_owned() else {
                        PluginStats::add(&ctx.stats.bad_input, 1);
                        tracing::warn!(input = %ctx.name, peer = %peer, limit = ctx.opts.max_connections,
                            "closing connection: max_connections reached");
                        continue;
                    };
                    let _ = s.set_nodelay(true);
                    PluginStats::add(&ctx.stats.connections, 1);
                    let ctx = ctx.clone();
                    let live = ctx.live.clone();
                    let mut sd = shutdown.clone();
                    tokio::spawn(async move {
                        let _live = live;
                        let _permit = permit;
                        let label = peer.to_string();
                        let s = tokio::select! {
                            s = crate::net::tls::accept(&ctx.tls, s, &label) => s,
                            // Shutdown does not wait for a handshake.
                            _ = stopped(&mut sd) => return,
                        };
                        let Some(s) = s else {
                            // A failed handshake was logged with the peer and reason.
                            PluginStats::add(&ctx.stats.bad_input, 1);
                            return;
                        };
                        serve_conn(s, peer, ctx, sd).await;
                    });
                }
                Err(e) => {
                    tracing::warn!(input = %ctx.name, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}

/// Serves HTTP/1.1 requests on one connection until the client closes it,
/// breaks a rule (slow headers, bad framing), or shutdown asks it to end
/// after the request in progress.
async fn serve_conn<S>(s: S, peer: SocketAddr, ctx: Arc<Ctx>, mut shutdown: watch::Receiver<bool>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = {
        let ctx = ctx.clone();
        hyper::service::service_fn(move |req| {
            let ctx = ctx.clone();
            async move { Ok::<_, Infallible>(handle(&ctx, peer, req).await) }
        })
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(ctx.opts.header_timeout)
        .keep_alive(true)
        .serve_connection(TokioIo::new(s), service);
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        _ = stopped(&mut shutdown) => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        PluginStats::add(&ctx.stats.bad_input, 1);
        let reason = if e.is_timeout() {
            format!(
                "no complete request headers within header_timeout ({:?})",
                ctx.opts.header_timeout
            )
        } else {
            e.to_string()
        };
        tracing::warn!(input = %ctx.name, peer = %peer, reason = %reason, "closing connection");
    }
}

/// A plain-text answer: the message and a newline.
pub fn answer(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    let mut body = message.as_bytes().to_vec();
    if !body.is_empty() {
        body.push(b'\n');
    }
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// One request: checks, body, decode, delivery, answer.
async fn handle(ctx: &Ctx, peer: SocketAddr, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let (head, body) = req.into_parts();
    let refused = |r: Reject| {
        PluginStats::add(&ctx.stats.bad_input, 1);
        tracing::warn!(input = %ctx.name, peer = %peer, path = %head.uri.path(),
            status = r.status.as_u16(), reason = %r.message, "request refused");
        let mut a = ctx.decode.refusal(r.status, &r.message);
        if r.status == StatusCode::UNAUTHORIZED && ctx.opts.auth() {
            let scheme = if ctx.opts.users.is_empty() {
                "Bearer"
            } else {
                "Basic realm=\"nagare\""
            };
            a.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(scheme));
        }
        a
    };
    if let Err(r) = authorize(&ctx.opts, &head) {
        return refused(r);
    }
    match ctx.decode.answer_head(&head) {
        Ok(Some(a)) => return a,
        Ok(None) => {}
        Err(r) => return refused(r),
    }
    if !ctx.decode.takes(&head.method) {
        let mut a = refused(Reject::new(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("{} is not accepted; send events with POST", head.method),
        ));
        a.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("POST"));
        return a;
    }
    let body = match read_body(ctx, &head, body).await {
        Ok(b) => b,
        Err(r) => return refused(r),
    };
    PluginStats::add(&ctx.stats.bytes_in, body.size() as u64);
    if let Some(tag) = ctx.decode.tag_hint(&head) {
        // No answer yet if there is no room: deliver() below checks again
        // (and counts what it refuses), after the decode this wait saves
        // while a buffer is full for a moment.
        let deadline = tokio::time::Instant::now() + ctx.opts.wait_for_room;
        // (The body's size: its entries take about as much.)
        ctx.router
            .wait_for_room(&[(&tag, body.size())], deadline)
            .await;
    }
    let (batches, answered) = match ctx.decode.decode_answered(&head, body) {
        Ok(b) => b,
        Err(r) => return refused(r),
    };
    match deliver(ctx, batches).await {
        Ok(()) => answered.unwrap_or_else(|| ctx.decode.accepted(&head)),
        Err(Refused::Busy(why)) => {
            let status = ctx.decode.busy_status();
            tracing::debug!(input = %ctx.name, peer = %peer, reason = %why, status = status.as_u16(), "buffer full: request refused");
            let mut a = ctx.decode.refusal(status, &why);
            let secs = ctx.opts.retry_after.as_secs().max(1);
            a.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            a
        }
        Err(Refused::Failed(why)) => {
            tracing::warn!(input = %ctx.name, peer = %peer, reason = %why, "answering 500");
            ctx.decode.refusal(StatusCode::INTERNAL_SERVER_ERROR, &why)
        }
    }
}

/// Checks `Authorization` against the bearer token and the basic users
/// (either one passes when both are set).
fn authorize(opts: &ListenerOptions, head: &Parts) -> Result<(), Reject> {
    if opts.bearer_token.is_none() && opts.users.is_empty() {
        return Ok(());
    }
    let unauthorized = |m: &str| Reject::new(StatusCode::UNAUTHORIZED, m);
    let Some(given) = head.headers.get(header::AUTHORIZATION) else {
        return Err(unauthorized("authorization required"));
    };
    let given = given.to_str().unwrap_or("");
    let (scheme, value) = given.split_once(' ').unwrap_or((given, ""));
    if scheme.eq_ignore_ascii_case("bearer") {
        if let Some(token) = &opts.bearer_token {
            if same(value.trim().as_bytes(), token.as_bytes()) {
                return Ok(());
            }
        }
        return Err(unauthorized("wrong bearer token"));
    }
    if scheme.eq_ignore_ascii_case("basic") {
        use base64::Engine as _;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(value.trim())
            .unwrap_or_default();
        let (user, pass) = match decoded.iter().position(|&b| b == b':') {
            Some(i) => (&decoded[..i], &decoded[i + 1..]),
            None => (&decoded[..], &[][..]),
        };
        if opts
            .users
            .iter()
            .any(|u| same(user, u.username.as_bytes()) & same(pass, u.password.as_bytes()))
        {
            return Ok(());
        }
        return Err(unauthorized("wrong user name or password"));
    }
    Err(unauthorized("unsupported authorization scheme"))
}

/// Compares secrets in a time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Reads the body within `max_body_size` and `body_timeout`, and undoes
/// its Content-Encoding (gzip, zstd) within `max_body_size` again.
async fn read_body(ctx: &Ctx, head: &Parts, body: Incoming) -> Result<Body, Reject> {
    let max = ctx.opts.max_body_size;
    let too_large = || {
        Reject::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body larger than max_body_size ({max} bytes)"),
        )
    };
    let declared = head
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(too_large());
    }
    let collect = async {
        let mut body = Limited::new(body, max);
        let mut all = Body::default();
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame?.into_data() {
                all.push(data);
            }
        }
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(all)
    };
    let raw = match tokio::time::timeout(ctx.opts.body_timeout, collect).await {
        Err(_) => {
            return Err(Reject::new(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "request body not received within body_timeout ({:?})",
                    ctx.opts.body_timeout
                ),
            ))
        }
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => return Err(too_large()),
        Ok(Err(e)) => return Err(Reject::bad(format!("reading the body: {e}"))),
        Ok(Ok(b)) => b,
    };
    let encoding = head
        .headers
        .get(header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase());
    let decoded = match encoding.as_deref() {
        None | Some("" | "identity") => return Ok(raw),
        Some("gzip" | "x-gzip") => {
            let raw = raw.joined();
            inflate(flate2::read::MultiGzDecoder::new(&raw[..]), max)
        }
        Some("zstd") => {
            let raw = raw.joined();
            match zstd::stream::read::Decoder::new(&raw[..]) {
                Ok(d) => inflate(d, max),
                Err(e) => Err(Some(e)),
            }
        }
        Some(other) => {
            return Err(Reject::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!("Content-Encoding {other:?} is not supported (use gzip or zstd)"),
            ))
        }
    };
    match decoded {
        Ok(b) => Ok(Body::from(b)),
        Err(None) => Err(too_large()),
        Err(Some(e)) => Err(Reject::bad(format!(
            "body does not decompress as {}: {e}",
            encoding.unwrap_or_default()
        ))),
    }
}

/// Reads a decompressing reader to its end; None when it passes `max`.
fn inflate(r: impl Read, max: usize) -> Result<Bytes, Option<std::io::Error>> {
    let mut out = Vec::new();
    r.take(max as u64 + 1).read_to_end(&mut out).map_err(Some)?;
    if out.len() > max {
        return Err(None);
    }
    Ok(Bytes::from(out))
}

/// Why events were not taken.
enum Refused {
    /// A buffer is full or closing: the client should send again later (503).
    Busy(String),
    /// `ack = "delivered"` and an output gave up on the events (500).
    Failed(String),
}

/// Hands the batches through the filters to every output they route to.
/// Refuses before appending anything when a matched buffer is full, so a
/// 503 means none of the request was taken; only a buffer that fills while
/// the request is appended may have taken part of it (the client's retry
/// then duplicates that part: at least once).
async fn deliver(ctx: &Ctx, batches: Vec<Events>) -> Result<(), Refused> {
    let mut plan = Vec::new();
    let mut events = 0u64;
    // The route table of this request, let go before the awaits below (a
    // reload drains removed outputs once no request holds the old table).
    let (_, router) = ctx.router.load();
    for b in batches.into_iter().filter(|b| b.count > 0) {
        events += b.count as u64;
        let route = router.route(&b.tag);
        let parts = [Bytes::from(b.entries)];
        match router.filter(&route, &b.tag, &parts, b.count) {
            Some(filtered) => plan.extend(
                filtered
                    .into_iter()
                    .map(|f| (f.tag, f.route.outputs.clone(), f.parts, f.count)),
            ),
            None => plan.push((b.tag, route.outputs.clone(), parts.to_vec(), b.count)),
        }
    }
    drop(router);
    PluginStats::add(&ctx.stats.events_in, events);
    for (tag, outputs, parts, count) in &plan {
        let len = parts.iter().map(|p| p.len()).sum();
        if *count > 0 {
            if let Some(full) = outputs.iter().find(|o| !o.has_room(len)) {
                PluginStats::add(&ctx.stats.rejected, events);
                return Err(Refused::Busy(format!(
                    "buffer of {} is full; events of tag {tag:?} not taken, send again later",
                    full.name()
                )));
            }
        }
    }
    let delivered = ctx.opts.ack == AckMode::Delivered;
    let mut waits = Vec::new();
    for (tag, outputs, parts, count) in &plan {
        if outputs.is_empty() && *count > 0 {
            PluginStats::add(&ctx.stats.errors, 1);
            tracing::warn!(input = %ctx.name, tag = %tag, events = count, "no output matches this tag; events discarded");
        }
        crate::router::tap_hub::offer(tag, parts, *count);
        for out in outputs.iter().filter(|_| *count > 0) {
            let rx = out
                .append(tag, parts, *count, true, delivered, &[])
                .await
                .map_err(|e| Refused::Busy(format!("{e}; send again later")))?;
            waits.extend(rx);
        }
    }
    for rx in waits {
        if rx.await != Ok(true) {
            return Err(Refused::Failed(format!(
                "{events} events were not delivered downstream (the output gave up on them)"
            )));
        }
    }
    PluginStats::add(&ctx.stats.events_out, events);
    Ok(())
}
