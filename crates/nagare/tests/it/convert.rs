//! `nagare convert` and `nagare run -c <peer config>` against what the
//! peers did: every case of ../shared/fixtures/peer-configs (real Fluentd
//! 1.16 and Fluent Bit 4.2 configs, the input each was given and the output
//! the real program wrote, normalized) is run by the real nagare binary
//! straight from the peer's config, on the same input, and its events (tag,
//! record; time where the config takes it from the log) are compared with
//! the peer's, event by event, in order.
//!
//! Every event must be the peer's. Where nagare writes a record slightly
//! otherwise, the conversion says so in a note, and the case names the
//! difference (`Known`), which both sides are normalized for before the
//! comparison; there is no other leeway.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Map, Value};

use crate::common::{self, Daemon, BIN};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/peer-configs")
}

/// A difference from the peer that a conversion note announces.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Known {
    /// nagare keeps a line its parser could not parse with a `parse_error`
    /// field beside the line (Fluent Bit keeps the line alone): the field is
    /// removed before comparing.
    ParseErrorField,
    /// Fluentd's record_transformer sets null for a missing field; nagare's
    /// modify sets nothing: null fields are removed on both sides.
    NullFields,
    /// Fluent Bit's multiline messages end with a newline; nagare's joined
    /// lines do not: one trailing newline is removed from the peer's strings.
    TrailingNewline,
}

struct Case {
    name: &'static str,
    /// TZ for nagare, as the conversion's note says (the peer's time offset).
    tz: Option<&'static str>,
    known: &'static [Known],
}

const CASES: &[Case] = &[
    Case {
        name: "fluentd-nginx-access",
        tz: None,
        known: &[],
    },
    Case {
        name: "fluentd-forward-routing",
        tz: None,
        known: &[],
    },
    Case {
        name: "fluentd-java-multiline",
        tz: Some("<+0100>-1"),
        known: &[],
    },
    Case {
        name: "fluentd-json-copy",
        tz: None,
        known: &[Known::NullFields],
    },
    Case {
        name: "fluent-bit-nginx-modify-grep",
        tz: None,
        known: &[Known::ParseErrorField],
    },
    Case {
        name: "fluent-bit-yaml-lua",
        tz: None,
        known: &[Known::ParseErrorField],
    },
    Case {
        name: "fluent-bit-rewrite-throttle",
        tz: None,
        known: &[Known::ParseErrorField],
    },
    Case {
        name: "fluent-bit-java-multiline",
        tz: Some("<+0100>-1"),
        known: &[Known::ParseErrorField, Known::TrailingNewline],
    },
];

fn copy_case(from: &Path, to: &Path, run: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        let src = entry.path();
        let dst = to.join(&name);
        if src.is_dir() {
            if name == "out" {
                continue;
            }
            std::fs::create_dir_all(&dst).unwrap();
            copy_case(&src, &dst, run);
        } else if src.parent().and_then(|p| p.file_name()) == Some("in".as_ref()) {
            std::fs::copy(&src, &dst).unwrap();
        } else {
            let text = std::fs::read_to_string(&src).unwrap();
            std::fs::write(
                &dst,
                text.replace("/FIXTURE/", &format!("{}/", run.display())),
            )
            .unwrap();
        }
    }
}

fn glob_files(run: &Path, pattern: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = glob::glob(&run.join(pattern).display().to_string())
        .unwrap()
        .filter_map(Result::ok)
        .collect();
    v.sort();
    v
}

fn sort_keys(v: Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<(String, Value)> = m.into_iter().collect();
            keys.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(keys.into_iter().map(|(k, v)| (k, sort_keys(v))).collect())
        }
        Value::Array(a) => Value::Array(a.into_iter().map(sort_keys).collect()),
        other => other,
    }
}

fn replace_host(v: Value, host: &str) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| (k, replace_host(v, host)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(|v| replace_host(v, host)).collect()),
        Value::String(s) if s == host => Value::String("{{hostname}}".into()),
        other => other,
    }
}

/// nagare's file output lines ({"time","tag","record"}) normalized as the
/// case's spec normalizes the peer's.
fn normalize(spec: &Value, run: &Path, known: &[Known]) -> Vec<Value> {
    let timed = spec.get("time_key").is_some() || spec.get("keep_time") == Some(&Value::Bool(true));
    let untimed_if = spec.get("untimed_if_key").and_then(Value::as_str);
    let host = gethostname();
    let mut out = Vec::new();
    for f in glob_files(run, spec["glob"].as_str().unwrap()) {
        for line in std::fs::read_to_string(&f).unwrap().lines() {
            let v: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{}: {e}: {line}", f.display()));
            let mut record = v["record"].clone();
            if known.contains(&Known::ParseErrorField) {
                record.as_object_mut().unwrap().remove("parse_error");
            }
            if known.contains(&Known::NullFields) {
                record.as_object_mut().unwrap().retain(|_, v| !v.is_null());
            }
            if spec.get("hostname") == Some(&Value::Bool(true)) {
                record = replace_host(record, &host);
            }
            if spec.get("sort_keys") == Some(&Value::Bool(true)) {
                record = sort_keys(record);
            }
            let mut ev = Map::new();
            ev.insert("tag".into(), v["tag"].clone());
            let untimed = untimed_if.is_some_and(|k| record.get(k).is_some());
            if timed && !untimed {
                let mut time = v["time"].as_str().unwrap().to_string();
                if spec["format"] == "fluentd_out_file" {
                    // That layout has whole seconds only.
                    time = format!("{}.000000000Z", &time[..19]);
                }
                ev.insert("time".into(), Value::String(time));
            }
            ev.insert("record".into(), record);
            out.push(Value::Object(ev));
        }
    }
    out
}

