//! TLS and mTLS on the forward input and output (docs/tls.md), with
//! certificates made at run time: a relay over TLS end to end, clients
//! refused for their certificates while a good connection goes on, a server
//! refused by its name, certificates replaced while running, a client that
//! is not nagare's (Python's ssl module, OpenSSL), and `nagare check`'s
//! errors for the `tls` files.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::Command;

use common::tls::{client_config, tls_sender, tls_table, Ca, Pair};
use common::*;

/// The daemon's log lines that hold all of `parts`.
fn lines_with(log: &str, parts: &[&str]) -> Vec<String> {
    log.lines()
        .filter(|l| parts.iter().all(|p| l.contains(p)))
        .map(str::to_string)
        .collect()
}

/// A forward input on `port` with TLS from `pair` (mTLS when `ca` is set),
/// sending everything to the sink.
fn tls_receiver(
    dir: &Path,
    name: &str,
    port: u16,
    pair: &Pair,
    ca: Option<&Path>,
    sink: &Sink,
) -> Daemon {
    let config = format!(
        "[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:{port}\"\n{}\n{}",
        tls_table("input", Some(pair), ca, ""),
        forward_output_to("**", sink.port),
    );
    let mut d = Daemon::start(dir, name, &config, None);
    d.wait_port(port);
    d
}

/// A forward input on `port` relaying to 127.0.0.1:`to` over TLS with
/// these extra `[output.tls]` lines.
fn tls_relay(dir: &Path, port: u16, to: u16, tls: &str) -> Daemon {
    let config = format!(
        "[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:{port}\"\n\n\
         [[output]]\ntype = \"forward\"\nmatch = \"**\"\n\
         require_ack_response = true\nheartbeat_type = \"none\"\n\
         [[output.server]]\naddress = \"127.0.0.1:{to}\"\n\
         [output.buffer]\nflush_interval = \"50ms\"\n{tls}"
    );
    let mut d = Daemon::start(dir, "relay", &config, None);
    d.wait_port(port);
    d
}

#[test]
fn forward_relay_over_mtls_delivers_every_event() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "ca");
    let server = ca.issue("server", &["localhost", "127.0.0.1"]);
    let client = ca.issue("relay", &["relay.example"]);
    let sink = Sink::start(SinkOpts::default());
    let (pa, pb) = (free_port(), free_port());
    let _b = tls_receiver(dir.path(), "b", pb, &server, Some(&ca.path), &sink);
    let _a = tls_relay(
        dir.path(),
        pa,
        pb,
        &tls_table(
            "output",
            Some(&client),
            Some(&ca.path),
            "server_name = \"localhost\"\n",
        ),
    );
    let mut s = Sender::tcp(pa);
    s.send_seqs("tls.relay", 20_000, 500);
    sink.wait_records(20_000);
    assert_exact_seqs(&sink.seqs(), 20_000);
    assert!(sink.events().iter().all(|(tag, _)| tag == "tls.relay"));
}

#[test]
fn clients_with_bad_certificates_are_refused_and_a_good_one_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "ca");
    let other = Ca::new(dir.path(), "other");
    let server = ca.issue("server", &["localhost"]);
    let good = ca.issue("good", &["good.example"]);
    let sink = Sink::start(SinkOpts::default());
    let port = free_port();
    let d = tls_receiver(dir.path(), "b", port, &server, Some(&ca.path), &sink);

    let mut ok = tls_sender(port, client_config(&ca.path, Some(&good)), "localhost").unwrap();
    ok.packed("t", 0..100, None);
    sink.wait_records(100);

    let refused = [
        ("no client certificate", None, "peer sent no certificates"),
        (
            "a certificate from another CA",
            Some(other.issue("stranger", &["stranger.example"])),
            "UnknownIssuer",
        ),
        (
            "an expired certificate",
            Some(ca.issue_expired("old", &["old.example"])),
            "certificate expired",
        ),
    ];
    for (what, cert, reason) in &refused {
        let config = client_config(&ca.path, cert.as_ref());
        // Under TLS 1.3 the client has finished its handshake before the
        // server checked its certificate: the refusal is the server closing.
        let mut bad = tls_sender(port, config, "localhost").unwrap();
        let peer = bad.local();
        let (e, n) = entries(1000..1010);
        let mut frame = Vec::new();
        nagare_forward::encode_packed_forward(
            &mut frame,
            "t",
            &e,
            n,
            None,
            nagare_forward::Compression::None,
        )
        .unwrap();
        let _ = bad.conn.write_all(&frame);
        assert!(bad.closed_by_peer(), "{what}: the connection is closed");
        wait_until(WAIT, &format!("the log line refusing {what}"), || {
            !lines_with(
                &d.stderr(),
                &["TLS handshake failed", &format!("peer={peer}"), reason],
            )
            .is_empty()
        });
    }
    // The good connection goes on; nothing from the refused ones arrived.
    ok.packed("t", 100..200, None);
    sink.wait_records(200);
    assert_exact_seqs(&sink.seqs(), 200);
}

