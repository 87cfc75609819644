//! GELF: the `gelf` input fed by graypy (a GELF client that is not
//! nagare's: UDP zlib chunked, TCP), the `gelf` output read by a Python
//! receiver that decodes with Python's own gzip/zlib/json, the output into
//! the input (round trip; over mutual TLS too), and a real dockerd's `gelf` and `syslog` log
//! drivers into nagare's `gelf` and `syslog` inputs; the example config
//! of docs/gelf.md.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::common::dockerd::Dockerd;
use crate::common::lines::{daemon, events, of_tag, wait_events};
use crate::common::tls::{tls_table, Ca};
use crate::common::*;

fn tests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gelf")
}

/// The venv with graypy (scripts/test-all.sh makes it), or None: skipped.
fn graypy_python() -> Option<PathBuf> {
    let p = tests_dir().join(".venv/bin/python");
    let ok = p.exists();
    skip_unless(
        ok,
        "no venv with graypy at crates/nagare/tests/gelf/.venv (scripts/test-all.sh makes it)",
    )
    .then_some(p)
}

fn gelf_inputs(udp: u16, tcp: u16, extra: &str) -> String {
    format!(
        r#"
[[input]]
type = "gelf"
bind = "127.0.0.1:{udp}"
tag = "gelf.udp"
{extra}
[[input]]
type = "gelf"
bind = "127.0.0.1:{tcp}"
protocol = "tcp"
tag = "gelf.tcp"
{extra}
"#
    )
}

/// The 60000 characters graypy's script sends last (its `random.Random(7)`
/// is not reproduced here: the test checks length and alphabet).
fn is_big(m: &str) -> bool {
    m.len() == 60_000 && m.bytes().all(|c| c.is_ascii_alphanumeric())
}

#[test]
fn graypy_over_udp_chunked_and_tcp_into_the_gelf_input() {
    let Some(python) = graypy_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (udp, tcp) = (free_port(), free_port());
    let mut nagare = daemon(d, &gelf_inputs(udp, tcp, "source_address_key = \"from\""));
    nagare.wait_port(tcp);
    nagare.wait_listening(&udp.to_string());
    let n = 300;
    let out = std::process::Command::new(&python)
        .arg(tests_dir().join("send_graypy.py"))
        .args([udp.to_string(), tcp.to_string(), n.to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ev = wait_events(d, 2 * (n + 1));
    for proto in ["udp", "tcp"] {
        let got = of_tag(&ev, &format!("gelf.{proto}"));
        assert_eq!(got.len(), n + 1, "{proto}: none lost, none doubled");
        for (i, r) in got.iter().enumerate() {
            assert_eq!(r["seq"], i, "{proto}: in order");
            assert_eq!(r["proto"], proto);
            assert_eq!(r["facility"], format!("app.{proto}"));
            assert_eq!(r["from"], "127.0.0.1");
            assert!(
                r.get("version").is_none() && r.get("timestamp").is_none(),
                "{r}"
            );
            assert!(r["host"].as_str().is_some_and(|h| !h.is_empty()));
            if i < n {
                assert_eq!(r["message"], format!("message {i}"));
                // graypy's syslog levels: WARNING 4, INFO 6.
                assert_eq!(r["level"], if i % 2 == 1 { 4 } else { 6 });
            } else {
                assert!(
                    is_big(r["message"].as_str().unwrap()),
                    "{proto}: the long one whole"
                );
                assert_eq!(r["level"], 3);
            }
        }
    }
    // The bad datagram and the bad TCP message: named with the sender and
    // dropped; everything else came (above).
    let log = nagare.stderr();
    let bad: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("GELF message dropped"))
        .collect();
    assert_eq!(bad.len(), 2, "{log}");
    assert!(bad.iter().all(|l| l.contains("peer=127.0.0.1:")), "{log}");
    assert!(bad.iter().any(|l| l.contains("not gelf at all")), "{log}");
    assert!(bad.iter().any(|l| l.contains("{broken json")), "{log}");
    assert!(!log.contains("panicked"), "{log}");
    assert!(nagare.terminate().success(), "{}", nagare.stderr());
}

/// A daemon taking JSON lines on TCP (`app`), copied to two gelf outputs
/// sending to `udp` (gzip, chunked) and `tcp`.
fn sender(d: &Path, lines: u16, udp: u16, tcp: u16) -> Daemon {
    let config = format!(
        r#"
[[input]]
type = "tcp"
bind = "127.0.0.1:{lines}"
tag = "app"
[input.parser]
type = "json"

[[output]]
type = "copy"
match = "app"
[[output.store]]
type = "gelf"
address = "127.0.0.1:{udp}"
[output.store.buffer]
flush_interval = "20ms"
[[output.store]]
type = "gelf"
address = "127.0.0.1:{tcp}"
protocol = "tcp"
[output.store.buffer]
flush_interval = "20ms"
"#
    );
    let mut s = Daemon::start(d, "sender", &config, None);
    s.wait_port(lines);
    s
}

/// The records sent: short ones with fields of each kind, and one long
/// message that needs chunks even gzipped.
fn records(n: usize) -> Vec<serde_json::Value> {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let noise: String = (0..40_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (b'a' + (x % 26) as u8) as char
        })
        .collect();
    let mut v: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            serde_json::json!({"message": format!("event {i}"), "seq": i, "level": "warning",
                "kubernetes": {"pod_name": "web-1", "labels": {"app": "shop"}}, "ok": true})
        })
        .collect();
    v.push(serde_json::json!({"message": noise, "seq": n, "host": "db-7"}));
    v
}

