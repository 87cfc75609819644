//! Who else holds a resource nagare needs for itself: a lock file with the
//! holder's pid (file buffers, tail position files), and the process
//! listening on a TCP address or a UNIX socket (read from /proc), so an
//! error can say "in use by pid 1234 (nagare)" instead of starting a second
//! instance that shares a port or a buffer with the first.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::path::Path;

/// An exclusive lock (flock) on a file that holds the owner's pid. Released
/// when dropped, or when the process dies (kill -9 included).
#[derive(Debug)]
pub struct PidLock {
    _file: File,
}

impl PidLock {
    /// Takes the lock on `path` (created when missing). When another
    /// process holds it, returns that process as "pid N (name)" if the file
    /// names one.
    pub fn acquire(path: &Path) -> Result<PidLock, LockError> {
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)
            .map_err(LockError::Io)?;
        // SAFETY: flock on a descriptor we own; no memory is involved.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            let holder = text.trim().parse().ok().map(describe);
            return Err(LockError::Held(holder));
        }
        // Ours now: say who we are, for the next one that tries.
        let pid = std::process::id().to_string();
        let written = file
            .set_len(0)
            .and_then(|_| file.rewind())
            .and_then(|_| file.write_all(pid.as_bytes()));
        written.map_err(LockError::Io)?;
        Ok(PidLock { _file: file })
    }
}

#[derive(Debug)]
pub enum LockError {
    Io(std::io::Error),
    /// Held by another process: "pid N (name)" when known.
    Held(Option<String>),
}

impl std::fmt::Display for LockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockError::Io(e) => write!(f, "{e}"),
            LockError::Held(Some(who)) => write!(f, "in use by {who}"),
            LockError::Held(None) => f.write_str("in use by another process"),
        }
    }
}

/// "pid N (name)", the name from /proc when the process still exists.
pub fn describe(pid: u32) -> String {
    match std::fs::read_to_string(format!("/proc/{pid}/comm")) {
        Ok(name) => format!("pid {pid} ({})", name.trim()),
        Err(_) => format!("pid {pid}"),
    }
}

/// The process with a TCP socket listening on `addr` (or on the wildcard
/// address of its family and the same port), when /proc tells.
pub fn tcp_listener(addr: SocketAddr) -> Option<String> {
    let port = format!("{:04X}", addr.port());
    // An IPv6 socket may hold an IPv4 port too (dual stack).
    let tables = if addr.is_ipv4() {
        ["/proc/net/tcp", "/proc/net/tcp6"]
    } else {
        ["/proc/net/tcp6", "/proc/net/tcp"]
    };
    tables.iter().find_map(|table| {
        let text = std::fs::read_to_string(table).ok()?;
        let inode = text.lines().skip(1).find_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
            let (local, state, inode) = (f.get(1)?, f.get(3)?, f.get(9)?);
            let (_, p) = local.split_once(':')?;
            (p == port && *state == "0A").then(|| inode.to_string())
        })?;
        socket_owner(&inode)
    })
}

/// The process listening on the UNIX socket file `path`, when /proc tells.
pub fn unix_listener(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string("/proc/net/unix").ok()?;
    let path = path.to_str()?;
    // Connections waiting to be accepted show the path too, owned by no
    // process: only the listening socket (flag __SO_ACCEPTCON) is asked for.
    let inode = text.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        // Num RefCount Protocol Flags Type St Inode Path
        (f.get(7) == Some(&path) && f.get(3) == Some(&"00010000"))
            .then(|| f.get(6).map(|s| s.to_string()))?
    })?;
    socket_owner(&inode)
}

/// The process with an open descriptor on socket `inode`.
fn socket_owner(inode: &str) -> Option<String> {
    let target = format!("socket:[{inode}]");
    for proc in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = proc
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(proc.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == target.as_str()) {
                return Some(describe(pid));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_names_its_holder() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let first = PidLock::acquire(&path).unwrap();
        // flock locks belong to the open file description: a second open in
        // this process conflicts like another process would.
        match PidLock::acquire(&path) {
            Err(LockError::Held(Some(who))) => {
                assert!(
                    who.starts_with(&format!("pid {} (", std::process::id())),
                    "{who}"
                )
            }
            other => panic!("expected a held lock, got {other:?}"),
        }
        drop(first);
        PidLock::acquire(&path).unwrap();
    }

    #[test]
    fn a_listening_socket_names_its_process() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let who = tcp_listener(l.local_addr().unwrap()).expect("found in /proc");
        assert!(
            who.starts_with(&format!("pid {} (", std::process::id())),
            "{who}"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let _u = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let who = unix_listener(&path).expect("found in /proc");
        assert!(
            who.starts_with(&format!("pid {} (", std::process::id())),
            "{who}"
        );
    }
}
