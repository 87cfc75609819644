//! `scribe`: a Scribe server (Thrift framed transport, binary protocol), as
//! Fluentd's in_scribe: each `Log(list<LogEntry{category, message}>)` call
//! becomes events tagged `<add_prefix>.<category>` whose record is
//! `{"message": <message>}` (format "text") or the message parsed as a JSON
//! object (format "json").
//!
//! The answer is the acknowledgement: `OK` once every entry of the call is
//! in every matched output's buffer (fsync'd for file buffers), `TRY_LATER`
//! when a matched output's buffer is still full after `wait_for_room`. A
//! call answered TRY_LATER was not taken at all: the client sends it again,
//! and nothing is dropped. A connection is held only that long while
//! buffers are full, unlike the forward input, because Scribe clients wait
//! for the answer; not at all would turn every full moment into a client's
//! back-off and a resend of the whole call.
//!
//! With `[input.tls]` the framed transport runs inside TLS (Thrift's
//! `TSSLSocket`/`TSSLTransport` clients).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use nagare_core::metrics::PluginStats;
use nagare_core::plugin::{BuildContext, Listen, OptionError};
use nagare_core::units::{Dur, Size};
use nagare_forward::EventTime;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::inputs::common::append::append_batch;
use crate::inputs::common::lines::encode_line;
use crate::inputs::common::{connection_options, DEFAULT_WAIT_FOR_ROOM};
use crate::inputs::{Input, InputContext, InputPlugin};
use crate::net::tls::TlsServer;
use crate::parsers::{Parser, ParserConfig, ParserType};
use crate::proto::thrift::{self, ResultCode};
use crate::router::LiveRouter;

/// How a Scribe message becomes a record.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum MessageFormat {
    /// `{"<message_key>": "<message>"}`.
    #[default]
    Text,
    /// The message is a JSON object: it is the record (a `time` field that
    /// reads as a time is the event time). A message that is not one is
    /// kept as text with a `parse_error` field.
    Json,
}

connection_options!(
    /// The `scribe` input.
    ScribeInputConfig {
        /// "HOST:PORT" to listen on (default "0.0.0.0:1463", Scribe's port).
        #[serde_inline_default("0.0.0.0:1463".into())]
        bind: String,
        /// The tag is "<add_prefix>.<category>"; without it, the category.
        #[serde(default)]
        add_prefix: Option<String>,
        /// "text" (default) or "json".
        #[serde(default)]
        format: MessageFormat,
        /// Format "text": the record field that holds the message (default "message").
        #[serde_inline_default("message".into())]
        message_key: String,
        /// Remove one trailing newline from each message (default false).
        #[serde(default)]
        remove_newline: bool,
        /// Largest Thrift frame (one call) accepted; a larger one closes the
        /// connection (default "32MiB").
        #[serde_inline_default(Size::mib(32))]
        max_frame_size: Size,
        /// A call must arrive whole within this time of its first byte, or the
        /// connection is closed (slow clients) (default "1m").
        #[serde_inline_default(Dur::mins(1))]
        request_timeout: Dur,
        /// While a matched output's buffer is full, a call waits this long for
        /// room before it is answered TRY_LATER (default "1s"; "0s" answers at
        /// once). A chunk delivered meanwhile lets the call in: a Scribe client
        /// told TRY_LATER backs off (Scribe's own network store for
        /// `retry_interval`, 300 s by default) and sends the whole call again.
        #[serde_inline_default(DEFAULT_WAIT_FOR_ROOM)]
        wait_for_room: Dur,
    }
);

/// The tag of entries whose category is empty (as out_scribe's default category).
const EMPTY_CATEGORY: &str = "unknown";

impl InputPlugin for ScribeInputConfig {
    const TYPE: &'static str = "scribe";
    const DOC: &'static str = "Receives Scribe `Log` calls (Thrift framed, binary protocol) and answers `OK`, or `TRY_LATER` while buffers are full (see [Scribe](scribe.md)).";

