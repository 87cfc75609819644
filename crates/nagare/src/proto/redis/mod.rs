//! Redis: the connection options and client the `redis` input and output
//! share (conn.rs), and the RESP2 connection of our own for list reads and
//! writes (resp.rs).

pub mod conn;
pub mod resp;

/// The stream entry field that holds an event, for the input and the output
/// (`stream_field`): "message".
pub const DEFAULT_STREAM_FIELD: &str = "message";
