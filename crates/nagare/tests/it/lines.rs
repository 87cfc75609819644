//! The raw line inputs (`tcp`, `udp`, `unix`) and the `tcp` output, end to
//! end: lines sent by socat, Python and plain sockets arrive as events in a
//! file output by content, count and order; bad input (garbage, oversized
//! lines, slow and idle connections, a connection limit) costs only its own
//! connection.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;

use crate::common::lines::*;
use crate::common::*;

fn numbered(prefix: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("{prefix} {i} {}", "x".repeat(i % 40)))
        .collect()
}

#[test]
fn tcp_lines_from_socat_and_a_json_parser() {
    if skip_unless(have("socat"), "socat is not installed") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (plain, json) = (free_port(), free_port());
    let mut d = daemon(
        dir.path(),
        &format!(
            r#"
[[input]]
type = "tcp"
bind = "127.0.0.1:{plain}"
tag = "raw.plain"
source_address_key = "from"

[[input]]
type = "tcp"
bind = "127.0.0.1:{json}"
tag = "raw.json"
delimiter = "\r\n"
[input.parser]
type = "json"
"#
        ),
    );
    d.wait_port(plain);
    d.wait_port(json);
    // 3000 lines from socat, over one connection, in order.
    let lines = numbered("socat line", 3000);
    let file = dir.path().join("in.txt");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let st = Command::new("socat")
        .args([
            "-u",
            &format!("FILE:{}", file.display()),
            &format!("TCP:127.0.0.1:{plain}"),
        ])
        .status()
        .unwrap();
    assert!(st.success());
    // JSON records ended by CRLF; a line that is not JSON is kept with the reason.
    let mut s = TcpStream::connect(("127.0.0.1", json)).unwrap();
    s.write_all(b"{\"a\":1,\"message\":\"first\"}\r\nnot json\r\n{\"a\":2,\"message\":\"last\"}")
        .unwrap();
    drop(s);
    let ev = wait_events(dir.path(), 3003);
    assert_eq!(msgs(&of_tag(&ev, "raw.plain")), lines);
    assert!(ev
        .iter()
        .filter(|(t, _)| t == "raw.plain")
        .all(|(_, r)| r["from"] == "127.0.0.1"));
    let js: Vec<&serde_json::Value> = ev
        .iter()
        .filter(|(t, _)| t == "raw.json")
        .map(|(_, r)| r)
        .collect();
    assert_eq!(js.len(), 3);
    assert_eq!(
        (js[0]["a"].as_i64(), js[0]["message"].as_str()),
        (Some(1), Some("first"))
    );
    assert_eq!(js[1]["message"], "not json");
    assert!(js[1]["parse_error"].is_string(), "{}", js[1]);
    // The last line had no delimiter: the end of the connection ended it.
    assert_eq!(
        (js[2]["a"].as_i64(), js[2]["message"].as_str()),
        (Some(2), Some("last"))
    );
    d.terminate();
    assert_eq!(events(dir.path()).len(), 3003);
}

