//! `forward`: sends chunks as PackedForward frames to Fluentd, Fluent Bit or
//! nagare servers, with load balancing (weighted, round robin or consistent
//! hashing), standby servers, heartbeats judged by a phi accrual failure
//! detector, acks, gzip and the shared-key handshake. docs/forward-output.md
//! tells the whole story.
//!
//! A chunk's bytes already are a PackedForward payload, so sending is a
//! header, the chunk bytes as they are, and the option map. The chunk id is
//! stable across retries, so a receiving nagare can drop a resent chunk it
//! already committed.

mod discovery;
mod hashing;
mod phi;

pub use discovery::ServiceDiscovery;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
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

use nagare_core::output::{FlushError, Output};
use crate::buffer::Chunk;
use nagare_core::units::Dur;
use nagare_core::record::{self, FieldPath};
use crate::proto::forward_io;
use nagare_core::output::OutputPlugin;
use nagare_core::plugin::{BuildContext, OptionError};
use crate::net::tls::{self, MaybeTls, TlsClient, TlsOptions};
use hashing::HashKey;
use phi::Phi;

/// A connection to a server, with TLS when the output has it.
type Conn = MaybeTls<TcpStream>;

/// One server of a forward output.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// "HOST:PORT" of a forward server.
    pub address: String,
    /// Share of chunks (or, with lb = "consistent_hash", of keys) this
    /// server gets among the active ones (default 60; ignored by
    /// "round_robin").
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
    /// A TCP connect every heartbeat_interval (with the TLS and shared-key
    /// handshakes when the server has them), closed at once.
    #[default]
    Transport,
    /// A UDP datagram to the server's port; any answer counts.
    Udp,
    /// No heartbeat: a failed server is tried again after recover_wait.
    None,
}

/// How a chunk's server is chosen among the active ones.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, schemars::JsonSchema, Default,
)]
#[serde(rename_all = "snake_case")]
pub enum Lb {
    /// Chunks in turn, each server as often as its weight says.
    #[default]
    Weighted,
    /// Chunks in turn, one each, weights ignored.
    RoundRobin,
    /// Each key (`hash_key`) always to the same server while it is up
    /// (rendezvous hashing; weights scale the share of keys).
    ConsistentHash,
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
    /// More servers from a file or from DNS, kept current while running
    /// (`[output.service_discovery]`: `type = "file"` with `path`, or
    /// `type = "dns"` with `name`); they join the [[output.server]] tables.
    #[serde(default)]
    pub service_discovery: Option<ServiceDiscovery>,
    /// How chunks are spread over the active servers: "weighted" (default:
    /// weighted round robin), "round_robin" (weights ignored) or
    /// "consistent_hash" (each `hash_key` always to the same server while it
    /// is up; see docs/forward-output.md).
    #[serde(default)]
    pub lb: Lb,
    /// With lb = "consistent_hash": what an event's key is: "tag" (default;
    /// whole chunks go to one server) or a record field, written as the
    /// filters write fields (`host` for a top-level key, `$.k8s.pod` for a
    /// nested one, `$.tag` for a field named "tag"). A chunk's events are
    /// split by key; an event without the field has the empty key.
    #[serde(default)]
    pub hash_key: Option<String>,
    /// A server whose heartbeats go unanswered is marked down once the phi
    /// accrual failure detector's suspicion passes this (default 16, as
    /// Fluentd: about 37 heartbeat intervals of silence at a steady pace).
    #[serde(default = "default_phi_threshold")]
    pub phi_threshold: f64,
    /// A server whose heartbeats go unanswered this long is marked down
    /// whatever phi says (default "60s").
    #[serde(default = "default_hard_timeout")]
    pub hard_timeout: Dur,
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
    #[serde(default = "nagare_core::plugin::yes")]
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
fn default_phi_threshold() -> f64 {
    16.0
}
fn default_hard_timeout() -> Dur {
    Dur(Duration::from_secs(60))
}
fn default_recover_wait() -> Dur {
    Dur(Duration::from_secs(10))
}

struct Server {
    cfg: ServerConfig,
    /// Rendezvous hashing's seed: the hash of the address.
    seed: u64,
    up: AtomicBool,
    /// Consecutive failures, for the reconnect backoff.
    failures: AtomicU64,
    down_since: Mutex<Option<Instant>>,
    idle: Mutex<Vec<Conn>>,
    /// Answered heartbeats, for the failure detector.
    phi: Mutex<Phi>,
    /// Why the server is down, as last logged: a server that keeps failing
    /// the same way (a refused key every heartbeat) is logged once.
    logged: Mutex<Option<String>>,
}

impl Server {
    fn new(cfg: ServerConfig, heartbeat_interval: Duration) -> Server {
        Server {
            seed: hashing::server_seed(&cfg.address),
            cfg,
            up: AtomicBool::new(true),
            failures: AtomicU64::new(0),
            down_since: Mutex::new(None),
            idle: Mutex::new(Vec::new()),
            phi: Mutex::new(Phi::new(heartbeat_interval, Instant::now())),
            logged: Mutex::new(None),
        }
    }