fn gethostname() -> String {
    // What nagare's ${hostname} reads (gethostname(2)), without a `hostname` program.
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string()
}

fn read_expected(case_dir: &Path, spec: &Value, known: &[Known]) -> Vec<Value> {
    let text = std::fs::read_to_string(case_dir.join(spec["out"].as_str().unwrap())).unwrap();
    text.lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            let record = v["record"].as_object_mut().unwrap();
            if known.contains(&Known::NullFields) {
                record.retain(|_, v| !v.is_null());
            }
            if known.contains(&Known::TrailingNewline) {
                for (_, v) in record.iter_mut() {
                    if let Value::String(s) = v {
                        if s.ends_with('\n') {
                            s.pop();
                        }
                    }
                }
            }
            v
        })
        .collect()
}

fn run_case(case: &Case) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().to_path_buf();
    let case_dir = fixtures().join(case.name);
    copy_case(&case_dir, &run, &run);
    std::fs::create_dir_all(run.join("sink")).unwrap();
    std::fs::create_dir_all(run.join("state")).unwrap();
    let spec: Value =
        serde_json::from_str(&std::fs::read_to_string(case_dir.join("case.json")).unwrap())
            .unwrap();
    let config = run.join(spec["config"].as_str().unwrap());
    // A free port instead of the peer's 24224.
    let port = common::free_port();
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("port 24224", &format!("port {port}"))).unwrap();
    // Deferred inputs start empty and are written once nagare runs.
    let mut deferred = Vec::new();
    for d in spec["deferred"].as_array().into_iter().flatten() {
        let f = run.join(d["file"].as_str().unwrap());
        deferred.push((f.clone(), std::fs::read(&f).unwrap()));
        std::fs::write(&f, b"").unwrap();
    }

    // `nagare convert` writes TOML that `nagare check` accepts.
    let toml = run.join("converted.toml");
    let conv = Command::new(BIN)
        .args(["convert", "-o"])
        .arg(&toml)
        .arg(&config)
        .output()
        .unwrap();
    let code = conv.status.code().unwrap();
    let stderr = String::from_utf8_lossy(&conv.stderr).to_string();
    if code != 0 {
        return Err(format!("nagare convert exited {code}:\n{stderr}"));
    }
    let check = common::run_check(&toml);
    if !check.status.success() {
        return Err(format!(
            "nagare check of the converted config failed: {}\n{}",
            String::from_utf8_lossy(&check.stderr),
            std::fs::read_to_string(&toml).unwrap()
        ));
    }

    // `nagare run -c <the peer's config>`: converted in memory, notes printed.
    let mut cmd = Command::new(BIN);
    cmd.current_dir(&run).arg("run").arg("-c").arg(&config);
    if let Some(tz) = case.tz {
        cmd.env("TZ", tz);
    }
    let mut daemon = Daemon::spawn(cmd, &run, config.clone(), None);
    // The conversion's notes come first, naming the peer's file and line.
    daemon.wait_log(&format!("note: {}/", run.display()));
    for feed in spec["feed"].as_array().into_iter().flatten() {
        daemon.wait_port(port);
        let input = std::fs::File::open(run.join(feed["file"].as_str().unwrap())).unwrap();
        let st = Command::new(BIN)
            .args([
                "cat",
                "--address",
                &format!("127.0.0.1:{port}"),
                "--ack",
                feed["tag"].as_str().unwrap(),
            ])
            .stdin(input)
            .status()
            .unwrap();
        assert!(st.success(), "nagare cat failed");
    }
    for (f, bytes) in &deferred {
        // Followed (at its end, 0) before it is written, as a live log.
        daemon.wait_read_to_end(f);
        std::fs::write(f, bytes).unwrap();
    }
    let outputs = spec["outputs"].as_array().unwrap();
    let want: Vec<Vec<Value>> = outputs
        .iter()
        .map(|o| read_expected(&case_dir, o, case.known))
        .collect();
    let total: usize = want.iter().map(Vec::len).sum();
    // Read inputs to their end, then stop: nagare flushes every buffer on
    // the way out, as the peers did under the harness's SIGTERM.
    for f in std::fs::read_dir(run.join("in")).unwrap() {
        let f = f.unwrap().path();
        if spec["feed"].is_null() {
            daemon.wait_read_to_end(&f);
        }
    }
    let count = || {
        outputs
            .iter()
            .flat_map(|o| glob_files(&run, o["glob"].as_str().unwrap()))
            .map(|f| {
                std::fs::read_to_string(f)
                    .unwrap_or_default()
                    .lines()
                    .count()
            })
            .sum::<usize>()
    };
    // The multiline flush interval holds the last event back a while.
    common::wait_until(
        common::WAIT,
        &format!("{total} events in the outputs"),
        || count() >= total,
    );
    let status = daemon.terminate();
    if !status.success() {
        return Err(format!("nagare exited {status}: {}", daemon.stderr()));
    }
    let mut report = String::new();
    for (o, want) in outputs.iter().zip(&want) {
        // Order is compared within each tag: a file that several tags go
        // to gets their chunks in whatever order the buffer flushes them
        // (per tag, as in Fluentd), so both sides are sorted by tag, stably.
        let by_tag = |mut v: Vec<Value>| {
            v.sort_by(|a, b| a["tag"].as_str().cmp(&b["tag"].as_str()));
            v
        };
        let got = by_tag(normalize(o, &run, case.known));
        let want = &by_tag(want.clone());
        if &got != want {
            report.push_str(&format!(
                "output {}: {} events, the peer {}\n",
                o["out"],
                got.len(),
                want.len()
            ));
            for i in 0..got.len().max(want.len()) {
                if got.get(i) != want.get(i) {
                    report.push_str(&format!(
                        "  #{i}\n    nagare: {}\n    peer:   {}\n",
                        got.get(i).map_or("-".into(), |v| v.to_string()),
                        want.get(i).map_or("-".into(), |v| v.to_string())
                    ));
                }
            }
        }
    }
    if report.is_empty() {
        Ok(())
    } else {
        Err(report)
    }
}

