//! The rate filters (throttle, sample) end to end: the real binary between
//! a forward sender and forward Sinks; which events arrive is checked by
//! seq, exactly. Throttle limits are per hour, so the count a test keeps is
//! the bucket's burst whatever the timing; sample's counting is exact and
//! its hashing is checked against the documented rule (XXH3-64, seed 0).

use crate::common::*;
use rmpv::Value;
use xxhash_rust::xxh3::xxh3_64;

/// (tag, seq) of every event the sink received, in order.
fn tag_seqs(sink: &Sink) -> Vec<(String, u64)> {
    sink.records()
        .into_iter()
        .map(|(t, _, r)| (t, seq_of(&r)))
        .collect()
}

fn seq(n: u64) -> (&'static str, Value) {
    ("seq", Value::from(n))
}

/// `nagare check` on a forward input + each section: exit 2, `file:line:`
/// (and key) and the reason.
fn check_errors(cases: &[(&str, &str, &str)]) {
    assert_check_errors(tempfile::tempdir().unwrap().path(), CHECK_BASE, cases);
}

#[test]
fn throttle_passes_each_groups_burst_and_drops_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    // 3 per hour: each group passes its first 3 events in any test run.
    let filters = r#"
[[filter]]
type = "throttle"
match = "app.**"
group_key = ["app", "$.k8s.ns"]
rate = 3
period = "1h"
"#;
    let (mut d, port) = filter_daemon(dir.path(), filters, sink.port);
    let mut s = Sender::tcp(port);
    let ns = |n: &str| m(&[("ns", n.into())]);
    let ev = |n: u64, app: Option<&str>, k8s: &str| match app {
        Some(a) => m(&[seq(n), ("app", a.into()), ("k8s", ns(k8s))]),
        None => m(&[seq(n), ("k8s", ns(k8s))]),
    };
    // Interleaved groups: web/a gets 5 events, web/b 4, db/a 2, no app 4.
    let groups: [(Option<&str>, &str); 15] = [
        (Some("web"), "a"),
        (Some("web"), "b"),
        (None, "a"),
        (Some("web"), "a"),
        (Some("db"), "a"),
        (Some("web"), "a"),
        (Some("web"), "b"),
        (None, "a"),
        (Some("web"), "a"),
        (Some("web"), "b"),
        (None, "a"),
        (Some("web"), "a"),
        (Some("db"), "a"),
        (Some("web"), "b"),
        (None, "a"),
    ];
    let records: Vec<Value> = groups
        .iter()
        .enumerate()
        .map(|(i, (app, k8s))| ev(i as u64, *app, k8s))
        .collect();
    // Two frames: a group's bucket lasts across batches.
    send_records_acked(&mut s, "app.api", &records[..6], "c1");
    send_records_acked(&mut s, "app.api", &records[6..], "c2");
    // A tag the filter does not select is not limited.
    send_records_acked(&mut s, "db.slow", &records[..4], "c3");
    let kept: Vec<u64> = vec![0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 12];
    sink.wait_records(kept.len() + 4);
    d.wait_metric("events_in_total", "throttle#0", 15);
    let mut want: Vec<(String, u64)> = kept.iter().map(|&n| ("app.api".into(), n)).collect();
    want.extend((0..4).map(|n| ("db.slow".to_string(), n)));
    // Each tag's chunks are flushed on their own, so the order is promised
    // within a tag only: a stable sort by tag keeps it.
    let mut got = tag_seqs(&sink);
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(got, want);
    assert_eq!(d.metric("events_out_total", "throttle#0"), 11);
    assert_eq!(d.metric("throttled_events_total", "throttle#0"), 4);
    assert_eq!(d.metric("dropped_events_total", "throttle#0"), 4);
    // One line per group when it goes over: web/a, web/b, no app (not db).
    wait_until(WAIT, "the throttle log lines", || {
        d.stderr().matches("group is over its limit").count() >= 3
    });
    let err = d.stderr();
    let over: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("group is over its limit"))
        .collect();
    assert_eq!(over.len(), 3, "{err}");
    assert!(
        over[0].contains(r#"group={app="web", $.k8s.ns="a"}"#)
            && over[0].contains("3 events per 1h")
            && over[0].contains("throttle#0"),
        "{}",
        over[0]
    );
    assert!(
        over[1].contains(r#"group={app="web", $.k8s.ns="b"}"#),
        "{}",
        over[1]
    );
    assert!(
        over[2].contains(r#"group={app=missing, $.k8s.ns="a"}"#),
        "{}",
        over[2]
    );
    s.finish();
    assert!(d.terminate().success(), "{}", d.stderr());
    assert_eq!(sink.count(), kept.len() + 4, "nothing more arrived");
}

#[test]
fn throttle_excess_tag_sends_the_excess_to_another_output() {
    let dir = tempfile::tempdir().unwrap();
    let (main, over) = (
        Sink::start(SinkOpts::default()),
        Sink::start(SinkOpts::default()),
    );
    // The excess goes on through later filters that select its new tag:
    // the modify marks it (and would not see the events that passed).
    let filters = r#"
[[filter]]
type = "throttle"
match = "app.**"
rate = 2
period = "1h"
excess_tag = "throttled.${tag}"
log = false

[[filter]]
type = "modify"
match = "throttled.**"
[filter.set]
was = "${tag_parts[1]}"
"#;
    let filters = format!("{filters}{}", forward_output_to("throttled.**", over.port));
    let (mut d, port) = filter_daemon(dir.path(), &filters, main.port);
    let mut s = Sender::tcp(port);
    let records: Vec<Value> = (0..6).map(|n| m(&[seq(n)])).collect();
    send_records_acked(&mut s, "app.web", &records[..3], "c1");
    send_records_acked(&mut s, "app.web", &records[3..], "c2");
    main.wait_records(2);
    over.wait_records(4);
    d.wait_metric("events_in_total", "modify#1", 4);
    assert_eq!(
        tag_seqs(&main),
        [("app.web".to_string(), 0), ("app.web".to_string(), 1)]
    );
    let got: Vec<(String, Value)> = over.records().into_iter().map(|(t, _, r)| (t, r)).collect();
    let want: Vec<(String, Value)> = (2..6)
        .map(|n| {
            (
                "throttled.app.web".to_string(),
                m(&[seq(n), ("was", "app".into())]),
            )
        })
        .collect();
    assert_eq!(got, want);
    assert_eq!(d.metric("throttled_events_total", "throttle#0"), 4);
    assert_eq!(d.metric("dropped_events_total", "throttle#0"), 0);
    assert_eq!(d.metric("events_out_total", "throttle#0"), 6);
    assert!(!d.stderr().contains("over its limit"), "log = false");
    s.finish();
    assert!(d.terminate().success(), "{}", d.stderr());
    assert_eq!((main.count(), over.count()), (2, 4), "nothing more arrived");
}

#[test]
fn throttle_forgets_the_least_recently_seen_group_past_max_groups() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let filters = r#"
[[filter]]
type = "throttle"
group_key = ["g"]
rate = 1
period = "1h"
max_groups = 2
"#;
    let (mut d, port) = filter_daemon(dir.path(), filters, sink.port);
    let mut s = Sender::tcp(port);
    // a, b; a is over; c evicts b (a was seen last); b comes back with a
    // full bucket and evicts a; a comes back full too (evicting c), and its
    // next event is over again.
    let order = ["a", "b", "a", "c", "b", "a", "a"];
    let records: Vec<Value> = order
        .iter()
        .enumerate()
        .map(|(i, g)| m(&[seq(i as u64), ("g", (*g).into())]))
        .collect();
    send_records_acked(&mut s, "t", &records, "c1");
    sink.wait_records(5);
    d.wait_metric("events_in_total", "throttle#0", 7);
    assert_eq!(sink.seqs(), [0, 1, 3, 4, 5]);
    assert_eq!(d.metric("throttled_events_total", "throttle#0"), 2);
    s.finish();
    assert!(d.terminate().success(), "{}", d.stderr());
    assert_eq!(sink.count(), 5, "nothing more arrived");
}

#[test]
fn sample_counts_exactly_and_never_samples_excluded_events() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let filters = r#"
[[filter]]
type = "sample"
match = "app.**"
rate = 3
[[filter.exclude]]
key = "level"
pattern = "^error$"
"#;
    let (mut d, port) = filter_daemon(dir.path(), filters, sink.port);
    let mut s = Sender::tcp(port);
    // Every fifth event is an error: kept, and not counted.
    let records: Vec<Value> = (0..20)
        .map(|n| {
            let level = if n % 5 == 4 { "error" } else { "info" };
            m(&[seq(n), ("level", level.into())])
        })
        .collect();
    send_records_acked(&mut s, "app.api", &records[..7], "c1");
    send_records_acked(&mut s, "app.api", &records[7..], "c2");
    // Counted (not errors): 0 1 2 3 5 6 7 8 10 11 12 13 15 16 17 18; the
    // 1st, 4th, 7th … of them are kept: 0 3 7 11 15 18; errors: 4 9 14 19.
    let want = vec![0, 3, 4, 7, 9, 11, 14, 15, 18, 19];
    sink.wait_records(want.len());
    d.wait_metric("events_in_total", "sample#0", 20);
    assert_eq!(sink.seqs(), want);
    assert_eq!(d.metric("dropped_events_total", "sample#0"), 10);
    s.finish();
    assert!(d.terminate().success(), "{}", d.stderr());
    assert_eq!(sink.count(), want.len(), "nothing more arrived");
}