    fn mark_down(&self, why: &str) {
        self.failures.fetch_add(1, Relaxed);
        self.down(why);
        *self.down_since.lock().expect("server") = Some(Instant::now());
    }

    /// Marks the server down (logged on the change, or when the reason
    /// changes), without counting a failure for the reconnect backoff.
    fn down(&self, why: &str) {
        let mut logged = self.logged.lock().expect("server");
        if self.up.swap(false, Relaxed) {
            tracing::warn!(server = %self.cfg.address, error = %why, "forward server marked down");
            self.phi.lock().expect("server").reset(Instant::now());
            *self.down_since.lock().expect("server") = Some(Instant::now());
        } else if logged.as_deref() != Some(why) {
            tracing::warn!(server = %self.cfg.address, error = %why, "forward server unreachable");
        }
        *logged = Some(why.to_string());
        self.idle.lock().expect("server").clear();
    }

    fn mark_up(&self) {
        self.failures.store(0, Relaxed);
        if !self.up.swap(true, Relaxed) {
            tracing::info!(server = %self.cfg.address, "forward server is up");
            // The failure detector starts afresh from now.
            let now = Instant::now();
            let mut phi = self.phi.lock().expect("server");
            phi.reset(now);
            phi.arrive(now);
        }
        *self.logged.lock().expect("server") = None;
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

/// The output's servers: the configured ones and (later) the discovered
/// ones. Swapped whole when the list changes; a server that stays keeps
/// its state (up or down, heartbeats, idle connections).
struct Pool {
    list: ArcSwap<Vec<Arc<Server>>>,
    /// The [[output.server]] tables.
    fixed: Vec<ServerConfig>,
    heartbeat_interval: Duration,
}

impl Pool {
    fn load(&self) -> Arc<Vec<Arc<Server>>> {
        self.list.load_full()
    }

    /// Makes the list the fixed servers and `found` (a server in both is
    /// taken once, as configured).
    fn set_discovered(&self, output: &str, found: Vec<ServerConfig>) {
        let old = self.load();
        let mut cfgs = self.fixed.clone();
        for f in found {
            if !cfgs.iter().any(|c| c.address == f.address) {
                cfgs.push(f);
            }
        }
        let new: Vec<Arc<Server>> = cfgs
            .into_iter()
            .map(|c| {
                old.iter()
                    .find(|s| s.cfg == c)
                    .cloned()
                    .unwrap_or_else(|| Arc::new(Server::new(c, self.heartbeat_interval)))
            })
            .collect();
        let added: Vec<&str> = new
            .iter()
            .filter(|s| !old.iter().any(|o| Arc::ptr_eq(o, s)))
            .map(|s| s.cfg.address.as_str())
            .collect();
        let removed: Vec<&str> = old
            .iter()
            .filter(|o| !new.iter().any(|s| Arc::ptr_eq(o, s)))
            .map(|s| s.cfg.address.as_str())
            .collect();
        if added.is_empty() && removed.is_empty() {
            return;
        }
        tracing::info!(output = %output, added = ?added, removed = ?removed,
            servers = new.len(), "forward servers changed");
        self.list.store(Arc::new(new));
    }
}

/// What opening a connection needs; shared with the heartbeat task.
struct Connector {
    tls: Option<Arc<TlsClient>>,
    hostname: String,
    shared_key: Option<String>,
    connect_timeout: Duration,
}

impl Connector {
    /// A connection to `s`, through TLS and the shared-key handshake when
    /// the output has them.
    async fn connect(&self, s: &Server) -> Result<Conn, String> {
        let stream =
            tokio::time::timeout(self.connect_timeout, TcpStream::connect(&s.cfg.address))
                .await
                .map_err(|_| "connect timed out".to_string())?
                .map_err(|e| format!("connect: {e}"))?;
        let _ = stream.set_nodelay(true);
        let mut stream = tls::connect(&self.tls, stream, &s.cfg.address).await?;
        if let Some(key) = self.key(s) {
            let user = s.cfg.username.as_deref().unwrap_or_default();
            let pass = s.cfg.password.as_deref().unwrap_or_default();
            let hs = ClientHandshake::new(
                key.as_bytes(),
                self.hostname.as_bytes(),
                user.as_bytes(),
                pass.as_bytes(),
            );
            let mut buf = BytesMut::new();
            forward_io::client_handshake(&mut stream, &mut buf, hs, self.connect_timeout)
                .await
                .map_err(|e| e.explain("shared_key"))?;
        }
        Ok(stream)
    }

    fn key<'a>(&'a self, s: &'a Server) -> Option<&'a String> {
        s.cfg.shared_key.as_ref().or(self.shared_key.as_ref())
    }

    /// One transport heartbeat: a TCP connect, and the TLS and shared-key
    /// handshakes when the server has them (so the server sees a complete
    /// client, not a handshake error, and a refused key keeps it down).
    async fn heartbeat(&self, s: &Server, wait: Duration) -> Beat {
        let full = self.tls.is_some() || self.key(s).is_some();
        let r = if full {
            tokio::time::timeout(wait, self.connect(s))
                .await
                .map(|r| r.map(drop))
        } else {
            tokio::time::timeout(wait, TcpStream::connect(&s.cfg.address))
                .await
                .map(|r| r.map(drop).map_err(|e| format!("connect: {e}")))
        };
        match r {
            Err(_) => Beat::Silent,
            Ok(Ok(())) => Beat::Answered,
            // The connect's own timeouts (connect_timeout, the TLS
            // handshake's) are at least `wait`: an error here is definite.
            Ok(Err(e)) => Beat::Failed(e),
        }
    }
}

/// The outcome of one heartbeat.
#[derive(Debug, PartialEq)]
enum Beat {
    /// The server answered: an arrival for the failure detector.
    Answered,
    /// No answer in time: the failure detector judges the silence.
    Silent,
    /// A definite failure (refused connection, refused handshake): the
    /// server is down now, as after a send error.
    Failed(String),
}

pub struct ForwardOutput {
    cfg: ForwardOutputConfig,
    name: String,
    pool: Arc<Pool>,
    rr: AtomicUsize,
    connector: Arc<Connector>,
    hash_key: Option<HashKey>,
    /// With a record field as hash_key: the events of a chunk already
    /// delivered by an earlier try, so a retry sends only the rest. Bounded
    /// (cleared past MAX_PARTIAL chunks); the part ids cover what it forgets.
    partial: Mutex<HashMap<[u8; 16], Vec<bool>>>,
}

/// Chunks whose partial delivery is remembered at most.
const MAX_PARTIAL: usize = 1024;

impl ForwardOutput {
    pub fn new(
        cfg: ForwardOutputConfig,
        name: &str,
        tls: Option<Arc<TlsClient>>,
    ) -> anyhow::Result<Self> {
        let interval = cfg.heartbeat_interval.0;
        let servers: Vec<Arc<Server>> = cfg
            .server
            .iter()
            .map(|s| Arc::new(Server::new(s.clone(), interval)))
            .collect();
        if servers.is_empty() && cfg.service_discovery.is_none() {
            anyhow::bail!("{name}: a forward output needs at least one [[output.server]]");
        }
        let hostname = cfg
            .self_hostname
            .clone()
            .unwrap_or_else(|| gethostname::gethostname().to_string_lossy().into_owned());
        let hash_key = match (cfg.lb, &cfg.hash_key) {
            (Lb::ConsistentHash, None) => Some(HashKey::Tag),
            (Lb::ConsistentHash, Some(k)) => {
                Some(HashKey::parse(k).map_err(|e| anyhow::anyhow!("hash_key: {e}"))?)
            }
            _ => None,
        };
        let out = ForwardOutput {
            pool: Arc::new(Pool {
                list: ArcSwap::from_pointee(servers),
                fixed: cfg.server.clone(),
                heartbeat_interval: interval,
            }),
            rr: AtomicUsize::new(0),
            name: name.to_string(),
            connector: Arc::new(Connector {
                tls,
                hostname,
                shared_key: cfg.shared_key.clone(),
                connect_timeout: cfg.connect_timeout.0,
            }),
            hash_key,
            partial: Mutex::new(HashMap::new()),
            cfg,
        };
        if let Some(sd) = &out.cfg.service_discovery {
            let found = sd
                .initial()
                .map_err(|e| anyhow::anyhow!("service_discovery.path: {e}"))?;
            out.pool.set_discovered(&out.name, found);
        }
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
        let pool = Arc::downgrade(&self.pool);
        let connector = self.connector.clone();
        let kind = self.cfg.heartbeat_type;
        let interval = self.cfg.heartbeat_interval.0;
        let timeout = self
            .cfg
            .connect_timeout
            .0
            .min(interval.max(Duration::from_millis(500)));
        let (threshold, hard) = (self.cfg.phi_threshold, self.cfg.hard_timeout.0);
        handle.spawn(heartbeats(
            pool, connector, kind, interval, timeout, threshold, hard,
        ));
    }

    /// Servers of `list` in the order to try for the next chunk: the
    /// weighted pick among the primaries that are up, the other primaries
    /// that are up, the primaries that are down but due for another try,
    /// and — only while no primary is up — the standbys.
    fn candidates(&self, servers: &[Arc<Server>]) -> Vec<usize> {
        let up = |i: &usize| servers[*i].up.load(Relaxed);
        let due = |i: &usize| servers[*i].due(self.recover());
        let (standby, primary): (Vec<usize>, Vec<usize>) =
            (0..servers.len()).partition(|&i| servers[i].cfg.standby);
        let active: Vec<usize> = primary.iter().copied().filter(up).collect();
        let mut order = Vec::with_capacity(servers.len());
        // Weighted round robin: the counter walks the servers' weight ranges,
        // with weights divided by their gcd so equal weights alternate chunk
        // by chunk instead of in runs of `weight` chunks. Round robin is
        // the same with every weight 1.
        let weight = |i: usize| match self.cfg.lb {
            Lb::RoundRobin => 1,
            _ => servers[i].cfg.weight as u64,
        };
        let g = active.iter().map(|&i| weight(i)).fold(0, gcd).max(1);
        let total: u64 = active.iter().map(|&i| weight(i) / g).sum();
        if total > 0 {
            let mut pick = (self.rr.fetch_add(1, Relaxed) as u64) % total;
            for &i in &active {
                let w = weight(i) / g;
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

    /// With no heartbeat to bring a server back, recover_wait also does.
    fn recover(&self) -> Option<Duration> {
        (self.cfg.heartbeat_type == HeartbeatType::None).then_some(self.cfg.recover_wait.0)
    }

    /// The servers that hold keys under consistent hashing, leaving out
    /// `excluded` (failed in this write): the primaries that are up; while
    /// none is, the standbys that are up; while none is either, the
    /// primaries due for another try, then the standbys.
    fn hash_pool(&self, servers: &[Arc<Server>], excluded: &[usize]) -> Vec<usize> {
        let ok = |i: &usize| !excluded.contains(i);
        let up = |i: &usize| ok(i) && servers[*i].up.load(Relaxed);
        let due = |i: &usize| ok(i) && servers[*i].due(self.recover());
        let (standby, primary): (Vec<usize>, Vec<usize>) =
            (0..servers.len()).partition(|&i| servers[i].cfg.standby);
        for set in [&primary, &standby] {
            let v: Vec<usize> = set.iter().copied().filter(up).collect();
            if !v.is_empty() {
                return v;
            }
        }
        for set in [&primary, &standby] {
            let v: Vec<usize> = set.iter().copied().filter(due).collect();
            if !v.is_empty() {
                return v;
            }
        }
        Vec::new()
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
        self.connector.connect(s).await
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

/// The heartbeat task: every `interval`, one heartbeat to each server at
/// once; an answer is an arrival for the server's failure detector (and
/// brings a down server back), a definite failure marks it down at once,
/// and silence is judged by phi and `hard`.
async fn heartbeats(
    pool: Weak<Pool>,
    connector: Arc<Connector>,
    kind: HeartbeatType,
    interval: Duration,
    timeout: Duration,
    threshold: f64,
    hard: Duration,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(pool) = pool.upgrade() else {
            return;
        };
        let servers = pool.load();
        drop(pool);
        let mut beats = tokio::task::JoinSet::new();
        for (i, s) in servers.iter().enumerate() {
            let (s, connector) = (s.clone(), connector.clone());
            beats.spawn(async move {
                let beat = match kind {
                    HeartbeatType::Transport => connector.heartbeat(&s, timeout).await,
                    HeartbeatType::Udp => udp_heartbeat(&s.cfg.address, timeout).await,
                    HeartbeatType::None => Beat::Answered,
                };
                (i, beat)
            });
        }
        while let Some(done) = beats.join_next().await {
            let Ok((i, beat)) = done else { continue };
            judge(&servers[i], beat, Instant::now(), threshold, hard);
        }
    }
}

/// Applies one heartbeat's outcome at `now` to a server.
fn judge(s: &Server, beat: Beat, now: Instant, threshold: f64, hard: Duration) {
    match beat {
        Beat::Answered => {
            s.phi.lock().expect("server").arrive(now);
            s.mark_up();
            return;
        }
        Beat::Failed(why) => {
            s.down(&why);
            return;
        }
        Beat::Silent => {}
    }
    if !s.up.load(Relaxed) {
        return;
    }
    let (phi, silence) = {
        let p = s.phi.lock().expect("server");
        (p.phi(now), p.silence(now))
    };
    if silence > hard {
        s.down(&format!(
            "no heartbeat answered for {:.1}s (hard_timeout {}s)",
            silence.as_secs_f64(),
            hard.as_secs_f64()
        ));
    } else if phi > threshold {
        s.down(&format!(
            "no heartbeat answered for {:.1}s (phi {phi:.1} > phi_threshold {threshold})",
            silence.as_secs_f64()
        ));
    }
}

async fn udp_heartbeat(address: &str, timeout: Duration) -> Beat {
    let sock = match tokio::net::UdpSocket::bind(if address.starts_with('[') {
        "[::]:0"
    } else {
        "0.0.0.0:0"
    })
    .await
    {
        Ok(s) => s,
        Err(e) => return Beat::Failed(format!("udp heartbeat: {e}")),
    };
    let sent = async {
        sock.connect(address).await?;
        sock.send(b"\0").await
    };
    if let Err(e) = sent.await {
        return Beat::Failed(format!("udp heartbeat: {e}"));
    }
    let mut b = [0u8; 16];
    match tokio::time::timeout(timeout, sock.recv(&mut b)).await {
        Ok(Ok(_)) => Beat::Answered,
        // An ICMP "port unreachable" comes back as a refused receive.
        Ok(Err(e)) => Beat::Failed(format!("udp heartbeat: {e}")),
        // A datagram may be lost: the failure detector judges the silence.
        Err(_) => Beat::Silent,
    }
}

impl ForwardOutput {
    /// Sends the whole chunk to one server: the first candidate, then the
    /// next ones if it fails.
    async fn write_whole(&self, chunk: &Chunk, servers: &[Arc<Server>]) -> Result<(), FlushError> {
        let (frame, ack_id) = self.frame(chunk)?;
        let mut errors = Vec::new();
        let mut tried = Vec::new();
        // The candidates are recomputed after each failure, so a standby takes
        // over within the same write once the last primary is marked down.
        loop {
            let next = match &self.hash_key {
                Some(_) => {
                    // hash_key = "tag": the chunk's tag is the key.
                    let pool = self.hash_pool(servers, &tried);
                    let seeds = seeds(servers, &pool);
                    hashing::pick(chunk.tag.as_bytes(), &seeds).map(|p| pool[p])
                }
                None => self.candidates(servers).into_iter().find(|i| !tried.contains(i)),
            };
            let Some(i) = next else { break };
            tried.push(i);
            let s = &servers[i];
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

    /// Consistent hashing on a record field: the chunk's events are split
    /// into one part per server (each key's events in their order), and
    /// each part is sent as a chunk of its own. A part whose server fails
    /// is split again over the servers left, so only that server's keys
    /// move. What was delivered is remembered for the buffer's retry.
    async fn write_split(
        &self,
        chunk: &Chunk,
        servers: &[Arc<Server>],
        path: &FieldPath,
    ) -> Result<(), FlushError> {
        // Each entry: (segment, start, end, record start).
        let mut spans = Vec::with_capacity(chunk.count as usize);
        for (si, seg) in chunk.segments.iter().enumerate() {
            let mut start = 0;
            for (record, end) in record::entries(seg) {
                spans.push((si, start, end, record));
                start = end;
            }
        }
        let mut done = self
            .partial
            .lock()
            .expect("partial")
            .remove(&chunk.id)
            .filter(|d| d.len() == spans.len())
            .unwrap_or_else(|| vec![false; spans.len()]);
        let mut todo: Vec<usize> = (0..spans.len()).filter(|&e| !done[e]).collect();
        let mut excluded = Vec::new();
        let mut errors = Vec::new();
        let mut scratch = Vec::new();
        while !todo.is_empty() {
            let pool = self.hash_pool(servers, &excluded);
            if pool.is_empty() {
                break;
            }
            let seeds = seeds(servers, &pool);
            // (server, its entries), in order of first appearance.
            let mut parts: Vec<(usize, Vec<usize>)> = Vec::new();
            for &e in &todo {
                let (si, _, end, r) = spans[e];
                let key = HashKey::of(path, &chunk.segments[si][r..end], &mut scratch);
                let i = pool[hashing::pick(key, &seeds).expect("a server")];
                match parts.iter_mut().find(|(s, _)| *s == i) {
                    Some((_, v)) => v.push(e),
                    None => parts.push((i, vec![e])),
                }
            }
            todo.clear();
            for (i, entries) in parts {
                let s = &servers[i];
                let owned;
                let part = if entries.len() == spans.len() {
                    // Every event to one server: the chunk as it is.
                    chunk
                } else {
                    let mut b = Vec::with_capacity(chunk.len);
                    for &e in &entries {
                        let (si, start, end, _) = spans[e];
                        b.extend_from_slice(&chunk.segments[si][start..end]);
                    }
                    let id = hashing::part_id(&chunk.id, &s.cfg.address, &b);
                    owned = Chunk::in_memory(id, chunk.tag.clone(), b, entries.len() as u32);
                    &owned
                };
                let (frame, ack_id) = self.frame(part)?;
                match self.send_to(s, part, &frame, ack_id.as_deref()).await {
                    Ok(()) => {
                        s.mark_up();
                        entries.iter().for_each(|&e| done[e] = true);
                    }
                    Err(e) => {
                        s.mark_down(&e);
                        errors.push(format!("{}: {e}", s.cfg.address));
                        excluded.push(i);
                        todo.extend(entries);
                    }
                }
            }
            todo.sort_unstable();
        }
        if todo.is_empty() {
            return Ok(());
        }
        if done.iter().any(|&d| d) {
            let mut partial = self.partial.lock().expect("partial");
            if partial.len() >= MAX_PARTIAL {
                partial.clear();
            }
            partial.insert(chunk.id, done);
        }
        if errors.is_empty() {
            errors.push("every server is down".into());
        }
        Err(FlushError::Retry(errors.join("; ")))
    }
}

/// Checks a server's "HOST:PORT".
fn check_address(address: &str) -> Result<(), String> {
    nagare_core::address::host_port(address, "aggregator.example:24224")
}

/// (seed, weight) of the servers `pool` names, for rendezvous hashing.
fn seeds(servers: &[Arc<Server>], pool: &[usize]) -> Vec<(u64, u32)> {
    pool.iter()
        .map(|&i| (servers[i].seed, servers[i].cfg.weight))
        .collect()
}

#[async_trait]
impl Output for ForwardOutput {
    fn start(&self) {
        self.start_heartbeat();
        if let Some(sd) = &self.cfg.service_discovery {
            sd.start(&self.name, Arc::downgrade(&self.pool));
        }
    }

    async fn write(&self, chunk: &Chunk) -> Result<(), FlushError> {
        let servers = self.pool.load();
        match &self.hash_key {
            Some(HashKey::Field(path)) => self.write_split(chunk, &servers, path).await,
            _ => self.write_whole(chunk, &servers).await,
        }
    }
}

impl OutputPlugin for ForwardOutputConfig {
    const TYPE: &'static str = "forward";
    const DOC: &'static str = "Sends events to forward servers (Fluentd, Fluent Bit, nagare).";

    fn build(self, cx: &mut BuildContext) -> Result<Arc<dyn Output>, OptionError> {
        if self.server.is_empty() && self.service_discovery.is_none() {
            return Err(OptionError::new(
                "server",
                "a forward output needs at least one [[output.server]] with an `address`, \
                 or [output.service_discovery]",
            ));
        }
        for (i, s) in self.server.iter().enumerate() {
            check_address(&s.address)
                .map_err(|e| OptionError::new(format!("server[{i}].address"), e))?;
        }
        if let Some(sd) = &self.service_discovery {
            sd.check().map_err(|(key, e)| {
                OptionError::new(format!("service_discovery.{key}"), e)
            })?;
            // A file that cannot be read or parsed now is a mistake in the
            // config (later, the last good list stays).
            sd.initial()
                .map_err(|e| OptionError::new("service_discovery.path", e))?;
        }
        match (&self.hash_key, self.lb) {
            (Some(_), Lb::Weighted | Lb::RoundRobin) => {
                return Err(OptionError::new(
                    "hash_key",
                    "hash_key is used by lb = \"consistent_hash\" only; set lb too",
                ))
            }
            (Some(k), Lb::ConsistentHash) => {
                HashKey::parse(k).map_err(|e| OptionError::new("hash_key", e))?;
            }
            _ => {}
        }
        if self.phi_threshold.is_nan() || self.phi_threshold <= 0.0 {
            return Err(OptionError::new(
                "phi_threshold",
                format!("{} is not a threshold: write a number above 0 (default 16)", self.phi_threshold),
            ));
        }
        let tls = TlsClient::build(self.tls.as_ref(), cx)?;
        let out = ForwardOutput::new(self, &cx.name, tls)
            .map_err(|e| OptionError::new("", format!("{e:#}")))?;
        Ok(Arc::new(out))
    }
}
