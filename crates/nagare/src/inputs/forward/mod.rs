//! `forward`: Fluentd's forward protocol v1 server on TCP or a UNIX socket,
//! with the shared-key handshake, acks, and UDP heartbeat answers.
//!
//! A connection reads big blocks, cuts every complete frame out of its buffer
//! without copying, groups consecutive frames of one tag into one batch, and
//! appends it to the outputs its tag routes to. While an output's buffer is
//! full (overflow_action "block") the connection stops reading, so TCP pushes
//! back on the sender. Acks go out only after the batch is in every matched
//! buffer.
//!
//! This file holds the options, the input and its registration, and
//! starting its listeners (through inputs/common/listeners.rs, shared with
//! other inputs); a connection's life (handshake, reading, batching, acks)
//! is in connection.rs, cutting frames out of the receive buffer in
//! framing.rs, and the answers to UDP heartbeats in heartbeat.rs.

mod connection;
mod framing;
mod heartbeat;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use connection::spawn_conn;
use heartbeat::answer_heartbeats;
use nagare_core::metrics::PluginStats;
use nagare_core::plugin::{BuildContext, Listen, OptionError};
use nagare_core::units::Size;
use nagare_forward::handshake::{ServerAuth, User};
use nagare_forward::Limits;
use serde::Deserialize;
use tokio::net::UdpSocket;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::inputs::common::dedup::RecentIds;
use crate::inputs::common::listeners::{accept_tcp, accept_unix, listen_tcp, listen_unix, stopped};
use crate::inputs::common::{connection_options, AckMode};
use crate::inputs::{Input, InputContext, InputPlugin};
use crate::net::tls::TlsServer;
use crate::router::LiveRouter;

/// Users allowed by a forward input with `shared_key`.
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    /// The name the client sends in PING.
    pub username: String,
    /// Checked through the password digest; never sent in clear.
    pub password: String,
}

connection_options!(
    /// The `forward` input.
    ForwardInputConfig {
        /// "HOST:PORT" to listen on (TCP, and UDP for heartbeats).
        #[serde(default)]
        bind: Option<String>,
        /// A UNIX socket path to listen on instead of `bind`.
        #[serde(default)]
        path: Option<String>,
        /// Require the HELO/PING/PONG handshake with this shared key.
        #[serde(default)]
        shared_key: Option<String>,
        /// With shared_key: also require one of these users ([[input.users]]).
        #[serde(default)]
        users: Vec<UserConfig>,
        /// Hostname sent in PONG (default: this machine's hostname).
        #[serde(default)]
        self_hostname: Option<String>,
        /// Largest frame accepted; a larger one closes the connection (default "32MiB").
        #[serde_inline_default(Size::mib(32))]
        max_frame_size: Size,
        /// Largest size a compressed frame may expand to (default "256MiB").
        #[serde_inline_default(Size::mib(256))]
        max_decompressed_size: Size,
        /// Answer UDP heartbeats on the same port (default true).
        #[serde_inline_default(true)]
        heartbeat: bool,
        /// Remember this many recently acked chunk ids, and ack a resent chunk
        /// again without storing it twice (default 10000; 0 turns it off).
        #[serde_inline_default(10_000)]
        dedup_window: usize,
        /// Keep the remembered chunk ids in this file, so they survive a restart.
        #[serde(default)]
        dedup_path: Option<String>,
        /// When to answer a sender's ack request: "buffered" (default; the batch is
        /// in every matched output's buffer, fsync'd for file buffers) or
        /// "delivered" (every matched output delivered it downstream).
        #[serde(default)]
        ack: AckMode,
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
        keep_chunks: Option<bool>,
    }
);

impl ForwardInputConfig {
    /// Whether senders' chunks are kept whole (`keep_chunks`).
    fn keeps_chunks(&self) -> bool {
        self.keep_chunks.unwrap_or(self.ack == AckMode::Delivered)
    }
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
    /// One permit per open connection (`max_connections`).
    slots: Arc<tokio::sync::Semaphore>,
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
        slots: Arc::new(tokio::sync::Semaphore::new(cfg.max_connections)),
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
            let l = listen_tcp(addr)
                .map_err(|e| anyhow::anyhow!("{name}: cannot listen on {addr}: {e}"))?;
            let (c, sd) = (ctx.clone(), shutdown.clone());
            tasks.push(tokio::spawn(accept_tcp(
                l,
                addr,
                name.to_string(),
                shutdown.clone(),
                move |s, peer| spawn_conn(s, peer, &c, &sd),
            )));
            if cfg.heartbeat {
                let udp = UdpSocket::bind(addr)
                    .await
                    .map_err(|e| anyhow::anyhow!("{name}: cannot bind UDP {addr}: {e}"))?;
                tasks.push(tokio::spawn(answer_heartbeats(udp, shutdown.clone())));
            }
            tracing::info!(input = %name, %addr, "forward input listening");
        }
        (None, Some(path)) => {
            let l = listen_unix(Path::new(path))
                .map_err(|e| anyhow::anyhow!("{name}: cannot listen on {path}: {e}"))?;
            let (c, sd) = (ctx.clone(), shutdown.clone());
            tasks.push(tokio::spawn(accept_unix(
                l,
                path.clone(),
                name.to_string(),
                shutdown.clone(),
                move |s, peer| spawn_conn(s, peer, &c, &sd),
            )));
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

impl InputPlugin for ForwardInputConfig {
    const TYPE: &'static str = "forward";
    const DOC: &'static str = "Receives Fluentd's forward protocol v1 over TCP (with UDP heartbeat answers) or a UNIX socket.";

    fn build(self, cx: &mut BuildContext) -> Result<Box<dyn Input>, OptionError> {
        self.check_connections()?;
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
