//! `forward`: Fluentd's forward protocol v1 server on TCP or a UNIX socket,
//! with the shared-key handshake, acks, and UDP heartbeat answers.
//!
//! A connection reads big blocks, cuts every complete frame out of its buffer
//! without copying, groups consecutive frames of one tag into one batch, and
//! appends it to the outputs its tag routes to. While an output's buffer is
//! full (overflow_action "block") the connection stops reading, so TCP pushes
//! back on the sender. Acks go out only after the batch is in every matched
//! buffer.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use nagare_forward::handshake::{ServerAuth, User};
use nagare_forward::{encode_ack, scan_frame_resumed, EventFrame, EventTime, Limits};
use serde::Deserialize;

use crate::inputs::common::AckMode;
use crate::net::listen::{remove_stale_socket, tcp_listener};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UdpSocket, UnixListener};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::buffer::{Origin, SHARE_THRESHOLD};
use nagare_core::units::{Dur, Size};
use crate::inputs::common::dedup::RecentIds;
use crate::proto::forward_io;
use crate::router::{LiveRouter, Route};
use crate::inputs::{Input, InputContext, InputPlugin};
use nagare_core::plugin::{BuildContext, Listen, OptionError};
use nagare_core::metrics::PluginStats;
use crate::net::tls::{self, TlsOptions, TlsServer};

/// Users allowed by a forward input with `shared_key`.
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    /// The name the client sends in PING.
    pub username: String,
    /// Checked through the password digest; never sent in clear.
    pub password: String,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForwardInputConfig {
    /// "HOST:PORT" to listen on (TCP, and UDP for heartbeats).
    #[serde(default)]
    pub bind: Option<String>,
    /// A UNIX socket path to listen on instead of `bind`.
    #[serde(default)]
    pub path: Option<String>,
    /// Require the HELO/PING/PONG handshake with this shared key.
    #[serde(default)]
    pub shared_key: Option<String>,
    /// With shared_key: also require one of these users ([[input.users]]).
    #[serde(default)]
    pub users: Vec<UserConfig>,
    /// Hostname sent in PONG (default: this machine's hostname).
    #[serde(default)]
    pub self_hostname: Option<String>,
    /// Largest frame accepted; a larger one closes the connection (default "32MiB").
    #[serde(default = "default_max_frame")]
    pub max_frame_size: Size,
    /// Largest size a compressed frame may expand to (default "256MiB").
    #[serde(default = "default_max_decompressed")]
    pub max_decompressed_size: Size,
    /// A connection that sends nothing for this long is closed (default "5m").
    #[serde(default = "default_idle")]
    pub idle_timeout: Dur,
    /// Answer UDP heartbeats on the same port (default true).
    #[serde(default = "nagare_core::plugin::yes")]
    pub heartbeat: bool,
    /// Remember this many recently acked chunk ids, and ack a resent chunk
    /// again without storing it twice (default 10000; 0 turns it off).
    #[serde(default = "default_dedup_window")]
    pub dedup_window: usize,
    /// Keep the remembered chunk ids in this file, so they survive a restart.
    #[serde(default)]
    pub dedup_path: Option<String>,
    /// When to answer a sender's ack request: "buffered" (default; the batch is
    /// in every matched output's buffer, fsync'd for file buffers) or
    /// "delivered" (every matched output delivered it downstream).
    #[serde(default)]
    pub ack: AckMode,
    /// TLS (`[input.tls]`: `cert`, `key`, and `ca` to require client
    /// certificates); as Fluentd's `<transport tls>` and Fluent Bit's `tls on`.
    #[serde(default)]
    pub tls: Option<TlsOptions>,
    /// Keep each chunk a sender asks to ack (a frame with the `chunk`
    /// option) whole: it goes into chunks of its own in the outputs'
    /// buffers, sent on at once, whose ids are derived from the sender's
    /// chunk id. A chunk the sender resends through another nagare (its
    /// first one died before acking) then reaches the next hop with the same
    /// ids, and that nagare's dedup window drops the copy: no duplicates
    /// across a failover (docs/deployment.md). Default: on with ack =
    /// "delivered", off otherwise (off, the sender's chunks are merged into
    /// bigger ones and a resend through another nagare can arrive twice).
    #[serde(default)]
    pub keep_chunks: Option<bool>,
}

