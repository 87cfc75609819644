//! The fuse input with the real binary: a FUSE mount in a tempdir, files
//! written into it by real processes (sh, dd, cat, python3), and what arrives at the
//! outputs checked byte for byte or by count and sequence. Every test skips,
//! loudly (`SKIPPED:`, or a failure under NAGARE_TEST_REQUIRE), only where
//! /dev/fuse is absent.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::*;

/// Skips the calling test (loudly, see `skip_unless`) where /dev/fuse is absent.
fn no_fuse() -> bool {
    skip_unless(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse absent: the fuse input cannot be tested on this machine",
    )
}

fn mounted(mp: &Path) -> bool {
    let mp = std::fs::canonicalize(mp).unwrap_or_else(|_| mp.to_path_buf());
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    mounts.lines().any(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        f.len() > 2 && f[0] == "nagare" && f[1] == mp.to_str().unwrap() && f[2].starts_with("fuse")
    })
}

/// Unmounts (lazily) a mount a failed test left behind, so that no dead
/// mount outlives the test whatever happened.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        if mounted(&self.0) {
            let c = std::ffi::CString::new(self.0.to_str().unwrap()).unwrap();
            // SAFETY: a valid NUL-terminated path.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

fn wait_mounted(n: &mut Daemon, mp: &Path) {
    wait_until(WAIT, &format!("{} mounted", mp.display()), || {
        if let Ok(Some(st)) = n.child.try_wait() {
            panic!("nagare exited ({st}); stderr:\n{}", n.stderr());
        }
        mounted(mp)
    });
}

