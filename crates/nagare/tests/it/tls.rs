//! TLS and mTLS (docs/tls.md), with certificates made at run time. The
//! forward input and output: a relay over TLS end to end, clients
//! refused for their certificates while a good connection goes on, a server
//! refused by its name, certificates replaced while running, a client that
//! is not nagare's (Python's ssl module, OpenSSL), and `nagare check`'s
//! errors for the `tls` files. The http, opentelemetry, tcp and syslog
//! inputs and outputs: curl and Python's ssl module send to the inputs,
//! the outputs send to the inputs (mTLS), clients without a certificate or
//! with another CA's are refused while good ones deliver. (Scribe over TLS,
//! with Thrift's own TLS transports, is in scribe.rs.)

use std::io::Write;
use std::path::Path;
use std::process::Command;

use crate::common::tls::{client_config, tls_sender, tls_table, Ca, Pair};
use crate::common::*;

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

// ------------------------------------------------- the other listeners and clients

/// Python's ssl module as a client: connects to 127.0.0.1:PORT trusting CA
/// (checking the name "localhost"), presenting CERT/KEY when given (""
/// for none), prints its local port, sends DATA (hex) and closes with a
/// close_notify, waiting for the server to close. Then prints how the
/// session ended when that was not a plain close: "alert: …" when the
/// server sent an alert (a refused handshake), or the error.
const PY_TLS_SEND: &str = r#"
import socket, ssl, sys
port, ca, cert, key, data = sys.argv[1:]
ctx = ssl.create_default_context(cafile=ca)
if cert:
    ctx.load_cert_chain(cert, key)
raw = socket.create_connection(("127.0.0.1", int(port)))
print(raw.getsockname()[1], flush=True)
try:
    s = ctx.wrap_socket(raw, server_hostname="localhost")
    s.settimeout(20)
    s.sendall(bytes.fromhex(data))
    s.unwrap()
except ssl.SSLEOFError:
    pass  # the server closed without a close_notify of its own
except ssl.SSLError as e:
    print("alert:", e, flush=True)
except OSError as e:
    print("error:", e, flush=True)
"#;

/// Runs [`PY_TLS_SEND`]; returns (local port, what it printed after).
fn py_tls_send(port: u16, ca: &Path, client: Option<&Pair>, data: &[u8]) -> (u16, String) {
    let hex: String = data.iter().map(|b| format!("{b:02x}")).collect();
    let (cert, key) = client.map_or((String::new(), String::new()), |p| {
        (
            p.cert.to_str().unwrap().into(),
            p.key.to_str().unwrap().into(),
        )
    });
    let out = Command::new("python3")
        .arg("-c")
        .arg(PY_TLS_SEND)
        .args([&port.to_string(), ca.to_str().unwrap(), &cert, &key, &hex])
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "python ssl client: {}{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (first, rest) = stdout.split_once('\n').unwrap_or((&stdout, ""));
    (first.trim().parse().unwrap(), rest.trim().to_string())
}

fn skip_without_python_and_curl() -> bool {
    let ok = |cmd: &str, arg: &str| {
        Command::new(cmd)
            .args(["-c", arg])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    skip_unless(
        ok("python3", "import ssl")
            && Command::new("curl")
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success()),
        "python3 with ssl, or curl, is not installed",
    )
}

