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

use serde::Deserialize;

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
