//! Where generated lines go: a file, stdout, a forward server (TCP or UNIX
//! socket), raw TCP lines, or HTTP POSTs of JSON lines.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use nagare_forward::msgpack::{skip_value, write_str, write_uint};
use nagare_forward::{encode_packed_forward, Compression, EventTime};

use super::fields::Rng;
use super::format::LineGen;

/// A stream address: `HOST:PORT`, or `unix:/path` (or an absolute path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    Tcp(String),
    Unix(PathBuf),
}

impl Endpoint {
    pub fn parse(s: &str) -> Result<Endpoint> {
        if let Some(p) = s.strip_prefix("unix:") {
            return Ok(Endpoint::Unix(PathBuf::from(p)));
        }
        if s.starts_with('/') {
            return Ok(Endpoint::Unix(PathBuf::from(s)));
        }
        if !s.contains(':') {
            bail!("{s:?} is not HOST:PORT or unix:/PATH");
        }
        Ok(Endpoint::Tcp(s.to_owned()))
    }

    pub fn connect(&self) -> Result<Conn> {
        Ok(match self {
            Endpoint::Tcp(a) => {
                let s = TcpStream::connect(a).with_context(|| format!("connecting to {a}"))?;
                s.set_nodelay(true).ok();
                Conn::Tcp(s)
            }
            Endpoint::Unix(p) => Conn::Unix(
                UnixStream::connect(p).with_context(|| format!("connecting to {}", p.display()))?,
            ),
        })
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Tcp(a) => write!(f, "{a}"),
            Endpoint::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// A connected stream socket.
pub enum Conn {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Conn {
    fn set_read_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        match self {
            Conn::Tcp(s) => s.set_read_timeout(d),
            Conn::Unix(s) => s.set_read_timeout(d),
        }
    }
}

impl Read for Conn {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.read(b),
            Conn::Unix(s) => s.read(b),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Tcp(s) => s.write(b),
            Conn::Unix(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// What a gen run writes to.
#[derive(Debug, Clone, PartialEq)]
pub enum TargetSpec {
    /// Append lines to a file; `fsync` syncs after every write.
    File {
        path: PathBuf,
        fsync: bool,
    },
    Stdout,
    /// Forward protocol, PackedForward frames of `batch` events.
    Forward {
        addr: Endpoint,
        tag: String,
        ack: bool,
    },
    /// Newline-terminated lines on a TCP connection.
    Tcp(String),
    /// `POST` of `batch` JSON lines per request.
    Http {
        host: String,
        path: String,
    },
}

impl TargetSpec {
    /// Parses `http://host:port/path`.
    pub fn http(url: &str) -> Result<TargetSpec> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| anyhow!("http target {url:?} must start with http:// (no TLS)"))?;
        let (host, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if !host.contains(':') {
            return Ok(TargetSpec::Http {
                host: format!("{host}:80"),
                path: path.to_owned(),
            });
        }
        Ok(TargetSpec::Http {
            host: host.to_owned(),
            path: path.to_owned(),
        })
    }

    /// Whether one send is one frame/request of `batch` lines.
    pub fn is_batched(&self) -> bool {
        matches!(self, TargetSpec::Forward { .. } | TargetSpec::Http { .. })
    }

    pub fn describe(&self) -> String {
        match self {
            TargetSpec::File { path, .. } => format!("file {}", path.display()),
            TargetSpec::Stdout => "stdout".into(),
            TargetSpec::Forward { addr, .. } => format!("forward {addr}"),
            TargetSpec::Tcp(a) => format!("tcp {a}"),
            TargetSpec::Http { host, path } => format!("http://{host}{path}"),
        }
    }

    /// Opens what every worker shares (the file).
    pub fn open_shared(&self) -> Result<Shared> {
        Ok(match self {
            TargetSpec::File { path, .. } => Shared::File(Arc::new(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .with_context(|| format!("opening {}", path.display()))?,
            )),
            _ => Shared::None,
        })
    }

    /// The per-worker sender; `buffered` lets line targets gather ~1 MiB
    /// before writing.
    pub fn open_worker(&self, shared: &Shared, buffered: bool) -> Result<Box<dyn Sender>> {
        let threshold = if buffered { 1 << 20 } else { 0 };
        Ok(match self {
            TargetSpec::File { fsync, .. } => {
                let Shared::File(f) = shared else {
                    bail!("file target not opened");
                };
                Box::new(LineSender::new(Out::File(f.clone(), *fsync), threshold))
            }
            TargetSpec::Stdout => Box::new(LineSender::new(Out::Stdout, threshold)),
            TargetSpec::Tcp(a) => {
                let s = TcpStream::connect(a).with_context(|| format!("connecting to {a}"))?;
                Box::new(LineSender::new(Out::Tcp(s), threshold))
            }
            TargetSpec::Forward { addr, tag, ack } => Box::new(ForwardSender {
                conn: addr.connect()?,
                tag: tag.clone(),
                ack: *ack,
                entries: Vec::with_capacity(1 << 16),
                frame: Vec::with_capacity(1 << 16),
                line: Vec::with_capacity(256),
                reply: Vec::with_capacity(256),
                rng: Rng::from_entropy(),
            }),
            TargetSpec::Http { host, path } => Box::new(HttpSender {
                host: host.clone(),
                path: path.clone(),
                conn: None,
                body: Vec::with_capacity(1 << 16),
                head: Vec::with_capacity(256),
                scratch: Vec::with_capacity(256),
                resp: Vec::with_capacity(1024),
            }),
        })
    }
}

/// Per-run state shared by the workers.
pub enum Shared {
    None,
    File(Arc<File>),
}

/// One worker's connection to the target.
pub trait Sender: Send {
    /// Sends lines `first .. first + n` (line numbers double as `seq`),
    /// stamped `now` (ns since the epoch). Returns the bytes written (0 while a
    /// line target is still gathering).
    fn send(&mut self, gen: &mut LineGen, first: u64, n: u64, now: i64) -> io::Result<u64>;
    /// Writes whatever is gathered; returns the bytes written.
    fn finish(&mut self) -> io::Result<u64>;
}

enum Out {
    File(Arc<File>, bool),
    Stdout,
    Tcp(TcpStream),
}

impl Out {
    fn write_buf(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Out::File(f, fsync) => {
                (&**f).write_all(buf)?;
                if *fsync {
                    f.sync_data()?;
                }
            }
            Out::Stdout => {
                let mut o = io::stdout().lock();
                o.write_all(buf)?;
                o.flush()?;
            }
            Out::Tcp(s) => s.write_all(buf)?,
        }
        Ok(())
    }
}

/// Writes directly, or hands full buffers to a writer thread so that
/// generating the next buffer overlaps writing the last one.
enum Io {
    Direct(Out),
    Async {
        full: Option<SyncSender<Vec<u8>>>,
        empty: Receiver<Vec<u8>>,
        writer: Option<JoinHandle<io::Result<()>>>,
    },
}

struct LineSender {
    io: Io,
    buf: Vec<u8>,
    threshold: usize,
}

impl LineSender {
    fn new(out: Out, threshold: usize) -> Self {
        let cap = threshold + (64 << 10);
        let io = if threshold == 0 {
            Io::Direct(out)
        } else {
            let (full_tx, full_rx) = sync_channel::<Vec<u8>>(1);
            let (empty_tx, empty_rx) = sync_channel::<Vec<u8>>(2);
            empty_tx.send(Vec::with_capacity(cap)).ok();
            let mut out = out;
            let writer = std::thread::spawn(move || -> io::Result<()> {
                for mut b in full_rx {
                    out.write_buf(&b)?;
                    b.clear();
                    let _ = empty_tx.send(b);
                }
                Ok(())
            });
            Io::Async {
                full: Some(full_tx),
                empty: empty_rx,
                writer: Some(writer),
            }
        };
        LineSender {
            io,
            buf: Vec::with_capacity(cap),
            threshold,
        }
    }

    fn write_out(&mut self) -> io::Result<u64> {
        if self.buf.is_empty() {
            return Ok(0);
        }
        let n = self.buf.len() as u64;
        match &mut self.io {
            Io::Direct(out) => {
                out.write_buf(&self.buf)?;
                self.buf.clear();
            }
            Io::Async {
                full,
                empty,
                writer,
            } => {
                let spare = empty.recv().ok();
                let sent = match (spare, full.as_ref()) {
                    (Some(spare), Some(tx)) => {
                        let b = std::mem::replace(&mut self.buf, spare);
                        tx.send(b).is_ok()
                    }
                    _ => false,
                };
                if !sent {
                    // The writer stopped: report its error.
                    full.take();
                    return Err(match writer.take().map(|h| h.join()) {
                        Some(Ok(Err(e))) => e,
                        _ => io::Error::other("the writer thread stopped"),
                    });
                }
            }
        }
        Ok(n)
    }
}

impl Sender for LineSender {
    #[inline]
    fn send(&mut self, gen: &mut LineGen, first: u64, n: u64, now: i64) -> io::Result<u64> {
        if let Some(m) = gen.fixed() {
            // Same bytes every line: no per-line work beyond the copy.
            for _ in 0..n {
                self.buf.extend_from_slice(m);
                self.buf.push(b'\n');
            }
        } else {
            for i in first..first + n {
                gen.write_line(i, now, &mut self.buf);
                self.buf.push(b'\n');
            }
        }
        if self.buf.len() >= self.threshold {
            self.write_out()
        } else {
            Ok(0)
        }
    }

    fn finish(&mut self) -> io::Result<u64> {
        let n = self.write_out()?;
        if let Io::Async { full, writer, .. } = &mut self.io {
            full.take();
            if let Some(h) = writer.take() {
                h.join()
                    .map_err(|_| io::Error::other("the writer thread panicked"))??;
            }
        }
        Ok(n)
    }
}

struct ForwardSender {
    conn: Conn,
    tag: String,
    ack: bool,
    entries: Vec<u8>,
    frame: Vec<u8>,
    line: Vec<u8>,
    reply: Vec<u8>,
    rng: Rng,
}

/// Appends one `[time, {"seq": seq, "message": line}]` entry.
#[inline]
pub fn write_seq_entry(out: &mut Vec<u8>, t: EventTime, seq: u64, line: &[u8]) {
    out.push(0x92);
    out.extend_from_slice(&t.to_bytes());
    out.push(0x82);
    write_str(out, b"seq");
    write_uint(out, seq);
    write_str(out, b"message");
    write_str(out, line);
}

impl ForwardSender {
    fn wait_ack(&mut self, id: &[u8]) -> io::Result<()> {
        self.conn.set_read_timeout(Some(Duration::from_secs(30)))?;
        let mut tmp = [0u8; 512];
        loop {
            if !self.reply.is_empty() {
                if let Ok(end) = skip_value(&self.reply, 0) {
                    let got = nagare_forward::handshake::decode_ack(&self.reply[..end])
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
                    self.reply.drain(..end);
                    if got != id {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "ack does not match the chunk id",
                        ));
                    }
                    return Ok(());
                }
            }
            let n = self.conn.read(&mut tmp)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed while waiting for an ack",
                ));
            }
            self.reply.extend_from_slice(&tmp[..n]);
        }
    }
}

