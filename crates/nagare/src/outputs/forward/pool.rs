//! The forward output's list of servers: the [[output.server]] tables and
//! the servers service discovery found (discovery.rs).

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

use super::server::Server;
use super::ServerConfig;

/// The output's servers: the configured ones and (later) the discovered
/// ones. Swapped whole when the list changes; a server that stays keeps
/// its state (up or down, heartbeats, idle connections).
pub(super) struct Pool {
    pub(super) list: ArcSwap<Vec<Arc<Server>>>,
    /// The [[output.server]] tables.
    pub(super) fixed: Vec<ServerConfig>,
    pub(super) heartbeat_interval: Duration,
}

impl Pool {
    pub(super) fn load(&self) -> Arc<Vec<Arc<Server>>> {
        self.list.load_full()
    }

    /// Makes the list the fixed servers and `found` (a server in both is
    /// taken once, as configured).
    pub(super) fn set_discovered(&self, output: &str, found: Vec<ServerConfig>) {
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
