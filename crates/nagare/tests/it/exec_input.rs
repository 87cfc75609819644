//! The exec input: real commands (sh, printf, yes) run on an interval or
//! kept running; their lines checked by content, count and order; a
//! failing command, an over-long line, a run that prints too much, the
//! parser, and the process stopped at shutdown and at a reload.

use std::path::Path;

use crate::common::*;

fn config(d: &Path, inputs: &str) -> String {
    format!(
        r#"
{inputs}
[[output]]
type = "file"
match = "cmd.**"
path = "{d}/out/${{tag}}.log"
format = "json"
[output.buffer]
flush_interval = "50ms"
"#,
        d = d.display()
    )
}

/// The records nagare wrote for `tag`, in order.
fn records(d: &Path, tag: &str) -> Vec<serde_json::Value> {
    read_file(&d.join(format!("out/{tag}.log")))
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v.get("record").cloned().unwrap_or(v)
        })
        .collect()
}

fn messages(d: &Path, tag: &str) -> Vec<String> {
    records(d, tag)
        .iter()
        .map(|r| r["message"].as_str().unwrap().to_string())
        .collect()
}

fn wait_messages(d: &Path, tag: &str, n: usize) -> Vec<String> {
    wait_until(WAIT, &format!("{n} events tagged {tag}"), || {
        records(d, tag).len() >= n
    });
    messages(d, tag)
}

fn alive(pid: i32) -> bool {
    // SAFETY: kill(2) with signal 0 only checks the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

fn read_pid(path: &Path) -> i32 {
    wait_until(WAIT, "the command's pid file", || {
        read_file(path).trim().parse::<i32>().is_ok()
    });
    read_file(path).trim().parse().unwrap()
}

#[test]
fn scheduled_runs_give_every_line_in_order_and_a_failure_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let inputs = r#"
[[input]]
type = "exec"
command = ["sh", "-c", "i=0; while [ $i -lt 500 ]; do echo \"line $i\"; i=$((i+1)); done"]
tag = "cmd.count"
interval = "200ms"

[[input]]
type = "exec"
command = ["sh", "-c", "printf 'before 1\nbefore 2\n'; echo 'it broke' >&2; printf 'last without newline'; exit 7"]
tag = "cmd.fail"
interval = "200ms"
"#;
    let mut nagare = Daemon::start(d, "exec", &config(d, inputs), None);
    let got = wait_messages(d, "cmd.count", 1000);
    let run: Vec<String> = (0..500).map(|i| format!("line {i}")).collect();
    assert_eq!(got[..500], run[..], "the first run, line by line");
    assert_eq!(got[500..1000], run[..], "the second run, line by line");

    let failed = wait_messages(d, "cmd.fail", 6);
    assert_eq!(
        failed[..6],
        [
            "before 1",
            "before 2",
            "last without newline",
            "before 1",
            "before 2",
            "last without newline"
        ],
        "a failing command's lines are all kept, run after run"
    );
    let line = nagare.wait_log("the command exited with status 7");
    assert!(line.contains("it broke"), "its last stderr line: {line}");
    nagare.wait_log("command stderr: it broke");
    assert_eq!(nagare.terminate().code(), Some(0));
    let all = messages(d, "cmd.count");
    assert_eq!(all.len() % 500, 0, "only whole runs: {}", all.len());
    for (i, m) in all.iter().enumerate() {
        assert_eq!(m, &format!("line {}", i % 500));
    }
}

#[test]
fn long_lines_are_cut_and_a_run_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let inputs = format!(
        r#"
[[input]]
type = "exec"
command = ["sh", "-c", "echo first; head -c 5000 /dev/zero | tr '\\0' x; echo; echo after"]
tag = "cmd.long"
interval = "1h"
max_line_size = "1KiB"

[[input]]
type = "exec"
command = ["sh", "-c", "echo $$ > {d}/yes.pid; exec yes 1234"]
tag = "cmd.yes"
interval = "1h"
max_bytes_per_run = "10KiB"
"#,
        d = d.display()
    );
    let mut nagare = Daemon::start(d, "exec", &config(d, &inputs), None);
    let got = wait_messages(d, "cmd.long", 3);
    assert_eq!(got, ["first".to_string(), "x".repeat(1024), "after".into()]);
    nagare.wait_log("a line longer than max_line_size: cut");

    // `yes` never ends: the run stops at 10 KiB (2048 lines of "1234\n").
    nagare.wait_log("it printed more than max_bytes_per_run (10240 bytes)");
    let yes = wait_messages(d, "cmd.yes", 2048);
    assert_eq!(yes.len(), 2048, "exactly what fits in max_bytes_per_run");
    assert!(yes.iter().all(|l| l == "1234"));
    let pid = read_pid(&d.join("yes.pid"));
    wait_until(WAIT, "the stopped command to be gone", || !alive(pid));
    nagare.terminate();
}

