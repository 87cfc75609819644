//! Filters end to end: the real binary with `[[filter]]` parser sections
//! between a forward (or tail) input and a forward output to a Sink; the
//! records that arrive are decoded and compared whole, tags no filter selects
//! arrive byte for byte as sent, and `nagare check` names the file, line and
//! key of a bad filter section.

use crate::common::*;
use nagare_forward::EventTime;
use rmpv::Value;

fn utc(s: &str) -> EventTime {
    let t = chrono::DateTime::parse_from_rfc3339(s).unwrap();
    EventTime::new(t.timestamp() as u32, t.timestamp_subsec_nanos())
}

fn forward_output(sink: u16) -> String {
    format!("\n{}", forward_output_to("**", sink))
}

/// The records of `tag` at the sink, with their times.
fn of_tag(sink: &Sink, tag: &str) -> Vec<(EventTime, Value)> {
    sink.records()
        .into_iter()
        .filter(|(t, _, _)| t == tag)
        .map(|(_, t, r)| (t, r))
        .collect()
}

#[test]
fn forward_events_are_parsed_by_the_filters_their_tags_select() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let (port, mon) = (free_port(), free_port());
    let config = format!(
        r#"
[monitor]
bind = "127.0.0.1:{mon}"

[[input]]
type = "forward"
bind = "127.0.0.1:{port}"

[[filter]]
type = "parser"
match = "app.**"
key_name = "log"
reserve_data = true
remove_key_name_field = true
[filter.parser]
type = "json"
time_key = "ts"

[[filter]]
type = "parser"
match = "web.access"
key_name = "message"
hash_value_field = "http"
[filter.parser]
type = "apache2"
{}"#,
        forward_output(sink.port)
    );
    let mut d = Daemon::start(dir.path(), "nagare", &config, Some(mon));
    d.wait_port(port);
    let mut s = Sender::tcp(port);

    // app.api: JSON lines under "log", next to the sender's "host".
    let app = sample("app.jsonl");
    let mut app_records: Vec<Value> = app
        .lines()
        .map(|l| m(&[("log", l.into()), ("host", "h1".into())]))
        .collect();
    app_records.push(m(&[("host", "h2".into())]));
    app_records.push(m(&[("log", 42.into()), ("host", "h3".into())]));
    send_records_acked(&mut s, "app.api", &app_records, "c-app");

    // web.access: Apache lines under "message", and one that is not one.
    let web = sample("apache2_access.log");
    let mut web_records: Vec<Value> = web.lines().map(|l| m(&[("message", l.into())])).collect();
    web_records.push(m(&[("message", "not an access line".into())]));
    send_records_acked(&mut s, "web.access", &web_records, "c-web");

    // Tags no filter selects ("web.error" is close to "web.access").
    let other = send_records_acked(
        &mut s,
        "db.slow",
        &[m(&[("log", "{\"a\":1}".into()), ("seq", 1.into())])],
        "c-db",
    );
    let near = send_records_acked(
        &mut s,
        "web.error",
        &[m(&[("message", web.lines().next().unwrap().into())])],
        "c-near",
    );

    let total = app_records.len() + web_records.len() + 2;
    sink.wait_records(total);

    let got = of_tag(&sink, "app.api");
    let lines: Vec<&str> = app.lines().collect();
    let want = vec![
        (
            utc("2026-11-21T10:15:30.123Z"),
            m(&[
                ("host", "h1".into()),
                ("level", "info".into()),
                ("msg", "request done".into()),
                ("user", Value::Nil),
                ("latency_ms", 12.5.into()),
                ("ok", true.into()),
                ("tags", Value::Array(vec!["api".into(), "v2".into()])),
                (
                    "ctx",
                    m(&[("request_id", "r-17".into()), ("attempt", 2.into())]),
                ),
            ]),
        ),
        (
            EventTime::new(1_795_252_531, 0),
            m(&[
                ("host", "h1".into()),
                ("level", "warn".into()),
                ("msg", "slow request".into()),
                ("latency_ms", 1250.into()),
            ]),
        ),
        // Cut short: kept whole, with the reason.
        (
            T0,
            m(&[
                ("log", lines[2].into()),
                ("host", "h1".into()),
                (
                    "parse_error",
                    "bad json: EOF while parsing a string at line 1 column 61".into(),
                ),
            ]),
        ),
        (
            T0,
            m(&[
                ("host", "h2".into()),
                ("parse_error", "the field to parse is missing".into()),
            ]),
        ),
        (
            T0,
            m(&[
                ("log", 42.into()),
                ("host", "h3".into()),
                ("parse_error", "the field to parse is not a string".into()),
            ]),
        ),
    ];
    assert_eq!(got, want);

    let got = of_tag(&sink, "web.access");
    let http = |pairs: &[(&str, Value)]| m(&[("http", m(pairs))]);
    let want = vec![
        (
            utc("2000-10-10T13:55:36-07:00"),
            http(&[
                ("host", "127.0.0.1".into()),
                ("user", "frank".into()),
                ("method", "GET".into()),
                ("path", "/apache_pb.gif".into()),
                ("code", 200.into()),
                ("size", 2326.into()),
                ("referer", "http://www.example.com/start.html".into()),
                ("agent", "Mozilla/4.08 [en] (Win98; I ;Nav)".into()),
            ]),
        ),
        (
            utc("2006-07-28T10:27:10-03:00"),
            http(&[
                ("host", "192.168.2.20".into()),
                ("user", Value::Nil),
                ("method", "GET".into()),
                ("path", "/cgi-bin/try/".into()),
                ("code", 304.into()),
                ("size", Value::Nil),
            ]),
        ),
        (
            utc("2026-11-21T06:25:24Z"),
            http(&[
                ("host", "66.249.66.1".into()),
                ("user", Value::Nil),
                ("method", "GET".into()),
                ("path", "/robots.txt".into()),
                ("code", 404.into()),
                ("size", 208.into()),
                ("referer", Value::Nil),
                (
                    "agent",
                    "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
                        .into(),
                ),
            ]),
        ),
        (
            utc("2026-11-21T07:01:02+01:00"),
            http(&[
                ("host", "10.0.0.5".into()),
                ("user", "admin".into()),
                ("method", "POST".into()),
                ("path", "/login?next=%2Fhome".into()),
                ("code", 302.into()),
                ("size", 0.into()),
                ("referer", "https://example.org/login".into()),
                ("agent", "curl/8.5.0".into()),
            ]),
        ),
        (
            T0,
            m(&[
                ("message", "not an access line".into()),
                (
                    "parse_error",
                    "the line does not match the expression".into(),
                ),
            ]),
        ),
    ];
    assert_eq!(got, want);

    // Not selected: the very bytes that were sent.
    assert_eq!(sink.raw_entries("db.slow"), other);
    assert_eq!(sink.raw_entries("web.error"), near);

    // Each filter is a plugin with its own counters.
    d.wait_metric("events_in_total", "parser#0", app_records.len() as u64);
    assert_eq!(d.metric("events_out_total", "parser#0"), 5);
    assert_eq!(d.metric("errors_total", "parser#0"), 3);
    assert_eq!(d.metric("events_in_total", "parser#1"), 5);
    assert_eq!(d.metric("events_out_total", "parser#1"), 5);
    assert_eq!(d.metric("errors_total", "parser#1"), 1);
    assert_eq!(d.metric("events_in_total", "forward#0"), total as u64);
    let (_, plugins) = http_get(mon, "/api/plugins");
    let plugins: serde_json::Value = serde_json::from_str(&plugins).unwrap();
    let filters: Vec<String> = plugins["plugins"]
        .as_array()
        .expect("a list of plugins")
        .iter()
        .filter(|p| p["kind"] == "filter")
        .map(|p| {
            format!(
                "{} {} {} {} {}",
                p["name"], p["type"], p["events_in"], p["events_out"], p["errors"]
            )
        })
        .collect();
    assert_eq!(
        filters,
        [
            r#""parser#0" "parser" 5 5 3"#,
            r#""parser#1" "parser" 5 5 1"#
        ]
    );

    s.finish();
    assert!(d.terminate().success(), "{}", d.stderr());
}

