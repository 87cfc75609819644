//! Bad input closes that one connection with one log line naming peer and
//! reason and a counter increment; a concurrent well-behaved connection
//! delivers every event.

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use nagare_forward::msgpack::{write_array_len, write_str};

const KEY: &str = "the key";

/// Runs one bad-input case: `bad` misbehaves on its own connection while a
/// good connection sends events in small frames.
fn case(with_key: bool, reason: &str, bad: impl FnOnce(&mut Sender)) {
    let dir = tempfile::tempdir().unwrap();
    let (port, mon) = (free_port(), free_port());
    let out = dir.path().join("good.log");
    let key = if with_key {
        format!("shared_key = \"{KEY}\"\n")
    } else {
        String::new()
    };
    let cfg = format!(
        r#"[monitor]
bind = "127.0.0.1:{mon}"
[[input]]
type = "forward"
bind = "127.0.0.1:{port}"
max_frame_size = "1KiB"
idle_timeout = "1s"
{key}
[[output]]
type = "file"
match = "**"
path = "{}"
[output.buffer]
flush_interval = "50ms"
"#,
        out.display()
    );
    let mut d = Daemon::start(dir.path(), "bad", &cfg, Some(mon));
    d.wait_port(port);
    // With a shared key, the wait_port probe closes inside the handshake.
    let before = u64::from(with_key);
    d.wait_metric("bad_input_total", "forward#0", before);

    // The good connection sends frames of 5 events before, while and after
    // the bad one misbehaves, then a last frame asking for an ack (so
    // everything before it was taken).
    let bad_done = Arc::new(AtomicBool::new(false));
    let good = {
        let bad_done = bad_done.clone();
        std::thread::spawn(move || {
            let mut g = Sender::tcp(port);
            if with_key {
                assert!(g.handshake(KEY, "good", "", "").auth_ok);
            }
            let mut s = 0;
            let mut after = 0;
            while after < 10 {
                g.packed("good.events", s..s + 5, None);
                s += 5;
                if bad_done.load(SeqCst) {
                    after += 1;
                }
                // A steady trickle, not a flood: the connection stays busy
                // (idle_timeout is 1s) while the bad one runs its course.
                std::thread::sleep(Duration::from_millis(20));
            }
            g.packed("good.events", s..s + 5, Some(b"last"));
            assert_eq!(g.read_ack(), ack_bytes(&mp_str(b"last")));
            g.finish();
            s + 5
        })
    };

    // The bad connection starts once the good one is delivering.
    wait_until(WAIT, "the good connection's first events", || {
        d.metric("events_in_total", "forward#0") >= 5
    });
    let mut b = Sender::tcp(port);
    let peer = b.local();
    bad(&mut b);
    assert!(b.closed_by_peer(), "the bad connection is closed");
    d.wait_metric("bad_input_total", "forward#0", before + 1);
    d.wait_bad_peer(&peer);
    bad_done.store(true, SeqCst);
    let n = good.join().expect("the good connection delivered");

    let got = json_lines_seqs(&wait_file_lines(&out, n as usize));
    assert_exact_seqs(&seqs(&got), n);
    let lines = bad_peer_lines(&d.stderr(), &peer);
    assert_eq!(lines.len(), 1, "one log line for the bad peer: {lines:?}");
    assert!(
        lines[0].contains(reason),
        "reason {reason:?} in {:?}",
        lines[0]
    );
    assert_eq!(d.metric("bad_input_total", "forward#0"), before + 1);
    assert!(d.terminate().success());
    assert_eq!(read_file(&out).lines().count(), n as usize);
}

#[test]
fn malformed_frame() {
    // A frame whose tag is an integer.
    case(false, "malformed frame", |b| {
        b.raw(&[0x93, 0x05, 0x90, 0x80])
    });
}

#[test]
fn truncated_frame_then_close() {
    case(false, "closed inside a frame", |b| {
        let (e, n) = entries(0..10);
        let mut f = Vec::new();
        nagare_forward::encode_packed_forward(
            &mut f,
            "cut",
            &e,
            n,
            None,
            nagare_forward::Compression::None,
        )
        .unwrap();
        b.raw(&f[..f.len() / 2]);
        b.conn.shutdown_write();
    });
}

#[test]
fn unknown_mode() {
    // [tag, 1.5]: neither entries nor a time followed by a record.
    case(false, "malformed frame", |b| {
        let mut f = Vec::new();
        write_array_len(&mut f, 2);
        write_str(&mut f, b"odd");
        f.push(0xcb);
        f.extend_from_slice(&1.5f64.to_be_bytes());
        b.raw(&f);
    });
}

#[test]
fn oversized_frame() {
    case(false, "larger than the limit", |b| {
        b.packed("big", 0..200, None)
    });
}

#[test]
fn wrong_shared_key() {
    case(true, "shared key mismatch", |b| {
        assert!(!b.handshake("not the key", "bad", "", "").auth_ok);
    });
}

#[test]
fn stalled_client() {
    // Half a frame, then nothing: idle_timeout (1s) closes it.
    case(false, "idle", |b| {
        b.raw(&[0x93, 0xa3, b'a', b'b']);
    });
}

/// `max_connections`: past the limit a connection is closed at once with a
/// log line naming its peer; the open ones go on.
#[test]
fn forward_connections_past_max_connections_are_closed_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (port, mon) = (free_port(), free_port());
    let out = dir.path().join("out.log");
    let cfg = format!(
        r#"[monitor]
bind = "127.0.0.1:{mon}"
[[input]]
type = "forward"
bind = "127.0.0.1:{port}"
max_connections = 2
[[output]]
type = "file"
match = "**"
path = "{}"
[output.buffer]
flush_interval = "50ms"
"#,
        out.display()
    );
    let d = Daemon::start(dir.path(), "limit", &cfg, Some(mon));
    // Not wait_port: its probe connection would hold a slot for a moment.
    d.wait_log("forward input listening");
    let mut first = Sender::tcp(port);
    first.packed("limit.a", 0..5, Some(b"a0"));
    assert_eq!(first.read_ack(), ack_bytes(&mp_str(b"a0")));
    let mut second = Sender::tcp(port);
    second.packed("limit.a", 5..10, Some(b"b0"));
    assert_eq!(second.read_ack(), ack_bytes(&mp_str(b"b0")));
    let mut third = Sender::tcp(port);
    let third_peer = third.local();
    assert!(third.closed_by_peer(), "the third connection is closed");
    assert!(d.wait_bad_peer(&third_peer)[0].contains("max_connections (2) reached"));
    first.packed("limit.a", 10..15, Some(b"a1"));
    assert_eq!(first.read_ack(), ack_bytes(&mp_str(b"a1")));
    second.finish();
    first.finish();
    let got = json_lines_seqs(&wait_file_lines(&out, 15));
    assert_exact_seqs(&seqs(&got), 15);
    assert_eq!(d.metric("errors_total", "forward#0"), 1);
}
