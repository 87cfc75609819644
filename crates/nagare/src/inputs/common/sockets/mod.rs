//! What the message inputs on sockets share (`tcp`, `udp`, `unix`,
//! `syslog`): binding, accepting with a connection limit, reading a stream
//! with an idle limit, cutting it into messages (framing.rs), and handing
//! the events a plugin's [`Decoder`] makes to the router.
//!
//! A stream connection reads a block, cuts every complete message out of
//! it, decodes each into the batch of its tag (consecutive messages of one
//! tag share a batch, so order is kept), and appends the batches before the
//! next read: while an output's buffer is full (overflow_action "block") the
//! connection stops reading and TCP pushes back on the sender. Datagrams
//! are read while more are queued (up to a batch), then appended the same
//! way.
//!
//! Bad input costs only its own connection: an oversized message is cut
//! and counted; a connection that completes no message for `idle_timeout`
//! (idle or trickling, slowloris) is closed; past `max_connections` new
//! connections are closed at once. Each is logged naming the peer.
//!
//! With `tls` (TCP only), each accepted connection does its TLS handshake in
//! its own task (a slow or failing handshake holds up no other client); a
//! failed one is logged naming the peer and the reason (net/tls.rs).

pub(crate) mod framing;
pub(crate) mod lines;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use nagare_core::metrics::PluginStats;
use nagare_core::plugin::Listen;
use nagare_forward::EventTime;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, UdpSocket, UnixDatagram, UnixListener};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use self::framing::{Framer, Framing, Message};
use crate::inputs::common::append::append_batch;
use crate::inputs::common::listeners::stopped;
use crate::inputs::InputContext;
use crate::net::tls::TlsServer;
use crate::net::Stream;
use crate::router::LiveRouter;

/// Where an input listens.
#[derive(Debug, Clone)]
pub(crate) enum Endpoint {
    Tcp(std::net::SocketAddr),
    Udp(std::net::SocketAddr),
    UnixStream(PathBuf),
    UnixDgram(PathBuf),
}

impl Endpoint {
    /// What `nagare check` learns about it.
    pub(crate) fn listen(&self) -> Listen {
        match self {
            Endpoint::Tcp(a) => Listen::Tcp(*a),
            Endpoint::Udp(a) => Listen::Udp(*a),
            Endpoint::UnixStream(p) | Endpoint::UnixDgram(p) => Listen::Unix(p.clone()),
        }
    }
}

/// Who sent a message.
#[derive(Debug, Clone)]
pub(crate) struct Peer {
    /// For log lines: "127.0.0.1:50312" or "unix:/run/app.sock".
    pub label: String,
    /// For `source_address_key`: the IP address, or the socket's path.
    pub address: String,
}

impl Peer {
    fn ip(a: std::net::SocketAddr) -> Peer {
        Peer {
            label: a.to_string(),
            address: a.ip().to_string(),
        }
    }

    fn unix(path: &Path) -> Peer {
        Peer {
            label: format!("unix:{}", path.display()),
            address: path.display().to_string(),
        }
    }
}

/// Events decoded from messages, in batches of one tag in arrival order.
#[derive(Default)]
pub(crate) struct Batches {
    list: Vec<(String, Vec<u8>, u32)>,
}

impl Batches {
    /// Appends one entry for `tag`, written by `write` (one msgpack
    /// `[time, record]`), to the last batch when it has that tag.
    pub(crate) fn push(&mut self, tag: &str, write: impl FnOnce(&mut Vec<u8>)) {
        match self.list.last_mut() {
            Some((t, out, n)) if t == tag => {
                write(out);
                *n += 1;
            }
            _ => {
                let mut out = Vec::with_capacity(4096);
                write(&mut out);
                self.list.push((tag.to_string(), out, 1));
            }
        }
    }

    fn bytes(&self) -> usize {
        self.list.iter().map(|(_, b, _)| b.len()).sum()
    }

    /// (tag, entries, count) of each batch, for unit tests.
    #[cfg(test)]
    pub(crate) fn take(&mut self) -> Vec<(String, Vec<u8>, u32)> {
        std::mem::take(&mut self.list)
    }
}

