//! scribe-bench: a fast Scribe sender and sink for benches/scribe.sh.
//!
//! `scribe-bench --sut-port A --sink-port B --size S --per-call N --duration D`
//! listens on B as a Scribe server (answers OK), sends Log calls of N
//! messages of S bytes to A for D on `--connections` connections (a call
//! answered TRY_LATER is sent again), waits until the sink got everything
//! it sent (or 30 s passed), and prints one JSON line: messages/s, Mbps,
//! lost and duplicated. Each message starts with its sequence number (16 hex
//! digits: connection << 40 | n), so the sink finds what is missing or twice.
//!
//! `scribe-bench proxy --listen A --to B` is the proxy floor: the least any
//! Scribe relay must do (see `proxy`).
//!
//! The Thrift framing is written out here (a few lines): nagare's codec is in
//! the daemon crate, which this crate must not depend on.

use std::collections::VecDeque;
use std::io::{BufReader, IoSlice, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;

#[derive(Parser)]
struct Args {
    #[arg(long)]
    sut_port: u16,
    #[arg(long)]
    sink_port: u16,
    /// Bytes per message.
    #[arg(long, default_value_t = 100)]
    size: usize,
    /// Messages per Log call.
    #[arg(long, default_value_t = 200)]
    per_call: usize,
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    duration: Duration,
    #[arg(long, default_value_t = 1)]
    connections: u64,
}

/// Which sequence numbers the sink got: a bit per message, per connection.
#[derive(Default)]
struct Seen {
    bits: Vec<Vec<u64>>,
    received: u64,
    duplicated: u64,
}

impl Seen {
    fn add(&mut self, seq: u64) {
        let (conn, n) = ((seq >> 40) as usize, seq & ((1 << 40) - 1));
        if self.bits.len() <= conn {
            self.bits.resize_with(conn + 1, Vec::new);
        }
        let words = &mut self.bits[conn];
        let (w, b) = ((n / 64) as usize, n % 64);
        if words.len() <= w {
            words.resize(w + 1, 0);
        }
        if words[w] & (1 << b) != 0 {
            self.duplicated += 1;
        } else {
            words[w] |= 1 << b;
            self.received += 1;
        }
    }
}

fn put_str(b: &mut Vec<u8>, s: &[u8]) {
    b.extend_from_slice(&(s.len() as i32).to_be_bytes());
    b.extend_from_slice(s);
}

/// A framed message header: strict binary protocol, `name`, type, seqid.
fn header(b: &mut Vec<u8>, kind: u8, seqid: i32) {
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&(0x8001_0000u32 | kind as u32).to_be_bytes());
    put_str(b, b"Log");
    b.extend_from_slice(&seqid.to_be_bytes());
}

fn close_frame(b: &mut [u8]) {
    let n = (b.len() - 4) as i32;
    b[..4].copy_from_slice(&n.to_be_bytes());
}

fn read_frame(r: &mut impl Read, buf: &mut Vec<u8>) -> std::io::Result<bool> {
    let mut head = [0u8; 4];
    match r.read_exact(&mut head) {
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(false),
        r => r?,
    }
    buf.resize(i32::from_be_bytes(head).max(0) as usize, 0);
    r.read_exact(buf)?;
    Ok(true)
}

struct Cursor<'a>(&'a [u8], usize);

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> anyhow::Result<&[u8]> {
        let s = self.0.get(self.1..self.1 + n).context("short frame")?;
        self.1 += n;
        Ok(s)
    }
    fn i32(&mut self) -> anyhow::Result<i32> {
        Ok(i32::from_be_bytes(self.take(4)?.try_into()?))
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// `n` as 16 lower-case hex digits (the sender writes one per message; a
/// table lookup instead of `write!` keeps the load generator cheap).
fn put_hex(out: &mut [u8], n: u64) {
    for (i, b) in out.iter_mut().enumerate() {
        *b = HEX[(n >> (60 - 4 * i) & 0xf) as usize];
    }
}

fn parse_hex(s: &[u8]) -> anyhow::Result<u64> {
    s.iter().try_fold(0u64, |n, &b| {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            _ => bail!(
                "not a hex sequence number: {:?}",
                String::from_utf8_lossy(s)
            ),
        };
        Ok(n << 4 | d as u64)
    })
}

