//! The scribe input and output against Apache Thrift's Python library with
//! code the Thrift compiler generates, at test time, from the Scribe IDL
//! (tests/scribe/scribe.thrift): a Python client sends into nagare, nagare
//! sends to a Python server; TRY_LATER both ways; bad input closes only its
//! own connection; both over mutual TLS (TSSLSocket, TSSLServerSocket).
//!
//! Needs the `thrift` compiler (Debian: thrift-compiler) and makes the
//! Python venv of tests/scribe/setup.sh when it is missing.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::common::*;

fn scribe_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scribe")
}

/// Apache Thrift for Python, and the code generated from scribe.thrift.
struct Thrift {
    python: PathBuf,
    gen: tempfile::TempDir,
}

/// Tests of this file set up the venv one at a time.
static SETUP: Mutex<()> = Mutex::new(());

/// The Thrift compiler's code for scribe.thrift and a Python that has
/// Apache Thrift's library; None when the test skips.
fn thrift() -> Option<Thrift> {
    let compiler = Command::new("thrift")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if skip_unless(
        compiler,
        "the Thrift compiler `thrift` is not installed (Debian: thrift-compiler)",
    ) {
        return None;
    }
    let python = scribe_dir().join(".venv/bin/python");
    {
        let _one = SETUP.lock().unwrap_or_else(|e| e.into_inner());
        let has_thrift = |p: &Path| {
            Command::new(p)
                .args(["-c", "import thrift"])
                .status()
                .is_ok_and(|s| s.success())
        };
        if !has_thrift(&python) {
            let _ = Command::new("bash")
                .arg(scribe_dir().join("setup.sh"))
                .status();
        }
        if skip_unless(
            has_thrift(&python),
            "Apache Thrift's Python library could not be installed (tests/scribe/setup.sh)",
        ) {
            return None;
        }
    }
    let gen = tempfile::tempdir().unwrap();
    let out = Command::new("thrift")
        .args(["--gen", "py", "-out"])
        .arg(gen.path())
        .arg(scribe_dir().join("scribe.thrift"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "thrift --gen py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(Thrift { python, gen })
}

/// A child process killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Thrift {
    fn script(&self, name: &str) -> Command {
        let mut c = Command::new(&self.python);
        c.arg(scribe_dir().join(name)).arg(self.gen.path());
        c
    }

    /// Starts client.py (see its doc): `calls` Log calls of `per_call`
    /// entries, categories taken in turn, messages "text" or "json".
    fn client(&self, port: u16, calls: u32, per_call: u32, categories: &str, kind: &str) -> Proc {
        self.client_tls(port, calls, per_call, categories, kind, &[])
    }

    /// client.py over TLS: `tls` is [CA] or [CA, CERT, KEY] (none: plain).
    fn client_tls(
        &self,
        port: u16,
        calls: u32,
        per_call: u32,
        categories: &str,
        kind: &str,
        tls: &[&Path],
    ) -> Proc {
        let c = self
            .script("client.py")
            .args([port.to_string(), calls.to_string(), per_call.to_string()])
            .args([categories, kind])
            .args(tls)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Proc(c)
    }

    /// Starts server.py on `port` (see its doc), writing to `out`; waits until it accepts.
    fn server(&self, port: u16, out: &Path, refuse: &str) -> Proc {
        self.server_tls(port, out, refuse, &[])
    }

    /// server.py over TLS: `tls` is [CERT, KEY] or [CERT, KEY, CA] (none: plain).
    fn server_tls(&self, port: u16, out: &Path, refuse: &str, tls: &[&Path]) -> Proc {
        let c = self
            .script("server.py")
            .arg(port.to_string())
            .arg(out)
            .arg(refuse)
            .args(tls)
            .spawn()
            .unwrap();
        let p = Proc(c);
        wait_port(port);
        p
    }
}

/// Waits (bounded) for a client to end; returns its (sent, try_later).
fn client_done(mut p: Proc) -> (u64, u64) {
    let start = Instant::now();
    while p.0.try_wait().unwrap().is_none() {
        assert!(
            start.elapsed() < WAIT * 3,
            "the Python client did not finish"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (mut out, mut err) = (String::new(), String::new());
    p.0.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    p.0.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(p.0.wait().unwrap().success(), "client failed: {err}");
    let v: serde_json::Value =
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{out:?}: {e}"));
    (
        v["sent"].as_u64().unwrap(),
        v["try_later"].as_u64().unwrap(),
    )
}

fn message_field(r: &rmpv::Value) -> String {
    field_of(r, "message")
        .and_then(|v| v.as_str())
        .unwrap_or_else(|| panic!("no message in {r}"))
        .to_string()
}

#[test]
fn python_client_to_scribe_input() {
    let Some(thrift) = thrift() else { return };
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let (text_port, json_port, mon) = (free_port(), free_port(), free_port());
    let cfg = format!(
        r#"[monitor]
bind = "127.0.0.1:{mon}"
[[input]]
type = "scribe"
bind = "127.0.0.1:{text_port}"
add_prefix = "scribe"
[[input]]
type = "scribe"
bind = "127.0.0.1:{json_port}"
format = "json"
{}"#,
        forward_output_to("**", sink.port)
    );
    let mut d = Daemon::start(dir.path(), "scribe", &cfg, Some(mon));
    d.wait_port(text_port);
    d.wait_port(json_port);

    // 20 calls of 100 alternate between two categories; 10 calls of 50 JSON messages.
    let text = thrift.client(text_port, 20, 100, "app,db", "text");
    let json = thrift.client(json_port, 10, 50, "json.events", "json");
    assert_eq!(client_done(text), (2000, 0));
    assert_eq!(client_done(json), (500, 0));
    sink.wait_records(2500);

    // Each category's messages in the order sent: call i has entries i*100..i*100+100.
    for (tag, parity) in [("scribe.app", 0), ("scribe.db", 1)] {
        let want: Vec<String> = (0..20u64)
            .filter(|i| i % 2 == parity)
            .flat_map(|i| i * 100..i * 100 + 100)
            .map(|s| format!("message {s}"))
            .collect();
        let got: Vec<String> = sink.records_of(tag).iter().map(message_field).collect();
        assert_eq!(got, want, "{tag}");
    }
    let want: Vec<rmpv::Value> = (0..500u64)
        .map(|s| {
            m(&[
                ("seq", rmpv::Value::from(s)),
                ("text", rmpv::Value::from(format!("message {s}"))),
            ])
        })
        .collect();
    assert_eq!(sink.records_of("json.events"), want);

    assert_eq!(d.metric("bad_input_total", "scribe#0"), 0);
    assert!(d.terminate().success());
    sink.wait_disconnected();
    assert_eq!(sink.records().len(), 2500, "nothing more arrived");
}

#[test]
fn scribe_output_to_python_server() {
    let Some(thrift) = thrift() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("server.jsonl");
    let server_port = free_port();
    // Calls 1 to 3 are answered TRY_LATER: the first chunk's second call of
    // 70 entries, twice more on the retries.
    let _server = thrift.server(server_port, &out, "1,2,3");
    let sections = format!(
        r#"[[output]]
type = "scribe"
match = "scribe.**"
address = "127.0.0.1:{server_port}"
remove_prefix = "scribe"
entries_per_call = 70
[output.buffer]
flush_interval = "50ms"
retry_wait = "50ms"
retry_max_interval = "100ms"
[[output]]
type = "scribe"
match = "json.**"
address = "127.0.0.1:{server_port}"
format = "json"
add_newline = true
[output.buffer]
flush_interval = "50ms"
"#
    );
    let (d, port) = start_forward_daemon(dir.path(), &sections);
    let mut s = Sender::tcp(port);
    // One frame: the first chunk holds all 1000 events (15 calls of 70).
    s.send_seqs("scribe.app.web", 1000, 1000);
    wait_file_lines(&out, 1000);
    // Then the other output (so the refused calls were all the first's).
    s.send_seqs("json.x", 100, 50);
    s.finish();

    let text = wait_file_lines(&out, 1100);
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let app: Vec<String> = lines
        .iter()
        .filter(|v| v["category"] == "app.web")
        .map(|v| v["message"].as_str().unwrap().to_string())
        .collect();
    let want: Vec<String> = (0..1000).map(message_for).collect();
    assert_eq!(
        app, want,
        "every event once, in order, after three TRY_LATERs"
    );
    let json: Vec<serde_json::Value> = lines
        .iter()
        .filter(|v| v["category"] == "json.x")
        .map(|v| {
            let m = v["message"].as_str().unwrap();
            assert!(m.ends_with('\n'), "add_newline: {m:?}");
            serde_json::from_str(m).unwrap()
        })
        .collect();
    let want: Vec<serde_json::Value> = (0..100)
        .map(|s| serde_json::json!({"seq": s, "message": message_for(s)}))
        .collect();
    assert_eq!(json, want);
    assert_eq!(lines.len(), 1100);
    assert!(
        d.metric("retries_total", "scribe#0") >= 3,
        "{}",
        d.metrics()
    );
}

#[test]
fn try_later_while_the_buffer_is_full() {
    let Some(thrift) = thrift() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (port, mon, sink_port) = (free_port(), free_port(), free_port());
    // Nothing listens on sink_port yet: the buffer fills and stays full.
    // Calls wait 100 ms for room, then are answered TRY_LATER.
    let cfg = scribe_into_small_buffer(mon, port, sink_port, "100ms");
    let mut d = Daemon::start(dir.path(), "scribe", &cfg, Some(mon));
    d.wait_port(port);
    let client = thrift.client(port, 100, 50, "full", "text");
    // The client was told TRY_LATER (and keeps sending that call again).
    wait_until(WAIT, "a call answered TRY_LATER", || {
        d.metric("rejected_events_total", "scribe#0") > 0
    });
    let sink = Sink::start_on(sink_port, SinkOpts::default());
    let (sent, try_later) = client_done(client);
    assert_eq!(sent, 5000);
    assert!(try_later > 0, "the client saw TRY_LATER");
    five_thousand_in_order(&sink, "full");
    assert!(d.terminate().success());
    sink.wait_disconnected();
    assert_eq!(sink.records().len(), 5000);
}

/// A scribe input whose calls wait `wait_for_room` for room in a 32 KiB
/// buffer, forwarding to `sink_port` (retried every 100–200 ms while
/// nothing listens there).
fn scribe_into_small_buffer(mon: u16, port: u16, sink_port: u16, wait_for_room: &str) -> String {
    format!(
        r#"[monitor]
bind = "127.0.0.1:{mon}"
[[input]]
type = "scribe"
bind = "127.0.0.1:{port}"
wait_for_room = "{wait_for_room}"
[[output]]
type = "forward"
match = "**"
heartbeat_interval = "100ms"
[[output.server]]
address = "127.0.0.1:{sink_port}"
[output.buffer]
flush_interval = "50ms"
chunk_limit_size = "8KiB"
total_limit_size = "32KiB"
retry_wait = "100ms"
retry_max_interval = "200ms"
"#
    )
}

#[test]
fn a_call_waits_for_room_instead_of_try_later() {
    let Some(thrift) = thrift() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (port, mon, sink_port) = (free_port(), free_port(), free_port());
    // Nothing listens on sink_port yet: the buffer fills, and the call
    // that finds it full waits (wait_for_room) until the sink takes chunks.
    let cfg = scribe_into_small_buffer(mon, port, sink_port, "60s");
    let mut d = Daemon::start(dir.path(), "scribe", &cfg, Some(mon));
    d.wait_port(port);
    // 5,000 events of about 30 bytes: far more than the buffer holds.
    let client = thrift.client(port, 100, 50, "held", "text");
    wait_until(WAIT, "the buffer is full", || {
        d.metric("buffer_bytes", "forward#0") > 24 * 1024
    });
    let sink = Sink::start_on(sink_port, SinkOpts::default());
    let (sent, try_later) = client_done(client);
    assert_eq!(
        (sent, try_later),
        (5000, 0),
        "every call answered OK, none TRY_LATER"
    );
    assert_eq!(d.metric("rejected_events_total", "scribe#0"), 0);
    five_thousand_in_order(&sink, "held");
    assert!(d.terminate().success());
}

// ------------------------------------------------------------ bad input

/// A Log call as Thrift's binary protocol frames it (written here so bad
/// variants can be made of it; the Python tests above prove the format).
fn log_call(seqid: i32, category: &str, messages: &[String]) -> Vec<u8> {
    let mut b = Vec::new();
    let put = |b: &mut Vec<u8>, s: &[u8]| {
        b.extend_from_slice(&(s.len() as i32).to_be_bytes());
        b.extend_from_slice(s);
    };
    b.extend_from_slice(&0x8001_0001u32.to_be_bytes());
    put(&mut b, b"Log");
    b.extend_from_slice(&seqid.to_be_bytes());
    b.extend_from_slice(&[15, 0, 1, 12]);
    b.extend_from_slice(&(messages.len() as i32).to_be_bytes());
    for m in messages {
        b.extend_from_slice(&[11, 0, 1]);
        put(&mut b, category.as_bytes());
        b.extend_from_slice(&[11, 0, 2]);
        put(&mut b, m.as_bytes());
        b.push(0);
    }
    b.push(0);
    let mut f = (b.len() as i32).to_be_bytes().to_vec();
    f.extend_from_slice(&b);
    f
}

/// Sends a call on `c` and returns the result code of its answer.
fn call(c: &mut TcpStream, seqid: i32, category: &str, messages: &[String]) -> i32 {
    c.write_all(&log_call(seqid, category, messages)).unwrap();
    let mut head = [0u8; 4];
    c.read_exact(&mut head).unwrap();
    let mut body = vec![0u8; i32::from_be_bytes(head) as usize];
    c.read_exact(&mut body).unwrap();
    // ... i32 seqid, then field (I32, id 0): the result code, then STOP.
    let n = body.len();
    assert_eq!(&body[n - 8..n - 5], &[8, 0, 0], "a Log reply: {body:?}");
    i32::from_be_bytes(body[n - 5..n - 1].try_into().unwrap())
}

/// True once the peer closed `c` (read gives EOF or a reset) within WAIT.
fn closed(c: &mut TcpStream) -> bool {
    c.set_read_timeout(Some(WAIT)).unwrap();
    let mut b = [0u8; 256];
    loop {
        match c.read(&mut b) {
            Ok(0) | Err(_) => return true,
            Ok(_) => continue,
        }
    }
}

/// What a bad connection does.
type Misbehave = Box<dyn Fn(&mut TcpStream)>;

#[test]
fn bad_input_closes_only_its_connection() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let (port, mon) = (free_port(), free_port());
    let cfg = format!(
        r#"[monitor]
bind = "127.0.0.1:{mon}"
[[input]]
type = "scribe"
bind = "127.0.0.1:{port}"
max_frame_size = "64KiB"
request_timeout = "1s"
max_connections = 3
{}"#,
        forward_output_to("**", sink.port)
    );
    let mut d = Daemon::start(dir.path(), "scribe", &cfg, Some(mon));
    d.wait_port(port);
    let mut good = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut sent = 0u64;
    let mut send_good = |good: &mut TcpStream| {
        let msgs: Vec<String> = (sent..sent + 10).map(|s| format!("good {s}")).collect();
        assert_eq!(call(good, sent as i32, "good", &msgs), 0, "OK");
        sent += 10;
    };
    send_good(&mut good);

    let cases: Vec<(&str, Misbehave)> = vec![
        (
            "malformed Thrift message",
            Box::new(|c| c.write_all(b"\0\0\0\x05hello").unwrap()),
        ),
        (
            "closed inside a frame",
            Box::new(|c| {
                let f = log_call(1, "cut", &["a message".into()]);
                c.write_all(&f[..f.len() / 2]).unwrap();
                c.shutdown(std::net::Shutdown::Write).unwrap();
            }),
        ),
        (
            "larger than the limit",
            Box::new(|c| {
                let f = log_call(1, "big", &["x".repeat(100 * 1024)]);
                let _ = c.write_all(&f);
            }),
        ),
        (
            "larger than the limit",
            Box::new(|c| c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap()),
        ),
        (
            "slow client",
            Box::new(|c| {
                // A byte every 100 ms: never idle, never done (request_timeout 1s).
                let f = log_call(1, "slow", &["a message".into()]);
                for b in f.iter().take(40) {
                    if c.write_all(&[*b]).is_err() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }),
        ),
    ];
    for (i, (reason, bad)) in cases.iter().enumerate() {
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let peer = c.local_addr().unwrap().to_string();
        bad(&mut c);
        assert!(closed(&mut c), "case {i}: closed");
        let lines = d.wait_bad_peer(&peer);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].contains(reason),
            "case {i}: {reason:?} in {:?}",
            lines[0]
        );
        send_good(&mut good);
    }

    // The connection limit: the good one and two idle ones are open; a fourth is closed at once.
    let before = d.metric("connections_total", "scribe#0");
    let idle: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    d.wait_metric("connections_total", "scribe#0", before + 2);
    let mut over = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let peer = over.local_addr().unwrap().to_string();
    assert!(closed(&mut over), "the connection past the limit is closed");
    wait_until(WAIT, "the max_connections log line", || {
        bad_peer_lines(&d.stderr(), &peer)
            .iter()
            .any(|l| l.contains("max_connections"))
    });
    send_good(&mut good);
    drop(idle);
    // Their slots come back: a new connection is served.
    wait_until(
        WAIT,
        "a new connection served after the idle ones closed",
        || {
            let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let mut answer = Vec::new();
            c.write_all(&log_call(9, "probe", &[])).is_ok()
                && c.shutdown(std::net::Shutdown::Write).is_ok()
                && c.read_to_end(&mut answer).is_ok()
                && !answer.is_empty()
        },
    );
    send_good(&mut good);
    drop(good);

    assert_eq!(
        d.metric("bad_input_total", "scribe#0"),
        cases.len() as u64,
        "{}",
        d.stderr()
    );
    assert!(d.terminate().success());
    sink.wait_disconnected();
    let got: Vec<String> = sink.records_of("good").iter().map(message_field).collect();
    let want: Vec<String> = (0..sent).map(|s| format!("good {s}")).collect();
    assert_eq!(
        got, want,
        "every event of the good connection, once, in order"
    );
}

/// TLS both ways with Apache Thrift's own TLS transports: a TSSLSocket
/// client with its certificate sends to nagare's scribe input (mTLS), whose
/// events leave by the scribe output with nagare's client certificate to a
/// TSSLServerSocket server that requires one.
#[test]
fn thrift_ssl_client_and_server_over_mtls() {
    let Some(thrift) = thrift() else { return };
    let dir = tempfile::tempdir().unwrap();
    let ca = crate::common::tls::Ca::new(dir.path(), "ca");
    let server = ca.issue("server", &["localhost"]);
    let client = ca.issue("client", &["client.example"]);
    let out = dir.path().join("server.jsonl");
    let (port, server_port) = (free_port(), free_port());
    let _server = thrift.server_tls(
        server_port,
        &out,
        "",
        &[&server.cert, &server.key, &ca.path],
    );
    let cfg = format!(
        r#"[[input]]
type = "scribe"
bind = "127.0.0.1:{port}"
add_prefix = "in"
{}
[[output]]
type = "scribe"
match = "in.**"
address = "127.0.0.1:{server_port}"
remove_prefix = "in"
[output.buffer]
flush_interval = "50ms"
{}"#,
        crate::common::tls::tls_table("input", Some(&server), Some(&ca.path), ""),
        crate::common::tls::tls_table(
            "output",
            Some(&client),
            Some(&ca.path),
            "server_name = \"localhost\"\n"
        ),
    );
    let mut d = Daemon::start(dir.path(), "scribe", &cfg, None);
    d.wait_port(port);
    let sent = thrift.client_tls(
        port,
        10,
        50,
        "app,db",
        "text",
        &[&ca.path, &client.cert, &client.key],
    );
    assert_eq!(client_done(sent), (500, 0));
    let text = wait_file_lines(&out, 500);
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for (category, parity) in [("app", 0), ("db", 1)] {
        let got: Vec<&str> = lines
            .iter()
            .filter(|v| v["category"] == category)
            .map(|v| v["message"].as_str().unwrap())
            .collect();
        let want: Vec<String> = (0..10u64)
            .filter(|i| i % 2 == parity)
            .flat_map(|i| i * 50..i * 50 + 50)
            .map(|s| format!("message {s}"))
            .collect();
        assert_eq!(got, want, "{category}: every message once, in order");
    }
    assert_eq!(lines.len(), 500);
    assert!(d.terminate().success());
}

#[test]
fn check_reports_bad_options() {
    let dir = tempfile::tempdir().unwrap();
    assert_check_errors(
        dir.path(),
        CHECK_BASE,
        &[
            (
                "[[input]]\ntype = \"scribe\"\nbind = \"nowhere\"\n",
                ":7: key `bind`:",
                "expected HOST:PORT",
            ),
            (
                "[[input]]\ntype = \"scribe\"\nbind = \"127.0.0.1:0\"\nmax_connections = 0\n",
                ":8: key `max_connections`:",
                "at least 1",
            ),
            (
                "[[output]]\ntype = \"scribe\"\nmatch = \"**\"\naddress = \"scribe\"\n",
                ":8: key `address`:",
                "expected HOST:PORT",
            ),
            (
                "[[output]]\ntype = \"scribe\"\nmatch = \"**\"\naddress = \"h:1\"\nformat = \"xml\"\n",
                ":9: key `format`:",
                "Expected one of: \"text\", \"json\"",
            ),
        ],
    );
}

/// The sink holds "message 0" to "message 4999" under `tag`: every event
/// once, in order.
fn five_thousand_in_order(sink: &Sink, tag: &str) {
    sink.wait_records(5000);
    let got: Vec<String> = sink.records_of(tag).iter().map(message_field).collect();
    let want: Vec<String> = (0..5000).map(|s| format!("message {s}")).collect();
    assert_eq!(got, want, "every event once, in order");
}
