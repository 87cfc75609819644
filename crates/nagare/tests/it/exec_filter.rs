//! The exec filter end to end: the real binary between a forward sender and
//! a forward Sink, running real programs (`cat`, Python scripts) that
//! answer, drop, split, modify, exit or hang; what arrives is decoded and
//! compared whole, in order, and `nagare check` names the line of a
//! program that cannot run.

use std::path::Path;

use crate::common::*;
use rmpv::Value;

/// Writes a Python program into `dir`; returns the `command` for it.
fn python(dir: &Path, name: &str, code: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, code).unwrap();
    format!("[\"python3\", \"{}\"]", path.display())
}

fn seq_records(range: std::ops::Range<i64>) -> Vec<Value> {
    range
        .map(|i| {
            m(&[
                ("seq", i.into()),
                ("msg", format!("event {i} ✓ \"q\"\n").into()),
            ])
        })
        .collect()
}

fn with(r: &Value, k: &str, v: Value) -> Value {
    let mut r = r.clone();
    if let Value::Map(m) = &mut r {
        m.retain(|(key, _)| key.as_str() != Some(k));
        m.push((k.into(), v));
    }
    r
}

fn str_field(r: &Value, k: &str) -> String {
    field_of(r, k)
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_string()
}

#[test]
fn cat_passes_every_event_through_in_both_formats() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let filters = r#"
[[filter]]
type = "exec"
match = "json.**"
command = ["cat"]

[[filter]]
type = "exec"
match = "mp.**"
command = ["cat"]
format = "msgpack"
"#;
    let (mut d, port) = filter_daemon(dir.path(), filters, sink.port);
    let mut s = Sender::tcp(port);
    // Two small batches, then one far bigger than a pipe's buffer (64 KiB).
    let (small, big) = (seq_records(0..3), seq_records(3..6003));
    let mut sent = Vec::new();
    for tag in ["json.a", "mp.a"] {
        let mut raw = send_records_acked(&mut s, tag, &small, &format!("{tag}1"));
        raw.extend(send_records_acked(&mut s, tag, &small, &format!("{tag}2")));
        raw.extend(send_records_acked(&mut s, tag, &big, &format!("{tag}3")));
        sent.push(raw);
    }
    let want: Vec<Value> = [&small[..], &small[..], &big[..]].concat();
    sink.wait_records(2 * want.len());
    assert_eq!(sink.records_of("json.a"), want);
    assert_eq!(sink.records_of("mp.a"), want);
    // Times keep their nanoseconds through JSON too.
    assert!(sink.records().iter().all(|(_, t, _)| *t == T0));
    // msgpack: the entries come back byte for byte.
    assert_eq!(sink.raw_entries("mp.a"), sent[1]);
    for f in ["exec#0", "exec#1"] {
        assert_eq!(d.metric("events_out_total", f), want.len() as u64);
        assert_eq!(d.metric("errors_total", f), 0);
        assert_eq!(d.metric("retries_total", f), 0);
    }
    s.finish();
    assert!(d.terminate().success(), "{}", d.stderr());
    assert_eq!(sink.count(), 2 * want.len(), "nothing more arrived");
}

/// The documented example program's shape: drops, splits (with a new tag)
/// and modifies; its stderr reaches nagare's log.
const ENRICH: &str = r#"
import json, sys
print("enricher ready", file=sys.stderr, flush=True)
for line in sys.stdin:
    ev = json.loads(line)
    if ev is None:                       # the end of a batch: echo it
        print("null", flush=True)
        continue
    r = ev["record"]
    if r.get("level") == "debug":        # drop
        continue
    if "items" in r:                     # split, with a new tag
        for it in r.pop("items"):
            out = dict(ev, tag=ev["tag"] + ".item", record=dict(r, item=it))
            print(json.dumps(out))
        continue
    r["seen_by"] = "python"              # modify
    print(json.dumps(ev))
"#;

