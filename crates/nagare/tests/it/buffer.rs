//! Buffers: SIGTERM drains everything, overflow actions, retries and the
//! secondary output.

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Instant;

use crate::common::*;

fn forward_cfg(port: u16, mon: u16, sink: u16, buffer: &str, extra: &str) -> String {
    format!(
        r#"[monitor]
bind = "127.0.0.1:{mon}"
[[input]]
type = "forward"
bind = "127.0.0.1:{port}"
[[output]]
type = "forward"
match = "**"
heartbeat_type = "transport"
heartbeat_interval = "200ms"
{extra}
[[output.server]]
address = "127.0.0.1:{sink}"
[output.buffer]
{buffer}
"#
    )
}

#[test]
fn sigterm_drains_everything() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let (port, mon) = (free_port(), free_port());
    let out = dir.path().join("drained.log");
    let cfg = format!(
        r#"[monitor]
bind = "127.0.0.1:{mon}"
[[input]]
type = "forward"
bind = "127.0.0.1:{port}"
[[output]]
type = "copy"
match = "**"
[[output.store]]
type = "forward"
heartbeat_type = "none"
require_ack_response = true
[[output.store.server]]
address = "127.0.0.1:{}"
[output.store.buffer]
flush_interval = "60s"
[[output.store]]
type = "file"
path = "{}"
[output.store.buffer]
flush_interval = "60s"
"#,
        sink.port,
        out.display()
    );
    let mut d = Daemon::start(dir.path(), "drain", &cfg, Some(mon));
    d.wait_port(port);
    let n = 10_000u64;
    let mut tx = Sender::tcp(port);
    // Each frame acked: the daemon holds it before SIGTERM.
    tx.send_acked("drain.events", 0..n, 500, "d");
    // A connection still open at SIGTERM: what it sent before is kept too.
    tx.packed("drain.events", n..n + 100, None);
    d.wait_metric("events_in_total", "forward#0", n + 100);
    // flush_interval 60s: nothing went out before SIGTERM, so the drain is
    // what delivers.
    assert_eq!(sink.count(), 0, "flush_interval 60s: nothing flushed yet");
    assert_eq!(read_file(&out), "");
    let status = d.terminate();
    assert_eq!(status.code(), Some(0), "stderr:\n{}", d.stderr());
    // With acks, every chunk was at the sink before the daemon exited.
    assert_exact_seqs(&sink.seqs(), n + 100);
    assert_exact_seqs(&seqs(&json_lines_seqs(&read_file(&out))), n + 100);
}

#[test]
fn overflow_throw_refuses_and_counts() {
    let dir = tempfile::tempdir().unwrap();
    let sink_port = free_port(); // the sink starts later: downstream is down
    let (port, mon) = (free_port(), free_port());
    let cfg = forward_cfg(
        port,
        mon,
        sink_port,
        "flush_interval = \"20ms\"\nchunk_limit_size = \"1KiB\"\ntotal_limit_size = \"4KiB\"\noverflow_action = \"throw\"\nretry_wait = \"100ms\"\nretry_max_interval = \"200ms\"",
        "",
    );
    let mut d = Daemon::start(dir.path(), "throw", &cfg, Some(mon));
    d.wait_port(port);
    let mut tx = Sender::tcp(port);
    let mut accepted = 0u64;
    let per = 10u64;
    loop {
        let id = format!("t{accepted}");
        tx.packed(
            "throw.events",
            accepted..accepted + per,
            Some(id.as_bytes()),
        );
        match tx.read_msg() {
            Ok(m) => {
                assert_eq!(m, ack_bytes(&mp_str(id.as_bytes())));
                accepted += per;
            }
            Err(_) => break, // refused: closed without an ack
        }
        assert!(accepted < 10_000, "the buffer never overflowed");
    }
    assert!(accepted > 0);
    d.wait_metric("rejected_events_total", "forward#0", per);
    d.wait_log("is full");
    // Downstream comes up: every accepted event arrives, the refused ones do not.
    let sink = Sink::start_on(sink_port, SinkOpts::default());
    sink.wait_count(accepted as usize);
    d.wait_metric("events_out_total", "forward#0", accepted);
    assert_exact_seqs(&sink.seqs(), accepted);
    assert_eq!(d.metric("dropped_events_total", "forward#0"), 0);
    assert!(d.terminate().success());
    assert_eq!(sink.count() as u64, accepted);
}

