//! Parsers end to end: the real binary tails files with `[input.parser]`
//! and prints the records as JSON; `nagare check` rejects unknown parser types.

use crate::common::*;

#[test]
fn tail_with_parsers_prints_parsed_records() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("web")).unwrap();
    std::fs::create_dir_all(d.join("app")).unwrap();
    std::fs::write(d.join("web/access.log"), sample("apache2_access.log")).unwrap();
    std::fs::write(d.join("app/app.log"), sample("app.jsonl")).unwrap();
    let config = format!(
        r#"
[[input]]
type = "tail"
path = "{d}/web/*.log"
tag = "web"
read_from_head = true
refresh_interval = "100ms"
poll_interval = "20ms"
path_key = "file"
[input.parser]
type = "apache2"

[[input]]
type = "tail"
path = "{d}/app/*.log"
tag = "app"
read_from_head = true
refresh_interval = "100ms"
poll_interval = "20ms"
[input.parser]
type = "json"
time_key = "ts"

[[output]]
type = "stdout"
match = "**"
format = "json"
[output.buffer]
flush_interval = "50ms"
"#,
        d = d.display()
    );
    let mut daemon = Daemon::start(d, "nagare", &config, None);
    let lines = daemon.wait_stdout_lines(7);
    assert!(daemon.terminate().success(), "{}", daemon.stderr());
    let events: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    let web: Vec<&serde_json::Value> = events.iter().filter(|e| e["tag"] == "web").collect();
    let app: Vec<&serde_json::Value> = events.iter().filter(|e| e["tag"] == "app").collect();
    assert_eq!((web.len(), app.len()), (4, 3), "{lines:#?}");

    // apache2: fields, types and the line's own time.
    let first = web
        .iter()
        .find(|e| e["record"]["user"] == "frank")
        .expect("frank's line");
    assert_eq!(first["time"], "2000-10-10T20:55:36.000000000Z");
    let r = &first["record"];
    assert_eq!(r["host"], "127.0.0.1");
    assert_eq!(r["method"], "GET");
    assert_eq!(r["path"], "/apache_pb.gif");
    assert_eq!(r["code"], 200);
    assert_eq!(r["size"], 2326);
    assert!(r["file"].as_str().unwrap().ends_with("web/access.log"));
    assert!(r.get("time").is_none());
    let common = web
        .iter()
        .find(|e| e["record"]["code"] == 304)
        .expect("the common-format line");
    assert!(common["record"]["size"].is_null());

    // json: order, nesting, time; the malformed line is kept.
    let ok = app.iter().find(|e| e["record"]["level"] == "info").unwrap();
    assert_eq!(ok["time"], "2026-11-21T10:15:30.123000000Z");
    let keys: Vec<&String> = ok["record"].as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["level", "msg", "user", "latency_ms", "ok", "tags", "ctx"]
    );
    assert_eq!(ok["record"]["ctx"]["attempt"], 2);
    let bad = app
        .iter()
        .find(|e| e["record"].get("parse_error").is_some())
        .expect("the malformed line as a record");
    assert!(bad["record"]["message"]
        .as_str()
        .unwrap()
        .contains("\"truncated"));
    assert!(bad["record"]["parse_error"]
        .as_str()
        .unwrap()
        .starts_with("bad json"));
}

#[test]
fn check_rejects_unknown_parser_types_and_options() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("nagare.toml");
    for (bad, key) in [
        ("type = \"apache3\"", "parser.type"),
        ("type = \"regex\"\nexpresion = \"x\"", "expresion"),
    ] {
        std::fs::write(
            &p,
            format!(
                "[[input]]\ntype = \"tail\"\npath = \"/tmp/x/*.log\"\ntag = \"x\"\n[input.parser]\n{bad}\n\n[[output]]\ntype = \"stdout\"\nmatch = \"**\"\n"
            ),
        )
        .unwrap();
        let out = run_check(&p);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains("nagare.toml:") && err.contains(key),
            "{bad}: {err}"
        );
    }
}

