//! `beats`: the Lumberjack v2 protocol that Filebeat, Winlogbeat and the
//! other Beats (`output.logstash`), and Logstash's lumberjack output,
//! speak, as Logstash's beats input serves it.
//!
//! A sender writes a window size frame (`2W`, the number of events that
//! follow), then the events as JSON data frames (`2J`: a sequence number
//! and a JSON object) or key/value data frames (`2D`), usually inside one
//! zlib-compressed frame (`2C`). Each event becomes one event whose record
//! is the JSON object as sent (`@metadata`, `@timestamp`, `message`, …)
//! under the `tag` option; `@timestamp` (`time_key`) gives the event time.
//!
//! The ACK (`2A` with the window's last sequence number) is sent only once
//! the whole window is in every matched output's buffer (fsync'd for file
//! buffers): a Beat resends a window it got no ACK for, so nothing is lost
//! (at least once). While a buffer is full the window waits for room and
//! an ACK of sequence 0 goes out every few seconds, which a Beat reads as
//! "still working" rather than timing out.
//!
//! A frame that is not Lumberjack v2, larger than `max_frame_size`, a
//! window left unfinished past `window_timeout` or an idle connection
//! closes that one connection with a log line naming the peer. TLS with
//! `[input.tls]` (Beats' `ssl.*` options).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nagare_core::metrics::PluginStats;
use nagare_core::plugin::{BuildContext, Listen, OptionError};
use nagare_core::units::{Dur, Size};
use nagare_forward::EventTime;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::inputs::common::append::append_batch;
use crate::inputs::common::connection_options;
use crate::inputs::common::listeners::stopped;
use crate::inputs::{Input, InputContext, InputPlugin};
use crate::net::tls::TlsServer;
use crate::parsers::{Parser, ParserConfig, ParserType};
use crate::router::LiveRouter;

connection_options!(
    /// The `beats` input.
    BeatsInputConfig {
        /// "HOST:PORT" to listen on (default "0.0.0.0:5044", the Beats port).
        #[serde_inline_default("0.0.0.0:5044".into())]
        bind: String,
        /// The tag of the events (default "beats"; route on fields such as
        /// `@metadata.beat` with the rewrite_tag filter).
        #[serde_inline_default("beats".into())]
        tag: String,
        /// The event field that gives the event time (RFC 3339 or epoch
        /// seconds); it stays in the record. Without it, or when it is not
        /// a time, the time of arrival (default "@timestamp"; "" for the
        /// time of arrival always).
        #[serde_inline_default("@timestamp".into())]
        time_key: String,
        /// Largest frame (a data frame, or a compressed frame before and
        /// after inflating) and largest window of decoded events; a larger
        /// one closes the connection (default "64MiB").
        #[serde_inline_default(Size::mib(64))]
        max_frame_size: Size,
        /// A window begun must arrive whole within this time, or the
        /// connection is closed (slow clients) (default "1m").
        #[serde_inline_default(Dur::mins(1))]
        window_timeout: Dur,
    }
);

/// While a window waits for room in a full buffer, an ACK of sequence 0
/// goes out this often (Beats time out after 30 s without an answer).
const KEEPALIVE: Duration = Duration::from_secs(5);

impl InputPlugin for BeatsInputConfig {
    const TYPE: &'static str = "beats";
    const DOC: &'static str = "Receives events from Beats (Filebeat, Winlogbeat, …: `output.logstash`) and Logstash's lumberjack output over the Lumberjack v2 protocol; each window is acknowledged once it is in the buffers (see [Migrating senders](migration-senders.md)).";

