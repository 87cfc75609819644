//! `[output.buffer]` options: buffer type, chunk and total limits, overflow
//! action, fsync policy and retry backoff.

use std::time::Duration;

use nagare_core::units::{Dur, Size};
use serde::Deserialize;

/// When a file buffer fsyncs its chunk files.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, schemars::JsonSchema, Default,
)]
#[serde(rename_all = "snake_case")]
pub enum SyncMode {
    /// Before acknowledging a batch whose sender asked for an ack (default):
    /// an acked event survives a power loss; others survive a crash of nagare.
    #[default]
    Ack,
    /// After every batch.
    Always,
    /// Never; the operating system writes the pages back in its own time.
    Never,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, schemars::JsonSchema, Default,
)]
#[serde(rename_all = "snake_case")]
pub enum BufferType {
    #[default]
    Memory,
    File,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, schemars::JsonSchema, Default,
)]
#[serde(rename_all = "snake_case")]
pub enum OverflowAction {
    /// Stop reading the inputs that feed this buffer until space frees up.
    #[default]
    Block,
    /// Drop the oldest queued chunk (counted and logged) to make room.
    DropOldestChunk,
    /// Refuse the new events: the input closes the connection without an ack,
    /// so the sender keeps them and retries.
    Throw,
}

/// `[output.buffer]`
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct BufferConfig {
    /// "memory" (default) or "file": chunks kept in files under `path`, recovered after a restart or crash.
    #[serde(rename = "type")]
    pub kind: BufferType,
    /// Directory of a file buffer (one per output; a lock keeps a second process out).
    pub path: Option<String>,
    /// File buffer: when to fsync — "ack" (before acking a batch that asked for an ack), "always" or "never".
    pub sync: SyncMode,
    /// A chunk is closed and queued once it holds this many bytes (default "2MiB"); bigger batches are split.
    pub chunk_limit_size: Size,
    /// ... or this many events (default: no limit).
    pub chunk_limit_records: Option<u32>,
    /// A staged chunk is queued at the latest this long after its first event (default "1s").
    pub flush_interval: Dur,
    /// Chunks written to the destination in parallel (default 1; order is kept only with 1).
    pub flush_thread_count: usize,
    /// Bytes held by staged, queued and in-flight chunks together (default "64MiB"); then overflow_action applies.
    pub total_limit_size: Size,
    /// File buffer: chunks held in memory as well as on disk, in bytes (default "64MiB"); queued chunks beyond it are kept on disk only and read back when their turn comes, so total_limit_size may be far bigger than memory.
    pub memory_limit_size: Size,
    /// What to do when `total_limit_size` is reached: "block", "drop_oldest_chunk" or "throw".
    pub overflow_action: OverflowAction,
    /// First wait after a failed flush (default "1s"); doubles on each retry.
    pub retry_wait: Dur,
    /// Cap of the wait between retries (default "60s").
    pub retry_max_interval: Dur,
    /// Give up after this many retries (default: no count limit, see retry_timeout).
    pub retry_max_times: Option<u32>,
    /// Give up when a chunk has failed for this long (default "72h").
    pub retry_timeout: Dur,
    /// Spread each wait by ±12.5% so many outputs do not retry in lockstep (default true).
    pub retry_randomize: bool,
}

impl Default for BufferConfig {
    fn default() -> Self {
        BufferConfig {
            kind: BufferType::Memory,
            path: None,
            sync: SyncMode::Ack,
            chunk_limit_size: Size(2 << 20),
            chunk_limit_records: None,
            flush_interval: Dur(Duration::from_secs(1)),
            flush_thread_count: 1,
            total_limit_size: Size(64 << 20),
            memory_limit_size: Size(64 << 20),
            overflow_action: OverflowAction::Block,
            retry_wait: Dur(Duration::from_secs(1)),
            retry_max_interval: Dur(Duration::from_secs(60)),
            retry_max_times: None,
            retry_timeout: Dur(Duration::from_secs(72 * 3600)),
            retry_randomize: true,
        }
    }
}

impl BufferConfig {
    /// The wait before retry number `n` (0-based).
    pub fn backoff(&self, n: u32) -> Duration {
        let base = self.retry_wait.0.as_secs_f64() * 2f64.powi(n.min(40) as i32);
        let capped = base.min(self.retry_max_interval.0.as_secs_f64());
        let f = if self.retry_randomize {
            rand::random::<f64>() * 0.25 + 0.875
        } else {
            1.0
        };
        Duration::from_secs_f64(capped * f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let c = BufferConfig {
            retry_randomize: false,
            retry_wait: Dur(Duration::from_millis(100)),
            retry_max_interval: Dur(Duration::from_secs(1)),
            ..Default::default()
        };
        assert_eq!(c.backoff(0), Duration::from_millis(100));
        assert_eq!(c.backoff(1), Duration::from_millis(200));
        assert_eq!(c.backoff(3), Duration::from_millis(800));
        assert_eq!(c.backoff(4), Duration::from_secs(1));
        assert_eq!(c.backoff(100), Duration::from_secs(1));
    }
}