fn sh(script: &str) {
    let out = Command::new("sh").arg("-c").arg(script).output().unwrap();
    assert!(
        out.status.success(),
        "sh -c {script:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// (tag, message, path) of each JSON line on stdout.
fn stdout_events(n: &Daemon) -> Vec<(String, String, String)> {
    n.stdout_lines()
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["tag"].as_str().unwrap().to_string(),
                v["record"]["message"].as_str().unwrap().to_string(),
                v["record"]["path"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn stdout_config(mp: &Path) -> String {
    stdout_config_with(mp, "")
}

/// `extra`: more options of the fuse input.
fn stdout_config_with(mp: &Path, extra: &str) -> String {
    format!(
        r#"
[[input]]
type = "fuse"
mountpoint = "{}"
tag = "fuse.*"
path_key = "path"
flush_interval = "50ms"
{extra}
[[output]]
type = "stdout"
match = "fuse.**"
[output.buffer]
flush_interval = "50ms"
"#,
        mp.display()
    )
}

#[test]
fn files_written_into_the_mount_become_events_tagged_by_path() {
    if no_fuse() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mp = dir.path().join("drop"); // created by nagare
    let _unmount = Unmount(mp.clone());
    let mut n = Daemon::start(dir.path(), "fuse", &stdout_config(&mp), None);
    wait_mounted(&mut n, &mp);
    let m = mp.display();
    sh(&format!(
        "set -e; echo one > {m}/a.log; echo two >> {m}/a.log; mkdir -p {m}/app/web; \
         printf 'w1\\nw2\\n' > {m}/app/web/x.log; touch {m}/empty.log; \
         printf 'no newline at the end' >> {m}/app/last.log"
    ));
    let want = vec![
        ("fuse.a.log", "one", "a.log"),
        ("fuse.a.log", "two", "a.log"),
        ("fuse.app.web.x.log", "w1", "app/web/x.log"),
        ("fuse.app.web.x.log", "w2", "app/web/x.log"),
        // The unterminated last line is an event when its writer closes the file.
        ("fuse.app.last.log", "no newline at the end", "app/last.log"),
    ];
    n.wait_stdout_lines(want.len());
    let mut got = stdout_events(&n);
    got.sort();
    let mut want: Vec<(String, String, String)> = want
        .into_iter()
        .map(|(a, b, c)| (a.into(), b.into(), c.into()))
        .collect();
    want.sort();
    assert_eq!(got, want);
    // The tree looks like a filesystem: sizes count the bytes written,
    // reads return nothing (no data is kept), mv/rm/rmdir work.
    assert_eq!(std::fs::metadata(mp.join("a.log")).unwrap().len(), 8);
    assert_eq!(
        std::fs::metadata(mp.join("app/web/x.log")).unwrap().len(),
        6
    );
    assert_eq!(std::fs::read(mp.join("a.log")).unwrap(), b"");
    let mut names: Vec<String> = std::fs::read_dir(&mp)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["a.log", "app", "empty.log"]);
    std::fs::rename(mp.join("app/web/x.log"), mp.join("moved.log")).unwrap();
    sh(&format!("echo after-move >> {m}/moved.log"));
    std::fs::remove_file(mp.join("moved.log")).unwrap();
    std::fs::remove_dir(mp.join("app/web")).unwrap();
    assert!(!mp.join("app/web").exists());
    n.wait_stdout_lines(6);
    let last = stdout_events(&n).pop().unwrap();
    assert_eq!(
        last,
        (
            "fuse.moved.log".into(),
            "after-move".into(),
            "moved.log".into()
        ),
        "a renamed file's lines carry its new path"
    );
    // Shutdown unmounts cleanly, having put out every line once.
    assert!(n.terminate().success(), "stderr:\n{}", n.stderr());
    assert_eq!(stdout_events(&n).len(), 6, "stdout:\n{}", n.stdout());
    assert!(!mounted(&mp), "still mounted after shutdown");
    assert!(
        n.stderr().contains("FUSE filesystem unmounted"),
        "stderr:\n{}",
        n.stderr()
    );
}

#[test]
fn a_big_file_arrives_byte_for_byte_and_long_lines_are_split() {
    if no_fuse() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mp = d.join("mnt");
    let out = d.join("out.log");
    let cfg = format!(
        r#"
[[input]]
type = "fuse"
mountpoint = "{}"
max_line_size = "1KiB"
[[output]]
type = "file"
match = "fuse.big.log"
path = "{}"
format = "single_value"
[output.buffer]
flush_interval = "50ms"
[[output]]
type = "file"
match = "fuse.long.log"
path = "{}/long.out"
format = "single_value"
[output.buffer]
flush_interval = "50ms"

# A second mount in the same daemon, dropping long lines.
[[input]]
type = "fuse"
mountpoint = "{}/mnt2"
tag = "skip.*"
max_line_size = "1KiB"
long_lines = "skip"
[[output]]
type = "file"
match = "skip.**"
path = "{}/skip.out"
format = "single_value"
[output.buffer]
flush_interval = "50ms"
"#,
        mp.display(),
        out.display(),
        d.display(),
        d.display(),
        d.display()
    );
    let _unmount = Unmount(mp.clone());
    let _unmount2 = Unmount(d.join("mnt2"));
    let mut n = Daemon::start(d, "big", &cfg, None);
    wait_mounted(&mut n, &mp);
    wait_mounted(&mut n, &d.join("mnt2"));
    // Tabs, quotes, backslashes and UTF-8 come through as they are.
    let mut text = String::new();
    for i in 0..50_000 {
        text.push_str(&format!(
            "{i:06}\tquote\" back\\slash ünïcödé {}\n",
            "z".repeat(i % 300)
        ));
    }
    std::fs::write(d.join("src.txt"), &text).unwrap();
    sh(&format!(
        "cat {}/src.txt > {}/big.log",
        d.display(),
        mp.display()
    ));
    // A 2500-byte line with max_line_size 1KiB: pieces of 1024, 1024, 452.
    let long = "L".repeat(2500);
    std::fs::write(mp.join("long.log"), format!("{long}\nshort\n")).unwrap();
    wait_until(WAIT, "the big file complete", || {
        std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0) >= text.len() as u64
    });
    wait_file_lines(&d.join("long.out"), 4);
    // Skipped: a long line in one write, and one that grows past the limit
    // over several writes (dropped up to its newline); the rest is kept.
    {
        use std::io::Write;
        let mut f = std::fs::File::create(d.join("mnt2/s.log")).unwrap();
        f.write_all(format!("before\n{}\nmiddle\n", "X".repeat(2000)).as_bytes())
            .unwrap();
        for _ in 0..3 {
            f.write_all("S".repeat(600).as_bytes()).unwrap();
        }
        f.write_all(b"SSS\nafter\n").unwrap();
    }
    wait_file_lines(&d.join("skip.out"), 3);
    // Stopped, the daemon has written out everything: each file is exact.
    assert!(n.terminate().success());
    assert!(!mounted(&mp));
    let got = std::fs::read(&out).unwrap();
    assert!(
        got == text.as_bytes(),
        "the output differs from the file written ({} vs {} bytes)",
        got.len(),
        text.len()
    );
    let long_out = read_file(&d.join("long.out"));
    let pieces: Vec<&str> = long_out.lines().collect();
    assert_eq!(
        pieces,
        [&long[..1024], &long[1024..2048], &long[2048..], "short"]
    );
    assert_eq!(read_file(&d.join("skip.out")), "before\nmiddle\nafter\n");
}

#[test]
fn concurrent_writers_never_interleave_inside_a_line() {
    if no_fuse() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mp = d.join("mnt");
    let out = d.join("out.log");
    let cfg = format!(
        r#"
[[input]]
type = "fuse"
mountpoint = "{}"
[[output]]
type = "file"
match = "**"
path = "{}"
format = "single_value"
[output.buffer]
flush_interval = "50ms"
"#,
        mp.display(),
        out.display()
    );
    let _unmount = Unmount(mp.clone());
    let mut n = Daemon::start(d, "writers", &cfg, None);
    wait_mounted(&mut n, &mp);
    // Two processes append 300-byte lines to one file in 13-byte writes, so
    // every line reaches the filesystem in many pieces, interleaved with the
    // other writer's pieces.
    const LINES: usize = 1500;
    let mut writers = Vec::new();
    for w in ["A", "B"] {
        let mut text = String::new();
        for i in 0..LINES {
            text.push_str(&format!("{w}{i:05} {}\n", w.repeat(293)));
        }
        let src = d.join(format!("{w}.txt"));
        std::fs::write(&src, &text).unwrap();
        writers.push(
            Command::new("dd")
                .arg(format!("if={}", src.display()))
                .arg(format!("of={}/shared.log", mp.display()))
                .args(["bs=13", "oflag=append", "conv=notrunc", "status=none"])
                .spawn()
                .unwrap(),
        );
    }
    for mut w in writers {
        assert!(w.wait().unwrap().success());
    }
    let text = wait_file_lines(&out, 2 * LINES);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2 * LINES, "no line split or merged");
    for w in ["A", "B"] {
        let mine: Vec<&str> = lines.iter().copied().filter(|l| l.starts_with(w)).collect();
        let want: Vec<String> = (0..LINES)
            .map(|i| format!("{w}{i:05} {}", w.repeat(293)))
            .collect();
        assert_eq!(mine.len(), LINES, "writer {w}: every line once");
        for (i, (got, want)) in mine.iter().zip(&want).enumerate() {
            assert_eq!(got, want, "writer {w}: line {i} whole and in order");
        }
    }
    assert!(n.terminate().success());
}

#[test]
fn json_lines_are_parsed_and_forwarded_in_sequence() {
    if no_fuse() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mp = d.join("mnt");
    let sink = Sink::start(SinkOpts::default());
    let cfg = format!(
        r#"
[[input]]
type = "fuse"
mountpoint = "{}"
tag = "app.*"
[input.parser]
type = "json"
[[output]]
type = "forward"
match = "app.**"
heartbeat_type = "none"
[[output.server]]
address = "127.0.0.1:{}"
[output.buffer]
flush_interval = "50ms"
"#,
        mp.display(),
        sink.port
    );
    let _unmount = Unmount(mp.clone());
    let mut n = Daemon::start(d, "json", &cfg, None);
    wait_mounted(&mut n, &mp);
    const N: u64 = 20_000;
    let mut text = String::new();
    for i in 0..N {
        text.push_str(&format!(
            "{{\"seq\":{i},\"message\":\"{}\"}}\n",
            message_for(i)
        ));
    }
    std::fs::write(d.join("src.json"), &text).unwrap();
    sh(&format!(
        "cat {}/src.json >> {}/events.json",
        d.display(),
        mp.display()
    ));
    sink.wait_count(N as usize);
    // Stopped, the daemon has sent everything; the sink has read it all.
    assert!(n.terminate().success());
    assert!(!mounted(&mp));
    sink.wait_disconnected();
    let events = sink.events();
    assert!(
        events.iter().all(|(t, _)| t == "app.events.json"),
        "tag from the path"
    );
    assert_exact_seqs(&seqs(&events), N);
    assert_eq!(
        seqs(&events),
        (0..N).collect::<Vec<_>>(),
        "in the order written"
    );
}

#[test]
fn a_stale_mount_left_by_kill_9_is_unmounted_at_restart() {
    if no_fuse() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mp: PathBuf = dir.path().join("drop");
    let cfg = stdout_config(&mp);
    let _unmount = Unmount(mp.clone());
    let mut first = Daemon::start(dir.path(), "first", &cfg, None);
    wait_mounted(&mut first, &mp);
    first.signal(libc::SIGKILL);
    first.wait_exit(WAIT);
    // The mount is still there, and dead.
    assert!(mounted(&mp));
    let err = std::fs::metadata(&mp).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOTCONN), "{err}");
    let mut second = Daemon::start(dir.path(), "second", &cfg, None);
    wait_until(WAIT, "the stale mount replaced", || {
        second.stderr().contains("FUSE filesystem mounted")
            || matches!(second.child.try_wait(), Ok(Some(_)))
    });
    assert!(
        second
            .stderr()
            .contains("stale FUSE mount left by a previous run"),
        "stderr:\n{}",
        second.stderr()
    );
    std::fs::write(mp.join("again.log"), "alive\n").unwrap();
    n_wait_message(&second, "alive");
    assert!(second.terminate().success(), "stderr:\n{}", second.stderr());
    assert!(!mounted(&mp), "unmounted at shutdown");
}