    fn build(self, cx: &mut BuildContext) -> Result<Box<dyn Input>, OptionError> {
        let addr =
            nagare_core::address::resolve(&self.bind).map_err(|e| OptionError::new("bind", e))?;
        cx.listen("bind", Listen::Tcp(addr));
        self.check_connections()?;
        if self.tag.is_empty()
            || self
                .tag
                .contains(|c: char| c.is_whitespace() || c.is_control() || c == '/')
        {
            return Err(OptionError::new(
                "tag",
                "must be a tag (dotted words, no spaces)",
            ));
        }
        if self.max_frame_size.0 < 1024 || self.max_frame_size.0 > u32::MAX as u64 {
            return Err(OptionError::new(
                "max_frame_size",
                "must be from 1KiB to 4GiB (a frame's length is a u32)",
            ));
        }
        let tls = TlsServer::build(self.tls.as_ref(), cx)?;
        Ok(Box::new(BeatsInput { cfg: self, tls }))
    }
}

struct BeatsInput {
    cfg: BeatsInputConfig,
    tls: Option<Arc<TlsServer>>,
}

#[async_trait::async_trait]
impl Input for BeatsInput {
    async fn start(self: Box<Self>, cx: InputContext) -> anyhow::Result<Vec<JoinHandle<()>>> {
        let BeatsInput { cfg, tls } = *self;
        let name = cx.name.clone();
        let addr: SocketAddr = tokio::net::lookup_host(cfg.bind.as_str())
            .await
            .map_err(|e| anyhow::anyhow!("{name}: cannot resolve bind {:?}: {e}", cfg.bind))?
            .next()
            .ok_or_else(|| anyhow::anyhow!("{name}: bind {:?} resolves to nothing", cfg.bind))?;
        let listener = crate::inputs::common::listeners::listen_tcp(addr)
            .map_err(|e| anyhow::anyhow!("{name}: cannot listen on {addr}: {e}"))?;
        let scheme = if tls.is_some() { "tls" } else { "tcp" };
        tracing::info!(input = %name, %addr, %scheme, "beats input listening");
        let ctx = Arc::new(Ctx {
            decoder: Decoder::new(&cfg)?,
            slots: Arc::new(Semaphore::new(cfg.max_connections)),
            cfg,
            tls,
            name,
            router: cx.router,
            stats: cx.stats,
        });
        Ok(vec![tokio::spawn(accept(listener, addr, ctx, cx.shutdown))])
    }
}

struct Ctx {
    cfg: BeatsInputConfig,
    name: String,
    router: LiveRouter,
    stats: Arc<PluginStats>,
    decoder: Decoder,
    tls: Option<Arc<TlsServer>>,
    slots: Arc<Semaphore>,
}