    fn build(self, cx: &mut BuildContext) -> Result<Box<dyn Input>, OptionError> {
        let addr =
            nagare_core::address::resolve(&self.bind).map_err(|e| OptionError::new("bind", e))?;
        cx.listen("bind", Listen::Tcp(addr));
        self.check_connections()?;
        if self.max_frame_size.0 < 64 || self.max_frame_size.0 > i32::MAX as u64 {
            return Err(OptionError::new(
                "max_frame_size",
                "must be from 64 bytes to 2GiB (a Thrift frame's length is an i32)",
            ));
        }
        if self.add_prefix.as_deref() == Some("") {
            return Err(OptionError::new(
                "add_prefix",
                "must not be empty (leave it out instead)",
            ));
        }
        if self.message_key.is_empty() {
            return Err(OptionError::new("message_key", "must not be empty"));
        }
        let tls = TlsServer::build(self.tls.as_ref(), cx)?;
        Ok(Box::new(ScribeInput { cfg: self, tls }))
    }
}

/// A built scribe input: its options and its TLS files, loaded.
struct ScribeInput {
    cfg: ScribeInputConfig,
    tls: Option<Arc<TlsServer>>,
}

#[async_trait::async_trait]
impl Input for ScribeInput {
    async fn start(self: Box<Self>, cx: InputContext) -> anyhow::Result<Vec<JoinHandle<()>>> {
        let ScribeInput { cfg: this, tls } = *self;
        let name = cx.name.clone();
        let addr: SocketAddr = tokio::net::lookup_host(this.bind.as_str())
            .await
            .map_err(|e| anyhow::anyhow!("{name}: cannot resolve bind {:?}: {e}", this.bind))?
            .next()
            .ok_or_else(|| anyhow::anyhow!("{name}: bind {:?} resolves to nothing", this.bind))?;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| anyhow::anyhow!("{name}: cannot listen on {addr}: {e}"))?;
        let parser = Parser::new(&ParserConfig {
            kind: match this.format {
                MessageFormat::Text => ParserType::None,
                MessageFormat::Json => ParserType::Json,
            },
            message_key: this.message_key.clone(),
            // The record is the message as sent; a `time` field only gives the time.
            keep_time_key: true,
            ..ParserConfig::default()
        })?;
        tracing::info!(input = %name, %addr, "scribe input listening");
        let ctx = Arc::new(Ctx {
            slots: Arc::new(Semaphore::new(this.max_connections)),
            cfg: this,
            tls,
            name,
            router: cx.router,
            stats: cx.stats,
            parser,
        });
        Ok(vec![tokio::spawn(accept(listener, ctx, cx.shutdown))])
    }
}

/// What the connections of one input share.
struct Ctx {
    cfg: ScribeInputConfig,
    name: String,
    router: LiveRouter,
    stats: Arc<PluginStats>,
    parser: Parser,
    tls: Option<Arc<TlsServer>>,
    /// One permit per open connection (`max_connections`).
    slots: Arc<Semaphore>,
}

async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|v| *v).await;
}

/// Accepts connections until shutdown, then waits for the open ones to end.
async fn accept(l: TcpListener, ctx: Arc<Ctx>, shutdown: watch::Receiver<bool>) {
    let mut sd = shutdown.clone();
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let (s, peer) = tokio::select! {
            _ = stopped(&mut sd) => break,
            // Reaps finished connection tasks so the set stays small.
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
            r = l.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(input = %ctx.name, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            }
        };
        let Ok(slot) = ctx.slots.clone().try_acquire_owned() else {
            PluginStats::add(&ctx.stats.errors, 1);
            let reason = format!("max_connections ({}) reached", ctx.cfg.max_connections);
            tracing::warn!(input = %ctx.name, peer = %peer, reason = %reason, "closing connection");
            continue;
        };
        PluginStats::add(&ctx.stats.connections, 1);
        let _ = s.set_nodelay(true);
        let (ctx, mut sd) = (ctx.clone(), shutdown.clone());
        conns.spawn(async move {
            let _slot = slot;
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
            if let Err(reason) = serve(s, &label, &ctx, sd).await {
                PluginStats::add(&ctx.stats.bad_input, 1);
                tracing::warn!(input = %ctx.name, peer = %peer, reason = %reason, "closing connection");
            }
        });
    }
    while conns.join_next().await.is_some() {}
}