fn n_wait_message(n: &Daemon, msg: &str) {
    wait_until(WAIT, &format!("{msg:?} on stdout"), || {
        stdout_events(n).iter().any(|(_, m, _)| m == msg)
    });
}

#[test]
fn a_mountpoint_that_is_a_file_is_a_clear_error() {
    if no_fuse() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("plain-file");
    std::fs::write(&f, "x").unwrap();
    let mut n = Daemon::start(dir.path(), "bad", &stdout_config(&f), None);
    let st = n.wait_exit(WAIT);
    assert!(!st.success());
    let err = n.stderr();
    assert!(
        err.contains(&f.display().to_string()) && err.contains("fuse#0"),
        "the error names the input and the mountpoint:\n{err}"
    );
}

#[test]
fn check_refuses_a_multiline_parser_naming_the_line() {
    // Config checking needs no FUSE: this runs everywhere.
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("ml.toml");
    std::fs::write(
        &cfg,
        "[[input]]\ntype = \"fuse\"\nmountpoint = \"/x\"\n[input.parser]\ntype = \"multiline\"\nformat_firstline = \"^\\\\d\"\n[[output]]\ntype = \"stdout\"\nmatch = \"**\"\n",
    )
    .unwrap();
    let out = run_check(&cfg);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr:\n{err}");
    assert!(
        err.contains("ml.toml:5: key `parser.type`")
            && err.contains("not supported by the fuse input"),
        "stderr:\n{err}"
    );
}

