//! Codec for Fluentd's forward protocol v1.
//!
//! The decoder scans frames without building values: an incoming frame of any
//! mode (Message, Forward, PackedForward, CompressedPackedForward) becomes an
//! [`EventFrame`] whose `entries` are the PackedForward payload — concatenated
//! msgpack `[time, record]` pairs — sliced from the input when they are already
//! in canonical form, rewritten once when they are not. The encoder writes the
//! same payload back out. No async runtime is needed here.
//!
//! Protocol reference: <https://github.com/fluent/fluentd/wiki/Forward-Protocol-Specification-v1>

pub mod decode;
pub mod encode;
pub mod event_time;
pub mod handshake;
pub mod msgpack;

pub use decode::{
    bytes_needed, count_entries, normalize_entries, scan_frame, scan_frame_resumed, Compression,
    DecodeError, EventFrame, Limits, Mode, ScanProgress, Scanned,
};
pub use encode::{
    encode_ack, encode_forward, encode_message, encode_packed_forward, write_entry,
    write_event_time,
};
pub use event_time::EventTime;

/// Why a msgpack scan stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ScanError {
    /// The buffer ends inside a value; at least this many bytes are needed.
    #[error("incomplete: need at least {0} bytes")]
    Incomplete(usize),
    /// The bytes are not what the protocol allows here.
    #[error("{0}")]
    Invalid(&'static str),
}