/// Accepts connections until shutdown, then waits for the open ones to end.
async fn accept(l: TcpListener, addr: SocketAddr, ctx: Arc<Ctx>, shutdown: watch::Receiver<bool>) {
    // Clones live as long as connections; the count tells when all are done.
    let live = Arc::new(());
    {
        let ctx = ctx.clone();
        let live = live.clone();
        let sd = shutdown.clone();
        crate::inputs::common::listeners::accept_tcp(
            l,
            addr,
            ctx.name.clone(),
            shutdown,
            move |s, peer| {
                let Ok(slot) = ctx.slots.clone().try_acquire_owned() else {
                    PluginStats::add(&ctx.stats.bad_input, 1);
                    let reason = format!("max_connections ({}) reached", ctx.cfg.max_connections);
                    tracing::warn!(input = %ctx.name, peer = %peer, reason = %reason, "closing connection");
                    return;
                };
                PluginStats::add(&ctx.stats.connections, 1);
                let (ctx, mut sd, live) = (ctx.clone(), sd.clone(), live.clone());
                tokio::spawn(async move {
                    let (_slot, _live) = (slot, live);
                    let s = tokio::select! {
                        s = crate::net::tls::accept(&ctx.tls, s, &peer) => s,
                        // Shutdown does not wait for a handshake.
                        _ = stopped(&mut sd) => return,
                    };
                    let Some(s) = s else {
                        // A failed handshake was logged with the peer and reason.
                        PluginStats::add(&ctx.stats.bad_input, 1);
                        return;
                    };
                    if let Err(reason) = serve(s, &peer, &ctx, sd).await {
                        PluginStats::add(&ctx.stats.bad_input, 1);
                        tracing::warn!(input = %ctx.name, peer = %peer, reason = %reason, "closing connection");
                    }
                });
            },
        )
        .await;
    }
    while Arc::strong_count(&live) > 1 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A window of events being received.
#[derive(Default)]
pub struct Window {
    /// Events the window size frame announced.
    pub expected: u32,
    /// PackedForward entries of the events so far.
    pub entries: Vec<u8>,
    pub count: u32,
    /// The last sequence number read (what the ACK carries).
    pub last_seq: u32,
    /// Whether a window size frame started this window.
    pub open: bool,
    /// When the window size frame arrived: the time of its events that
    /// carry none (read once per window, not per event: the clock read
    /// per event was 7 % of the input's CPU).
    pub arrived: EventTime,
    /// The length of the last window's entries: the next one's first
    /// allocation (growing it by doubling was 3 % of the input's CPU).
    pub last_len: usize,
}

/// A zlib inflater and the room it inflates into, kept by each thread
/// (a frame is inflated and read with no await between): a new
/// `Decompress` per window (its 40 KiB state made and zeroed) and a new
/// output zeroed by flate2 before every call cost 3 % of the beats input's
/// CPU at 100-byte events, and fresh output of 1 MiB windows, page-faulted
/// in every time, 3× the whole window's reading (perf, criterion).
pub struct Inflater {
    d: flate2::Decompress,
    /// Zeroed once as it grows; bytes past what a frame inflated to are
    /// an earlier frame's.
    out: Vec<u8>,
    /// What the last frame inflated to: the first room for the next one
    /// when `out` was let go.
    last: usize,
}

/// A thread's inflater keeps no more room than this between frames.
const KEEP_INFLATED: usize = 8 << 20;

thread_local! {
    static INFLATER: std::cell::RefCell<Inflater> = std::cell::RefCell::new(Inflater::new());
}

impl Inflater {
    pub fn new() -> Inflater {
        Inflater {
            d: flate2::Decompress::new(true),
            out: Vec::new(),
            last: 0,
        }
    }

    /// Inflates a compressed frame's payload within `max` bytes; the
    /// inflated bytes.
    pub fn inflate(&mut self, z: &[u8], max: usize) -> Result<&[u8], String> {
        self.d.reset(true);
        // Not FlushDecompress::Finish: with it, a first call whose output
        // does not fit fails (zlib's one-shot mode) instead of asking for
        // room.
        let first = z
            .len()
            .saturating_mul(8)
            .max(self.last + self.last / 16)
            .clamp(64, max + 1);
        if self.out.len() < first {
            self.out.resize(first, 0);
        }
        loop {
            let (read, written) = (self.d.total_in() as usize, self.d.total_out() as usize);
            let room = self.out.len().min(max + 1);
            let status = self
                .d
                .decompress(
                    &z[read..],
                    &mut self.out[written..room],
                    flate2::FlushDecompress::None,
                )
                .map_err(|e| format!("a compressed frame does not inflate: {e}"))?;
            let n = self.d.total_out() as usize;
            if n > max {
                return Err(format!(
                    "a compressed frame inflates past max_frame_size ({max} bytes)"
                ));
            }
            if status == flate2::Status::StreamEnd {
                self.last = n;
                return Ok(&self.out[..n]);
            }
            if n == room {
                let more = room.min(max + 1 - room).max(64);
                self.out.resize(room + more, 0);
            } else if self.d.total_in() as usize == read && n == written {
                // Room for more, no progress, no end: the input ran out.
                return Err("a compressed frame does not inflate: the stream is cut short".into());
            }
        }
    }
}

impl Default for Inflater {
    fn default() -> Inflater {
        Inflater::new()
    }
}

/// How frames become events: shared by the connections (and the fuzz
/// target, the benchmark).
pub struct Decoder {
    timed: Parser,
    plain: Parser,
    max: usize,
}

/// A whole window, ready to be appended and acknowledged.
pub struct Ready {
    pub entries: Vec<u8>,
    pub count: u32,
    pub last_seq: u32,
}

impl Decoder {
    pub fn new(cfg: &BeatsInputConfig) -> anyhow::Result<Decoder> {
        let parser = |time_key: Option<String>| {
            Parser::new(&ParserConfig {
                kind: ParserType::Json,
                time_key,
                keep_time_key: true,
                ..ParserConfig::default()
            })
        };
        Ok(Decoder {
            timed: parser((!cfg.time_key.is_empty()).then(|| cfg.time_key.clone()))?,
            plain: parser(None)?,
            max: cfg.max_frame_size.0 as usize,
        })
    }

    /// A window size frame's count.
    pub fn window(&self, w: &mut Window, size: u32, ready: &mut Vec<Ready>) -> Result<(), String> {
        if w.open && w.count > 0 {
            return Err(format!(
                "a new window size frame after {} of the {} events of the window",
                w.count, w.expected
            ));
        }
        w.expected = size;
        w.open = true;
        w.count = 0;
        w.arrived = EventTime::now();
        if w.entries.capacity() == 0 {
            w.entries.reserve(w.last_len + w.last_len / 8);
        }
        if size == 0 {
            // Nothing to wait for: acknowledged at once.
            self.close(w, ready);
        }
        Ok(())
    }

    fn close(&self, w: &mut Window, ready: &mut Vec<Ready>) {
        w.last_len = w.entries.len();
        ready.push(Ready {
            entries: std::mem::take(&mut w.entries),
            count: w.count,
            last_seq: w.last_seq,
        });
        w.count = 0;
        w.open = false;
    }

    fn event_start(&self, w: &Window, seq: u32) -> Result<usize, String> {
        if !w.open {
            return Err(format!(
                "data frame {seq} outside a window (no window size frame before it)"
            ));
        }
        if w.entries.len() > self.max {
            return Err(format!(
                "a window of more than max_frame_size ({} bytes) of events",
                self.max
            ));
        }
        Ok(w.entries.len())
    }

    fn event_end(&self, w: &mut Window, seq: u32, ready: &mut Vec<Ready>) {
        w.count += 1;
        w.last_seq = seq;
        if w.count >= w.expected {
            self.close(w, ready);
        }
    }

    /// A JSON data frame's event.
    pub fn json(
        &self,
        w: &mut Window,
        seq: u32,
        json: &[u8],
        ready: &mut Vec<Ready>,
    ) -> Result<(), String> {
        let at = self.event_start(w, seq)?;
        let out = &mut w.entries;
        out.push(0x92);
        out.extend_from_slice(&w.arrived.to_bytes());
        let mut parsed = crate::parsers::json::parse(&self.timed, json, &[], out);
        if parsed.is_err() {
            // Perhaps only its time field is not a time.
            out.truncate(at + 11);
            parsed = crate::parsers::json::parse(&self.plain, json, &[], out);
        }
        match parsed {
            Ok(t) => {
                if let Some(t) = t {
                    out[at + 1..at + 11].copy_from_slice(&t.to_bytes());
                }
            }
            Err(e) => {
                out.truncate(at);
                return Err(format!("data frame {seq}: {e}"));
            }
        }
        self.event_end(w, seq, ready);
        Ok(())
    }

    /// A key/value data frame's event (`2D`): a map of strings.
    pub fn pairs(
        &self,
        w: &mut Window,
        seq: u32,
        pairs: &[(&[u8], &[u8])],
        ready: &mut Vec<Ready>,
    ) -> Result<(), String> {
        self.event_start(w, seq)?;
        let out = &mut w.entries;
        out.push(0x92);
        out.extend_from_slice(&w.arrived.to_bytes());
        nagare_forward::msgpack::write_map_len(out, pairs.len());
        for (k, v) in pairs {
            nagare_forward::msgpack::write_str(out, k);
            nagare_forward::msgpack::write_str(out, v);
        }
        self.event_end(w, seq, ready);
        Ok(())
    }

    /// The frames of a buffer (a compressed frame's payload, or a fuzz
    /// input), read whole: Err for a bad or cut one.
    pub fn frames(
        &self,
        mut buf: &[u8],
        w: &mut Window,
        ready: &mut Vec<Ready>,
        depth: u8,
    ) -> Result<(), String> {
        fn u32_at(b: &[u8], at: usize) -> Result<u32, String> {
            b.get(at..at + 4)
                .map(|x| u32::from_be_bytes([x[0], x[1], x[2], x[3]]))
                .ok_or_else(|| "a frame cut short".to_string())
        }
        fn take(b: &[u8], at: usize, n: usize) -> Result<&[u8], String> {
            b.get(at..at.saturating_add(n))
                .ok_or_else(|| "a frame cut short".to_string())
        }
        while !buf.is_empty() {
            let (version, code) = match buf {
                [v, c, ..] => (*v, *c),
                _ => return Err("a frame cut short".into()),
            };
            check_version(version)?;
            let used = match code {
                b'W' => {
                    self.window(w, u32_at(buf, 2)?, ready)?;
                    6
                }
                b'J' => {
                    let seq = u32_at(buf, 2)?;
                    let len = u32_at(buf, 6)? as usize;
                    self.check_len(len)?;
                    self.json(w, seq, take(buf, 10, len)?, ready)?;
                    10 + len
                }
                b'D' => {
                    let seq = u32_at(buf, 2)?;
                    let n = u32_at(buf, 6)? as usize;
                    let mut at = 10;
                    let mut pairs = Vec::with_capacity(n.min(1024));
                    for _ in 0..n {
                        let kl = u32_at(buf, at)? as usize;
                        let k = take(buf, at + 4, kl)?;
                        at += 4 + kl;
                        let vl = u32_at(buf, at)? as usize;
                        let v = take(buf, at + 4, vl)?;
                        at += 4 + vl;
                        pairs.push((k, v));
                    }
                    self.pairs(w, seq, &pairs, ready)?;
                    at
                }
                b'C' => {
                    if depth > 0 {
                        return Err("a compressed frame inside a compressed frame".into());
                    }
                    let len = u32_at(buf, 2)? as usize;
                    self.check_len(len)?;
                    self.compressed(take(buf, 6, len)?, w, ready)?;
                    6 + len
                }
                other => return Err(unknown_code(other)),
            };
            buf = &buf[used..];
        }
        Ok(())
    }

    fn check_len(&self, len: usize) -> Result<(), String> {
        if len > self.max {
            return Err(format!(
                "a frame of {len} bytes is larger than max_frame_size ({} bytes)",
                self.max
            ));
        }
        Ok(())
    }

    /// A compressed frame's payload, inflated within max_frame_size (for
    /// tests and the benchmark; connections keep an `Inflater`).
    pub fn inflate(&self, z: &[u8]) -> Result<Vec<u8>, String> {
        Inflater::new().inflate(z, self.max).map(<[u8]>::to_vec)
    }

    /// A compressed frame's payload: inflated with the thread's
    /// inflater, its frames read (none may be compressed, so the inflater
    /// is not asked for again while it is lent).
    pub fn compressed(
        &self,
        z: &[u8],
        w: &mut Window,
        ready: &mut Vec<Ready>,
    ) -> Result<(), String> {
        INFLATER.with_borrow_mut(|inflater| {
            let read = inflater
                .inflate(z, self.max)
                .and_then(|inner| self.frames(inner, w, ready, 1));
            if inflater.out.len() > KEEP_INFLATED {
                inflater.out = Vec::new();
            }
            read
        })
    }
}

fn check_version(v: u8) -> Result<(), String> {
    match v {
        b'2' => Ok(()),
        b'1' => Err("Lumberjack v1 (logstash-forwarder) is not served; send v2 (Beats)".into()),
        other => Err(format!(
            "not Lumberjack v2: a frame begins with byte {other:#04x} (TLS sent to a plain listener, or another protocol?)"
        )),
    }
}

fn unknown_code(c: u8) -> String {
    format!("unknown Lumberjack v2 frame type {:?}", c as char)
}

/// Serves one connection until the peer closes it, or a rule is broken.
async fn serve<S>(
    s: S,
    peer: &str,
    ctx: &Ctx,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (r, mut wr) = tokio::io::split(s);
    let mut r = BufReader::with_capacity(64 * 1024, r);
    let d = &ctx.decoder;
    let mut w = Window::default();
    let mut ready = Vec::new();
    let mut payload = Vec::new();
    // When the window in progress began (its size frame).
    let mut begun: Option<Instant> = None;
    loop {
        // Between windows: idle_timeout, and shutdown ends the connection.
        let deadline = match begun {
            Some(t) => t + ctx.cfg.window_timeout.0,
            None => Instant::now() + ctx.cfg.idle_timeout.0,
        };
        let mut head = [0u8; 2];
        let first = tokio::select! {
            r = tokio::time::timeout_at(deadline, r.read_u8()) => r,
            _ = stopped(&mut shutdown), if begun.is_none() => return Ok(()),
        };
        head[0] = match first {
            Err(_) => return Err(timed_out(ctx, begun.is_some())),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof && begun.is_none() => {
                return Ok(())
            }
            Ok(Err(e)) => return Err(read_error(e, &w)),
            Ok(Ok(b)) => b,
        };
        check_version(head[0])?;
        // A frame begun must come whole within window_timeout (of its
        // window's start, when one is open).
        let deadline = match begun {
            Some(_) => deadline,
            None => Instant::now() + ctx.cfg.window_timeout.0,
        };
        macro_rules! read {
            ($e:expr) => {
                match tokio::time::timeout_at(deadline, $e).await {
                    Err(_) => return Err(timed_out(ctx, true)),
                    Ok(Err(e)) => return Err(read_error(e, &w)),
                    Ok(Ok(v)) => v,
                }
            };
        }
        head[1] = read!(r.read_u8());
        match head[1] {
            b'W' => {
                let size = read!(r.read_u32());
                d.window(&mut w, size, &mut ready)?;
                begun.get_or_insert_with(Instant::now);
            }
            b'J' => {
                let seq = read!(r.read_u32());
                let len = read!(r.read_u32()) as usize;
                d.check_len(len)?;
                payload.resize(len, 0);
                read!(r.read_exact(&mut payload));
                d.json(&mut w, seq, &payload, &mut ready)?;
            }
            b'D' => {
                let seq = read!(r.read_u32());
                let n = read!(r.read_u32());
                // The frame again, whole, for the buffer reader.
                payload.clear();
                payload.extend_from_slice(b"2D");
                payload.extend_from_slice(&seq.to_be_bytes());
                payload.extend_from_slice(&n.to_be_bytes());
                for _ in 0..n.saturating_mul(2) {
                    let len = read!(r.read_u32());
                    d.check_len(len as usize)?;
                    payload.extend_from_slice(&len.to_be_bytes());
                    let at = payload.len();
                    payload.resize(at + len as usize, 0);
                    read!(r.read_exact(&mut payload[at..]));
                    d.check_len(payload.len())?;
                }
                d.frames(&payload, &mut w, &mut ready, 0)?;
            }
            b'C' => {
                let len = read!(r.read_u32()) as usize;
                d.check_len(len)?;
                payload.resize(len, 0);
                read!(r.read_exact(&mut payload));
                d.compressed(&payload, &mut w, &mut ready)?;
            }
            other => return Err(unknown_code(other)),
        }
        for win in ready.drain(..) {
            take_window(ctx, peer, &mut wr, win, &mut shutdown).await?;
        }
        if !w.open {
            begun = None;
        }
        if payload.capacity() > 1 << 20 {
            payload = Vec::new();
        }
    }
}

fn timed_out(ctx: &Ctx, in_window: bool) -> String {
    if in_window {
        format!(
            "slow client: a window not complete after window_timeout = {}",
            ctx.cfg.window_timeout
        )
    } else {
        format!("idle for {}", ctx.cfg.idle_timeout)
    }
}

fn read_error(e: std::io::Error, w: &Window) -> String {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        format!(
            "connection closed inside a frame ({} of {} events of the window read, not acknowledged)",
            w.count, w.expected
        )
    } else {
        format!("read error: {e}")
    }
}