/// A plugin's part: how one message becomes an event.
pub(crate) trait Decoder: Send + Sync + 'static {
    /// Appends the event of one message (without its delimiter or frame
    /// header) to `out`; false when it did not parse (the event is kept,
    /// marked with `parse_error`).
    fn decode(&self, msg: &[u8], peer: &Peer, now: EventTime, out: &mut Batches) -> bool;
}

/// How a server reads.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub framing: Framing,
    /// Longest message kept whole; a longer one is cut to this size.
    pub max_message: usize,
    /// Open connections at most; more are closed at once.
    pub max_connections: usize,
    /// A connection that completes no message for this long is closed.
    pub idle_timeout: Duration,
    /// A datagram is one message (syslog, gelf) instead of lines.
    pub datagram_is_message: bool,
    /// TLS on accepted TCP connections (the plugins allow it only there).
    pub tls: Option<Arc<TlsServer>>,
}

struct Server {
    name: String,
    router: LiveRouter,
    stats: Arc<PluginStats>,
    settings: Settings,
    decoder: Box<dyn Decoder>,
    /// Open connections.
    open: AtomicUsize,
    /// Clones live as long as connections; the count tells when all are done.
    live: Arc<()>,
}

/// Most datagrams read into one batch.
const DATAGRAMS_PER_BATCH: usize = 1000;
/// Read size of a stream connection.
const READ_SIZE: usize = 64 * 1024;

/// Binds `endpoint` and serves it until shutdown; the returned tasks end
/// once the listener stopped and every connection is done.
pub(crate) async fn start(
    endpoint: Endpoint,
    settings: Settings,
    decoder: Box<dyn Decoder>,
    cx: InputContext,
) -> anyhow::Result<Vec<JoinHandle<()>>> {
    let name = cx.name.clone();
    let server = Arc::new(Server {
        name: cx.name,
        router: cx.router,
        stats: cx.stats,
        settings,
        decoder,
        open: AtomicUsize::new(0),
        live: Arc::new(()),
    });
    let sd = cx.shutdown;
    let cannot = |e: std::io::Error| anyhow::anyhow!("{name}: cannot listen on {endpoint:?}: {e}");
    let task = match &endpoint {
        Endpoint::Tcp(addr) => {
            let l = crate::net::listen::tcp_listener(*addr).map_err(cannot)?;
            tokio::spawn(server.clone().accept_tcp(l, sd.clone()))
        }
        Endpoint::UnixStream(path) => {
            crate::net::listen::remove_stale_socket(path).map_err(cannot)?;
            let l = UnixListener::bind(path).map_err(cannot)?;
            tokio::spawn(server.clone().accept_unix(l, path.clone(), sd.clone()))
        }
        Endpoint::Udp(addr) => {
            let s = udp_socket(*addr).map_err(cannot)?;
            tokio::spawn(server.clone().read_datagrams(Dgram::Udp(s), sd.clone()))
        }
        Endpoint::UnixDgram(path) => {
            remove_stale_dgram_socket(path).map_err(cannot)?;
            let s = UnixDatagram::bind(path).map_err(cannot)?;
            tokio::spawn(
                server
                    .clone()
                    .read_datagrams(Dgram::Unix(s, path.clone()), sd.clone()),
            )
        }
    };
    tracing::info!(input = %name, endpoint = ?endpoint, "listening");
    let waiter = {
        let server = server.clone();
        let mut sd = sd;
        tokio::spawn(async move {
            stopped(&mut sd).await;
            while Arc::strong_count(&server.live) > 1 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    Ok(vec![task, waiter])
}

/// Receive buffer asked for on UDP sockets: a burst of datagrams waits
/// there while a batch is handed on (the kernel caps it at
/// net.core.rmem_max).
const UDP_RECEIVE_BUFFER: usize = 8 << 20;

fn udp_socket(addr: std::net::SocketAddr) -> std::io::Result<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    let _ = s.set_recv_buffer_size(UDP_RECEIVE_BUFFER);
    s.set_nonblocking(true)?;
    s.bind(&addr.into())?;
    UdpSocket::from_std(s.into())
}

/// A datagram socket left by a process that is gone is removed, as
/// `remove_stale_socket` does for stream sockets.
fn remove_stale_dgram_socket(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        return Ok(());
    }
    let probe = std::os::unix::net::UnixDatagram::unbound()?;
    if probe.connect(path).is_ok() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            "socket in use by another process",
        ));
    }
    std::fs::remove_file(path)
}