#[test]
fn multiline_gathers_java_and_python_stack_traces() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("logs")).unwrap();
    std::fs::write(d.join("logs/java.log"), sample("java_stacktrace.log")).unwrap();
    std::fs::write(d.join("logs/python.log"), sample("python_traceback.log")).unwrap();
    let config = |d: &std::path::Path, flush: &str| {
        format!(
            r#"
[[input]]
type = "tail"
path = "{d}/logs/*.log"
tag = "app.*"
read_from_head = true
refresh_interval = "100ms"
poll_interval = "20ms"
position_db = "{d}/tail.pos"
[input.parser]
type = "multiline"
format_firstline = '^\d{{4}}-\d{{2}}-\d{{2}} '
expression = '^(?<time>\S+ \S+) +(?<level>[A-Z]+) +(?<message>.*)$'
time_format = "%Y-%m-%d %H:%M:%S,%3f"
multiline_flush_interval = "{flush}"

[[output]]
type = "stdout"
match = "**"
[output.buffer]
flush_interval = "50ms"
"#,
            d = d.display()
        )
    };
    // 3 Java events and 3 Python events. With a long flush interval the last
    // event of each file waits; stopped then, its lines are not consumed
    // (the position is saved before them)...
    let mut daemon = Daemon::start(d, "nagare", &config(d, "1h"), None);
    daemon.wait_stdout_lines(4);
    assert!(daemon.terminate().success(), "{}", daemon.stderr());
    let mut lines: Vec<String> = daemon.stdout().lines().map(String::from).collect();
    assert_eq!(lines.len(), 4, "{lines:#?}");
    // ...so after a restart they come once the (short) flush interval passed.
    let mut daemon = Daemon::start(d, "nagare", &config(d, "300ms"), None);
    daemon.wait_stdout_lines(2);
    assert!(daemon.terminate().success(), "{}", daemon.stderr());
    lines.extend(daemon.stdout().lines().map(String::from));
    assert_eq!(lines.len(), 6, "{lines:#?}");
    let events: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let of = |file: &str| -> Vec<&serde_json::Value> {
        events
            .iter()
            .filter(|e| e["tag"].as_str().unwrap().ends_with(file))
            .collect()
    };
    let java = of("java.log");
    assert_eq!(java.len(), 3, "{lines:#?}");
    assert!(java
        .iter()
        .all(|e| e["record"].get("parse_error").is_none()));
    let error = java
        .iter()
        .find(|e| e["record"]["level"] == "ERROR")
        .unwrap();
    let m = error["record"]["message"].as_str().unwrap();
    assert!(m.starts_with("[http-nio-8080-exec-1] com.example.OrderController - request failed\njava.lang.IllegalStateException"), "{m}");
    assert!(m.contains("\n\tat com.example.OrderService.update(OrderService.java:88)\n"));
    assert!(m.ends_with("Caused by: java.sql.SQLException: connection reset\n\tat org.postgresql.core.v3.QueryExecutorImpl.execute(QueryExecutorImpl.java:372)\n\t... 12 more"), "{m}");
    assert_eq!(m.lines().count(), 8);
    assert!(error["time"].as_str().unwrap().contains(":00:01.456"));
    let last = java
        .iter()
        .find(|e| {
            e["record"]["message"]
                .as_str()
                .unwrap()
                .ends_with("still running")
        })
        .unwrap();
    assert_eq!(last["record"]["level"], "INFO");

    let python = of("python.log");
    assert_eq!(python.len(), 3, "{lines:#?}");
    let error = python
        .iter()
        .find(|e| e["record"]["level"] == "ERROR")
        .unwrap();
    let m = error["record"]["message"].as_str().unwrap();
    assert!(m.starts_with("worker: job 7 failed\nTraceback (most recent call last):\n  File \"/srv/app/worker.py\", line 31, in run\n"), "{m}");
    assert!(m.ends_with("\nZeroDivisionError: division by zero"), "{m}");
    assert_eq!(m.lines().count(), 7);

    // Another restart reads nothing twice: each file is followed from its end.
    let mut daemon = Daemon::start(d, "nagare", &config(d, "300ms"), None);
    for name in ["java.log", "python.log"] {
        let log = d.join("logs").join(name);
        let size = std::fs::metadata(&log).unwrap().len();
        let want = format!("path={} offset={size}", log.display());
        daemon.wait_log_line(&format!("{name} followed from its end"), |l| {
            l.contains("following file") && l.contains(&want)
        });
    }
    assert!(daemon.terminate().success(), "{}", daemon.stderr());
    assert_eq!(daemon.stdout(), "", "nothing again after a restart");
}