fn ack(seq: u32) -> [u8; 6] {
    let s = seq.to_be_bytes();
    [b'2', b'A', s[0], s[1], s[2], s[3]]
}

/// Puts a whole window into the buffers (waiting for room, with keepalive
/// ACKs), then acknowledges it.
async fn take_window<W>(
    ctx: &Ctx,
    peer: &str,
    wr: &mut W,
    win: Ready,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), String>
where
    W: AsyncWrite + Unpin,
{
    let tag = ctx.cfg.tag.as_str();
    if win.count > 0 {
        loop {
            let deadline = Instant::now() + KEEPALIVE;
            let full = ctx
                .router
                .wait_for_room(&[(tag, win.entries.len())], deadline)
                .await;
            let Some(output) = full else { break };
            if *shutdown.borrow() {
                return Err(format!(
                    "shutting down while the buffer of {output} is full; the window is not acknowledged (the sender sends it again)"
                ));
            }
            tracing::debug!(input = %ctx.name, peer = %peer, %output, "buffer full: the window waits, keepalive ACK sent");
            wr.write_all(&ack(0))
                .await
                .map_err(|e| format!("writing a keepalive ACK: {e}"))?;
        }
        let ok = append_batch(
            &ctx.name,
            &ctx.router,
            &ctx.stats,
            tag,
            Bytes::from(win.entries),
            win.count,
            true,
        )
        .await;
        if !ok {
            PluginStats::add(&ctx.stats.rejected, win.count as u64);
            return Err(
                "an output refused the window (shutting down?); not acknowledged, the sender sends it again"
                    .into(),
            );
        }
    }
    wr.write_all(&ack(win.last_seq))
        .await
        .map_err(|e| format!("writing the ACK: {e}"))?;
    wr.flush()
        .await
        .map_err(|e| format!("writing the ACK: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::common::mutations;

    fn decoder() -> Decoder {
        let cfg: BeatsInputConfig = toml::from_str("").unwrap();
        Decoder::new(&cfg).unwrap()
    }

    fn jframe(seq: u32, json: &str) -> Vec<u8> {
        let mut f = b"2J".to_vec();
        f.extend_from_slice(&seq.to_be_bytes());
        f.extend_from_slice(&(json.len() as u32).to_be_bytes());
        f.extend_from_slice(json.as_bytes());
        f
    }

    #[test]
    fn inflate_grows_within_max_and_refuses_cut_streams() {
        use std::io::Write;
        let zlib = |data: &[u8]| {
            let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(3));
            z.write_all(data).unwrap();
            z.finish().unwrap()
        };
        let d = decoder();
        // About 1,000:1, so the output grows many times over its first guess.
        let data = vec![b'x'; 1 << 20];
        let z = zlib(&data);
        assert_eq!(d.inflate(&z).unwrap(), data);
        // Bytes after the stream's end are not read (as before).
        let mut tail = z.clone();
        tail.extend_from_slice(b"junk");
        assert_eq!(d.inflate(&tail).unwrap().len(), data.len());
        assert_eq!(d.inflate(&zlib(b"")).unwrap(), b"");
        for cut in [0, 1, 2, z.len() / 2, z.len() - 1] {
            let e = d.inflate(&z[..cut]).unwrap_err();
            assert!(e.contains("does not inflate"), "{cut}: {e}");
        }
        let small: BeatsInputConfig = toml::from_str("max_frame_size = \"64KiB\"").unwrap();
        let small = Decoder::new(&small).unwrap();
        let e = small.inflate(&z).unwrap_err();
        assert!(e.contains("past max_frame_size"), "{e}");
        assert_eq!(small.inflate(&zlib(&data[..65536])).unwrap().len(), 65536);
        assert!(small.inflate(&zlib(&data[..65537])).is_err());
    }

    #[test]
    fn windows_plain_and_compressed() {
        let d = decoder();
        let mut body = b"2W\0\0\0\x02".to_vec();
        body.extend(jframe(
            1,
            r#"{"message":"a","@timestamp":"2024-05-01T10:00:00Z"}"#,
        ));
        body.extend(jframe(2, r#"{"message":"b"}"#));
        let mut inner = b"2W\0\0\0\x01".to_vec();
        inner.extend(jframe(1, r#"{"message":"c"}"#));
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut z, &inner).unwrap();
        let z = z.finish().unwrap();
        body.extend_from_slice(b"2C");
        body.extend_from_slice(&(z.len() as u32).to_be_bytes());
        body.extend_from_slice(&z);
        let (mut w, mut ready) = (Window::default(), Vec::new());
        d.frames(&body, &mut w, &mut ready, 0).unwrap();
        assert_eq!(ready.len(), 2);
        assert_eq!((ready[0].count, ready[0].last_seq), (2, 2));
        assert_eq!((ready[1].count, ready[1].last_seq), (1, 1));
        let times: Vec<EventTime> = nagare_core::record::entries(&ready[0].entries)
            .map(|(t, _, _)| t)
            .collect();
        assert_eq!(times[0], EventTime::new(1714557600, 0));
    }

    #[test]
    fn mutated_frames_never_panic() {
        let d = decoder();
        let mut good = b"2W\0\0\0\x03".to_vec();
        good.extend(jframe(
            1,
            r#"{"message":"a","@timestamp":"2024-05-01T10:00:00Z"}"#,
        ));
        good.extend_from_slice(b"2D\0\0\0\x02\0\0\0\x01\0\0\0\x01k\0\0\0\x01v");
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut z, &jframe(3, r#"{"m":[1,2]}"#)).unwrap();
        let z = z.finish().unwrap();
        good.extend_from_slice(b"2C");
        good.extend_from_slice(&(z.len() as u32).to_be_bytes());
        good.extend_from_slice(&z);
        mutations(&good, |b| {
            let (mut w, mut ready) = (Window::default(), Vec::new());
            let _ = d.frames(b, &mut w, &mut ready, 0);
            for r in &ready {
                assert_eq!(
                    nagare_core::record::entries(&r.entries).count(),
                    r.count as usize
                );
            }
        });
    }

    #[test]
    fn bad_frames() {
        let d = decoder();
        for bad in [
            &b"2J\0\0\0\x01\0\0\0\x02{}"[..],
            b"1W\0\0\0\x01",
            b"2X",
            b"2W\0\0\0\x01\x32J\0\0\0\x01\0\0\0\x05{\"a\"",
            b"2W\0\0\0\x01\x32C\0\0\0\x03abc",
            b"\x16\x03\x01",
        ] {
            let (mut w, mut ready) = (Window::default(), Vec::new());
            assert!(d.frames(bad, &mut w, &mut ready, 0).is_err(), "{bad:?}");
        }
    }
}