#[test]
fn a_program_drops_splits_and_modifies_events() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let filters = format!(
        r#"
[[filter]]
type = "exec"
match = "app.**"
command = {}

[[filter]]
type = "modify"
match = "app.x.item"
[filter.set]
via = "${{tag}}"
"#,
        python(dir.path(), "enrich.py", ENRICH)
    );
    let (mut d, port) = filter_daemon(dir.path(), &filters, sink.port);
    let mut s = Sender::tcp(port);
    let records = vec![
        m(&[("seq", 0.into()), ("level", "info".into())]),
        m(&[("seq", 1.into()), ("level", "debug".into())]),
        m(&[
            ("seq", 2.into()),
            ("items", Value::Array(vec!["a".into(), 7.into()])),
        ]),
        m(&[("seq", 3.into()), ("level", "warn".into())]),
    ];
    send_records_acked(&mut s, "app.x", &records, "c1");
    let other = send_records_acked(&mut s, "db.y", &records[..1], "c2");
    sink.wait_records(5);
    assert_eq!(
        sink.records_of("app.x"),
        vec![
            with(&records[0], "seen_by", "python".into()),
            with(&records[3], "seen_by", "python".into()),
        ]
    );
    let item = |it: Value| {
        m(&[
            ("seq", 2.into()),
            ("item", it),
            ("via", "app.x.item".into()),
        ])
    };
    assert_eq!(
        sink.records_of("app.x.item"),
        vec![item("a".into()), item(7.into())],
        "split events go on by their new tag, through the filters after exec"
    );
    // Python reads the time as a float: about 0.2 µs of precision at today's times.
    assert!(sink
        .records()
        .iter()
        .all(|(_, t, _)| t.secs == T0.secs && t.nanos < 1000));
    assert_eq!(
        sink.raw_entries("db.y"),
        other,
        "a tag exec does not select"
    );
    assert_eq!(d.metric("events_in_total", "exec#0"), 4);
    assert_eq!(d.metric("events_out_total", "exec#0"), 4);
    assert_eq!(d.metric("errors_total", "exec#0"), 0);
    d.wait_log("program stderr: enricher ready");
    s.finish();
    assert!(d.terminate().success(), "{}", d.stderr());
    assert_eq!(sink.count(), 5, "nothing more arrived");
}

/// Answers every event with a field naming the program's process; exits
/// with status 3 (saying so on stderr) on an event with `crash`, before
/// answering its batch.
const CRASHY: &str = r#"
import json, os, sys
for line in sys.stdin:
    ev = json.loads(line)
    if ev is not None:
        if ev["record"].get("crash"):
            print("crashing on seq %d" % ev["record"]["seq"], file=sys.stderr, flush=True)
            sys.exit(3)
        ev["record"]["pid"] = os.getpid()
    print(json.dumps(ev), flush=ev is None)
"#;

#[test]
fn a_program_that_exits_is_restarted_and_its_batch_kept_marked() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let filters = format!(
        r#"
[[filter]]
type = "exec"
command = {}
restart_delay = "0s"
"#,
        python(dir.path(), "crashy.py", CRASHY)
    );
    let (mut d, port) = filter_daemon(dir.path(), &filters, sink.port);
    let mut s = Sender::tcp(port);
    let seq = |n: i64| m(&[("seq", n.into())]);
    let batches = [
        vec![seq(0), seq(1)],
        vec![
            seq(2),
            m(&[("seq", 3.into()), ("crash", true.into())]),
            seq(4),
        ],
        vec![seq(5)],
        vec![seq(6), seq(7)],
    ];
    for (i, b) in batches.iter().enumerate() {
        send_records_acked(&mut s, "app", b, &format!("c{i}"));
    }
    sink.wait_records(8);
    let got = sink.records_of("app");
    let seqs: Vec<i64> = got
        .iter()
        .map(|r| field_of(r, "seq").and_then(Value::as_i64).unwrap())
        .collect();
    assert_eq!(seqs, (0..8).collect::<Vec<_>>(), "nothing lost, in order");
    // The crashed batch goes on unchanged but for exec_error.
    for (r, sent) in got[2..5].iter().zip(&batches[1]) {
        let why = str_field(r, "exec_error");
        assert!(
            why.contains("closed its output") && why.contains("exited with status 3"),
            "{why}"
        );
        assert_eq!(r, &with(sent, "exec_error", why.clone().into()));
    }
    // The others went through a program: the first one, then a restarted one.
    let pid = |r: &Value| field_of(r, "pid").and_then(Value::as_u64).unwrap();
    assert!(got[..2].iter().all(|r| pid(r) == pid(&got[0])));
    assert!(got[5..].iter().all(|r| pid(r) == pid(&got[5])));
    assert_ne!(pid(&got[0]), pid(&got[5]), "a new process after the crash");
    assert_eq!(d.metric("errors_total", "exec#0"), 3);
    assert_eq!(d.metric("retries_total", "exec#0"), 1);
    assert_eq!(d.metric("events_out_total", "exec#0"), 8);
    let log = d.stderr();
    assert!(
        log.lines().any(|l| l.contains("exited with status 3")
            && l.contains("its last stderr lines: crashing on seq 3")),
        "{log}"
    );
    assert!(
        log.contains("program restarted after 1 failure(s) in a row"),
        "{log}"
    );
    s.finish();
    assert!(d.terminate().success(), "{}", d.stderr());
}

/// Writes its pid to pid.txt; answers; hangs on an event with `hang`.
const HANGS: &str = r#"
import json, os, sys, time
open(os.path.join(os.path.dirname(__file__), "pid.txt"), "w").write(str(os.getpid()))
for line in sys.stdin:
    ev = json.loads(line)
    if ev is not None and ev["record"].get("hang"):
        time.sleep(3600)
    print(json.dumps(ev), flush=ev is None)
"#;

