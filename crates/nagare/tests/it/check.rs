//! `nagare check` reports every error `nagare run` would meet at start, with
//! file, line and key, and `nagare run` refuses the same configs the same
//! way (one build path). Each case below is one class of start-time error.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{forward_input, free_port, run_check, BIN};

struct Case {
    what: &'static str,
    config: String,
    /// (line, key) the error must name.
    line: usize,
    key: &'static str,
    /// A piece of the message.
    says: &'static str,
}

fn stdout_output() -> &'static str {
    "\n[[output]]\ntype = \"stdout\"\nmatch = \"**\"\n"
}

fn cases(dir: &std::path::Path) -> Vec<Case> {
    let p = free_port();
    let input = forward_input(p);
    // A regular file: nothing can be created below it.
    let blocker = dir.join("a-file");
    std::fs::write(&blocker, "x").unwrap();
    let blocked = blocker.join("sub").display().to_string();
    vec![
        Case {
            what: "forward input with both bind and path",
            config: format!("[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:{p}\"\npath = \"{}/s.sock\"\n{}", dir.display(), stdout_output()),
            line: 4,
            key: "path",
            says: "not both",
        },
        Case {
            what: "forward input with neither bind nor path",
            config: format!("[[input]]\ntype = \"forward\"\n{}", stdout_output()),
            line: 1,
            key: "",
            says: "needs `bind`",
        },
        Case {
            what: "bind with a bad port",
            config: format!("[[input]]\ntype = \"forward\"\nbind = \"localhost:24224x\"\n{}", stdout_output()),
            line: 3,
            key: "bind",
            says: "not a number",
        },
        Case {
            what: "bind with a host that does not resolve",
            config: format!("[[input]]\ntype = \"forward\"\nbind = \"no-such-host.invalid:{p}\"\n{}", stdout_output()),
            line: 3,
            key: "bind",
            says: "cannot resolve",
        },
        Case {
            what: "two inputs on one port",
            config: format!("{input}\n[[input]]\ntype = \"forward\"\nbind = \"0.0.0.0:{p}\"\n{}", stdout_output()),
            line: 7,
            key: "bind",
            says: "already listens",
        },
        Case {
            what: "the monitor on an input's port",
            config: format!("[monitor]\nbind = \"127.0.0.1:{p}\"\n\n{input}{}", stdout_output()),
            line: 6,
            key: "bind",
            says: "already listens",
        },
        Case {
            what: "a file buffer without path",
            config: format!("{input}{}[output.buffer]\ntype = \"file\"\n", stdout_output()),
            line: 8,
            key: "buffer.path",
            says: "needs `path`",
        },
        Case {
            what: "a file buffer in a directory that cannot be created",
            config: format!("{input}{}[output.buffer]\ntype = \"file\"\npath = \"{blocked}\"\n", stdout_output()),
            line: 10,
            key: "buffer.path",
            says: "is a file",
        },
        Case {
            what: "two outputs sharing one file buffer directory",
            config: format!(
                "{input}\n[[output]]\ntype = \"null\"\nmatch = \"a\"\n[output.buffer]\ntype = \"file\"\npath = \"{d}/b\"\n\n[[output]]\ntype = \"null\"\nmatch = \"**\"\n[output.buffer]\ntype = \"file\"\npath = \"{d}/b\"\n",
                d = dir.display()
            ),
            line: 17,
            key: "buffer.path",
            says: "same file buffer directory",
        },
        Case {
            what: "a bad strftime field in a file output's path",
            config: format!("{input}\n[[output]]\ntype = \"file\"\nmatch = \"**\"\npath = \"{}/%Q.log\"\n", dir.display()),
            line: 8,
            key: "path",
            says: "strftime",
        },
        Case {
            what: "a file output in a directory that cannot be created",
            config: format!("{input}\n[[output]]\ntype = \"file\"\nmatch = \"**\"\npath = \"{blocked}/${{tag}}.log\"\n"),
            line: 8,
            key: "path",
            says: "is a file",
        },
        Case {
            what: "a tail position file in a directory that cannot be created",
            config: format!("[[input]]\ntype = \"tail\"\npath = \"{d}/*.log\"\ntag = \"t\"\nposition_db = \"{blocked}/pos\"\n{}", stdout_output(), d = dir.display()),
            line: 5,
            key: "position_db",
            says: "is a file",
        },
        Case {
            what: "a dedup file in a directory that cannot be created",
            config: format!("{input}dedup_path = \"{blocked}/ids\"\n{}", stdout_output()),
            line: 4,
            key: "dedup_path",
            says: "is a file",
        },
        Case {
            what: "a directory input whose folder cannot be created",
            config: format!("[[input]]\ntype = \"directory\"\npath = \"{blocked}\"\nposition_db = \"{}/pos\"\n{}", dir.display(), stdout_output()),
            line: 3,
            key: "path",
            says: "is a file",
        },
        Case {
            what: "a fuse mountpoint that cannot be created",
            config: format!("[[input]]\ntype = \"fuse\"\nmountpoint = \"{blocked}/mnt\"\n{}", stdout_output()),
            line: 3,
            key: "mountpoint",
            says: "is a file",
        },
        Case {
            what: "a regex parser whose expression does not compile",
            config: format!("[[input]]\ntype = \"tail\"\npath = \"{d}/*.log\"\ntag = \"t\"\nposition_db = \"{d}/pos\"\n[input.parser]\ntype = \"regex\"\nexpression = \"(unclosed\"\n{}", stdout_output(), d = dir.display()),
            line: 8,
            key: "parser.expression",
            says: "unclosed",
        },
        Case {
            what: "an option of another parser type",
            config: format!("[[input]]\ntype = \"tail\"\npath = \"{d}/*.log\"\ntag = \"t\"\nposition_db = \"{d}/pos\"\n[input.parser]\ntype = \"json\"\nkeys = [\"a\"]\n{}", stdout_output(), d = dir.display()),
            line: 8,
            key: "parser.keys",
            says: "unknown key `keys`",
        },
        Case {
            what: "a forward output server without a port",
            config: format!("{input}\n[[output]]\ntype = \"forward\"\nmatch = \"**\"\n[[output.server]]\naddress = \"aggregator\"\n"),
            line: 9,
            key: "server[0].address",
            says: "HOST:PORT",
        },
        Case {
            what: "an unknown output type",
            config: format!("{input}\n[[output]]\ntype = \"fille\"\nmatch = \"**\"\n"),
            line: 6,
            key: "type",
            says: "Did you mean \"file\"?",
        },
    ]
}