/// Runs `records` (in frames of `frame`) through a fresh daemon sampling
/// by `$.req.id`; returns the seqs that arrived, sorted.
fn sampled_by_key(records: &[Value], frame: usize) -> Vec<u64> {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let filters = "[[filter]]\ntype = \"sample\"\nratio = 0.25\nkey = \"$.req.id\"\n";
    let (mut d, port) = filter_daemon(dir.path(), filters, sink.port);
    let mut s = Sender::tcp(port);
    for (i, chunk) in records.chunks(frame).enumerate() {
        send_records_acked(&mut s, "app", chunk, &format!("c{i}"));
    }
    d.wait_metric("events_in_total", "sample#0", records.len() as u64);
    let out = d.metric("events_out_total", "sample#0") as usize;
    sink.wait_records(out);
    s.finish();
    assert!(d.terminate().success(), "{}", d.stderr());
    let mut seqs = sink.seqs();
    assert_eq!(seqs.len(), out);
    seqs.sort();
    seqs
}

#[test]
fn sample_by_key_keeps_the_same_values_in_every_run() {
    // 100 request ids, each on 3 events (300 in all).
    let id = |n: u64| format!("req-{}", n % 100);
    let records: Vec<Value> = (0..300)
        .map(|n| m(&[seq(n), ("req", m(&[("id", id(n).into())]))]))
        .collect();
    // The documented rule: kept when XXH3-64(id) mod 4 < 1 (0.25 = 1/4).
    let want: Vec<u64> = (0..300)
        .filter(|&n| xxh3_64(id(n).as_bytes()) % 4 < 1)
        .collect();
    assert!(
        (30..120).contains(&want.len()),
        "about a quarter of 300: {}",
        want.len()
    );
    assert_eq!(sampled_by_key(&records, 300), want);
    // Another daemon, the events in reverse and in small frames: the same.
    let mut reversed = records.clone();
    reversed.reverse();
    assert_eq!(sampled_by_key(&reversed, 7), want);
}

