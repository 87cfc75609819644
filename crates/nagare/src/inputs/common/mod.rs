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
/// Connections a listener keeps open at once (forward, tcp, unix, syslog,
/// scribe, http, opentelemetry): 1024.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// A listener's connection that brings nothing for this long is closed
/// (forward, tcp, unix, syslog, scribe): "5m".
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

/// Declares a stream listener's options struct (forward, scribe, tcp,
/// syslog) with the options they share appended: the connection limits
/// and TLS. `bind` stays each input's own: its default and what it may
/// be combined with (`path`, `protocol`) differ.
macro_rules! connection_options {
    ($($plugin:tt)*) => {
        nagare_core::option_group! {
            [$($plugin)*]
            fields {
                /// Open connections at most (default 1024); a connection past
                /// the limit is closed at once, with a log line naming the peer.
                #[serde_inline_default(crate::inputs::common::DEFAULT_MAX_CONNECTIONS)]
                pub max_connections: usize,
                /// A connection that brings nothing (no frame, no whole
                /// message) for this long is closed (default "5m").
                #[serde_inline_default(crate::inputs::common::DEFAULT_IDLE_TIMEOUT)]
                pub idle_timeout: nagare_core::units::Dur,
                /// TLS (`[input.tls]`: `cert`, `key`, and `ca` to require
                /// client certificates; as Fluentd's `<transport tls>` and
                /// Fluent Bit's `tls on`); see docs/tls.md.
                #[serde(default)]
                pub tls: Option<crate::net::tls::TlsOptions>,
            }
            impl {
                /// Checks the shared options.
                fn check_connections(&self) -> Result<(), nagare_core::plugin::OptionError> {
                    crate::inputs::common::check_max_connections(self.max_connections)
                }
            }
        }
    };
}
pub(crate) use connection_options;

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

/// For the decoders' never-panic unit tests: random bytes in, for a few
/// thousand cuts and mutations of a good input (what the fuzz targets do
/// at length, here in every `cargo test`).
#[cfg(test)]
pub fn mutations(good: &[u8], mut each: impl FnMut(&[u8])) {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for cut in 0..=good.len() {
        each(&good[..cut]);
    }
    for _ in 0..3000 {
        let mut b = good.to_vec();
        for _ in 0..1 + next() % 4 {
            let at = (next() % b.len() as u64) as usize;
            b[at] = next() as u8;
        }
        each(&b);
    }
}
