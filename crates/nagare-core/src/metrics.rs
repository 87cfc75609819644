//! Per-plugin counters, read by the monitor. Plain atomics: the hot path pays
//! one relaxed add per batch, not per event.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

#[derive(Debug, Default)]
pub struct PluginStats {
    pub name: String,
    pub kind: &'static str,
    pub plugin_type: String,
    pub events_in: AtomicU64,
    pub events_out: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    pub errors: AtomicU64,
    pub retries: AtomicU64,
    /// Outputs: failed flushes that a retry cannot fix (`FlushError::Permanent`).
    pub permanent_errors: AtomicU64,
    /// Events dropped: by an output's overflow_action = "drop_oldest_chunk",
    /// or by a filter (a grep filter's rules).
    pub dropped: AtomicU64,
    /// Events over a throttle filter's rate limit (dropped or re-tagged).
    pub throttled: AtomicU64,
    /// Events refused by overflow_action = "throw".
    pub rejected: AtomicU64,
    /// Events handed to the secondary output: their retries ran out, or their
    /// flush failed with an error that a retry cannot fix.
    pub to_secondary: AtomicU64,
    /// Events lost: their output gave up on them and no secondary took them, or
    /// their chunk could not be read back from disk.
    pub lost: AtomicU64,
    pub buffer_bytes: AtomicU64,
    pub buffer_chunks: AtomicU64,
    /// File buffers: bytes of queued chunks kept on disk only (past memory_limit_size).
    pub buffer_disk_only_bytes: AtomicU64,
    /// Inputs: connections accepted and closed for bad input.
    pub connections: AtomicU64,
    /// Inputs: events of resent chunks acked again without being stored.
    pub duplicates: AtomicU64,
    pub bad_input: AtomicU64,
    /// A `loki` output's events sent to its overflow stream: their label
    /// set was new past `max_label_sets`.
    pub label_overflow: AtomicU64,
    /// Outputs: events the destination refused for good in a partial
    /// write (`FlushError::Partial`), by reason (e.g.
    /// "mapper_parsing_exception"); they went to the secondary output or
    /// dead letters.
    pub refused: Mutex<BTreeMap<String, u64>>,
}

impl PluginStats {
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Relaxed);
    }

    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Relaxed)
    }

    /// Counts refused events by reason.
    pub fn add_refused<'a>(&self, counts: impl IntoIterator<Item = (&'a str, u64)>) {
        let mut refused = self.refused.lock().expect("refused counts");
        for (reason, n) in counts {
            *refused.entry(reason.to_string()).or_default() += n;
        }
    }

    /// The refused events by reason.
    pub fn refused(&self) -> Vec<(String, u64)> {
        let refused = self.refused.lock().expect("refused counts");
        refused.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }
}

/// Every plugin's counters, in config order.
#[derive(Default)]
pub struct Registry {
    plugins: Mutex<Vec<Arc<PluginStats>>>,
}

impl Registry {
    pub fn register(&self, kind: &'static str, name: &str, plugin_type: &str) -> Arc<PluginStats> {
        let s = Arc::new(PluginStats {
            name: name.to_string(),
            kind,
            plugin_type: plugin_type.to_string(),
            ..Default::default()
        });
        self.plugins.lock().expect("stats").push(s.clone());
        s
    }

    /// Forgets a plugin a reload removed (its counters leave the metrics).
    pub fn remove(&self, stats: &Arc<PluginStats>) {
        self.plugins
            .lock()
            .expect("stats")
            .retain(|s| !Arc::ptr_eq(s, stats));
    }

    pub fn all(&self) -> Vec<Arc<PluginStats>> {
        self.plugins.lock().expect("stats").clone()
    }
}