#[test]
fn udp_and_unix_lines_from_python() {
    let dir = tempfile::tempdir().unwrap();
    let udp = free_port();
    let stream = dir.path().join("stream.sock");
    let dgram = dir.path().join("dgram.sock");
    let d = daemon(
        dir.path(),
        &format!(
            r#"
[[input]]
type = "udp"
bind = "127.0.0.1:{udp}"
tag = "raw.udp"
source_address_key = "from"

[[input]]
type = "unix"
path = "{stream}"
tag = "raw.stream"

[[input]]
type = "unix"
path = "{dgram}"
socket_type = "dgram"
tag = "raw.dgram"
source_address_key = "socket"
"#,
            stream = stream.display(),
            dgram = dgram.display()
        ),
    );
    for what in [
        format!(":{udp}"),
        stream.display().to_string(),
        dgram.display().to_string(),
    ] {
        d.wait_listening(&what);
    }
    // Python sends: datagrams of one and of two lines, and 500 lines over a
    // stream socket.
    let script = format!(
        r#"
import socket
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(0, 100, 2):
    u.sendto(("udp %d\nudp %d\n" % (i, i + 1)).encode(), ("127.0.0.1", {udp}))
g = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
for i in range(50):
    g.sendto(("dgram %d" % i).encode(), "{dgram}")
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect("{stream}")
s.sendall("".join("stream %d\n" % i for i in range(500)).encode())
s.close()
"#,
        dgram = dgram.display(),
        stream = stream.display()
    );
    let st = Command::new("python3")
        .arg("-c")
        .arg(&script)
        .status()
        .unwrap();
    assert!(st.success());
    let ev = wait_events(dir.path(), 650);
    let want = |p: &str, n: usize| (0..n).map(|i| format!("{p} {i}")).collect::<Vec<_>>();
    let mut got = msgs(&of_tag(&ev, "raw.udp"));
    got.sort_by_key(|m| m[4..].parse::<u32>().unwrap());
    assert_eq!(got, want("udp", 100), "every UDP line once");
    assert!(ev
        .iter()
        .filter(|(t, _)| t == "raw.udp")
        .all(|(_, r)| r["from"] == "127.0.0.1"));
    let mut got = msgs(&of_tag(&ev, "raw.dgram"));
    got.sort_by_key(|m| m[6..].parse::<u32>().unwrap());
    assert_eq!(got, want("dgram", 50));
    let socket = dgram.display().to_string();
    assert!(ev
        .iter()
        .filter(|(t, _)| t == "raw.dgram")
        .all(|(_, r)| r["socket"] == socket.as_str()));
    assert_eq!(
        msgs(&of_tag(&ev, "raw.stream")),
        want("stream", 500),
        "in order"
    );
}

/// Accepts one connection on `l` and reads `n` lines from it.
fn accept_lines(l: &TcpListener, n: usize) -> (TcpStream, Vec<String>) {
    let (c, _) = l.accept().unwrap();
    c.set_read_timeout(Some(WAIT)).unwrap();
    let mut r = BufReader::new(c.try_clone().unwrap());
    let mut got = Vec::new();
    let mut line = String::new();
    while got.len() < n {
        line.clear();
        assert!(
            r.read_line(&mut line).expect("a line within WAIT") > 0,
            "closed after {got:?}"
        );
        got.push(line.trim_end_matches('\n').to_string());
    }
    (c, got)
}

#[test]
fn tcp_output_writes_lines_and_reconnects() {
    let dir = tempfile::tempdir().unwrap();
    let (input, sink) = (free_port(), free_port());
    let l = TcpListener::bind(("127.0.0.1", sink)).unwrap();
    let config = format!(
        r#"
[[input]]
type = "tcp"
bind = "127.0.0.1:{input}"
tag = "out.test"

[[output]]
type = "tcp"
match = "**"
address = "127.0.0.1:{sink}"
format = "single_value"
[output.buffer]
flush_interval = "20ms"
retry_wait = "100ms"
"#
    );
    let mut d = Daemon::start(dir.path(), "tcp-out", &config, None);
    d.wait_port(input);
    let mut s = TcpStream::connect(("127.0.0.1", input)).unwrap();
    let lines = numbered("out", 300);
    let send = |s: &mut TcpStream, part: &[String]| {
        s.write_all((part.join("\n") + "\n").as_bytes()).unwrap()
    };
    send(&mut s, &lines[..100]);
    let (c, got) = accept_lines(&l, 100);
    assert_eq!(got, lines[..100]);
    // The receiver closes the connection: the next chunk goes over a new one.
    drop(c);
    send(&mut s, &lines[100..200]);
    let (c, got) = accept_lines(&l, 100);
    assert_eq!(got, lines[100..200]);
    // The receiver is gone: the chunk is retried with backoff until it is back.
    drop(c);
    drop(l);
    send(&mut s, &lines[200..]);
    d.wait_log(&format!("connecting to 127.0.0.1:{sink}"));
    let l = TcpListener::bind(("127.0.0.1", sink)).unwrap();
    let (_c, got) = accept_lines(&l, 100);
    assert_eq!(got, lines[200..]);
}

