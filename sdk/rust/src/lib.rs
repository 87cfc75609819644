//! nagare-logger: a client for nagare (and Fluentd, Fluent Bit) over the
//! forward protocol v1.
//!
//! `emit` encodes the record into an in-memory buffer and returns; a
//! background thread batches the buffered events into PackedForward frames
//! (one per tag per batch) and writes them over one persistent connection,
//! reconnecting with backoff, failing over between servers, spilling to disk
//! when memory is full and, with `require_ack`, resending frames until the
//! server acknowledged them.
//!
//! ```no_run
//! use nagare_logger::{Config, Logger};
//! use std::time::Duration;
//!
//! #[derive(serde::Serialize)]
//! struct Access<'a> { path: &'a str, status: u16 }
//!
//! let log = Logger::new(Config::new().servers(["127.0.0.1:24224"])?)?;
//! log.emit("app.access", &Access { path: "/", status: 200 })?;
//! log.flush(Duration::from_secs(5))?;
//! println!("{:?}", log.stats());
//! # Ok::<(), nagare_logger::Error>(())
//! ```

mod config;
mod conn;
mod fork;
#[cfg(feature = "tracing")]
mod layer;
mod sender;
mod spill;
#[cfg(feature = "tls")]
mod tls;

use std::collections::HashMap;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nagare_forward::msgpack;
use serde::Serialize;

pub use config::{Compress, Config, Endpoint, ErrorHandler, Overflow};
#[cfg(feature = "tracing")]
pub use layer::NagareLayer;
pub use nagare_forward::EventTime;
#[cfg(feature = "tls")]
pub use tls::TlsConfig;

use spill::Spill;

/// Everything that can go wrong, in `emit`/`flush`/`close` results and in the
/// error callback.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("the record could not be encoded: {0}")]
    Encode(String),
    #[error("the record must encode to a msgpack map")]
    NotAMap,
    #[error("the logger is closed")]
    Closed,
    #[error("buffer full: event dropped")]
    Dropped,
    /// Told to the error callback instead of one `Dropped` per event: the
    /// first drop at once, then at most once a second (and at `close`) with
    /// the number dropped since the last report.
    #[error("buffer full: {count} events dropped")]
    DroppedEvents { count: u64 },
    #[error("timed out with {remaining} events not yet delivered")]
    Timeout { remaining: u64 },
    #[error("cannot connect to {server}: {reason}")]
    Connect { server: String, reason: String },
    #[error("connection to {server} lost: {reason}")]
    Disconnected { server: String, reason: String },
    #[error("handshake with {server} failed: {reason}")]
    Handshake { server: String, reason: String },
    #[error("no ack from {server} within {timeout:?}; resending {frames} frames")]
    AckTimeout {
        server: String,
        timeout: Duration,
        frames: usize,
    },
    #[error("spill file {path}: {source}")]
    Spill {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Counters the application can read at any time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Events delivered (written to the server; acked with `require_ack`).
    pub sent: u64,
    /// Events accepted and not yet delivered (memory + spill file).
    pub buffered: u64,
    /// Bytes of encoded events held in memory.
    pub buffered_bytes: u64,
    /// Events written to the spill file (in total; records still in its
    /// write buffer, at most `SYNC_INTERVAL` = 200 ms old, are not counted).
    pub spilled: u64,
    /// Events dropped (buffer full with `overflow = drop`, spill file full, block timeout).
    pub dropped: u64,
    /// Connections established after the first one.
    pub reconnects: u64,
    /// Errors reported to the error callback.
    pub errors: u64,
}

struct TagBuf {
    tag: String,
    entries: Vec<u8>,
    count: u32,
}