/// curl POSTing `body` over HTTPS, trusting `ca`, with `extra` arguments;
/// returns the status code ("000" when the connection failed).
fn curl_https(url: &str, ca: &Path, content_type: &str, body: &str, extra: &[&str]) -> String {
    let out = Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"])
        .arg(ca)
        .args(["-H", &format!("Content-Type: {content_type}")])
        .args(["--data-binary", body])
        .args(extra)
        .arg(url)
        .output()
        .expect("run curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `n` NDJSON records {"seq", "message"} from `from`.
fn ndjson(from: u64, n: u64) -> String {
    (from..from + n)
        .map(|s| format!("{{\"seq\":{s},\"message\":\"{}\"}}\n", message_for(s)))
        .collect()
}

/// An OTLP JSON export of `n` log records whose bodies are message_for(seq).
fn otlp_json(n: u64) -> String {
    let records: Vec<String> = (0..n)
        .map(|s| {
            format!(
                "{{\"timeUnixNano\":\"1700000000000000000\",\"body\":{{\"stringValue\":\"{}\"}}}}",
                message_for(s)
            )
        })
        .collect();
    format!(
        "{{\"resourceLogs\":[{{\"scopeLogs\":[{{\"logRecords\":[{}]}}]}}]}}",
        records.join(",")
    )
}

/// The seqs of `tag`'s records at the sink, read back from the message
/// that `text` finds in each record (asserting it is one of ours).
fn seqs_of(sink: &Sink, tag: &str, text: impl Fn(&rmpv::Value) -> Option<&str>) -> Vec<u64> {
    sink.records()
        .iter()
        .filter(|(t, _, _)| t == tag)
        .map(|(_, _, r)| {
            let m = text(r).unwrap_or_else(|| panic!("{tag}: no message in {r}"));
            let seq = m
                .strip_prefix("event number ")
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("{tag}: {m:?} is not one of the messages sent"));
            assert_eq!(m, message_for(seq));
            seq
        })
        .collect()
}

fn str_field<'a>(r: &'a rmpv::Value, key: &str) -> Option<&'a str> {
    field_of(r, key).and_then(|v| v.as_str())
}

/// The TLS listeners other than forward, to the sink: http, opentelemetry
/// (tag "otel.in"), tcp (tag "tcp.in") and syslog over TCP (tag "sys"),
/// on the ports given, each with `pair` and, when `ca` is set, mTLS.
fn tls_listeners(
    dir: &Path,
    ports: [u16; 4],
    pair: &Pair,
    ca: Option<&Path>,
    sink: &Sink,
) -> Daemon {
    let [http, otel, tcp, syslog] = ports;
    let tls = tls_table("input", Some(pair), ca, "");
    let config = format!(
        "[[input]]\ntype = \"http\"\nbind = \"127.0.0.1:{http}\"\n{tls}\n\
         [[input]]\ntype = \"opentelemetry\"\nbind = \"127.0.0.1:{otel}\"\ntag = \"otel.in\"\n{tls}\n\
         [[input]]\ntype = \"tcp\"\nbind = \"127.0.0.1:{tcp}\"\ntag = \"tcp.in\"\n{tls}\n\
         [[input]]\ntype = \"syslog\"\nbind = \"127.0.0.1:{syslog}\"\nprotocol = \"tcp\"\ntag = \"sys\"\n{tls}\n\
         {}",
        forward_output_to("**", sink.port),
    );
    let mut d = Daemon::start(dir, "listeners", &config, None);
    for p in ports {
        d.wait_port(p);
    }
    d
}

/// `n` RFC 5424 messages, octet counted (RFC 5425 inside TLS), facility
/// user, severity info, MSG message_for(seq).
fn syslog_frames(n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    for s in 0..n {
        let m = format!(
            "<14>1 2024-05-01T10:00:00.000Z host app 42 - - {}",
            message_for(s)
        );
        out.extend_from_slice(format!("{} {m}", m.len()).as_bytes());
    }
    out
}

#[test]
fn curl_and_python_send_over_tls_to_http_otlp_tcp_and_syslog_inputs() {
    if skip_without_python_and_curl() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "ca");
    let server = ca.issue("server", &["localhost", "127.0.0.1"]);
    let sink = Sink::start(SinkOpts::default());
    let ports = [free_port(), free_port(), free_port(), free_port()];
    let _d = tls_listeners(dir.path(), ports, &server, None, &sink);
    let [http, otel, tcp, syslog] = ports;

    let code = curl_https(
        &format!("https://127.0.0.1:{http}/app.http"),
        &ca.path,
        "application/x-ndjson",
        &ndjson(0, 100),
        &[],
    );
    assert_eq!(code, "200", "curl to the http input");
    let code = curl_https(
        &format!("https://localhost:{otel}/v1/logs"),
        &ca.path,
        "application/json",
        &otlp_json(50),
        &["--resolve", &format!("localhost:{otel}:127.0.0.1")],
    );
    assert_eq!(code, "200", "curl to the opentelemetry input");
    let lines: String = (0..200).map(|s| message_for(s) + "\n").collect();
    let (_, said) = py_tls_send(tcp, &ca.path, None, lines.as_bytes());
    assert_eq!(said, "", "python to the tcp input");
    let (_, said) = py_tls_send(syslog, &ca.path, None, &syslog_frames(100));
    assert_eq!(said, "", "python to the syslog input");

    sink.wait_records(450);
    assert_exact_seqs(
        &seqs_of(&sink, "app.http", |r| str_field(r, "message")),
        100,
    );
    assert_exact_seqs(&seqs_of(&sink, "otel.in", |r| str_field(r, "body")), 50);
    assert_exact_seqs(&seqs_of(&sink, "tcp.in", |r| str_field(r, "message")), 200);
    let sys = seqs_of(&sink, "sys.user.info", |r| str_field(r, "message"));
    assert_eq!(sys, (0..100).collect::<Vec<_>>(), "syslog: in order");
    assert_eq!(sink.records().len(), 450);
}

