//! Shutdown never loses in silence: events acked into a buffer whose output
//! is down are, when shutdown stops waiting (`shutdown_timeout`, or a second
//! SIGTERM), kept in the file buffer for the next start, handed to the
//! secondary output, or written as dead letters that `nagare replay` sends.

use crate::common::*;

/// A relay to `sink` (nothing listens there in these tests until asked),
/// with `buffer` and `extra` lines in its output.
fn relay(port: u16, sink: u16, system: &str, buffer: &str, extra: &str) -> String {
    format!(
        r#"
[system]
{system}

[[input]]
type = "forward"
bind = "127.0.0.1:{port}"

[[output]]
type = "forward"
match = "**"
heartbeat_type = "none"
recover_wait = "100ms"
{extra}
[[output.server]]
address = "127.0.0.1:{sink}"
[output.buffer]
flush_interval = "50ms"
retry_wait = "100ms"
retry_max_interval = "300ms"
{buffer}
"#
    )
}

#[test]
fn a_second_sigterm_writes_a_memory_buffer_to_dead_letters() {
    let dir = tempfile::tempdir().unwrap();
    let (port, sink) = (free_port(), free_port());
    let letters = dir.path().join("letters");
    let system = format!("dead_letter_dir = \"{}\"", letters.display());
    let cfg = relay(port, sink, &system, "", "");
    let mut d = Daemon::start(dir.path(), "mem", &cfg, None);
    d.wait_port(port);
    send_acked_to(port, "down.test", 0..200);
    d.signal(libc::SIGTERM);
    d.wait_log("stopping");
    // The output is down; the default 60 s would pass. A second signal stops waiting.
    d.signal(libc::SIGTERM);
    let st = d.wait_exit(WAIT);
    let err = d.stderr();
    assert_eq!(st.code(), Some(1), "{err}");
    assert!(err.contains("a second stop signal"), "{err}");
    assert!(
        err.contains("200 events were not delivered")
            && err.contains("200 handed to secondary outputs or written as dead letters")
            && err.contains("0 lost"),
        "{err}"
    );
    replay_delivers(&letters.join("forward#0"), 200);
}

#[test]
fn at_shutdown_timeout_a_memory_buffer_goes_to_its_secondary_and_progress_is_logged() {
    let dir = tempfile::tempdir().unwrap();
    let (port, sink) = (free_port(), free_port());
    let out = dir.path().join("secondary.log");
    let secondary = format!(
        "[output.secondary]\ntype = \"file\"\npath = \"{}\"\n",
        out.display()
    );
    // Progress is logged every 5 s: a timeout past that shows one line.
    let cfg = relay(port, sink, "shutdown_timeout = \"6s\"", "", &secondary);
    let mut d = Daemon::start(dir.path(), "sec", &cfg, None);
    d.wait_port(port);
    send_acked_to(port, "down.test", 0..150);
    d.signal(libc::SIGTERM);
    let st = d.wait_exit(WAIT);
    let err = d.stderr();
    assert_eq!(st.code(), Some(1), "{err}");
    assert!(err.contains("draining: 150 events left"), "{err}");
    assert!(
        err.contains("shutdown_timeout (6s)") && err.contains("150 handed to secondary"),
        "{err}"
    );
    let written = read_file(&out);
    let got: Vec<u64> = json_lines_seqs(&written)
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    assert_exact_seqs(&got, 150);
}

#[test]
fn a_file_buffer_keeps_what_is_left_for_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let (port, sink_port) = (free_port(), free_port());
    let buffer = format!(
        "type = \"file\"\npath = \"{}\"",
        dir.path().join("buf").display()
    );
    let cfg = relay(port, sink_port, "shutdown_timeout = \"1s\"", &buffer, "");
    let mut d = Daemon::start(dir.path(), "file", &cfg, None);
    d.wait_port(port);
    send_acked_to(port, "down.test", 0..100);
    d.signal(libc::SIGTERM);
    let st = d.wait_exit(WAIT);
    let err = d.stderr();
    assert_eq!(st.code(), Some(1), "{err}");
    assert!(
        err.contains("100 kept in file buffers for the next start") && err.contains("0 lost"),
        "{err}"
    );
    // The next start, with the destination up, sends them.
    let sink = Sink::start_on(sink_port, SinkOpts::default());
    let mut again = Daemon::start(dir.path(), "file2", &cfg, None);
    sink.wait_count(100);
    assert_exact_seqs(&sink.seqs(), 100);
    assert_eq!(again.terminate().code(), Some(0), "{}", again.stderr());
}
