//! The tail input: lines from files become events; appends, rename rotation,
//! copytruncate, restarts with the position database and long lines.

mod common;

use std::io::Write;
use std::time::Duration;

use common::*;

fn config(dir: &std::path::Path, extra: &str) -> String {
    format!(
        r#"
[[input]]
type = "tail"
path = ["{logs}/*.log"]
exclude = ["*.skip.log"]
tag = "app.*"
position_db = "{dir}/tail.pos"
read_from_head = true
refresh_interval = "100ms"
poll_interval = "20ms"
{extra}
[[output]]
type = "file"
match = "app.**"
path = "{dir}/out/unified.log"
format = "single_value"
[output.buffer]
flush_interval = "50ms"
"#,
        logs = dir.join("logs").display(),
        dir = dir.display()
    )
}

fn append(path: &std::path::Path, lines: std::ops::Range<u64>, prefix: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    let mut text = String::new();
    for i in lines {
        text.push_str(&format!(
            "{prefix} line {i} {}\n",
            "x".repeat((i % 50) as usize)
        ));
    }
    f.write_all(text.as_bytes()).unwrap();
}

fn out_lines(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("out/unified.log"))
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

fn wait_lines(dir: &std::path::Path, n: usize) -> Vec<String> {
    wait_until(WAIT, &format!("{n} lines in the unified file"), || {
        out_lines(dir).len() >= n
    });
    std::thread::sleep(Duration::from_millis(200));
    out_lines(dir)
}

fn expected(prefix: &str, r: std::ops::Range<u64>) -> Vec<String> {
    r.map(|i| format!("{prefix} line {i} {}", "x".repeat((i % 50) as usize)))
        .collect()
}

#[test]
fn appends_rotation_truncation_and_restart_lose_and_repeat_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("logs")).unwrap();
    let log = d.join("logs/app.log");
    append(&log, 0..1000, "a");
    append(&d.join("logs/noise.skip.log"), 0..10, "excluded");
    let mut nagare = Daemon::start(d, "tail", &config(d, ""), None);
    let mut want = expected("a", 0..1000);
    assert_eq!(wait_lines(d, 1000), want, "read from head, byte for byte");

    // Appends while running.
    append(&log, 1000..3000, "a");
    want.extend(expected("a", 1000..3000));
    assert_eq!(wait_lines(d, 3000), want);

    // Rotation by rename + create; the writer still appends to the old file.
    std::fs::rename(&log, d.join("logs/app.log.1")).unwrap();
    append(&d.join("logs/app.log.1"), 3000..3100, "a");
    append(&log, 0..500, "b");
    let got = wait_lines(d, 3600);
    let mut sorted_got = got.clone();
    sorted_got.sort();
    let mut all = want.clone();
    all.extend(expected("a", 3000..3100));
    all.extend(expected("b", 0..500));
    all.sort();
    assert_eq!(sorted_got, all, "every line once across the rotation");

    // copytruncate: the file is copied away and truncated in place.
    std::fs::copy(&log, d.join("logs/app.log.copy")).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(0)
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    append(&log, 0..200, "c");
    let got = wait_lines(d, 3800);
    let c_lines: Vec<&String> = got.iter().filter(|l| l.starts_with("c ")).collect();
    assert_eq!(c_lines.len(), 200, "lines after the truncation are read");
    // (app.log.copy is outside the glob: *.log does not match *.log.copy.)

    // Restart: lines written while nagare is down are read once, nothing again.
    assert!(nagare.terminate().success());
    let before = out_lines(d).len();
    append(&log, 200..700, "c");
    let _nagare = Daemon::start(d, "tail", &config(d, ""), None);
    let got = wait_lines(d, before + 500);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        out_lines(d).len(),
        before + 500,
        "no line read twice after the restart"
    );
    let tail: Vec<String> = got[before..].to_vec();
    assert_eq!(tail, expected("c", 200..700));
    assert!(!got.iter().any(|l| l.starts_with("excluded")));
}

#[test]
fn long_lines_are_split_or_skipped() {
    for (policy, want) in [
        ("split", vec!["aaaaa", "aaaaa", "aa", "short"]),
        ("skip", vec!["short"]),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("logs")).unwrap();
        std::fs::write(d.join("logs/x.log"), "aaaaaaaaaaaa\nshort\n").unwrap();
        let extra = format!("max_line_size = 5\nlong_lines = \"{policy}\"\n");
        let _n = Daemon::start(d, "tail", &config(d, &extra), None);
        let got = wait_lines(d, want.len());
        assert_eq!(got, want, "policy {policy}");
    }
}

#[test]
fn nagare_bench_file_transfer_through_the_tail_input() {
    // issue 4's file-transfer case, run by `nagare bench` against this daemon.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let sink_port = free_port();
    let cfg = format!(
        r#"
[[input]]
type = "tail"
path = "{}/in.log"
tag = "file.in"
refresh_interval = "100ms"
poll_interval = "20ms"
[[output]]
type = "forward"
match = "**"
heartbeat_type = "none"
[[output.server]]
address = "127.0.0.1:{sink_port}"
[output.buffer]
flush_interval = "50ms"
"#,
        d.display()
    );
    std::fs::write(d.join("tail.toml"), cfg).unwrap();
    let out = std::process::Command::new(BIN)
        .args(["bench", "--file-config"])
        .arg(d.join("tail.toml"))
        .args(["--nagare-bin", BIN, "--sink"])
        .arg(format!("127.0.0.1:{sink_port}"))
        .args(["--file-sizes", "10,1024", "--file-rate", "20000"])
        .args(["--duration", "1s", "--warmup", "1s", "--no-png", "--out"])
        .arg(d.join("report"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let csv = std::fs::read_to_string(d.join("report/results.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().filter(|l| l.contains("tail")).collect();
    assert_eq!(rows.len(), 2, "{csv}");
    assert!(err.matches("lost 0 dup 0").count() >= 2, "{err}");
}