pub(crate) struct State {
    bufs: Vec<TagBuf>,
    index: HashMap<String, usize>,
    last: usize,
    pending_bytes: usize,
    first_pending: Option<Instant>,
    inflight_bytes: usize,
    spill: Option<Spill>,
    accepted: u64,
    completed: u64,
    /// Events close() could not deliver and had no spill file for (dropped).
    lost_at_close: u64,
    sender_waiting: bool,
    flush_waiters: usize,
    blocked: usize,
    closing: bool,
    stop: bool,
    exited: bool,
    /// Drops not yet told to the error callback, and when it was last told.
    unreported_drops: u64,
    last_drop_report: Option<Instant>,
    scratch: Vec<u8>,
    /// Full batches (`batch_bytes` reached), oldest first, waiting for the sender.
    sealed: Vec<(String, Vec<u8>, u32)>,
    batch_bytes: usize,
}

/// `a == b` for tags, inline: most tags are 4 to 16 bytes, compared here as
/// two overlapping words each instead of through a `memcmp` call (a few per
/// cent of a `tracing` event through `NagareLayer`, perf).
#[inline]
fn same_tag(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if (8..=16).contains(&n) {
        let w = |s: &[u8], i: usize| u64::from_ne_bytes(s[i..i + 8].try_into().unwrap());
        w(a, 0) == w(b, 0) && w(a, n - 8) == w(b, n - 8)
    } else if (4..8).contains(&n) {
        let w = |s: &[u8], i: usize| u32::from_ne_bytes(s[i..i + 4].try_into().unwrap());
        w(a, 0) == w(b, 0) && w(a, n - 4) == w(b, n - 4)
    } else {
        a == b
    }
}

impl State {
    fn buf_index(&mut self, tag: &str) -> usize {
        if let Some(b) = self.bufs.get(self.last) {
            if same_tag(b.tag.as_bytes(), tag.as_bytes()) {
                return self.last;
            }
        }
        let i = match self.index.get(tag) {
            Some(&i) => i,
            None => {
                self.bufs.push(TagBuf {
                    tag: tag.to_string(),
                    entries: Vec::new(),
                    count: 0,
                });
                self.index.insert(tag.to_string(), self.bufs.len() - 1);
                self.bufs.len() - 1
            }
        };
        self.last = i;
        i
    }

    fn push_pending(&mut self, tag: &str, count: u32, entries: &[u8]) {
        let i = self.buf_index(tag);
        let b = &mut self.bufs[i];
        b.entries.extend_from_slice(entries);
        b.count += count;
        self.pending_bytes += entries.len();
        if self.first_pending.is_none() {
            self.first_pending = Some(Instant::now());
        }
        self.seal_if_full(i);
    }

    /// Closes tag buffer `i` as a batch once it holds `batch_bytes`, so no
    /// frame grows past that size however long the sender was away.
    #[inline]
    fn seal_if_full(&mut self, i: usize) {
        let b = &mut self.bufs[i];
        if b.entries.len() >= self.batch_bytes {
            let cap = b.entries.len() + b.entries.len() / 8;
            let entries = std::mem::replace(&mut b.entries, Vec::with_capacity(cap));
            self.sealed.push((b.tag.clone(), entries, b.count));
            b.count = 0;
        }
    }

    /// Takes every pending event as batches: sealed ones first (older).
    pub(crate) fn take_pending(&mut self, out: &mut Vec<(String, Vec<u8>, u32)>) {
        out.append(&mut self.sealed);
        for b in self.bufs.iter_mut().filter(|b| b.count > 0) {
            let cap = b.entries.len().min(self.batch_bytes + 4096);
            let entries = std::mem::replace(&mut b.entries, Vec::with_capacity(cap));
            out.push((b.tag.clone(), entries, b.count));
            b.count = 0;
        }
        self.pending_bytes = 0;
    }

    fn memory_used(&self) -> usize {
        self.pending_bytes + self.inflight_bytes
    }
}

#[derive(Default)]
pub(crate) struct Counters {
    sent: AtomicU64,
    dropped: AtomicU64,
    reconnects: AtomicU64,
    errors: AtomicU64,
}