#[test]
fn tcp_output_json_format() {
    let dir = tempfile::tempdir().unwrap();
    let (input, sink) = (free_port(), free_port());
    let l = TcpListener::bind(("127.0.0.1", sink)).unwrap();
    let config = format!(
        r#"
[[input]]
type = "tcp"
bind = "127.0.0.1:{input}"
tag = "json.test"
[input.parser]
type = "json"

[[output]]
type = "tcp"
match = "**"
address = "127.0.0.1:{sink}"
[output.buffer]
flush_interval = "20ms"
"#
    );
    let mut d = Daemon::start(dir.path(), "tcp-json", &config, None);
    d.wait_port(input);
    let mut s = TcpStream::connect(("127.0.0.1", input)).unwrap();
    s.write_all(b"{\"n\":1,\"s\":\"a\"}\n{\"n\":2,\"s\":\"b\"}\n")
        .unwrap();
    let (_c, got) = accept_lines(&l, 2);
    let v: Vec<serde_json::Value> = got
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(v[0]["tag"], "json.test");
    assert_eq!(v[0]["record"], serde_json::json!({"n": 1, "s": "a"}));
    assert_eq!(v[1]["record"], serde_json::json!({"n": 2, "s": "b"}));
}

#[test]
fn bad_input_costs_only_its_own_connection() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (free_port(), free_port());
    let mut d = daemon(
        dir.path(),
        &format!(
            r#"
[[input]]
type = "tcp"
bind = "127.0.0.1:{a}"
tag = "bad.a"
max_line_size = "100B"
idle_timeout = "1s"

[[input]]
type = "tcp"
bind = "127.0.0.1:{b}"
tag = "bad.b"
max_connections = 2
"#
        ),
    );
    d.wait_port(a);
    d.wait_port(b);
    // Garbage bytes are a line like any other; an oversized line is cut to
    // max_line_size and its rest skipped; the connection goes on.
    let mut c = TcpStream::connect(("127.0.0.1", a)).unwrap();
    let mut big = vec![b'B'; 1000];
    big.push(b'\n');
    c.write_all(b"good 0\n\x00\xff\xfe garbage\n").unwrap();
    c.write_all(&big).unwrap();
    c.write_all(b"good 1\n").unwrap();
    drop(c);
    let ev = wait_events(dir.path(), 4);
    let m = msgs(&of_tag(&ev, "bad.a"));
    assert_eq!(m[0], "good 0");
    assert!(m[1].ends_with(" garbage"), "{:?}", m[1]);
    assert_eq!(m[2], "B".repeat(100));
    assert_eq!(m[3], "good 1");
    d.wait_log("longer than the limit");
    // A slow client trickling one line that never ends is closed after idle_timeout.
    let slow = TcpStream::connect(("127.0.0.1", a)).unwrap();
    let slow_peer = slow.local_addr().unwrap().to_string();
    let trickle = trickle(slow);
    assert!(d.wait_bad_peer(&slow_peer)[0].contains("no complete message"));
    assert!(
        trickle.join().unwrap(),
        "the slow client's writes failed once closed"
    );
    let mut c = TcpStream::connect(("127.0.0.1", a)).unwrap();
    c.write_all(b"good 2\n").unwrap();
    drop(c);
    // The connection limit: with two open, a third is closed at once; the
    // open ones go on.
    let mut first = TcpStream::connect(("127.0.0.1", b)).unwrap();
    first.write_all(b"b 0\n").unwrap();
    wait_events(dir.path(), 6);
    let _second = TcpStream::connect(("127.0.0.1", b)).unwrap();
    let mut third = TcpStream::connect(("127.0.0.1", b)).unwrap();
    let third_peer = third.local_addr().unwrap().to_string();
    assert!(closed_by_peer(&mut third));
    assert!(d.wait_bad_peer(&third_peer)[0].contains("max_connections"));
    first.write_all(b"b 1\n").unwrap();
    let ev = wait_events(dir.path(), 7);
    assert_eq!(
        msgs(&of_tag(&ev, "bad.a")),
        ["good 0", &m[1], &"B".repeat(100), "good 1", "good 2"]
    );
    assert_eq!(msgs(&of_tag(&ev, "bad.b")), ["b 0", "b 1"]);
    d.terminate();
    assert_eq!(events(dir.path()).len(), 7, "nothing more, nothing lost");
}

