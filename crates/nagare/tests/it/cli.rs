//! The command line: `nagare run` on the embedded default, `nagare check`,
//! `nagare --version`, `nagare cat`.

use std::path::PathBuf;
use std::process::Command;

use crate::common::*;
use nagare_forward::{encode_packed_forward, write_entry, Compression, EventTime};

#[test]
fn run_without_config_uses_the_embedded_default() {
    // The embedded default listens on fixed ports (forward 24224, monitor
    // 24220). In a network namespace of its own the test finds them free
    // whatever runs on the machine (a local Fluentd or Fluent Bit).
    if let Err(why) = in_private_network(embedded_default_serves_forward_and_monitor) {
        skip_unless(
            false,
            &format!("the embedded default's fixed ports need a private network namespace: {why}"),
        );
    }
}

fn embedded_default_serves_forward_and_monitor() {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(BIN);
    cmd.arg("run");
    let mut d = Daemon::spawn(cmd, dir.path(), dir.path().join("none"), Some(24220));
    d.wait_port(24224);
    d.wait_port(24220);

    // Fixed times so the exact rendering can be checked.
    let mut e = Vec::new();
    let n = 50u64;
    for s in 0..n {
        write_entry(
            &mut e,
            EventTime::new(1_700_000_000 + s as u32, 123_456_789),
            &record(s, &message_for(s)),
        );
    }
    let mut f = Vec::new();
    encode_packed_forward(&mut f, "app.default", &e, n as u32, None, Compression::None).unwrap();
    let mut tx = Sender::tcp(24224);
    tx.raw(&f);
    tx.finish();

    let lines = d.wait_stdout_lines(n as usize);
    assert_eq!(lines.len(), n as usize, "stdout:\n{}", d.stdout());
    for (i, line) in lines.iter().enumerate() {
        let secs = 1_700_000_000 + i as i64;
        let dt = chrono::DateTime::from_timestamp(secs, 0).unwrap();
        let want = format!(
            "{{\"time\":\"{}.123456789Z\",\"tag\":\"app.default\",\"record\":{{\"seq\":{i},\"message\":\"event number {i}\"}}}}",
            dt.format("%Y-%m-%dT%H:%M:%S")
        );
        assert_eq!(line, &want);
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        assert_eq!(keys, ["time", "tag", "record"]);
    }
    let re = regex::Regex::new(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z$").unwrap();
    let v: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    assert!(re.is_match(v["time"].as_str().unwrap()));

    let (status, body) = http_get(24220, "/health");
    assert_eq!(status, 200, "{body}");
    let h: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(h["status"], "ok");
    assert_eq!(d.metric("events_in_total", "forward#0"), n);
    assert!(d.terminate().success(), "stderr:\n{}", d.stderr());
}

/// Font and image libraries: what plotters' `ttf` and bitmap backends pull
/// in (the PNG plots of `nagare bench`, behind the `png` feature).
const FONT_AND_IMAGE_LIBS: &[&str] = &[
    "fontconfig",
    "freetype",
    "expat",
    "png",
    "jpeg",
    "brotli",
    "harfbuzz",
    "bz2",
];

/// The collector does not link the font stack. Checked with ldd on the
/// binary these tests run and, when NAGARE_BIN names one (scripts/test-all.sh:
/// the release build), on that one too.
#[test]
fn the_daemon_links_no_font_or_image_library() {
    if cfg!(feature = "png") {
        skip_unless(
            false,
            "built with the `png` feature, which links the font stack on purpose",
        );
        return;
    }
    let ldd_runs = Command::new("ldd").arg("--version").output().is_ok();
    if skip_unless(ldd_runs, "ldd not found (Debian: libc-bin)") {
        return;
    }
    let mut bins = vec![PathBuf::from(BIN)];
    if let Some(b) = std::env::var_os("NAGARE_BIN") {
        let b = PathBuf::from(b);
        assert!(b.exists(), "NAGARE_BIN={} does not exist", b.display());
        bins.push(b);
    }
    for bin in bins {
        let out = Command::new("ldd").arg(&bin).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            // "not a dynamic executable": a static build links nothing.
            assert!(
                String::from_utf8_lossy(&out.stderr).contains("not a dynamic executable"),
                "ldd {} failed: {out:?}",
                bin.display()
            );
            continue;
        }
        // One library per line: "libc.so.6 => /lib/…/libc.so.6 (0x…)".
        let libs: Vec<&str> = text
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert!(
            libs.iter().any(|l| l.starts_with("libc.so")),
            "ldd {} lists no libc: {text}",
            bin.display()
        );
        let font_or_image: Vec<&&str> = libs
            .iter()
            .filter(|l| FONT_AND_IMAGE_LIBS.iter().any(|f| l.contains(f)))
            .collect();
        assert!(
            font_or_image.is_empty(),
            "{} links {font_or_image:?} (a workspace member turned on nagare-bench's `png` feature?); ldd:\n{text}",
            bin.display()
        );
    }
}

fn check(text: &str) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("nagare.toml");
    // The file output's folder under this test's own, not /tmp/x: a file
    // of that name left in /tmp made `check` refuse the valid config.
    let text = text.replace("/tmp/x/", &format!("{}/x/", dir.path().display()));
    std::fs::write(&p, text).unwrap();
    let out = run_check(&p);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const VALID: &str = r#"