/// The instant `d` from now (far ahead for a limit too large to add).
fn after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400))
}

/// A server's decoding part, without sockets or router: what
/// [`Server`] runs on each message and datagram, and what [`replay`] runs.
struct Decoding<'a> {
    name: &'a str,
    stats: &'a PluginStats,
    settings: &'a Settings,
    decoder: &'a dyn Decoder,
}

impl Decoding<'_> {
    /// Decodes one message into `batches`, counting what went wrong.
    fn one(&self, m: Message<'_>, peer: &Peer, now: EventTime, batches: &mut Batches) {
        if let Some(len) = m.truncated {
            PluginStats::add(&self.stats.errors, 1);
            tracing::warn!(input = %self.name, peer = %peer.label, bytes = len,
                limit = self.settings.max_message, "message longer than the limit: cut to the limit");
        }
        if m.bytes.is_empty() {
            return;
        }
        if !self.decoder.decode(m.bytes, peer, now, batches) {
            PluginStats::add(&self.stats.errors, 1);
        }
    }

    /// One datagram: one message (syslog) or lines.
    fn datagram(&self, data: &[u8], peer: &Peer, now: EventTime, batches: &mut Batches) {
        if self.settings.datagram_is_message {
            let mut m = data;
            // A syslog sender may end its datagram with a newline or NUL;
            // other messages (gelf's, maybe compressed) are taken whole.
            if matches!(self.settings.framing, Framing::Syslog) {
                while let [rest @ .., b'\n' | b'\r' | 0] = m {
                    m = rest;
                }
            }
            let max = self.settings.max_message;
            let truncated = (m.len() > max).then_some(m.len());
            self.one(
                Message {
                    bytes: &m[..m.len().min(max)],
                    truncated,
                },
                peer,
                now,
                batches,
            );
        } else {
            let mut framer = Framer::new(self.settings.framing.clone(), self.settings.max_message);
            let mut buf = BytesMut::from(data);
            framer.split(&mut buf, &mut |m| self.one(m, peer, now, batches));
            framer.finish(&mut buf, &mut |m| self.one(m, peer, now, batches));
        }
    }
}