#[test]
fn check_names_the_line_of_bad_rate_filter_options() {
    check_errors(&[
        (
            "[[filter]]\ntype = \"throttle\"\nrate = 0\n",
            ":7: key `rate`:",
            "at least 1",
        ),
        (
            "[[filter]]\ntype = \"throttle\"\nrate = 5\ngroup_key = [\"app\", \"$.a..b\"]\n",
            ":8: key `group_key[1]`:",
            "is not a field",
        ),
        (
            "[[filter]]\ntype = \"throttle\"\nrate = 5\nperiod = 10\n",
            ":8: key `period`:",
            "a number needs a unit",
        ),
        (
            "[[filter]]\ntype = \"throttle\"\nrate = 5\nexcess_tag = \"${tag}\"\n",
            ":8: key `excess_tag`:",
            "the event's own tag",
        ),
        (
            "[[filter]]\ntype = \"sample\"\nratio = 1.5\n",
            ":7: key `ratio`:",
            "at most 1",
        ),
        (
            "[[filter]]\ntype = \"sample\"\nrate = 0\n",
            ":7: key `rate`:",
            "at least 1",
        ),
        (
            "[[filter]]\ntype = \"sample\"\nrate = 10\nkey = \"$.\"\n",
            ":8: key `key`:",
            "is not a field",
        ),
        (
            "[[filter]]\ntype = \"sample\"\n",
            ":5:",
            "needs `rate` (keep 1 in N) or `ratio`",
        ),
    ]);
}
