//! The filters that read and change fields (grep, modify) end to end: the
//! real binary between a forward sender and a forward Sink; what arrives is
//! decoded and compared whole, in order, and `nagare check` names the file,
//! line and key of a bad option.

use crate::common::*;
use rmpv::Value;

/// `nagare check` on `base` + each section: exit 2, `file:line: key `…`:` and the reason.
fn check_errors(cases: &[(&str, &str, &str)]) {
    assert_check_errors(tempfile::tempdir().unwrap().path(), CHECK_BASE, cases);
}

#[test]
fn grep_keeps_matching_events_drops_excluded_ones_and_counts_them() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let filters = r#"
[[filter]]
type = "grep"
match = "app.**"
[[filter.regex]]
key = "level"
pattern = "^(warn|error)$"
[[filter.exclude]]
key = "$.http.path"
pattern = "^/healthz"
"#;
    let (mut d, port) = filter_daemon(dir.path(), filters, sink.port);
    let mut s = Sender::tcp(port);
    let http = |p: &str| m(&[("path", p.into()), ("code", 500.into())]);
    let records: Vec<Value> = vec![
        m(&[("seq", 0.into()), ("level", "info".into())]),
        m(&[
            ("seq", 1.into()),
            ("level", "warn".into()),
            ("http", http("/a")),
        ]),
        m(&[
            ("seq", 2.into()),
            ("level", "error".into()),
            ("http", http("/healthz")),
        ]),
        m(&[("seq", 3.into())]),
        m(&[("seq", 4.into()), ("level", "error".into())]),
        m(&[("seq", 5.into()), ("level", "warning".into())]),
    ];
    send_records_acked(&mut s, "app.api", &records, "c1");
    // Every event passes: the batch arrives as it was sent.
    let passing = send_records_acked(&mut s, "app.api", &records[4..5], "c2");
    // A tag the filter does not select: nothing is dropped.
    let other = send_records_acked(&mut s, "db.slow", &records[..1], "c3");
    sink.wait_records(4);
    d.wait_metric("events_in_total", "grep#0", 7);
    assert_eq!(
        sink.records_of("app.api"),
        vec![records[1].clone(), records[4].clone(), records[4].clone()]
    );
    let raw = sink.raw_entries("app.api");
    assert!(
        raw.ends_with(&passing),
        "the passing batch arrives byte for byte"
    );
    assert_eq!(sink.raw_entries("db.slow"), other);
    assert_eq!(d.metric("events_out_total", "grep#0"), 3);
    assert_eq!(d.metric("dropped_events_total", "grep#0"), 4);
    assert_eq!(d.metric("errors_total", "grep#0"), 0);
    s.finish();
    assert!(d.terminate().success(), "{}", d.stderr());
    assert_eq!(sink.count(), 4, "nothing more arrived");
}

#[test]
fn check_names_the_line_of_bad_grep_rules() {
    check_errors(&[
        (
            "[[filter]]\ntype = \"grep\"\n[[filter.regex]]\nkey = \"level\"\npattern = \"^(warn\"\n",
            ":9: key `regex[0].pattern`:",
            "bad regex",
        ),
        (
            "[[filter]]\ntype = \"grep\"\n[[filter.exclude]]\nkey = \"$.a..b\"\npattern = \"x\"\n",
            ":8: key `exclude[0].key`:",
            "is not a field",
        ),
        (
            "[[filter]]\ntype = \"grep\"\nregex_combine = \"xor\"\n",
            ":7: key `regex_combine`:",
            "\"and\"",
        ),
        (
            "[[filter]]\ntype = \"grep\"\n",
            ":5:",
            "at least one [[filter.regex]] or [[filter.exclude]] rule",
        ),
    ]);
}

