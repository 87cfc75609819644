//! The tail input: lines from files become events; appends, rename rotation,
//! copytruncate, restarts with the position database and long lines.

use std::io::Write;
use std::time::Duration;

use crate::common::*;

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
    read_file(&dir.join("out/unified.log"))
        .lines()
        .map(String::from)
        .collect()
}

/// Waits until the unified file has `n` lines and returns all it has: a
/// caller comparing them with what was written also sees any extra line
/// that came by then (each test checks the whole file once more at the end,
/// after a stop that flushed everything).
fn wait_lines(dir: &std::path::Path, n: usize) -> Vec<String> {
    wait_until(WAIT, &format!("{n} lines in the unified file"), || {
        out_lines(dir).len() >= n
    });
    out_lines(dir)
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
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
    let mut all = want.clone(); // every line written so far
    all.extend(expected("a", 3000..3100));
    all.extend(expected("b", 0..500));
    assert_eq!(
        sorted(got),
        sorted(all.clone()),
        "every line once across the rotation"
    );

    // copytruncate: the file is copied away and truncated in place.
    std::fs::copy(&log, d.join("logs/app.log.copy")).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(0)
        .unwrap();
    // New lines only once the truncation was seen: had the file grown past
    // the old offset first, no tailer could tell it was truncated.
    nagare.wait_log("file truncated; reading from its start");
    append(&log, 0..200, "c");
    let got = wait_lines(d, 3800);
    let c_lines: Vec<&String> = got.iter().filter(|l| l.starts_with("c ")).collect();
    assert_eq!(c_lines.len(), 200, "lines after the truncation are read");
    // (app.log.copy is outside the glob: *.log does not match *.log.copy.)

    // Restart: lines written while nagare is down are read once, nothing again.
    assert!(nagare.terminate().success());
    let before = out_lines(d).len();
    append(&log, 200..700, "c");
    let mut nagare = Daemon::start(d, "tail", &config(d, ""), None);
    wait_lines(d, before + 500);
    // Stopped, nagare has written out everything it read.
    assert!(nagare.terminate().success());
    let got = out_lines(d);
    assert_eq!(
        got.len(),
        before + 500,
        "no line read twice after the restart"
    );
    let tail: Vec<String> = got[before..].to_vec();
    assert_eq!(tail, expected("c", 200..700));
    // The whole file: every line written, once; nothing excluded.
    all.extend(expected("c", 0..700));
    assert_eq!(sorted(got), sorted(all));
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
        let mut n = Daemon::start(d, "tail", &config(d, &extra), None);
        wait_lines(d, want.len());
        assert!(n.terminate().success());
        assert_eq!(out_lines(d), want, "policy {policy}");
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

/// Both timers at an hour, so only inotify can find anything in time: lines
/// appended to a followed file, a file created after start and a rotation
/// (rename + create, the writer finishing in the renamed file) all arrive
/// within seconds, each line once. The same config with `watch = false` must
/// deliver none of it in that time: the first half depends on the watch. The
/// two run side by side, each on a folder of its own, given the same lines
/// at the same moment; the control has nothing to wait for, so it is checked
/// once the watched one has delivered everything and stopped.
#[test]
fn inotify_finds_new_lines_files_and_rotations_without_the_timers() {
    let start = |watch: bool| {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("logs")).unwrap();
        append(&d.join("logs/app.log"), 0..3, "a");
        let cfg = config(d, &format!("watch = {watch}\n"))
            .replace(
                r#"refresh_interval = "100ms""#,
                r#"refresh_interval = "1h""#,
            )
            .replace(r#"poll_interval = "20ms""#, r#"poll_interval = "1h""#);
        let n = Daemon::start(d, "tail", &cfg, None);
        (dir, n)
    };
    let (watched_dir, mut n) = start(true);
    let (control_dir, _control) = start(false);
    let (d, c) = (watched_dir.path(), control_dir.path());
    // Read at start by the first scan, whatever `watch` is.
    assert_eq!(wait_lines(d, 3), expected("a", 0..3), "watch = true");
    assert_eq!(wait_lines(c, 3), expected("a", 0..3), "watch = false");

    for dir in [c, d] {
        append(&dir.join("logs/app.log"), 3..10, "a");
        append(&dir.join("logs/new.log"), 0..5, "n");
    }
    let soon = Duration::from_secs(5);
    wait_until(soon, "appended lines and a new file via inotify", || {
        out_lines(d).len() >= 15
    });

    // Rotation: rename, the writer finishes in the old file, a new file
    // takes the name.
    let log = d.join("logs/app.log");
    std::fs::rename(&log, d.join("logs/app.log.1")).unwrap();
    append(&d.join("logs/app.log.1"), 10..20, "a");
    append(&log, 0..5, "b");
    wait_until(soon, "a rotation via inotify", || out_lines(d).len() >= 30);
    assert!(n.terminate().success());
    let got = out_lines(d);
    let of =
        |p: &str| -> Vec<String> { got.iter().filter(|l| l.starts_with(p)).cloned().collect() };
    assert_eq!(of("a "), expected("a", 0..20), "old file, in order");
    assert_eq!(of("n "), expected("n", 0..5), "new file, in order");
    assert_eq!(of("b "), expected("b", 0..5), "file after rotation");
    assert_eq!(got.len(), 30, "each line once: {got:?}");
    assert_eq!(
        out_lines(c),
        expected("a", 0..3),
        "watch = false: nothing new in the time the watched one took"
    );
}

/// A folder that does not exist yet cannot be watched: that is logged once,
/// naming it, and the input polls; once the folder is there, the next
/// refresh sets the watch up, so lines appended later arrive with
/// `poll_interval` at an hour (only the watch can read them).
#[test]
fn a_missing_folder_is_watched_once_it_appears() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A second input, `watch = false` with the same refresh_interval, on a
    // folder that exists: a file dropped there is found only by a refresh,
    // so its output shows the refreshes going by.
    let probe = format!(
        r#"
[[input]]
type = "tail"
path = ["{d}/probe/*.log"]
tag = "probe"
position_db = "{d}/probe.pos"
read_from_head = true
watch = false
refresh_interval = "300ms"
poll_interval = "1h"
[[output]]
type = "file"
match = "probe"
path = "{d}/probe.out"
format = "single_value"
[output.buffer]
flush_interval = "50ms"
"#,
        d = d.display()
    );
    std::fs::create_dir_all(d.join("probe")).unwrap();
    let cfg = config(d, &probe)
        .replace(
            r#"refresh_interval = "100ms""#,
            r#"refresh_interval = "300ms""#,
        )
        .replace(r#"poll_interval = "20ms""#, r#"poll_interval = "1h""#);
    let n = Daemon::start(d, "tail", &cfg, None);
    n.wait_log("cannot watch the folder");
    // Let a few refreshes (300 ms) meet the missing folder: it is reported
    // once, not at each. Four files dropped one after the other into the
    // probe's folder, each once the one before was read, take four of the
    // probe's refreshes: three periods at least, in which the tail input's
    // own refreshes met the missing folder.
    for k in 0..4 {
        std::fs::write(d.join(format!("probe/{k}.log")), format!("probe {k}\n")).unwrap();
        wait_until(WAIT, &format!("probe file {k} read at a refresh"), || {
            read_file(&d.join("probe.out")).lines().count() > k
        });
    }
    std::fs::create_dir_all(d.join("logs")).unwrap();
    let log = d.join("logs/app.log");
    append(&log, 0..3, "a");
    // Found by a refresh (the folder's watch is set up by the same one).
    assert_eq!(wait_lines(d, 3), expected("a", 0..3));
    append(&log, 3..6, "a");
    wait_until(
        Duration::from_secs(5),
        "lines read via the new watch",
        || out_lines(d).len() >= 6,
    );
    assert_eq!(out_lines(d), expected("a", 0..6));
    let err = n.stderr();
    let logs = d.join("logs").display().to_string();
    let warned: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("cannot watch the folder"))
        .collect();
    assert_eq!(warned.len(), 1, "logged once: {err}");
    assert!(warned[0].contains(&logs), "names the folder: {}", warned[0]);
    assert!(err.contains("watching the folder again"), "{err}");
}