fn send_lines(port: u16, recs: &[serde_json::Value]) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    for r in recs {
        writeln!(s, "{r}").unwrap();
    }
}

#[test]
fn the_gelf_output_as_a_python_gelf_receiver_reads_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (udp, tcp, lines) = (free_port(), free_port(), free_port());
    let out = d.join("received.jsonl");
    let mut rx = std::process::Command::new("python3")
        .arg(tests_dir().join("receiver.py"))
        .args([udp.to_string(), tcp.to_string()])
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_port(tcp);
    let mut s = sender(d, lines, udp, tcp);
    let n = 200;
    let recs = records(n);
    send_lines(lines, &recs);
    let here = gethostname();
    wait_until(WAIT, "the receiver's lines", || {
        read_file(&out).lines().count() >= 2 * (n + 1)
    });
    assert!(s.terminate().success(), "{}", s.stderr());
    let _ = rx.kill();
    let _ = rx.wait();
    let got: Vec<serde_json::Value> = read_file(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(got.len(), 2 * (n + 1), "none doubled");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    for via in ["udp", "tcp"] {
        let g: Vec<&serde_json::Value> = got
            .iter()
            .filter(|e| e["via"] == via)
            .map(|e| &e["gelf"])
            .collect();
        assert_eq!(g.len(), n + 1, "{via}");
        for (i, m) in g.iter().enumerate() {
            assert_eq!(m["version"], "1.1");
            assert_eq!(m["_seq"], i, "{via}: in order");
            let ts = m["timestamp"].as_f64().unwrap();
            assert!((now - ts).abs() < 120.0, "{m}");
            if i < n {
                assert_eq!(
                    **m,
                    serde_json::json!({"version":"1.1","host": here,"short_message": format!("event {i}"),
                        "level": 4, "timestamp": ts, "_seq": i, "_kubernetes_pod_name": "web-1",
                        "_kubernetes_labels_app": "shop", "_ok": "true"})
                );
            } else {
                assert_eq!(m["short_message"], recs[n]["message"]);
                assert_eq!(m["host"], "db-7");
            }
        }
    }
}

#[test]
fn the_gelf_output_into_the_gelf_input() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (udp, tcp, lines) = (free_port(), free_port(), free_port());
    let mut rx = daemon(d, &gelf_inputs(udp, tcp, ""));
    rx.wait_port(tcp);
    rx.wait_listening(&udp.to_string());
    let mut s = sender(d, lines, udp, tcp);
    let n = 500;
    let recs = records(n);
    send_lines(lines, &recs);
    let ev = wait_events(d, 2 * (n + 1));
    assert!(s.terminate().success(), "{}", s.stderr());
    let here = gethostname();
    for proto in ["udp", "tcp"] {
        let got = of_tag(&ev, &format!("gelf.{proto}"));
        assert_eq!(got.len(), n + 1, "{proto}");
        for (i, r) in got.iter().enumerate() {
            if i < n {
                assert_eq!(
                    **r,
                    serde_json::json!({"host": here, "message": format!("event {i}"), "level": 4,
                        "seq": i, "kubernetes_pod_name": "web-1", "kubernetes_labels_app": "shop",
                        "ok": "true"}),
                    "{proto}"
                );
            } else {
                assert_eq!(
                    r["message"], recs[n]["message"],
                    "{proto}: the long one whole"
                );
                assert_eq!(r["host"], "db-7");
            }
        }
    }
    assert!(
        !rx.stderr().contains("GELF message dropped"),
        "{}",
        rx.stderr()
    );
    assert!(rx.terminate().success(), "{}", rx.stderr());
    assert_eq!(events(d).len(), 2 * (n + 1), "none doubled");
}

