//! The shared-key handshake (HELO/PING/PONG): good and bad keys, users and
//! passwords, and the forward output completing it against a nagare input.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::*;

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
    wait_until(WAIT, "the log line of the refused peer", || {
        !bad_peer_lines(&d.stderr(), &peer).is_empty()
    });
    let lines = bad_peer_lines(&d.stderr(), &peer);
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

    let got = json_lines_seqs(&wait_file_lines(&out, 200));
    assert_exact_seqs(&seqs(&got), 200);
    assert!(d.terminate().success());
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