pub(crate) struct Shared {
    state: Mutex<State>,
    /// The sender waits here for work.
    work: Condvar,
    /// Blocked emitters wait here for room.
    space: Condvar,
    /// flush/close wait here for deliveries.
    done: Condvar,
    counters: Counters,
    cfg: Config,
    #[cfg(feature = "tls")]
    tls: Option<Arc<rustls::ClientConfig>>,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn report(&self, e: &Error) {
        self.counters.errors.fetch_add(1, Relaxed);
        if let Some(h) = &self.cfg.error_handler {
            h(e);
        }
    }

    /// Marks `count` events holding `bytes` of memory as delivered.
    pub(crate) fn complete(&self, count: u64, bytes: usize) {
        self.counters.sent.fetch_add(count, Relaxed);
        let mut st = self.lock();
        st.inflight_bytes -= bytes;
        st.completed += count;
        if st.blocked > 0 {
            self.space.notify_all();
        }
        if st.flush_waiters > 0 || st.closing {
            self.done.notify_all();
        }
    }
}

struct Inner {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
    fork_gen: u64,
}

impl Inner {
    fn start(cfg: Config) -> Result<Inner, Error> {
        let spill = match &cfg.spill_path {
            Some(p) => Some(Spill::open(p, cfg.spill_limit).map_err(|e| Error::Spill {
                path: p.display().to_string(),
                source: e,
            })?),
            None => None,
        };
        #[cfg(feature = "tls")]
        let tls = cfg.tls.as_ref().map(tls::client_config).transpose()?;
        let left = spill.as_ref().map_or(0, |s| s.events());
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                bufs: Vec::new(),
                index: HashMap::new(),
                last: 0,
                pending_bytes: 0,
                first_pending: None,
                inflight_bytes: 0,
                spill,
                // Events left in the spill file by an earlier run count as buffered.
                accepted: left,
                completed: 0,
                lost_at_close: 0,
                sender_waiting: false,
                flush_waiters: 0,
                blocked: 0,
                closing: false,
                stop: false,
                exited: false,
                unreported_drops: 0,
                last_drop_report: None,
                scratch: Vec::new(),
                sealed: Vec::new(),
                batch_bytes: cfg.batch_bytes,
            }),
            work: Condvar::new(),
            space: Condvar::new(),
            done: Condvar::new(),
            counters: Counters::default(),
            cfg,
            #[cfg(feature = "tls")]
            tls,
        });
        let s2 = shared.clone();
        let thread = std::thread::Builder::new()
            .name("nagare-logger".into())
            .spawn(move || sender::run(s2))?;
        Ok(Inner {
            shared,
            thread: Mutex::new(Some(thread)),
            fork_gen: fork::generation(),
        })
    }
}

struct Core {
    /// The current generation's state (from `Box::into_raw`). It is replaced
    /// only in a forked child, and the replaced one is never freed (it is the
    /// parent's: its locks may have been held by threads that do not exist
    /// in the child), so a `&Inner` read from it lives as long as `&self`.
    /// A plain pointer instead of an `ArcSwap`: every emit reads it, and
    /// `ArcSwap::load` costs two atomic read-modify-writes per call (its
    /// debt slot), a tenth of a `tracing` event through `NagareLayer`.
    inner: AtomicPtr<Inner>,
    cfg: Config,
    refork: Mutex<()>,
}

impl Drop for Core {
    fn drop(&mut self) {
        let p = *self.inner.get_mut();
        // SAFETY: `p` came from `Box::into_raw` and nothing else can reach it
        // any more (`&mut self`).
        let inner = unsafe { Box::from_raw(p) };
        if inner.fork_gen == fork::generation() {
            let _ = close_inner(&inner, self.cfg.close_timeout);
        } else {
            // the parent's, in a forked child: left alone, as on refork
            std::mem::forget(inner);
        }
    }
}