#[test]
fn a_full_output_buffer_blocks_the_writer_without_loss() {
    if no_fuse() {
        return;
    }
    use std::io::Write;
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mp = d.join("mnt");
    let sink = Sink::start(SinkOpts {
        rcvbuf: Some(64 * 1024),
        ..Default::default()
    });
    let mon = free_port();
    let cfg = format!(
        r#"[monitor]
bind = "127.0.0.1:{mon}"
[[input]]
type = "fuse"
mountpoint = "{}"
tag = "bp.*"
[input.parser]
type = "json"
[[output]]
type = "forward"
match = "**"
heartbeat_type = "none"
send_timeout = "30s"
[[output.server]]
address = "127.0.0.1:{}"
[output.buffer]
flush_interval = "20ms"
chunk_limit_size = "64KiB"
total_limit_size = "256KiB"
overflow_action = "block"
"#,
        mp.display(),
        sink.port
    );
    let _unmount = Unmount(mp.clone());
    let mut n = Daemon::start(d, "bp", &cfg, Some(mon));
    wait_mounted(&mut n, &mp);
    sink.pause(true);
    // ~40 MB of lines: far more than the buffer, the channel to the line
    // task (16 writes) and the socket buffers together.
    const N: u64 = 200_000;
    let written = Arc::new(AtomicU64::new(0));
    let writer = {
        let written = written.clone();
        let path = mp.join("app.log");
        std::thread::spawn(move || {
            let mut f = std::fs::File::create(path).unwrap();
            let pad = "p".repeat(150);
            let mut s = 0;
            while s < N {
                let mut chunk = String::new();
                for i in s..s + 100 {
                    chunk.push_str(&format!("{{\"seq\":{i},\"pad\":\"{pad}\"}}\n"));
                }
                f.write_all(chunk.as_bytes()).unwrap();
                s += 100;
                written.store(s, SeqCst);
            }
        })
    };
    wait_stalled(&written, N, "writer");
    sink.pause(false);
    writer.join().unwrap();
    sink.wait_count(N as usize);
    assert_eq!(n.metric("errors_total", "fuse#0"), 0);
    assert_eq!(n.metric("dropped_events_total", "forward#0"), 0);
    assert!(n.terminate().success());
    sink.wait_disconnected();
    assert_eq!(
        seqs(&sink.events()),
        (0..N).collect::<Vec<_>>(),
        "every line once, in order"
    );
}

