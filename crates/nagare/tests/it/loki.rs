//! The `loki` output end to end: events sent to nagare's forward input
//! arrive in a real VictoriaLogs (its Loki push API), once each, checked by
//! content (labels, line, structured metadata, time) per stream, in both
//! body formats, gzip'd, per tenant; label sets past the cap go to the
//! overflow stream. The answers VictoriaLogs does not give (401/403, a
//! Loki 400 naming streams out of order, a 413, garbage) come from a
//! hand-written server (common/scripted_http.rs).

use std::collections::BTreeMap;

use nagare_forward::{encode_packed_forward, write_entry, Compression, EventTime};

use crate::common::scripted_http::{Reply, ScriptedHttp};
use crate::common::victoria_logs::{self, VictoriaLogs};
use crate::common::*;

/// Sends `events` (time, JSON record) with `tag` in one PackedForward
/// frame, acked.
pub fn send_json_events(port: u16, tag: &str, events: &[(EventTime, serde_json::Value)]) {
    let mut e = Vec::new();
    for (t, rec) in events {
        let mut r = Vec::new();
        nagare_core::json::msgpack_from_json(rec, &mut r);
        write_entry(&mut e, *t, &r);
    }
    let mut f = Vec::new();
    let id = format!("{tag}-{}", events.len());
    encode_packed_forward(
        &mut f,
        tag,
        &e,
        events.len() as u32,
        Some(id.as_bytes()),
        Compression::None,
    )
    .unwrap();
    let mut s = Sender::tcp(port);
    s.raw(&f);
    let _ = s.read_ack();
    s.finish();
}

/// `n` events: seq, message, level (info/warn/error in turn), trace; times
/// a millisecond apart from now, sent newest first (the output sorts each
/// stream's entries).
fn leveled_events(n: u64) -> Vec<(EventTime, serde_json::Value)> {
    let now = EventTime::now();
    let mut v: Vec<_> = (0..n)
        .map(|i| {
            let ns = u64::from(now.nanos) + i * 1_000_000 + 7;
            let t = EventTime::new(now.secs + (ns / 1_000_000_000) as u32, (ns % 1_000_000_000) as u32);
            let level = ["info", "warn", "error"][(i % 3) as usize];
            let rec = serde_json::json!({"seq": i, "message": message_for(i), "level": level, "trace": format!("t{i}")});
            (t, rec)
        })
        .collect();
    v.reverse();
    v
}

/// The event time of a row's `_time` (RFC 3339, nanoseconds).
fn row_time(row: &serde_json::Value) -> EventTime {
    let t = chrono::DateTime::parse_from_rfc3339(row["_time"].as_str().unwrap()).unwrap();
    EventTime::new(t.timestamp() as u32, t.timestamp_subsec_nanos())
}

/// Checks `rows` hold each of `events` once: labels (job = tag, level),
/// the line without the label and metadata fields, the trace as
/// structured metadata, the time to the nanosecond.
fn assert_leveled_rows(
    rows: &[serde_json::Value],
    tag: &str,
    events: &[(EventTime, serde_json::Value)],
) {
    let want: BTreeMap<u64, &(EventTime, serde_json::Value)> = events
        .iter()
        .map(|e| (e.1["seq"].as_u64().unwrap(), e))
        .collect();
    let mut seen = BTreeMap::new();
    for row in rows {
        let line: serde_json::Value = serde_json::from_str(row["_msg"].as_str().unwrap()).unwrap();
        let seq = line["seq"].as_u64().unwrap();
        let (t, rec) = want[&seq];
        assert_eq!(
            line,
            serde_json::json!({"seq": seq, "message": message_for(seq)}),
            "{row}"
        );
        assert_eq!(row["job"], tag, "{row}");
        assert_eq!(row["level"], rec["level"], "{row}");
        assert_eq!(row["trace"], rec["trace"], "{row}");
        assert_eq!(
            row["_stream"].as_str().unwrap(),
            format!("{{job=\"{tag}\",level={}}}", rec["level"]),
            "{row}"
        );
        assert_eq!(row_time(row), *t, "{row}");
        *seen.entry(seq).or_insert(0) += 1;
    }
    assert!(seen.values().all(|n| *n == 1), "duplicates: {seen:?}");
    assert_eq!(seen.len(), events.len());
}

fn vl() -> Option<&'static VictoriaLogs> {
    victoria_logs::shared()
}