#[test]
fn bad_input_on_udp_and_unix_sockets() {
    let dir = tempfile::tempdir().unwrap();
    let udp = free_port();
    let path = dir.path().join("bad.sock");
    let d = daemon(
        dir.path(),
        &format!(
            r#"
[[input]]
type = "udp"
bind = "127.0.0.1:{udp}"
tag = "bad.udp"
max_line_size = "100B"
[input.parser]
type = "json"

[[input]]
type = "unix"
path = "{path}"
tag = "bad.unix"
max_line_size = "100B"
max_connections = 1
idle_timeout = "1s"
"#,
            path = path.display()
        ),
    );
    d.wait_listening(&format!(":{udp}"));
    d.wait_listening(&path.display().to_string());
    // UDP: garbage and a truncated JSON record are kept with parse_error, an
    // oversized line is cut; the good datagram after them arrives.
    let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let big = format!("{{\"m\":\"{}\"}}", "B".repeat(1000));
    for d in [
        &b"\x00\xff garbage"[..],
        b"{\"m\":\"cut",
        big.as_bytes(),
        b"{\"m\":\"good\"}",
    ] {
        u.send_to(d, ("127.0.0.1", udp)).unwrap();
    }
    let ev = wait_events(dir.path(), 4);
    let r: Vec<&serde_json::Value> = ev
        .iter()
        .filter(|(t, _)| t == "bad.udp")
        .map(|(_, r)| r)
        .collect();
    assert!(
        r[0]["parse_error"].is_string() && r[1]["parse_error"].is_string(),
        "{r:?}"
    );
    assert_eq!(r[1]["message"], "{\"m\":\"cut");
    assert_eq!(
        r[2]["message"].as_str().unwrap().len(),
        100,
        "cut to max_line_size: {}",
        r[2]
    );
    assert_eq!(r[3]["m"], "good");
    // UNIX stream: the one connection allowed trickles (slowloris) and is
    // closed after idle_timeout; meanwhile a second is refused; afterwards
    // a good one gets through.
    let mut slow = std::os::unix::net::UnixStream::connect(&path).unwrap();
    slow.write_all(b"never ends").unwrap();
    let mut second = std::os::unix::net::UnixStream::connect(&path).unwrap();
    second.set_read_timeout(Some(WAIT)).unwrap();
    assert!(
        matches!(second.read(&mut [0u8; 8]), Ok(0) | Err(_)),
        "refused at once"
    );
    let peer = format!("unix:{}", path.display());
    wait_until(WAIT, "both unix connections logged", || {
        bad_peer_lines(&d.stderr(), &peer).len() >= 2
    });
    let lines = bad_peer_lines(&d.stderr(), &peer);
    assert!(lines[0].contains("max_connections"), "{lines:?}");
    assert!(lines[1].contains("no complete message"), "{lines:?}");
    let mut good = std::os::unix::net::UnixStream::connect(&path).unwrap();
    good.write_all(b"good unix\n").unwrap();
    drop(good);
    let ev = wait_events(dir.path(), 5);
    assert_eq!(msgs(&of_tag(&ev, "bad.unix")), ["good unix"]);
}

#[test]
fn check_reports_bad_line_input_options() {
    let cases: &[(&str, &str, &str)] = &[
        ("[[input]]\ntype = \"tcp\"\ntag = \"t\"\n", ":5:", "bind"),
        (
            "[[input]]\ntype = \"tcp\"\ntag = \"t\"\nbind = \"127.0.0.1:5170\"\ndelimiter = \"\"\n",
            ":9: key `delimiter`:",
            "must not be empty",
        ),
        (
            "[[input]]\ntype = \"udp\"\ntag = \"t\"\nbind = \"127.0.0.1:5170\"\n[input.parser]\ntype = \"multiline\"\nformat_firstline = \"^x\"\n",
            ":10: key `parser.type`:",
            "\"multiline\" joins lines of a file",
        ),
        (
            "[[input]]\ntype = \"unix\"\ntag = \"t\"\npath = \"/tmp/x.sock\"\nsocket_type = \"seqpacket\"\n",
            ":9: key `socket_type`:",
            "seqpacket",
        ),
        (
            "[[output]]\ntype = \"tcp\"\nmatch = \"**\"\naddress = \"127.0.0.1\"\n",
            ":8: key `address`:",
            "HOST:PORT",
        ),
    ];
    assert_check_errors(tempfile::tempdir().unwrap().path(), CHECK_BASE, cases);
}
