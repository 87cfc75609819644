//! A scripted forward server for tests: decodes frames with nagare-forward,
//! records events, answers acks (or withholds some), runs the shared-key
//! handshake, and can be stopped and started again on the same address.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use nagare_forward::handshake::{shared_key_digest, Helo, Ping, Pong};
use nagare_forward::{encode_ack, scan_frame, EventTime, Limits};

#[derive(Debug, Clone)]
pub struct Ev {
    pub tag: String,
    pub time: EventTime,
    pub record: rmpv::Value,
}

impl Ev {
    pub fn field(&self, k: &str) -> Option<&rmpv::Value> {
        self.record
            .as_map()?
            .iter()
            .find(|(kk, _)| kk.as_str() == Some(k))
            .map(|(_, v)| v)
    }
    pub fn seq(&self) -> u64 {
        self.field("seq").and_then(|v| v.as_u64()).expect("seq")
    }
}

#[derive(Clone, Default)]
pub struct Opts {
    /// Do not ack the first N frames that carry a chunk id.
    pub withhold_acks: usize,
    pub shared_key: Option<String>,
}

#[derive(Default)]
pub struct Log {
    pub events: Vec<Ev>,
    /// The chunk id of every frame received (None without one).
    pub chunks: Vec<Option<Vec<u8>>>,
    pub frames: usize,
    /// The uncompressed entries size of every frame.
    pub entry_bytes: Vec<usize>,
    /// Frames that came as CompressedPackedForward.
    pub compressed_frames: usize,
    pub handshake_failures: usize,
}

/// Wraps each accepted TCP connection (e.g. in a TLS server session).
pub type Wrap = Arc<dyn Fn(TcpStream) -> Box<dyn ReadWrite> + Send + Sync>;

struct Inner {
    wrap: Option<Wrap>,
    log: Mutex<Log>,
    cv: Condvar,
    conns: Mutex<Vec<Closer>>,
    accepted: AtomicUsize,
    /// Connections served to their end (the client closed them, or the
    /// server was stopped).
    ended: AtomicUsize,
    withheld: AtomicUsize,
    opts: Opts,
}

enum Closer {
    Tcp(TcpStream),
    Unix(UnixStream),
}

enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

pub struct Server {
    pub addr: String,
    pub path: Option<PathBuf>,
    inner: Arc<Inner>,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

/// A TCP port on 127.0.0.1 where nothing listens (bound, then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Server {
    pub fn start(opts: Opts) -> Server {
        Self::start_on(0, opts)
    }

    pub fn start_on(port: u16, opts: Opts) -> Server {
        let l = TcpListener::bind(("127.0.0.1", port)).expect("bind");
        let addr = l.local_addr().unwrap().to_string();
        Self::run(Listener::Tcp(l), addr, None, opts, None)
    }

    pub fn start_wrapped(opts: Opts, wrap: Wrap) -> Server {
        Self::start_wrapped_on(0, opts, wrap)
    }

    pub fn start_wrapped_on(port: u16, opts: Opts, wrap: Wrap) -> Server {
        let l = TcpListener::bind(("127.0.0.1", port)).expect("bind");
        let addr = l.local_addr().unwrap().to_string();
        Self::run(Listener::Tcp(l), addr, None, opts, Some(wrap))
    }

    pub fn start_unix(path: PathBuf, opts: Opts) -> Server {
        let _ = std::fs::remove_file(&path);
        let l = UnixListener::bind(&path).expect("bind unix");
        let addr = format!("unix://{}", path.display());
        Self::run(Listener::Unix(l), addr, Some(path), opts, None)
    }