#[test]
fn overflow_drop_oldest_chunk_counts() {
    let dir = tempfile::tempdir().unwrap();
    let sink_port = free_port();
    let (port, mon) = (free_port(), free_port());
    let cfg = forward_cfg(
        port,
        mon,
        sink_port,
        "flush_interval = \"20ms\"\nchunk_limit_size = \"1KiB\"\ntotal_limit_size = \"4KiB\"\noverflow_action = \"drop_oldest_chunk\"\nretry_wait = \"100ms\"\nretry_max_interval = \"200ms\"",
        "",
    );
    let mut d = Daemon::start(dir.path(), "drop", &cfg, Some(mon));
    d.wait_port(port);
    let mut tx = Sender::tcp(port);
    let n = 1000u64;
    // Every batch accepted (acked), whatever the buffer drops later.
    tx.send_acked("drop.events", 0..n, 10, "x");
    tx.finish();
    wait_until(WAIT, "chunks dropped", || {
        d.metric("dropped_events_total", "forward#0") > 0
    });
    let sink = Sink::start_on(sink_port, SinkOpts::default());
    // Wait until the buffer is empty: delivered + dropped = sent.
    wait_until(WAIT, "the buffer to drain", || {
        d.metric("buffer_bytes", "forward#0") == 0 && sink.count() > 0
    });
    let dropped = d.metric("dropped_events_total", "forward#0");
    let got = sink.seqs();
    assert_eq!(
        got.len() as u64 + dropped,
        n,
        "delivered {} + dropped {dropped}",
        got.len()
    );
    let set: std::collections::HashSet<u64> = got.iter().copied().collect();
    assert_eq!(set.len(), got.len(), "no duplicates");
    assert!(got.iter().all(|&s| s < n));
    // The newest events survive; drops are whole chunks of the oldest.
    assert!(set.contains(&(n - 1)));
    assert_eq!(d.metric("rejected_events_total", "forward#0"), 0);
    d.wait_log("dropped the oldest chunk");
    assert!(d.terminate().success());
}

#[test]
fn overflow_block_slows_the_sender_without_loss() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts {
        rcvbuf: Some(64 * 1024),
        ..Default::default()
    });
    let (port, mon) = (free_port(), free_port());
    let cfg = forward_cfg(
        port,
        mon,
        sink.port,
        "flush_interval = \"20ms\"\nchunk_limit_size = \"64KiB\"\ntotal_limit_size = \"256KiB\"\noverflow_action = \"block\"",
        "send_timeout = \"30s\"",
    );
    let mut d = Daemon::start(dir.path(), "block", &cfg, Some(mon));
    d.wait_port(port);
    sink.pause(true);

    let n = 20_000u64;
    let sent = Arc::new(AtomicU64::new(0));
    let sender = {
        let sent = sent.clone();
        std::thread::spawn(move || {
            // Events with 1 KiB messages.
            let pad = "x".repeat(1024);
            let mut tx = Sender::tcp_small(port);
            let mut s = 0;
            while s < n {
                tx.raw(&padded_frame("block.events", s..s + 50, &pad));
                s += 50;
                sent.store(s, SeqCst);
            }
            tx.finish();
            Instant::now()
        })
    };
    // While the sink does not read, the sender stalls well short of the end.
    wait_stalled(&sent, n, "sender");
    let held = d.metric("buffer_bytes", "forward#0");
    assert!(
        held <= 256 * 1024 + 64 * 1024,
        "buffer holds {held} bytes, over total_limit_size"
    );
    let resumed = Instant::now();
    sink.pause(false);
    let done = sender.join().unwrap();
    assert!(done > resumed);
    sink.wait_count(n as usize);
    assert_exact_seqs(&sink.seqs(), n);
    assert_eq!(d.metric("dropped_events_total", "forward#0"), 0);
    assert_eq!(d.metric("rejected_events_total", "forward#0"), 0);
    assert_eq!(d.metric("bad_input_total", "forward#0"), 0);
    assert!(d.terminate().success());
}

#[test]
fn retries_until_downstream_is_back() {
    let dir = tempfile::tempdir().unwrap();
    let sink_port = free_port();
    let (port, mon) = (free_port(), free_port());
    let cfg = forward_cfg(
        port,
        mon,
        sink_port,
        "flush_interval = \"20ms\"\nretry_wait = \"100ms\"\nretry_max_interval = \"300ms\"",
        "require_ack_response = true",
    );
    let mut d = Daemon::start(dir.path(), "retry", &cfg, Some(mon));
    d.wait_port(port);
    let mut tx = Sender::tcp(port);
    tx.send_seqs("retry.events", 2000, 100);
    tx.finish();
    wait_until(WAIT, "retries while downstream is down", || {
        d.metric("retries_total", "forward#0") >= 2
    });
    let sink = Sink::start_on(sink_port, SinkOpts::default());
    sink.wait_count(2000);
    d.wait_metric("events_out_total", "forward#0", 2000);
    assert_exact_seqs(&sink.seqs(), 2000);
    assert_eq!(d.metric("lost_events_total", "forward#0"), 0);
    assert!(d.terminate().success());
    assert_eq!(sink.count(), 2000);
}