/// A strict-protocol Log call's seqid and its LogEntry list's length,
/// with the cursor at the list's first element.
fn call_list(f: &[u8]) -> anyhow::Result<(Cursor<'_>, i32, u32)> {
    let mut c = Cursor(f, 0);
    c.i32()?;
    let n = c.i32()? as usize;
    c.take(n)?;
    let seqid = c.i32()?;
    if c.take(4)? != [15, 0, 1, 12] {
        bail!("not a Log call's list");
    }
    let count = c.i32()? as u32;
    Ok((c, seqid, count))
}

/// Writes the answer OK to the call `seqid`; `reply` is a reused buffer.
fn write_ok(w: &mut impl Write, reply: &mut Vec<u8>, seqid: i32) -> std::io::Result<()> {
    reply.clear();
    header(reply, 2, seqid);
    reply.extend_from_slice(&[8, 0, 0, 0, 0, 0, 0, 0]);
    close_frame(reply);
    w.write_all(reply)
}

/// The result code of a Log answer: its last field (I32, id 0), then STOP.
fn answer_code(answer: &[u8]) -> anyhow::Result<i32> {
    let n = answer.len();
    Ok(i32::from_be_bytes(
        answer[n.saturating_sub(5)..n.saturating_sub(1)].try_into()?,
    ))
}

/// The sequence numbers of a Log call's messages, and its seqid.
fn decode_call(f: &[u8], seqs: &mut Vec<u64>) -> anyhow::Result<i32> {
    let (mut c, seqid, count) = call_list(f)?;
    for _ in 0..count {
        loop {
            let t = c.take(1)?[0];
            if t == 0 {
                break;
            }
            let id = c.take(2)?[1];
            if t != 11 {
                bail!("field type {t}");
            }
            let n = c.i32()? as usize;
            let s = c.take(n)?;
            if id == 2 {
                seqs.push(parse_hex(s.get(..16).context("short message")?)?);
            }
        }
    }
    Ok(seqid)
}

fn sink_conn(c: TcpStream, seen: &Mutex<Seen>) -> anyhow::Result<()> {
    let mut w = c.try_clone()?;
    let mut r = BufReader::with_capacity(1 << 20, c);
    let (mut frame, mut seqs, mut reply) = (Vec::new(), Vec::new(), Vec::new());
    while read_frame(&mut r, &mut frame)? {
        seqs.clear();
        let seqid = decode_call(&frame, &mut seqs)?;
        {
            let mut s = seen.lock().expect("seen");
            for &q in &seqs {
                s.add(q);
            }
        }
        write_ok(&mut w, &mut reply, seqid)?;
    }
    Ok(())
}