#[test]
fn the_example_config_passes_check() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/fuse.toml");
    let out = run_check(example);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_file_held_open_does_not_stall_shutdown() {
    if no_fuse() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mp = dir.path().join("drop");
    let _unmount = Unmount(mp.clone());
    let mut n = Daemon::start(dir.path(), "held", &stdout_config(&mp), None);
    wait_mounted(&mut n, &mp);
    // A writer that keeps its file open across the shutdown: it writes its
    // last line only when the test says so, after the daemon has exited (a
    // shutdown that waited for the file would not end: terminate fails).
    let mut holder = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec 3>>{}/held.log; echo whole >&3; printf partial >&3; read go; echo late >&3",
            mp.display()
        ))
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_until(WAIT, "the whole line", || {
        stdout_events(&n).iter().any(|(_, m, _)| m == "whole")
    });
    assert!(n.terminate().success(), "stderr:\n{}", n.stderr());
    drop(holder.stdin.take()); // `read` returns: the writer goes on
    let msgs: Vec<String> = stdout_events(&n).into_iter().map(|(_, m, _)| m).collect();
    assert_eq!(
        msgs,
        ["whole", "partial"],
        "what was written before the shutdown, nothing else"
    );
    assert!(!mounted(&mp));
    assert!(
        !holder.wait().unwrap().success(),
        "the write after the shutdown fails"
    );
}

