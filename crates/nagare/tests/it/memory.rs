//! Memory follows the limits: whatever the input, the daemon's peak RSS
//! stays within what the same binary holds idle (its code and libraries:
//! about 13 MB for the release build with librdkafka and OpenSSL inside),
//! plus its buffers' `total_limit_size`, plus 13 MB (read buffers, chunks in
//! flight), while the sink is stalled and while the backlog flows out.
//!
//! The bound is the release build's: a debug build maps about 10 MB more of
//! its own code. These tests run the daemon named by `NAGARE_BIN`
//! (scripts/test-all.sh sets it to the release build) or the one cargo
//! built for a `--release` test run, and are skipped, loudly, otherwise.

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

use crate::common::*;

const LIMIT: u64 = 8 << 20;
/// Above the idle process and the buffer limit. (It was 24 MB over the
/// buffer limit, idle process included, when the idle process took 10.6 MB.)
const ALLOWANCE: u64 = 13_000_000;

/// The idle RSS of the binary under test, measured once.
static IDLE_RSS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

/// Starts the release daemon on `config`; `None` (after a loud line) when
/// only a debug build is at hand.
fn start_release(dir: &std::path::Path, config: &str, monitor: u16, test: &str) -> Option<Daemon> {
    let bin = match std::env::var_os("NAGARE_BIN") {
        Some(bin) => std::path::PathBuf::from(bin),
        None if cfg!(debug_assertions) => {
            // Reported as skipped, and a failure where every test must run.
            skip_unless(
                false,
                &format!(
                    "{test}: the memory bound is the release build's; \
                     set NAGARE_BIN=target/release/nagare or run cargo test --release"
                ),
            );
            return None;
        }
        None => std::path::PathBuf::from(BIN),
    };
    IDLE_RSS.get_or_init(|| idle_rss(&bin));
    let path = dir.join("memory.toml");
    std::fs::write(&path, config).unwrap();
    let mut cmd = std::process::Command::new(bin);
    cmd.arg("run").arg("-c").arg(&path);
    Some(Daemon::spawn(cmd, dir, path, Some(monitor)))
}

/// The resident memory of `bin` running idle (a forward input, a null
/// output, the monitor): what the process costs before any event.
fn idle_rss(bin: &std::path::Path) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let (port, mon) = (free_port(), free_port());
    let path = dir.path().join("idle.toml");
    std::fs::write(
        &path,
        format!(
            "[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:{port}\"\n\
             [[output]]\ntype = \"null\"\nmatch = \"**\"\n\
             [monitor]\nbind = \"127.0.0.1:{mon}\"\n"
        ),
    )
    .unwrap();
    let mut cmd = std::process::Command::new(bin);
    cmd.arg("run").arg("-c").arg(&path);
    let mut d = Daemon::spawn(cmd, dir.path(), path, Some(mon));
    d.wait_port(port);
    d.wait_port(mon);
    let rss = status_kib(d.child.id(), "VmRSS:") * 1024;
    assert!(d.terminate().success());
    rss
}

/// A `kB` line of /proc/PID/status.
fn status_kib(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("{key} in /proc/{pid}/status"))
}

/// Peak resident memory of a process (VmHWM), in bytes.
fn peak_rss(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:") * 1024
}

fn assert_peak_within_limit(d: &Daemon, when: &str) {
    let peak = peak_rss(d.child.id());
    let idle = *IDLE_RSS.get().expect("measured when the daemon started");
    assert!(
        peak <= idle + LIMIT + ALLOWANCE,
        "{when}: peak RSS {} MB is over the idle process ({} MB) + total_limit_size ({} MB) + 13 MB",
        peak / 1_000_000,
        idle / 1_000_000,
        LIMIT / 1_000_000
    );
    eprintln!("{when}: peak RSS {:.1} MB", peak as f64 / 1e6);
}

/// The buffer's chunk_limit_size (the default), more than a batch of any
/// input here.
const CHUNK: u64 = 2 << 20;

/// Waits until the output's buffer is within a chunk of its limit: the next
/// batch of `input` no longer fits, so the input is held back short of its
/// `n` events, and the buffer stays within the limit (plus the one
/// allocation a staged chunk may have spare).
fn wait_held_back(d: &Daemon, input: &str, n: u64) {
    wait_until(WAIT, "the buffer within a chunk of its limit", || {
        d.metric("buffer_bytes", "forward#0") >= LIMIT - CHUNK
    });
    let v = d.metric("events_in_total", input);
    assert!(v < n, "{input} got to {v} of {n}: never held back");
    let held = d.metric("buffer_bytes", "forward#0");
    assert!(held <= LIMIT + CHUNK, "the buffer holds {held} bytes");
}