/// The output's lines that start with `prefix`.
fn lines_of(dir: &std::path::Path, prefix: &str) -> Vec<String> {
    out_lines(dir)
        .into_iter()
        .filter(|l| l.starts_with(&format!("{prefix} ")))
        .collect()
}

#[test]
fn a_path_with_a_tab_and_a_newline_keeps_its_position_across_restarts() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("logs")).unwrap();
    // Tabs on both sides of the newline: the old tab-separated file lost
    // this position, and the file was read again from its head.
    let weird = d.join("logs/a\ttab\nand\tanother.log");
    let plain = d.join("logs/plain.log");
    append(&weird, 0..100, "w");
    append(&plain, 0..100, "p");
    let mut nagare = Daemon::start(d, "tail", &config(d, ""), None);
    wait_lines(d, 200);
    assert!(nagare.terminate().success());

    // One JSON object per file; the odd path is kept whole.
    let pos = read_file(&d.join("tail.pos"));
    let entries: Vec<serde_json::Value> = pos
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(entries.len(), 2, "{pos}");
    for path in [&weird, &plain] {
        let e = entries
            .iter()
            .find(|e| e["path"] == path.to_str().unwrap())
            .unwrap_or_else(|| panic!("no {path:?} in {pos}"));
        let meta = std::fs::metadata(path).unwrap();
        assert_eq!(e["inode"], meta.ino());
        assert_eq!(e["offset"], meta.len(), "read to the end: {pos}");
    }

    // Lines written while nagare is down are read once after the restart,
    // and nothing is read again.
    append(&weird, 100..300, "w");
    append(&plain, 100..250, "p");
    let mut nagare = Daemon::start(d, "tail", &config(d, ""), None);
    wait_lines(d, 550);
    // Everything read is written out by the time nagare exits.
    assert!(nagare.terminate().success());
    assert_eq!(lines_of(d, "w"), expected("w", 0..300));
    assert_eq!(lines_of(d, "p"), expected("p", 0..250));
    assert_eq!(out_lines(d).len(), 550);
}