fn loki_output(endpoint: &str, extra: &str) -> String {
    format!(
        r#"[[output]]
type = "loki"
match = "**"
endpoint = "{endpoint}"
{extra}
[output.labels]
job = "${{tag}}"
level = "${{record.level}}"
[output.structured_metadata]
trace = "${{record.trace}}"
[output.buffer]
flush_interval = "50ms"
retry_wait = "100ms"
"#
    )
}

#[test]
fn events_arrive_once_by_content_per_stream_in_protobuf() {
    let Some(vl) = vl() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = loki_output(&vl.url("/insert/loki/api/v1/push"), "");
    let (_d, port) = start_forward_daemon(dir.path(), &out);
    let events = leveled_events(120);
    send_json_events(port, "loki.proto", &events);
    let rows = vl.wait_rows("job:=\"loki.proto\"", (0, 0), 120);
    assert_leveled_rows(&rows, "loki.proto", &events);
    // Three streams, one per level.
    let streams: std::collections::BTreeSet<_> = rows
        .iter()
        .map(|r| r["_stream"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(streams.len(), 3);
}

#[test]
fn events_arrive_once_in_gzipped_json_for_the_tenant() {
    let Some(vl) = vl() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = loki_output(
        &vl.url("/insert/loki/api/v1/push"),
        "format = \"json\"\ncompress = \"gzip\"\ntenant = \"7:3\"",
    );
    let (_d, port) = start_forward_daemon(dir.path(), &out);
    let events = leveled_events(90);
    send_json_events(port, "loki.json", &events);
    let rows = vl.wait_rows("job:=\"loki.json\"", (7, 3), 90);
    assert_leveled_rows(&rows, "loki.json", &events);
    // Nothing under the default tenant.
    assert!(vl.query("job:=\"loki.json\"", (0, 0)).is_empty());
}

#[test]
fn label_sets_past_the_cap_go_to_the_overflow_stream() {
    let Some(vl) = vl() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = format!(
        r#"[[output]]
type = "loki"
match = "**"
endpoint = "{}"
max_label_sets = 3
labels = {{ job = "${{tag}}", user = "${{record.user}}" }}
[output.buffer]
flush_interval = "50ms"
"#,
        vl.url("/insert/loki/api/v1/push")
    );
    let (d, port) = start_forward_daemon(dir.path(), &out);
    let now = EventTime::now();
    let events: Vec<_> = (0..10u64)
        .map(|i| (now, serde_json::json!({"seq": i, "user": format!("u{i}")})))
        .collect();
    send_json_events(port, "loki.cap", &events);
    let rows = vl.wait_rows("job:=\"loki.cap\"", (0, 0), 10);
    let (over, kept): (Vec<_>, Vec<_>) = rows.iter().partition(|r| r["nagare_overflow"] == "true");
    assert_eq!((kept.len(), over.len()), (3, 7), "{rows:?}");
    for r in &kept {
        // The user is a label; the line is the rest.
        let line: serde_json::Value = serde_json::from_str(r["_msg"].as_str().unwrap()).unwrap();
        assert_eq!(r["user"], format!("u{}", line["seq"]), "{r}");
        assert!(line.get("user").is_none());
    }
    let mut seqs: Vec<u64> = Vec::new();
    for r in &over {
        // No user label: the user stays in the line, nothing is lost.
        assert!(r.get("user").is_none(), "{r}");
        assert_eq!(r["_stream"], "{job=\"loki.cap\",nagare_overflow=\"true\"}");
        let line: serde_json::Value = serde_json::from_str(r["_msg"].as_str().unwrap()).unwrap();
        assert_eq!(line["user"], format!("u{}", line["seq"]));
        seqs.push(line["seq"].as_u64().unwrap());
    }
    seqs.extend(kept.iter().map(|r| {
        serde_json::from_str::<serde_json::Value>(r["_msg"].as_str().unwrap()).unwrap()["seq"]
            .as_u64()
            .unwrap()
    }));
    seqs.sort();
    assert_eq!(seqs, (0..10).collect::<Vec<_>>());
    d.wait_log("past max_label_sets sent to the overflow stream");
    // Counted in the monitor, not only logged.
    d.wait_metric("label_overflow_events_total", "loki#0", 7);
    assert!(
        d.metrics()
            .contains("# TYPE nagare_label_overflow_events_total counter"),
        "{}",
        d.metrics()
    );
}

/// The JSON bodies' entries: (labels, line) of each.
fn json_entries(body: &[u8]) -> Vec<(BTreeMap<String, String>, String)> {
    let v: serde_json::Value = serde_json::from_slice(body).unwrap();
    let mut out = Vec::new();
    for s in v["streams"].as_array().unwrap() {
        let labels: BTreeMap<String, String> = serde_json::from_value(s["stream"].clone()).unwrap();
        for e in s["values"].as_array().unwrap() {
            out.push((labels.clone(), e[1].as_str().unwrap().to_string()));
        }
    }
    out
}

fn line_seq(line: &str) -> u64 {
    serde_json::from_str::<serde_json::Value>(line).unwrap()["seq"]
        .as_u64()
        .unwrap()
}

/// Refused credentials and garbage answers keep the events: the same
/// body is sent again until the server takes it.
#[test]
fn refused_credentials_and_garbage_are_retried_with_the_events_kept() {
    let server = ScriptedHttp::start(|n, _| match n {
        0 => Reply::Status(401, "invalid token".into()),
        1 => Reply::Status(403, "forbidden".into()),
        2 => Reply::Raw(b"this is not HTTP\r\n\r\n".to_vec()),
        _ => Reply::Status(204, String::new()),
    });
    let dir = tempfile::tempdir().unwrap();
    let out = loki_output(
        &format!("http://127.0.0.1:{}/loki/api/v1/push", server.port),
        "format = \"json\"\nbearer_token = \"tok\"\ntenant = \"acme\"",
    );
    let (d, port) = start_forward_daemon(dir.path(), &out);
    send_json_events(port, "loki.auth", &leveled_events(6));
    wait_until(WAIT, "the fourth request (answered 204)", || {
        server.count() >= 4
    });
    d.wait_metric("events_out_total", "loki#0", 6);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 4);
    for r in &reqs {
        assert_eq!(r.body, reqs[0].body);
        assert_eq!(r.header("authorization"), Some("Bearer tok"));
        assert_eq!(r.header("x-scope-orgid"), Some("acme"));
        assert_eq!(r.header("content-type"), Some("application/json"));
    }
    let mut seqs: Vec<u64> = json_entries(&reqs[3].body)
        .iter()
        .map(|(_, l)| line_seq(l))
        .collect();
    seqs.sort();
    assert_eq!(seqs, (0..6).collect::<Vec<_>>());
    d.wait_log("answered 401 Unauthorized: the server refused the credentials");
    d.wait_log("answered 403 Forbidden: the server refused the credentials");
    assert_eq!(d.metric("lost_events_total", "loki#0"), 0);
    assert_eq!(d.metric("secondary_events_total", "loki#0"), 0);
}

/// Loki answers a 400 for the whole request when some entries are out of
/// order, naming their streams; it took the other streams' entries. Only
/// the named stream's entries go to the secondary (counted by reason);
/// the others count as delivered and are not sent again. (VictoriaLogs
/// never answers this: the answer is Loki's text, from its source.)
#[test]
fn a_400_naming_a_stream_refuses_only_its_entries() {
    let server = ScriptedHttp::start(|n, _| {
        match n {
        0 => Reply::Status(
            400,
            "entry with timestamp 2024-01-01 00:00:00 +0000 UTC ignored, reason: 'entry out of order' for stream: {job=\"loki.ooo\", level=\"warn\"},\ntotal ignored: 1 out of 30".into(),
        ),
        _ => Reply::Status(204, String::new()),
    }
    });
    let dir = tempfile::tempdir().unwrap();
    let dead = dir.path().join("refused");
    let out = format!(
        "{}[output.secondary]\ntype = \"file\"\npath = \"{}\"\n",
        loki_output(
            &format!("http://127.0.0.1:{}/loki/api/v1/push", server.port),
            "format = \"json\""
        ),
        dead.display()
    );
    let (d, port) = start_forward_daemon(dir.path(), &out);
    let events = leveled_events(30);
    send_json_events(port, "loki.ooo", &events);
    d.wait_metric("secondary_events_total", "loki#0", 10);
    d.wait_metric("events_out_total", "loki#0", 20);
    let metrics = d.metrics();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("nagare_refused_events_total")
                && l.contains("plugin=\"loki#0\"")
                && l.contains("reason=\"out_of_order\"")
                && l.ends_with(" 10")),
        "{metrics}"
    );
    // The secondary holds the warn events, whole (fields included).
    let mut warn: Vec<u64> = Vec::new();
    wait_until(WAIT, "10 refused events in the secondary's file", || {
        warn = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("refused"))
            .flat_map(|e| {
                std::fs::read_to_string(e.path())
                    .unwrap_or_default()
                    .lines()
                    .map(String::from)
                    .collect::<Vec<_>>()
            })
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(&l).ok())
            .map(|v| {
                assert_eq!(v["record"]["level"], "warn", "{v}");
                v["record"]["seq"].as_u64().unwrap()
            })
            .collect();
        warn.len() >= 10
    });
    warn.sort();
    assert_eq!(warn, (0..30).filter(|i| i % 3 == 1).collect::<Vec<_>>());
    // One request: nothing was sent again.
    assert_eq!(server.count(), 1);
    assert_eq!(d.metric("lost_events_total", "loki#0"), 0);
}

