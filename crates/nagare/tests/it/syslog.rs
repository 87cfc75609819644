//! The `syslog` input and output, end to end, against senders and
//! receivers that are not nagare's: util-linux `logger` over UDP, TCP
//! (octet counting and newlines) and UNIX sockets, and rsyslog forwarding
//! to nagare (omfwd) and receiving from it (imtcp/imudp → omfile). Events
//! are checked by tag, fields, count and order; bad input (garbage, a cut
//! frame, oversized messages, a slow client, a connection limit) costs only
//! its own connection.

use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::common::lines::*;
use crate::common::*;

/// Runs logger with `args`, feeding `stdin` (one message per line) when given.
fn logger(args: &[&str], stdin: Option<&str>) {
    let mut c = Command::new("logger")
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .spawn()
        .expect("run logger");
    if let Some(text) = stdin {
        c.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    }
    let st = c.wait().unwrap();
    assert!(st.success(), "logger {args:?}: {st}");
}

fn lines_text(prefix: &str, n: usize) -> (String, Vec<String>) {
    let v: Vec<String> = (0..n).map(|i| format!("{prefix} {i}")).collect();
    (v.join("\n") + "\n", v)
}

#[test]
fn logger_over_udp_tcp_and_unix_sockets() {
    if skip_unless(have("logger"), "logger (util-linux) is not installed") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (udp, tcp) = (free_port(), free_port());
    let dgram = dir.path().join("log.sock");
    let stream = dir.path().join("stream.sock");
    let mut d = daemon(
        dir.path(),
        &format!(
            r#"
[[input]]
type = "syslog"
bind = "127.0.0.1:{udp}"
tag = "udp"
source_address_key = "from"
severity_key = "severity"

[[input]]
type = "syslog"
bind = "127.0.0.1:{tcp}"
protocol = "tcp"
tag = "tcp"

[[input]]
type = "syslog"
path = "{dgram}"
tag = "dgram"

[[input]]
type = "syslog"
path = "{stream}"
socket_type = "stream"
tag = "stream"
"#,
            dgram = dgram.display(),
            stream = stream.display()
        ),
    );
    d.wait_port(tcp);
    for what in [
        format!(":{udp}"),
        dgram.display().to_string(),
        stream.display().to_string(),
    ] {
        d.wait_listening(&what);
    }
    let (udp_s, tcp_s) = (udp.to_string(), tcp.to_string());
    let host = gethostname();
    // UDP: one RFC 3164 and one RFC 5424 message with structured data.
    logger(
        &[
            "--rfc3164",
            "-d",
            "-n",
            "127.0.0.1",
            "-P",
            &udp_s,
            "-t",
            "app",
            "-i",
            "-p",
            "auth.warn",
            "hello 3164",
        ],
        None,
    );
    logger(
        &[
            "--rfc5424",
            "-d",
            "-n",
            "127.0.0.1",
            "-P",
            &udp_s,
            "-t",
            "app",
            "-p",
            "local3.err",
            "--msgid",
            "M1",
            "--sd-id",
            "x@1",
            "--sd-param",
            "a=\"b\"",
            "hello 5424",
        ],
        None,
    );
    // TCP: 300 octet-counted messages on one connection, then 300 newline-ended ones.
    let (octet_text, octet) = lines_text("octet", 300);
    logger(
        &[
            "-T",
            "--octet-count",
            "-n",
            "127.0.0.1",
            "-P",
            &tcp_s,
            "-t",
            "oc",
            "-p",
            "daemon.info",
        ],
        Some(&octet_text),
    );
    let (nl_text, nl) = lines_text("newline", 300);
    logger(
        &[
            "-T",
            "-n",
            "127.0.0.1",
            "-P",
            &tcp_s,
            "-t",
            "nl",
            "-p",
            "daemon.notice",
        ],
        Some(&nl_text),
    );
    // UNIX sockets, as local programs log (no HOSTNAME in the message).
    let (dgram_text, dg) = lines_text("dgram", 100);
    logger(
        &[
            "-u",
            &dgram.display().to_string(),
            "-t",
            "local",
            "-p",
            "user.debug",
        ],
        Some(&dgram_text),
    );
    logger(
        &[
            "-u",
            &stream.display().to_string(),
            "--socket-errors=on",
            "-t",
            "st",
            "-p",
            "mail.info",
            "over a stream",
        ],
        None,
    );
    let ev = wait_events(dir.path(), 2 + 600 + 100 + 1);

    let r = of_tag(&ev, "udp.auth.warn");
    assert_eq!(r.len(), 1, "{ev:?}");
    assert_eq!(
        (r[0]["host"].as_str(), r[0]["ident"].as_str()),
        (Some(host.as_str()), Some("app"))
    );
    assert!(
        r[0]["pid"]
            .as_str()
            .is_some_and(|p| p.parse::<u32>().is_ok()),
        "{}",
        r[0]
    );
    assert_eq!(r[0]["message"], "hello 3164");
    assert_eq!(
        (r[0]["from"].as_str(), r[0]["severity"].as_str()),
        (Some("127.0.0.1"), Some("warn"))
    );
    let r = of_tag(&ev, "udp.local3.err");
    assert_eq!(r.len(), 1, "{ev:?}");
    assert_eq!(
        (r[0]["ident"].as_str(), r[0]["msgid"].as_str()),
        (Some("app"), Some("M1"))
    );
    assert!(
        r[0]["extradata"]
            .as_str()
            .unwrap()
            .ends_with("[x@1 a=\"b\"]"),
        "{}",
        r[0]
    );
    assert_eq!(r[0]["message"], "hello 5424");

    assert_eq!(
        msgs(&of_tag(&ev, "tcp.daemon.info")),
        octet,
        "octet counted, in order"
    );
    assert_eq!(
        msgs(&of_tag(&ev, "tcp.daemon.notice")),
        nl,
        "newline framed, in order"
    );
    let r = of_tag(&ev, "dgram.user.debug");
    let mut got = msgs(&r);
    got.sort_by_key(|m| m[6..].parse::<u32>().unwrap());
    assert_eq!(got, dg);
    assert!(
        r.iter()
            .all(|r| r["host"] == host.as_str() && r["ident"] == "local"),
        "{}",
        r[0]
    );
    assert_eq!(msgs(&of_tag(&ev, "stream.mail.info")), ["over a stream"]);
    assert!(ev.iter().all(|(_, r)| r.get("parse_error").is_none()));
    d.terminate();
    assert_eq!(events(dir.path()).len(), 703, "nothing more");
}