#[test]
fn the_gelf_output_into_the_gelf_input_over_mutual_tls() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ca = Ca::new(d, "ca");
    let server = ca.issue("server", &["localhost", "127.0.0.1"]);
    let client = ca.issue("sender", &["sender.example"]);
    let (tcp, lines) = (free_port(), free_port());
    let rx_config = format!(
        "[[input]]\ntype = \"gelf\"\nbind = \"127.0.0.1:{tcp}\"\nprotocol = \"tcp\"\n\
         tag = \"gelf.tls\"\n{}",
        tls_table("input", Some(&server), Some(&ca.path), "")
    );
    let mut rx = daemon(d, &rx_config);
    rx.wait_port(tcp);
    let tx_config = format!(
        "[[input]]\ntype = \"tcp\"\nbind = \"127.0.0.1:{lines}\"\ntag = \"app\"\n\
         [input.parser]\ntype = \"json\"\n\n\
         [[output]]\ntype = \"gelf\"\nmatch = \"app\"\naddress = \"127.0.0.1:{tcp}\"\n\
         protocol = \"tcp\"\n[output.buffer]\nflush_interval = \"20ms\"\n{}",
        tls_table(
            "output",
            Some(&client),
            Some(&ca.path),
            "server_name = \"localhost\"\n"
        )
    );
    let mut tx = Daemon::start(d, "sender", &tx_config, None);
    tx.wait_port(lines);
    let n = 100;
    let recs = records(n);
    send_lines(lines, &recs);
    let ev = wait_events(d, n + 1);
    let got = of_tag(&ev, "gelf.tls");
    assert_eq!(got.len(), n + 1);
    for (i, r) in got.iter().enumerate() {
        assert_eq!(r["seq"], i, "in order");
        assert_eq!(r["message"], recs[i]["message"]);
    }
    assert!(tx.terminate().success(), "{}", tx.stderr());
    assert!(rx.terminate().success(), "{}", rx.stderr());
    assert_eq!(events(d).len(), n + 1, "none doubled");
}