[system]
workers = 2

[monitor]
bind = "127.0.0.1:0"

[[input]]
type = "forward"
bind = "127.0.0.1:0"
max_frame_size = "1KiB"
idle_timeout = "1s"

[[output]]
type = "file"
match = "app.** {web,api}.*"
path = "/tmp/x/${tag}/%Y-%m-%d.log"
format = "ltsv"
[output.buffer]
flush_interval = "500ms"
chunk_limit_size = "1MiB"
overflow_action = "drop_oldest_chunk"

[[output]]
type = "forward"
match = "**"
require_ack_response = true
heartbeat_type = "udp"
compress = "gzip"
[[output.server]]
address = "127.0.0.1:1"
[[output.server]]
address = "127.0.0.1:2"
standby = true
"#;

#[test]
fn check_accepts_a_valid_file() {
    let (code, out, err) = check(VALID);
    assert_eq!(code, 0, "stdout {out} stderr {err}");
    assert!(out.contains("ok (1 inputs, 2 outputs)"), "{out}");
}

/// Replaces `from` in VALID by `to` and expects exit 2 with the file, the
/// line of `to` and the key named on stderr.
fn expect_error(from: &str, to: &str, key: &str, what: &str) {
    assert!(VALID.contains(from), "{from}");
    let text = VALID.replacen(from, to, 1);
    let first_line = to.lines().next().unwrap();
    let line = text
        .lines()
        .position(|l| l == first_line)
        .expect("changed line")
        + 1;
    let (code, out, err) = check(&text);
    assert_eq!(code, 2, "{what}: stdout {out} stderr {err}");
    assert!(
        err.contains(&format!("nagare.toml:{line}:")),
        "{what}: expected file and line {line} in {err:?}"
    );
    assert!(
        err.contains(&format!("`{key}`")),
        "{what}: expected key `{key}` in {err:?}"
    );
}

#[test]
fn check_rejects_bad_files_with_file_line_and_key() {
    expect_error(
        "idle_timeout = \"1s\"",
        "idle_timout = \"1s\"",
        "idle_timout",
        "unknown key",
    );
    expect_error(
        "workers = 2",
        "workers = \"two\"",
        "system.workers",
        "wrong type",
    );
    expect_error(
        "flush_interval = \"500ms\"",
        "flush_interval = \"soon\"",
        "buffer.flush_interval",
        "bad duration",
    );
    expect_error(
        "type = \"file\"",
        "type = \"fiel\"",
        "type",
        "unknown plugin type",
    );
    expect_error(
        "match = \"app.** {web,api}.*\"",
        "match = \"app.{web\"",
        "match",
        "bad match pattern",
    );
    let (code, _, err) =
        check("[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:1\"\nmax_frame_size = \"lots\"\n");
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("nagare.toml:4:") && err.contains("max_frame_size"),
        "{err}"
    );
}

#[test]
fn version_and_usage_errors() {
    let out = Command::new(BIN).arg("--version").output().unwrap();
    assert!(out.status.success());
    let v = String::from_utf8_lossy(&out.stdout);
    assert_eq!(v.trim(), format!("nagare {}", env!("CARGO_PKG_VERSION")));
    let out = Command::new(BIN).arg("no-such-command").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn cat_sends_stdin_lines_as_events() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let sock = dir.path().join("in.sock");
    let out = dir.path().join("out.log");
    let cfg = format!(
        r#"
[[input]]
type = "forward"
bind = "127.0.0.1:{port}"
[[input]]
type = "forward"
path = "{}"
[[output]]
type = "file"
match = "**"
path = "{}"
[output.buffer]
flush_interval = "50ms"
"#,
        sock.display(),
        out.display()
    );
    let mut d = Daemon::start(dir.path(), "cat", &cfg, None);
    d.wait_port(port);
    wait_until(WAIT, "the UNIX socket", || sock.exists());

    let addr = format!("127.0.0.1:{port}");
    let o = nagare_cat(&["--address", &addr, "cat.plain"], &json_input(0..300));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("sent 300 events"));
    let o = nagare_cat(
        &["--address", &addr, "--ack", "cat.ack"],
        &json_input(300..600),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = nagare_cat(
        &["--unix", sock.to_str().unwrap(), "--ack", "cat.unix"],
        &json_input(600..900),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let text = wait_file_lines(&out, 900);
    let got = json_lines_seqs(&text);
    assert_exact_seqs(&seqs(&got), 900);
    for (tag, s) in &got {
        let want = match s {
            0..300 => "cat.plain",
            300..600 => "cat.ack",
            _ => "cat.unix",
        };
        assert_eq!(tag, want, "seq {s}");
    }
    // Records arrive as they were written, JSON to msgpack to JSON.
    for line in text.lines().take(3) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let s = v["record"]["seq"].as_u64().unwrap();
        assert_eq!(v["record"]["message"], message_for(s));
    }
    // A connection refused is exit 1 with a message.
    let dead = format!("127.0.0.1:{}", free_port());
    let o = nagare_cat(&["--address", &dead, "x"], "{\"a\":1}\n");
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot connect"));
    assert!(d.terminate().success());
}
