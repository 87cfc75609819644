//! A second nagare must not share what the first one owns: its TCP port,
//! its UNIX socket, its tail position file (its file buffer: durability.rs).
//! It refuses to start and names the process that holds the resource, and
//! the first one goes on receiving.

use std::path::Path;

use crate::common::*;

fn forward_to_stdout(listen: &str) -> String {
    format!("[[input]]\ntype = \"forward\"\n{listen}\n\n[[output]]\ntype = \"stdout\"\nmatch = \"**\"\nformat = \"json\"\n[output.buffer]\nflush_interval = \"50ms\"\n")
}

/// The first daemon still takes events and delivers them all.
fn still_delivers(first: &Daemon, mut sender: Sender) {
    sender.packed("app.test", 0..50, None);
    let lines = first.wait_stdout_lines(50);
    let seqs: Vec<u64> = lines
        .iter()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["record"]["seq"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_exact_seqs(&seqs, 50);
}

#[test]
fn a_second_process_on_the_same_port_is_refused_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = forward_to_stdout(&format!("bind = \"127.0.0.1:{port}\""));
    let mut first = Daemon::start(dir.path(), "one", &cfg, None);
    first.wait_port(port);
    let mut second = Daemon::start(dir.path(), "two", &cfg, None);
    let st = second.wait_exit(WAIT);
    assert_eq!(st.code(), Some(1), "{}", second.stderr());
    let want = format!("address in use by pid {} (nagare)", first.child.id());
    assert!(second.stderr().contains(&want), "{}", second.stderr());
    still_delivers(&first, Sender::tcp(port));
    first.terminate();
}

#[test]
fn a_live_unix_socket_is_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("in.sock");
    let cfg = forward_to_stdout(&format!("path = \"{}\"", sock.display()));
    let first = Daemon::start(dir.path(), "one", &cfg, None);
    wait_until(WAIT, "the socket file", || sock.exists());
    wait_until(WAIT, "the socket accepting", || {
        std::os::unix::net::UnixStream::connect(&sock).is_ok()
    });
    let mut second = Daemon::start(dir.path(), "two", &cfg, None);
    let st = second.wait_exit(WAIT);
    assert_eq!(st.code(), Some(1), "{}", second.stderr());
    let want = format!("socket in use by pid {} (nagare)", first.child.id());
    assert!(second.stderr().contains(&want), "{}", second.stderr());
    still_delivers(&first, Sender::unix(&sock));
}

#[test]
fn a_stale_unix_socket_file_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("in.sock");
    // A socket file nobody listens on any more (its process died).
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    assert!(sock.exists());
    let cfg = forward_to_stdout(&format!("path = \"{}\"", sock.display()));
    let first = Daemon::start(dir.path(), "one", &cfg, None);
    wait_until(WAIT, "the socket accepting", || {
        std::os::unix::net::UnixStream::connect(&sock).is_ok()
    });
    still_delivers(&first, Sender::unix(&sock));
}

#[test]
fn a_second_process_on_the_same_position_file_is_refused_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    std::fs::write(&log, "").unwrap();
    let db = dir.path().join("tail.pos");
    let cfg = |port: u16| {
        format!(
            "[monitor]\nbind = \"127.0.0.1:{port}\"\n\n[[input]]\ntype = \"tail\"\npath = \"{}\"\ntag = \"app\"\nposition_db = \"{}\"\n\n[[output]]\ntype = \"stdout\"\nmatch = \"**\"\n",
            log.display(),
            db.display()
        )
    };
    let port = free_port();
    let mut first = Daemon::start(dir.path(), "one", &cfg(port), Some(port));
    first.wait_port(port);
    let mut second = Daemon::start(dir.path(), "two", &cfg(free_port()), None);
    let st = second.wait_exit(WAIT);
    assert_eq!(st.code(), Some(1), "{}", second.stderr());
    let err = second.stderr();
    let want = format!("is in use by pid {} (nagare)", first.child.id());
    assert!(
        err.contains(&want) && err.contains(&path_text(&db)),
        "{err}"
    );
    first.terminate();
}

fn path_text(p: &Path) -> String {
    p.display().to_string()
}

/// SIGHUP (logrotate, a closed terminal) checks the file again and never
/// stops nagare: events acked into its memory buffer before and after are
/// all delivered.
#[test]
fn sighup_keeps_the_daemon_running_and_checks_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = forward_to_stdout(&format!("bind = \"127.0.0.1:{port}\""));
    let mut d = Daemon::start(dir.path(), "hup", &cfg, None);
    d.wait_port(port);
    let mut s = Sender::tcp(port);
    s.packed("app.test", 0..50, Some(b"c1"));
    s.read_ack();
    // SIGHUP reloads the file (tests/it/reload.rs tests reloads themselves).
    d.signal(libc::SIGHUP);
    d.wait_log("SIGHUP: configuration reloaded");
    // A bad file: the error names its line; the daemon goes on.
    std::fs::write(&d.config, format!("{cfg}\n[[output]]\ntype = \"nope\"\n")).unwrap();
    d.signal(libc::SIGHUP);
    d.wait_log("SIGHUP: reload failed");
    assert!(d.stderr().contains("hup.toml:"), "{}", d.stderr());
    s.packed("app.test", 50..100, Some(b"c2"));
    s.read_ack();
    let lines = d.wait_stdout_lines(100);
    let seqs: Vec<u64> = lines
        .iter()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["record"]["seq"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_exact_seqs(&seqs, 100);
    assert_eq!(d.terminate().code(), Some(0), "{}", d.stderr());
}

#[test]
fn a_pid_file_names_the_running_process_and_is_removed_at_exit() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("nagare.pid");
    let (p1, p2) = (free_port(), free_port());
    let start = |name: &str, port: u16| {
        let cfg = dir.path().join(format!("{name}.toml"));
        std::fs::write(
            &cfg,
            forward_to_stdout(&format!("bind = \"127.0.0.1:{port}\"")),
        )
        .unwrap();
        let mut cmd = std::process::Command::new(BIN);
        cmd.arg("run")
            .arg("-c")
            .arg(&cfg)
            .arg("--pid-file")
            .arg(&pid_file);
        Daemon::spawn(cmd, dir.path(), cfg, None)
    };
    let mut first = start("one", p1);
    first.wait_port(p1);
    assert_eq!(
        std::fs::read_to_string(&pid_file).unwrap(),
        first.child.id().to_string()
    );
    let mut second = start("two", p2);
    assert_eq!(second.wait_exit(WAIT).code(), Some(1));
    let want = format!("in use by pid {} (nagare)", first.child.id());
    assert!(second.stderr().contains(&want), "{}", second.stderr());
    assert_eq!(first.terminate().code(), Some(0), "{}", first.stderr());
    assert!(!pid_file.exists(), "removed at a clean exit");
}

#[test]
fn dry_run_checks_like_check() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(
        &cfg,
        "[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:1\"\nbogus = 1\n",
    )
    .unwrap();
    let out = std::process::Command::new(BIN)
        .args(["run", "--dry-run", "-c"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.toml:4") && err.contains("bogus"), "{err}");
}