#[test]
fn mtls_listeners_refuse_bad_clients_while_a_good_one_delivers() {
    if skip_without_python_and_curl() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "ca");
    let other = Ca::new(dir.path(), "other");
    let server = ca.issue("server", &["localhost", "127.0.0.1"]);
    let good = ca.issue("good", &["good.example"]);
    let stranger = other.issue("stranger", &["stranger.example"]);
    let sink = Sink::start(SinkOpts::default());
    let ports = [free_port(), free_port(), free_port(), free_port()];
    let d = tls_listeners(dir.path(), ports, &server, Some(&ca.path), &sink);
    let [http, _, tcp, _] = ports;
    let post = |from: u64, n: u64| {
        let body = ndjson(from, n);
        format!(
            "POST /app.http HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-ndjson\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let lines = |r: std::ops::Range<u64>| r.map(|s| message_for(s) + "\n").collect::<String>();
    let good_http = |from: u64| {
        let code = curl_https(
            &format!("https://127.0.0.1:{http}/app.http"),
            &ca.path,
            "application/x-ndjson",
            &ndjson(from, 10),
            &[
                "--cert",
                good.cert.to_str().unwrap(),
                "--key",
                good.key.to_str().unwrap(),
            ],
        );
        assert_eq!(code, "200", "curl with a good certificate");
    };
    good_http(0);
    assert_eq!(
        py_tls_send(tcp, &ca.path, Some(&good), lines(0..10).as_bytes()).1,
        ""
    );
    sink.wait_records(20);

    for (listener, port, data) in [("http", http, post(100, 5)), ("tcp", tcp, lines(100..105))] {
        for (what, cert, reason) in [
            ("no certificate", None, "peer sent no certificates"),
            ("another CA's certificate", Some(&stranger), "UnknownIssuer"),
        ] {
            let (local, _) = py_tls_send(port, &ca.path, cert, data.as_bytes());
            let peer = format!("peer=127.0.0.1:{local}");
            wait_until(
                WAIT,
                &format!("{listener}: the line refusing {what}"),
                || !lines_with(&d.stderr(), &["TLS handshake failed", &peer, reason]).is_empty(),
            );
        }
    }
    // The listeners go on for good clients; nothing of the refused arrived.
    good_http(10);
    assert_eq!(
        py_tls_send(tcp, &ca.path, Some(&good), lines(10..20).as_bytes()).1,
        ""
    );
    sink.wait_records(40);
    assert_exact_seqs(&seqs_of(&sink, "app.http", |r| str_field(r, "message")), 20);
    assert_exact_seqs(&seqs_of(&sink, "tcp.in", |r| str_field(r, "message")), 20);
    assert_eq!(sink.records().len(), 40);
}

#[test]
fn http_otlp_tcp_and_syslog_outputs_send_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "ca");
    let server = ca.issue("server", &["localhost", "127.0.0.1"]);
    let client = ca.issue("sender", &["sender.example"]);
    let sink = Sink::start(SinkOpts::default());
    let ports = [free_port(), free_port(), free_port(), free_port()];
    // mTLS: every output presents its client certificate.
    let _r = tls_listeners(dir.path(), ports, &server, Some(&ca.path), &sink);
    let [http, otel, tcp, syslog] = ports;
    let tls = |extra: &str| tls_table("output", Some(&client), Some(&ca.path), extra);
    let buffer = "[output.buffer]\nflush_interval = \"50ms\"\n";
    let sections = format!(
        "[[output]]\ntype = \"http\"\nmatch = \"to.http\"\n\
         endpoint = \"https://127.0.0.1:{http}/${{tag}}\"\n{buffer}{}\n\
         [[output]]\ntype = \"opentelemetry\"\nmatch = \"to.otel\"\n\
         endpoint = \"https://localhost:{otel}/v1/logs\"\n{buffer}{}\n\
         [[output]]\ntype = \"tcp\"\nmatch = \"to.tcp\"\naddress = \"127.0.0.1:{tcp}\"\n\
         format = \"single_value\"\n{buffer}{}\n\
         [[output]]\ntype = \"syslog\"\nmatch = \"to.syslog\"\naddress = \"127.0.0.1:{syslog}\"\n\
         protocol = \"tcp\"\n{buffer}{}\n",
        tls(""),
        tls(""),
        tls("server_name = \"localhost\"\n"),
        tls("server_name = \"localhost\"\n"),
    );
    let (_s, port) = start_forward_daemon(dir.path(), &sections);
    let mut s = Sender::tcp(port);
    for tag in ["to.http", "to.otel", "to.tcp", "to.syslog"] {
        s.send_seqs(tag, 300, 100);
    }
    sink.wait_records(1200);
    let http_seqs = seqs_of(&sink, "to.http", |r| str_field(r, "message"));
    assert_eq!(http_seqs, (0..300).collect::<Vec<_>>(), "http: in order");
    let otel = seqs_of(&sink, "otel.in", |r| {
        str_field(field_of(r, "body")?, "message")
    });
    assert_eq!(
        otel,
        (0..300).collect::<Vec<_>>(),
        "opentelemetry: in order"
    );
    let tcp_seqs = seqs_of(&sink, "tcp.in", |r| str_field(r, "message"));
    assert_eq!(tcp_seqs, (0..300).collect::<Vec<_>>(), "tcp: in order");
    let sys = seqs_of(&sink, "sys.user.info", |r| str_field(r, "message"));
    assert_eq!(sys, (0..300).collect::<Vec<_>>(), "syslog: in order");
    assert_eq!(sink.records().len(), 1200);
}

