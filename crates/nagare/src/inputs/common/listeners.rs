//! Listeners that a reload does not interrupt: a TCP or UNIX listener is
//! taken over from the input a reload replaced when that one left it open
//! (net/handover.rs), else bound anew; an accept loop hands each
//! connection to its input and, at shutdown, leaves the listener open for
//! the input replacing this one. Also `stopped`, the wait for shutdown.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::watch;

use crate::net::listen::{remove_stale_socket, tcp_listener};

/// Resolves once shutdown has been signalled.
pub async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|v| *v).await;
}

/// A TCP listener on `addr`: the one an input this reload replaced left
/// open, else a new one.
pub fn listen_tcp(addr: SocketAddr) -> std::io::Result<TcpListener> {
    match crate::net::handover::take_tcp(addr) {
        Some(l) => TcpListener::from_std(l),
        None => tcp_listener(addr),
    }
}

/// A UNIX socket listener at `path`: the one an input this reload replaced
/// left open, else a new one (a stale socket file is removed first).
pub fn listen_unix(path: &Path) -> std::io::Result<UnixListener> {
    match crate::net::handover::take_unix(path) {
        Some(l) => UnixListener::from_std(l),
        None => remove_stale_socket(path).and_then(|_| UnixListener::bind(path)),
    }
}

/// Accepts connections on `l` (bound to `addr`) until shutdown, handing
/// each, with TCP_NODELAY set, to `conn` with its peer's address; `input`
/// names the input in log lines.
pub async fn accept_tcp(
    l: TcpListener,
    addr: SocketAddr,
    input: String,
    shutdown: watch::Receiver<bool>,
    mut conn: impl FnMut(TcpStream, String),
) {
    let mut sd = shutdown;
    loop {
        tokio::select! {
            _ = stopped(&mut sd) => {
                // A reload passes the open listener to the input replacing this one.
                if let Ok(l) = l.into_std() {
                    drop(crate::net::handover::give_tcp(addr, l));
                }
                return;
            }
            r = l.accept() => match r {
                Ok((s, peer)) => {
                    let _ = s.set_nodelay(true);
                    conn(s, peer.to_string());
                }
                Err(e) => {
                    tracing::warn!(input = %input, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}

/// Accepts connections on the UNIX socket `l` (at `path`) until shutdown,
/// handing each to `conn` with "unix:PATH" as its peer; `input` names the
/// input in log lines.
pub async fn accept_unix(
    l: UnixListener,
    path: String,
    input: String,
    shutdown: watch::Receiver<bool>,
    mut conn: impl FnMut(UnixStream, String),
) {
    let mut sd = shutdown;
    loop {
        tokio::select! {
            _ = stopped(&mut sd) => {
                if let Ok(l) = l.into_std() {
                    drop(crate::net::handover::give_unix(Path::new(&path), l));
                }
                return;
            }
            r = l.accept() => match r {
                Ok((s, _)) => conn(s, format!("unix:{path}")),
                Err(e) => {
                    tracing::warn!(input = %input, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}
