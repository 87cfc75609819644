//! Listening sockets passed from an input a reload stops to the input that
//! replaces it, so a listener whose address did not change is never closed
//! (no connection refused during a reload).
//!
//! While a reload restarts inputs (`Handover::begin` .. `end`), an input
//! that stops gives its listener here instead of closing it, and an input
//! that starts takes the listener of its address from here before binding a
//! new one. Connections that arrive meanwhile wait in the listener's
//! backlog. What no new input took is closed at `end`. Outside a reload
//! (at shutdown) listeners close as before.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

enum Held {
    Tcp(SocketAddr, std::net::TcpListener),
    Unix(PathBuf, std::os::unix::net::UnixListener),
}

/// `Some` while a reload restarts inputs.
static HANDED_OVER: Mutex<Option<Vec<Held>>> = Mutex::new(None);

fn with<T>(f: impl FnOnce(&mut Option<Vec<Held>>) -> T) -> T {
    f(&mut HANDED_OVER.lock().expect("handed-over listeners"))
}

/// The time of a reload's input restarts; ending it (dropped) closes the
/// listeners no input took.
pub struct Handover(());

impl Handover {
    pub fn begin() -> Handover {
        with(|h| *h = Some(Vec::new()));
        Handover(())
    }
}

impl Drop for Handover {
    fn drop(&mut self) {
        let left = with(Option::take).unwrap_or_default();
        for l in left {
            if let Held::Tcp(addr, _) = &l {
                tracing::info!(%addr, "reload: no input listens on this address any more; closed");
            }
        }
    }
}

/// A stopping input's TCP listener: kept for the next input of `addr` during
/// a reload; otherwise given back (the caller closes it).
pub fn give_tcp(addr: SocketAddr, l: std::net::TcpListener) -> Option<std::net::TcpListener> {
    with(|h| match h {
        Some(list) => {
            list.push(Held::Tcp(addr, l));
            None
        }
        None => Some(l),
    })
}

/// The listener a stopped input left on `addr`, if a reload holds one.
pub fn take_tcp(addr: SocketAddr) -> Option<std::net::TcpListener> {
    with(|h| {
        let list = h.as_mut()?;
        let i = list
            .iter()
            .position(|l| matches!(l, Held::Tcp(a, _) if *a == addr))?;
        match list.swap_remove(i) {
            Held::Tcp(_, l) => Some(l),
            Held::Unix(..) => None,
        }
    })
}

/// As `give_tcp`, for a UNIX socket listening at `path`.
pub fn give_unix(
    path: &Path,
    l: std::os::unix::net::UnixListener,
) -> Option<std::os::unix::net::UnixListener> {
    with(|h| match h {
        Some(list) => {
            list.push(Held::Unix(path.to_path_buf(), l));
            None
        }
        None => Some(l),
    })
}

/// As `take_tcp`, for a UNIX socket at `path`.
pub fn take_unix(path: &Path) -> Option<std::os::unix::net::UnixListener> {
    with(|h| {
        let list = h.as_mut()?;
        let i = list
            .iter()
            .position(|l| matches!(l, Held::Unix(p, _) if p == path))?;
        match list.swap_remove(i) {
            Held::Unix(_, l) => Some(l),
            Held::Tcp(..) => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listeners_pass_only_during_a_reload() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        // Outside a reload the listener comes back to be closed.
        let l = give_tcp(addr, l).expect("given back");
        let h = Handover::begin();
        assert!(give_tcp(addr, l).is_none());
        let other: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert!(take_tcp(other).is_none());
        let l = take_tcp(addr).expect("kept for the new input");
        assert_eq!(l.local_addr().unwrap(), addr);
        drop(h);
        assert!(take_tcp(addr).is_none());
    }
}