#[test]
fn a_server_whose_certificate_is_for_another_name_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "ca");
    let server = ca.issue("server", &["localhost"]);
    let sink = Sink::start(SinkOpts::default());
    let (pa, pb) = (free_port(), free_port());
    let _b = tls_receiver(dir.path(), "b", pb, &server, None, &sink);
    let a = tls_relay(
        dir.path(),
        pa,
        pb,
        &tls_table(
            "output",
            None,
            Some(&ca.path),
            "server_name = \"logs.example\"\n",
        ),
    );
    Sender::tcp(pa).packed("t", 0..10, None);
    wait_until(
        WAIT,
        "the relay's log line refusing the server's name",
        || {
            !lines_with(
                &a.stderr(),
                &[
                    "forward server",
                    "certificate not valid for name",
                    "logs.example",
                ],
            )
            .is_empty()
        },
    );
    assert_eq!(
        sink.count(),
        0,
        "nothing went to a server with the wrong name"
    );
}

#[test]
fn replaced_certificates_serve_new_connections_and_old_ones_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let (ca1, ca2) = (Ca::new(dir.path(), "one"), Ca::new(dir.path(), "two"));
    let first = ca1.issue("server", &["localhost"]);
    let live = Pair {
        cert: dir.path().join("live.pem"),
        key: dir.path().join("live-key.pem"),
    };
    std::fs::copy(&first.cert, &live.cert).unwrap();
    std::fs::copy(&first.key, &live.key).unwrap();
    let sink = Sink::start(SinkOpts::default());
    let port = free_port();
    let d = tls_receiver(dir.path(), "b", port, &live, None, &sink);

    let mut old = tls_sender(port, client_config(&ca1.path, None), "localhost").unwrap();
    old.packed("t", 0..10, None);
    sink.wait_records(10);

    // Replaced as a deploy tool does: new files renamed over the old ones.
    let second = ca2.issue("server", &["localhost"]);
    std::fs::rename(&second.cert, &live.cert).unwrap();
    std::fs::rename(&second.key, &live.key).unwrap();

    let mut new = tls_sender(port, client_config(&ca2.path, None), "localhost")
        .expect("a new connection gets the new certificate");
    wait_until(WAIT, "the reload log line", || {
        !lines_with(&d.stderr(), &["TLS certificates reloaded"]).is_empty()
    });
    new.packed("t", 10..20, None);
    let e = tls_sender(port, client_config(&ca1.path, None), "localhost")
        .err()
        .expect("a client trusting only the old CA is refused");
    assert!(e.contains("UnknownIssuer"), "{e}");
    old.packed("t", 20..30, None);
    sink.wait_records(30);
    assert_exact_seqs(&sink.seqs(), 30);
}

/// Python's ssl module (OpenSSL) as the client, TLS 1.2 and 1.3, with a
/// client certificate, sending a forward frame and reading its ack. (The
/// Python fluent-logger has no TLS support, so it cannot be the client.)
#[test]
fn python_ssl_client_sends_forward_frames() {
    if skip_unless(
        Command::new("python3")
            .arg("-c")
            .arg("import ssl")
            .output()
            .is_ok_and(|o| o.status.success()),
        "python3 with ssl is not installed",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "ca");
    let server = ca.issue("server", &["localhost"]);
    let client = ca.issue("python", &["python.example"]);
    let sink = Sink::start(SinkOpts::default());
    let port = free_port();
    let _d = tls_receiver(dir.path(), "b", port, &server, Some(&ca.path), &sink);
    let script = r#"
import socket, ssl, sys
port, ca, cert, key, version, frame = sys.argv[1:]
ctx = ssl.create_default_context(cafile=ca)
ctx.load_cert_chain(cert, key)
ctx.minimum_version = ctx.maximum_version = getattr(ssl.TLSVersion, version)
with ctx.wrap_socket(socket.create_connection(("127.0.0.1", int(port))), server_hostname="localhost") as s:
    s.sendall(bytes.fromhex(frame))
    s.settimeout(20)
    print(s.version(), s.recv(4096).hex())
"#;
    for (i, version) in ["TLSv1_2", "TLSv1_3"].iter().enumerate() {
        let seqs = (i as u64 * 10)..(i as u64 * 10 + 10);
        let id = format!("py-{version}");
        let (e, n) = entries(seqs);
        let mut frame = Vec::new();
        nagare_forward::encode_packed_forward(
            &mut frame,
            "py",
            &e,
            n,
            Some(id.as_bytes()),
            nagare_forward::Compression::None,
        )
        .unwrap();
        let hex: String = frame.iter().map(|b| format!("{b:02x}")).collect();
        let out = Command::new("python3")
            .arg("-c")
            .arg(script)
            .args([&port.to_string(), ca.path.to_str().unwrap()])
            .args([
                client.cert.to_str().unwrap(),
                client.key.to_str().unwrap(),
                version,
                &hex,
            ])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{version}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let ack: String = ack_bytes(&mp_str(id.as_bytes()))
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let want = format!("{} {ack}", version.replace('_', "."));
        assert_eq!(
            stdout.trim(),
            want,
            "{version}: the TLS version and the ack"
        );
    }
    sink.wait_records(20);
    assert_exact_seqs(&sink.seqs(), 20);
}

