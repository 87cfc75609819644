//! Connections to a forward server: opening one (TCP, then TLS and the
//! shared-key handshake when the output has them), and taking an idle one
//! back for the next chunk when the server has not closed it.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use futures_util::FutureExt;
use nagare_forward::handshake::{decode_reply, ClientHandshake, Reply};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use super::server::{Conn, Server};
use super::ForwardOutput;
use crate::net::tls::{self, TlsClient};
use crate::proto::forward_io;

/// What opening a connection needs; shared with the heartbeat task.
pub(super) struct Connector {
    pub(super) tls: Option<Arc<TlsClient>>,
    pub(super) hostname: String,
    pub(super) shared_key: Option<String>,
    pub(super) connect_timeout: Duration,
}

impl Connector {
    /// A connection to `s`, through TLS and the shared-key handshake when
    /// the output has them.
    pub(super) async fn connect(&self, s: &Server) -> Result<Conn, String> {
        let stream = tokio::time::timeout(self.connect_timeout, TcpStream::connect(&s.cfg.address))
            .await
            .map_err(|_| "connect timed out".to_string())?
            .map_err(|e| format!("connect: {e}"))?;
        let _ = stream.set_nodelay(true);
        let mut stream = tls::connect(&self.tls, stream, &s.cfg.address).await?;
        if let Some(key) = self.key(s) {
            let user = s.cfg.username.as_deref().unwrap_or_default();
            let pass = s.cfg.password.as_deref().unwrap_or_default();
            let hs = ClientHandshake::new(
                key.as_bytes(),
                self.hostname.as_bytes(),
                user.as_bytes(),
                pass.as_bytes(),
            );
            let mut buf = BytesMut::new();
            forward_io::client_handshake(&mut stream, &mut buf, hs, self.connect_timeout)
                .await
                .map_err(|e| e.explain("shared_key"))?;
        }
        Ok(stream)
    }

    pub(super) fn key<'a>(&'a self, s: &'a Server) -> Option<&'a String> {
        s.cfg.shared_key.as_ref().or(self.shared_key.as_ref())
    }
}

impl ForwardOutput {
    /// Takes an idle connection that the peer has not closed, or opens one.
    pub(super) async fn conn(&self, s: &Server) -> Result<Conn, String> {
        loop {
            let c = s.idle.lock().expect("server").pop();
            let Some(mut c) = c else { break };
            let mut probe = [0u8; 512];
            // One poll, no wait: nothing to read means the connection is
            // still open. (Under TLS, a session ticket the server sent is
            // taken in by TLS and is not data.)
            match c.read(&mut probe).now_or_never() {
                None => return Ok(c),
                // The peer closed it (FIN) or sent something unexpected: drop it.
                Some(Ok(n)) => {
                    self.warn_if_helo(s, &probe[..n]);
                    continue;
                }
                Some(Err(_)) => continue,
            }
        }
        self.connector.connect(s).await
    }

    /// An idle connection that received a HELO went to a server that wants
    /// a handshake we did not start: it dropped what we sent without acks.
    fn warn_if_helo(&self, s: &Server, bytes: &[u8]) {
        if let Ok(Reply::Helo(_)) = decode_reply(bytes) {
            tracing::error!(output = %self.name, server = %s.cfg.address,
                "the server requires a shared-key handshake (set shared_key): \
                 chunks sent on this connection without require_ack_response were dropped by the server");
        }
    }
}