fn gethostname() -> String {
    let out = std::process::Command::new("hostname").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

// ------------------------------------------------------------ a real dockerd

/// What each container writes: a line of 40000 bytes (Docker cuts it into
/// pieces of 16 KiB, each its own message for these drivers), 300 short
/// lines as fast as they come, and a line on stderr.
const SCRIPT: &str = "head -c 40000 /dev/zero | tr '\\0' a; echo; seq 1 300; echo err1 >&2";

/// (stdout texts, stderr texts) as the drivers send them.
fn script_messages() -> (Vec<String>, Vec<String>) {
    let mut out = vec![
        "a".repeat(16384),
        "a".repeat(16384),
        "a".repeat(40_000 - 2 * 16384),
    ];
    out.extend((1..=300).map(|i| i.to_string()));
    (out, vec!["err1".to_string()])
}

#[test]
fn docker_engine_gelf_and_syslog_drivers_into_nagare() {
    let Some(docker) = Dockerd::start_or_skip() else {
        return;
    };
    let image = docker.busybox_image();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (gu, gt, su, st) = (free_port(), free_port(), free_port(), free_port());
    // examples/graylog-gelf.toml, as docs/gelf.md shows it (its gelf
    // inputs), and syslog inputs, on free ports; all to a file.
    let example =
        read_file(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/graylog-gelf.toml"));
    let inputs = example
        .split("[[output]]")
        .next()
        .unwrap()
        .replace(
            "0.0.0.0:12201\"            # UDP",
            &format!("127.0.0.1:{gu}\" # UDP"),
        )
        .replace("0.0.0.0:12201", &format!("127.0.0.1:{gt}"));
    assert!(
        inputs.contains(&format!(":{gu}\"")) && inputs.contains(&format!(":{gt}\"")),
        "{inputs}"
    );
    let config = format!(
        r#"{inputs}
[[input]]
type = "syslog"
bind = "127.0.0.1:{su}"
tag = "syslog.udp"
[[input]]
type = "syslog"
bind = "127.0.0.1:{st}"
protocol = "tcp"
tag = "syslog.tcp"
"#
    );
    let mut nagare = daemon(d, &config);
    nagare.wait_port(gt);
    nagare.wait_port(st);
    nagare.wait_listening(&gu.to_string());
    nagare.wait_listening(&su.to_string());
    // (name, driver, options).
    let runs: Vec<(&str, &str, Vec<String>)> = vec![
        (
            "gu1",
            "gelf",
            vec![format!("gelf-address=udp://127.0.0.1:{gu}")],
        ),
        (
            "gu2",
            "gelf",
            vec![
                format!("gelf-address=udp://127.0.0.1:{gu}"),
                "gelf-compression-type=none".into(),
            ],
        ),
        (
            "gt1",
            "gelf",
            vec![format!("gelf-address=tcp://127.0.0.1:{gt}")],
        ),
        (
            "su1",
            "syslog",
            vec![
                format!("syslog-address=udp://127.0.0.1:{su}"),
                "syslog-format=rfc5424".into(),
            ],
        ),
        (
            "st1",
            "syslog",
            vec![
                format!("syslog-address=tcp://127.0.0.1:{st}"),
                "syslog-format=rfc3164".into(),
            ],
        ),
        (
            "su2",
            "syslog",
            vec![
                format!("syslog-address=udp://127.0.0.1:{su}"),
                "syslog-format=rfc5424micro".into(),
            ],
        ),
        // Docker's default format: RFC 3164 without a HOSTNAME.
        (
            "st2",
            "syslog",
            vec![format!("syslog-address=tcp://127.0.0.1:{st}")],
        ),
    ];
    let mut ids = Vec::new();
    // One after the other: each UDP sender alone on the socket.
    for (name, driver, opts) in &runs {
        let mut args: Vec<String> = ["run", "-d", "--network", "none", "--name", name]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.extend(["--log-driver".into(), driver.to_string()]);
        for o in opts {
            args.extend(["--log-opt".into(), o.clone()]);
        }
        args.extend(["--log-opt".into(), format!("tag={name}")]);
        args.extend([image.into(), "sh".into(), "-c".into(), SCRIPT.into()]);
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let id = docker.docker(&a).unwrap();
        assert_eq!(docker.docker(&["wait", &id]).unwrap(), "0");
        ids.push(id);
    }
    let (want_out, want_err) = script_messages();
    let per = want_out.len() + want_err.len();
    let total = runs.len() * per;
    docker.wait_events(
        total,
        || events(d).into_iter().map(|(t, _)| t).collect(),
        || nagare.stderr(),
    );
    assert!(nagare.terminate().success(), "{}", nagare.stderr());
    let ev = events(d);
    assert_eq!(ev.len(), total, "none lost or doubled");
    // GELF: moby's message, its _container_* fields, level 6 stdout, 3 stderr.
    for ((name, _, _), id) in runs.iter().zip(&ids).take(3) {
        let tag = if name.starts_with("gu") {
            "gelf.udp"
        } else {
            "gelf.tcp"
        };
        let got: Vec<&serde_json::Value> = ev
            .iter()
            .filter(|(t, r)| t == tag && r["container_name"] == *name)
            .map(|(_, r)| r)
            .collect();
        let texts = |level: u64| -> Vec<String> {
            got.iter()
                .filter(|r| r["level"] == level)
                .map(|r| r["message"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(texts(6), want_out, "{name} stdout");
        assert_eq!(texts(3), want_err, "{name} stderr");
        for r in &got {
            assert_eq!(r["container_id"], id.as_str(), "{r}");
            assert_eq!(r["tag"], *name);
            assert_eq!(r["image_name"], image);
            assert!(r["host"].as_str().is_some_and(|h| !h.is_empty()));
        }
    }
    // syslog: <tag>.daemon.info for stdout, .err for stderr; the tag as ident.
    for (name, tag) in [
        ("su1", "syslog.udp"),
        ("st1", "syslog.tcp"),
        ("su2", "syslog.udp"),
        ("st2", "syslog.tcp"),
    ] {
        let texts = |sev: &str| -> Vec<String> {
            of_tag(&ev, &format!("{tag}.daemon.{sev}"))
                .iter()
                .filter(|r| r["ident"] == name)
                .map(|r| r["message"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(texts("info"), want_out, "{name} stdout");
        assert_eq!(texts("err"), want_err, "{name} stderr");
    }
    for (name, _, _) in &runs {
        docker.docker(&["rm", name]).unwrap();
    }
}
