//! The floor of benches/loki.sh: POSTs pre-built Loki push bodies
//! (protobuf + snappy, as the `loki` output sends) of the events
//! flowbench sends (`{"seq":N,"message":"<size printable bytes>"}`, one
//! stream `{tag="<tag>"}`) to a push endpoint as fast as it takes them,
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

/// One PushRequest of the events `seqs` in one stream.
fn body(labels: &str, seqs: std::ops::Range<u64>, message: &str) -> Vec<u8> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let (secs, nanos) = (now.as_secs(), u64::from(now.subsec_nanos()));
    let ts_len = 1 + encoded_len_varint(secs) + 1 + encoded_len_varint(nanos.max(1));
    let lines: Vec<String> = seqs
        .map(|s| format!("{{\"seq\":{s},\"message\":\"{message}\"}}"))
        .collect();
    let entry_len = |l: &str| len_field(ts_len) + len_field(l.len());
    let stream_len =
        len_field(labels.len()) + lines.iter().map(|l| len_field(entry_len(l))).sum::<usize>();
    let mut out = Vec::with_capacity(stream_len + 8);
    put(&mut out, 1, stream_len);
    put(&mut out, 1, labels.len());
    out.extend_from_slice(labels.as_bytes());
    for l in &lines {
        put(&mut out, 2, entry_len(l));
        put(&mut out, 1, ts_len);
        encode_key(1, WireType::Varint, &mut out);
        encode_varint(secs, &mut out);
        encode_key(2, WireType::Varint, &mut out);
        encode_varint(nanos.max(1), &mut out);
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
    // flowbench's message: printable ASCII of `size` bytes.
    let message: String = (0..size).map(|i| (b'a' + (i % 26) as u8) as char).collect();
    let labels = format!("{{tag=\"{tag}\"}}");
    let bodies: Arc<Vec<Vec<u8>>> = Arc::new(
        (0..events)
            .step_by(per as usize)
            .map(|s| body(&labels, s..(s + per).min(events), &message))
            .collect(),
    );
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