/// Serves one connection: reads a call, answers it, until the peer closes.
async fn serve<S>(
    mut s: S,
    peer: &str,
    ctx: &Ctx,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut answer = Vec::with_capacity(64);
    while let Some(frame) = read_frame(&mut s, &mut buf, ctx, &mut shutdown).await? {
        let m = thrift::decode_message(&frame).map_err(|e| e.to_string())?;
        answer.clear();
        match (m.kind, m.name) {
            (thrift::CALL, b"Log") => {
                let code = take_call(m.body, ctx, peer).await?;
                thrift::encode_log_reply(&mut answer, m.seqid, code);
            }
            // Scribe's fb303 status calls and anything else: a Thrift error
            // the client understands; the connection goes on.
            (thrift::CALL, name) => {
                let name = String::from_utf8_lossy(name).into_owned();
                tracing::debug!(input = %ctx.name, peer = %peer, method = %name, "unknown method");
                let text = format!("unknown method {name:?}: this server has only Log");
                thrift::encode_exception(
                    &mut answer,
                    name.as_bytes(),
                    m.seqid,
                    thrift::UNKNOWN_METHOD,
                    &text,
                );
            }
            (kind, _) => {
                return Err(format!(
                    "Thrift message type {kind} where a call was expected"
                ))
            }
        }
        s.write_all(&answer)
            .await
            .map_err(|e| format!("writing the answer: {e}"))?;
    }
    Ok(())
}

/// Reads the next whole frame's payload; None when the peer closed between
/// frames or shutdown came between frames.
async fn read_frame<S>(
    s: &mut S,
    buf: &mut BytesMut,
    ctx: &Ctx,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<Option<Bytes>, String>
where
    S: AsyncRead + Unpin,
{
    let max = ctx.cfg.max_frame_size.0 as usize;
    // When the first byte of the frame being read arrived.
    let mut started = (!buf.is_empty()).then(Instant::now);
    loop {
        if let Some(len) = thrift::frame_len(buf) {
            let len = len.map_err(|e| e.to_string())?;
            if len > max {
                return Err(format!(
                    "a frame of {len} bytes is larger than the limit (max_frame_size = {})",
                    ctx.cfg.max_frame_size
                ));
            }
            if buf.len() >= 4 + len {
                buf.advance(4);
                return Ok(Some(buf.split_to(len).freeze()));
            }
            buf.reserve(4 + len - buf.len());
        } else if buf.capacity() - buf.len() < 4096 {
            buf.reserve(64 * 1024);
        }
        let wait = match started {
            Some(t) => ctx.cfg.request_timeout.0.saturating_sub(t.elapsed()),
            None => ctx.cfg.idle_timeout.0,
        };
        let read = tokio::select! {
            r = tokio::time::timeout(wait, s.read_buf(buf)) => r,
            _ = stopped(shutdown), if buf.is_empty() => return Ok(None),
        };
        match read {
            Err(_) if started.is_some() => {
                return Err(format!(
                "slow client: a call not complete after request_timeout = {} ({} bytes received)",
                ctx.cfg.request_timeout,
                buf.len()
            ))
            }
            Err(_) => return Err(format!("idle for {}", ctx.cfg.idle_timeout)),
            Ok(Err(e)) => return Err(format!("read error: {e}")),
            Ok(Ok(0)) if buf.is_empty() => return Ok(None),
            Ok(Ok(0)) => {
                return Err(format!(
                    "connection closed inside a frame ({} bytes unread)",
                    buf.len()
                ))
            }
            Ok(Ok(_)) => {
                // At shutdown too, a call begun gets up to request_timeout to arrive.
                started.get_or_insert_with(Instant::now);
            }
        }
    }
}

/// The entries of one category, in the order they came.
struct Run<'a> {
    category: &'a [u8],
    entries: Vec<u8>,
    count: u32,
}

