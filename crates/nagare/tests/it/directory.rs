//! The directory input (a drop box) and the K2HFTFUSE-style receiver side:
//! a sending nagare ships files to a receiving nagare that unifies them into
//! one file, byte for byte.

use std::time::Duration;

use crate::common::*;

#[test]
fn dropped_files_are_shipped_tagged_by_path_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let drop = d.join("drop");
    std::fs::create_dir_all(drop.join("app")).unwrap();
    // A file already there at start is shipped whole too.
    std::fs::write(drop.join("early.log"), "e1\ne2\n").unwrap();
    let cfg = format!(
        r#"
[[input]]
type = "directory"
path = "{}"
tag = "drop.*"
remove_after = "300ms"
refresh_interval = "100ms"
poll_interval = "20ms"
[[output]]
type = "stdout"
match = "drop.**"
[output.buffer]
flush_interval = "50ms"
"#,
        drop.display()
    );
    let mut n = Daemon::start(d, "dir", &cfg, None);
    n.wait_stdout_lines(2);
    std::fs::write(drop.join("app/x.log"), "x1\nx2\nx3\n").unwrap();
    let lines = n.wait_stdout_lines(5);
    let mut got: Vec<(String, String)> = lines
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["tag"].as_str().unwrap().to_string(),
                v["record"]["message"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    got.sort();
    let want: Vec<(String, String)> = [
        ("drop.app.x.log", "x1"),
        ("drop.app.x.log", "x2"),
        ("drop.app.x.log", "x3"),
        ("drop.early.log", "e1"),
        ("drop.early.log", "e2"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(got, want);
    wait_until(WAIT, "shipped files removed after remove_after", || {
        !drop.join("early.log").exists() && !drop.join("app/x.log").exists()
    });
    // Stopped, the daemon has flushed whatever it read.
    assert!(n.terminate().success(), "{}", n.stderr());
    assert_eq!(n.stdout().lines().count(), 5, "nothing shipped twice");
}

/// With both timers at an hour only inotify can find a file dropped into a
/// subfolder made after start (the new folder must get a watch of its own);
/// with `watch = false` the same config must not find it in that time. The
/// two run side by side, each on a folder of its own, given the same files
/// at the same moment; the control has nothing to wait for, so it is checked
/// once the watched one has delivered and stopped.
#[test]
fn inotify_finds_files_in_new_subfolders_without_the_timers() {
    let start = |watch: bool| {
        let dir = tempfile::tempdir().unwrap();
        let drop = dir.path().join("drop");
        std::fs::create_dir_all(&drop).unwrap();
        std::fs::write(drop.join("early.log"), "e1\n").unwrap();
        let cfg = format!(
            r#"
[[input]]
type = "directory"
path = "{}"
tag = "drop.*"
refresh_interval = "1h"
poll_interval = "1h"
watch = {watch}
[[output]]
type = "stdout"
match = "drop.**"
[output.buffer]
flush_interval = "50ms"
"#,
            drop.display()
        );
        let n = Daemon::start(dir.path(), "dir", &cfg, None);
        (dir, drop, n)
    };
    let (_watched_dir, watched_drop, mut watched) = start(true);
    let (_control_dir, control_drop, control) = start(false);
    // The file there at start is read by the first scan, whatever `watch` is.
    watched.wait_stdout_lines(1);
    control.wait_stdout_lines(1);
    for drop in [&control_drop, &watched_drop] {
        std::fs::create_dir_all(drop.join("late/deeper")).unwrap();
        std::fs::write(drop.join("late/deeper/x.log"), "x1\nx2\n").unwrap();
    }
    let records = |n: &Daemon| -> Vec<(String, String)> {
        n.stdout()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                let tag = v["tag"].as_str().unwrap().to_string();
                (tag, v["record"]["message"].as_str().unwrap().to_string())
            })
            .collect()
    };
    let early = ("drop.early.log".to_string(), "e1".to_string());
    wait_until(Duration::from_secs(5), "a file in a new subfolder", || {
        watched.stdout().lines().count() >= 3
    });
    assert!(watched.terminate().success(), "{}", watched.stderr());
    let x = |m: &str| ("drop.late.deeper.x.log".to_string(), m.to_string());
    assert_eq!(records(&watched), vec![early.clone(), x("x1"), x("x2")]);
    assert_eq!(
        records(&control),
        vec![early],
        "watch = false: nothing new in the time the watched one took"
    );
}

#[test]
fn a_sender_ships_files_to_a_receiver_that_unifies_them_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("logs")).unwrap();
    let rport = free_port();
    let receiver = format!(
        r#"
[[input]]
type = "forward"
bind = "127.0.0.1:{rport}"
[[output]]
type = "file"
match = "**"
path = "{}/unified.log"
format = "single_value"
[output.buffer]
flush_interval = "50ms"
"#,
        d.display()
    );
    let sender = format!(
        r#"
[[input]]
type = "tail"
path = "{}/logs/*.log"
tag = "ship.*"
read_from_head = true
refresh_interval = "100ms"
poll_interval = "20ms"
[[output]]
type = "forward"
match = "**"
require_ack_response = true
heartbeat_type = "none"
[[output.server]]
address = "127.0.0.1:{rport}"
[output.buffer]
flush_interval = "50ms"
"#,
        d.display()
    );
    let mut r = Daemon::start(d, "receiver", &receiver, None);
    r.wait_port(rport);
    // Lines with tabs, quotes, UTF-8 and backslashes must come through as they are.
    let mut text = String::new();
    for i in 0..20_000 {
        text.push_str(&format!(
            "{i:06}\tquote\" back\\slash ünïcödé {}\n",
            "z".repeat(i % 97)
        ));
    }
    std::fs::write(d.join("logs/one.log"), &text).unwrap();
    let mut s = Daemon::start(d, "sender", &sender, None);
    wait_until(WAIT, "the unified file complete", || {
        std::fs::metadata(d.join("unified.log"))
            .map(|m| m.len())
            .unwrap_or(0)
            >= text.len() as u64
    });
    // Stopped in order, each daemon passes on or writes whatever it holds.
    assert!(s.terminate().success(), "{}", s.stderr());
    assert!(r.terminate().success(), "{}", r.stderr());
    let got = std::fs::read(d.join("unified.log")).unwrap();
    assert!(
        got == text.as_bytes(),
        "the unified file differs from the shipped file"
    );
}