#[test]
fn a_position_file_of_the_previous_release_is_read() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("logs")).unwrap();
    let log = d.join("logs/app.log");
    append(&log, 0..100, "old");
    // path<TAB>inode<TAB>offset, saved after the first 60 lines.
    let offset: usize = expected("old", 0..60).iter().map(|l| l.len() + 1).sum();
    let ino = std::fs::metadata(&log).unwrap().ino();
    std::fs::write(
        d.join("tail.pos"),
        format!("{}\t{ino}\t{offset}\n", log.display()),
    )
    .unwrap();
    // read_from_head: a file without a saved position would be read whole.
    let mut nagare = Daemon::start(d, "tail", &config(d, ""), None);
    wait_lines(d, 40);
    assert!(nagare.terminate().success());
    assert_eq!(out_lines(d), expected("old", 60..100));
    // Saved again in the current format.
    let pos = read_file(&d.join("tail.pos"));
    let e: serde_json::Value = serde_json::from_str(pos.trim()).unwrap();
    assert_eq!(e["inode"], ino);
    assert_eq!(e["offset"], std::fs::metadata(&log).unwrap().len());
    assert_eq!(e["path"], log.to_str().unwrap());
}

/// The 1,000 lines the real Fluentd and Fluent Bit read to the end before
/// they wrote tests/samples/tail-state (19,893 bytes: offset 0x4db5).
fn peer_app_log(path: &std::path::Path) {
    let text: String = (1..=1000)
        .map(|n| format!("line {n} of app.log\n"))
        .collect();
    assert_eq!(text.len(), 19_893);
    std::fs::write(path, text).unwrap();
}

fn inode(path: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).unwrap().ino()
}