#[test]
fn a_program_that_hangs_is_killed_after_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    // The timeout also covers Python's start for the first batch: 2s, so a
    // busy machine does not fail it. A long restart delay: the batch after
    // the hang finds the program down and goes on marked, without waiting.
    let filters = format!(
        r#"
[[filter]]
type = "exec"
command = {}
timeout = "2s"
restart_delay = "10m"
"#,
        python(dir.path(), "hangs.py", HANGS)
    );
    let (mut d, port) = filter_daemon(dir.path(), &filters, sink.port);
    let mut s = Sender::tcp(port);
    let first = vec![m(&[("seq", 0.into())])];
    let hang = vec![m(&[("seq", 1.into()), ("hang", true.into())])];
    let later = vec![m(&[("seq", 2.into())])];
    send_records_acked(&mut s, "app", &first, "c0");
    let pid = std::fs::read_to_string(dir.path().join("pid.txt"))
        .unwrap_or_else(|e| panic!("pid.txt: {e}; {}", d.stderr()));
    send_records_acked(&mut s, "app", &hang, "c1");
    send_records_acked(&mut s, "app", &later, "c2");
    sink.wait_records(3);
    let got = sink.records_of("app");
    assert_eq!(got[0], first[0]);
    let why = str_field(&got[1], "exec_error");
    assert!(
        why.contains("did not answer within 2s (timeout)") && why.contains("killed by nagare"),
        "{why}"
    );
    assert_eq!(got[1], with(&hang[0], "exec_error", why.clone().into()));
    let why = str_field(&got[2], "exec_error");
    assert!(why.contains("restarts in"), "{why}");
    assert_eq!(got[2], with(&later[0], "exec_error", why.clone().into()));
    assert!(
        !Path::new(&format!("/proc/{}", pid.trim())).exists(),
        "the hung program was killed and reaped"
    );
    assert_eq!(d.metric("errors_total", "exec#0"), 2);
    assert_eq!(d.metric("retries_total", "exec#0"), 0);
    s.finish();
    assert!(d.terminate().success(), "{}", d.stderr());
    assert_eq!(sink.count(), 3, "nothing more arrived");
}

#[test]
fn check_names_the_line_of_a_program_that_cannot_run() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("not-executable.py");
    std::fs::write(&script, "print()").unwrap();
    let base =
        "[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:0\"\n\n[[filter]]\ntype = \"exec\"\n";
    let cases = [
        (
            "command = [\"no-such-program-nagare\", \"x\"]\n".to_string(),
            ":7: key `command`:",
            "no program \"no-such-program-nagare\" in any directory of PATH",
        ),
        (
            "command = [\"./missing.py\"]\n".to_string(),
            ":7: key `command`:",
            "\"./missing.py\": no such file",
        ),
        (
            format!("command = [\"{}\"]\n", script.display()),
            ":7: key `command`:",
            "not executable",
        ),
        (
            "command = [\"cat\"]\ncwd = \"/no/such/dir\"\n".to_string(),
            ":8: key `cwd`:",
            "is not a directory",
        ),
        (
            "command = [\"cat\"]\nformat = \"yaml\"\n".to_string(),
            ":8: key `format`:",
            "\"msgpack\"",
        ),
        (
            "command = [\"cat\"]\ntimeout = \"0s\"\n".to_string(),
            ":8: key `timeout`:",
            "more than 0s",
        ),
        (
            "command = []\n".to_string(),
            ":7: key `command`:",
            "needs the program",
        ),
    ];
    assert_check_errors(dir.path(), base, &cases);
    // A program that can run passes, and check does not start it.
    let marker = dir.path().join("started");
    let p = dir.path().join("good.toml");
    std::fs::write(
        &p,
        format!(
            "{base}command = [\"sh\", \"-c\", \"touch {}; cat\"]\n",
            marker.display()
        ),
    )
    .unwrap();
    let out = run_check(&p);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!marker.exists(), "check ran the program");
}

/// The Python program in docs/configuration.md's exec section, run as the
/// docs show it, so the example cannot drift from the protocol.
#[test]
fn the_documented_example_program_works() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/configuration.md"
    ))
    .unwrap();
    let section = &doc[doc.find("### `type = \"exec\"`").expect("the exec section")..];
    let code = section
        .split("```python\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a python block in the exec section");
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let filters = format!(
        "[[filter]]\ntype = \"exec\"\ncommand = {}\n",
        python(dir.path(), "example.py", code)
    );
    let (mut d, port) = filter_daemon(dir.path(), &filters, sink.port);
    let mut s = Sender::tcp(port);
    let records = seq_records(0..3);
    send_records_acked(&mut s, "app.web", &records, "c1");
    sink.wait_records(3);
    let want: Vec<Value> = records
        .iter()
        .map(|r| with(r, "region", "eu-1".into()))
        .collect();
    assert_eq!(sink.records_of("app.web"), want);
    s.finish();
    assert!(d.terminate().success(), "{}", d.stderr());
}
