//! The background sender: takes pending events as batches, frames them as
//! PackedForward, and delivers them over one connection (reconnect with
//! backoff, failover, handshake, acks, spill drain).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use nagare_forward::handshake::{decode_ack, ClientHandshake};
use nagare_forward::msgpack::{
    skip_value, write_array_len, write_bin_header, write_map_len, write_str, write_uint,
};
use nagare_forward::ScanError;
use rand::{Rng, SeedableRng};

use crate::conn::Conn;
use crate::{Compress, Error, Overflow, Shared};

/// `[tag, bin header]` and the option map `{"size": count, "chunk"?: id}`
/// around an entries payload of `len` bytes.
/// With `gzip`, the payload is the gzipped entries and the options say
/// `"compressed": "gzip"` (CompressedPackedForward).
pub(crate) fn frame_parts(
    tag: &str,
    len: usize,
    count: u32,
    chunk: Option<&str>,
    gzip: bool,
) -> (Vec<u8>, Vec<u8>) {
    let mut head = Vec::with_capacity(tag.len() + 12);
    write_array_len(&mut head, 3);
    write_str(&mut head, tag.as_bytes());
    write_bin_header(&mut head, len);
    let mut tail = Vec::with_capacity(64);
    write_map_len(&mut tail, 1 + chunk.is_some() as usize + gzip as usize);
    write_str(&mut tail, b"size");
    write_uint(&mut tail, count as u64);
    if let Some(id) = chunk {
        write_str(&mut tail, b"chunk");
        write_str(&mut tail, id.as_bytes());
    }
    if gzip {
        write_str(&mut tail, b"compressed");
        write_str(&mut tail, b"gzip");
    }
    (head, tail)
}

fn gzip(data: &[u8]) -> io::Result<Vec<u8>> {
    let mut enc = flate2::write::GzEncoder::new(
        Vec::with_capacity(data.len() / 4 + 64),
        flate2::Compression::fast(),
    );
    enc.write_all(data)?;
    enc.finish()
}

struct Batch {
    tag: String,
    entries: Vec<u8>,
    /// The gzipped entries when `compress = gzip`.
    gz: Option<Vec<u8>>,
    count: u32,
    head: Vec<u8>,
    tail: Vec<u8>,
    chunk: Option<String>,
    sent_at: Instant,
}

struct Sender {
    sh: Arc<Shared>,
    queue: VecDeque<Batch>,
    /// With acks: the first `written` batches of the queue were written on the
    /// current connection and wait for their ack.
    written: usize,
    conn: Option<Conn>,
    conn_idx: usize,
    ever_connected: bool,
    attempts: u32,
    next_attempt: Instant,
    next_primary: Instant,
    rbuf: Vec<u8>,
    rng: rand::rngs::StdRng,
    hostname: String,
    /// close() was called: retry the servers now and then every CLOSING_RETRY.
    closing: bool,
    /// The last connect round failed and events went to the spill file: new
    /// ones follow them there, and the file is not read back until a server
    /// answers (with overflow = spill and a spill file only).
    unreachable: bool,
}

/// While close() waits, a refused server is retried this often until its deadline.
const CLOSING_RETRY: Duration = Duration::from_millis(100);

pub(crate) fn run(sh: Arc<Shared>) {
    let hostname = sh.cfg.client_hostname.clone().unwrap_or_else(hostname);
    let now = Instant::now();
    let mut s = Sender {
        sh,
        queue: VecDeque::new(),
        written: 0,
        conn: None,
        conn_idx: 0,
        ever_connected: false,
        attempts: 0,
        next_attempt: now,
        next_primary: now,
        rbuf: Vec::new(),
        rng: rand::rngs::StdRng::from_entropy(),
        hostname,
        closing: false,
        unreachable: false,
    };
    s.run();
}

fn hostname() -> String {
    let mut b = [0u8; 256];
    // SAFETY: the buffer is valid for its length.
    let r = unsafe { libc::gethostname(b.as_mut_ptr().cast(), b.len()) };
    if r != 0 {
        return "localhost".into();
    }
    let n = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..n]).into_owned()
}

