//! What inputs share, so that no input imports another: appending batches
//! to the outputs' buffers, the forward chunk-id window, the HTTP listener,
//! TCP and UNIX listeners kept open across a reload (listeners.rs), the
//! socket listeners of the line inputs, the file follower of `tail` and
//! `directory`, and a line's entry.

pub mod append;
pub mod dedup;
pub mod follow;
pub mod http_listener;
pub mod lines;
pub mod listeners;
pub mod queue;
pub mod sockets;

use nagare_core::plugin::OptionError;
use nagare_core::units::{Dur, Size};
use serde::Deserialize;

/// The longest line kept whole by the line inputs (tail, directory, fuse,
/// tcp, udp, unix): "1MiB".
pub const DEFAULT_MAX_LINE: Size = Size::mib(1);
/// What ends a line of the socket line inputs (tcp, udp, unix): "\n".
pub const DEFAULT_DELIMITER: &str = "\n";
/// Connections a listener keeps open at once (tcp, unix, syslog, scribe,
/// http, opentelemetry): 1024.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// A listener's connection that brings nothing for this long is closed
/// (tcp, unix, syslog, scribe): "5m".
pub const DEFAULT_IDLE_TIMEOUT: Dur = Dur::mins(5);
/// How long a request waits for room in a full buffer before it is refused
/// (`wait_for_room` of scribe, http, opentelemetry): "1s".
pub const DEFAULT_WAIT_FOR_ROOM: Dur = Dur::secs(1);

/// A listener's `max_connections` (the check every listener makes).
pub fn check_max_connections(max_connections: usize) -> Result<(), OptionError> {
    if max_connections == 0 {
        return Err(OptionError::new("max_connections", "must be at least 1"));
    }
    Ok(())
}

/// When a forward (or HTTP) input acknowledges a batch.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum AckMode {
    #[default]
    Buffered,
    Delivered,
}

/// The kind of UNIX socket.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum SocketType {
    /// Connections, each a stream of lines (default for `unix`).
    #[default]
    Stream,
    /// Datagrams, each one line or several (as /dev/log).
    Dgram,
}