impl Sender for ForwardSender {
    fn send(&mut self, gen: &mut LineGen, first: u64, n: u64, now: i64) -> io::Result<u64> {
        let t = EventTime::new((now / 1_000_000_000) as u32, (now % 1_000_000_000) as u32);
        self.entries.clear();
        if let Some(m) = gen.fixed() {
            // Same message every line: no copy through `line`.
            for i in first..first + n {
                write_seq_entry(&mut self.entries, t, i, m);
            }
        } else {
            for i in first..first + n {
                self.line.clear();
                gen.write_line(i, now, &mut self.line);
                write_seq_entry(&mut self.entries, t, i, &self.line);
            }
        }
        let mut id = [0u8; 24];
        if self.ack {
            for c in id.iter_mut() {
                *c = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                    [self.rng.below(62) as usize];
            }
        }
        self.frame.clear();
        encode_packed_forward(
            &mut self.frame,
            &self.tag,
            &self.entries,
            n as u32,
            self.ack.then_some(&id[..]),
            Compression::None,
        )?;
        self.conn.write_all(&self.frame)?;
        if self.ack {
            self.wait_ack(&id)?;
        }
        Ok(self.frame.len() as u64)
    }

    fn finish(&mut self) -> io::Result<u64> {
        Ok(0)
    }
}

