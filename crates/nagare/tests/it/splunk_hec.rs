//! The `splunk_hec` output end to end: events sent to nagare's forward
//! input arrive in a real VictoriaLogs (its Splunk HEC endpoint) once
//! each, with index, source, sourcetype, host, indexed fields, event and
//! time, plain and gzip'd. HEC's own answers (401/403 token errors, 503
//! server busy, a 400 with an invalid event number, 413) come from a
//! hand-written server: VictoriaLogs does not give them.

use std::collections::BTreeMap;

use nagare_forward::EventTime;

use crate::common::scripted_http::{Reply, ScriptedHttp};
use crate::common::victoria_logs;
use crate::common::*;
use crate::loki::send_json_events;

/// `n` events (seq, message, kind) a millisecond apart from now.
fn events(n: u64) -> Vec<(EventTime, serde_json::Value)> {
    let now = EventTime::now();
    (0..n)
        .map(|i| {
            let ns = u64::from(now.nanos) + i * 1_000_000;
            let t = EventTime::new(
                now.secs + (ns / 1_000_000_000) as u32,
                (ns % 1_000_000_000) as u32,
            );
            let kind = ["access", "error"][(i % 2) as usize];
            (
                t,
                serde_json::json!({"seq": i, "message": message_for(i), "kind": kind}),
            )
        })
        .collect()
}

fn row_time_ns(row: &serde_json::Value) -> i64 {
    let t = chrono::DateTime::parse_from_rfc3339(row["_time"].as_str().unwrap()).unwrap();
    t.timestamp_nanos_opt().unwrap()
}

fn ns(t: EventTime) -> i64 {
    i64::from(t.secs) * 1_000_000_000 + i64::from(t.nanos)
}

fn hec_output(endpoint: &str, extra: &str) -> String {
    format!(
        r#"[[output]]
type = "splunk_hec"
match = "**"
endpoint = "{endpoint}"
token = "tok"
{extra}
[output.buffer]
flush_interval = "50ms"
retry_wait = "100ms"
"#
    )
}

#[test]
fn events_arrive_once_with_their_metadata_fields_and_time() {
    let Some(vl) = victoria_logs::shared() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = hec_output(
        &vl.url("/insert/splunk/services/collector/event"),
        "index = \"idx_${tag_parts[1]}\"\nsource = \"${tag}\"\nsourcetype = \"${record.kind}\"\nhost = \"web-1\"\nfields = { env = \"test\" }",
    );
    let (_d, port) = start_forward_daemon(dir.path(), &out);
    let evs = events(60);
    send_json_events(port, "splunk.plain", &evs);
    let rows = vl.wait_rows("source:=\"splunk.plain\"", (0, 0), 60);
    let mut seen = BTreeMap::new();
    for row in &rows {
        let seq: u64 = row["event.seq"].as_str().unwrap().parse().unwrap();
        let (t, rec) = &evs[seq as usize];
        assert_eq!(row["_msg"], message_for(seq), "{row}");
        assert_eq!(row["event.kind"], rec["kind"], "{row}");
        assert_eq!(row["sourcetype"], rec["kind"], "{row}");
        assert_eq!(row["index"], "idx_plain", "{row}");
        assert_eq!(row["host"], "web-1", "{row}");
        assert_eq!(row["fields.env"], "test", "{row}");
        // Epoch seconds with nine decimals, read back as a float: within a
        // microsecond.
        assert!((row_time_ns(row) - ns(*t)).abs() < 1_000, "{row} vs {t:?}");
        *seen.entry(seq).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), 60);
    assert!(seen.values().all(|n| *n == 1), "{seen:?}");
}

#[test]
fn gzipped_events_with_event_key_arrive_once() {
    let Some(vl) = victoria_logs::shared() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = hec_output(
        &vl.url("/insert/splunk/services/collector/event"),
        "compress = \"gzip\"\nevent_key = \"message\"\nsource = \"${tag}\"",
    );
    let (_d, port) = start_forward_daemon(dir.path(), &out);
    let evs = events(40);
    send_json_events(port, "splunk.gzip", &evs);
    let rows = vl.wait_rows("source:=\"splunk.gzip\"", (0, 0), 40);
    let mut msgs: Vec<String> = rows
        .iter()
        .map(|r| r["_msg"].as_str().unwrap().to_string())
        .collect();
    msgs.sort();
    let mut want: Vec<String> = (0..40).map(message_for).collect();
    want.sort();
    assert_eq!(msgs, want);
}