#[test]
fn tail_lines_are_parsed_by_a_filter() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let sink = Sink::start(SinkOpts::default());
    let log = d.join("app.log");
    // The input's parser "none" makes {"message": line}; the filter parses it.
    std::fs::write(
        &log,
        "{\"ts\":\"2026-11-22T00:00:01Z\",\"n\":1}\nnot json\n{\"ts\":\"2026-11-22T00:00:03Z\",\"n\":3}\n",
    )
    .unwrap();
    let config = format!(
        r#"
[[input]]
type = "tail"
path = "{}"
tag = "app.file"
read_from_head = true
refresh_interval = "100ms"
poll_interval = "20ms"

[[filter]]
type = "parser"
key_name = "message"
inject_key_prefix = "j_"
[filter.parser]
type = "json"
time_key = "ts"
{}"#,
        log.display(),
        forward_output(sink.port)
    );
    let mut daemon = Daemon::start(d, "nagare", &config, None);
    sink.wait_records(3);
    assert!(daemon.terminate().success(), "{}", daemon.stderr());
    let got = of_tag(&sink, "app.file");
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(
        (got[0].0, &got[0].1),
        (utc("2026-11-22T00:00:01Z"), &m(&[("j_n", 1.into())]))
    );
    assert_eq!(
        got[1].1,
        m(&[
            ("message", "not json".into()),
            (
                "parse_error",
                "bad json: expected ident at line 1 column 2".into()
            ),
        ])
    );
    // A line that does not parse keeps the time it was read at.
    assert!(got[1].0.secs > 1_795_000_000, "{:?}", got[1].0);
    assert_eq!(
        (got[2].0, &got[2].1),
        (utc("2026-11-22T00:00:03Z"), &m(&[("j_n", 3.into())]))
    );
}

#[test]
fn check_names_file_line_and_key_of_bad_filters() {
    let dir = tempfile::tempdir().unwrap();
    let base = CHECK_BASE;
    let cases = [
        (
            "[[filter]]\ntype = \"parser\"\nkey_name = \"log\"\n[filter.parser]\ntype = \"multiline\"\nformat_firstline = \"^x\"\n",
            ":9: key `parser.type`:",
            "multiline",
        ),
        (
            "[[filter]]\ntype = \"parser\"\nkey_name = \"log\"\nreserve_dat = true\n[filter.parser]\ntype = \"json\"\n",
            ":8: key `reserve_dat`:",
            "unknown key `reserve_dat`. Did you mean `reserve_data`?",
        ),
        (
            "[[filter]]\ntype = \"parser\"\nkey_name = \"log\"\n[filter.parser]\ntype = \"regex\"\nexpression = \"(?<a>x\"\n",
            ":10: key `parser.expression`:",
            "regex",
        ),
        (
            // Fluentd's name for what nagare calls modify.
            "[[filter]]\ntype = \"record_transformer\"\n",
            ":6: key `type`:",
            "unknown filter type \"record_transformer\"",
        ),
    ];
    assert_check_errors(dir.path(), base, &cases);
    // The example config is valid and counts its filters.
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/filter-parser.toml"
    );
    let out = run_check(example);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("ok (1 inputs, 2 filters, 1 outputs)"),
        "{text}"
    );
}
