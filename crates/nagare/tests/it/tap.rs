//! `nagare tap`: live events from a running daemon's monitor (/api/tap),
//! after routing, with a rate limit and sampling, while the pipeline
//! delivers everything.

use std::process::Command;
use std::time::Instant;

use crate::common::*;

/// The filter of the tapped daemon: a modify on `app.**`, so the tap shows
/// events after the filters.
const FILTER: &str =
    "[[filter]]\ntype = \"modify\"\nmatch = \"app.**\"\n[filter.set]\nvia = \"${tag}\"\n\n";

/// Starts `nagare tap ARGS --monitor …` and waits until it is subscribed.
fn tap(d: &Daemon, args: &[&str]) -> Daemon {
    let mut cmd = Command::new(BIN);
    cmd.arg("tap")
        .args(args)
        .arg("--monitor")
        .arg(format!("127.0.0.1:{}", d.monitor.unwrap()));
    let t = Daemon::spawn(cmd, &d.dir, d.config.clone(), None);
    t.wait_log("tapping ");
    t
}

/// Sums the counts of the tap's stderr lines `tap: N events <what>`.
fn reported(t: &Daemon, what: &str) -> u64 {
    t.stderr()
        .lines()
        .filter_map(|l| l.strip_prefix("tap: "))
        .filter(|l| l.contains(what))
        .filter_map(|l| l.split(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// (tag, seq, record) of every JSON line the tap printed.
fn tapped(t: &Daemon) -> Vec<(String, u64, serde_json::Value)> {
    t.stdout()
        .lines()
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}"));
            assert!(v["time"].as_str().is_some_and(|t| t.ends_with('Z')), "{l}");
            let tag = v["tag"].as_str().unwrap().to_string();
            (
                tag,
                v["record"]["seq"].as_u64().unwrap(),
                v["record"].clone(),
            )
        })
        .collect()
}

#[test]
fn a_tap_shows_the_routed_events_of_its_pattern_only_and_nothing_is_lost() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let (mut d, port) = filter_daemon(dir.path(), FILTER, sink.port);
    let mut t = tap(&d, &["app.web", "--rate", "0"]);
    let n = 20_000;
    let mut s = Sender::tcp(port);
    for i in 0..n / 500 {
        let seqs = i * 500..(i + 1) * 500;
        s.send_acked("app.web", seqs.clone(), 500, "w");
        s.send_acked("app.db", seqs.clone(), 500, "d");
        s.send_acked("other", seqs, 500, "o");
    }
    sink.wait_count(3 * n as usize);
    for tag in ["app.web", "app.db", "other"] {
        let got: Vec<u64> = sink
            .events()
            .iter()
            .filter(|(t, _)| t == tag)
            .map(|e| e.1)
            .collect();
        assert_exact_seqs(&got, n);
    }
    // Every app.web event, shown or counted as skipped (the tap fell behind).
    wait_until(WAIT, "every tapped event shown or counted", || {
        t.stdout().lines().count() as u64 + reported(&t, "skipped") == n
    });
    let events = tapped(&t);
    assert!(!events.is_empty());
    let mut last = None;
    for (tag, seq, record) in &events {
        assert_eq!(tag, "app.web");
        assert_eq!(record["message"], message_for(*seq).as_str());
        // After the filters: the modify filter's field is there.
        assert_eq!(record["via"], "app.web");
        assert!(last < Some(*seq), "in order: {seq} after {last:?}");
        last = Some(*seq);
    }
    // Stopping the daemon ends the tap (exit 0, with a summary).
    assert!(d.terminate().success());
    assert!(t.wait_exit(WAIT).success(), "{}", t.stderr());
    assert!(
        t.stderr()
            .contains(&format!("tap: done: {} events shown", events.len())),
        "{}",
        t.stderr()
    );
}

#[test]
fn the_rate_limit_and_sampling_hold_back_events_and_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let (d, port) = filter_daemon(dir.path(), FILTER, sink.port);
    // One event in 10, no rate limit: exactly seqs 0, 10, 20, …
    let sampled = tap(&d, &["sampled.*", "--rate", "0", "--sample", "10"]);
    // At most 20 events a second (a burst of one second's worth).
    let limited = tap(&d, &["limited.*", "--rate", "20"]);
    let start = Instant::now();
    let mut s = Sender::tcp(port);
    s.send_acked("sampled.x", 0..1000, 100, "s");
    s.send_acked("limited.x", 0..5000, 100, "l");
    sink.wait_count(6000);
    wait_until(WAIT, "the sampled tap's 100 events", || {
        sampled.stdout().lines().count() == 100
    });
    let seqs: Vec<u64> = tapped(&sampled).iter().map(|e| e.1).collect();
    assert_eq!(seqs, (0..100).map(|i| i * 10).collect::<Vec<u64>>());
    assert_eq!(reported(&sampled, "skipped"), 0);
    // The rate-limited tap: every event shown or counted as over the rate.
    wait_until(WAIT, "the limited tap's events shown or counted", || {
        let shown = limited.stdout().lines().count() as u64;
        shown + reported(&limited, "over --rate") + reported(&limited, "skipped") == 5000
    });
    let elapsed = start.elapsed().as_secs_f64();
    let shown = limited.stdout().lines().count() as f64;
    assert!(shown >= 1.0 && reported(&limited, "over --rate") > 0);
    assert!(
        shown <= 20.0 * (elapsed + 1.0),
        "{shown} events shown in {elapsed:.1} s at --rate 20"
    );
}

#[test]
fn bad_tap_arguments_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let (d, _) = filter_daemon(dir.path(), FILTER, sink.port);
    let mon = format!("127.0.0.1:{}", d.monitor.unwrap());
    let out = Command::new(BIN)
        .args(["tap", "a.{b", "--monitor", &mon])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("400") && err.contains("unbalanced braces"),
        "{err}"
    );
    // Nothing listening: the address and the reason.
    let nowhere = format!("127.0.0.1:{}", free_port());
    let out = Command::new(BIN)
        .args(["tap", "--monitor", &nowhere])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("cannot reach the monitor at {nowhere}")),
        "{err}"
    );
}
