//! The shared-key handshake (HELO/PING/PONG): good and bad keys, users and
//! passwords, the forward output completing it against a nagare input, and
//! `nagare cat` / `nagare replay` failing with the reason when the server did
//! not take their events (handshake missing or refused, no ack).

use std::io::Write;
use std::process::{Command, Stdio};

use crate::common::*;

fn secured(port: u16, mon: u16, out: &std::path::Path, users: &str) -> String {
    format!(
        r#"[monitor]
bind = "127.0.0.1:{mon}"
[[input]]
type = "forward"
bind = "127.0.0.1:{port}"
shared_key = "s3cr3t key"
self_hostname = "receiver"
{users}
[[output]]
type = "file"
match = "**"
path = "{}"
[output.buffer]
flush_interval = "50ms"
"#,
        out.display()
    )
}

#[test]
fn shared_key_good_and_bad() {
    let dir = tempfile::tempdir().unwrap();
    let (port, mon) = (free_port(), free_port());
    let out = dir.path().join("out.log");
    let mut d = Daemon::start(dir.path(), "key", &secured(port, mon, &out, ""), Some(mon));
    d.wait_port(port);
    d.wait_port(mon);
    // The wait_port probe closed during the handshake: it counts as bad input.
    let probes = 1;
    d.wait_metric("bad_input_total", "forward#0", probes);

    // Good key: PONG true with the server's digest (checked in handshake()).
    let mut good = Sender::tcp(port);
    let pong = good.handshake("s3cr3t key", "client-a", "", "");
    assert!(pong.auth_ok, "{:?}", String::from_utf8_lossy(&pong.reason));
    assert_eq!(pong.hostname, b"receiver");
    good.packed("auth.ok", 0..300, Some(b"k1"));
    assert_eq!(good.read_ack(), ack_bytes(&mp_str(b"k1")));

    // Bad key: PONG false, then the connection is closed; nothing delivered.
    let mut bad = Sender::tcp(port);
    let pong = bad.handshake("wrong key", "client-b", "", "");
    assert!(!pong.auth_ok);
    assert!(
        pong.shared_key_digest.is_empty(),
        "a refused client learns no digest"
    );
    let peer = bad.local();
    // Whatever it sends now is not taken.
    let _ = std::io::Write::write_all(&mut bad.conn, &{
        let (e, n) = entries(1000..1100);
        let mut f = Vec::new();
        nagare_forward::encode_packed_forward(
            &mut f,
            "auth.bad",
            &e,
            n,
            None,
            nagare_forward::Compression::None,
        )
        .unwrap();
        f
    });
    assert!(bad.closed_by_peer(), "the refused connection is closed");
    d.wait_metric("bad_input_total", "forward#0", probes + 1);
    let lines = d.wait_bad_peer(&peer);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("shared key mismatch"), "{}", lines[0]);

    // The good connection goes on.
    good.packed("auth.ok", 300..600, Some(b"k2"));
    assert_eq!(good.read_ack(), ack_bytes(&mp_str(b"k2")));
    good.finish();
    let got = json_lines_seqs(&wait_file_lines(&out, 600));
    assert_exact_seqs(&seqs(&got), 600);
    assert!(d.terminate().success());
    let got = json_lines_seqs(&read_file(&out));
    assert!(
        got.iter().all(|(t, _)| t == "auth.ok"),
        "nothing from the bad key"
    );
    assert_eq!(got.len(), 600);
}

