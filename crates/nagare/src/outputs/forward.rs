//! `forward`: sends chunks as PackedForward frames to Fluentd, Fluent Bit or
//! nagare servers, with weights, standby servers, heartbeats, acks, gzip and
//! the shared-key handshake.
//!
//! A chunk's bytes already are a PackedForward payload, so sending is a
//! header, the chunk bytes as they are, and the option map. The chunk id is
//! stable across retries, so a receiving nagare can drop a resent chunk it
//! already committed.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::BytesMut;
use nagare_forward::handshake::{decode_reply, ClientHandshake, Reply};
use nagare_forward::msgpack::{
    write_array_len, write_bin_header, write_map_len, write_str, write_uint,
};
use nagare_forward::Compression;
use serde::Deserialize;
use futures_util::FutureExt;
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{FlushError, Output};
use crate::buffer::Chunk;
use crate::config::units::Dur;
use crate::forward_io;
use crate::plugin::{BuildContext, OptionError, OutputPlugin};
use crate::tls::{self, MaybeTls, TlsClient, TlsOptions};

/// A connection to a server, with TLS when the output has it.
type Conn = MaybeTls<TcpStream>;

/// One server of a forward output.
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// "HOST:PORT" of a forward server.
    pub address: String,
    /// Share of chunks this server gets among the active ones (default 60).
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// Used only while every non-standby server is down (default false).
    #[serde(default)]
    pub standby: bool,
    /// Overrides the output's shared_key for this server.
    #[serde(default)]
    pub shared_key: Option<String>,
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub password: Option<String>,
}

