//! Labels end to end: two forward inputs, one with `label = "audit"`, each
//! label with its own filter and output (forward outputs to Sinks), and an
//! error label that receives the records the parser filter cannot parse.
//! Every record is checked by content, count and order at the sink it must
//! reach, and the outputs' counters show that nothing reached another.

use crate::common::*;
use rmpv::Value;

fn forward_output(label: Option<&str>, sink: u16) -> String {
    let label = label.map_or_else(String::new, |l| format!("label = \"{l}\"\n"));
    format!(
        r#"
[[output]]
type = "forward"
match = "**"
{label}[[output.server]]
address = "127.0.0.1:{sink}"
[output.buffer]
flush_interval = "50ms"
"#
    )
}

/// `nagare_<name>` of the output `plugin` (inputs have names like
/// "forward#0" too).
fn output_metric(d: &Daemon, name: &str, plugin: &str) -> u64 {
    let prefix = format!("nagare_{name}{{plugin=\"{plugin}\",kind=\"output\",");
    d.metrics()
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no nagare_{name} for output {plugin}"))
}

/// The records of the sink, with their tags.
fn got(sink: &Sink) -> Vec<(String, Value)> {
    sink.records().into_iter().map(|(t, _, r)| (t, r)).collect()
}

#[test]
fn each_label_gets_its_inputs_events_and_failures_go_to_the_error_label() {
    let dir = tempfile::tempdir().unwrap();
    let (plain, audit, errors) = (
        Sink::start(SinkOpts::default()),
        Sink::start(SinkOpts::default()),
        Sink::start(SinkOpts::default()),
    );
    let (port_plain, port_audit, mon) = (free_port(), free_port(), free_port());
    let config = format!(
        r#"
[system]
error_label = "errors"

[monitor]
bind = "127.0.0.1:{mon}"

[[input]]
type = "forward"
bind = "127.0.0.1:{port_plain}"

[[input]]
type = "forward"
bind = "127.0.0.1:{port_audit}"
label = "audit"

[[filter]]
type = "parser"
match = "app.**"
key_name = "log"
reserve_data = true
remove_key_name_field = true
[filter.parser]
type = "json"

[[filter]]
type = "modify"
match = "**"
label = "audit"
[filter.set]
audited = "${{tag}}"
{}{}{}"#,
        forward_output(None, plain.port),
        forward_output(Some("audit"), audit.port),
        forward_output(Some("errors"), errors.port),
    );
    let mut d = Daemon::start(dir.path(), "labels", &config, Some(mon));
    d.wait_port(port_plain);
    d.wait_port(port_audit);

    // Unlabelled: JSON lines, with two that do not parse among them.
    let line = |seq: u64| format!("{{\"seq\":{seq},\"level\":\"info\"}}");
    let mut sent_plain = Vec::new();
    for seq in 0..6u64 {
        let log = if seq == 2 || seq == 4 {
            format!("broken {seq}")
        } else {
            line(seq)
        };
        sent_plain.push(m(&[("log", log.into()), ("host", "h1".into())]));
    }
    let mut s = Sender::tcp(port_plain);
    send_records_acked(&mut s, "app.web", &sent_plain, "c-plain");

    // Labelled "audit": the same kind of records, which no parser touches
    // there (the parser filter has no label).
    let sent_audit: Vec<Value> = (0..4u64)
        .map(|seq| m(&[("log", line(seq).into()), ("seq", seq.into())]))
        .collect();
    let mut a = Sender::tcp(port_audit);
    send_records_acked(&mut a, "app.web", &sent_audit, "c-audit");

    // The acks came once the batches were in the outputs' buffers: the
    // counters are final.
    for (output, n) in [("forward#0", 4), ("forward#1", 4), ("forward#2", 2)] {
        assert_eq!(output_metric(&d, "events_in_total", output), n, "{output}");
    }
    plain.wait_records(4);
    audit.wait_records(4);
    errors.wait_records(2);

    let want_plain: Vec<(String, Value)> = [0u64, 1, 3, 5]
        .iter()
        .map(|&seq| {
            let rec = m(&[
                ("host", "h1".into()),
                ("seq", seq.into()),
                ("level", "info".into()),
            ]);
            ("app.web".to_string(), rec)
        })
        .collect();
    assert_eq!(got(&plain), want_plain);

    let want_audit: Vec<(String, Value)> = (0..4u64)
        .map(|seq| {
            let rec = m(&[
                ("log", line(seq).into()),
                ("seq", seq.into()),
                ("audited", "app.web".into()),
            ]);
            ("app.web".to_string(), rec)
        })
        .collect();
    assert_eq!(got(&audit), want_audit);

    // The failures, in order, as the parser filter marks them.
    let failed = got(&errors);
    assert_eq!(failed.len(), 2);
    for ((tag, rec), seq) in failed.iter().zip([2u64, 4]) {
        assert_eq!(tag, "app.web");
        assert_eq!(
            field_of(rec, "log"),
            Some(&Value::from(format!("broken {seq}")))
        );
        assert_eq!(field_of(rec, "host"), Some(&Value::from("h1")));
        assert!(field_of(rec, "parse_error").is_some(), "marked: {rec:?}");
    }
    assert_eq!(d.metric("errors_total", "parser#0"), 2);
    assert_eq!(d.metric("events_in_total", "parser#0"), 6);
    assert_eq!(d.metric("events_in_total", "modify#1"), 4);
}

#[test]
fn check_names_the_line_of_a_label_that_leads_nowhere() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:1\"\nlabel = \"audit\"\n\n[[output]]\ntype = \"null\"\nmatch = \"**\"\nlabel = \"adit\"\n",
    )
    .unwrap();
    let out = run_check(&path);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let file = path.display();
    assert!(
        err.contains(&format!(
            "{file}:4: key `label`: no [[output]] has label = \"audit\""
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{file}:9: key `label`: no [[input]] has label = \"adit\""
        )),
        "{err}"
    );
    assert!(err.contains("Did you mean \"audit\"?"), "{err}");
}