#[test]
fn users_and_passwords() {
    let dir = tempfile::tempdir().unwrap();
    let (port, mon) = (free_port(), free_port());
    let out = dir.path().join("out.log");
    let users = "[[input.users]]\nusername = \"alice\"\npassword = \"wonderland\"\n[[input.users]]\nusername = \"bob\"\npassword = \"builder\"\n";
    let mut d = Daemon::start(
        dir.path(),
        "users",
        &secured(port, mon, &out, users),
        Some(mon),
    );
    d.wait_port(port);
    let probes = 1;
    d.wait_metric("bad_input_total", "forward#0", probes);

    let mut a = Sender::tcp(port);
    assert!(
        a.handshake("s3cr3t key", "h", "alice", "wonderland")
            .auth_ok
    );
    a.packed("users.alice", 0..100, Some(b"a"));
    assert_eq!(a.read_ack(), ack_bytes(&mp_str(b"a")));
    a.finish();

    let mut w = Sender::tcp(port);
    let pong = w.handshake("s3cr3t key", "h", "alice", "builder");
    assert!(!pong.auth_ok);
    assert!(w.closed_by_peer());
    let mut u = Sender::tcp(port);
    assert!(
        !u.handshake("s3cr3t key", "h", "mallory", "wonderland")
            .auth_ok
    );
    assert!(u.closed_by_peer());
    d.wait_metric("bad_input_total", "forward#0", probes + 2);

    // nagare cat completes the handshake with a user too.
    let mut c = Command::new(BIN)
        .args(["cat", "--address", &format!("127.0.0.1:{port}"), "--ack"])
        .args([
            "--shared-key",
            "s3cr3t key",
            "--user",
            "bob:builder",
            "users.bob",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let input: String = (100..200)
        .map(|s| format!("{{\"seq\":{s},\"message\":\"m\"}}\n"))
        .collect();
    c.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    wait_until(WAIT, "nagare cat to finish", || {
        c.try_wait().unwrap().is_some()
    });
    let o = c.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // A wrong password fails with the server's reason.
    let addr = format!("127.0.0.1:{port}");
    let o = nagare_cat(
        &[
            "--address",
            &addr,
            "--shared-key",
            "s3cr3t key",
            "--user",
            "bob:wonderland",
            "users.bad",
        ],
        &json_input(1000..1010),
    );
    cat_failed(
        &o,
        "error: the server refused the handshake: username/password mismatch",
    );

    let got = json_lines_seqs(&wait_file_lines(&out, 200));
    assert_exact_seqs(&seqs(&got), 200);
    assert!(d.terminate().success());
    let got = json_lines_seqs(&read_file(&out));
    assert!(got.iter().all(|(t, _)| t != "users.bad"), "{got:?}");
}

#[test]
fn forward_output_completes_the_handshake() {
    let dir = tempfile::tempdir().unwrap();
    let (p_b, mon_b, p_a, mon_a) = (free_port(), free_port(), free_port(), free_port());
    let out = dir.path().join("out.log");
    let mut b = Daemon::start(dir.path(), "b", &secured(p_b, mon_b, &out, ""), Some(mon_b));
    b.wait_port(p_b);
    let a_cfg = format!(
        r#"[monitor]
bind = "127.0.0.1:{mon_a}"
[[input]]
type = "forward"
bind = "127.0.0.1:{p_a}"
[[output]]
type = "forward"
match = "**"
shared_key = "s3cr3t key"
require_ack_response = true
heartbeat_type = "none"
[[output.server]]
address = "127.0.0.1:{p_b}"
[output.buffer]
flush_interval = "50ms"
"#
    );
    let mut a = Daemon::start(dir.path(), "a", &a_cfg, Some(mon_a));
    a.wait_port(p_a);
    let bad_before = 1; // the wait_port probe
    b.wait_metric("bad_input_total", "forward#0", bad_before);
    let mut tx = Sender::tcp(p_a);
    tx.send_seqs("secure.relay", 5000, 100);
    tx.finish();
    let got = json_lines_seqs(&wait_file_lines(&out, 5000));
    assert_exact_seqs(&seqs(&got), 5000);
    a.wait_metric("events_out_total", "forward#0", 5000);
    assert_eq!(a.metric("errors_total", "forward#0"), 0, "{}", a.stderr());
    assert_eq!(b.metric("bad_input_total", "forward#0"), bad_before);
    assert!(a.terminate().success());
    assert!(b.terminate().success());
}

/// Asserts that `nagare cat` or `nagare replay` exited 1 with `message`
/// and claimed no success.
fn cat_failed(o: &std::process::Output, message: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains(message), "want {message:?} in {err}");
    assert!(!err.contains(": sent "), "a success line in {err}");
}

const NO_KEY: &str = "the server requires a shared-key handshake; pass --shared-key";

#[test]
fn cat_fails_when_the_server_requires_a_handshake_or_refuses_it() {
    let dir = tempfile::tempdir().unwrap();
    let (port, mon) = (free_port(), free_port());
    let out = dir.path().join("out.log");
    let mut d = Daemon::start(dir.path(), "key", &secured(port, mon, &out, ""), Some(mon));
    d.wait_port(port);
    let addr = format!("127.0.0.1:{port}");

    // Without --shared-key: the server's HELO is noticed with acks or without,
    // after one frame or while many are still being sent.
    let o = nagare_cat(&["--address", &addr, "no.key"], &json_input(0..3));
    cat_failed(&o, NO_KEY);
    let o = nagare_cat(&["--address", &addr, "--ack", "no.key"], &json_input(0..3));
    cat_failed(&o, NO_KEY);
    let o = nagare_cat(
        &["--address", &addr, "--batch", "10", "no.key"],
        &json_input(0..20_000),
    );
    cat_failed(&o, NO_KEY);

    // A wrong key: the server's reason.
    let o = nagare_cat(
        &["--address", &addr, "--shared-key", "wrong", "bad.key"],
        &json_input(0..3),
    );
    cat_failed(
        &o,
        "error: the server refused the handshake: shared key mismatch",
    );

    // The right key: exactly these events arrive, none of the refused ones.
    let o = nagare_cat(
        &["--address", &addr, "--shared-key", "s3cr3t key", "good"],
        &json_input(0..100),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("sent 100 events"));
    wait_file_lines(&out, 100);
    assert!(d.terminate().success());
    let got = json_lines_seqs(&read_file(&out));
    assert!(got.iter().all(|(t, _)| t == "good"), "{got:?}");
    assert_exact_seqs(&seqs(&got), 100);
}

/// A server that reads one whole frame, then closes without an ack.
fn closes_without_ack() -> (u16, std::thread::JoinHandle<()>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let t = std::thread::spawn(move || {
        let (mut c, _) = l.accept().unwrap();
        let mut buf = Vec::new();
        let mut b = [0u8; 4096];
        while nagare_forward::scan_frame(&buf, &Default::default())
            .unwrap()
            .is_none()
        {
            let n = std::io::Read::read(&mut c, &mut b).unwrap();
            assert!(n > 0, "the client closed before a whole frame");
            buf.extend_from_slice(&b[..n]);
        }
    });
    (port, t)
}

#[test]
fn cat_fails_when_no_ack_or_no_helo_comes() {
    // The server reads the frame and answers nothing.
    let silent = Sink::start(SinkOpts {
        no_ack: true,
        ..Default::default()
    });
    let addr = format!("127.0.0.1:{}", silent.port);
    let o = nagare_cat(
        &["--address", &addr, "--ack", "--ack-timeout", "1s", "t"],
        &json_input(0..3),
    );
    cat_failed(&o, "error: no ack for chunk cat-");
    cat_failed(&o, " within 1s");
    assert_exact_seqs(&silent.seqs(), 3);

    // --shared-key, but the server wants no handshake.
    let o = nagare_cat(
        &[
            "--address",
            &addr,
            "--shared-key",
            "k",
            "--ack-timeout",
            "1s",
            "t",
        ],
        &json_input(0..3),
    );
    cat_failed(
        &o,
        "error: the server sent no HELO within 1s: it may not require a shared key",
    );

    // The server closes the connection instead of acking.
    let (port, server) = closes_without_ack();
    let o = nagare_cat(
        &["--address", &format!("127.0.0.1:{port}"), "--ack", "t"],
        &json_input(0..3),
    );
    server.join().unwrap();
    cat_failed(
        &o,
        "error: the server closed the connection without acknowledging chunk cat-",
    );
}

#[test]
fn replay_fails_when_the_server_did_not_take_a_chunk() {
    let dir = tempfile::tempdir().unwrap();
    // Dead letters: a relay whose only downstream never listens.
    let (p_relay, dead_port, mon) = (free_port(), free_port(), free_port());
    let relay_cfg = format!(
        r#"
[monitor]
bind = "127.0.0.1:{mon}"
[[input]]
type = "forward"
bind = "127.0.0.1:{p_relay}"
[[output]]
type = "forward"
match = "**"
heartbeat_type = "none"
connect_timeout = "500ms"
[[output.server]]
address = "127.0.0.1:{dead_port}"
[output.buffer]
type = "file"
path = "{}"
flush_interval = "50ms"
retry_wait = "50ms"
retry_max_interval = "100ms"
retry_max_times = 1
"#,
        dir.path().join("buf").display()
    );
    let mut relay = Daemon::start(dir.path(), "relay", &relay_cfg, Some(mon));
    relay.wait_port(p_relay);
    let mut tx = Sender::tcp(p_relay);
    tx.send_acked("replayed", 0..50, 10, "r");
    tx.finish();
    relay.wait_metric("secondary_events_total", "forward#0", 50);
    assert!(relay.terminate().success());
    let dead = dir.path().join("buf/dead-letters");
    let files = || std::fs::read_dir(&dead).unwrap().count();
    let n_files = files();
    assert!(n_files > 0);

    let (port, mon_b) = (free_port(), free_port());
    let out = dir.path().join("out.log");
    let mut d = Daemon::start(
        dir.path(),
        "key",
        &secured(port, mon_b, &out, ""),
        Some(mon_b),
    );
    d.wait_port(port);
    let replay = |to: u16, args: &[&str]| {
        std::process::Command::new(BIN)
            .args(["replay", dead.to_str().unwrap(), "--to"])
            .arg(format!("127.0.0.1:{to}"))
            .args(args)
            .output()
            .unwrap()
    };

    cat_failed(&replay(port, &[]), NO_KEY);
    cat_failed(
        &replay(port, &["--shared-key", "wrong"]),
        "error: the server refused the handshake: shared key mismatch",
    );
    let silent = Sink::start(SinkOpts {
        no_ack: true,
        ..Default::default()
    });
    let o = replay(silent.port, &["--ack-timeout", "1s"]);
    cat_failed(&o, "no ack for chunk ");
    cat_failed(&o, "0 chunk files were sent and acknowledged before");
    assert_eq!(files(), n_files, "nothing acked, nothing removed");

    let o = replay(port, &["--shared-key", "s3cr3t key"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("sent 50 events"));
    assert_eq!(files(), 0);
    wait_file_lines(&out, 50);
    assert!(d.terminate().success());
    let got = json_lines_seqs(&read_file(&out));
    assert_exact_seqs(&seqs(&got), 50);
}