fn forward_output(sink: u16, mon: u16) -> String {
    format!(
        r#"[monitor]
bind = "127.0.0.1:{mon}"
[[output]]
type = "forward"
match = "**"
heartbeat_type = "none"
send_timeout = "60s"
[[output.server]]
address = "127.0.0.1:{sink}"
[output.buffer]
total_limit_size = "{LIMIT}"
flush_interval = "100ms"
"#
    )
}

#[test]
fn a_relay_with_a_stalled_sink_and_fast_senders_stays_within_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts {
        rcvbuf: Some(64 * 1024),
        ..Default::default()
    });
    sink.pause(true);
    let (port, mon) = (free_port(), free_port());
    let cfg = format!(
        "[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:{port}\"\n{}",
        forward_output(sink.port, mon)
    );
    let Some(mut d) = start_release(dir.path(), &cfg, mon, "a_relay_with_a_stalled_sink") else {
        return;
    };
    d.wait_port(port);
    // Frames of 1 KiB events (about 210 KB: kept by the buffer as they
    // arrived) and of 100-byte events (about 26 KB: copied together).
    let streams = [("mem.big", 1024, 30_000u64), ("mem.small", 100, 100_000)];
    let senders: Vec<_> = streams
        .iter()
        .map(|&(tag, size, n)| {
            let sent = Arc::new(AtomicU64::new(0));
            let progress = sent.clone();
            let t = std::thread::spawn(move || {
                let pad = "x".repeat(size);
                let mut tx = Sender::tcp_small(port);
                let mut s = 0;
                while s < n {
                    tx.raw(&padded_frame(tag, s..s + 200, &pad));
                    s += 200;
                    progress.store(s, SeqCst);
                }
                tx.finish();
            });
            (sent, t, n)
        })
        .collect();
    for (sent, _, n) in &senders {
        wait_stalled(sent, *n, "sender");
    }
    assert!(d.metric("buffer_bytes", "forward#0") <= LIMIT + CHUNK);
    assert_peak_within_limit(&d, "sink stalled");
    sink.pause(false);
    for (_, t, _) in senders {
        t.join().unwrap();
    }
    sink.wait_count(130_000);
    for (tag, _, n) in streams {
        let got: Vec<u64> = sink
            .events()
            .into_iter()
            .filter(|(t, _)| t == tag)
            .map(|(_, s)| s)
            .collect();
        assert_exact_seqs(&got, n);
    }
    assert_peak_within_limit(&d, "backlog delivered");
    assert!(d.terminate().success());
}

#[test]
fn tail_of_a_large_file_into_a_stalled_output_stays_within_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts {
        rcvbuf: Some(64 * 1024),
        ..Default::default()
    });
    sink.pause(true);
    // 300,000 lines of 100 bytes: 30 MB, almost four times the limit.
    let n = 300_000u64;
    let line = |i: u64| format!("{i:010} {}", "y".repeat(88));
    let path = dir.path().join("large.log");
    let mut text = String::with_capacity(n as usize * 101);
    for i in 0..n {
        text.push_str(&line(i));
        text.push('\n');
    }
    std::fs::write(&path, text).unwrap();
    let mon = free_port();
    let cfg = format!(
        "[[input]]\ntype = \"tail\"\npath = \"{}\"\ntag = \"mem.tail\"\nread_from_head = true\n{}",
        path.display(),
        forward_output(sink.port, mon)
    );
    let Some(mut d) = start_release(dir.path(), &cfg, mon, "tail_of_a_large_file") else {
        return;
    };
    d.wait_port(mon);
    wait_held_back(&d, "tail#0", n);
    assert_peak_within_limit(&d, "output stalled");
    sink.pause(false);
    d.wait_metric("events_out_total", "forward#0", n);
    sink.wait_records(n as usize);
    let records = sink.records();
    for (i, (tag, _, record)) in records.iter().enumerate() {
        assert_eq!(tag, "mem.tail");
        let msg = field_of(record, "message").and_then(|m| m.as_str());
        assert_eq!(msg, Some(line(i as u64).as_str()), "line {i}");
    }
    assert_eq!(records.len() as u64, n);
    assert_peak_within_limit(&d, "file delivered");
    assert!(d.terminate().success());
}
