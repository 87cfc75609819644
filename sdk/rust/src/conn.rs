//! One connection to a server: TCP or a UNIX socket.

use std::io::{self, IoSlice, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use crate::config::Endpoint;

pub(crate) enum Conn {
    Tcp(TcpStream),
    Unix(UnixStream),
    #[cfg(feature = "tls")]
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

#[cfg(feature = "tls")]
pub(crate) struct TlsParams<'a> {
    pub config: &'a std::sync::Arc<rustls::ClientConfig>,
    pub server_name: Option<&'a str>,
}

impl Conn {
    #[cfg(feature = "tls")]
    pub fn connect_tls(ep: &Endpoint, timeout: Duration, p: TlsParams<'_>) -> io::Result<Conn> {
        let Endpoint::Tcp(addr) = ep else {
            return Conn::connect(ep, timeout);
        };
        let Conn::Tcp(sock) = Conn::connect(ep, timeout)? else {
            unreachable!("a TCP endpoint gives a TCP connection")
        };
        let host = p.server_name.map(str::to_string).unwrap_or_else(|| {
            let h = addr.rsplit_once(':').map_or(addr.as_str(), |(h, _)| h);
            h.trim_start_matches('[').trim_end_matches(']').to_string()
        });
        let name = rustls::pki_types::ServerName::try_from(host)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let conn = rustls::ClientConnection::new(p.config.clone(), name)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        sock.set_read_timeout(Some(timeout))?;
        sock.set_write_timeout(Some(timeout))?;
        let mut s = rustls::StreamOwned::new(conn, sock);
        while s.conn.is_handshaking() {
            s.conn.complete_io(&mut s.sock)?;
        }
        Ok(Conn::Tls(Box::new(s)))
    }

    pub fn connect(ep: &Endpoint, timeout: Duration) -> io::Result<Conn> {
        match ep {
            Endpoint::Tcp(addr) => {
                let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
                for a in addr.to_socket_addrs()? {
                    match TcpStream::connect_timeout(&a, timeout) {
                        Ok(s) => {
                            s.set_nodelay(true)?;
                            return Ok(Conn::Tcp(s));
                        }
                        Err(e) => last = e,
                    }
                }
                Err(last)
            }
            Endpoint::Unix(p) => Ok(Conn::Unix(UnixStream::connect(p)?)),
        }
    }

    fn fd(&self) -> RawFd {
        match self {
            Conn::Tcp(s) => s.as_raw_fd(),
            Conn::Unix(s) => s.as_raw_fd(),
            #[cfg(feature = "tls")]
            Conn::Tls(s) => s.sock.as_raw_fd(),
        }
    }

    pub fn set_timeouts(&self, read: Option<Duration>, write: Option<Duration>) -> io::Result<()> {
        match self {
            Conn::Tcp(s) => {
                s.set_read_timeout(read)?;
                s.set_write_timeout(write)
            }
            Conn::Unix(s) => {
                s.set_read_timeout(read)?;
                s.set_write_timeout(write)
            }
            #[cfg(feature = "tls")]
            Conn::Tls(s) => {
                s.sock.set_read_timeout(read)?;
                s.sock.set_write_timeout(write)
            }
        }
    }

    pub fn set_read_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        match self {
            Conn::Tcp(s) => s.set_read_timeout(d),
            Conn::Unix(s) => s.set_read_timeout(d),
            #[cfg(feature = "tls")]
            Conn::Tls(s) => s.sock.set_read_timeout(d),
        }
    }

    /// TLS needs its buffered records written out after each frame.
    pub fn flush_tls(&mut self) -> io::Result<()> {
        #[cfg(feature = "tls")]
        if let Conn::Tls(s) = self {
            return s.flush();
        }
        Ok(())
    }

    /// True when the peer closed (FIN or reset), checked without blocking and
    /// without consuming data: run before each write so events are not written
    /// into a connection the server already closed.
    pub fn peer_closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        // SAFETY: a valid fd and a 1-byte buffer we own.
        let n = unsafe {
            libc::recv(
                self.fd(),
                b.as_mut_ptr().cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        if n > 0 {
            #[cfg(feature = "tls")]
            if let Conn::Tls(s) = self {
                // TLS records are waiting (session tickets, acks, or an
                // alert): process them without blocking to see a close_notify.
                return tls_peer_closed(s);
            }
            return false;
        }
        if n == 0 {
            return true;
        }
        let e = io::Error::last_os_error();
        !matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
        )
    }

    /// Writes all parts (header, entries, trailer) with vectored writes.
    pub fn write_parts(&mut self, parts: &[&[u8]]) -> io::Result<()> {
        let mut idx = 0;
        let mut off = 0;
        while idx < parts.len() {
            if off == parts[idx].len() {
                idx += 1;
                off = 0;
                continue;
            }
            let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(parts.len() - idx);
            slices.push(IoSlice::new(&parts[idx][off..]));
            for p in &parts[idx + 1..] {
                slices.push(IoSlice::new(p));
            }
            let mut n = match self.write_vectored(&slices) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            while n > 0 && idx < parts.len() {
                let left = parts[idx].len() - off;
                if n >= left {
                    n -= left;
                    idx += 1;
                    off = 0;
                } else {
                    off += n;
                    n = 0;
                }
            }
        }
        Ok(())
    }
}

#[cfg(feature = "tls")]
fn tls_peer_closed(s: &mut rustls::StreamOwned<rustls::ClientConnection, TcpStream>) -> bool {
    if s.sock.set_nonblocking(true).is_err() {
        return true;
    }
    let closed = loop {
        match s.conn.read_tls(&mut s.sock) {
            Ok(0) => break true,
            Ok(_) => match s.conn.process_new_packets() {
                Ok(st) if st.peer_has_closed() => break true,
                Ok(_) => {}
                Err(_) => break true,
            },
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break true,
        }
    };
    s.sock.set_nonblocking(false).is_err() || closed
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.read(buf),
            Conn::Unix(s) => s.read(buf),
            #[cfg(feature = "tls")]
            Conn::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.write(buf),
            Conn::Unix(s) => s.write(buf),
            #[cfg(feature = "tls")]
            Conn::Tls(s) => s.write(buf),
        }
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.write_vectored(bufs),
            Conn::Unix(s) => s.write_vectored(bufs),
            #[cfg(feature = "tls")]
            Conn::Tls(s) => s.write_vectored(bufs),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            #[cfg(feature = "tls")]
            Conn::Tls(s) => s.flush(),
            _ => Ok(()),
        }
    }
}
