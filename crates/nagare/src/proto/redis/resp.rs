//! A RESP2 connection of our own, for the redis input's list reads and the
//! redis output's writes to one server (not a Cluster).
//!
//! Reads: it scans each reply in place in its read buffer, so the elements
//! of a pop (BLMPOP's, LRANGE's, the reliable move's) go from the socket
//! buffer straight into the batch. Writes: the output encodes a chunk's
//! commands straight from its events into the connection's one reused
//! write buffer ([`RespConn::command`]) and sends them in one exchange.
//!
//! Why not the redis crate here: its parser builds a `Value` with one
//! `Vec<u8>` per element, and that parse plus its allocations were 40 % of
//! the consuming nagare's time at 100-byte events; on the way out its
//! `Cmd` copies every element into its own buffer and then again into the
//! packed command, 27 % of the producing nagare's time (profiles in
//! docs/benchmarks/queues.md). The crate still opens the other
//! connections (streams, pub/sub, Cluster) and resolves the address: this
//! connection takes the host, port, socket path, user, password and
//! database from the crate's `ConnectionInfo` (so Sentinel's master too),
//! and TLS from the plugin's `tls` table.
//!
//! Only what these commands need: arrays (nested), bulk strings, nils,
//! integers, simple strings and error replies. [`RespConn::call`] turns
//! an error reply into a [`ServerError`] (its text, e.g. "WRONGTYPE …");
//! [`RespConn::exchange`] reads every reply of a pipeline, errors
//! included, so the connection stays in step.

use std::sync::Arc;
use std::time::Duration;

use ::redis::{ConnectionAddr, ConnectionInfo};
use anyhow::{anyhow, bail, Context as _};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::net::tls::TlsClient;

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// How the read buffer grows when a reply does not fit.
const READ_CHUNK: usize = 64 * 1024;
/// A write buffer larger than this is given back after a much smaller use.
const SHRINK_ABOVE: usize = 4 << 20;

/// A value of a reply, flattened: arrays are walked in order and only
/// their leaves kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leaf {
    /// A bulk string: its bytes in the read buffer.
    Bulk { start: usize, end: usize },
    /// A nil bulk string or nil array.
    Nil,
    /// An integer (WAIT's count of replicas, RPUSH's length…).
    Int(i64),
    /// A simple string (nothing the commands here look into).
    Other,
    /// An error reply: its text (after the "-") in the read buffer.
    Error { start: usize, end: usize },
}

/// An error reply of the server, e.g. "WRONGTYPE Operation against a key
/// holding the wrong kind of value".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerError(pub String);

impl ServerError {
    /// The error code: the reply's first word ("WRONGTYPE", "ERR", …).
    pub fn code(&self) -> &str {
        self.0.split(' ').next().unwrap_or_default()
    }
}

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ServerError {}

pub struct RespConn {
    stream: Box<dyn Stream>,
    /// What was read from the socket; the last reply starts at 0.
    rbuf: Vec<u8>,
    /// Bytes of `rbuf` the last reply took (removed before the next read).
    consumed: usize,
    /// The leaves of the last reply.
    leaves: Vec<Leaf>,
    /// The command being written (reused).
    wbuf: Vec<u8>,
    /// A reply that does not come within this time fails the connection.
    timeout: Duration,
}