/// Sends calls until `stop`; returns the messages answered OK and the TRY_LATERs.
fn send(args: &Args, conn: u64, stop: &AtomicBool) -> anyhow::Result<(u64, u64)> {
    let mut c = TcpStream::connect(("127.0.0.1", args.sut_port))
        .with_context(|| format!("connecting to the SUT on {}", args.sut_port))?;
    c.set_nodelay(true)?;
    let mut r = BufReader::new(c.try_clone()?);
    let pad = vec![b'x'; args.size.saturating_sub(16)];
    let (mut sent, mut try_later, mut seqid) = (0u64, 0u64, 0i32);
    let mut answer = Vec::new();
    // The call is built once; each call then only gets its seqid and the
    // messages' sequence numbers written in place (where `hex_at` says).
    let mut call = Vec::new();
    header(&mut call, 1, 0);
    let seqid_at = call.len() - 4;
    call.extend_from_slice(&[15, 0, 1, 12]);
    call.extend_from_slice(&(args.per_call as i32).to_be_bytes());
    let mut hex_at = Vec::with_capacity(args.per_call);
    for _ in 0..args.per_call {
        call.extend_from_slice(&[11, 0, 1]);
        put_str(&mut call, b"bench");
        call.extend_from_slice(&[11, 0, 2]);
        call.extend_from_slice(&((16 + pad.len()) as i32).to_be_bytes());
        hex_at.push(call.len());
        call.extend_from_slice(&[b'0'; 16]);
        call.extend_from_slice(&pad);
        call.push(0);
    }
    call.push(0);
    close_frame(&mut call);
    while !stop.load(Relaxed) {
        call[seqid_at..seqid_at + 4].copy_from_slice(&seqid.to_be_bytes());
        for (i, &at) in hex_at.iter().enumerate() {
            put_hex(&mut call[at..at + 16], conn << 40 | (sent + i as u64));
        }
        loop {
            c.write_all(&call)?;
            if !read_frame(&mut r, &mut answer)? {
                bail!("the SUT closed the connection");
            }
            if answer_code(&answer)? == 0 {
                break;
            }
            try_later += 1;
            std::thread::sleep(Duration::from_millis(5));
        }
        sent += args.per_call as u64;
        seqid = seqid.wrapping_add(1);
    }
    Ok((sent, try_later))
}

/// The proxy floor's options.
#[derive(Parser)]
struct ProxyArgs {
    /// Port of the Scribe server it is (the relay's input).
    #[arg(long)]
    listen: u16,
    /// Port of the downstream Scribe server (the relay's output).
    #[arg(long)]
    to: u16,
    /// Connections to the downstream server, each with one call in flight
    /// (as nagare's scribe output with `flush_thread_count` workers).
    #[arg(long, default_value_t = 4)]
    downstream: usize,
    /// Calls waiting for the downstream are merged into one call of up to
    /// this many bytes (as nagare's chunks, 512 KiB); 0 sends each call on
    /// its own.
    #[arg(long, default_value_t = 512 << 10)]
    call_bytes: usize,
    /// A downstream call goes when the oldest queued call has waited this
    /// long, full or not (as nagare's `flush_interval` in
    /// benches/scribe-relay.toml).
    #[arg(long, default_value_t = 100)]
    flush_ms: u64,
    /// Bytes of calls held at most; a full queue makes the next call wait
    /// (as nagare's `total_limit_size`).
    #[arg(long, default_value_t = 8 << 20)]
    queue_bytes: usize,
}

/// A Log call taken from upstream: its frame's payload and where its
/// LogEntry list's elements are in it.
struct Call {
    frame: Vec<u8>,
    entries: Range<usize>,
    count: u32,
    /// When it was queued.
    at: Instant,
}

/// Finds a strict-protocol Log call's seqid, its list's elements and their
/// count, without reading a single message.
fn split_call(f: &[u8]) -> anyhow::Result<(i32, Range<usize>, u32)> {
    let (c, seqid, count) = call_list(f)?;
    if f.last() != Some(&0) {
        bail!("a Log call without its STOP");
    }
    Ok((seqid, c.1..f.len() - 1, count))
}

/// The calls between the upstream connections and the downstream ones.
#[derive(Default)]
struct Queue {
    calls: Mutex<(VecDeque<Call>, usize)>,
    ready: Condvar,
    room: Condvar,
    /// Frame buffers the downstream is done with, for the next reads.
    free: Mutex<Vec<Vec<u8>>>,
}

