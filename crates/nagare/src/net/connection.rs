//! The connection the stream outputs (`tcp`, `syslog` over TCP) keep to
//! their destination: opened on the first write, checked before each
//! write, dropped on any error (the buffer then retries the chunk with its
//! backoff, and the retry connects again). With `tls` the connection is a
//! TLS session (a refused handshake is a connection error like any other).

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use nagare_core::output::FlushError;
use nagare_core::plugin::OptionError;
use nagare_core::units::Dur;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

use crate::net::tls::TlsClient;
use crate::net::Stream;

pub(crate) struct Connection {
    address: String,
    timeout: Duration,
    tls: Option<Arc<TlsClient>>,
    stream: Mutex<Option<Box<dyn Stream>>>,
}

impl Connection {
    pub(crate) fn new(address: &str, timeout: Duration, tls: Option<Arc<TlsClient>>) -> Connection {
        Connection {
            address: address.to_string(),
            timeout,
            tls,
            stream: Mutex::new(None),
        }
    }

    async fn connect(&self) -> Result<Box<dyn Stream>, FlushError> {
        let fail = |e: String| FlushError::Retry(format!("connecting to {}: {e}", self.address));
        let s = tokio::time::timeout(self.timeout, TcpStream::connect(&self.address))
            .await
            .map_err(|_| {
                fail(format!(
                    "no answer in {}",
                    humantime::format_duration(self.timeout)
                ))
            })?
            .map_err(|e| fail(e.to_string()))?;
        let _ = s.set_nodelay(true);
        // The handshake has its own bound (tls.rs).
        let s = crate::net::tls::connect(&self.tls, s, &self.address)
            .await
            .map_err(fail)?;
        Ok(Box::new(s))
    }

    /// Writes `data` whole on the open connection (opening it first); on
    /// any error the connection is dropped and the chunk is to be retried.
    pub(crate) async fn send(&self, data: &[u8]) -> Result<(), FlushError> {
        let mut guard = self.stream.lock().await;
        if let Some(s) = guard.as_mut() {
            // A peer that closed (or sent something) since the last write:
            // writing would seem to work once and lose the data.
            let mut probe = [0u8; 1];
            if let Some(r) = s.read(&mut probe).now_or_never() {
                let why = match r {
                    Ok(0) => "closed by the peer".to_string(),
                    Ok(_) => "the peer sent data".to_string(),
                    Err(e) => e.to_string(),
                };
                tracing::info!(address = %self.address, reason = %why, "reconnecting");
                *guard = None;
            }
        }
        let s = match guard.as_mut() {
            Some(s) => s,
            None => guard.insert(self.connect().await?),
        };
        let written = tokio::time::timeout(self.timeout, async {
            s.write_all(data).await?;
            s.flush().await
        })
        .await;
        let e = match written {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!(
                "write took over {}",
                humantime::format_duration(self.timeout)
            ),
        };
        *guard = None;
        Err(FlushError::Retry(format!(
            "writing to {}: {e}",
            self.address
        )))
    }
}

/// How long the line outputs (tcp, syslog) may take to connect and to write
/// a chunk before it is retried: "10s".
pub const DEFAULT_TIMEOUT: Dur = Dur::secs(10);

/// "HOST:PORT" with a port (the host is resolved when connecting).
pub fn check_address(address: &str) -> Result<(), OptionError> {
    nagare_core::address::host_port(address, "127.0.0.1:5170")
        .map_err(|e| OptionError::new("address", e))
}