#[test]
fn peer_configs_run_as_the_peers_did() {
    if common::skip_unless(
        fixtures().join("README.md").exists(),
        "../shared/fixtures/peer-configs is not beside the repository",
    ) {
        return;
    }
    let only = std::env::var("CONVERT_CASE").ok();
    let mut failed = Vec::new();
    for case in CASES {
        if only.as_deref().is_some_and(|o| o != case.name) {
            continue;
        }
        if let Err(e) = run_case(case) {
            failed.push(format!("== {}\n{e}", case.name));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// Exit 0 for a complete conversion, 3 with the notes of what was left out
/// (file:line: what: why, on stderr and as comments in the TOML), 2 for a
/// file that cannot be read; `nagare check -c` takes a peer's config too.
#[test]
fn convert_exit_codes_notes_and_check() {
    let dir = tempfile::tempdir().unwrap();
    let complete = dir.path().join("complete.conf");
    std::fs::write(
        &complete,
        "<source>\n  @type forward\n  port 24299\n</source>\n<match **>\n  @type stdout\n  <format>\n    @type json\n  </format>\n</match>\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .arg("convert")
        .arg(&complete)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let toml = String::from_utf8(out.stdout).unwrap();
    assert!(
        toml.contains("type = 'forward'") && toml.contains("bind = '0.0.0.0:24299'"),
        "{toml}"
    );

    let partial = dir.path().join("fluent-bit.conf");
    std::fs::write(
        &partial,
        "[INPUT]\n    Name tail\n    Path /var/log/a.log\n    Tag a\n\n[OUTPUT]\n    Name datadog\n    Match *\n\n[OUTPUT]\n    Name null\n    Match *\n",
    )
    .unwrap();
    let toml_path = dir.path().join("out.toml");
    let out = Command::new(BIN)
        .arg("convert")
        .arg("-o")
        .arg(&toml_path)
        .arg(&partial)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let want = format!(
        "{}:6: not converted: [OUTPUT] Name datadog: nagare has no plugin of this type",
        partial.display()
    );
    assert!(stderr.contains(&want), "{stderr}");
    let toml = std::fs::read_to_string(&toml_path).unwrap();
    assert!(toml.contains(&format!("# not converted: {want}")), "{toml}");
    assert!(
        toml.contains("type = 'null'") && toml.contains("match = '**'"),
        "{toml}"
    );

    // `nagare check` reads the peer's file directly, with the notes as warnings.
    let out = common::run_check(&partial);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: ") && stderr.contains("Name datadog"),
        "{stderr}"
    );

    let broken = dir.path().join("broken.conf");
    std::fs::write(&broken, "<source>\n  @type forward\n</match>\n").unwrap();
    let out = Command::new(BIN)
        .arg("convert")
        .arg(&broken)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("{}:3: </match> closes <source>", broken.display())),
        "{stderr}"
    );
    let out = common::run_check(&broken);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("closes <source>"));
}