#[test]
fn modify_changes_fields_by_path_with_templates() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let filters = r#"
[[filter]]
type = "modify"
match = "app.**"
remove = ["password", "$.http.headers.cookie"]
time_format = "%Y-%m-%d"
[filter.set]
"$.meta.service" = "${tag_parts[1]}"
"$.meta.summary" = "${record.http.method} ${record.http.path} at ${time} by ${tag}"
[filter.add]
env = "prod"
[filter.rename]
msg = "message"
[filter.copy]
"$.http.code" = "status"
"#;
    let (mut d, port) = filter_daemon(dir.path(), filters, sink.port);
    let mut s = Sender::tcp(port);
    let http = m(&[
        ("method", "GET".into()),
        ("path", "/a".into()),
        ("code", 503.into()),
        (
            "headers",
            m(&[("cookie", "secret".into()), ("ua", "curl".into())]),
        ),
    ]);
    let records = vec![
        m(&[
            ("seq", 0.into()),
            ("msg", "hi".into()),
            ("password", "p".into()),
            ("http", http.clone()),
        ]),
        m(&[("seq", 1.into()), ("env", "dev".into())]),
    ];
    send_records_acked(&mut s, "app.api", &records, "c1");
    let other = send_records_acked(&mut s, "db.slow", &records, "c2");
    sink.wait_records(4);
    let got = sink.records_of("app.api");
    let want = vec![
        m(&[
            ("seq", 0.into()),
            (
                "http",
                m(&[
                    ("method", "GET".into()),
                    ("path", "/a".into()),
                    ("code", 503.into()),
                    ("headers", m(&[("ua", "curl".into())])),
                ]),
            ),
            (
                "meta",
                m(&[
                    ("service", "api".into()),
                    ("summary", "GET /a at 2023-11-14 by app.api".into()),
                ]),
            ),
            ("env", "prod".into()),
            ("message", "hi".into()),
            ("status", 503.into()),
        ]),
        m(&[
            ("seq", 1.into()),
            ("env", "dev".into()),
            (
                "meta",
                m(&[
                    ("service", "api".into()),
                    ("summary", "  at 2023-11-14 by app.api".into()),
                ]),
            ),
        ]),
    ];
    assert_eq!(got, want);
    // Times stay; a tag the filter does not select arrives as it was sent.
    assert!(sink.records().iter().all(|(_, t, _)| *t == T0));
    assert_eq!(sink.raw_entries("db.slow"), other);
    d.wait_metric("events_out_total", "modify#0", 2);
    s.finish();
    assert!(d.terminate().success(), "{}", d.stderr());
}

#[test]
fn check_names_the_line_of_bad_modify_options() {
    check_errors(&[
        (
            "[[filter]]\ntype = \"modify\"\n[filter.set]\nhost = \"${host}\"\n",
            ":8: key `set.host`:",
            "unknown template variable `${host}`",
        ),
        (
            "[[filter]]\ntype = \"modify\"\nremove = [\"a\"]\n[filter.rename]\na = \"b\"\n",
            ":9: key `rename.a`:",
            "already changed",
        ),
        (
            "[[filter]]\ntype = \"modify\"\ntime_format = \"%Q\"\n[filter.set]\nt = \"${time}\"\n",
            ":7: key `time_format`:",
            "bad strftime format",
        ),
        (
            "[[filter]]\ntype = \"modify\"\nkeep = [\"$.a..b\"]\n",
            ":7: key `keep`:",
            "is not a field",
        ),
        (
            "[[filter]]\ntype = \"modify\"\nrenam = {}\n",
            ":7: key `renam`:",
            "Did you mean `rename`?",
        ),
    ]);
}

#[test]
fn rewrite_tag_reroutes_events_through_later_filters_only() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    // The second rewrite_tag selects every tag and rewrites every event
    // with a level: if a retagged event went through it (or the first one)
    // again, tags would grow without end.
    let filters = r#"
[[filter]]
type = "rewrite_tag"
match = "app.**"
unmatched = "drop"
[[filter.rule]]
key = "level"
pattern = "^(warn|error)$"
tag = "alert.$1"
[[filter.rule]]
key = "$.http.code"
pattern = "^5"
tag = "http5xx.${tag_parts[1]}"
[[filter.rule]]
key = "path"
pattern = "^/healthz$"
invert = true
tag = "${tag}"