fn gethostname() -> String {
    let out = Command::new("hostname").output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// rsyslogd in the foreground with `config` (no system log: only what the
/// config loads); killed on drop.
struct Rsyslog(Child);

impl Rsyslog {
    fn start(dir: &Path, config: &str) -> Rsyslog {
        let work = dir.join("rsyslog");
        std::fs::create_dir_all(&work).unwrap();
        let conf = dir.join("rsyslog.conf");
        std::fs::write(
            &conf,
            format!("global(workDirectory=\"{}\")\n{config}", work.display()),
        )
        .unwrap();
        let child = Command::new("rsyslogd")
            .arg("-n")
            .arg("-f")
            .arg(&conf)
            .arg("-i")
            .arg(dir.join("rsyslog.pid"))
            .stdin(Stdio::null())
            .spawn()
            .expect("start rsyslogd");
        Rsyslog(child)
    }
}

impl Drop for Rsyslog {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn rsyslog_forwards_to_nagare_and_receives_from_it() {
    if skip_unless(
        have("rsyslogd") && have("logger"),
        "rsyslog (rsyslogd) or logger is not installed",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (syslog_tcp, syslog_udp, lines_in) = (free_port(), free_port(), free_port());
    let (rs_tcp, rs_udp) = (free_port(), free_port());
    let rs_sock = dir.path().join("rs.sock");
    let rs_out = dir.path().join("rs-out.log");
    // rsyslog: a UNIX socket whose messages go to nagare over TCP (octet
    // counted, RFC 5424) and UDP (RFC 3164); and imtcp/imudp listeners that
    // write what nagare's syslog output sends to a file.
    let _rs = Rsyslog::start(
        dir.path(),
        &format!(
            r#"
module(load="imuxsock" SysSock.Use="off")
module(load="imtcp")
module(load="imudp")
template(name="seen" type="string" string="%inputname% %syslogfacility-text% %syslogseverity-text% %hostname% %app-name% %procid% %msgid% %structured-data% %msg%\n")
ruleset(name="fwd") {{
  action(type="omfwd" target="127.0.0.1" port="{syslog_tcp}" protocol="tcp" TCP_Framing="octet-counted" template="RSYSLOG_SyslogProtocol23Format" action.resumeInterval="1")
  if $programname == "fwdudp" then {{
    action(type="omfwd" target="127.0.0.1" port="{syslog_udp}" protocol="udp" template="RSYSLOG_TraditionalForwardFormat" action.resumeInterval="1")
  }}
}}
ruleset(name="seen") {{
  action(type="omfile" file="{rs_out}" template="seen")
}}
input(type="imuxsock" Socket="{rs_sock}" RateLimit.Interval="0" ruleset="fwd")
input(type="imtcp" address="127.0.0.1" port="{rs_tcp}" ruleset="seen")
input(type="imudp" address="127.0.0.1" port="{rs_udp}" ruleset="seen")
"#,
            rs_sock = rs_sock.display(),
            rs_out = rs_out.display()
        ),
    );
    let mut d = daemon(
        dir.path(),
        &format!(
            r#"
[[input]]
type = "syslog"
bind = "127.0.0.1:{syslog_tcp}"
protocol = "tcp"
tag = "rs.tcp"

[[input]]
type = "syslog"
bind = "127.0.0.1:{syslog_udp}"
tag = "rs.udp"

[[input]]
type = "tcp"
bind = "127.0.0.1:{lines_in}"
tag = "to.rsyslog"
[input.parser]
type = "json"

[[output]]
type = "copy"
match = "to.rsyslog"
[[output.store]]
type = "syslog"
address = "127.0.0.1:{rs_tcp}"
protocol = "tcp"
severity_key = "level"
[output.store.buffer]
flush_interval = "20ms"
[[output.store]]
type = "syslog"
address = "127.0.0.1:{rs_udp}"
message_format = "rfc3164"
facility = "local5"
severity_key = "level"
[output.store.buffer]
flush_interval = "20ms"
"#
        ),
    );
    d.wait_port(syslog_tcp);
    d.wait_port(lines_in);
    d.wait_listening(&format!(":{syslog_udp}"));
    wait_port(rs_tcp);
    wait_until(WAIT, "rsyslog's socket", || rs_sock.exists());

    // rsyslog → nagare: 500 messages in order over TCP; 100 of them also
    // over UDP (a burst that fits a socket's receive buffer: UDP has no
    // push-back).
    let (text, sent) = lines_text("via rsyslog", 500);
    logger(
        &[
            "-u",
            &rs_sock.display().to_string(),
            "-t",
            "fwd",
            "-p",
            "local1.notice",
        ],
        Some(&text[..text.find("via rsyslog 100").unwrap()]),
    );
    logger(
        &[
            "-u",
            &rs_sock.display().to_string(),
            "-t",
            "fwdudp",
            "-p",
            "local1.notice",
        ],
        Some(&text[text.find("via rsyslog 100").unwrap()..text.find("via rsyslog 200").unwrap()]),
    );
    logger(
        &[
            "-u",
            &rs_sock.display().to_string(),
            "-t",
            "fwd",
            "-p",
            "local1.notice",
        ],
        Some(&text[text.find("via rsyslog 200").unwrap()..]),
    );
    let ev = wait_events(dir.path(), 600);
    let tcp = of_tag(&ev, "rs.tcp.local1.notice");
    // rsyslog keeps the space after the local message's "TAG:" in its MSG.
    let trimmed = |v: Vec<String>| {
        v.iter()
            .map(|m| m.trim_start().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        trimmed(msgs(&tcp)),
        sent,
        "over TCP, octet counted, in order"
    );
    assert!(
        tcp.iter()
            .all(|r| r["ident"].as_str().unwrap().starts_with("fwd") && r["host"].is_string()),
        "{}",
        tcp[0]
    );
    let mut udp = trimmed(msgs(&of_tag(&ev, "rs.udp.local1.notice")));
    udp.sort_by_key(|m| m[12..].parse::<u32>().unwrap());
    assert_eq!(udp, sent[100..200], "over UDP, each once");

    // nagare → rsyslog: records become RFC 5424 over TCP and RFC 3164 over UDP.
    send_lines(lines_in, (0..100).map(|i| format!(
        "{{\"host\":\"h{i}\",\"ident\":\"app\",\"pid\":\"{i}\",\"msgid\":\"M\",\"extradata\":\"[e@1 n=\\\"{i}\\\"]\",\"level\":\"warning\",\"message\":\"to rsyslog {i}\"}}"
    )));
    let got = rsyslog_lines(&rs_out, 200);
    let over_tcp: Vec<&String> = got.iter().filter(|l| l.starts_with("imtcp ")).collect();
    let want: Vec<String> = (0..100)
        .map(|i| format!("imtcp user warning h{i} app {i} M [e@1 n=\"{i}\"] to rsyslog {i}"))
        .collect();
    assert_eq!(
        over_tcp,
        want.iter().collect::<Vec<_>>(),
        "RFC 5424 over TCP, in order"
    );
    let mut over_udp: Vec<&String> = got.iter().filter(|l| l.starts_with("imudp ")).collect();
    over_udp.sort_by_key(|l| l.rsplit(' ').next().unwrap().parse::<u32>().unwrap());
    let want: Vec<String> = (0..100)
        .map(|i| format!("imudp local5 warning h{i} app {i} - - to rsyslog {i}"))
        .collect();
    assert_eq!(
        over_udp,
        want.iter().collect::<Vec<_>>(),
        "RFC 3164 over UDP"
    );
    d.terminate();
    assert_eq!(events(dir.path()).len(), 600);
}

/// rsyslog's TLS driver (gtls, GnuTLS) is a separate Debian package.
fn have_rsyslog_gtls() -> bool {
    have("rsyslogd")
        && [
            "/usr/lib/x86_64-linux-gnu/rsyslog",
            "/usr/lib/aarch64-linux-gnu/rsyslog",
            "/usr/lib/rsyslog",
        ]
        .iter()
        .any(|d| Path::new(d).join("lmnsd_gtls.so").exists())
}

#[test]
fn syslog_output_over_tls_to_rsyslog_gtls() {
    if skip_unless(
        have_rsyslog_gtls(),
        "rsyslog's TLS driver is not installed (Debian package rsyslog-gnutls)",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (rs_tls, lines_in) = (free_port(), free_port());
    let rs_out = dir.path().join("rs-tls.log");
    // Both ends verify the other (RFC 5425 with mutual authentication):
    // rsyslog takes only a client certificate of the CA naming
    // "nagare.test", nagare only a server certificate of the CA for
    // 127.0.0.1.
    let ca = crate::common::tls::Ca::new(dir.path(), "ca");
    let server = ca.issue("rsyslog", &["127.0.0.1"]);
    let client = ca.issue("nagare", &["nagare.test"]);
    let _rs = Rsyslog::start(
        dir.path(),
        &format!(
            r#"
global(DefaultNetstreamDriverCAFile="{ca}" DefaultNetstreamDriverCertFile="{cert}" DefaultNetstreamDriverKeyFile="{key}")
module(load="imtcp" StreamDriver.Name="gtls" StreamDriver.Mode="1" StreamDriver.AuthMode="x509/name" PermittedPeer=["nagare.test"])
template(name="seen" type="string" string="%syslogseverity-text% %hostname% %app-name% %procid% %msg%\n")
ruleset(name="seen") {{
  action(type="omfile" file="{out}" template="seen")
}}
input(type="imtcp" address="127.0.0.1" port="{rs_tls}" ruleset="seen")
"#,
            ca = ca.path.display(),
            cert = server.cert.display(),
            key = server.key.display(),
            out = rs_out.display()
        ),
    );
    let mut d = daemon(
        dir.path(),
        &format!(
            r#"
[[input]]
type = "tcp"
bind = "127.0.0.1:{lines_in}"
tag = "to.rsyslog"
[input.parser]
type = "json"

[[output]]
type = "syslog"
match = "to.rsyslog"
address = "127.0.0.1:{rs_tls}"
protocol = "tcp"
severity_key = "level"
{tls}
[output.buffer]
flush_interval = "20ms"
"#,
            tls = crate::common::tls::tls_table("output", Some(&client), Some(&ca.path), "")
        ),
    );
    d.wait_port(lines_in);
    wait_port(rs_tls);
    send_lines(lines_in, (0..200).map(|i| format!(
        "{{\"host\":\"h{i}\",\"ident\":\"app\",\"pid\":\"{i}\",\"level\":\"err\",\"message\":\"over tls {i}\"}}"
    )));
    let got = rsyslog_lines(&rs_out, 200);
    let want: Vec<String> = (0..200)
        .map(|i| format!("err h{i} app {i} over tls {i}"))
        .collect();
    assert_eq!(got, want, "every message once, in order, through TLS");
    d.terminate();
}

#[test]
fn syslog_output_rfc3164_over_udp_to_python() {
    let dir = tempfile::tempdir().unwrap();
    let (lines_in, sink) = (free_port(), free_port());
    let sock = std::net::UdpSocket::bind(("127.0.0.1", sink)).unwrap();
    sock.set_read_timeout(Some(WAIT)).unwrap();
    let config = format!(
        r#"
[[input]]
type = "tcp"
bind = "127.0.0.1:{lines_in}"
tag = "x"

[[output]]
type = "syslog"
match = "**"
address = "127.0.0.1:{sink}"
message_format = "rfc3164"
facility = "local5"
severity = "notice"
app_name = "relay"
[output.buffer]
flush_interval = "20ms"
"#
    );
    let mut d = Daemon::start(dir.path(), "out3164", &config, None);
    d.wait_port(lines_in);
    let mut s = TcpStream::connect(("127.0.0.1", lines_in)).unwrap();
    s.write_all(b"one\ntwo\n").unwrap();
    let host = gethostname();
    let mut b = [0u8; 2048];
    for want in ["one", "two"] {
        let n = sock.recv(&mut b).expect("a datagram");
        let m = String::from_utf8_lossy(&b[..n]).into_owned();
        assert!(m.starts_with("<173>"), "{m}");
        assert!(m.ends_with(&format!(" {host} relay: {want}")), "{m}");
        // Mmm dd hh:mm:ss after the PRI.
        assert_eq!(&m[8..9], " ", "{m}");
        assert_eq!(&m[14..15], ":", "{m}");
    }
}

#[test]
fn bad_input_on_syslog_tcp_costs_only_its_own_connection() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut d = daemon(
        dir.path(),
        &format!(
            r#"
[[input]]
type = "syslog"
bind = "127.0.0.1:{port}"
protocol = "tcp"
tag = "bad"
max_message_size = "200B"
max_connections = 3
idle_timeout = "1s"
"#
        ),
    );
    d.wait_port(port);
    let ok = |i: usize| format!("<14>Oct 11 22:14:15 h app: ok {i}");
    // Garbage, then an oversized frame, then a good one: kept, cut, kept.
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let big = format!("<14>Oct 11 22:14:15 h app: {}", "B".repeat(1000));
    let mut sent = format!("{}\n\x01\x02 garbage\n{} {big}", ok(0), big.len());
    sent.push_str(&format!("{} {}", ok(1).len(), ok(1)));
    c.write_all(sent.as_bytes()).unwrap();
    drop(c);
    let ev = wait_events(dir.path(), 4);
    // Chunks are per tag: order holds within a tag.
    let info = of_tag(&ev, "bad.user.info");
    assert_eq!(info.len(), 3, "{ev:?}");
    assert_eq!(info[0]["message"], "ok 0");
    assert_eq!(
        info[1]["message"].as_str().unwrap().len(),
        200 - "<14>Oct 11 22:14:15 h app: ".len()
    );
    assert_eq!(info[2]["message"], "ok 1");
    let garbage = of_tag(&ev, "bad.unmatched");
    assert_eq!(garbage.len(), 1, "{ev:?}");
    assert!(garbage[0]["message"]
        .as_str()
        .unwrap()
        .ends_with(" garbage"));
    assert!(
        garbage[0]["parse_error"].as_str().unwrap().contains("PRI"),
        "{}",
        garbage[0]
    );
    d.wait_log("longer than the limit");
    // A frame cut by the sender closing: the frames before it are kept, the
    // cut one is reported.
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let cut_peer = c.local_addr().unwrap().to_string();
    c.write_all(format!("{} {}50 <14>Oct 11 cut", ok(2).len(), ok(2)).as_bytes())
        .unwrap();
    drop(c);
    assert!(d.wait_bad_peer(&cut_peer)[0].contains("inside a frame"));
    // A slow client trickling a frame is closed after idle_timeout.
    let mut slow = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let slow_peer = slow.local_addr().unwrap().to_string();
    slow.write_all(b"100 <14>").unwrap();
    let trickle = trickle(slow);
    assert!(d.wait_bad_peer(&slow_peer)[0].contains("no complete message"));
    assert!(trickle.join().unwrap());
    // The connection limit: three open, a fourth closed at once, the open ones go on.
    let mut open: Vec<TcpStream> = (0..3)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    open[0]
        .write_all(format!("{}\n", ok(3)).as_bytes())
        .unwrap();
    let mut fourth = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let fourth_peer = fourth.local_addr().unwrap().to_string();
    assert!(closed_by_peer(&mut fourth));
    assert!(d.wait_bad_peer(&fourth_peer)[0].contains("max_connections"));
    open[1]
        .write_all(format!("{}\n", ok(4)).as_bytes())
        .unwrap();
    drop(open);
    let ev = wait_events(dir.path(), 7);
    let oks: Vec<&str> = ev
        .iter()
        .filter_map(|(_, r)| r["message"].as_str())
        .filter(|m| m.starts_with("ok "))
        .collect();
    assert_eq!(oks, ["ok 0", "ok 1", "ok 2", "ok 3", "ok 4"]);
    d.terminate();
    assert_eq!(events(dir.path()).len(), 7, "nothing more, nothing lost");
}

#[test]
fn check_reports_bad_syslog_options() {
    let cases: &[(&str, &str, &str)] = &[
        ("[[input]]\ntype = \"syslog\"\ntag = \"s\"\n", ":5:", "needs `bind`"),
        (
            "[[input]]\ntype = \"syslog\"\ntag = \"s\"\nbind = \"127.0.0.1:5140\"\nsocket_type = \"stream\"\n",
            ":9: key `socket_type`:",
            "`protocol`",
        ),
        (
            "[[input]]\ntype = \"syslog\"\ntag = \"s\"\npath = \"/tmp/x.sock\"\nprotocol = \"tcp\"\n",
            ":9: key `protocol`:",
            "`socket_type`",
        ),
        (
            "[[input]]\ntype = \"syslog\"\ntag = \"s\"\nbind = \"127.0.0.1:5140\"\nprotocol = \"sctp\"\n",
            ":9: key `protocol`:",
            "sctp",
        ),
        (
            "[[output]]\ntype = \"syslog\"\nmatch = \"**\"\naddress = \"h:514\"\nfacility = \"nope\"\n",
            ":9: key `facility`:",
            "not a facility",
        ),
        (
            "[[output]]\ntype = \"syslog\"\nmatch = \"**\"\naddress = \"no-port\"\n",
            ":8: key `address`:",
            "HOST:PORT",
        ),
    ];
    assert_check_errors(tempfile::tempdir().unwrap().path(), CHECK_BASE, cases);
}

/// Writes `lines` (newline-terminated) to the raw-lines input on `port`.
fn send_lines(port: u16, lines: impl Iterator<Item = String>) {
    let mut text = String::new();
    for l in lines {
        text.push_str(&l);
        text.push('\n');
    }
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(text.as_bytes()).unwrap();
}

/// The lines of rsyslog's output file once it holds `n`, spaces collapsed
/// (rsyslog keeps the space before an RFC 3164 MSG).
fn rsyslog_lines(path: &std::path::Path, n: usize) -> Vec<String> {
    wait_until(WAIT, &format!("{n} lines in rsyslog's file"), || {
        read_file(path).lines().count() >= n
    });
    read_file(path)
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}