/// The client. Cheap to clone (clones share one buffer and connection); the
/// buffered events are delivered (within `close_timeout`) when the last clone
/// is dropped, or by [`Logger::close`].
#[derive(Clone)]
pub struct Logger(Arc<Core>);

/// The current time, read with clock_gettime(CLOCK_REALTIME) directly:
/// `SystemTime::now().duration_since(UNIX_EPOCH)` adds its checked
/// subtraction to the clock read, which is already the largest single part
/// of emit()'s cost (perf of the tracing bench).
#[inline]
pub(crate) fn now() -> EventTime {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill in.
    if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) } == 0 && ts.tv_sec >= 0 {
        EventTime::new(ts.tv_sec as u32, ts.tv_nsec as u32)
    } else {
        EventTime::now()
    }
}

/// The error callback hears of dropped events at most this often (with the count).
const DROP_REPORT_INTERVAL: Duration = Duration::from_secs(1);

enum Outcome {
    Ok,
    /// `report`: drops to tell the error callback now (0: not yet).
    Dropped {
        report: u64,
    },
}

impl Logger {
    /// Starts the sender thread. Connecting happens in the background: an
    /// unreachable server is not an error here (events wait in the buffer).
    pub fn new(cfg: Config) -> Result<Logger, Error> {
        cfg.validate()?;
        fork::register();
        let inner = Inner::start(cfg.clone())?;
        Ok(Logger(Arc::new(Core {
            inner: AtomicPtr::new(Box::into_raw(Box::new(inner))),
            cfg,
            refork: Mutex::new(()),
        })))
    }

    /// The current generation; after a fork, the child starts fresh: a new
    /// buffer (the parent's events are the parent's), a new connection, and a
    /// spill file named after the child's pid.
    #[inline]
    fn inner(&self) -> &Inner {
        let g = self.current();
        if g.fork_gen == fork::generation() {
            return g;
        }
        self.refork()
    }

    /// `inner` in a forked child: a new generation of the state, once.
    #[cold]
    #[inline(never)]
    fn refork(&self) -> &Inner {
        let _l = self.0.refork.lock().unwrap_or_else(|e| e.into_inner());
        let g = self.current();
        if g.fork_gen == fork::generation() {
            return g;
        }
        let mut cfg = self.0.cfg.clone();
        if let Some(p) = &cfg.spill_path {
            let mut s = p.clone().into_os_string();
            s.push(format!(".{}", std::process::id()));
            cfg.spill_path = Some(s.into());
        }
        match Inner::start(cfg) {
            Ok(new) => {
                // The parent's state is left as it is (never freed): see Core::inner.
                self.0
                    .inner
                    .store(Box::into_raw(Box::new(new)), Ordering::Release);
            }
            Err(e) => {
                if let Some(h) = &self.0.cfg.error_handler {
                    h(&e);
                }
            }
        }
        self.current()
    }

    #[inline]
    fn current(&self) -> &Inner {
        // SAFETY: the pointer is always a live `Box<Inner>` that is freed only
        // when `Core` is dropped, which `&self` keeps from happening.
        unsafe { &*self.0.inner.load(Ordering::Acquire) }
    }

    /// Emits a record (any `Serialize` value that encodes to a map: a struct,
    /// a map, `serde_json::Value::Object`) with the current time.
    pub fn emit<T: Serialize + ?Sized>(&self, tag: &str, record: &T) -> Result<(), Error> {
        self.emit_at(tag, now(), record)
    }

    /// Emits a record with the given time.
    pub fn emit_at<T: Serialize + ?Sized>(
        &self,
        tag: &str,
        time: EventTime,
        record: &T,
    ) -> Result<(), Error> {
        self.emit_with(tag, |out| encode_entry(out, time, record))
    }