#[test]
fn parser_makes_the_records() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let inputs = r#"
[[input]]
type = "exec"
command = ["printf", '{"a":1,"b":"x"}\nnot json\n{"a":2}\n']
tag = "cmd.json"
interval = "1h"
[input.parser]
type = "json"
"#;
    let mut nagare = Daemon::start(d, "exec", &config(d, inputs), None);
    wait_until(WAIT, "3 records", || records(d, "cmd.json").len() >= 3);
    let r = records(d, "cmd.json");
    assert_eq!(r[0], serde_json::json!({"a": 1, "b": "x"}));
    assert_eq!(r[1]["message"], "not json");
    assert!(r[1]["parse_error"].is_string(), "{}", r[1]);
    assert_eq!(r[2], serde_json::json!({"a": 2}));
    nagare.terminate();
}

#[test]
fn streaming_command_is_stopped_at_shutdown_and_reload() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let streaming = |name: &str| {
        format!(
            r#"
[[input]]
type = "exec"
mode = "streaming"
command = ["sh", "-c", "echo $$ > {d}/{name}.pid; i=0; while :; do echo \"s $i\"; i=$((i+1)); sleep 0.005; done"]
tag = "cmd.{name}"
"#,
            d = d.display()
        )
    };
    let monitor = free_port();
    let mon = format!("[monitor]\nbind = \"127.0.0.1:{monitor}\"\n");
    let both = format!("{mon}{}{}", streaming("a"), streaming("b"));
    let mut nagare = Daemon::start(d, "exec", &config(d, &both), Some(monitor));
    wait_messages(d, "cmd.a", 100);
    let pid_a = read_pid(&d.join("a.pid"));
    let pid_b = read_pid(&d.join("b.pid"));

    // A reload that removes input b stops its command (its whole group).
    std::fs::write(
        &nagare.config,
        config(d, &format!("{mon}{}", streaming("a"))),
    )
    .unwrap();
    wait_port(monitor);
    let (st, body) = http_post(monitor, "/api/reload");
    assert_eq!(st, 200, "{body}");
    wait_until(WAIT, "b's command to be stopped", || !alive(pid_b));
    assert!(alive(pid_a), "a is unchanged by the reload and goes on");

    // Shutdown: a's command is stopped, and every line it printed is kept.
    assert_eq!(nagare.terminate().code(), Some(0));
    assert!(!alive(pid_a), "the command is gone with nagare");
    for name in ["a", "b"] {
        let got = messages(d, &format!("cmd.{name}"));
        let want: Vec<String> = (0..got.len()).map(|i| format!("s {i}")).collect();
        assert_eq!(got, want, "{name}: every line once, in order");
    }
}

/// The ```toml blocks of docs/host-sources.md, with the folder they write
/// in (/var/lib/nagare) moved to `dir`.
fn host_sources_examples(dir: &Path) -> Vec<String> {
    let doc = read_file(Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/host-sources.md"
    )));
    let mut blocks = Vec::new();
    let mut rest = doc.as_str();
    while let Some(i) = rest.find("```toml\n") {
        let body = &rest[i + 8..];
        let end = body.find("```").expect("a closed toml block");
        blocks.push(body[..end].replace("/var/lib/nagare", &dir.display().to_string()));
        rest = &body[end..];
    }
    blocks
}

#[test]
fn documented_examples_pass_check_and_the_exec_one_runs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let blocks = host_sources_examples(d);
    assert!(blocks.len() >= 4, "the examples of docs/host-sources.md");
    for (i, b) in blocks.iter().enumerate() {
        let path = d.join(format!("example{i}.toml"));
        std::fs::write(&path, b).unwrap();
        let out = run_check(&path);
        assert!(
            out.status.success(),
            "docs/host-sources.md example {i}:\n{b}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The exec example, run: df's lines parsed, and the streaming ticks.
    let exec = blocks
        .iter()
        .find(|b| b.contains("type = \"exec\""))
        .unwrap();
    let nagare = Daemon::start(d, "example", exec, None);
    wait_until(WAIT, "a df event and a tick on stdout", || {
        let out = nagare.stdout();
        out.contains("\"host.df\"") && out.contains("\"host.ticks\"")
    });
    for line in nagare.stdout().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let r = &v["record"];
        match v["tag"].as_str().unwrap() {
            "host.df" => {
                assert!(r["mount"].as_str().unwrap().starts_with('/'), "{r}");
                assert!(r["capacity"].is_u64(), "{r}");
                assert!(r.get("parse_error").is_none(), "{r}");
            }
            "host.ticks" => {
                assert!(r["message"].as_str().unwrap().parse::<u64>().is_ok(), "{r}")
            }
            other => panic!("tag {other}"),
        }
    }
}