[[filter]]
type = "rewrite_tag"
match = "**"
[[filter.rule]]
key = "level"
pattern = "."
tag = "x.${tag}"

[[filter]]
type = "modify"
match = "x.**"
[filter.set]
via = "${tag}"
"#;
    let (mut d, port) = filter_daemon(dir.path(), filters, sink.port);
    let mut s = Sender::tcp(port);
    let seq = |n: i64| ("seq", Value::from(n));
    let records = vec![
        m(&[seq(0), ("level", "warn".into())]),
        m(&[
            seq(1),
            ("level", "info".into()),
            ("http", m(&[("code", 503.into())])),
        ]),
        m(&[seq(2), ("path", "/a".into())]),
        m(&[seq(3), ("path", "/healthz".into())]),
        m(&[seq(4)]),
        m(&[seq(5), ("level", "error".into())]),
        m(&[seq(6), ("level", "warn".into())]),
    ];
    send_records_acked(&mut s, "app.api", &records, "c1");
    sink.wait_records(5);
    d.wait_metric("events_in_total", "modify#2", 4);
    let with_via = |r: &Value, tag: &str| {
        let mut r = r.clone();
        if let Value::Map(m) = &mut r {
            m.push(("via".into(), tag.into()));
        }
        r
    };
    let tags: Vec<String> = sink.records().into_iter().map(|(t, _, _)| t).collect();
    assert_eq!(tags.len(), 5, "{tags:?}");
    assert_eq!(
        sink.records_of("x.alert.warn"),
        vec![
            with_via(&records[0], "x.alert.warn"),
            with_via(&records[6], "x.alert.warn")
        ]
    );
    assert_eq!(
        sink.records_of("x.alert.error"),
        vec![with_via(&records[5], "x.alert.error")]
    );
    assert_eq!(
        sink.records_of("x.http5xx.api"),
        vec![with_via(&records[1], "x.http5xx.api")]
    );
    assert_eq!(sink.records_of("app.api"), vec![records[2].clone()]);
    assert_eq!(d.metric("events_in_total", "rewrite_tag#0"), 7);
    assert_eq!(d.metric("events_out_total", "rewrite_tag#0"), 5);
    assert_eq!(d.metric("dropped_events_total", "rewrite_tag#0"), 2);
    assert_eq!(d.metric("events_in_total", "rewrite_tag#1"), 5);
    s.finish();
    assert!(d.terminate().success(), "{}", d.stderr());
    assert_eq!(sink.count(), 5, "nothing more arrived");
}

#[test]
fn check_names_the_line_of_bad_rewrite_tag_rules() {
    check_errors(&[
        (
            "[[filter]]\ntype = \"rewrite_tag\"\n[[filter.rule]]\nkey = \"a\"\npattern = \"(x)\"\ntag = \"t.$2\"\n",
            ":10: key `rule[0].tag`:",
            "1 capture group",
        ),
        (
            "[[filter]]\ntype = \"rewrite_tag\"\n[[filter.rule]]\nkey = \"a\"\npattern = \"[\"\ntag = \"t\"\n",
            ":9: key `rule[0].pattern`:",
            "bad regex",
        ),
        (
            "[[filter]]\ntype = \"rewrite_tag\"\n[[filter.rule]]\nkey = \"a\"\npattern = \"x\"\ntag = \"${tags}\"\n",
            ":10: key `rule[0].tag`:",
            "unknown template variable `${tags}`",
        ),
        (
            "[[filter]]\ntype = \"rewrite_tag\"\nunmatched = \"discard\"\n[[filter.rule]]\nkey = \"a\"\npattern = \"x\"\ntag = \"t\"\n",
            ":7: key `unmatched`:",
            "\"keep\"",
        ),
    ]);
}