    /// Emits a record that is already encoded as a msgpack map.
    pub fn emit_msgpack(&self, tag: &str, time: EventTime, record: &[u8]) -> Result<(), Error> {
        match msgpack::skip_value(record, 0) {
            Ok(n) if n == record.len() => {}
            _ => return Err(Error::Encode("not one complete msgpack value".into())),
        }
        self.emit_with(tag, |out| {
            nagare_forward::encode::write_entry(out, time, record);
            Ok(())
        })
    }

    /// `enc` appends one whole `[EventTime, record]` entry.
    fn emit_with(
        &self,
        tag: &str,
        enc: impl FnOnce(&mut Vec<u8>) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let inner = self.inner();
        let sh = &*inner.shared;
        let outcome = {
            let mut guard = sh.lock();
            let st = &mut *guard;
            if st.closing {
                return Err(Error::Closed);
            }
            let spilling = st.spill.as_ref().is_some_and(|s| !s.is_empty());
            if !spilling {
                let i = st.buf_index(tag);
                let b = &mut st.bufs[i].entries;
                let start = b.len();
                if let Err(e) = enc(b) {
                    b.truncate(start);
                    return Err(e);
                }
                if !matches!(msgpack::is_map(b, start + 11), Ok(true)) {
                    b.truncate(start);
                    return Err(Error::NotAMap);
                }
                let n = b.len() - start;
                let used = st.pending_bytes + st.inflight_bytes;
                if used + n <= sh.cfg.buffer_limit || used == 0 {
                    st.bufs[i].count += 1;
                    st.pending_bytes += n;
                    st.seal_if_full(i);
                    st.accepted += 1;
                    if st.first_pending.is_none() {
                        st.first_pending = Some(Instant::now());
                        if st.sender_waiting {
                            st.sender_waiting = false;
                            sh.work.notify_one();
                        }
                    } else if st.sender_waiting && st.pending_bytes >= sh.cfg.batch_bytes {
                        st.sender_waiting = false;
                        sh.work.notify_one();
                    }
                    return Ok(());
                }
                st.scratch.clear();
                st.scratch.extend_from_slice(&b[start..]);
                b.truncate(start);
            } else {
                st.scratch.clear();
                enc(&mut st.scratch)?;
                if !matches!(msgpack::is_map(&st.scratch, 11), Ok(true)) {
                    return Err(Error::NotAMap);
                }
            }
            self.overflow(sh, guard, tag)?
        };
        match outcome {
            Outcome::Ok => Ok(()),
            Outcome::Dropped { report } => {
                if report > 0 {
                    sh.report(&Error::DroppedEvents { count: report });
                }
                Err(Error::Dropped)
            }
        }
    }

    /// The memory buffer had no room (or the spill file holds older events):
    /// the encoded entry is in `st.scratch`.
    fn overflow(
        &self,
        sh: &Shared,
        mut guard: MutexGuard<'_, State>,
        tag: &str,
    ) -> Result<Outcome, Error> {
        let st = &mut *guard;
        // While the spill file holds events, newer ones queue behind them so
        // the order is kept, whatever the overflow policy.
        let spill_first = st.spill.as_ref().is_some_and(|s| !s.is_empty());
        if let Some(sp) = st.spill.as_mut() {
            if spill_first || sh.cfg.overflow == Overflow::Spill {
                match sp.append(tag, 1, &st.scratch) {
                    Ok(true) => {
                        st.accepted += 1;
                        if st.sender_waiting {
                            st.sender_waiting = false;
                            sh.work.notify_one();
                        }
                        return Ok(Outcome::Ok);
                    }
                    Ok(false) => {}
                    Err(e) => {
                        let err = Error::Spill {
                            path: sp.path().display().to_string(),
                            source: e,
                        };
                        drop(guard);
                        sh.counters.dropped.fetch_add(1, Relaxed);
                        sh.report(&err);
                        return Ok(Outcome::Dropped { report: 0 });
                    }
                }
                return Ok(self.drop_event(sh, guard));
            }
        }
        if sh.cfg.overflow == Overflow::Block {
            let deadline = sh.cfg.block_timeout.map(|d| Instant::now() + d);
            let n = guard.scratch.len();
            guard.blocked += 1;
            loop {
                if guard.closing {
                    guard.blocked -= 1;
                    return Err(Error::Closed);
                }
                let used = guard.memory_used();
                if used + n <= sh.cfg.buffer_limit || used == 0 {
                    let st = &mut *guard;
                    st.blocked -= 1;
                    let scratch = std::mem::take(&mut st.scratch);
                    st.push_pending(tag, 1, &scratch);
                    st.scratch = scratch;
                    st.accepted += 1;
                    if st.sender_waiting {
                        st.sender_waiting = false;
                        sh.work.notify_one();
                    }
                    return Ok(Outcome::Ok);
                }
                // Make sure the sender sends what is pending.
                if guard.sender_waiting {
                    guard.sender_waiting = false;
                    sh.work.notify_one();
                }
                guard = match deadline {
                    None => sh.space.wait(guard).unwrap_or_else(|e| e.into_inner()),
                    Some(d) => {
                        let now = Instant::now();
                        if now >= d {
                            guard.blocked -= 1;
                            return Ok(self.drop_event(sh, guard));
                        }
                        sh.space
                            .wait_timeout(guard, d - now)
                            .unwrap_or_else(|e| e.into_inner())
                            .0
                    }
                };
            }
        }
        Ok(self.drop_event(sh, guard))
    }