    fn run(
        l: Listener,
        addr: String,
        path: Option<PathBuf>,
        opts: Opts,
        wrap: Option<Wrap>,
    ) -> Server {
        let inner = Arc::new(Inner {
            wrap,
            log: Mutex::new(Log::default()),
            cv: Condvar::new(),
            conns: Mutex::new(Vec::new()),
            accepted: AtomicUsize::new(0),
            ended: AtomicUsize::new(0),
            withheld: AtomicUsize::new(0),
            opts,
        });
        let stop = Arc::new(AtomicBool::new(false));
        let (i2, s2) = (inner.clone(), stop.clone());
        let accept = std::thread::spawn(move || {
            match &l {
                Listener::Tcp(l) => l.set_nonblocking(true).unwrap(),
                Listener::Unix(l) => l.set_nonblocking(true).unwrap(),
            }
            while !s2.load(Ordering::SeqCst) {
                let got: Option<(Box<dyn ReadWrite>, Closer)> = match &l {
                    Listener::Tcp(l) => l.accept().ok().map(|(s, _)| {
                        s.set_nonblocking(false).unwrap();
                        let c = Closer::Tcp(s.try_clone().unwrap());
                        let rw: Box<dyn ReadWrite> = match &i2.wrap {
                            Some(w) => w(s),
                            None => Box::new(s),
                        };
                        (rw, c)
                    }),
                    Listener::Unix(l) => l.accept().ok().map(|(s, _)| {
                        s.set_nonblocking(false).unwrap();
                        let c = Closer::Unix(s.try_clone().unwrap());
                        (Box::new(s) as Box<dyn ReadWrite>, c)
                    }),
                };
                match got {
                    Some((s, c)) => {
                        i2.accepted.fetch_add(1, Ordering::SeqCst);
                        i2.conns.lock().unwrap().push(c);
                        let i3 = i2.clone();
                        std::thread::spawn(move || {
                            serve(s, i3.clone());
                            i3.ended.fetch_add(1, Ordering::SeqCst);
                            let _log = i3.log.lock().unwrap();
                            i3.cv.notify_all();
                        });
                    }
                    None => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Server {
            addr,
            path,
            inner,
            stop,
            accept: Some(accept),
        }
    }

    pub fn port(&self) -> u16 {
        self.addr.rsplit(':').next().unwrap().parse().unwrap()
    }

    /// Stops listening and closes every connection (the log stays readable).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(a) = self.accept.take() {
            a.join().unwrap();
        }
        for c in self.inner.conns.lock().unwrap().drain(..) {
            match c {
                Closer::Tcp(s) => {
                    let _ = s.shutdown(Shutdown::Both);
                }
                Closer::Unix(s) => {
                    let _ = s.shutdown(Shutdown::Both);
                }
            }
        }
    }

    pub fn connections(&self) -> usize {
        self.inner.accepted.load(Ordering::SeqCst)
    }

    pub fn with_log<R>(&self, f: impl FnOnce(&Log) -> R) -> R {
        f(&self.inner.log.lock().unwrap())
    }

    pub fn events(&self) -> Vec<Ev> {
        self.with_log(|l| l.events.clone())
    }

    pub fn count(&self) -> usize {
        self.with_log(|l| l.events.len())
    }

    /// Waits until every connection the server accepted has ended: once the
    /// client is gone (a closed logger, a program that exited) the server
    /// has read all it sent, so what it logged is final.
    pub fn wait_closed(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let inner = &self.inner;
        let mut g = inner.log.lock().unwrap();
        while inner.ended.load(Ordering::SeqCst) < inner.accepted.load(Ordering::SeqCst) {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            g = inner.cv.wait_timeout(g, deadline - now).unwrap().0;
        }
        true
    }

    /// Waits until at least `n` events arrived.
    pub fn wait_for(&self, n: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut g = self.inner.log.lock().unwrap();
        while g.events.len() < n {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            g = self.inner.cv.wait_timeout(g, deadline - now).unwrap().0;
        }
        true
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
        if let Some(p) = &self.path {
            let _ = std::fs::remove_file(p);
        }
    }
}

pub trait ReadWrite: Read + Write + Send {}
impl<T: Read + Write + Send> ReadWrite for T {}

fn read_value(s: &mut dyn ReadWrite, buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    let mut tmp = [0u8; 4096];
    loop {
        if let Ok(end) = nagare_forward::msgpack::skip_value(buf, 0) {
            return Some(buf.drain(..end).collect());
        }
        match s.read(&mut tmp) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
    }
}

fn serve(mut s: Box<dyn ReadWrite>, inner: Arc<Inner>) {
    let mut buf: Vec<u8> = Vec::new();
    if let Some(key) = &inner.opts.shared_key {
        let nonce = vec![0xfe, 0x00, 0x41, 0x80, 7, 7, 7, 7];
        let mut out = Vec::new();
        Helo {
            nonce: nonce.clone(),
            auth: vec![],
            keepalive: true,
        }
        .encode(&mut out);
        if s.write_all(&out).is_err() {
            return;
        }
        let Some(p) = read_value(&mut *s, &mut buf) else {
            return;
        };
        let Ok(ping) = Ping::decode(&p) else { return };
        let want = shared_key_digest(
            &ping.shared_key_salt,
            &ping.hostname,
            &nonce,
            key.as_bytes(),
        );
        let ok = want.as_bytes() == &ping.shared_key_digest[..];
        let pong = Pong {
            auth_ok: ok,
            reason: if ok {
                vec![]
            } else {
                b"shared key mismatch".to_vec()
            },
            hostname: b"test-server".to_vec(),
            shared_key_digest: shared_key_digest(
                &ping.shared_key_salt,
                b"test-server",
                &nonce,
                key.as_bytes(),
            )
            .into_bytes(),
        };
        let mut out = Vec::new();
        pong.encode(&mut out);
        let _ = s.write_all(&out);
        if !ok {
            inner.log.lock().unwrap().handshake_failures += 1;
            return;
        }
    }
    let lim = Limits::default();
    let mut tmp = vec![0u8; 64 << 10];
    loop {
        loop {
            let sc = match scan_frame(&buf, &lim) {
                Ok(Some(sc)) => sc,
                Ok(None) => break,
                Err(e) => panic!("test server: malformed frame: {e}"),
            };
            let frame = Bytes::copy_from_slice(&buf[..sc.len]);
            buf.drain(..sc.len);
            let f = sc.into_frame(frame, &lim, EventTime::now()).unwrap();
            let mut evs = Vec::new();
            let mut rd = &f.entries[..];
            while !rd.is_empty() {
                let v = rmpv::decode::read_value(&mut rd).unwrap();
                let a = v.as_array().unwrap();
                let time = match &a[0] {
                    rmpv::Value::Ext(0, p) => EventTime::from_payload(p),
                    other => EventTime::new(other.as_u64().unwrap() as u32, 0),
                };
                evs.push(Ev {
                    tag: f.tag.clone(),
                    time,
                    record: a[1].clone(),
                });
            }
            let chunk_id = f.chunk.as_ref().map(|c| {
                let v = rmpv::decode::read_value(&mut &c[..]).unwrap();
                v.as_str().unwrap().as_bytes().to_vec()
            });
            {
                let mut g = inner.log.lock().unwrap();
                g.events.extend(evs);
                g.chunks.push(chunk_id);
                g.frames += 1;
                g.entry_bytes.push(f.entries.len());
                if f.mode == nagare_forward::Mode::CompressedPackedForward {
                    g.compressed_frames += 1;
                }
                inner.cv.notify_all();
            }
            if let Some(c) = &f.chunk {
                if inner.withheld.load(Ordering::SeqCst) < inner.opts.withhold_acks {
                    inner.withheld.fetch_add(1, Ordering::SeqCst);
                } else {
                    let mut out = Vec::new();
                    encode_ack(&mut out, c);
                    if s.write_all(&out).is_err() {
                        return;
                    }
                }
            }
        }
        match s.read(&mut tmp) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
    }
}