#[test]
fn check_names_tls_errors_of_every_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "hello\n").unwrap();
    let missing = Path::new("/nonexistent/server.pem");
    let tls = |lines: &str, section: &str| format!("[{section}.tls]\n{lines}");
    let certs = format!("cert = {missing:?}\nkey = {junk:?}\n");
    let input = |kind: &str, extra: &str| {
        format!("[[input]]\ntype = \"{kind}\"\nbind = \"127.0.0.1:0\"\n{extra}")
    };
    let output =
        |kind: &str, extra: &str| format!("[[output]]\ntype = \"{kind}\"\nmatch = \"**\"\n{extra}");
    let cases = [
        (
            input("http", &tls(&certs, "input")),
            ":9: key `tls.cert`:".to_string(),
            format!("cannot read {missing:?}"),
        ),
        (
            input("opentelemetry", &tls(&certs, "input")),
            ":9: key `tls.cert`:".into(),
            format!("cannot read {missing:?}"),
        ),
        (
            input("tcp", &format!("tag = \"t\"\n{}", tls(&certs, "input"))),
            ":10: key `tls.cert`:".into(),
            format!("cannot read {missing:?}"),
        ),
        (
            input(
                "syslog",
                &format!("tag = \"t\"\nprotocol = \"tcp\"\n{}", tls(&certs, "input")),
            ),
            ":11: key `tls.cert`:".into(),
            format!("cannot read {missing:?}"),
        ),
        (
            input("syslog", &format!("tag = \"t\"\n{}", tls(&certs, "input"))),
            ":9: key `tls`:".into(),
            "TLS is for TCP".into(),
        ),
        (
            input("scribe", &tls(&certs, "input")),
            ":9: key `tls.cert`:".into(),
            format!("cannot read {missing:?}"),
        ),
        (
            output(
                "tcp",
                &format!(
                    "address = \"h:1\"\n{}",
                    tls(&format!("ca = {junk:?}\n"), "output")
                ),
            ),
            ":10: key `tls.ca`:".into(),
            format!("{junk:?} holds no PEM certificate"),
        ),
        (
            output(
                "syslog",
                &format!("address = \"h:1\"\n{}", tls("verify = false\n", "output")),
            ),
            ":9: key `tls`:".into(),
            "TLS is for TCP".into(),
        ),
        (
            output(
                "scribe",
                &format!(
                    "address = \"h:1\"\n{}",
                    tls(&format!("ca = {missing:?}\n"), "output")
                ),
            ),
            ":10: key `tls.ca`:".into(),
            format!("cannot read {missing:?}"),
        ),
        (
            output(
                "opentelemetry",
                &format!(
                    "endpoint = \"https://h/v1/logs\"\n{}",
                    tls(&format!("ca = {junk:?}\n"), "output")
                ),
            ),
            ":10: key `tls.ca`:".into(),
            format!("{junk:?} holds no PEM certificate"),
        ),
        (
            output(
                "opentelemetry",
                &format!(
                    "endpoint = \"http://h/v1/logs\"\n{}",
                    tls(&format!("ca = {junk:?}\n"), "output")
                ),
            ),
            ":9: key `tls`:".into(),
            "the endpoint is http://: write https://".into(),
        ),
    ];
    assert_check_errors(dir.path(), CHECK_BASE, &cases);
}