    /// Counts a dropped event; the error callback hears of drops at most once
    /// per DROP_REPORT_INTERVAL, with the count (the first one at once).
    fn drop_event(&self, sh: &Shared, mut guard: MutexGuard<'_, State>) -> Outcome {
        guard.unreported_drops += 1;
        let now = Instant::now();
        let due = guard
            .last_drop_report
            .is_none_or(|t| now.duration_since(t) >= DROP_REPORT_INTERVAL);
        let report = if due {
            guard.last_drop_report = Some(now);
            std::mem::take(&mut guard.unreported_drops)
        } else {
            0
        };
        drop(guard);
        sh.counters.dropped.fetch_add(1, Relaxed);
        Outcome::Dropped { report }
    }

    /// Waits until every event emitted before this call was delivered (acked
    /// with `require_ack`), including spilled ones.
    pub fn flush(&self, timeout: Duration) -> Result<(), Error> {
        flush_inner(self.inner(), timeout)
    }

    /// Delivers what is buffered within `timeout`, stops the sender and
    /// refuses further events. Events not delivered in time are written to
    /// the spill file when one is configured (and sent by the next logger
    /// that opens it); otherwise they are lost and the error says how many.
    pub fn close(&self, timeout: Duration) -> Result<(), Error> {
        close_inner(self.inner(), timeout)
    }

    pub fn stats(&self) -> Stats {
        let inner = self.inner();
        let sh = &inner.shared;
        let c = &sh.counters;
        let (buffered, bytes, spilled) = {
            let st = sh.lock();
            (
                st.accepted.saturating_sub(st.completed),
                st.memory_used() as u64,
                st.spill.as_ref().map_or(0, |s| s.written()),
            )
        };
        Stats {
            sent: c.sent.load(Relaxed),
            buffered,
            buffered_bytes: bytes,
            spilled,
            dropped: c.dropped.load(Relaxed),
            reconnects: c.reconnects.load(Relaxed),
            errors: c.errors.load(Relaxed),
        }
    }
}

fn flush_inner(inner: &Inner, timeout: Duration) -> Result<(), Error> {
    let sh = &inner.shared;
    let deadline = Instant::now() + timeout;
    let mut st = sh.lock();
    let target = st.accepted;
    st.flush_waiters += 1;
    let res = loop {
        if st.completed >= target {
            break Ok(());
        }
        if st.exited {
            break Err(Error::Closed);
        }
        if st.sender_waiting {
            st.sender_waiting = false;
            sh.work.notify_one();
        }
        let now = Instant::now();
        if now >= deadline {
            break Err(Error::Timeout {
                remaining: target - st.completed,
            });
        }
        st = sh
            .done
            .wait_timeout(st, (deadline - now).min(Duration::from_millis(50)))
            .unwrap_or_else(|e| e.into_inner())
            .0;
    };
    st.flush_waiters -= 1;
    res
}