/// Moving over from Fluentd or Fluent Bit: the positions they saved are
/// imported at the first start, so a file resumes at the line after the
/// last one the peer read (nothing re-shipped, nothing skipped); a file
/// whose inode is not the one saved (another file at the path since) is
/// read as new. At the next start nagare's own positions are used.
#[test]
fn positions_saved_by_fluentd_and_fluent_bit_are_imported_at_the_first_start() {
    let samples = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/samples/tail-state");
    for peer in ["fluentd", "fluent_bit"] {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        let (app, other) = (logs.join("app.log"), logs.join("other.log"));
        peer_app_log(&app);
        let text: String = (1..=1000)
            .map(|n| format!("line {n} of other.log\n"))
            .collect();
        std::fs::write(&other, text).unwrap();
        // The peer's state, with the path and inode rewritten for this
        // machine's files: app.log's own inode; other.log's inode is not
        // its own.
        let (key, state) = if peer == "fluentd" {
            let text = read_file(&std::path::Path::new(samples).join("fluentd-1.16/app.log.pos"));
            assert_eq!(
                text,
                "/var/log/app/app.log\t0000000000004db5\t0000000000a28009\n"
            );
            let pos = dir.path().join("app.log.pos");
            std::fs::write(
                &pos,
                format!(
                    "{}\t0000000000004db5\t{:016x}\n{}\t0000000000004db5\t{:016x}\n",
                    app.display(),
                    inode(&app),
                    other.display(),
                    inode(&other) + 1
                ),
            )
            .unwrap();
            ("import_fluentd_pos_file", pos)
        } else {
            let db = dir.path().join("tail.db");
            std::fs::copy(
                std::path::Path::new(samples).join("fluent-bit-4.2/tail.db"),
                &db,
            )
            .unwrap();
            let c = rusqlite::Connection::open(&db).unwrap();
            let row: (String, i64, i64) = c
                .query_row("SELECT name, offset, inode FROM in_tail_files", [], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .unwrap();
            assert_eq!(row, ("/var/log/app/app.log".into(), 19_893, 10_649_610));
            c.execute(
                "UPDATE in_tail_files SET name = ?1, inode = ?2",
                rusqlite::params![app.to_str().unwrap(), inode(&app) as i64],
            )
            .unwrap();
            c.execute(
                "INSERT INTO in_tail_files (name, offset, inode, created, rotated) VALUES (?1, 19893, ?2, 0, 0)",
                rusqlite::params![other.to_str().unwrap(), inode(&other) as i64 + 1],
            )
            .unwrap();
            ("import_fluent_bit_db", db)
        };
        // Lines written while no collector ran.
        let more = |path: &std::path::Path, from: u64, to: u64| {
            let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
            for n in from..=to {
                writeln!(
                    f,
                    "line {n} of {}",
                    path.file_name().unwrap().to_str().unwrap()
                )
                .unwrap();
            }
        };
        more(&app, 1001, 1003);
        more(&other, 1001, 1001);
        let extra = format!("{key} = \"{}\"\n", state.display());
        let mut d = Daemon::start(dir.path(), "nagare", &config(dir.path(), &extra), None);
        // app.log resumes after line 1000; other.log (inode not the saved
        // one) is read whole, as a new file with read_from_head.
        let got = wait_lines(dir.path(), 3 + 1001);
        assert!(d.terminate().success());
        let app_lines: Vec<&String> = got.iter().filter(|l| l.ends_with("of app.log")).collect();
        assert_eq!(
            app_lines,
            [
                "line 1001 of app.log",
                "line 1002 of app.log",
                "line 1003 of app.log"
            ],
            "{peer}"
        );
        assert_eq!(
            got.iter().filter(|l| l.ends_with("of other.log")).count(),
            1001,
            "{peer}"
        );
        assert_eq!(out_lines(dir.path()).len(), 1004, "{peer}");
        // The next start uses nagare's own positions, not the import again.
        more(&app, 1004, 1004);
        let mut d = Daemon::start(dir.path(), "nagare", &config(dir.path(), &extra), None);
        wait_lines(dir.path(), 1005);
        d.wait_log("position_db exists");
        assert!(d.terminate().success());
        let all = out_lines(dir.path());
        assert_eq!(all.len(), 1005, "{peer}");
        assert_eq!(all.last().unwrap(), "line 1004 of app.log");
    }
}