impl RespConn {
    /// Connects to the server `info` names (TCP, TLS with `tls`, or a UNIX
    /// socket), within `timeout`, and logs in (AUTH) and selects the
    /// database as `info` says. Replies are awaited up to `reply_timeout`.
    pub async fn connect(
        info: &ConnectionInfo,
        tls: Option<&Arc<TlsClient>>,
        timeout: Duration,
        reply_timeout: Duration,
    ) -> anyhow::Result<RespConn> {
        let stream: Box<dyn Stream> = tokio::time::timeout(timeout, open(info.addr(), tls))
            .await
            .map_err(|_| anyhow!("no connection within {timeout:?}"))??;
        let mut con = RespConn {
            stream,
            rbuf: Vec::with_capacity(READ_CHUNK),
            consumed: 0,
            leaves: Vec::new(),
            wbuf: Vec::new(),
            timeout: reply_timeout,
        };
        let r = info.redis_settings();
        match (r.username(), r.password()) {
            (Some(u), Some(p)) => con.call(&[b"AUTH", u.as_bytes(), p.as_bytes()]).await?,
            (None, Some(p)) => con.call(&[b"AUTH", p.as_bytes()]).await?,
            _ => {}
        }
        if r.db() != 0 {
            con.call(&[b"SELECT", r.db().to_string().as_bytes()])
                .await?;
        }
        Ok(con)
    }

    /// Sends one command and reads its reply (see [`RespConn::bulks`]).
    /// An error reply is a [`ServerError`].
    pub async fn call(&mut self, args: &[&[u8]]) -> anyhow::Result<()> {
        self.wbuf.clear();
        encode(&mut self.wbuf, args);
        self.exchange(1).await?;
        match self.error() {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }

    /// The write buffer, emptied, for the commands of the next
    /// [`RespConn::exchange`]: write them with [`array`] and [`bulk`].
    pub fn command(&mut self) -> &mut Vec<u8> {
        // A buffer that once held a very large chunk is not kept at that
        // size for the small ones after it.
        if self.wbuf.capacity() > SHRINK_ABOVE && self.wbuf.len() < SHRINK_ABOVE / 4 {
            self.wbuf = Vec::new();
        }
        self.wbuf.clear();
        &mut self.wbuf
    }

    /// Sends what the write buffer holds and reads `replies` replies; their
    /// values are then [`RespConn::len`], [`RespConn::bulks`],
    /// [`RespConn::last_int`] and [`RespConn::error`]. Writing, and then
    /// the replies, each have the reply timeout; an `Err` (a lost
    /// connection, a timeout, bytes that are not RESP) leaves the
    /// connection out of step: drop it.
    pub async fn exchange(&mut self, replies: usize) -> anyhow::Result<()> {
        let timeout = self.timeout;
        let (stream, wbuf) = (&mut self.stream, &self.wbuf);
        let write = async {
            stream.write_all(wbuf).await?;
            stream.flush().await?;
            anyhow::Ok(())
        };
        tokio::time::timeout(timeout, write)
            .await
            .map_err(|_| anyhow!("redis took no command within {timeout:?}"))?
            .context("writing to redis")?;
        tokio::time::timeout(timeout, self.read_replies(replies))
            .await
            .map_err(|_| anyhow!("no reply from redis within {timeout:?}"))?
    }

    /// The first error reply of the last exchange.
    pub fn error(&self) -> Option<ServerError> {
        self.leaves.iter().find_map(|l| match *l {
            Leaf::Error { start, end } => Some(ServerError(
                String::from_utf8_lossy(&self.rbuf[start..end]).into_owned(),
            )),
            _ => None,
        })
    }

    /// The last value of the last exchange, when it is an integer.
    pub fn last_int(&self) -> Option<i64> {
        match self.leaves.last() {
            Some(Leaf::Int(n)) => Some(*n),
            _ => None,
        }
    }

    /// The number of values (bulk strings and nils) of the last reply.
    pub fn reply_len(&self) -> usize {
        self.leaves.len()
    }

    /// The bulk strings of the last reply from its `from`th value on
    /// (nils left out), borrowed from the read buffer.
    pub fn bulks(&self, from: usize) -> impl Iterator<Item = &[u8]> + Clone {
        let buf = &self.rbuf[..];
        self.leaves
            .get(from..)
            .unwrap_or_default()
            .iter()
            .filter_map(move |l| match *l {
                Leaf::Bulk { start, end } => Some(&buf[start..end]),
                _ => None,
            })
    }

    async fn read_replies(&mut self, mut replies: usize) -> anyhow::Result<()> {
        self.rbuf.drain(..self.consumed);
        self.consumed = 0;
        self.leaves.clear();
        if replies == 0 {
            return Ok(());
        }
        let mut scan = Scan::default();
        loop {
            match scan.step(&self.rbuf, &mut self.leaves)? {
                Progress::Done(end) => {
                    replies -= 1;
                    if replies == 0 {
                        self.consumed = end;
                        return Ok(());
                    }
                    scan = Scan {
                        pos: end,
                        open: std::mem::take(&mut scan.open),
                    };
                }
                Progress::Need(n) => {
                    self.rbuf.reserve(n.max(READ_CHUNK));
                    if self
                        .stream
                        .read_buf(&mut self.rbuf)
                        .await
                        .context("reading from redis")?
                        == 0
                    {
                        bail!("redis closed the connection");
                    }
                }
            }
        }
    }
}

async fn open(
    addr: &ConnectionAddr,
    tls: Option<&Arc<TlsClient>>,
) -> anyhow::Result<Box<dyn Stream>> {
    Ok(match addr {
        ConnectionAddr::Tcp(host, port) => {
            let s = tcp(host, *port).await?;
            match tls {
                // A `tls` table on a redis:// address (the crate's client
                // turns it into TcpTls; kept here in case it did not).
                Some(t) => Box::new(
                    t.connect(s, &host_port(host, *port))
                        .await
                        .map_err(|e| anyhow!(e))?,
                ),
                None => Box::new(s),
            }
        }
        ConnectionAddr::TcpTls { host, port, .. } => {
            let s = tcp(host, *port).await?;
            let t = tls.ok_or_else(|| anyhow!("rediss:// without TLS settings"))?;
            Box::new(
                t.connect(s, &host_port(host, *port))
                    .await
                    .map_err(|e| anyhow!(e))?,
            )
        }
        ConnectionAddr::Unix(path) => Box::new(
            tokio::net::UnixStream::connect(path)
                .await
                .with_context(|| format!("connecting to {}", path.display()))?,
        ),
        other => bail!("unsupported redis address {other:?}"),
    })
}

async fn tcp(host: &str, port: u16) -> anyhow::Result<tokio::net::TcpStream> {
    let s = tokio::net::TcpStream::connect((host, port))
        .await
        .with_context(|| format!("connecting to {}", host_port(host, port)))?;
    s.set_nodelay(true)?;
    Ok(s)
}

fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// A command as RESP: an array of bulk strings.
fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    array(out, args.len());
    for a in args {
        bulk(out, a);
    }
}

