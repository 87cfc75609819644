//! Binding listeners: a TCP listener that binds again at once after a
//! restart, and a UNIX socket path freed of a socket its process left.

use std::net::SocketAddr;
use std::path::Path;

use tokio::net::TcpListener;

pub fn tcp_listener(addr: SocketAddr) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    // Binds again at once after a restart (connections in TIME_WAIT).
    s.set_reuse_address(true)?;
    s.set_nonblocking(true)?;
    if let Err(e) = s.bind(&addr.into()) {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            if let Some(who) = nagare_core::holder::tcp_listener(addr) {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("address in use by {who}"),
                ));
            }
        }
        return Err(e);
    }
    s.listen(1024)?;
    TcpListener::from_std(s.into())
}

/// A socket file left by a process that is gone is removed; one that a
/// process still listens on is an error naming it (replacing it would cut
/// that process off from its clients).
pub fn remove_stale_socket(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        return Ok(());
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        let who =
            nagare_core::holder::unix_listener(path).unwrap_or_else(|| "another process".into());
        return Err(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            format!("socket in use by {who}"),
        ));
    }
    std::fs::remove_file(path)
}
