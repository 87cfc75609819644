//! Choosing a chunk's server: weighted or plain round robin over the
//! primaries that are up, then the others due for another try, and the
//! standbys only while no primary is up; under consistent hashing, the
//! servers that hold keys (hashing.rs scores them).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use super::server::Server;
use super::{ForwardOutput, HeartbeatType, Lb};

impl ForwardOutput {
    /// Servers of `list` in the order to try for the next chunk: the
    /// weighted pick among the primaries that are up, the other primaries
    /// that are up, the primaries that are down but due for another try,
    /// and — only while no primary is up — the standbys.
    pub(super) fn candidates(&self, servers: &[Arc<Server>]) -> Vec<usize> {
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
    pub(super) fn hash_pool(&self, servers: &[Arc<Server>], excluded: &[usize]) -> Vec<usize> {
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
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// (seed, weight) of the servers `pool` names, for rendezvous hashing.
pub(super) fn seeds(servers: &[Arc<Server>], pool: &[usize]) -> Vec<(u64, u32)> {
    pool.iter()
        .map(|&i| (servers[i].seed, servers[i].cfg.weight))
        .collect()
}