/// A python3 process that runs `script` with `fd` open for appending on
/// `path` (unbuffered os.write calls: each is one write() the daemon sees).
/// It reports progress on stdout, one line per step, and waits on stdin
/// where the script reads it, so the test decides when it closes the file.
fn python_writer(path: &Path, script: &str) -> std::process::Child {
    let prelude = format!(
        "import os, sys, time\nfd = os.open({:?}, os.O_WRONLY | os.O_CREAT | os.O_APPEND)\n\
         def step(s):\n    print(s, flush=True)\n",
        path.to_str().unwrap()
    );
    Command::new("python3")
        .arg("-c")
        .arg(prelude + script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs")
}

fn read_step(r: &mut impl std::io::BufRead) -> String {
    let mut l = String::new();
    r.read_line(&mut l).unwrap();
    l.trim_end().to_string()
}

#[test]
fn a_writer_pausing_mid_line_gets_its_line_whole() {
    if no_fuse() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mp = dir.path().join("drop");
    let _unmount = Unmount(mp.clone());
    // flush_interval 50ms: batches go fast, yet a 1 s pause inside a line
    // (block-buffered stdio on a loaded machine) must not cut it, since the
    // default partial_line_timeout is 5s.
    let mut n = Daemon::start(dir.path(), "pause", &stdout_config(&mp), None);
    wait_mounted(&mut n, &mp);
    let mut w = python_writer(
        &mp.join("paused.log"),
        "os.write(fd, b'first half, ')\ntime.sleep(1)\n\
         os.write(fd, b'second half\\n')\nos.write(fd, b'end\\n')\nstep('written')\n\
         sys.stdin.read()\nos.close(fd)\nstep('closed')\n",
    );
    let mut out = std::io::BufReader::new(w.stdout.take().unwrap());
    assert_eq!(read_step(&mut out), "written");
    n.wait_stdout_lines(2);
    let msgs =
        |n: &Daemon| -> Vec<String> { stdout_events(n).into_iter().map(|(_, m, _)| m).collect() };
    assert_eq!(msgs(&n), ["first half, second half", "end"]);
    drop(w.stdin.take()); // the writer closes the file
    assert_eq!(read_step(&mut out), "closed");
    assert!(w.wait().unwrap().success());
    // Stopped, the daemon has put out everything: no piece of the line
    // while the file was open, nothing at its close.
    assert!(n.terminate().success(), "stderr:\n{}", n.stderr());
    assert_eq!(msgs(&n), ["first half, second half", "end"]);
}

#[test]
fn a_partial_line_of_a_quiet_writer_goes_after_partial_line_timeout() {
    if no_fuse() {
        return;
    }
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let mp = dir.path().join("drop");
    let _unmount = Unmount(mp.clone());
    let cfg = stdout_config_with(&mp, "partial_line_timeout = \"1s\"");
    let mut n = Daemon::start(dir.path(), "quiet", &cfg, None);
    wait_mounted(&mut n, &mp);
    let mut w = python_writer(
        &mp.join("quiet.log"),
        "os.write(fd, b'unfinished')\nstep('written')\nsys.stdin.readline()\n\
         os.write(fd, b'later\\n')\nstep('later')\nsys.stdin.read()\nos.close(fd)\n",
    );
    let mut out = std::io::BufReader::new(w.stdout.take().unwrap());
    assert_eq!(read_step(&mut out), "written");
    let t = std::time::Instant::now();
    // Not before the timeout (flush_interval, 50ms, does not send it), and
    // well before the default timeout (5s): the option is the one used.
    wait_until(WAIT, "the partial line", || !stdout_events(&n).is_empty());
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(4),
        "the partial line came after {waited:?}, not about 1s"
    );
    // The file is still open; the writer's next data starts a new line.
    let mut stdin = w.stdin.take().unwrap();
    stdin.write_all(b"go\n").unwrap();
    assert_eq!(read_step(&mut out), "later");
    n.wait_stdout_lines(2);
    drop(stdin);
    assert!(w.wait().unwrap().success());
    assert!(n.terminate().success(), "stderr:\n{}", n.stderr());
    let msgs: Vec<String> = stdout_events(&n).into_iter().map(|(_, m, _)| m).collect();
    assert_eq!(msgs, ["unfinished", "later"]);
}
