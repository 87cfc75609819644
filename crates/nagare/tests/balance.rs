//! The forward output across several servers: load balancing by weight,
//! failover to a standby when the primary dies, and back.

mod common;

use std::collections::HashSet;

use common::*;

#[test]
fn load_balancing_across_two_receivers() {
    let dir = tempfile::tempdir().unwrap();
    let (s1, s2) = (
        Sink::start(SinkOpts::default()),
        Sink::start(SinkOpts::default()),
    );
    let (port, mon) = (free_port(), free_port());
    let cfg = format!(
        r#"[monitor]
bind = "127.0.0.1:{mon}"
[[input]]
type = "forward"
bind = "127.0.0.1:{port}"
[[output]]
type = "forward"
match = "**"
heartbeat_interval = "200ms"
[[output.server]]
address = "127.0.0.1:{}"
[[output.server]]
address = "127.0.0.1:{}"
[output.buffer]
flush_interval = "20ms"
chunk_limit_records = 100
"#,
        s1.port, s2.port
    );
    let mut d = Daemon::start(dir.path(), "lb", &cfg, Some(mon));
    d.wait_port(port);
    let n = 6000u64;
    let mut tx = Sender::tcp(port);
    // One acked frame at a time, so each frame is one batch and one chunk
    // (chunk_limit_records = 100).
    tx.send_acked("lb.events", 0..n, 100, "lb");
    tx.finish();
    wait_until(WAIT, "all events at the two sinks", || {
        s1.count() + s2.count() >= n as usize
    });
    d.wait_metric("events_out_total", "forward#0", n);
    let mut all = s1.seqs();
    all.extend(s2.seqs());
    assert_exact_seqs(&all, n);
    // Equal weights: chunks alternate, so each gets a fair share.
    let (c1, c2) = (s1.count() as u64, s2.count() as u64);
    assert!(
        c1 >= n / 4 && c2 >= n / 4,
        "both receivers get a share: {c1} and {c2}"
    );
    assert!(d.terminate().success());
    assert_eq!(s1.count() + s2.count(), n as usize);
}

#[test]
fn failover_to_standby_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut primary = Sink::start(SinkOpts::default());
    let standby = Sink::start(SinkOpts::default());
    let (port, mon) = (free_port(), free_port());
    let cfg = format!(
        r#"[monitor]
bind = "127.0.0.1:{mon}"
[[input]]
type = "forward"
bind = "127.0.0.1:{port}"
[[output]]
type = "forward"
match = "**"
require_ack_response = true
ack_response_timeout = "2s"
heartbeat_type = "transport"
heartbeat_interval = "200ms"
[[output.server]]
address = "127.0.0.1:{}"
[[output.server]]
address = "127.0.0.1:{}"
standby = true
[output.buffer]
flush_interval = "20ms"
chunk_limit_records = 50
retry_wait = "100ms"
retry_max_interval = "500ms"
"#,
        primary.port, standby.port
    );
    let mut d = Daemon::start(dir.path(), "failover", &cfg, Some(mon));
    d.wait_port(port);
    let mut tx = Sender::tcp(port);

    // 1. The primary is up: it gets everything, the standby nothing.
    tx.send_seqs("fo.events", 1000, 50);
    primary.wait_count(1000);
    assert_exact_seqs(&primary.seqs(), 1000);
    assert_eq!(
        standby.count(),
        0,
        "the standby gets nothing while the primary is up"
    );

    // 2. The primary is killed: the standby takes over; nothing is lost.
    primary.stop();
    let mut s = 1000;
    while s < 3000 {
        tx.packed("fo.events", s..s + 50, None);
        s += 50;
    }
    wait_until(WAIT, "events 0..3000 delivered", || {
        primary.count() + standby.count() >= 3000
    });
    let mut all = primary.seqs();
    all.extend(standby.seqs());
    assert_exact_seqs(&all, 3000);
    assert_eq!(
        standby.count(),
        2000,
        "the standby took every event after the kill"
    );
    wait_until(WAIT, "the log line marking the primary down", || {
        d.stderr().lines().any(|l| {
            l.contains("forward server marked down")
                && l.contains(&format!("server=127.0.0.1:{}", primary.port))
        })
    });

    // 3. The primary comes back: it is used again, the standby rests.
    primary.restart();
    wait_until(WAIT, "the primary marked up again", || {
        d.stderr().lines().any(|l| {
            l.contains("forward server is up")
                && l.contains(&format!("server=127.0.0.1:{}", primary.port))
        })
    });
    let before = standby.count();
    tx.packed("fo.events", 3000..3500, None);
    tx.finish();
    wait_until(WAIT, "events 3000..3500 at the primary", || {
        primary.count() >= 1500
    });
    assert_eq!(
        standby.count(),
        before,
        "the standby rests once the primary is back"
    );
    let mut all = primary.seqs();
    all.extend(standby.seqs());
    assert_exact_seqs(&all, 3500);
    let back: HashSet<u64> = primary.seqs().into_iter().filter(|&s| s >= 3000).collect();
    assert_eq!(back.len(), 500);
    assert!(d.terminate().success());
}