/// A 413 splits the request in halves until the server takes them: every
/// event arrives once.
#[test]
fn a_413_splits_the_request_and_every_event_arrives_once() {
    const LIMIT: usize = 2000;
    let server = ScriptedHttp::start(|_, r| {
        if r.body.len() > LIMIT {
            Reply::Status(413, "request entity too large".into())
        } else {
            Reply::Status(204, String::new())
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let out = loki_output(
        &format!("http://127.0.0.1:{}/loki/api/v1/push", server.port),
        "format = \"json\"",
    );
    let (d, port) = start_forward_daemon(dir.path(), &out);
    send_json_events(port, "loki.big", &leveled_events(64));
    d.wait_metric("events_out_total", "loki#0", 64);
    let mut seqs: Vec<u64> = server
        .requests()
        .iter()
        .filter(|r| r.body.len() <= LIMIT)
        .flat_map(|r| json_entries(&r.body))
        .map(|(_, l)| line_seq(&l))
        .collect();
    seqs.sort();
    assert_eq!(seqs, (0..64).collect::<Vec<_>>());
    assert!(server.count() > 3);
}

/// A chunk larger than `max_request_size` is pushed in several requests,
/// `request_concurrency` of them in flight at once (each answered after
/// 100 ms of server time here): every event arrives once, no request
/// holds much more than the limit, and no more than 3 wait at once.
#[test]
fn a_large_chunk_goes_in_several_requests_at_once() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (n2, m2) = (now.clone(), most.clone());
    let server = ScriptedHttp::start(move |_, _| {
        let at_once = n2.fetch_add(1, Ordering::SeqCst) + 1;
        m2.fetch_max(at_once, Ordering::SeqCst);
        // The server's latency: requests overlap only if sent at once.
        std::thread::sleep(std::time::Duration::from_millis(100));
        n2.fetch_sub(1, Ordering::SeqCst);
        Reply::Status(204, String::new())
    });
    let dir = tempfile::tempdir().unwrap();
    let out = loki_output(
        &format!("http://127.0.0.1:{}/loki/api/v1/push", server.port),
        "format = \"json\"\nmax_request_size = \"4KiB\"\nrequest_concurrency = 3",
    );
    let (d, port) = start_forward_daemon(dir.path(), &out);
    send_json_events(port, "loki.many", &leveled_events(300));
    d.wait_metric("events_out_total", "loki#0", 300);
    let reqs = server.requests();
    let mut seqs: Vec<u64> = reqs
        .iter()
        .flat_map(|r| json_entries(&r.body))
        .map(|(_, l)| line_seq(&l))
        .collect();
    seqs.sort();
    assert_eq!(seqs, (0..300).collect::<Vec<_>>());
    assert!(reqs.len() >= 4, "{} requests", reqs.len());
    for r in &reqs {
        // Lines of at most 4 KiB, plus JSON framing and labels.
        assert!(r.body.len() < 8 * 1024, "{} bytes", r.body.len());
    }
    let most = most.load(Ordering::SeqCst);
    assert!((2..=3).contains(&most), "{most} requests at once");
}

/// The same against VictoriaLogs: a chunk in many protobuf requests sent
/// at once arrives whole, once, by content.
#[test]
fn a_large_chunk_in_several_requests_arrives_once_in_victorialogs() {
    let Some(vl) = vl() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = loki_output(
        &vl.url("/insert/loki/api/v1/push"),
        "max_request_size = \"2KiB\"\nrequest_concurrency = 4",
    );
    let (_d, port) = start_forward_daemon(dir.path(), &out);
    let events = leveled_events(240);
    send_json_events(port, "loki.parts", &events);
    let rows = vl.wait_rows("job:=\"loki.parts\"", (0, 0), 240);
    assert_leveled_rows(&rows, "loki.parts", &events);
}

#[test]
fn check_names_bad_options() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "[[output]]\ntype = \"loki\"\nmatch = \"**\"\nendpoint = \"http://127.0.0.1:1/x\"\ncompress = \"gzip\"\n",
            ":9: key `compress`",
            "is for format = \"json\"",
        ),
        (
            "[[output]]\ntype = \"loki\"\nmatch = \"**\"\nendpoint = \"http://127.0.0.1:1/x\"\nlabels = { \"bad-name\" = \"x\" }\n",
            ":9: key `labels.bad-name`",
            "not a label name",
        ),
        (
            "[[output]]\ntype = \"loki\"\nmatch = \"**\"\nendpoint = \"http://127.0.0.1:1/x\"\nlabels = { a = \"${recod.x}\" }\n",
            ":9: key `labels.a`",
            "not a placeholder",
        ),
    ];
    assert_check_errors(tempfile::tempdir().unwrap().path(), CHECK_BASE, cases);
}