#[test]
fn multiline_events_growing_across_reads_keep_their_positions() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("logs")).unwrap();
    let log = d.join("logs/app.log");
    let config = |flush: &str| {
        format!(
            r#"
[[input]]
type = "tail"
path = "{d}/logs/*.log"
tag = "app"
read_from_head = true
refresh_interval = "50ms"
poll_interval = "20ms"
position_db = "{d}/tail.pos"
[input.parser]
type = "multiline"
format_firstline = '^\['
multiline_flush_interval = "{flush}"

[[output]]
type = "stdout"
match = "**"
[output.buffer]
flush_interval = "50ms"
"#,
            d = d.display()
        )
    };
    let append = |text: &str| {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    };
    append("[1] first\n");
    let mut daemon = Daemon::start(d, "nagare", &config("1h"), None);
    // Each piece is read before the next is written: the event grows
    // across reads.
    daemon.wait_read_to_end(&log);
    append("  more of first\n");
    daemon.wait_read_to_end(&log);
    append("[2] second\n  more of second\n");
    let lines = daemon.wait_stdout_lines(1);
    daemon.wait_read_to_end(&log);
    assert!(daemon.terminate().success(), "{}", daemon.stderr());
    assert_eq!(lines.len(), 1, "{lines:#?}");
    let first: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(first["record"]["message"], "[1] first\n  more of first");

    let mut daemon = Daemon::start(d, "nagare", &config("100ms"), None);
    daemon.wait_stdout_lines(1);
    assert!(daemon.terminate().success(), "{}", daemon.stderr());
    let lines: Vec<String> = daemon.stdout().lines().map(String::from).collect();
    assert_eq!(lines.len(), 1, "{lines:#?}");
    let second: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(second["record"]["message"], "[2] second\n  more of second");
}

#[test]
fn multiline_events_are_bounded_by_max_line_size() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("logs")).unwrap();
    // No first line at all: 50 continuation lines of 20 bytes.
    let text: String = (0..50)
        .map(|i| format!("  continuation {i:04}\n"))
        .collect();
    std::fs::write(d.join("logs/app.log"), &text).unwrap();
    let config = format!(
        r#"
[[input]]
type = "tail"
path = "{d}/logs/*.log"
tag = "app"
read_from_head = true
refresh_interval = "50ms"
poll_interval = "20ms"
max_line_size = "200"
[input.parser]
type = "multiline"
format_firstline = '^\['
multiline_flush_interval = "100ms"

[[output]]
type = "stdout"
match = "**"
[output.buffer]
flush_interval = "50ms"
"#,
        d = d.display()
    );
    let mut daemon = Daemon::start(d, "nagare", &config, None);
    wait_until(WAIT, "all 50 lines out", || {
        daemon.stdout().matches("continuation").count() >= 50
    });
    assert!(daemon.terminate().success(), "{}", daemon.stderr());
    let mut joined = Vec::new();
    for l in daemon.stdout().lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        let m = v["record"]["message"].as_str().unwrap().to_string();
        assert!(m.len() <= 200 + 20, "{} bytes", m.len());
        joined.push(m);
    }
    assert!(joined.len() >= 5, "{joined:#?}");
    assert_eq!(joined.join("\n") + "\n", text, "every line once, in order");
}
