//! Running nagare as a service: its own log as JSON lines in a file that
//! SIGUSR1 reopens (logrotate), and the sd_notify states a `Type=notify`
//! systemd unit waits for. Each test starts the real binary.

use std::net::TcpStream;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;

/// The JSON objects of a log file's lines; panics on a line that is not one.
fn json_lines(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l:?}")))
        .collect()
}

fn messages(lines: &[serde_json::Value], message: &str) -> usize {
    lines.iter().filter(|l| l["message"] == message).count()
}

/// Opens a connection, sends a malformed frame and waits until nagare
/// closes it: each one makes exactly one "closing connection" log line,
/// naming the peer. Returns the peer address.
fn bad_connection(port: u16) -> String {
    let mut s = Sender::tcp(port);
    let peer = s.local();
    s.raw(&[0x93, 0x05, 0x90, 0x80]);
    assert!(s.closed_by_peer(), "nagare closes a malformed connection");
    peer
}

#[test]
fn json_log_file_is_reopened_on_sigusr1_without_losing_a_line() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("nagare.log");
    let rotated = dir.path().join("nagare.log.1");
    let port = free_port();
    let config = format!(
        r#"
[system]
log_format = "json"
log_file = "{}"

[[input]]
type = "forward"
bind = "127.0.0.1:{port}"

[[output]]
type = "null"
match = "**"
"#,
        log.display()
    );
    let mut d = Daemon::start(dir.path(), "json-log", &config, None);
    d.wait_port(port);
    d.wait_catches(libc::SIGUSR1);
    assert_eq!(d.stderr(), "", "with log_file, nothing goes to stderr");

    // The start line carries level, message and its fields as JSON.
    let start = json_lines(&log)
        .into_iter()
        .find(|l| l["message"] == "nagare started")
        .expect("a start line in the log file");
    assert_eq!(start["level"], "INFO");
    assert_eq!(start["version"], env!("CARGO_PKG_VERSION"));
    assert!(start["workers"].as_u64().unwrap() >= 1, "{start}");
    assert!(start["timestamp"].is_string(), "{start}");

    // Log lines keep coming, from one bad connection after another, while
    // the file is renamed and reopened, until the new file has some too.
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut peers = Vec::new();
            while !stop.load(SeqCst) {
                peers.push(bad_connection(port));
            }
            peers
        })
    };
    wait_until(WAIT, "20 closing-connection lines", || {
        messages(&json_lines(&log), "closing connection") >= 20
    });
    std::fs::rename(&log, &rotated).unwrap();
    d.signal(libc::SIGUSR1);
    wait_until(
        WAIT,
        "the reopen line and 20 more lines in a new file",
        || {
            let new = json_lines(&log);
            messages(&new, "SIGUSR1: log file reopened") == 1
                && messages(&new, "closing connection") >= 20
        },
    );
    stop.store(true, SeqCst);
    let peers = load.join().unwrap();
    assert_eq!(d.terminate().code(), Some(0), "stderr:\n{}", d.stderr());

    let old = json_lines(&rotated);
    let new = json_lines(&log);
    assert_eq!(messages(&old, "SIGUSR1: log file reopened"), 0);
    assert_eq!(messages(&old, "stopped; every buffer drained"), 0);
    assert_eq!(messages(&new, "stopped; every buffer drained"), 1);
    // Every bad connection's line is in exactly one of the two files.
    let mut logged: Vec<String> = old
        .iter()
        .chain(&new)
        .filter(|l| l["message"] == "closing connection")
        .map(|l| {
            assert_eq!(l["level"], "WARN", "{l}");
            assert!(l["reason"].is_string(), "{l}");
            l["peer"].as_str().expect("a peer field").to_string()
        })
        .collect();
    let mut sent = peers;
    logged.sort();
    sent.sort();
    assert_eq!(
        logged.len(),
        sent.len(),
        "one line per bad connection, none lost or doubled"
    );
    assert_eq!(logged, sent);
}

#[test]
fn an_unopenable_log_file_stops_the_start_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("no-such-dir").join("nagare.log");
    let config = format!(
        "[system]\nlog_file = \"{}\"\n[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:{}\"\n[[output]]\ntype = \"null\"\nmatch = \"**\"\n",
        log.display(),
        free_port()
    );
    let mut d = Daemon::start(dir.path(), "bad-log", &config, None);
    let status = d.wait_exit(WAIT);
    assert_eq!(status.code(), Some(1));
    let err = d.stderr();
    assert!(
        err.contains("[system] log_file") && err.contains(&log.display().to_string()),
        "{err}"
    );
}

/// The next datagram on the notify socket, as text; panics after WAIT.
fn next_notification(sock: &UnixDatagram) -> String {
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + WAIT;
    loop {
        sock.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        match sock.recv(&mut buf) {
            Ok(n) => return String::from_utf8_lossy(&buf[..n]).into_owned(),
            Err(_) if Instant::now() < deadline => continue,
            Err(e) => panic!("no sd_notify datagram within {WAIT:?}: {e}"),
        }
    }
}

#[test]
fn sd_notify_ready_reloading_and_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let socket_path = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&socket_path).unwrap();
    let port = free_port();
    let config_path = dir.path().join("notify.toml");
    std::fs::write(
        &config_path,
        format!(
            "[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:{port}\"\n[[output]]\ntype = \"null\"\nmatch = \"**\"\n"
        ),
    )
    .unwrap();
    let mut cmd = Command::new(BIN);
    cmd.arg("run")
        .arg("-c")
        .arg(&config_path)
        .env("NOTIFY_SOCKET", &socket_path);
    let mut d = Daemon::spawn(cmd, dir.path(), config_path, None);

    assert_eq!(next_notification(&sock), "READY=1\n");
    // READY means the inputs listen: no waiting for the port.
    TcpStream::connect(("127.0.0.1", port)).expect("the forward port accepts once READY=1");

    // SIGHUP reloads the config between RELOADING=1 and READY=1.
    d.signal(libc::SIGHUP);
    let reloading = next_notification(&sock);
    let lines: Vec<&str> = reloading.lines().collect();
    assert_eq!(lines.len(), 2, "{reloading:?}");
    assert_eq!(lines[0], "RELOADING=1");
    let usec: u64 = lines[1]
        .strip_prefix("MONOTONIC_USEC=")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("MONOTONIC_USEC=<number>: {reloading:?}"));
    assert!(usec > 0);
    assert_eq!(next_notification(&sock), "READY=1\n");
    // The line was logged before READY=1; the test's reader of the
    // daemon's stderr may take a moment to have it.
    d.wait_log("SIGHUP: configuration reloaded");

    assert_eq!(d.terminate().code(), Some(0), "stderr:\n{}", d.stderr());
    assert_eq!(next_notification(&sock), "STOPPING=1\n");
}

/// The package's /etc/nagare/nagare.toml is valid (tests/package/test.sh
/// checks it installed too, but needs root).
#[test]
fn packaged_default_config_passes_check() {
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/../../packaging/nagare.toml");
    let out = run_check(config);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