impl Sender {
    fn run(&mut self) {
        let cfg = self.sh.cfg.clone();
        loop {
            let mut taken: Vec<(String, Vec<u8>, u32)> = Vec::new();
            let mut spill_err = None;
            {
                let mut st = self.sh.lock();
                loop {
                    if st.stop {
                        drop(st);
                        self.shutdown();
                        return;
                    }
                    let now = Instant::now();
                    if st.closing && !self.closing {
                        // reconnect now, not when the current backoff delay ends
                        self.closing = true;
                        self.next_attempt = self.next_attempt.min(now);
                    }
                    // spilled records reach the disk within SYNC_INTERVAL
                    if let Some(sp) = st.spill.as_mut() {
                        if sp.sync_due().is_some_and(|t| now >= t) {
                            if let Err(e) = sp.persist() {
                                spill_err = Some(Error::Spill {
                                    path: sp.path().display().to_string(),
                                    source: e,
                                });
                            }
                        }
                    }
                    let mut from_spill = false;
                    if st.pending_bytes == 0
                        && self.queue.is_empty()
                        && !self.unreachable
                        && spill_err.is_none()
                        && st.spill.as_ref().is_some_and(|s| !s.is_empty())
                    {
                        let max = cfg.batch_bytes.min(cfg.buffer_limit);
                        let sp = st.spill.as_mut().expect("checked");
                        match sp.read(max) {
                            Ok(recs) => {
                                for r in recs {
                                    st.push_pending(&r.tag, r.count, &r.entries);
                                }
                                from_spill = true;
                            }
                            Err(e) => {
                                spill_err = Some(Error::Spill {
                                    path: sp.path().display().to_string(),
                                    source: e,
                                })
                            }
                        }
                    }
                    let age = st.first_pending.map(|t| now.saturating_duration_since(t));
                    let pending_due = st.pending_bytes > 0
                        && (from_spill
                            || st.pending_bytes >= cfg.batch_bytes
                            || st.flush_waiters > 0
                            || st.closing
                            || age.is_none_or(|a| a >= cfg.flush_interval));
                    let io_due = (!self.queue.is_empty() || self.unreachable)
                        && (self.conn.is_some() || now >= self.next_attempt);
                    if pending_due {
                        st.inflight_bytes += st.pending_bytes;
                        st.take_pending(&mut taken);
                        st.first_pending = None;
                    }
                    if pending_due || io_due || spill_err.is_some() {
                        break;
                    }
                    let mut wait = Duration::from_secs(1);
                    if let Some(a) = age {
                        wait = wait.min(cfg.flush_interval.saturating_sub(a));
                    }
                    if !self.queue.is_empty() || self.unreachable {
                        wait = wait.min(self.next_attempt.saturating_duration_since(now));
                    }
                    if let Some(t) = st.spill.as_ref().and_then(|s| s.sync_due()) {
                        wait = wait.min(t.saturating_duration_since(now));
                    }
                    st.sender_waiting = true;
                    st = self
                        .sh
                        .work
                        .wait_timeout(st, wait.max(Duration::from_micros(100)))
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                    st.sender_waiting = false;
                }
            }
            if let Some(e) = spill_err.take() {
                self.sh.report(&e);
                std::thread::sleep(Duration::from_millis(200));
            }
            for (tag, entries, count) in taken {
                let chunk = cfg.require_ack.then(|| self.chunk_id());
                let gz = match cfg.compress {
                    Compress::None => None,
                    Compress::Gzip => Some(gzip(&entries).expect("gzip into memory")),
                };
                let len = gz.as_ref().map_or(entries.len(), Vec::len);
                let (head, tail) = frame_parts(&tag, len, count, chunk.as_deref(), gz.is_some());
                self.queue.push_back(Batch {
                    tag,
                    entries,
                    gz,
                    count,
                    head,
                    tail,
                    chunk,
                    sent_at: Instant::now(),
                });
            }
            self.deliver();
        }
    }

    fn chunk_id(&mut self) -> String {
        let b: [u8; 16] = self.rng.gen();
        base64::engine::general_purpose::STANDARD.encode(b)
    }

    fn backoff(&mut self) -> Duration {
        let cfg = &self.sh.cfg;
        let exp = self.attempts.saturating_sub(1).min(30);
        let d = cfg
            .backoff_base
            .saturating_mul(1u32 << exp)
            .min(cfg.backoff_max);
        // "Equal jitter": half fixed, half random, so delays still grow.
        let half = d / 2;
        let d = half + half.mul_f64(self.rng.gen::<f64>());
        if self.closing {
            d.min(CLOSING_RETRY)
        } else {
            d
        }
    }

    fn server_name(&self, i: usize) -> String {
        self.sh.cfg.servers[i].to_string()
    }