#[test]
fn check_names_the_key_and_file_of_bad_tls_files() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "ca");
    let server = ca.issue("server", &["localhost"]);
    let stranger = ca.issue("stranger", &["stranger"]);
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "hello\n").unwrap();
    let output = "[[output]]\ntype = \"forward\"\nmatch = \"**\"\n[[output.server]]\naddress = \"127.0.0.1:1\"\n";
    let input_tls =
        |cert: &Path, key: &Path| format!("[input.tls]\ncert = {cert:?}\nkey = {key:?}\n{output}");
    let missing = Path::new("/nonexistent/server.pem");
    let cases = [
        (
            input_tls(missing, &server.key),
            ":6: key `tls.cert`:".to_string(),
            format!("cannot read {missing:?}"),
        ),
        (
            input_tls(&junk, &server.key),
            ":6: key `tls.cert`:".into(),
            format!("{junk:?} holds no PEM certificate"),
        ),
        (
            input_tls(&server.cert, &junk),
            ":7: key `tls.key`:".into(),
            format!("{junk:?} holds no PEM private key"),
        ),
        (
            input_tls(&server.cert, &stranger.key),
            ":7: key `tls.key`:".into(),
            format!(
                "the key in {:?} does not match the certificate in {:?}",
                stranger.key, server.cert
            ),
        ),
        (
            format!("[input.tls]\ncert = {:?}\n{output}", server.cert),
            ":5: key `tls`:".into(),
            "a TLS listener needs `cert` and `key`".into(),
        ),
        (
            format!("{output}[output.tls]\nca = {junk:?}\n"),
            ":11: key `tls.ca`:".into(),
            format!("{junk:?} holds no PEM certificate"),
        ),
    ];
    assert_check_errors(dir.path(), CHECK_BASE, &cases);

    // An expired certificate is a warning: the config is valid.
    let old = ca.issue_expired("old", &["localhost"]);
    let p = dir.path().join("expired.toml");
    std::fs::write(
        &p,
        format!("{CHECK_BASE}{}", input_tls(&old.cert, &old.key)),
    )
    .unwrap();
    let out = run_check(&p);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("warning") && err.contains("tls.cert") && err.contains("expired on"),
        "{err}"
    );
}

#[test]
fn cat_sends_over_mtls_and_refuses_a_wrong_server_name() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "ca");
    let server = ca.issue("server", &["localhost"]);
    let client = ca.issue("cat", &["cat.example"]);
    let sink = Sink::start(SinkOpts::default());
    let port = free_port();
    let _d = tls_receiver(dir.path(), "b", port, &server, Some(&ca.path), &sink);
    let cat = |extra: &[&str]| {
        let mut c = Command::new(BIN)
            .args(["cat", "--ack", "--address", &format!("127.0.0.1:{port}")])
            .arg("--tls-ca")
            .arg(&ca.path)
            .arg("--tls-cert")
            .arg(&client.cert)
            .arg("--tls-key")
            .arg(&client.key)
            .args(extra)
            .arg("cat.tls")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let lines: String = (0..5)
            .map(|i| format!("{{\"seq\":{i},\"message\":\"m{i}\"}}\n"))
            .collect();
        c.stdin.take().unwrap().write_all(lines.as_bytes()).unwrap();
        c.wait_with_output().unwrap()
    };
    let out = cat(&["--tls-server-name", "localhost"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    sink.wait_records(5);
    assert_exact_seqs(&sink.seqs(), 5);

    let out = cat(&["--tls-server-name", "logs.example"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a server with another name is refused"
    );
    assert!(
        err.contains("certificate not valid for name \"logs.example\""),
        "{err}"
    );
    assert_eq!(sink.count(), 5);
}