/// The page's example config runs as written, the addresses aside.
#[test]
fn the_documented_example_works() {
    let Some(vl) = vl() else { return };
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = victoria_logs::doc_example(
        "## `loki`",
        &[
            ("127.0.0.1:24224", format!("127.0.0.1:{port}")),
            (
                "127.0.0.1:3100/loki",
                format!("127.0.0.1:{}/insert/loki", vl.port),
            ),
        ],
    );
    let mut d = Daemon::start(dir.path(), "example", &config, None);
    d.wait_port(port);
    let now = EventTime::now();
    let events: Vec<_> = (0..20u64)
        .map(|i| {
            let level = ["info", "warn"][(i % 2) as usize];
            (now, serde_json::json!({"seq": i, "level": level, "trace_id": format!("tr{i}"), "message": message_for(i)}))
        })
        .collect();
    send_json_events(port, "app.docs", &events);
    let rows = vl.wait_rows("trace_id:tr* AND job:=\"app\"", (0, 0), 20);
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    for r in &rows {
        let line: serde_json::Value = serde_json::from_str(r["_msg"].as_str().unwrap()).unwrap();
        let seq = line["seq"].as_u64().unwrap();
        assert_eq!(
            line,
            serde_json::json!({"seq": seq, "message": message_for(seq)})
        );
        assert_eq!(r["level"], ["info", "warn"][(seq % 2) as usize]);
        assert_eq!(r["trace_id"], format!("tr{seq}"));
        assert_eq!(r["host"], host);
    }
}