/// A forward output reaches a TLS server set up as Fluentd's in_forward
/// sets up OpenSSL (tests/fluentd_tls/server.rb: TLS 1.2, peer
/// verification on, no session id context), which refuses any resumed
/// session with an internal-error alert: every connection, heartbeats
/// included, completes a full handshake, every event arrives, and each
/// closed connection ends with a close_notify (OpenSSL's "unexpected eof
/// while reading" otherwise).
#[test]
fn forward_output_reaches_a_tls_server_set_up_as_fluentds_in_forward() {
    if skip_unless(
        Command::new("ruby").arg("--version").output().is_ok(),
        "ruby is not installed",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "ca");
    let server = ca.issue("server", &["localhost", "127.0.0.1"]);
    let sink = Sink::start(SinkOpts::default());
    let (relay_port, tls_port) = (free_port(), free_port());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fluentd_tls/server.rb");
    let log = dir.path().join("fluentd-tls.log");
    let mut ruby = Command::new("ruby")
        .arg(script)
        .arg(tls_port.to_string())
        .arg(&server.cert)
        .arg(&server.key)
        .arg(sink.port.to_string())
        .stdout(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait_until(WAIT, "the Ruby TLS server listening", || {
        read_file(&log).contains("listening")
    });
    let config = format!(
        "[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:{relay_port}\"\n\n\
         [[output]]\ntype = \"forward\"\nmatch = \"**\"\n\
         require_ack_response = true\nheartbeat_interval = \"100ms\"\n\
         [[output.server]]\naddress = \"127.0.0.1:{tls_port}\"\n\
         [output.buffer]\nflush_interval = \"50ms\"\n{}",
        tls_table(
            "output",
            None,
            Some(&ca.path),
            "server_name = \"localhost\"\n"
        )
    );
    let mut d = Daemon::start(dir.path(), "relay", &config, None);
    d.wait_port(relay_port);
    let mut s = Sender::tcp(relay_port);
    s.send_seqs("fluentd.tls", 5_000, 500);
    sink.wait_records(5_000);
    // Heartbeats open a connection each: wait for a few after the first.
    wait_until(WAIT, "heartbeat connections accepted", || {
        read_file(&log).matches("accepted").count() >= 6
    });
    assert!(d.terminate().success());
    let _ = ruby.kill();
    let _ = ruby.wait();
    assert_exact_seqs(&sink.seqs(), 5_000);
    let text = read_file(&log);
    let errors: Vec<&str> = text.lines().filter(|l| l.contains("ERROR")).collect();
    assert!(
        errors.is_empty(),
        "the server logged TLS errors: {errors:?}"
    );
}