/// `nagare run` with the config; returns its exit code and stderr. A run
/// that gets past its config is stopped after a deadline (and fails the case).
fn run_refuses(config: &std::path::Path) -> (Option<i32>, String) {
    let mut child = Command::new(BIN)
        .args(["run", "-c"])
        .arg(config)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            return (status.code(), err);
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            return (None, "still running after 20 s".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn check_reports_every_start_time_error_and_run_refuses_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for (i, case) in cases(dir.path()).into_iter().enumerate() {
        let path = dir.path().join(format!("case{i}.toml"));
        std::fs::write(&path, &case.config).unwrap();
        let out = run_check(&path);
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        let want = if case.key.is_empty() {
            format!("{}:{}: ", path.display(), case.line)
        } else {
            format!("{}:{}: key `{}`: ", path.display(), case.line, case.key)
        };
        let located = stderr
            .lines()
            .any(|l| l.contains(&want) && l.contains(case.says));
        if out.status.code() != Some(2) || !located {
            failures.push(format!(
                "check, {}: exit {:?}, wanted a line with {want:?} and {:?}; stderr:\n{stderr}",
                case.what,
                out.status.code(),
                case.says
            ));
        }
        let (code, run_err) = run_refuses(&path);
        if code != Some(2) || !run_err.contains(&want) {
            failures.push(format!(
                "run, {}: exit {code:?}, wanted {want:?}; stderr:\n{run_err}",
                case.what
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn check_warns_about_a_config_without_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-output.toml");
    std::fs::write(&path, forward_input(free_port())).unwrap();
    let out = run_check(&path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("warning:") && stderr.contains("no [[output]] section"),
        "{stderr}"
    );
}

#[test]
fn user_facing_messages() {
    let dir = tempfile::tempdir().unwrap();
    let p = free_port();
    let cases = [
        (
            format!("{}max_frame_size = -5\n", forward_input(p)),
            "key `max_frame_size`: expected a size such as \"8MiB\"",
        ),
        (
            format!("{}idle_timeout = 300\n", forward_input(p)),
            "key `idle_timeout`: expected a duration such as \"300s\"",
        ),
        (
            format!("{}\n[[output]]\ntype = \"forward\"\nmatch = \"**\"\n[[output.server]]\naddress = \"127.0.0.1:1\"\nweight = \"2\"\n", forward_input(p)),
            "key `server[0].weight`: expected a whole number such as 2 (no quotes)",
        ),
        (
            format!("{}\n[[output]]\ntype = \"stdout\"\nmatch = \"**\"\n[output.buffer]\nflush_intervl = \"1s\"\n", forward_input(p)),
            "key `buffer.flush_intervl`: unknown key `flush_intervl`. Did you mean `flush_interval`?",
        ),
        (
            // A variable in a comment is not expanded; one in a value is.
            format!("# ${{NAGARE_CHECK_UNSET}}\n{}self_hostname = \"${{NAGARE_CHECK_UNSET}}\"\n", forward_input(p)),
            ":5: environment variable NAGARE_CHECK_UNSET is not set",
        ),
    ];
    for (i, (config, want)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("m{i}.toml"));
        std::fs::write(&path, config).unwrap();
        let out = run_check(&path);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{config}\n{stderr}");
        assert!(stderr.contains(want), "wanted {want:?} in:\n{stderr}");
        assert_eq!(
            stderr.lines().count(),
            1,
            "one error, printed once:\n{stderr}"
        );
    }
    // ${VAR:-default} gives the default; the config is valid.
    let path = dir.path().join("default.toml");
    std::fs::write(
        &path,
        format!(
            "[[input]]\ntype = \"forward\"\nbind = \"${{NAGARE_CHECK_UNSET:-127.0.0.1:{p}}}\"\n{}",
            stdout_output()
        ),
    )
    .unwrap();
    let out = run_check(&path);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // An unreadable file is named without a line 0.
    let out = run_check(dir.path().join("missing.toml"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("missing.toml: cannot read the file"),
        "{stderr}"
    );
    assert!(!stderr.contains(":0:"), "{stderr}");
}