fn default_weight() -> u32 {
    60
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, schemars::JsonSchema, Default,
)]
#[serde(rename_all = "snake_case")]
pub enum HeartbeatType {
    /// A TCP connect every heartbeat_interval.
    #[default]
    Transport,
    /// A UDP datagram to the server's port; any answer counts.
    Udp,
    /// No heartbeat: a failed server is tried again after recover_wait.
    None,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ForwardCompression {
    Gzip,
    Zstd,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForwardOutputConfig {
    /// The servers, as [[output.server]] tables.
    #[serde(default)]
    pub server: Vec<ServerConfig>,
    /// Wait for the server's ack of each chunk and resend when none comes (default false).
    #[serde(default)]
    pub require_ack_response: bool,
    /// How long to wait for an ack (default "30s").
    #[serde(default = "default_ack_timeout")]
    pub ack_response_timeout: Dur,
    /// "gzip" sends CompressedPackedForward; "zstd" too, for nagare receivers.
    #[serde(default)]
    pub compress: Option<ForwardCompression>,
    /// Default "5s".
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout: Dur,
    /// A write that takes longer fails the attempt (default "60s").
    #[serde(default = "default_send_timeout")]
    pub send_timeout: Dur,
    /// "transport" (default), "udp" or "none".
    #[serde(default)]
    pub heartbeat_type: HeartbeatType,
    /// Default "1s".
    #[serde(default = "default_heartbeat_interval")]
    pub heartbeat_interval: Dur,
    /// With heartbeat_type "none": how long a failed server rests (default "10s").
    #[serde(default = "default_recover_wait")]
    pub recover_wait: Dur,
    /// Reuse connections between chunks (default true).
    #[serde(default = "yes")]
    pub keepalive: bool,
    /// Shared key for the handshake; when set, the server's HELO is expected.
    #[serde(default)]
    pub shared_key: Option<String>,
    /// Hostname sent in PING (default: this machine's hostname).
    #[serde(default)]
    pub self_hostname: Option<String>,
    /// TLS to every server (`[output.tls]`: `ca`, `server_name`, and `cert`
    /// and `key` for servers that require client certificates); as Fluentd's
    /// `transport tls` and Fluent Bit's `tls on`.
    #[serde(default)]
    pub tls: Option<TlsOptions>,
}

fn default_ack_timeout() -> Dur {
    Dur(Duration::from_secs(30))
}
fn default_connect_timeout() -> Dur {
    Dur(Duration::from_secs(5))
}
fn default_send_timeout() -> Dur {
    Dur(Duration::from_secs(60))
}
fn default_heartbeat_interval() -> Dur {
    Dur(Duration::from_secs(1))
}
fn default_recover_wait() -> Dur {
    Dur(Duration::from_secs(10))
}
fn yes() -> bool {
    true
}

struct Server {
    cfg: ServerConfig,
    up: AtomicBool,
    /// Consecutive failures, for the reconnect backoff.
    failures: AtomicU64,
    down_since: Mutex<Option<Instant>>,
    idle: Mutex<Vec<Conn>>,
}

impl Server {
    fn mark_down(&self, why: &str) {
        let n = self.failures.fetch_add(1, Relaxed);
        if self.up.swap(false, Relaxed) {
            tracing::warn!(server = %self.cfg.address, error = %why, "forward server marked down");
        } else if n == 0 {
            tracing::warn!(server = %self.cfg.address, error = %why, "forward server unreachable");
        }
        *self.down_since.lock().expect("server") = Some(Instant::now());
        self.idle.lock().expect("server").clear();
    }

    fn mark_up(&self) {
        self.failures.store(0, Relaxed);
        if !self.up.swap(true, Relaxed) {
            tracing::info!(server = %self.cfg.address, "forward server is up");
        }
    }

    /// Whether the server may be tried: it is up, or its reconnect backoff
    /// (0.5 s doubling to 30 s) has passed, or it has been down `recover` long.
    fn due(&self, recover: Option<Duration>) -> bool {
        if self.up.load(Relaxed) {
            return true;
        }
        let n = self.failures.load(Relaxed).min(6) as u32;
        let backoff = Duration::from_millis(500 * (1 << n)).min(Duration::from_secs(30));
        let wait = recover.map_or(backoff, |r| r.min(backoff));
        self.down_since
            .lock()
            .expect("server")
            .is_none_or(|t| t.elapsed() >= wait)
    }
}

pub struct ForwardOutput {
    cfg: ForwardOutputConfig,
    name: String,
    servers: Arc<Vec<Server>>,
    rr: AtomicUsize,
    hostname: String,
    tls: Option<Arc<TlsClient>>,
}

impl ForwardOutput {
    pub fn new(
        cfg: ForwardOutputConfig,
        name: &str,
        tls: Option<Arc<TlsClient>>,
    ) -> anyhow::Result<Self> {
        let servers: Vec<Server> = cfg
            .server
            .iter()
            .map(|s| Server {
                cfg: s.clone(),
                up: AtomicBool::new(true),
                failures: AtomicU64::new(0),
                down_since: Mutex::new(None),
                idle: Mutex::new(Vec::new()),
            })
            .collect();
        if servers.is_empty() {
            anyhow::bail!("{name}: a forward output needs at least one [[output.server]]");
        }
        let hostname = cfg
            .self_hostname
            .clone()
            .unwrap_or_else(|| gethostname::gethostname().to_string_lossy().into_owned());
        let out = ForwardOutput {
            servers: Arc::new(servers),
            rr: AtomicUsize::new(0),
            name: name.to_string(),
            hostname,
            cfg,
            tls,
        };
        Ok(out)
    }

    fn start_heartbeat(&self) {
        if self.cfg.heartbeat_type == HeartbeatType::None {
            return;
        }
        // The task ends with the output (a reload replaces it): it holds
        // the servers weakly. It runs only inside a runtime (not in
        // `nagare check`).
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let servers = Arc::downgrade(&self.servers);
        let kind = self.cfg.heartbeat_type;
        let interval = self.cfg.heartbeat_interval.0;
        let timeout = self
            .cfg
            .connect_timeout
            .0
            .min(interval.max(Duration::from_millis(500)));
        handle.spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(servers) = servers.upgrade() else {
                    return;
                };
                for s in servers.iter() {
                    let ok = match kind {
                        HeartbeatType::Transport => {
                            tokio::time::timeout(timeout, TcpStream::connect(&s.cfg.address))
                                .await
                                .is_ok_and(|r| r.is_ok())
                        }
                        HeartbeatType::Udp => udp_heartbeat(&s.cfg.address, timeout).await,
                        HeartbeatType::None => true,
                    };
                    if ok {
                        s.mark_up();
                    } else if s.up.load(Relaxed) {
                        s.mark_down("heartbeat failed");
                    }
                }
            }
        });
    }

    /// Servers in the order to try for the next chunk: the weighted pick
    /// among the primaries that are up, the other primaries that are up, the
    /// primaries that are down but due for another try, and — only while no
    /// primary is up — the standbys.
    fn candidates(&self) -> Vec<usize> {
        let servers = &self.servers;
        let up = |i: &usize| servers[*i].up.load(Relaxed);
        // With no heartbeat to bring a server back, recover_wait also does.
        let recover =
            (self.cfg.heartbeat_type == HeartbeatType::None).then_some(self.cfg.recover_wait.0);
        let due = |i: &usize| servers[*i].due(recover);
        let (standby, primary): (Vec<usize>, Vec<usize>) =
            (0..servers.len()).partition(|&i| servers[i].cfg.standby);
        let active: Vec<usize> = primary.iter().copied().filter(up).collect();
        let mut order = Vec::with_capacity(servers.len());
        // Weighted round robin: the counter walks the servers' weight ranges,
        // with weights divided by their gcd so equal weights alternate chunk
        // by chunk instead of in runs of `weight` chunks.
        let g = active
            .iter()
            .map(|&i| servers[i].cfg.weight as u64)
            .fold(0, gcd)
            .max(1);
        let total: u64 = active
            .iter()
            .map(|&i| servers[i].cfg.weight as u64 / g)
            .sum();
        if total > 0 {
            let mut pick = (self.rr.fetch_add(1, Relaxed) as u64) % total;
            for &i in &active {
                let w = servers[i].cfg.weight as u64 / g;
                if pick < w {
                    order.push(i);
                    break;
                }
                pick -= w;
            }
        }
        let first = order.first().copied();
        order.extend(active.iter().copied().filter(|&i| Some(i) != first));
        order.extend(primary.iter().copied().filter(|i| !up(i) && due(i)));
        if active.is_empty() {
            order.extend(standby.iter().copied().filter(|i| up(i) || due(i)));
        }
        order
    }

    async fn connect(&self, s: &Server) -> Result<Conn, String> {
        let stream = tokio::time::timeout(
            self.cfg.connect_timeout.0,
            TcpStream::connect(&s.cfg.address),
        )
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| format!("connect: {e}"))?;
        let _ = stream.set_nodelay(true);
        let mut stream = tls::connect(&self.tls, stream, &s.cfg.address).await?;
        let key = s.cfg.shared_key.as_ref().or(self.cfg.shared_key.as_ref());
        if let Some(key) = key {
            let user = s.cfg.username.as_deref().unwrap_or_default();
            let pass = s.cfg.password.as_deref().unwrap_or_default();
            let hs = ClientHandshake::new(
                key.as_bytes(),
                self.hostname.as_bytes(),
                user.as_bytes(),
                pass.as_bytes(),
            );
            let mut buf = BytesMut::new();
            forward_io::client_handshake(&mut stream, &mut buf, hs, self.cfg.connect_timeout.0)
                .await
                .map_err(|e| e.explain("shared_key"))?;
        }
        Ok(stream)
    }

    /// Takes an idle connection that the peer has not closed, or opens one.
    async fn conn(&self, s: &Server) -> Result<Conn, String> {
        loop {
            let c = s.idle.lock().expect("server").pop();
            let Some(mut c) = c else { break };
            let mut probe = [0u8; 512];
            // One poll, no wait: nothing to read means the connection is
            // still open. (Under TLS, a session ticket the server sent is
            // taken in by TLS and is not data.)
            match c.read(&mut probe).now_or_never() {
                None => return Ok(c),
                // The peer closed it (FIN) or sent something unexpected: drop it.
                Some(Ok(n)) => {
                    self.warn_if_helo(s, &probe[..n]);
                    continue;
                }
                Some(Err(_)) => continue,
            }
        }
        self.connect(s).await
    }

    /// An idle connection that received a HELO went to a server that wants
    /// a handshake we did not start: it dropped what we sent without acks.
    fn warn_if_helo(&self, s: &Server, bytes: &[u8]) {
        if let Ok(Reply::Helo(_)) = decode_reply(bytes) {
            tracing::error!(output = %self.name, server = %s.cfg.address,
                "the server requires a shared-key handshake (set shared_key): \
                 chunks sent on this connection without require_ack_response were dropped by the server");
        }
    }

    fn frame(&self, chunk: &Chunk) -> Result<(Frame, Option<String>), FlushError> {
        let ack_id = self.cfg.require_ack_response.then(|| chunk.id_hex());
        let compression = match self.cfg.compress {
            None => Compression::None,
            Some(ForwardCompression::Gzip) => Compression::Gzip,
            Some(ForwardCompression::Zstd) => Compression::Zstd,
        };
        if compression != Compression::None {
            let mut whole = Vec::with_capacity(chunk.len / 4);
            nagare_forward::encode_packed_forward(
                &mut whole,
                &chunk.tag,
                &chunk.contiguous(),
                chunk.count,
                ack_id.as_ref().map(|s| s.as_bytes()),
                compression,
            )
            .map_err(|e| FlushError::Retry(format!("compressing: {e}")))?;
            return Ok((Frame::Whole(whole), ack_id));
        }
        let mut head = Vec::with_capacity(16 + chunk.tag.len());
        write_array_len(&mut head, 3);
        write_str(&mut head, chunk.tag.as_bytes());
        write_bin_header(&mut head, chunk.len);
        let mut tail = Vec::with_capacity(64);
        write_map_len(&mut tail, if ack_id.is_some() { 2 } else { 1 });
        write_str(&mut tail, b"size");
        write_uint(&mut tail, chunk.count as u64);
        if let Some(id) = &ack_id {
            write_str(&mut tail, b"chunk");
            write_str(&mut tail, id.as_bytes());
        }
        Ok((Frame::Raw { head, tail }, ack_id))
    }

    async fn send_to(
        &self,
        s: &Server,
        chunk: &Chunk,
        frame: &Frame,
        ack_id: Option<&str>,
    ) -> Result<(), String> {
        let mut c = self.conn(s).await?;
        let send = async {
            match frame {
                // The chunk bytes go out as they are, between header and
                // options, in as few writes (and TLS records) as possible.
                Frame::Raw { head, tail } => {
                    let mut parts = Vec::with_capacity(chunk.segments.len() + 2);
                    parts.push(std::io::IoSlice::new(head));
                    parts.extend(chunk.segments.iter().map(|seg| std::io::IoSlice::new(seg)));
                    parts.push(std::io::IoSlice::new(tail));
                    write_all_vectored(&mut c, &mut parts).await?;
                }
                Frame::Whole(b) => c.write_all(b).await?,
            }
            c.flush().await
        };
        match tokio::time::timeout(self.cfg.send_timeout.0, send).await {
            Err(_) => return Err("send timed out".to_string()),
            Ok(Err(e)) => {
                let why = forward_io::send_failed(&mut c, &mut BytesMut::new(), e).await;
                return Err(why.explain("shared_key"));
            }
            Ok(Ok(())) => {}
        }
        if let Some(id) = ack_id {
            let mut buf = BytesMut::new();
            forward_io::wait_ack(
                &mut c,
                &mut buf,
                id.as_bytes(),
                self.cfg.ack_response_timeout.0,
            )
            .await
            .map_err(|e| e.explain("shared_key"))?;
        }
        if self.cfg.keepalive {
            s.idle.lock().expect("server").push(c);
        }
        Ok(())
    }
}