/// Takes a Log call's entries: into every matched output's buffer (OK), or
/// not at all when one of those buffers is full (TRY_LATER).
async fn take_call(args: &[u8], ctx: &Ctx, peer: &str) -> Result<ResultCode, String> {
    let now = EventTime::now();
    let mut runs: Vec<Run> = Vec::new();
    let mut unparsed = 0u64;
    thrift::log_entries(args, |category, message| {
        let message = match message {
            [m @ .., b'\n'] if ctx.cfg.remove_newline => m,
            m => m,
        };
        let run = match runs.last_mut() {
            Some(r) if r.category == category => r,
            _ => {
                // Most calls have one category: its entries take about the
                // call's size (a msgpack entry is a Thrift one plus a few
                // bytes), allocated once rather than doubled up to it.
                let size = if runs.is_empty() {
                    args.len() + args.len() / 8
                } else {
                    0
                };
                runs.push(Run {
                    category,
                    entries: Vec::with_capacity(size),
                    count: 0,
                });
                runs.last_mut().expect("just pushed")
            }
        };
        if !encode_line(&mut run.entries, now, message, &ctx.parser, None) {
            unparsed += 1;
        }
        run.count += 1;
    })
    .map_err(|e| e.to_string())?;
    let runs: Vec<(String, Vec<u8>, u32)> = runs
        .into_iter()
        .map(|mut r| {
            // The buffer counts a big batch at its length: the allocation
            // it keeps alive must be about that (several categories).
            if r.entries.capacity() > r.entries.len() + r.entries.len() / 4 + 4096 {
                r.entries.shrink_to_fit();
            }
            (tag_of(r.category, ctx), r.entries, r.count)
        })
        .collect();
    let total: u64 = runs.iter().map(|r| r.2 as u64).sum();
    // Every buffer must have room before anything is appended, so that a
    // TRY_LATER call was taken nowhere and its resend duplicates nothing.
    let wanted: Vec<(&str, usize)> = runs
        .iter()
        .map(|(tag, entries, _)| (tag.as_ref(), entries.len()))
        .collect();
    let deadline = Instant::now() + ctx.cfg.wait_for_room.0;
    let full = ctx.router.wait_for_room(&wanted, deadline).await;
    if let Some(output) = full {
        PluginStats::add(&ctx.stats.rejected, total);
        tracing::debug!(input = %ctx.name, peer = %peer, %output, events = total,
            "buffer full: answered TRY_LATER");
        return Ok(ResultCode::TryLater);
    }
    if unparsed > 0 {
        PluginStats::add(&ctx.stats.errors, unparsed);
    }
    for (tag, entries, count) in runs {
        let ok = append_batch(
            &ctx.name,
            &ctx.router,
            &ctx.stats,
            &tag,
            Bytes::from(entries),
            count,
            true,
        )
        .await;
        if !ok {
            // A buffer refused (shutting down, throw, disk): the client sends
            // the call again, here or to another server.
            PluginStats::add(&ctx.stats.rejected, total);
            return Ok(ResultCode::TryLater);
        }
    }
    Ok(ResultCode::Ok)
}

/// `<add_prefix>.<category>`; an empty category is "unknown".
fn tag_of(category: &[u8], ctx: &Ctx) -> String {
    let category = match String::from_utf8_lossy(category) {
        c if c.is_empty() => EMPTY_CATEGORY.into(),
        c => c,
    };
    match &ctx.cfg.add_prefix {
        Some(p) => format!("{p}.{category}"),
        None => category.into_owned(),
    }
}