fn json_events(body: &[u8]) -> Vec<serde_json::Value> {
    serde_json::Deserializer::from_slice(body)
        .into_iter::<serde_json::Value>()
        .map(Result::unwrap)
        .collect()
}

fn seqs_of(body: &[u8]) -> Vec<u64> {
    json_events(body)
        .iter()
        .map(|e| e["event"]["seq"].as_u64().unwrap())
        .collect()
}

/// Token errors (401, 403), server busy (503) and 429 keep the events: the
/// same request is sent until the server takes it.
#[test]
fn token_errors_and_busy_answers_are_retried_with_the_events_kept() {
    let server = ScriptedHttp::start(|n, _| match n {
        0 => Reply::Status(401, r#"{"text":"Invalid authorization","code":3}"#.into()),
        1 => Reply::Status(403, r#"{"text":"Invalid token","code":4}"#.into()),
        2 => Reply::Status(503, r#"{"text":"Server is busy","code":9}"#.into()),
        3 => Reply::Status(429, "".into()),
        _ => Reply::Status(200, r#"{"text":"Success","code":0}"#.into()),
    });
    let dir = tempfile::tempdir().unwrap();
    let out = hec_output(
        &format!("http://127.0.0.1:{}/services/collector/event", server.port),
        "",
    );
    let (d, port) = start_forward_daemon(dir.path(), &out);
    send_json_events(port, "splunk.auth", &events(8));
    d.wait_metric("events_out_total", "splunk_hec#0", 8);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 5);
    for r in &reqs {
        assert_eq!(r.body, reqs[0].body);
        assert_eq!(r.header("authorization"), Some("Splunk tok"));
        assert_eq!(r.path, "/services/collector/event");
    }
    assert_eq!(seqs_of(&reqs[4].body), (0..8).collect::<Vec<_>>());
    d.wait_log("answered 401 Unauthorized: the server refused the credentials");
    d.wait_log("answered 403 Forbidden: the server refused the credentials");
    assert_eq!(d.metric("secondary_events_total", "splunk_hec#0"), 0);
    assert_eq!(d.metric("lost_events_total", "splunk_hec#0"), 0);
}

/// A 400 naming an invalid event: Splunk indexed the ones before it; that
/// one goes to the secondary (counted by reason), the ones after it are
/// sent again alone. A 400 without a number (wrong index) refuses the
/// whole request.
#[test]
fn an_invalid_event_is_refused_alone_and_the_rest_sent_once() {
    let server = ScriptedHttp::start(|n, r| {
        if r.body.windows(9).any(|w| w == b"\"idx_bad\"") {
            return Reply::Status(400, r#"{"text":"Incorrect index","code":7}"#.into());
        }
        match n {
            0 => Reply::Status(
                400,
                r#"{"text":"Invalid data format","code":6,"invalid-event-number":3}"#.into(),
            ),
            _ => Reply::Status(200, r#"{"text":"Success","code":0}"#.into()),
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let dead = dir.path().join("refused");
    let out = format!(
        "{}[output.secondary]\ntype = \"file\"\npath = \"{}\"\n",
        hec_output(
            &format!("http://127.0.0.1:{}/services/collector/event", server.port),
            "index = \"idx_${tag_parts[1]}\"",
        ),
        dead.display()
    );
    let (d, port) = start_forward_daemon(dir.path(), &out);
    send_json_events(port, "splunk.invalid", &events(10));
    d.wait_metric("events_out_total", "splunk_hec#0", 9);
    d.wait_metric("secondary_events_total", "splunk_hec#0", 1);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(seqs_of(&reqs[0].body), (0..10).collect::<Vec<_>>());
    assert_eq!(seqs_of(&reqs[1].body), (4..10).collect::<Vec<_>>());
    // The wrong index: every event of the request refused.
    send_json_events(port, "splunk.bad", &events(5));
    d.wait_metric("secondary_events_total", "splunk_hec#0", 6);
    let metrics = d.metrics();
    for (reason, n) in [("invalid_data_format", 1), ("incorrect_index", 5)] {
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with("nagare_refused_events_total")
                    && l.contains("plugin=\"splunk_hec#0\"")
                    && l.contains(&format!("reason=\"{reason}\""))
                    && l.ends_with(&format!(" {n}"))),
            "{reason}: {metrics}"
        );
    }
    // The secondary holds seq 3 of the first request and the 5 others.
    let mut got: Vec<(String, u64)> = Vec::new();
    wait_until(WAIT, "6 refused events in the secondary's files", || {
        got = std::fs::read_dir(dir.path())
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
                (
                    v["tag"].as_str().unwrap().to_string(),
                    v["record"]["seq"].as_u64().unwrap(),
                )
            })
            .collect();
        got.len() >= 6
    });
    got.sort();
    let mut want = vec![("splunk.invalid".to_string(), 3)];
    want.extend((0..5).map(|i| ("splunk.bad".to_string(), i)));
    want.sort();
    assert_eq!(got, want);
    assert_eq!(d.metric("lost_events_total", "splunk_hec#0"), 0);
}

/// The raw endpoint: one line per event, the metadata in the query; a 413
/// splits the request and every event arrives once.
#[test]
fn raw_requests_carry_metadata_in_the_query_and_413_splits() {
    const LIMIT: usize = 300;
    let server = ScriptedHttp::start(|_, r| {
        if r.body.len() > LIMIT {
            Reply::Status(413, r#"{"text":"Content too large","code":27}"#.into())
        } else {
            Reply::Status(200, r#"{"text":"Success","code":0}"#.into())
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let out = hec_output(
        &format!("http://127.0.0.1:{}/services/collector/raw", server.port),
        "mode = \"raw\"\nevent_key = \"message\"\nsource = \"${tag}\"\nsourcetype = \"nagare\"\nchannel = \"0aeeac95-ac74-4aa9-b30d-6c4c0ac581ba\"",
    );
    let (d, port) = start_forward_daemon(dir.path(), &out);
    send_json_events(port, "splunk.raw", &events(50));
    d.wait_metric("events_out_total", "splunk_hec#0", 50);
    let reqs = server.requests();
    // 50 lines of ~16 bytes: the first request and its halves were too
    // large, their halves were taken.
    assert!(reqs[0].body.len() > LIMIT);
    assert_eq!(reqs.len(), 7);
    let mut lines: Vec<String> = Vec::new();
    for r in reqs.iter().filter(|r| r.body.len() <= LIMIT) {
        assert_eq!(
            r.path,
            "/services/collector/raw?source=splunk%2Eraw&sourcetype=nagare"
        );
        assert_eq!(
            r.header("x-splunk-request-channel"),
            Some("0aeeac95-ac74-4aa9-b30d-6c4c0ac581ba")
        );
        lines.extend(
            String::from_utf8(r.body.clone())
                .unwrap()
                .lines()
                .map(String::from),
        );
    }
    lines.sort();
    let mut want: Vec<String> = (0..50).map(message_for).collect();
    want.sort();
    assert_eq!(lines, want);
}

#[test]
fn check_names_bad_options() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "[[output]]\ntype = \"splunk_hec\"\nmatch = \"**\"\nendpoint = \"http://127.0.0.1:1/services/collector/raw\"\nmode = \"raw\"\nindex = \"${record.x}\"\n",
            ":10: key `index`",
            "once per request",
        ),
        (
            "[[output]]\ntype = \"splunk_hec\"\nmatch = \"**\"\nendpoint = \"http://127.0.0.1:1/x\"\nsource = \"${tag\"\n",
            ":9: key `source`",
            "closing",
        ),
    ];
    assert_check_errors(tempfile::tempdir().unwrap().path(), CHECK_BASE, cases);
}

/// The page's example config runs as written, the addresses aside
/// (VictoriaLogs takes HEC at /services/collector/event too).
#[test]
fn the_documented_example_works() {
    let Some(vl) = victoria_logs::shared() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = victoria_logs::doc_example(
        "## `splunk_hec`",
        &[
            ("127.0.0.1:24224", format!("127.0.0.1:{port}")),
            ("127.0.0.1:8088", format!("127.0.0.1:{}", vl.port)),
        ],
    );
    let mut d = Daemon::start(dir.path(), "example", &config, None);
    d.wait_port(port);
    let evs = events(20);
    send_json_events(port, "docs.splunk", &evs);
    let rows = vl.wait_rows("source:=\"docs.splunk\"", (0, 0), 20);
    let mut seqs: Vec<u64> = rows
        .iter()
        .map(|r| {
            assert_eq!(r["index"], "main", "{r}");
            assert_eq!(r["fields.env"], "prod", "{r}");
            assert_eq!(r["sourcetype"], r["event.kind"], "{r}");
            assert!(!r["host"].as_str().unwrap().is_empty());
            r["event.seq"].as_str().unwrap().parse().unwrap()
        })
        .collect();
    seqs.sort();
    assert_eq!(seqs, (0..20).collect::<Vec<_>>());
}