/// Over TLS to VictoriaLogs' HTTPS listener: with its CA the events
/// arrive; with another CA the server is refused, the error names the
/// certificate, and the events are kept for retries (not refused).
#[test]
fn tls_with_the_servers_ca_delivers_and_another_ca_is_refused_with_the_events_kept() {
    let Some(vl) = vl() else { return };
    let dir = tempfile::tempdir().unwrap();
    let other = crate::common::tls::Ca::new(dir.path(), "other");
    let endpoint = format!("https://127.0.0.1:{}/insert/loki/api/v1/push", vl.tls_port);
    let out = format!(
        r#"[[output]]
type = "loki"
match = "loki.tls"
endpoint = "{endpoint}"
[output.tls]
ca = "{good}"
[output.buffer]
flush_interval = "50ms"
[[output]]
type = "loki"
match = "loki.wrongca"
endpoint = "{endpoint}"
[output.tls]
ca = "{bad}"
[output.buffer]
flush_interval = "50ms"
retry_wait = "100ms"
"#,
        good = vl.ca.display(),
        bad = other.path.display()
    );
    let (d, port) = start_forward_daemon(dir.path(), &out);
    let events = leveled_events(30);
    send_json_events(port, "loki.tls", &events);
    send_json_events(port, "loki.wrongca", &events);
    let rows = vl.wait_rows("tag:=\"loki.tls\"", (0, 0), 30);
    let mut seqs: Vec<u64> = rows
        .iter()
        .map(|r| line_seq(r["_msg"].as_str().unwrap()))
        .collect();
    seqs.sort();
    assert_eq!(seqs, (0..30).collect::<Vec<_>>());
    wait_until(WAIT, "the wrong CA's output retried", || {
        d.metric("retries_total", "loki#1") >= 2
    });
    let log = d.wait_log("certificate");
    assert!(log.contains(&format!("127.0.0.1:{}", vl.tls_port)), "{log}");
    assert!(vl.query("tag:=\"loki.wrongca\"", (0, 0)).is_empty());
    assert_eq!(d.metric("secondary_events_total", "loki#1"), 0);
    assert_eq!(d.metric("lost_events_total", "loki#1"), 0);
}