/// The configs of docs/migration.md convert, pass `nagare check`, and the
/// Fluentd example converts to the TOML the page shows.
#[test]
fn migration_doc_examples() {
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/migration.md"),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut blocks: Vec<(String, String)> = Vec::new();
    let mut lines = doc.lines();
    while let Some(l) = lines.next() {
        if let Some(lang) = l.strip_prefix("```") {
            if lang.is_empty() {
                continue;
            }
            let body: Vec<&str> = lines
                .by_ref()
                .take_while(|l| !l.starts_with("```"))
                .collect();
            blocks.push((lang.to_string(), body.join("\n") + "\n"));
        }
    }
    let strip = |t: &str| -> Vec<String> {
        t.lines()
            .map(|l| match l.find("  # ") {
                Some(i) => l[..i].to_string(),
                None => l.to_string(),
            })
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .collect()
    };
    let mut fluentd_toml = None;
    let mut converted = 0;
    for (i, (lang, body)) in blocks.iter().enumerate() {
        let name = match lang.as_str() {
            "fluentd" => format!("ex{i}.conf"),
            "ini" => format!("ex{i}-fluent-bit.conf"),
            "yaml" => format!("ex{i}.yaml"),
            _ => continue,
        };
        let path = dir.path().join(name);
        std::fs::write(&path, body).unwrap();
        let out = Command::new(BIN)
            .arg("convert")
            .arg(&path)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "block {i} ({lang}): {stderr}");
        let toml = String::from_utf8(out.stdout).unwrap();
        let toml_path = dir.path().join(format!("ex{i}.toml"));
        std::fs::write(&toml_path, &toml).unwrap();
        let check = common::run_check(&toml_path);
        assert!(
            check.status.success(),
            "block {i}: {}\n{toml}",
            String::from_utf8_lossy(&check.stderr)
        );
        if lang == "fluentd" {
            fluentd_toml = Some(toml.clone());
        }
        converted += 1;
    }
    assert_eq!(
        converted, 3,
        "the page's Fluentd, Fluent Bit and YAML examples"
    );
    // The TOML block shown after the Fluentd example is what it converts to.
    let shown = blocks
        .iter()
        .find(|(l, _)| l == "toml")
        .map(|(_, b)| strip(b))
        .unwrap();
    let got = strip(fluentd_toml.as_deref().unwrap());
    assert_eq!(
        got, shown,
        "docs/migration.md's TOML example differs from the conversion"
    );
}

/// The common plugins of both peers, written the way their docs show them,
/// convert completely (exit 0) into TOML that `nagare check` accepts.
#[test]
fn common_plugins_of_both_peers_convert() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let fluentd = format!(
        r##"<system>
  log_level warn
</system>
<source>
  @type forward
  port 24301
  @label @AUDIT
</source>
<source>
  @type syslog
  port 5141
  tag system
  <transport tcp>
  </transport>
</source>
<source>
  @type tcp
  port 5171
  tag raw.tcp
  <parse>
    @type json
  </parse>
</source>
<source>
  @type udp
  port 5161
  tag raw.udp
  <parse>
    @type none
  </parse>
</source>
<source>
  @type http
  port 9881
</source>
<filter raw.**>
  @type parser
  key_name message
  reserve_data true
  <parse>
    @type ltsv
  </parse>
</filter>
<filter system.**>
  @type record_transformer
  renew_record true
  keep_keys host,message
</filter>
<match system.**>
  @type kafka2
  brokers 127.0.0.1:9092
  default_topic logs
  required_acks -1
  <format>
    @type json
  </format>
</match>
<match raw.**>
  @type http
  endpoint http://127.0.0.1:9999/logs
  json_array true
  <format>
    @type json
  </format>
</match>
<match **>
  @type null
</match>
<label @AUDIT>
  <match **>
    @type copy
    <store>
      @type file
      path {d}/audit/events
      <format>
        @type json
      </format>
      <buffer>
        timekey 1h
        timekey_use_utc true
      </buffer>
    </store>
    <store>
      @type stdout
      <format>
        @type json
      </format>
    </store>
  </match>
</label>
"##
    );
    let fluent_bit = format!(
        r#"[SERVICE]
    Flush        2
    Log_Level    warn
    HTTP_Server  On
    HTTP_Port    2021

[INPUT]
    Name    forward
    Listen  127.0.0.1
    Port    24302

[INPUT]
    Name    http
    Port    9882

[INPUT]
    Name    tcp
    Port    5172
    Format  none
    Tag     raw

[FILTER]
    Name    record_modifier
    Match   *
    Record  region eu-1

[FILTER]
    Name    rewrite_tag
    Match   raw
    Rule    $log ^ERROR alert.$TAG true

[FILTER]
    Name    lua
    Match   raw
    code    function cb(tag, ts, r) return 0, ts, r end
    call    cb

[OUTPUT]
    Name    kafka
    Match   raw
    Brokers 127.0.0.1:9092
    Topics  raw

[OUTPUT]
    Name    http
    Match   http.*
    Host    127.0.0.1
    Port    9999
    URI     /in
    Format  json_lines

[OUTPUT]
    Name    file
    Match   *
    Path    {d}/fb
"#
    );
    for (name, text, want) in [
        (
            "fluent.conf",
            fluentd,
            &[
                "label = 'AUDIT'",
                "protocol = 'tcp'",
                "topic = 'logs'",
                "acks = 'all'",
                "format = 'json_array'",
                "[[output.store]]",
                "keep = ['host', 'message']",
                "path = '",
            ][..],
        ),
        (
            "fluent-bit.conf",
            fluent_bit,
            &[
                "[monitor]",
                "bind = '0.0.0.0:2021'",
                "flush_interval = '2s'",
                "format = 'ndjson'",
                "endpoint = 'http://127.0.0.1:9999/in'",
                "region = 'eu-1'",
                "match = '**'",
                "keep = true",
                "strings_only = true",
            ][..],
        ),
    ] {
        convert_and_check(dir.path(), name, &text, 0, want);
    }
}

