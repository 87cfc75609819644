//! One server of a forward output and its health: up or down (logged on
//! each change), the reconnect backoff after failures, its idle
//! connections, and the answered heartbeats its failure detector (phi.rs)
//! judges.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use super::hashing;
use super::phi::Phi;
use super::ServerConfig;
use crate::net::tls::MaybeTls;

/// A connection to a server, with TLS when the output has it.
pub(super) type Conn = MaybeTls<TcpStream>;

pub(super) struct Server {
    pub(super) cfg: ServerConfig,
    /// Rendezvous hashing's seed: the hash of the address.
    pub(super) seed: u64,
    pub(super) up: AtomicBool,
    /// Consecutive failures, for the reconnect backoff.
    pub(super) failures: AtomicU64,
    pub(super) down_since: Mutex<Option<Instant>>,
    pub(super) idle: Mutex<Vec<Conn>>,
    /// Answered heartbeats, for the failure detector.
    pub(super) phi: Mutex<Phi>,
    /// Why the server is down, as last logged: a server that keeps failing
    /// the same way (a refused key every heartbeat) is logged once.
    pub(super) logged: Mutex<Option<String>>,
}

impl Server {
    pub(super) fn new(cfg: ServerConfig, heartbeat_interval: Duration) -> Server {
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

    pub(super) fn mark_down(&self, why: &str) {
        self.failures.fetch_add(1, Relaxed);
        self.down(why);
        *self.down_since.lock().expect("server") = Some(Instant::now());
    }

    /// Marks the server down (logged on the change, or when the reason
    /// changes), without counting a failure for the reconnect backoff.
    pub(super) fn down(&self, why: &str) {
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

    pub(super) fn mark_up(&self) {
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
    pub(super) fn due(&self, recover: Option<Duration>) -> bool {
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
