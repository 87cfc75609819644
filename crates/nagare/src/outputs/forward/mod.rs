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
//!
//! This file holds the options, the output and its registration; each job
//! has a file: a server and its health (server.rs), the list of servers
//! (pool.rs), opening and reusing connections (connect.rs), heartbeats
//! (heartbeat.rs, judged by phi.rs), choosing a server (balance.rs, with
//! hashing.rs for consistent hashing), framing and sending a chunk
//! (send.rs), and servers found by service discovery (discovery.rs).

mod balance;
mod connect;
mod discovery;
mod hashing;
mod heartbeat;
mod phi;
mod pool;
mod send;
mod server;

pub use discovery::ServiceDiscovery;

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use async_trait::async_trait;
use connect::Connector;
use hashing::HashKey;
use nagare_core::output::{FlushError, Output, OutputPlugin};
use nagare_core::plugin::{serde_inline_default, BuildContext, OptionError};
use nagare_core::units::Dur;
use pool::Pool;
use serde::Deserialize;
use server::Server;

use crate::buffer::Chunk;
use crate::net::tls::{TlsClient, TlsOptions};

/// One server of a forward output.
#[serde_inline_default]
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// "HOST:PORT" of a forward server.
    pub address: String,
    /// Share of chunks (or, with lb = "consistent_hash", of keys) this
    /// server gets among the active ones (default 60; ignored by
    /// "round_robin").
    #[serde_inline_default(60)]
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

#[serde_inline_default]
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
    #[serde_inline_default(16.0)]
    pub phi_threshold: f64,
    /// A server whose heartbeats go unanswered this long is marked down
    /// whatever phi says (default "60s").
    #[serde_inline_default(Dur::mins(1))]
    pub hard_timeout: Dur,
    /// Wait for the server's ack of each chunk and resend when none comes (default false).
    #[serde(default)]
    pub require_ack_response: bool,
    /// How long to wait for an ack (default "30s").
    #[serde_inline_default(Dur::secs(30))]
    pub ack_response_timeout: Dur,
    /// "gzip" sends CompressedPackedForward; "zstd" too, for nagare receivers.
    #[serde(default)]
    pub compress: Option<ForwardCompression>,
    /// Default "5s".
    #[serde_inline_default(Dur::secs(5))]
    pub connect_timeout: Dur,
    /// A write that takes longer fails the attempt (default "60s").
    #[serde_inline_default(Dur::mins(1))]
    pub send_timeout: Dur,
    /// "transport" (default), "udp" or "none".
    #[serde(default)]
    pub heartbeat_type: HeartbeatType,
    /// Default "1s".
    #[serde_inline_default(Dur::secs(1))]
    pub heartbeat_interval: Dur,
    /// With heartbeat_type "none": how long a failed server rests (default "10s").
    #[serde_inline_default(Dur::secs(10))]
    pub recover_wait: Dur,
    /// Reuse connections between chunks (default true).
    #[serde_inline_default(true)]
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
}

/// Checks a server's "HOST:PORT".
fn check_address(address: &str) -> Result<(), String> {
    nagare_core::address::host_port(address, "aggregator.example:24224")
}

#[async_trait]
impl Output for ForwardOutput {
    fn start(&self) {
        self.start_heartbeat();
        if let Some(sd) = &self.cfg.service_discovery {
            sd.start(&self.name, Arc::downgrade(&self.pool));
        }
    }

    async fn stop(&self) {
        for s in self.pool.load().iter() {
            let idle = std::mem::take(&mut *s.idle.lock().expect("server"));
            for mut c in idle {
                use tokio::io::AsyncWriteExt;
                // Sends TLS's close_notify, then the TCP FIN.
                let _ = tokio::time::timeout(std::time::Duration::from_secs(1), c.shutdown()).await;
            }
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
            sd.check()
                .map_err(|(key, e)| OptionError::new(format!("service_discovery.{key}"), e))?;
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
                format!(
                    "{} is not a threshold: write a number above 0 (default 16)",
                    self.phi_threshold
                ),
            ));
        }
        let tls = TlsClient::build(self.tls.as_ref(), cx)?;
        let out = ForwardOutput::new(self, &cx.name, tls)
            .map_err(|e| OptionError::new("", format!("{e:#}")))?;
        Ok(Arc::new(out))
    }
}