    fn deliver(&mut self) {
        if self.queue.is_empty() && !self.unreachable {
            return;
        }
        let now = Instant::now();
        if self.conn.is_none() {
            if now < self.next_attempt {
                return;
            }
            self.connect();
            if self.conn.is_none() {
                return;
            }
        } else if self.conn_idx != 0 && now >= self.next_primary {
            self.try_primary();
        }
        if self.conn.as_mut().is_some_and(|c| c.peer_closed()) {
            self.disconnect("closed by the server".into());
            return;
        }
        let ack = self.sh.cfg.require_ack;
        while self.written < self.queue.len() {
            let conn = self.conn.as_mut().expect("connected");
            let b = &mut self.queue[self.written];
            if let Err(e) = conn
                .write_parts(&[&b.head, b.gz.as_ref().unwrap_or(&b.entries), &b.tail])
                .and_then(|()| conn.flush_tls())
            {
                self.disconnect(format!("write failed: {e}"));
                return;
            }
            if ack {
                b.sent_at = Instant::now();
                self.written += 1;
            } else {
                let b = self.queue.pop_front().expect("non-empty");
                self.attempts = 0;
                self.sh.complete(b.count as u64, b.entries.len());
            }
        }
        if ack {
            self.read_acks();
        }
    }

    fn read_acks(&mut self) {
        let timeout = self.sh.cfg.ack_timeout;
        let mut buf = [0u8; 4096];
        while self.written > 0 {
            // Take every complete ack in the buffer.
            loop {
                match skip_value(&self.rbuf, 0) {
                    Ok(end) => {
                        let v: Vec<u8> = self.rbuf.drain(..end).collect();
                        if let Ok(id) = decode_ack(&v) {
                            let pos = self.queue.iter().take(self.written).position(|b| {
                                b.chunk.as_deref().map(str::as_bytes) == Some(&id[..])
                            });
                            if let Some(p) = pos {
                                let b = self.queue.remove(p).expect("in range");
                                self.written -= 1;
                                self.attempts = 0;
                                self.sh.complete(b.count as u64, b.entries.len());
                            }
                        }
                    }
                    Err(ScanError::Incomplete(_)) => break,
                    Err(ScanError::Invalid(m)) => {
                        self.disconnect(format!("malformed ack: {m}"));
                        return;
                    }
                }
            }
            if self.written == 0 {
                return;
            }
            let deadline = self.queue[0].sent_at + timeout;
            let now = Instant::now();
            if now >= deadline {
                let e = Error::AckTimeout {
                    server: self.server_name(self.conn_idx),
                    timeout,
                    frames: self.written,
                };
                self.sh.report(&e);
                self.drop_conn();
                return;
            }
            if self.sh.lock().stop {
                return;
            }
            let conn = self.conn.as_mut().expect("connected");
            let wait = (deadline - now).min(Duration::from_millis(200));
            if let Err(e) = conn.set_read_timeout(Some(wait.max(Duration::from_millis(1)))) {
                self.disconnect(format!("socket: {e}"));
                return;
            }
            match conn.read(&mut buf) {
                Ok(0) => {
                    self.disconnect("closed by the server while acks were pending".into());
                    return;
                }
                Ok(n) => self.rbuf.extend_from_slice(&buf[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => {
                    self.disconnect(format!("read failed: {e}"));
                    return;
                }
            }
        }
    }

    /// Tries every server from the primary on; backs off when all failed.
    fn connect(&mut self) {
        for i in 0..self.sh.cfg.servers.len() {
            match self.open(i) {
                Ok(c) => {
                    self.install(c, i);
                    return;
                }
                Err(e) => self.sh.report(&e),
            }
        }
        self.attempts += 1;
        self.next_attempt = Instant::now() + self.backoff();
        self.spill_while_unreachable();
    }

    /// No server answered: with overflow = spill and a spill file, what
    /// waits in memory goes to the file, in front of what it holds (it is
    /// older), and emit() sends new events after it while the file is not
    /// empty. A kill -9 during the outage then loses at most what was
    /// appended in the last `spill::SYNC_INTERVAL`.
    fn spill_while_unreachable(&mut self) {
        let sh = self.sh.clone();
        if sh.cfg.overflow != Overflow::Spill {
            return;
        }
        let mut st = sh.lock();
        if st.spill.is_none() {
            return;
        }
        self.unreachable = true;
        // Not connected: nothing of the queue is waiting for an ack.
        let mut left: Vec<(String, u32, Vec<u8>)> = self
            .queue
            .drain(..)
            .map(|b| (b.tag, b.count, b.entries))
            .collect();
        let queued_bytes: usize = left.iter().map(|l| l.2.len()).sum();
        let mut pending = Vec::new();
        st.take_pending(&mut pending);
        st.first_pending = None;
        left.extend(pending.into_iter().map(|(t, e, c)| (t, c, e)));
        if left.is_empty() {
            return;
        }
        st.inflight_bytes -= queued_bytes;
        let sp = st.spill.as_mut().expect("checked");
        if let Err(e) = sp.prepend_and_persist(&left) {
            // Keep them in memory and go on as without a spill file.
            let err = Error::Spill {
                path: sp.path().display().to_string(),
                source: e,
            };
            for (tag, count, entries) in &left {
                st.push_pending(tag, *count, entries);
            }
            self.unreachable = false;
            drop(st);
            sh.report(&err);
            return;
        }
        if st.blocked > 0 {
            sh.space.notify_all();
        }
    }

    fn install(&mut self, c: Conn, i: usize) {
        if self.ever_connected {
            self.sh.counters.reconnects.fetch_add(1, Relaxed);
        }
        self.ever_connected = true;
        self.unreachable = false;
        self.conn = Some(c);
        self.conn_idx = i;
        self.written = 0;
        self.rbuf.clear();
        self.next_primary = Instant::now() + self.sh.cfg.primary_retry;
    }

    /// While on a secondary: switch back when the primary answers again.
    fn try_primary(&mut self) {
        self.next_primary = Instant::now() + self.sh.cfg.primary_retry;
        if let Ok(c) = self.open(0) {
            // Unacked frames are resent on the primary (at-least-once).
            self.install(c, 0);
        }
    }

    fn open(&mut self, i: usize) -> Result<Conn, Error> {
        let cfg = &self.sh.cfg;
        let ep = &cfg.servers[i];
        #[cfg(feature = "tls")]
        let c = match &self.sh.tls {
            Some(t) => Conn::connect_tls(
                ep,
                cfg.connect_timeout,
                crate::conn::TlsParams {
                    config: t,
                    server_name: cfg.tls.as_ref().and_then(|t| t.server_name.as_deref()),
                },
            ),
            None => Conn::connect(ep, cfg.connect_timeout),
        };
        #[cfg(not(feature = "tls"))]
        let c = Conn::connect(ep, cfg.connect_timeout);
        let mut c = c.map_err(|e| Error::Connect {
            server: ep.to_string(),
            reason: e.to_string(),
        })?;
        c.set_timeouts(Some(cfg.connect_timeout), Some(cfg.write_timeout))
            .map_err(|e| Error::Connect {
                server: ep.to_string(),
                reason: e.to_string(),
            })?;
        if let Some(key) = cfg.shared_key.clone() {
            self.rbuf.clear();
            let hs = ClientHandshake::new(
                key.as_bytes(),
                self.hostname.as_bytes(),
                cfg.username.as_bytes(),
                cfg.password.as_bytes(),
            );
            handshake(&mut c, &mut self.rbuf, hs).map_err(|reason| Error::Handshake {
                server: ep.to_string(),
                reason,
            })?;
        }
        Ok(c)
    }

    fn drop_conn(&mut self) {
        self.conn = None;
        self.written = 0;
        self.rbuf.clear();
        self.attempts += 1;
        // The first retry after losing a connection is immediate.
        self.next_attempt = if self.attempts <= 1 {
            Instant::now()
        } else {
            Instant::now() + self.backoff()
        };
    }

    fn disconnect(&mut self, reason: String) {
        let e = Error::Disconnected {
            server: self.server_name(self.conn_idx),
            reason,
        };
        self.sh.report(&e);
        self.drop_conn();
    }

    /// Called once `close` gave up or finished: whatever is left goes to the
    /// spill file (before what the file already holds, keeping the order).
    fn shutdown(&mut self) {
        let mut st = self.sh.lock();
        let mut left: Vec<(String, u32, Vec<u8>)> = self
            .queue
            .drain(..)
            .map(|b| (b.tag, b.count, b.entries))
            .collect();
        let mut pending = Vec::new();
        st.take_pending(&mut pending);
        left.extend(pending.into_iter().map(|(t, e, c)| (t, c, e)));
        let mut err = None;
        if let Some(sp) = st.spill.as_mut() {
            let r = if left.is_empty() {
                sp.persist()
            } else {
                sp.prepend_and_persist(&left)
            };
            match r {
                Ok(()) => {}
                Err(e) => {
                    err = Some(Error::Spill {
                        path: sp.path().display().to_string(),
                        source: e,
                    })
                }
            }
        } else {
            // No spill file: what close() could not deliver is gone. Count it
            // as dropped (and no longer buffered), so the counters add up.
            let n: u64 = left.iter().map(|l| l.1 as u64).sum();
            if n > 0 {
                st.completed += n;
                st.lost_at_close = n;
                self.sh.counters.dropped.fetch_add(n, Relaxed);
                err = Some(Error::Timeout { remaining: n });
            }
        }
        st.exited = true;
        self.sh.done.notify_all();
        self.sh.space.notify_all();
        drop(st);
        if let Some(e) = err {
            self.sh.report(&e);
        }
        if let Some(mut c) = self.conn.take() {
            let _ = c.flush();
        }
    }
}

fn read_value(c: &mut Conn, rbuf: &mut Vec<u8>) -> Result<Vec<u8>, String> {
    let mut buf = [0u8; 1024];
    loop {
        match skip_value(rbuf, 0) {
            Ok(end) => return Ok(rbuf.drain(..end).collect()),
            Err(ScanError::Incomplete(_)) => {}
            Err(ScanError::Invalid(m)) => return Err(m.to_string()),
        }
        match c.read(&mut buf) {
            Ok(0) => return Err("connection closed during the handshake".into()),
            Ok(n) => rbuf.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("read: {e}")),
        }
    }
}

/// HELO → PING → PONG, verifying the server's digest (the protocol is
/// nagare_forward's `ClientHandshake`; this moves its bytes).
pub(crate) fn handshake(
    c: &mut Conn,
    rbuf: &mut Vec<u8>,
    mut hs: ClientHandshake,
) -> Result<(), String> {
    let ping = hs.ping(&read_value(c, rbuf)?).map_err(|e| e.to_string())?;
    c.write_all(&ping)
        .and_then(|()| c.flush())
        .map_err(|e| format!("write: {e}"))?;
    hs.check_pong(&read_value(c, rbuf)?)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nagare_forward::handshake::{digest_eq, shared_key_digest, Helo, Pong};

    fn h(v: &serde_json::Value) -> Vec<u8> {
        hex::decode(v.as_str().unwrap()).unwrap()
    }

    /// The handshake vectors: PING bytes and digests from a HELO, and the
    /// server's PONG digest as the client verifies it.
    #[test]
    fn handshake_vectors() {
        let p = concat!(env!("CARGO_MANIFEST_DIR"), "/../vectors/vectors.json");
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
        let list = v["handshake"].as_array().unwrap();
        assert!(!list.is_empty());
        for c in list {
            let s = |k: &str| c[k].as_str().unwrap().as_bytes().to_vec();
            let helo = Helo::decode(&h(&c["helo_hex"])).unwrap();
            assert_eq!(helo.nonce, h(&c["nonce_hex"]));
            assert_eq!(helo.auth, h(&c["auth_salt_hex"]));
            let salt = h(&c["shared_key_salt_hex"]);
            let ping = ClientHandshake::new(
                &s("shared_key"),
                &s("client_hostname"),
                &s("username"),
                &s("password"),
            )
            .with_salt(&salt)
            .ping_for(&helo);
            assert_eq!(ping.shared_key_digest, s("ping_digest"));
            assert_eq!(ping.password_digest, s("password_digest"));
            let mut out = Vec::new();
            ping.encode(&mut out);
            assert_eq!(hex::encode(out), c["ping_hex"].as_str().unwrap());
            let pong = Pong::decode(&h(&c["pong_hex"])).unwrap();
            assert!(pong.auth_ok);
            assert_eq!(pong.shared_key_digest, s("pong_digest"));
            let want = shared_key_digest(&salt, &pong.hostname, &helo.nonce, &s("shared_key"));
            assert!(digest_eq(want.as_bytes(), &pong.shared_key_digest));
        }
    }

    #[test]
    fn frame_parts_match_the_codec() {
        let entries = [0x92, 0xd7, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0x80];
        let mut want = Vec::new();
        nagare_forward::encode_packed_forward(
            &mut want,
            "a.b",
            &entries,
            1,
            Some(b"id"),
            nagare_forward::Compression::None,
        )
        .unwrap();
        assert_eq!(
            crate::encode_packed_frame("a.b", &entries, 1, Some("id")),
            want
        );
    }
}