/// The plugins for search stores, Loki, Splunk, S3, SQL, ClickHouse,
/// journald and exec, in the shapes the peers' docs show: each converts
/// completely (exit 0), to the options named here, and `nagare check`
/// takes the result.
#[test]
fn store_and_service_plugins_of_both_peers_convert() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let fluentd = format!(
        r##"<source>
  @type systemd
  tag journal
  path /var/log/journal
  matches [{{ "_SYSTEMD_UNIT": "nginx.service" }}, {{ "_SYSTEMD_UNIT": "sshd.service", "PRIORITY": ["3", "4"] }}]
  read_from_head true
  <storage>
    @type local
    persistent true
    path {d}/journal.pos
  </storage>
</source>
<source>
  @type exec
  tag disk
  command df -P /
  run_interval 30s
  <parse>
    @type none
  </parse>
</source>
<match journal.**>
  @type elasticsearch
  host 127.0.0.1
  port 9200
  logstash_format true
  logstash_prefix journal
  include_tag_key true
  user elastic
  password secret
  request_timeout 15s
  reconnect_on_error true
  suppress_type_name true
</match>
<match disk.**>
  @type opensearch
  hosts https://127.0.0.1:9200
  index_name disk-${{tag}}
  id_key uid
  write_operation create
  ssl_verify false
</match>
<match app.loki.**>
  @type loki
  url http://127.0.0.1:3100
  tenant team-a
  extra_labels {{"env":"prod"}}
  line_format json
  <label>
    level
    container $.kubernetes.container_name
  </label>
</match>
<match app.splunk.**>
  @type splunk_hec
  hec_host 127.0.0.1
  hec_port 8088
  hec_token 00000000-0000-0000-0000-000000000000
  index main
  sourcetype_key kind
  insecure_ssl true
  <fields>
    level
    service app
  </fields>
</match>
<match app.s3.**>
  @type s3
  s3_bucket logs
  s3_region eu-west-1
  s3_endpoint http://127.0.0.1:9000
  force_path_style true
  aws_key_id AKIAEXAMPLE
  aws_sec_key secret
  path logs/${{tag}}/
  time_slice_format %Y%m%d%H
  store_as gzip
  <format>
    @type json
  </format>
</match>
<match app.sql.**>
  @type sql
  host 127.0.0.1
  port 5432
  database logs
  adapter postgresql
  username fluentd
  password secret
  <table>
    table access_log
    column_mapping timestamp:created_at,host,path:request_path
  </table>
</match>
<match app.ch.**>
  @type clickhouse
  host 127.0.0.1
  port 8123
  database logs
  table events
  user default
</match>
"##
    );
    let fluent_bit = format!(
        r#"[INPUT]
    Name                 systemd
    Tag                  host.*
    Systemd_Filter       _SYSTEMD_UNIT=docker.service
    Systemd_Filter       _SYSTEMD_UNIT=kubelet.service
    Systemd_Filter_Type  Or
    Read_From_Tail       On
    DB                   {d}/systemd.db

[INPUT]
    Name          exec
    Tag           disk
    Command       df -P /
    Interval_Sec  30
    Buf_Size      8mb

[INPUT]
    Name             elasticsearch
    Tag              bulk
    Listen           127.0.0.1
    Port             9201
    Buffer_Max_Size  4M
    Version          8.11.0

[INPUT]
    Name          splunk
    Tag           hec
    Listen        127.0.0.1
    Port          8089
    Splunk_Token  abc123

[INPUT]
    Name              tail
    Tag               kube.*
    Path              /var/log/containers/*.log
    multiline.parser  docker, cri

[OUTPUT]
    Name                es
    Match               host.*
    Host                127.0.0.1
    Port                9200
    Logstash_Format     On
    Logstash_Prefix     node
    HTTP_User           elastic
    HTTP_Passwd         secret
    Suppress_Type_Name  On
    tls                 On
    tls.verify          Off

[OUTPUT]
    Name   opensearch
    Match  disk
    Host   127.0.0.1
    Port   9200
    Index  disk

[OUTPUT]
    Name         loki
    Match        kube.*
    Host         127.0.0.1
    Port         3100
    Labels       job=fluent-bit, $kubernetes['namespace_name']
    Label_Keys   $stream
    Line_Format  json

[OUTPUT]
    Name                  splunk
    Match                 hec
    Host                  127.0.0.1
    Port                  8088
    Splunk_Token          00000000-0000-0000-0000-000000000000
    Event_Key             $log
    Event_Sourcetype_Key  $kind
    Event_Index           main
    Event_Field           service $service
    tls                   On
    tls.verify            Off

[OUTPUT]
    Name             s3
    Match            bulk
    bucket           logs
    region           eu-west-1
    endpoint         http://127.0.0.1:9000
    s3_key_format    /$TAG[0]/%Y/%m/%d/$UUID.gz
    compression      gzip
    total_file_size  50M
    upload_timeout   10m

[OUTPUT]
    Name      pgsql
    Match     disk
    Host      127.0.0.1
    Port      5432
    User      fluentbit
    Password  secret
    Database  fluentbit
    Table     logs
"#
    );
    for (name, text, want) in [
        (
            "stores.conf",
            fluentd,
            &[
                "type = 'journald'",
                "matches = ['_SYSTEMD_UNIT=nginx.service', '+', '_SYSTEMD_UNIT=sshd.service', 'PRIORITY=3', 'PRIORITY=4']",
                "cursor_file = '",
                "command = ['sh', '-c', 'df -P /']",
                "interval = '30s'",
                "endpoint = 'http://127.0.0.1:9200'",
                "index = 'journal-%Y.%m.%d'",
                "tag_key = 'tag'",
                "timeout = '15s'",
                "endpoint = 'https://127.0.0.1:9200'",
                "action = 'create'",
                "verify = false",
                "endpoint = 'http://127.0.0.1:3100/loki/api/v1/push'",
                "container = '${record.kubernetes.container_name}'",
                "level = '${record.level}'",
                "env = 'prod'",
                "endpoint = 'https://127.0.0.1:8088/services/collector/event'",
                "sourcetype = '${record.kind}'",
                "service = '${record.app}'",
                "bucket = 'logs'",
                "path_style = true",
                "key = 'logs/${tag}/%Y%m%d%H_${chunk_id}${ext}'",
                "compression = 'gzip'",
                "type = 'postgresql'",
                "connection = 'host=127.0.0.1 port=5432 dbname=logs user=fluentd'",
                "created_at = 'timestamp'",
                "request_path = 'path'",
                "type = 'clickhouse'",
                "endpoint = 'http://127.0.0.1:8123'",
            ][..],
        ),
        (
            "stores-fluent-bit.conf",
            fluent_bit,
            &[
                "tag = 'host.${record._SYSTEMD_UNIT}'",
                "matches = ['_SYSTEMD_UNIT=docker.service', '+', '_SYSTEMD_UNIT=kubelet.service']",
                "read_from_head = false",
                "command = ['sh', '-c', 'df -P /']",
                "interval = '30000ms'",
                "message_key = 'exec'",
                "type = 'elasticsearch'",
                "bind = '127.0.0.1:9201'",
                "version = '8.11.0'",
                "tokens = ['abc123']",
                "type = 'docker'",
                "index = 'node-%Y.%m.%d'",
                "endpoint = 'https://127.0.0.1:9200'",
                "namespace_name = '${record.kubernetes.namespace_name}'",
                "stream = '${record.stream}'",
                "endpoint = 'https://127.0.0.1:8088/services/collector/event'",
                "event_key = 'log'",
                "service = '${record.service}'",
                "key = '${tag}/%Y/%m/%d/${chunk_id}.gz'",
                "record_column = 'data'",
            ][..],
        ),
    ] {
        convert_and_check(dir.path(), name, &text, 0, want);
    }
}

/// Converts `text` (a peer config) written to `dir/name`: the exit status
/// is `exit` (0 complete, 3 with things not converted), the TOML holds
/// every line of `want`, and `nagare check` passes it. Returns the TOML
/// and what `nagare convert` printed.
fn convert_and_check(
    dir: &Path,
    name: &str,
    text: &str,
    exit: i32,
    want: &[&str],
) -> (String, String) {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    let toml_path = dir.join(format!("{name}.toml"));
    let out = Command::new(BIN)
        .arg("convert")
        .arg("-o")
        .arg(&toml_path)
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let toml = std::fs::read_to_string(&toml_path).unwrap_or_default();
    assert_eq!(out.status.code(), Some(exit), "{name}: {stderr}\n{toml}");
    for w in want {
        assert!(toml.contains(w), "{name}: no `{w}` in\n{toml}");
    }
    let check = common::run_check(&toml_path);
    assert!(
        check.status.success(),
        "{name}: {}\n{toml}",
        String::from_utf8_lossy(&check.stderr)
    );
    (toml, stderr)
}

/// The store mappings checked against the peers' own sources (see
/// docs/migration.md, "How the mappings were checked"): each case is a
/// mapping that was wrong before the check.
#[test]
fn store_mappings_follow_the_peers_sources() {
    let dir = tempfile::tempdir().unwrap();
    // fluent-plugin-splunk-hec: full_url + "/" + hec_endpoint;
    // custom_headers. fluent-plugin-s3: without time_slice_format the slice
    // follows <buffer> timekey (default 1d). fluent-plugin-grafana-loki:
    // <label> names with "." "-" "/" become "_", extra_labels win, compress
    // needs no note, custom_headers.
    let fluentd = r#"<source>
  @type forward
  bind 127.0.0.1
  port 24301
</source>
<source>
  @type beats
  bind 127.0.0.1
  port 5045
  tag filebeat
  max_connections 100
</source>
<match hec.**>
  @type splunk_hec
  full_url https://hec.example:8088/
  hec_token t0
  custom_headers {"X-Team":"web"}
</match>
<match s3.day.**>
  @type s3
  s3_bucket logs
  s3_region eu-west-1
  path day/
</match>
<match s3.hour.**>
  @type s3
  s3_bucket logs
  s3_region eu-west-1
  path hour/
  <buffer tag,time>
    timekey 1h
  </buffer>
</match>
<match loki.**>
  @type loki
  url http://127.0.0.1:3100
  extra_labels {"env":"prod"}
  compress gzip
  custom_headers X-Org:a,X-Env:b
  <label>
    k8s.ns $.kubernetes.namespace
    env
  </label>
</match>
"#;
    let (toml, _) = convert_and_check(
        dir.path(),
        "fluentd.conf",
        fluentd,
        0,
        &[
            "type = 'beats'",
            "bind = '127.0.0.1:5045'",
            "tag = 'filebeat'",
            "max_connections = 100",
            "endpoint = 'https://hec.example:8088/services/collector/event'",
            "X-Team = 'web'",
            "key = 'day/%Y%m%d_${chunk_id}${ext}'",
            "key = 'hour/%Y%m%d%H_${chunk_id}${ext}'",
            "k8s_ns = '${record.kubernetes.namespace}'",
            "env = 'prod'",
            "X-Org = 'a'",
            "X-Env = 'b'",
        ],
    );
    assert!(!toml.contains("${record.env}"), "extra_labels win:\n{toml}");

    // fluent-plugin-clickhouse: database "default" unless set; `fields`
    // are positional CSV columns, which nagare does not have.
    // fluent-plugin-beats: `metadata_as_tag` has no equivalent option.
    let (toml, stderr) = convert_and_check(
        dir.path(),
        "clickhouse.conf",
        "<source>\n  @type beats\n  port 5046\n  metadata_as_tag true\n</source>\n<match **>\n  @type clickhouse\n  host 127.0.0.1\n  table events\n  fields tag,_DATETIME,message\n</match>\n",
        3,
        &["database = 'default'", "table = 'events'"],
    );
    assert!(
        stderr.contains(":10: not converted: fields tag,_DATETIME,message"),
        "{stderr}\n{toml}"
    );
    assert!(
        stderr.contains(":4: not converted: metadata_as_tag true"),
        "{stderr}\n{toml}"
    );

    // Fluent Bit (plugin sources, v4.2.8 and v5.1): out_es's Write_Operation
    // defaults to create and Tag_Key to "flb-key", HTTP_API_Key; out_loki
    // takes the label keys out of the line (no keep_label_fields), Header,
    // compress; in_splunk's Splunk_Token is comma-separated, and the HTTP
    // server inputs take http_server.buffer_max_size (5.x) and http2.
    let fluent_bit = r#"[INPUT]
    Name                         splunk
    Tag                          hec
    Listen                       127.0.0.1
    Port                         8090
    Splunk_Token                 tok-a, tok-b
    http_server.buffer_max_size  8M
    http2                        off

[INPUT]
    Name             elasticsearch
    Tag              bulk
    Listen           127.0.0.1
    Port             9202
    Buffer_Max_Size  2M

[OUTPUT]
    Name             es
    Match            bulk
    Host             127.0.0.1
    Port             9200
    HTTP_API_Key     a2V5OnNlY3JldA==
    Include_Tag_Key  On

[OUTPUT]
    Name         loki
    Match        hec
    Host         127.0.0.1
    Port         3100
    Labels       job=app, $kubernetes['namespace_name']
    Label_Keys   $stream
    Header       X-Scope-OrgID team-a
    compress     gzip
"#;
    let (toml, _) = convert_and_check(
        dir.path(),
        "fluent-bit.conf",
        fluent_bit,
        0,
        &[
            "tokens = ['tok-a', 'tok-b']",
            "max_body_size = '8MiB'",
            "max_body_size = '2MiB'",
            "action = 'create'",
            "tag_key = 'flb-key'",
            "api_key = 'a2V5OnNlY3JldA=='",
            "X-Scope-OrgID = 'team-a'",
            "# approx: Fluent Bit takes nested label keys out of the line too",
        ],
    );
    assert!(!toml.contains("keep_label_fields"), "{toml}");
}

/// A pos_file or tail DB that is there when the config is converted is
/// imported at nagare's first start (`import_fluentd_pos_file`,
/// `import_fluent_bit_db`); one that is not is left as a comment.
#[test]
fn tail_state_files_are_imported_when_present() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/samples/tail-state");
    std::fs::copy(
        samples.join("fluentd-1.16/app.log.pos"),
        d.join("app.log.pos"),
    )
    .unwrap();
    std::fs::copy(samples.join("fluent-bit-4.2/tail.db"), d.join("tail.db")).unwrap();
    std::fs::write(d.join("app.log"), "a\n").unwrap();
    let conf = d.join("fluent.conf");
    std::fs::write(
        &conf,
        format!(
            "<source>\n  @type tail\n  path {0}/app.log\n  pos_file {0}/app.log.pos\n  tag a\n</source>\n<source>\n  @type tail\n  path {0}/other.log\n  pos_file {0}/missing.pos\n  tag b\n</source>\n<match **>\n  @type null\n</match>\n",
            d.display()
        ),
    )
    .unwrap();
    let fb = d.join("fluent-bit.conf");
    std::fs::write(
        &fb,
        format!("[INPUT]\n    Name tail\n    Path {0}/app.log\n    DB {0}/tail.db\n    Tag a\n\n[OUTPUT]\n    Name null\n    Match *\n", d.display()),
    )
    .unwrap();
    for (file, want) in [
        (
            &conf,
            format!("import_fluentd_pos_file = '{}/app.log.pos'", d.display()),
        ),
        (
            &fb,
            format!("import_fluent_bit_db = '{}/tail.db'", d.display()),
        ),
    ] {
        let out_path = d.join("out.toml");
        let out = Command::new(BIN)
            .arg("convert")
            .arg("-o")
            .arg(&out_path)
            .arg(file)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let toml = std::fs::read_to_string(&out_path).unwrap();
        assert!(toml.contains(&want), "{toml}");
        let check = common::run_check(&out_path);
        assert!(
            check.status.success(),
            "{}\n{toml}",
            String::from_utf8_lossy(&check.stderr)
        );
        if file == &conf {
            assert!(
                toml.contains("# import_fluentd_pos_file = ") && toml.contains("missing.pos"),
                "{toml}"
            );
            assert_eq!(
                toml.matches("\nimport_fluentd_pos_file").count(),
                1,
                "{toml}"
            );
        }
    }
}

/// End to end against a real PostgreSQL (common/pg_server.rs): a Fluent
/// Bit config whose pgsql output was converted, run by nagare straight from
/// the peer's file, stores every tailed line once in Fluent Bit's table
/// layout (tag, time, data jsonb), by content.
#[test]
fn a_converted_fluent_bit_pgsql_output_stores_rows_in_its_layout() {
    use crate::common::pg_server::{shared_postgres, PASSWORD, USER};
    let Some(pg) = shared_postgres() else { return };
    let pg = pg.read().unwrap();
    let table = "fb_converted";
    pg.psql(&format!(
        "DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (tag varchar, time timestamptz, data jsonb); \
         GRANT ALL ON {table} TO {USER};"
    ));
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("app.log");
    let lines: Vec<String> = (0..50).map(|i| format!("line {i:02} of the app")).collect();
    std::fs::write(&log, lines.join("\n") + "\n").unwrap();
    let conf = dir.path().join("fluent-bit.conf");
    std::fs::write(
        &conf,
        format!(
            "[SERVICE]\n    Flush 1\n\n[INPUT]\n    Name            tail\n    Tag             app.log\n    Path            {}\n    Read_from_Head  On\n\n\
             [OUTPUT]\n    Name      pgsql\n    Match     app.*\n    Host      127.0.0.1\n    Port      {}\n    User      {USER}\n    Password  {PASSWORD}\n    Database  postgres\n    Table     {table}\n",
            log.display(),
            pg.port
        ),
    )
    .unwrap();
    let mut cmd = Command::new(BIN);
    cmd.current_dir(dir.path()).arg("run").arg("-c").arg(&conf);
    let d = Daemon::spawn(cmd, dir.path(), conf.clone(), None);
    common::wait_until(common::WAIT, "50 rows in PostgreSQL", || {
        pg.count(table) >= 50
    });
    let rows = pg.psql(&format!(
        "SELECT tag, data->>'log', time > now() - interval '5 minutes' FROM {table} ORDER BY data->>'log'"
    ));
    let want: String = lines.iter().map(|l| format!("app.log|{l}|t\n")).collect();
    assert_eq!(rows, want);
    drop(d);
    pg.psql(&format!("DROP TABLE {table}"));
}