#[test]
fn exhausted_retries_go_to_the_secondary() {
    let dir = tempfile::tempdir().unwrap();
    let dead = free_port();
    let (port, mon) = (free_port(), free_port());
    let dl = dir.path().join("dead-letter.log");
    let cfg = format!(
        "{}[output.secondary]\ntype = \"file\"\npath = \"{}\"\n",
        forward_cfg(
            port,
            mon,
            dead,
            "flush_interval = \"20ms\"\nretry_wait = \"50ms\"\nretry_max_times = 2\nretry_randomize = false",
            "",
        ),
        dl.display()
    );
    let mut d = Daemon::start(dir.path(), "secondary", &cfg, Some(mon));
    d.wait_port(port);
    let mut tx = Sender::tcp(port);
    tx.send_seqs("dead.events", 1500, 100);
    tx.finish();
    let got = json_lines_seqs(&wait_file_lines(&dl, 1500));
    assert!(got.iter().all(|(t, _)| t == "dead.events"));
    assert_exact_seqs(&seqs(&got), 1500);
    d.wait_metric("secondary_events_total", "forward#0", 1500);
    assert_eq!(d.metric("lost_events_total", "forward#0"), 0);
    assert_eq!(d.metric("events_out_total", "forward#0"), 0);
    let retries = d.metric("retries_total", "forward#0");
    assert!(d.terminate().success());
    // Each chunk had its first try plus 2 retries (stderr is complete now).
    let chunks = d.stderr().matches("giving up on chunk").count() as u64;
    assert!(chunks >= 1);
    assert_eq!(retries, chunks * 2);
}

#[test]
fn a_permanent_error_sends_the_chunk_to_the_secondary_at_once() {
    let dir = tempfile::tempdir().unwrap();
    // Paths a retry cannot fix: one runs through a regular file (ENOTDIR),
    // the other names a directory (EISDIR). Root can write anywhere, so a
    // permission error cannot be staged here. The file appears after the
    // start: `nagare check` (and so `run`) refuses a config whose folder
    // cannot be created.
    let blocker = dir.path().join("a-file");
    let a_dir = dir.path().join("a-dir");
    std::fs::create_dir(&a_dir).unwrap();
    let (port, mon) = (free_port(), free_port());
    let (dl_notdir, dl_isdir) = (
        dir.path().join("dl-notdir.log"),
        dir.path().join("dl-isdir.log"),
    );
    // A retry would come after an hour: only the permanent path is fast.
    let buffer = "[output.buffer]\nflush_interval = \"20ms\"\nretry_wait = \"1h\"\nretry_max_interval = \"1h\"";
    let cfg = format!(
        r#"[monitor]
bind = "127.0.0.1:{mon}"
[[input]]
type = "forward"
bind = "127.0.0.1:{port}"
[[output]]
type = "file"
match = "perm.notdir"
path = "{}/sub/events.log"
{buffer}
[output.secondary]
type = "file"
path = "{}"
[[output]]
type = "file"
match = "perm.isdir"
path = "{}"
{buffer}
[output.secondary]
type = "file"
path = "{}"
"#,
        blocker.display(),
        dl_notdir.display(),
        a_dir.display(),
        dl_isdir.display(),
    );
    let mut d = Daemon::start(dir.path(), "permanent", &cfg, Some(mon));
    d.wait_port(port);
    std::fs::write(&blocker, "").unwrap();
    let mut tx = Sender::tcp(port);
    tx.send_seqs("perm.notdir", 500, 100);
    tx.send_seqs("perm.isdir", 500, 100);
    tx.finish();
    for (dl, tag, plugin) in [
        (&dl_notdir, "perm.notdir", "file#0"),
        (&dl_isdir, "perm.isdir", "file#1"),
    ] {
        let got = json_lines_seqs(&wait_file_lines(dl, 500));
        assert!(got.iter().all(|(t, _)| t == tag));
        assert_exact_seqs(&seqs(&got), 500);
        d.wait_metric("secondary_events_total", plugin, 500);
        assert!(d.metric("permanent_errors_total", plugin) >= 1);
        assert_eq!(
            d.metric("permanent_errors_total", plugin),
            d.metric("errors_total", plugin),
            "every failed flush was a permanent error"
        );
        assert_eq!(d.metric("retries_total", plugin), 0);
        assert_eq!(d.metric("lost_events_total", plugin), 0);
        assert_eq!(d.metric("events_out_total", plugin), 0);
    }
    assert!(d.terminate().success());
    let log = d.stderr();
    assert!(log.contains("a retry cannot fix this error"), "{log}");
    assert!(log.contains("Not a directory"), "{log}");
    assert!(log.contains("Is a directory"), "{log}");
}