/// Writes every byte of `parts`, several slices per write.
async fn write_all_vectored<W: AsyncWrite + Unpin>(
    w: &mut W,
    mut parts: &mut [std::io::IoSlice<'_>],
) -> std::io::Result<()> {
    while !parts.is_empty() {
        let n = w.write_vectored(parts).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        std::io::IoSlice::advance_slices(&mut parts, n);
    }
    Ok(())
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// A frame ready to send: header and options around the chunk bytes, or a
/// whole compressed frame.
enum Frame {
    Raw { head: Vec<u8>, tail: Vec<u8> },
    Whole(Vec<u8>),
}

async fn udp_heartbeat(address: &str, timeout: Duration) -> bool {
    let Ok(sock) = tokio::net::UdpSocket::bind(if address.starts_with('[') {
        "[::]:0"
    } else {
        "0.0.0.0:0"
    })
    .await
    else {
        return false;
    };
    if sock.connect(address).await.is_err() || sock.send(b"\0").await.is_err() {
        return false;
    }
    let mut b = [0u8; 16];
    matches!(
        tokio::time::timeout(timeout, sock.recv(&mut b)).await,
        Ok(Ok(_))
    )
}

#[async_trait]
impl Output for ForwardOutput {
    fn start(&self) {
        self.start_heartbeat();
    }

    async fn write(&self, chunk: &Chunk) -> Result<(), FlushError> {
        let (frame, ack_id) = self.frame(chunk)?;
        let mut errors = Vec::new();
        let mut tried = Vec::new();
        // The candidates are recomputed after each failure, so a standby takes
        // over within the same write once the last primary is marked down.
        while let Some(i) = self.candidates().into_iter().find(|i| !tried.contains(i)) {
            tried.push(i);
            let s = &self.servers[i];
            match self.send_to(s, chunk, &frame, ack_id.as_deref()).await {
                Ok(()) => {
                    s.mark_up();
                    return Ok(());
                }
                Err(e) => {
                    s.mark_down(&e);
                    errors.push(format!("{}: {e}", s.cfg.address));
                }
            }
        }
        if errors.is_empty() {
            errors.push("every server is down".into());
        }
        // The buffer's log line names the output; the error names the servers.
        Err(FlushError::Retry(errors.join("; ")))
    }
}

impl OutputPlugin for ForwardOutputConfig {
    const TYPE: &'static str = "forward";
    const DOC: &'static str = "Sends events to forward servers (Fluentd, Fluent Bit, nagare).";

    fn build(self, cx: &mut BuildContext) -> Result<Arc<dyn Output>, OptionError> {
        if self.server.is_empty() {
            return Err(OptionError::new(
                "server",
                "a forward output needs at least one [[output.server]] with an `address`",
            ));
        }
        for (i, s) in self.server.iter().enumerate() {
            let port_ok = s
                .address
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !port_ok {
                return Err(OptionError::new(
                    format!("server[{i}].address"),
                    format!(
                        "expected HOST:PORT such as \"aggregator.example:24224\", found {:?}",
                        s.address
                    ),
                ));
            }
        }
        let tls = TlsClient::build(self.tls.as_ref(), cx)?;
        let out = ForwardOutput::new(self, &cx.name, tls)
            .map_err(|e| OptionError::new("", format!("{e:#}")))?;
        Ok(Arc::new(out))
    }
}