fn close_inner(inner: &Inner, timeout: Duration) -> Result<(), Error> {
    let sh = &inner.shared;
    let deadline = Instant::now() + timeout;
    {
        let mut st = sh.lock();
        if st.exited {
            return Ok(());
        }
        st.closing = true;
        sh.work.notify_one();
        sh.space.notify_all();
    }
    let res = flush_inner(inner, timeout);
    let remaining = {
        let mut st = sh.lock();
        st.stop = true;
        sh.work.notify_one();
        // The sender may be inside a connect or write: give it its timeouts.
        let hard = deadline.max(Instant::now())
            + sh.cfg.connect_timeout.max(sh.cfg.write_timeout)
            + Duration::from_secs(1);
        while !st.exited {
            let now = Instant::now();
            if now >= hard {
                break;
            }
            st = sh
                .done
                .wait_timeout(st, hard - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let unreported = std::mem::take(&mut st.unreported_drops);
        (
            st.accepted.saturating_sub(st.completed) + st.lost_at_close,
            unreported,
        )
    };
    let (remaining, unreported) = remaining;
    if unreported > 0 {
        sh.report(&Error::DroppedEvents { count: unreported });
    }
    if let Some(t) = inner
        .thread
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
    {
        if t.is_finished() {
            let _ = t.join();
        }
    }
    match res {
        Ok(()) => Ok(()),
        Err(Error::Timeout { .. }) if remaining == 0 => Ok(()),
        Err(Error::Timeout { .. }) => Err(Error::Timeout { remaining }),
        Err(e) => Err(e),
    }
}

/// Encodes one PackedForward frame `[tag, bin(entries), {"size": count, "chunk"?: id}]`
/// exactly as the logger writes it.
pub fn encode_packed_frame(tag: &str, entries: &[u8], count: u32, chunk: Option<&str>) -> Vec<u8> {
    let (head, tail) = sender::frame_parts(tag, entries.len(), count, chunk, false);
    let mut out = Vec::with_capacity(head.len() + entries.len() + tail.len());
    out.extend_from_slice(&head);
    out.extend_from_slice(entries);
    out.extend_from_slice(&tail);
    out
}

/// Encodes one `[EventTime, record]` entry the way `emit` does (records as
/// msgpack maps, structs with field names).
pub fn encode_entry<T: Serialize + ?Sized>(
    out: &mut Vec<u8>,
    time: EventTime,
    record: &T,
) -> Result<(), Error> {
    let start = out.len();
    out.push(0x92);
    out.extend_from_slice(&time.to_bytes());
    let mut ser = rmp_serde::Serializer::new(&mut *out).with_struct_map();
    if let Err(e) = record.serialize(&mut ser) {
        out.truncate(start);
        return Err(Error::Encode(e.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::same_tag;

    /// `same_tag` agrees with `==` at every length around its word sizes,
    /// with one differing byte at every position.
    #[test]
    fn same_tag_is_equality() {
        for n in 0..40usize {
            let a: Vec<u8> = (0..n as u8).map(|i| b'a' + i % 26).collect();
            assert!(same_tag(&a, &a.clone()), "{n} bytes");
            for i in 0..n {
                let mut b = a.clone();
                b[i] ^= 1;
                assert!(!same_tag(&a, &b), "{n} bytes, byte {i}");
            }
            assert!(!same_tag(&a, &a[..n.saturating_sub(1)]) || n == 0);
            let mut longer = a.clone();
            longer.push(b'x');
            assert!(!same_tag(&a, &longer));
        }
    }
}
