//! Addresses as the config writes them: a client's "HOST:PORT" and a
//! listener's address, resolved as the daemon will resolve it.

use std::net::{SocketAddr, ToSocketAddrs};

/// A client's "HOST:PORT": a host and a port, not resolved (the host is
/// resolved when connecting). `example` shows a good one in the message.
pub fn host_port(address: &str, example: &str) -> Result<(), String> {
    match address.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(()),
        _ => Err(format!(
            "expected HOST:PORT such as {example:?}, found {address:?}"
        )),
    }
}

/// A "HOST:PORT" listen address, resolved as the daemon will resolve it.
pub fn resolve(bind: &str) -> Result<SocketAddr, String> {
    let example = "e.g. \"127.0.0.1:24224\" or \"0.0.0.0:24224\"";
    let Some((host, port)) = bind.rsplit_once(':') else {
        return Err(format!("expected HOST:PORT, {example}; found {bind:?}"));
    };
    if port.parse::<u16>().is_err() {
        return Err(format!(
            "the port {port:?} of {bind:?} is not a number from 0 to 65535 ({example})"
        ));
    }
    if host.is_empty() {
        return Err(format!("{bind:?} has no host ({example})"));
    }
    match bind.to_socket_addrs() {
        Ok(mut addrs) => addrs
            .next()
            .ok_or_else(|| format!("{bind:?} resolves to no address")),
        Err(e) => Err(format!("cannot resolve {host:?} in {bind:?}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_addresses() {
        assert!(resolve("127.0.0.1:24224").is_ok());
        assert!(resolve("localhost:24224").is_ok());
        let e = resolve("localhost:24224x").unwrap_err();
        assert!(e.contains("not a number"), "{e}");
        assert!(resolve("24224").unwrap_err().contains("HOST:PORT"));
    }
}