impl ForwardInputConfig {
    /// Whether senders' chunks are kept whole (`keep_chunks`).
    fn keeps_chunks(&self) -> bool {
        self.keep_chunks.unwrap_or(self.ack == AckMode::Delivered)
    }
}

fn default_dedup_window() -> usize {
    10_000
}

fn default_max_frame() -> Size {
    Size(32 << 20)
}
fn default_max_decompressed() -> Size {
    Size(256 << 20)
}
fn default_idle() -> Dur {
    Dur(Duration::from_secs(300))
}

struct Ctx {
    cfg: ForwardInputConfig,
    name: String,
    router: LiveRouter,
    stats: Arc<PluginStats>,
    limits: Limits,
    /// The handshake's settings, when a shared key is required.
    auth: Option<ServerAuth>,
    /// Clones live as long as connections; the count tells when all are done.
    live: Arc<()>,
    recent: RecentIds,
    tls: Option<Arc<TlsServer>>,
    /// `keep_chunks`: a frame with a chunk id is a batch of its own.
    keep: bool,
}

pub async fn start(
    name: &str,
    cfg: ForwardInputConfig,
    tls: Option<Arc<TlsServer>>,
    router: LiveRouter,
    stats: Arc<PluginStats>,
    stored_ids: &[Bytes],
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<Vec<JoinHandle<()>>> {
    let limits = Limits {
        max_frame_size: cfg.max_frame_size.0 as usize,
        max_decompressed_size: cfg.max_decompressed_size.0 as usize,
    };
    let hostname = cfg
        .self_hostname
        .clone()
        .unwrap_or_else(|| gethostname::gethostname().to_string_lossy().into_owned());
    let recent = RecentIds::open(
        cfg.dedup_window,
        cfg.dedup_path.as_deref().map(std::path::Path::new),
    )
    .map_err(|e| anyhow::anyhow!("{name}: dedup_path: {e}"))?;
    recent.insert_all(stored_ids);
    let auth = cfg.shared_key.as_ref().map(|key| {
        let users = cfg
            .users
            .iter()
            .map(|u| User {
                username: u.username.clone().into_bytes(),
                password: u.password.clone().into_bytes(),
            })
            .collect();
        ServerAuth::new(key.as_bytes(), hostname.as_bytes(), users)
    });
    let ctx = Arc::new(Ctx {
        keep: cfg.keeps_chunks(),
        recent,
        cfg: cfg.clone(),
        name: name.to_string(),
        router,
        stats,
        limits,
        auth,
        live: Arc::new(()),
        tls,
    });
    let mut tasks = Vec::new();
    match (&cfg.bind, &cfg.path) {
        (Some(bind), None) => {
            let addr: SocketAddr = tokio::net::lookup_host(bind.as_str())
                .await
                .map_err(|e| anyhow::anyhow!("{name}: cannot resolve bind {bind:?}: {e}"))?
                .next()
                .ok_or_else(|| anyhow::anyhow!("{name}: bind {bind:?} resolves to nothing"))?;
            // One listener: each connection is a task of its own, which the
            // runtime spreads over its workers. (No SO_REUSEPORT: it would let
            // a second nagare bind the same port and take connections.)
            // The listener an input this reload replaced left open, else a new one.
            let l = match crate::topology::handover::take_tcp(addr) {
                Some(l) => TcpListener::from_std(l),
                None => tcp_listener(addr),
            };
            let l = l.map_err(|e| anyhow::anyhow!("{name}: cannot listen on {addr}: {e}"))?;
            tasks.push(tokio::spawn(accept_tcp(l, addr, ctx.clone(), shutdown.clone())));
            if cfg.heartbeat {
                let udp = UdpSocket::bind(addr)
                    .await
                    .map_err(|e| anyhow::anyhow!("{name}: cannot bind UDP {addr}: {e}"))?;
                tasks.push(tokio::spawn(answer_heartbeats(udp, shutdown.clone())));
            }
            tracing::info!(input = %name, %addr, "forward input listening");
        }
        (None, Some(path)) => {
            let l = match crate::topology::handover::take_unix(Path::new(path)) {
                Some(l) => UnixListener::from_std(l),
                None => remove_stale_socket(Path::new(path)).and_then(|_| UnixListener::bind(path)),
            };
            let l = l.map_err(|e| anyhow::anyhow!("{name}: cannot listen on {path}: {e}"))?;
            tasks.push(tokio::spawn(accept_unix(l, ctx.clone(), shutdown.clone())));
            tracing::info!(input = %name, path = %path, "forward input listening");
        }
        _ => anyhow::bail!("{name}: set exactly one of `bind` or `path`"),
    }
    // A task that ends once the listeners stopped and every connection is done.
    let waiter = {
        let ctx = ctx.clone();
        let mut sd = shutdown.clone();
        tokio::spawn(async move {
            stopped(&mut sd).await;
            while Arc::strong_count(&ctx.live) > 1 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    tasks.push(waiter);
    Ok(tasks)
}

async fn answer_heartbeats(sock: UdpSocket, mut shutdown: watch::Receiver<bool>) {
    let mut b = [0u8; 64];
    loop {
        let received = tokio::select! {
            r = sock.recv_from(&mut b) => r,
            _ = stopped(&mut shutdown) => return,
        };
        match received {
            Ok((_, peer)) => {
                let _ = sock.send_to(b"\0", peer).await;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// Resolves once shutdown has been signalled.
async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|v| *v).await;
}

async fn accept_tcp(
    l: TcpListener,
    addr: SocketAddr,
    ctx: Arc<Ctx>,
    shutdown: watch::Receiver<bool>,
) {
    let mut sd = shutdown.clone();
    loop {
        tokio::select! {
            _ = stopped(&mut sd) => {
                // A reload passes the open listener to the input replacing this one.
                if let Ok(l) = l.into_std() {
                    drop(crate::topology::handover::give_tcp(addr, l));
                }
                return;
            }
            r = l.accept() => match r {
                Ok((s, peer)) => {
                    let _ = s.set_nodelay(true);
                    spawn_conn(s, peer.to_string(), &ctx, &shutdown);
                }
                Err(e) => {
                    tracing::warn!(input = %ctx.name, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}

async fn accept_unix(l: UnixListener, ctx: Arc<Ctx>, shutdown: watch::Receiver<bool>) {
    let mut sd = shutdown.clone();
    loop {
        tokio::select! {
            _ = stopped(&mut sd) => {
                let path = ctx.cfg.path.clone().unwrap_or_default();
                if let Ok(l) = l.into_std() {
                    drop(crate::topology::handover::give_unix(Path::new(&path), l));
                }
                return;
            }
            r = l.accept() => match r {
                Ok((s, _)) => {
                    let peer = ctx.cfg.path.clone().unwrap_or_default();
                    spawn_conn(s, format!("unix:{peer}"), &ctx, &shutdown);
                }
                Err(e) => {
                    tracing::warn!(input = %ctx.name, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}

fn spawn_conn<S>(s: S, peer: String, ctx: &Arc<Ctx>, shutdown: &watch::Receiver<bool>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    PluginStats::add(&ctx.stats.connections, 1);
    let ctx = ctx.clone();
    let live = ctx.live.clone();
    let sd = shutdown.clone();
    tokio::spawn(async move {
        let _live = live;
        // A failed TLS handshake has been logged with its peer and reason.
        let Some(s) = tls::accept(&ctx.tls, s, &peer).await else {
            PluginStats::add(&ctx.stats.bad_input, 1);
            return;
        };
        if let Err(reason) = serve(s, &peer, &ctx, sd).await {
            PluginStats::add(&ctx.stats.bad_input, 1);
            tracing::warn!(input = %ctx.name, peer = %peer, reason = %reason, "closing connection");
        }
    });
}

/// A connection's last route, valid for its tag in one table generation.
struct Cached {
    generation: u64,
    tag: String,
    route: Route,
}

/// Frames of one tag waiting to be appended together.
struct Pending {
    tag: String,
    parts: Vec<Bytes>,
    /// Bytes in `parts`.
    len: usize,
    count: u32,
    acks: Vec<Bytes>,
}

/// Consecutive frames of one tag are grouped into one batch up to about this
/// size. Filters that rewrite records (modify, lua, ...) make a batch bigger,
/// and an output's buffer cuts a batch larger than its `chunk_limit_size`
/// entry by entry, which costs a walk over every event (a fifth of the CPU of
/// a modify relay with 512 KiB chunks, when whole 512 KiB reads were one
/// batch). A quarter of a MiB keeps filtered batches whole in chunks of
/// 512 KiB and more, and is still hundreds of events per batch.
const MAX_BATCH_BYTES: usize = 256 * 1024;

async fn serve<S>(
    mut s: S,
    peer: &str,
    ctx: &Ctx,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut rb = RecvBuf::default();
    if let Some(auth) = &ctx.auth {
        let wait = ctx.cfg.idle_timeout.0.min(Duration::from_secs(30));
        forward_io::serve_handshake(&mut s, &mut rb.buf, &auth.start(), wait).await?;
    }
    let mut cached: Option<Cached> = None;
    let mut acks_out = Vec::new();
    let mut closing = false;
    loop {
        // Cut every complete frame out of the buffer.
        let mut pending: Option<Pending> = None;
        let now = EventTime::now();
        let mut bad = None;
        loop {
            let frame = match next_frame(&mut rb, ctx, now, peer) {
                Ok(Next::Frame(f)) => f,
                Ok(Next::Skipped) => continue,
                Ok(Next::NeedMore) => break,
                Err(e) => {
                    // Frames before the bad one are still delivered and acked.
                    bad = Some(e);
                    break;
                }
            };
            PluginStats::add(&ctx.stats.bytes_in, frame.entries.len() as u64);
            if let Some(id) = frame.chunk.as_ref().filter(|id| ctx.recent.contains(id)) {
                // A resend of a chunk already stored: ack it again, store nothing.
                PluginStats::add(&ctx.stats.duplicates, frame.count as u64);
                tracing::debug!(input = %ctx.name, peer = %peer, events = frame.count,
                    "resent chunk already stored; acked without storing it again");
                match &mut pending {
                    // (With keep_chunks a batch carries one sender's ack.)
                    Some(p) if !ctx.keep => p.acks.push(id.clone()),
                    _ => {
                        acks_out.clear();
                        encode_ack(&mut acks_out, id);
                        s.write_all(&acks_out)
                            .await
                            .map_err(|e| format!("writing ack: {e}"))?;
                    }
                }
                continue;
            }
            // keep_chunks: a sender's chunk is a batch of its own (its
            // events are kept together, apart from any other's).
            let alone = ctx.keep && frame.chunk.is_some();
            match &mut pending {
                Some(p)
                    if p.tag == frame.tag
                        && p.len < MAX_BATCH_BYTES
                        && !alone
                        && (!ctx.keep || p.acks.is_empty()) =>
                {
                    p.len += frame.entries.len();
                    p.parts.push(frame.entries);
                    p.count += frame.count;
                    p.acks.extend(frame.chunk);
                }
                _ => {
                    if let Some(p) = pending.take() {
                        dispatch(p, ctx, &mut cached, &mut s, &mut acks_out).await?;
                    }
                    pending = Some(Pending {
                        tag: frame.tag,
                        len: frame.entries.len(),
                        parts: vec![frame.entries],
                        count: frame.count,
                        acks: frame.chunk.into_iter().collect(),
                    });
                }
            }
        }
        if let Some(p) = pending.take() {
            dispatch(p, ctx, &mut cached, &mut s, &mut acks_out).await?;
        }
        if let Some(e) = bad {
            return Err(e);
        }
        if closing {
            return Ok(());
        }
        rb.make_room();
        let buf = &mut rb.buf;
        let read = tokio::select! {
            r = tokio::time::timeout(ctx.cfg.idle_timeout.0, s.read_buf(buf)) => r,
            _ = stopped(&mut shutdown) => {
                // Take what the peer already sent, then stop.
                closing = true;
                match tokio::time::timeout(Duration::from_millis(50), s.read_buf(buf)).await {
                    Ok(r) => Ok(r),
                    Err(_) => continue,
                }
            }
        };
        match read {
            Err(_) => return Err(format!("idle for {}", ctx.cfg.idle_timeout)),
            Ok(Err(e)) => return Err(format!("read error: {e}")),
            Ok(Ok(0)) => {
                if buf.is_empty() {
                    return Ok(());
                }
                return Err(format!(
                    "connection closed inside a frame ({} bytes unread)",
                    buf.len()
                ));
            }
            Ok(Ok(_)) => {}
        }
    }
}

/// What the next step of cutting frames out of the buffer gave.
enum Next {
    Frame(EventFrame),
    /// A frame that is not logs (Fluent Bit metrics or traces): counted, skipped.
    Skipped,
    NeedMore,
}

/// A connection's receive buffer. Frames are cut off it without copying,
/// and an output's buffer keeps a big batch as it is, with the whole
/// allocation it sits in (`buffer::SHARE_THRESHOLD`). So a big frame whose
/// size its header gives is read into an allocation of its own size, and a
/// big frame that arrived in a read shared with other frames is copied out;
/// small frames are copied by the buffer and free the receive buffer once
/// appended.
#[derive(Default)]
struct RecvBuf {
    buf: BytesMut,
    /// `buf` starts with a frame being read into an allocation of its own.
    own: bool,
    /// How far the scan of the incomplete frame at `buf`'s start got, so a
    /// frame that comes in many reads is scanned once, not once per read.
    progress: nagare_forward::ScanProgress,
}

/// Read size while frames are small (several frames per read).
const READ_SIZE: usize = 256 * 1024;
/// Room after a PackedForward payload for the options map, whose size the
/// header does not give.
const OPTIONS_ROOM: usize = 256;

impl RecvBuf {
    /// Makes room for the next read.
    fn make_room(&mut self) {
        let len = self.buf.len();
        // The last scan's least length of the frame at the start (0 when
        // the buffer holds no partial frame).
        let frame = if len == 0 { 0 } else { self.progress.need };
        if frame >= SHARE_THRESHOLD {
            let mut size = frame + OPTIONS_ROOM;
            if !self.own || self.buf.capacity() < size {
                if self.own {
                    // A need that grows read by read (Forward mode: no
                    // header gives the frame's length) doubles the
                    // allocation rather than copying the frame per read.
                    size = size.max(2 * self.buf.capacity());
                }
                self.move_to(size);
                self.own = true;
            }
        } else {
            let want = frame.saturating_sub(len).max(READ_SIZE / 4);
            if self.buf.capacity() - len < want {
                // Reuses the allocation when no frame cut from it is alive.
                self.buf.reserve(want.max(READ_SIZE));
            }
        }
    }

    /// Moves the unread bytes to a new allocation of `size` bytes. The old
    /// one stays only while frames cut from it are alive.
    fn move_to(&mut self, size: usize) {
        let mut moved = BytesMut::with_capacity(size);
        moved.extend_from_slice(&self.buf);
        self.buf = moved;
    }

    /// Cuts the first `len` bytes off (a whole frame).
    fn cut(&mut self, len: usize) -> Bytes {
        let own = std::mem::take(&mut self.own);
        let frame = self.buf.split_to(len);
        if own || len < SHARE_THRESHOLD {
            frame.freeze()
        } else {
            Bytes::copy_from_slice(&frame)
        }
    }
}

/// Entries the codec built (decompressed, or rewritten to canonical times)
/// sit in a Vec that may have grown to twice their size; big ones are copied
/// to an allocation of their size, as the output's buffer keeps them whole.
fn tight(mut frame: EventFrame, received: &Bytes) -> EventFrame {
    let built = !received.as_ptr_range().contains(&frame.entries.as_ptr());
    if built && frame.entries.len() >= SHARE_THRESHOLD {
        frame.entries = Bytes::copy_from_slice(&frame.entries);
    }
    frame
}

/// Cuts the next complete frame off the receive buffer (without copying,
/// see `RecvBuf`) and decodes it.
fn next_frame(rb: &mut RecvBuf, ctx: &Ctx, now: EventTime, peer: &str) -> Result<Next, String> {
    // The connection's log line names the peer; the reason does not repeat it.
    let Some(scanned) =
        scan_frame_resumed(&rb.buf, &ctx.limits, &mut rb.progress).map_err(|e| e.to_string())?
    else {
        return Ok(Next::NeedMore);
    };
    let bytes = rb.cut(scanned.len);
    if let Some(sig @ 1..) = scanned.signal() {
        PluginStats::add(&ctx.stats.errors, 1);
        tracing::warn!(input = %ctx.name, peer = %peer, signal = sig,
            "ignoring a Fluent Bit metrics/traces frame (fluent_signal); only logs are collected");
        return Ok(Next::Skipped);
    }
    scanned
        .into_frame(bytes.clone(), &ctx.limits, now)
        .map(|f| Next::Frame(tight(f, &bytes)))
        .map_err(|e| e.to_string())
}

/// Appends a batch to every output its tag routes to, then sends the acks.
async fn dispatch<S>(
    p: Pending,
    ctx: &Ctx,
    cached: &mut Option<Cached>,
    s: &mut S,
    acks_out: &mut Vec<u8>,
) -> Result<(), String>
where
    S: AsyncWrite + Unpin,
{
    PluginStats::add(&ctx.stats.events_in, p.count as u64);
    // One table routes the whole batch, even if a reload swaps it meanwhile;
    // it is let go before waiting for deliveries (a reload waits for the
    // batches that hold the old table).
    let (generation, router) = ctx.router.load();
    let route = match cached {
        Some(c) if c.generation == generation && c.tag == p.tag => c.route.clone(),
        _ => {
            let r = router.route(&p.tag);
            *cached = Some(Cached {
                generation,
                tag: p.tag.clone(),
                route: r.clone(),
            });
            r
        }
    };
    // The filter chain (none for most tags: then the batch goes on as is).
    // Acks stay those of the batch as received, even when filters dropped
    // or rewrote every event.
    let filtered = router.filter(&route, &p.tag, &p.parts, p.count);
    // The batches the filters made (several when events got tags one by
    // one), or the batch as received.
    let batches = filtered
        .iter()
        .flatten()
        .map(|b| (b.tag.as_str(), &b.route.outputs, &b.parts[..], b.count))
        .chain(filtered.is_none().then_some((p.tag.as_str(), &route.outputs, &p.parts[..], p.count)));
    let wants_ack = !p.acks.is_empty();
    let delivery = wants_ack && ctx.cfg.ack == AckMode::Delivered;
    // keep_chunks: the batch is one sender's chunk (see `serve`).
    let kept = match p.acks.as_slice() {
        [one] if ctx.keep => Some(one),
        _ => None,
    };
    let mut deliveries = Vec::new();
    for (i, (tag, outputs, parts, count)) in batches.enumerate() {
        if outputs.is_empty() && count > 0 {
            PluginStats::add(&ctx.stats.errors, 1);
            tracing::warn!(input = %ctx.name, tag = %tag, events = count, "no output matches this tag; events discarded");
        }
        crate::router::tap::offer(tag, parts, count);
        for out in outputs.iter().filter(|_| count > 0) {
            let appended = match kept {
                // The filter chain's batches come in the same order from the
                // same events, so `i` names this batch the same way on every
                // nagare of the same configuration.
                Some(id) => {
                    let origin = Origin { id, batch: i as u32 };
                    out.append_kept(tag, parts, count, delivery, origin).await
                }
                None => {
                    out.append(tag, parts, count, wants_ack, delivery, &p.acks)
                        .await
                }
            };
            let rx =
                appended.map_err(|e| format!("{e}; {} events not acknowledged", p.count))?;
            deliveries.extend(rx);
        }
    }
    drop(filtered);
    drop(route);
    drop(router);
    // ack = "delivered": hold the ack until every output delivered the batch.
    for rx in deliveries {
        if rx.await != Ok(true) {
            return Err(format!(
                "{} events were not delivered downstream (the output gave up on them); not acknowledged",
                p.count
            ));
        }
    }
    PluginStats::add(&ctx.stats.events_out, p.count as u64);
    if !p.acks.is_empty() {
        ctx.recent.insert_all(&p.acks);
        acks_out.clear();
        for id in &p.acks {
            encode_ack(acks_out, id);
        }
        s.write_all(acks_out)
            .await
            .map_err(|e| format!("writing ack: {e}"))?;
    }
    Ok(())
}
impl InputPlugin for ForwardInputConfig {
    const TYPE: &'static str = "forward";
    const DOC: &'static str = "Receives Fluentd's forward protocol v1 over TCP (with UDP heartbeat answers) or a UNIX socket.";

    fn build(self, cx: &mut BuildContext) -> Result<Box<dyn Input>, OptionError> {
        match (&self.bind, &self.path) {
            (Some(bind), None) => {
                let addr = nagare_core::address::resolve(bind).map_err(|e| OptionError::new("bind", e))?;
                cx.listen("bind", Listen::Tcp(addr));
                if self.heartbeat {
                    cx.listen("bind", Listen::Udp(addr));
                }
            }
            (None, Some(path)) => {
                cx.listen("path", Listen::Unix(path.into()));
                cx.writes_file("path", path);
            }
            (Some(_), Some(_)) => {
                return Err(OptionError::new(
                    "path",
                    "set either `bind` (TCP) or `path` (a UNIX socket), not both",
                ))
            }
            (None, None) => {
                return Err(OptionError::new(
                    "",
                    "a forward input needs `bind` (e.g. bind = \"0.0.0.0:24224\") or `path` (a UNIX socket)",
                ))
            }
        }
        if !self.users.is_empty() && self.shared_key.is_none() {
            return Err(OptionError::new(
                "users",
                "users are checked in the shared-key handshake: set `shared_key` too",
            ));
        }
        if let Some(p) = &self.dedup_path {
            cx.writes_file("dedup_path", p);
        }
        let tls = TlsServer::build(self.tls.as_ref(), cx)?;
        Ok(Box::new(ForwardInput { cfg: self, tls }))
    }
}

/// A built forward input: its options and its TLS files, loaded.
struct ForwardInput {
    cfg: ForwardInputConfig,
    tls: Option<Arc<TlsServer>>,
}

#[async_trait::async_trait]
impl Input for ForwardInput {
    async fn start(self: Box<Self>, cx: InputContext) -> anyhow::Result<Vec<JoinHandle<()>>> {
        start(
            &cx.name,
            self.cfg,
            self.tls,
            cx.router,
            cx.stats,
            &cx.stored_ids,
            cx.shutdown,
        )
        .await
    }
}
