//! `nagare test` through the real binary: a config whose tests pass (exit
//! 0), one whose tests fail (exit 1, with the expected and actual events),
//! a test file beside the config, and config errors (exit 2, file:line:
//! key as `nagare check` prints them).

use std::path::Path;
use std::process::{Command, Output};

use crate::common::BIN;

const CONFIG: &str = r#"
[[input]]
type = "forward"
bind = "127.0.0.1:24224"

[[filter]]
type = "grep"
match = "app.**"
[[filter.exclude]]
key = "level"
pattern = "^debug$"

[[filter]]
type = "rewrite_tag"
match = "app.**"
[[filter.rule]]
key = "status"
pattern = "^5"
tag = "alert.${tag}"

[[filter]]
type = "modify"
match = "**"
remove = ["password"]
[filter.set]
seen = "${tag}"

[[output]]
type = "null"
match = "alert.**"

[[output]]
type = "stdout"
match = "**"
"#;

const PASSING: &str = r#"
[[test]]
name = "debug lines are dropped"
[[test.input]]
tag = "app.web"
records = [{ level = "debug", msg = "noise" }, { level = "info", msg = "kept" }]
[[test.expect]]
filter = "grep#0"
count = 1
[[test.expect]]
output = "stdout#1"
count = 1
equals = { msg = "kept", seen = "app.web" }

[[test]]
name = "5xx become alerts, without passwords"
[[test.input]]
tag = "app.web"
time = "2026-01-02T03:04:05Z"
json = '''
{"status": 503, "password": "hunter2", "path": "/api/x"}
{"status": 200, "path": "/"}
'''
[[test.expect]]
output = "null#0"
count = 1
tag = "alert.app.web"
time = "2026-01-02T03:04:05Z"
equals = { status = 503, seen = "alert.app.web" }
matches = { path = "^/api/" }
absent = ["password"]
[[test.expect]]
output = "stdout#1"
event = 0
equals = { status = 200 }
"#;

fn nagare_test(dir: &Path, config: &str, extra: &[(&str, &str)]) -> (Output, String) {
    let path = dir.join("nagare.toml");
    std::fs::write(&path, config).unwrap();
    let mut cmd = Command::new(BIN);
    cmd.arg("test").arg("-c").arg(&path);
    for (name, text) in extra {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        cmd.arg(p);
    }
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

#[test]
fn passing_tests_exit_0_and_are_listed() {
    let dir = tempfile::tempdir().unwrap();
    let (out, text) = nagare_test(dir.path(), &format!("{CONFIG}{PASSING}"), &[]);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("test debug lines are dropped ... ok"),
        "{text}"
    );
    assert!(
        text.contains("test 5xx become alerts, without passwords ... ok"),
        "{text}"
    );
    assert!(text.contains("2 passed, 0 failed"), "{text}");
    // check accepts (and counts) them.
    let check = crate::common::run_check(dir.path().join("nagare.toml"));
    assert_eq!(check.status.code(), Some(0));
    let said = String::from_utf8_lossy(&check.stdout);
    assert!(said.contains("3 filters, 2 outputs, 2 tests"), "{said}");
    // The same tests from a file beside the config.
    let (out, text) = nagare_test(dir.path(), CONFIG, &[("more.toml", PASSING)]);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("2 passed, 0 failed"), "{text}");
}

#[test]
fn a_failing_test_exits_1_with_expected_and_actual_events() {
    let dir = tempfile::tempdir().unwrap();
    let failing = PASSING
        .replace(
            "equals = { msg = \"kept\", seen = \"app.web\" }",
            "equals = { msg = \"dropped\" }\nabsent = [\"level\"]",
        )
        .replace("name = \"5xx", "name = \"still 5xx")
        .replace(
            "output = \"null#0\"\ncount = 1",
            "output = \"null#0\"\ncount = 2",
        );
    let (out, text) = nagare_test(dir.path(), &format!("{CONFIG}{failing}"), &[]);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("test debug lines are dropped ... FAILED"),
        "{text}"
    );
    let want = r#"    expect[1] (output "stdout#1"): event 0 of 1 (tag "app.web"):
      field `msg`: expected "dropped", got "kept"
      field `level`: expected absent, got "info"
    - expected: {"msg":"dropped","seen":"app.web"}
    + actual:   {"level":"info","msg":"kept","seen":"app.web"}
"#;
    assert!(text.contains(want), "{text}");
    assert!(
        text.contains("test still 5xx become alerts, without passwords ... FAILED\n    expect[0] (output \"null#0\"): expected 2 events, got 1"),
        "{text}"
    );
    assert!(text.contains("0 passed, 2 failed"), "{text}");
}

#[test]
fn config_and_test_errors_exit_2_naming_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nagare.toml");
    let file = file.display();
    // A bad regex in an assertion.
    let bad = PASSING.replace(
        "matches = { path = \"^/api/\" }",
        "matches = { path = \"(\" }",
    );
    let (out, text) = nagare_test(dir.path(), &format!("{CONFIG}{bad}"), &[]);
    assert_eq!(out.status.code(), Some(2), "{text}");
    let line = format!("{CONFIG}{bad}")
        .lines()
        .position(|l| l.starts_with("matches = { path"))
        .unwrap()
        + 1;
    assert!(
        text.contains(&format!(
            "{file}:{line}: key `test.expect[0].matches.path`: not a regular expression"
        )),
        "{text}"
    );
    // nagare check reports it too.
    let check = crate::common::run_check(dir.path().join("nagare.toml"));
    assert_eq!(check.status.code(), Some(2));
    // An output that does not exist, in a test file.
    let bad = PASSING.replace("output = \"null#0\"", "output = \"nul#0\"");
    let (out, text) = nagare_test(dir.path(), CONFIG, &[("more.toml", &bad)]);
    assert_eq!(out.status.code(), Some(2), "{text}");
    let more = dir.path().join("more.toml");
    let line = bad.lines().position(|l| l == "output = \"nul#0\"").unwrap() + 1;
    assert!(
        text.contains(&format!("{}:{line}: key `test.expect[0].output`: no [[output]] is named \"nul#0\". Did you mean \"null#0\"?", more.display())),
        "{text}"
    );
    // A config error is reported as check reports it.
    let (out, text) = nagare_test(
        dir.path(),
        &format!(
            "{}{PASSING}",
            CONFIG.replace("key = \"status\"", "ky = \"status\"")
        ),
        &[],
    );
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("key `rule[0].ky`"), "{text}");
    // A config without tests.
    let (out, text) = nagare_test(dir.path(), CONFIG, &[]);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("no [[test]] tables"), "{text}");
}

#[test]
fn the_example_with_tests_passes() {
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/labels-and-tests.toml"
    );
    let out = Command::new(BIN)
        .args(["test", "-c", example])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("3 passed, 0 failed"), "{text}");
}
