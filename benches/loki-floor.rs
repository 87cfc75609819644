//! The floor of benches/loki.sh: POSTs pre-built Loki push bodies
//! (protobuf + snappy, as the `loki` output sends) of events like
//! flowbench's (`{"seq":N,"message":"<size bytes of log-like text>"}`,
//! each its own time, one stream `{tag="<tag>"}`) to a push endpoint as fast as it takes them,
//! over keep-alive connections, and prints one JSON line: events, seconds,
//! events/s, requests.
//!
//!   cargo run --release -p nagare --example loki-floor -- \
//!     ADDR PATH TAG EVENTS PER_REQUEST SIZE CONNECTIONS
//!
//! Every body is built before the clock starts: the time is the server's
//! and the connections' alone.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use prost::encoding::{encode_key, encode_varint, encoded_len_varint, WireType};

fn len_field(len: usize) -> usize {
    1 + encoded_len_varint(len as u64) + len
}

fn put(out: &mut Vec<u8>, tag: u32, len: usize) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(len as u64, out);
}

/// The Timestamp message of `ns` since the epoch: (length, secs, nanos).
fn ts(ns: u64) -> (usize, u64, u64) {
    let (secs, nanos) = (ns / 1_000_000_000, ns % 1_000_000_000);
    let len = 1
        + encoded_len_varint(secs)
        + if nanos > 0 {
            1 + encoded_len_varint(nanos)
        } else {
            0
        };
    (len, secs, nanos)
}

/// One PushRequest of the events `seqs` in one stream, their times a
/// microsecond apart from `t0` (as flowbench's events: each its own time).
fn body<'a>(
    labels: &str,
    seqs: std::ops::Range<u64>,
    message: &dyn Fn(u64) -> &'a str,
    t0: u64,
) -> Vec<u8> {
    let entries: Vec<(String, (usize, u64, u64))> = seqs
        .map(|s| {
            (
                format!("{{\"seq\":{s},\"message\":\"{}\"}}", message(s)),
                ts(t0 + s * 1000),
            )
        })
        .collect();
    let entry_len = |(l, t): &(String, (usize, u64, u64))| len_field(t.0) + len_field(l.len());
    let stream_len = len_field(labels.len())
        + entries
            .iter()
            .map(|e| len_field(entry_len(e)))
            .sum::<usize>();
    let mut out = Vec::with_capacity(stream_len + 8);
    put(&mut out, 1, stream_len);
    put(&mut out, 1, labels.len());
    out.extend_from_slice(labels.as_bytes());
    for e in &entries {
        let (l, (tl, secs, nanos)) = e;
        put(&mut out, 2, entry_len(e));
        put(&mut out, 1, *tl);
        encode_key(1, WireType::Varint, &mut out);
        encode_varint(*secs, &mut out);
        if *nanos > 0 {
            encode_key(2, WireType::Varint, &mut out);
            encode_varint(*nanos, &mut out);
        }
        put(&mut out, 2, l.len());
        out.extend_from_slice(l.as_bytes());
    }
    snap::raw::Encoder::new().compress_vec(&out).unwrap()
}

/// POSTs `body` on `conn` and reads the answer; panics on a non-2xx.
fn post(conn: &mut BufReader<TcpStream>, addr: &str, path: &str, body: &[u8]) {
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let s = conn.get_mut();
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut status = String::new();
    conn.read_line(&mut status).unwrap();
    assert!(
        status.split(' ').nth(1).is_some_and(|c| c.starts_with('2')),
        "{status}"
    );
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        conn.read_line(&mut h).unwrap();
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().unwrap();
            }
        }
    }
    let mut rest = vec![0; len];
    conn.read_exact(&mut rest).unwrap();
}

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let [addr, path, tag, events, per, size, conns] = a.as_slice() else {
        eprintln!("usage: loki-floor ADDR PATH TAG EVENTS PER_REQUEST SIZE CONNECTIONS");
        std::process::exit(2);
    };
    let (events, per, size, conns): (u64, u64, usize, usize) = (
        events.parse().unwrap(),
        per.parse().unwrap(),
        size.parse().unwrap(),
        conns.parse().unwrap(),
    );
    // flowbench's messages: `size` bytes of a 1 MiB pool of log-like words
    // and numbers, the k-th event of each 200-event frame at offset
    // k * 7919 (so a request repeats 200 messages, as nagare's do).
    let words = [
        "GET",
        "POST",
        "PUT",
        "/api/v1/users",
        "/api/v1/orders",
        "/healthz",
        "status=200",
        "status=404",
        "status=500",
        "INFO",
        "WARN",
        "ERROR",
        "DEBUG",
        "connection",
        "established",
        "closed",
        "timeout",
        "retry",
        "cache",
        "miss",
        "hit",
        "upstream",
        "worker",
        "session",
        "request",
        "took",
        "ms",
        "bytes",
        "user",
        "id",
        "from",
        "to",
    ];
    let mut pool = String::with_capacity((1 << 20) + 32);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    while pool.len() < 1 << 20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if x.is_multiple_of(4) {
            pool.push_str(&(x % 100_000).to_string());
        } else {
            pool.push_str(words[(x >> 8) as usize % words.len()]);
        }
        pool.push(' ');
    }
    let span = pool.len() - size + 1;
    let message = |seq: u64| {
        let off = ((seq % 200) as usize * 7919) % span;
        &pool[off..off + size]
    };
    let labels = format!("{{tag=\"{tag}\"}}");
    let t0 = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    // LOKI_FLOOR_REPLAY=DIR: the bodies are the files of DIR (in name
    // order), e.g. requests of nagare's captured by a recording server.
    let bodies: Arc<Vec<Vec<u8>>> = Arc::new(match std::env::var_os("LOKI_FLOOR_REPLAY") {
        Some(dir) => {
            let mut files: Vec<_> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            files.sort();
            files.iter().map(|f| std::fs::read(f).unwrap()).collect()
        }
        None => (0..events)
            .step_by(per as usize)
            .map(|s| body(&labels, s..(s + per).min(events), &message, t0))
            .collect(),
    });
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let workers: Vec<_> = (0..conns)
        .map(|_| {
            let (bodies, next, addr, path) =
                (bodies.clone(), next.clone(), addr.clone(), path.clone());
            std::thread::spawn(move || {
                let mut conn = BufReader::new(TcpStream::connect(&addr).unwrap());
                conn.get_ref().set_nodelay(true).unwrap();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(b) = bodies.get(i) else { return };
                    post(&mut conn, &addr, &path, b);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{{\"events\":{events},\"seconds\":{secs:.3},\"events_per_s\":{:.0},\"requests\":{}}}",
        events as f64 / secs,
        bodies.len()
    );
}