/// One upstream connection: reads each call, queues it, answers OK.
fn proxy_in(c: TcpStream, q: &Queue, limit: usize, call_bytes: usize) -> anyhow::Result<()> {
    c.set_nodelay(true)?;
    let mut w = c.try_clone()?;
    let mut r = BufReader::with_capacity(1 << 20, c);
    let mut reply = Vec::new();
    loop {
        let mut frame = q.free.lock().expect("free").pop().unwrap_or_default();
        if !read_frame(&mut r, &mut frame)? {
            return Ok(());
        }
        let (seqid, entries, count) = split_call(&frame)?;
        let wake = {
            let mut calls = q.calls.lock().expect("queue");
            while calls.1 > 0 && calls.1 + frame.len() > limit {
                calls = q.room.wait(calls).expect("queue");
            }
            // A downstream worker is woken for a first call (to time it)
            // and for a full call, not for every call.
            let (was_empty, was_short) = (calls.0.is_empty(), calls.1 < call_bytes);
            calls.1 += frame.len();
            let wake = was_empty || (was_short && calls.1 >= call_bytes);
            calls.0.push_back(Call {
                frame,
                entries,
                count,
                at: Instant::now(),
            });
            wake
        };
        if wake {
            q.ready.notify_one();
        }
        write_ok(&mut w, &mut reply, seqid)?;
    }
}

/// When a downstream call goes: as a relay's chunk, when the queued calls
/// fill one or the oldest has waited `flush`.
#[derive(Clone, Copy)]
struct Batching {
    call_bytes: usize,
    flush: Duration,
}

/// Takes the queued calls that fit in one downstream call (at least one),
/// once they fill it or the oldest has waited long enough.
fn take_calls(q: &Queue, b: Batching, batch: &mut Vec<Call>) {
    let mut calls = q.calls.lock().expect("queue");
    loop {
        let wait = match calls.0.front() {
            Some(_) if calls.1 >= b.call_bytes => break,
            Some(c) => b.flush.saturating_sub(c.at.elapsed()),
            None => b.flush,
        };
        if wait.is_zero() {
            break;
        }
        calls = q.ready.wait_timeout(calls, wait).expect("queue").0;
    }
    let mut bytes = 0;
    while let Some(c) = calls.0.front() {
        let n = c.entries.len();
        if !batch.is_empty() && (bytes + n > b.call_bytes || batch.len() >= 512) {
            break;
        }
        bytes += n;
        calls.1 -= c.frame.len();
        batch.push(calls.0.pop_front().expect("front"));
    }
    q.room.notify_all();
}

/// One downstream connection: sends the queued calls' entries, merged into
/// one call with a single vectored write (no copy), and waits for the answer.
fn proxy_out(port: u16, q: &Queue, b: Batching) -> anyhow::Result<()> {
    let mut batch = Vec::new();
    take_calls(q, b, &mut batch);
    let mut c = TcpStream::connect(("127.0.0.1", port))
        .with_context(|| format!("connecting to the downstream on {port}"))?;
    c.set_nodelay(true)?;
    let mut r = BufReader::new(c.try_clone()?);
    let (mut head, mut answer, mut seqid) = (Vec::new(), Vec::new(), 0i32);
    loop {
        head.clear();
        header(&mut head, 1, seqid);
        head.extend_from_slice(&[15, 0, 1, 12]);
        let count: u32 = batch.iter().map(|b| b.count).sum();
        head.extend_from_slice(&count.to_be_bytes());
        let body: usize = batch.iter().map(|b| b.entries.len()).sum();
        let n = (head.len() - 4 + body + 1) as i32;
        head[..4].copy_from_slice(&n.to_be_bytes());
        let mut iov = Vec::with_capacity(batch.len() + 2);
        iov.push(IoSlice::new(&head));
        iov.extend(
            batch
                .iter()
                .map(|b| IoSlice::new(&b.frame[b.entries.clone()])),
        );
        iov.push(IoSlice::new(&[0]));
        write_all_vectored(&mut c, &mut iov)?;
        if !read_frame(&mut r, &mut answer)? {
            bail!("the downstream closed the connection");
        }
        if answer_code(&answer)? != 0 {
            bail!("the downstream did not answer OK");
        }
        seqid = seqid.wrapping_add(1);
        q.free
            .lock()
            .expect("free")
            .extend(batch.drain(..).map(|b| b.frame));
        take_calls(q, b, &mut batch);
    }
}