struct HttpSender {
    host: String,
    path: String,
    conn: Option<TcpStream>,
    body: Vec<u8>,
    head: Vec<u8>,
    scratch: Vec<u8>,
    resp: Vec<u8>,
}

impl HttpSender {
    /// Reads one response; returns (status, server wants close).
    fn read_response(&mut self) -> io::Result<(u16, bool)> {
        let conn = self.conn.as_mut().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(30)))?;
        self.resp.clear();
        let mut tmp = [0u8; 4096];
        let head_end = loop {
            if let Some(p) = find(&self.resp, b"\r\n\r\n") {
                break p + 4;
            }
            if self.resp.len() > 64 << 10 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "response head too large",
                ));
            }
            let n = conn.read(&mut tmp)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "HTTP server closed the connection",
                ));
            }
            self.resp.extend_from_slice(&tmp[..n]);
        };
        let head = String::from_utf8_lossy(&self.resp[..head_end]).to_ascii_lowercase();
        let status: u16 = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "bad HTTP status line"))?;
        let mut len = 0usize;
        let mut close = false;
        for l in head.lines() {
            if let Some(v) = l.strip_prefix("content-length:") {
                len = v.trim().parse().unwrap_or(0);
            }
            if l.starts_with("connection:") && l.contains("close") {
                close = true;
            }
        }
        let mut have = self.resp.len() - head_end;
        while have < len {
            let n = conn.read(&mut tmp)?;
            if n == 0 {
                break;
            }
            have += n;
        }
        Ok((status, close))
    }
}

fn find(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}

impl Sender for HttpSender {
    fn send(&mut self, gen: &mut LineGen, first: u64, n: u64, now: i64) -> io::Result<u64> {
        self.body.clear();
        for i in first..first + n {
            gen.write_json_line(i, now, &mut self.scratch, &mut self.body);
            self.body.push(b'\n');
        }
        self.head.clear();
        write!(
            self.head,
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/x-ndjson\r\nContent-Length: {}\r\n\r\n",
            self.path,
            self.host,
            self.body.len()
        )?;
        if self.conn.is_none() {
            let s = TcpStream::connect(&self.host)?;
            s.set_nodelay(true).ok();
            self.conn = Some(s);
        }
        let c = self.conn.as_mut().unwrap();
        c.write_all(&self.head)?;
        c.write_all(&self.body)?;
        let (status, close) = self.read_response()?;
        if close {
            self.conn = None;
        }
        if !(200..300).contains(&status) {
            return Err(io::Error::other(format!("HTTP server answered {status}")));
        }
        Ok((self.head.len() + self.body.len()) as u64)
    }

    fn finish(&mut self) -> io::Result<u64> {
        Ok(0)
    }
}