/// The header of a command of `n` arguments (each a [`bulk`] after it).
pub fn array(out: &mut Vec<u8>, n: usize) {
    out.push(b'*');
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// One argument of a command, as a bulk string.
pub fn bulk(out: &mut Vec<u8>, a: &[u8]) {
    out.push(b'$');
    out.extend_from_slice(itoa::Buffer::new().format(a.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(a);
    out.extend_from_slice(b"\r\n");
}

/// Bytes a [`bulk`] of `len` bytes takes, at most.
pub const fn bulk_room(len: usize) -> usize {
    len + 1 + 20 + 4
}

enum Progress {
    /// The reply ends at this offset.
    Done(usize),
    /// At least this many more bytes are needed.
    Need(usize),
}

/// A scan of one reply that resumes where it stopped when more bytes come.
#[derive(Default)]
struct Scan {
    /// Where the next unread value starts.
    pos: usize,
    /// The values still to come in each open array, innermost last.
    open: Vec<i64>,
}

impl Scan {
    fn step(&mut self, buf: &[u8], leaves: &mut Vec<Leaf>) -> anyhow::Result<Progress> {
        loop {
            let Some(nl) = memchr::memchr(b'\n', &buf[self.pos..]) else {
                return Ok(Progress::Need(1));
            };
            let line_end = self.pos + nl;
            if nl < 2 || buf[line_end - 1] != b'\r' {
                bail!("redis protocol error: a line without CR LF");
            }
            let (kind, line) = (buf[self.pos], &buf[self.pos + 1..line_end - 1]);
            let next = line_end + 1;
            match kind {
                b'*' => {
                    let n = int(line)?;
                    self.pos = next;
                    if n > 0 {
                        self.open.push(n);
                        continue;
                    }
                    if n < 0 {
                        leaves.push(Leaf::Nil);
                    }
                }
                b'$' => {
                    let n = int(line)?;
                    if n < 0 {
                        leaves.push(Leaf::Nil);
                        self.pos = next;
                    } else {
                        let end = next + n as usize;
                        if buf.len() < end + 2 {
                            return Ok(Progress::Need(end + 2 - buf.len()));
                        }
                        if &buf[end..end + 2] != b"\r\n" {
                            bail!("redis protocol error: a bulk string longer than its length");
                        }
                        leaves.push(Leaf::Bulk { start: next, end });
                        self.pos = end + 2;
                    }
                }
                b':' => {
                    leaves.push(Leaf::Int(int(line)?));
                    self.pos = next;
                }
                b'+' => {
                    leaves.push(Leaf::Other);
                    self.pos = next;
                }
                b'_' => {
                    leaves.push(Leaf::Nil);
                    self.pos = next;
                }
                b'-' => {
                    leaves.push(Leaf::Error {
                        start: self.pos + 1,
                        end: line_end - 1,
                    });
                    self.pos = next;
                }
                other => bail!("redis protocol error: unexpected type byte {other:#04x}"),
            }
            // One value done: it counts for the arrays around it.
            loop {
                match self.open.last_mut() {
                    None => return Ok(Progress::Done(self.pos)),
                    Some(left) => {
                        *left -= 1;
                        if *left > 0 {
                            break;
                        }
                        self.open.pop();
                    }
                }
            }
        }
    }
}

/// A length or an integer reply: read digit by digit (one per element of
/// a pop; through `str::parse` it was a visible part of the consumer).
fn int(line: &[u8]) -> anyhow::Result<i64> {
    let bad = || {
        anyhow!(
            "redis protocol error: {:?} is not a length",
            String::from_utf8_lossy(line)
        )
    };
    let (sign, digits) = match line {
        [b'-', rest @ ..] => (-1, rest),
        _ => (1, line),
    };
    if digits.is_empty() {
        return Err(bad());
    }
    let mut n = 0i64;
    for &c in digits {
        if !c.is_ascii_digit() {
            return Err(bad());
        }
        n = n
            .checked_mul(10)
            .and_then(|n| n.checked_add(i64::from(c - b'0')))
            .ok_or_else(bad)?;
    }
    Ok(sign * n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scans `reply` as it arrives `step` bytes at a time.
    fn scan(reply: &[u8], step: usize) -> anyhow::Result<(usize, Vec<Vec<u8>>, usize)> {
        let mut scan = Scan::default();
        let mut leaves = Vec::new();
        let mut have = 0;
        loop {
            have = (have + step).min(reply.len());
            match scan.step(&reply[..have], &mut leaves)? {
                Progress::Done(end) => {
                    let bulks = leaves
                        .iter()
                        .filter_map(|l| match *l {
                            Leaf::Bulk { start, end } => Some(reply[start..end].to_vec()),
                            _ => None,
                        })
                        .collect();
                    return Ok((end, bulks, leaves.len()));
                }
                Progress::Need(_) => assert!(have < reply.len(), "needs more than the whole reply"),
            }
        }
    }

    #[test]
    fn replies_in_pieces_of_any_size() {
        // BLMPOP's [key, [elements]] and what follows it.
        let blmpop = b"*2\r\n$4\r\njobs\r\n*3\r\n$4\r\na\r\nb\r\n$0\r\n\r\n$2\r\n\x00\n\r\n+OK\r\n";
        let end = blmpop.len() - 5;
        for step in 1..blmpop.len() {
            let (e, bulks, n) = scan(blmpop, step).unwrap();
            assert_eq!(e, end, "step {step}");
            assert_eq!(bulks, [&b"jobs"[..], b"a\r\nb", b"", b"\x00\n"]);
            assert_eq!(n, 4);
        }
        assert_eq!(scan(b"*-1\r\n", 1).unwrap(), (5, vec![], 1));
        assert_eq!(scan(b"$-1\r\n", 2).unwrap(), (5, vec![], 1));
        assert_eq!(scan(b"_\r\n", 1).unwrap(), (3, vec![], 1));
        assert_eq!(scan(b"*0\r\n", 1).unwrap(), (4, vec![], 0));
        assert_eq!(scan(b":12\r\n", 1).unwrap(), (5, vec![], 1));
        assert_eq!(scan(b"*2\r\n*0\r\n*1\r\n$1\r\nx\r\n", 3).unwrap().1, [b"x"]);
    }

    #[test]
    fn errors_and_bad_bytes() {
        // An error reply is a value like the others: the replies after it
        // in a pipeline are read too, and the connection stays in step.
        let reply = b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
        for step in 1..reply.len() {
            let mut scan = Scan::default();
            let mut leaves = Vec::new();
            let mut have = 0;
            let end = loop {
                have = (have + step).min(reply.len());
                if let Progress::Done(end) = scan.step(&reply[..have], &mut leaves).unwrap() {
                    break end;
                }
            };
            assert_eq!(end, reply.len());
            let Leaf::Error { start, end } = leaves[0] else {
                panic!("{leaves:?}")
            };
            let e = ServerError(String::from_utf8_lossy(&reply[start..end]).into_owned());
            assert_eq!(e.code(), "WRONGTYPE");
            assert!(e.to_string().ends_with("wrong kind of value"), "{e}");
        }
        assert!(scan(b"$3\r\nabcd\r\n", 100).is_err());
        assert!(scan(b"*x\r\n", 100).is_err());
        for bad in [&b""[..], b"-", b"1-", b"9223372036854775808", b"+1", b" 1"] {
            assert!(int(bad).is_err(), "{bad:?}");
        }
        assert_eq!(int(b"9223372036854775807").unwrap(), i64::MAX);
        assert_eq!(int(b"-42").unwrap(), -42);
        assert_eq!(int(b"0").unwrap(), 0);
        assert!(scan(b"!3\r\n", 100).is_err());
        assert!(scan(b"+OK\n", 100).is_err());
    }

    #[test]
    fn commands() {
        let mut out = Vec::new();
        encode(&mut out, &[b"LRANGE", b"k", b"0", b""]);
        assert_eq!(
            out,
            b"*4\r\n$6\r\nLRANGE\r\n$1\r\nk\r\n$1\r\n0\r\n$0\r\n\r\n"
        );
        let element = vec![b'x'; 123_456];
        out.clear();
        bulk(&mut out, &element);
        assert_eq!(&out[..10], b"$123456\r\nx");
        assert!(out.len() <= bulk_room(element.len()));
    }

    #[test]
    fn integers_and_pipelined_replies() {
        // RPUSH's length and WAIT's count, one after the other.
        let (_, _, n) = scan(b":-3\r\n", 1).unwrap();
        assert_eq!(n, 1);
        let mut scan = Scan::default();
        let mut leaves = Vec::new();
        let two = b":4000\r\n:1\r\n";
        let Progress::Done(end) = scan.step(two, &mut leaves).unwrap() else {
            panic!()
        };
        let mut scan = Scan {
            pos: end,
            open: Vec::new(),
        };
        assert!(
            matches!(scan.step(two, &mut leaves).unwrap(), Progress::Done(e) if e == two.len())
        );
        assert_eq!(leaves, [Leaf::Int(4000), Leaf::Int(1)]);
    }
}