fn write_all_vectored(w: &mut impl Write, mut iov: &mut [IoSlice<'_>]) -> std::io::Result<()> {
    while !iov.is_empty() {
        match w.write_vectored(iov)? {
            0 => return Err(std::io::ErrorKind::WriteZero.into()),
            n => IoSlice::advance_slices(&mut iov, n),
        }
    }
    Ok(())
}

/// The proxy floor: the least any Scribe relay must do. It reads each call
/// and answers it OK once queued (one read and one write per call, as the
/// relay's input), and sends the queued calls' entries unchanged to the
/// downstream server on `--downstream` connections, one call in flight on
/// each, merging what is queued into one call (as a relay's chunk: up to
/// `--call-bytes`, or what came within `--flush-ms`) without decoding a
/// message. Runs until killed.
fn proxy(args: ProxyArgs) -> anyhow::Result<()> {
    let listener = TcpListener::bind(("127.0.0.1", args.listen))
        .with_context(|| format!("listen port {}", args.listen))?;
    let q = Arc::new(Queue::default());
    let b = Batching {
        call_bytes: args.call_bytes,
        flush: Duration::from_millis(args.flush_ms),
    };
    for _ in 0..args.downstream {
        let (q, to) = (q.clone(), args.to);
        std::thread::spawn(move || {
            if let Err(e) = proxy_out(to, &q, b) {
                eprintln!("proxy downstream: {e:#}");
                std::process::exit(1);
            }
        });
    }
    for c in listener.incoming() {
        let (q, limit) = (q.clone(), args.queue_bytes);
        let c = c?;
        std::thread::spawn(move || {
            if let Err(e) = proxy_in(c, &q, limit, b.call_bytes) {
                eprintln!("proxy upstream: {e:#}");
            }
        });
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    if std::env::args().nth(1).as_deref() == Some("proxy") {
        return proxy(ProxyArgs::parse_from(std::env::args().skip(1)));
    }
    let args = Arc::new(Args::parse());
    if args.size < 16 {
        bail!("--size must be at least 16 (the sequence number)");
    }
    let seen = Arc::new(Mutex::new(Seen::default()));
    let listener = TcpListener::bind(("127.0.0.1", args.sink_port))
        .with_context(|| format!("sink port {}", args.sink_port))?;
    {
        let seen = seen.clone();
        std::thread::spawn(move || {
            for c in listener.incoming().flatten() {
                let seen = seen.clone();
                std::thread::spawn(move || {
                    if let Err(e) = sink_conn(c, &seen) {
                        eprintln!("sink connection: {e:#}");
                    }
                });
            }
        });
    }
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let senders: Vec<_> = (0..args.connections)
        .map(|i| {
            let (args, stop) = (args.clone(), stop.clone());
            std::thread::spawn(move || send(&args, i, &stop))
        })
        .collect();
    std::thread::sleep(args.duration);
    stop.store(true, Relaxed);
    let (mut sent, mut try_later) = (0, 0);
    for s in senders {
        let (n, t) = s.join().expect("sender thread")?;
        sent += n;
        try_later += t;
    }
    let seconds = start.elapsed().as_secs_f64();
    let drained = Instant::now();
    let received = AtomicU64::new(0);
    while drained.elapsed() < Duration::from_secs(30) {
        received.store(seen.lock().expect("seen").received, Relaxed);
        if received.load(Relaxed) >= sent {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let s = seen.lock().expect("seen");
    let rate = sent as f64 / seconds;
    println!(
        "{{\"size\":{},\"per_call\":{},\"sent\":{sent},\"received\":{},\"lost\":{},\"duplicated\":{},\"try_later\":{try_later},\"seconds\":{seconds:.2},\"msg_per_s\":{rate:.0},\"mbps\":{:.1}}}",
        args.size,
        args.per_call,
        s.received,
        sent.saturating_sub(s.received),
        s.duplicated,
        rate * args.size as f64 * 8.0 / 1e6
    );
    Ok(())
}