/// Bytes for [`replay`]: one connection's stream, read `read_size` bytes at
/// a time, or datagrams from one sender.
pub enum Feed<'a> {
    Stream { data: &'a [u8], read_size: usize },
    Datagrams(Vec<&'a [u8]>),
}

/// What came of a [`Feed`]: (tag, entries, count) of each batch, and for a
/// stream whether it ended inside a message (the server closes such a
/// connection with an error).
pub struct Replayed {
    pub batches: Vec<(String, Vec<u8>, u32)>,
    pub cut_off: bool,
}

/// Runs `feed` through the framing and `decoder` as a server does (the
/// same [`Decoding`] and [`Framer`] calls, in the same order), without
/// sockets: for the fuzz targets (fuzz/) and the tests that replay their
/// seeds and crashes.
pub(crate) fn replay(settings: &Settings, decoder: &dyn Decoder, feed: Feed<'_>) -> Replayed {
    let stats = PluginStats::default();
    let d = Decoding {
        name: "replay",
        stats: &stats,
        settings,
        decoder,
    };
    let peer = Peer {
        label: "192.0.2.1:40000".into(),
        address: "192.0.2.1".into(),
    };
    let now = EventTime::new(1_700_000_000, 0);
    let mut batches = Batches::default();
    let mut cut_off = false;
    match feed {
        Feed::Datagrams(list) => {
            for dg in list {
                d.datagram(dg, &peer, now, &mut batches);
            }
        }
        Feed::Stream { data, read_size } => {
            let mut framer = Framer::new(settings.framing.clone(), settings.max_message);
            let mut buf = BytesMut::new();
            for piece in data.chunks(read_size.max(1)) {
                buf.extend_from_slice(piece);
                framer.split(&mut buf, &mut |m| d.one(m, &peer, now, &mut batches));
            }
            framer.finish(&mut buf, &mut |m| d.one(m, &peer, now, &mut batches));
            cut_off = framer.inside_frame() || !buf.is_empty();
        }
    }
    Replayed {
        batches: batches.list,
        cut_off,
    }
}

enum Dgram {
    Udp(UdpSocket),
    Unix(UnixDatagram, PathBuf),
}

impl Dgram {
    async fn recv(&self, buf: &mut [u8]) -> std::io::Result<(usize, Peer)> {
        match self {
            Dgram::Udp(s) => s.recv_from(buf).await.map(|(n, a)| (n, Peer::ip(a))),
            Dgram::Unix(s, path) => s.recv(buf).await.map(|n| (n, Peer::unix(path))),
        }
    }

    fn try_recv(&self, buf: &mut [u8]) -> std::io::Result<(usize, Peer)> {
        match self {
            Dgram::Udp(s) => s.try_recv_from(buf).map(|(n, a)| (n, Peer::ip(a))),
            Dgram::Unix(s, path) => s.try_recv(buf).map(|n| (n, Peer::unix(path))),
        }
    }
}

impl Server {
    async fn accept_tcp(self: Arc<Self>, l: TcpListener, shutdown: watch::Receiver<bool>) {
        let mut sd = shutdown.clone();
        loop {
            tokio::select! {
                _ = stopped(&mut sd) => return,
                r = l.accept() => match r {
                    Ok((s, addr)) => {
                        let _ = s.set_nodelay(true);
                        self.spawn_conn(Box::new(s), Peer::ip(addr), &shutdown);
                    }
                    Err(e) => {
                        tracing::warn!(input = %self.name, error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        }
    }

    async fn accept_unix(
        self: Arc<Self>,
        l: UnixListener,
        path: PathBuf,
        shutdown: watch::Receiver<bool>,
    ) {
        let mut sd = shutdown.clone();
        loop {
            tokio::select! {
                _ = stopped(&mut sd) => return,
                r = l.accept() => match r {
                    Ok((s, _)) => self.spawn_conn(Box::new(s), Peer::unix(&path), &shutdown),
                    Err(e) => {
                        tracing::warn!(input = %self.name, error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        }
    }

    fn spawn_conn(
        self: &Arc<Self>,
        s: Box<dyn Stream>,
        peer: Peer,
        shutdown: &watch::Receiver<bool>,
    ) {
        PluginStats::add(&self.stats.connections, 1);
        let limit = self.settings.max_connections;
        if self.open.fetch_add(1, Ordering::SeqCst) >= limit {
            self.open.fetch_sub(1, Ordering::SeqCst);
            PluginStats::add(&self.stats.bad_input, 1);
            tracing::warn!(input = %self.name, peer = %peer.label,
                reason = %format!("{limit} connections open (max_connections)"), "closing connection");
            return;
        }
        let server = self.clone();
        let live = self.live.clone();
        let mut sd = shutdown.clone();
        tokio::spawn(async move {
            let _live = live;
            let s: Box<dyn Stream> = match &server.settings.tls {
                None => s,
                Some(_) => {
                    let handshake = tokio::select! {
                        t = crate::net::tls::accept(&server.settings.tls, s, &peer.label) => Some(t),
                        // Shutdown does not wait for a handshake: nothing was taken yet.
                        _ = stopped(&mut sd) => None,
                    };
                    match handshake {
                        Some(Some(t)) => Box::new(t),
                        failed => {
                            server.open.fetch_sub(1, Ordering::SeqCst);
                            // A failed handshake was logged with the peer and reason.
                            if failed.is_some() {
                                PluginStats::add(&server.stats.bad_input, 1);
                            }
                            return;
                        }
                    }
                }
            };
            let r = server.serve(s, &peer, sd).await;
            server.open.fetch_sub(1, Ordering::SeqCst);
            if let Err(reason) = r {
                PluginStats::add(&server.stats.bad_input, 1);
                tracing::warn!(input = %server.name, peer = %peer.label, reason = %reason, "closing connection");
            }
        });
    }

    /// Reads one connection to its end.
    async fn serve(
        &self,
        mut s: Box<dyn Stream>,
        peer: &Peer,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<(), String> {
        let idle = self.settings.idle_timeout;
        let mut framer = Framer::new(self.settings.framing.clone(), self.settings.max_message);
        let mut buf = BytesMut::with_capacity(READ_SIZE);
        let mut batches = Batches::default();
        let mut closing = false;
        // Moves on whenever a message completes or nothing is pending.
        let mut deadline = after(idle);
        loop {
            if buf.capacity() - buf.len() < READ_SIZE / 4 {
                buf.reserve(READ_SIZE);
            }
            let read = tokio::select! {
                r = tokio::time::timeout_at(deadline, s.read_buf(&mut buf)) => r,
                _ = stopped(&mut shutdown), if !closing => {
                    // Take what the peer already sent, then stop.
                    closing = true;
                    match tokio::time::timeout(Duration::from_millis(50), s.read_buf(&mut buf)).await {
                        Ok(r) => Ok(r),
                        Err(_) => Ok(Ok(0)),
                    }
                }
            };
            let eof = match read {
                Err(_) if buf.is_empty() && !framer.inside_frame() => {
                    return Err(format!("idle for {}", humantime::format_duration(idle)))
                }
                Err(_) => {
                    return Err(format!(
                        "no complete message for {} ({} bytes pending)",
                        humantime::format_duration(idle),
                        buf.len()
                    ))
                }
                Ok(Err(e)) => return Err(format!("read error: {e}")),
                Ok(Ok(n)) => n == 0,
            };
            let now = EventTime::now();
            let mut completed = 0;
            framer.split(&mut buf, &mut |m| {
                completed += 1;
                self.one(m, peer, now, &mut batches)
            });
            if eof {
                framer.finish(&mut buf, &mut |m| self.one(m, peer, now, &mut batches));
            }
            self.deliver(&mut batches).await?;
            if eof {
                if framer.inside_frame() || !buf.is_empty() {
                    return Err(format!(
                        "connection closed inside a frame ({} bytes unread)",
                        buf.len()
                    ));
                }
                return Ok(());
            }
            if closing {
                return Ok(());
            }
            if completed > 0 || buf.is_empty() {
                deadline = after(idle);
            }
        }
    }

    /// Decodes one message into `batches`, counting what went wrong.
    fn one(&self, m: Message<'_>, peer: &Peer, now: EventTime, batches: &mut Batches) {
        self.decoding().one(m, peer, now, batches)
    }

    fn decoding(&self) -> Decoding<'_> {
        Decoding {
            name: &self.name,
            stats: &self.stats,
            settings: &self.settings,
            decoder: &*self.decoder,
        }
    }

    /// Appends the batches to the outputs (waits while their buffers are full).
    async fn deliver(&self, batches: &mut Batches) -> Result<(), String> {
        for (tag, entries, count) in batches.list.drain(..) {
            if !append_batch(
                &self.name,
                &self.router,
                &self.stats,
                &tag,
                Bytes::from(entries),
                count,
                false,
            )
            .await
            {
                return Err(format!(
                    "the outputs are closed (shutting down); {count} events not taken"
                ));
            }
        }
        Ok(())
    }

    /// One datagram: one message (syslog) or lines.
    fn datagram(&self, data: &[u8], peer: &Peer, now: EventTime, batches: &mut Batches) {
        self.decoding().datagram(data, peer, now, batches)
    }

    async fn read_datagrams(self: Arc<Self>, sock: Dgram, mut shutdown: watch::Receiver<bool>) {
        let _live = self.live.clone();
        let mut buf = vec![0u8; 65536];
        let mut batches = Batches::default();
        let mut stopping = false;
        loop {
            let now = EventTime::now();
            let mut got = 0;
            if !stopping {
                tokio::select! {
                    r = sock.recv(&mut buf) => match r {
                        Ok((n, peer)) => {
                            self.datagram(&buf[..n], &peer, now, &mut batches);
                            got += 1;
                        }
                        Err(e) => {
                            tracing::warn!(input = %self.name, error = %e, "receive failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    },
                    // Then read what is queued, and stop.
                    _ = stopped(&mut shutdown) => stopping = true,
                }
            }
            // What is queued already, up to a batch.
            while got < DATAGRAMS_PER_BATCH && batches.bytes() < READ_SIZE * 4 {
                match sock.try_recv(&mut buf) {
                    Ok((n, peer)) => self.datagram(&buf[..n], &peer, now, &mut batches),
                    Err(_) => break,
                }
                got += 1;
            }
            if let Err(e) = self.deliver(&mut batches).await {
                tracing::warn!(input = %self.name, reason = %e, "datagrams not taken");
                return;
            }
            if stopping && got == 0 {
                return;
            }
        }
    }
}
