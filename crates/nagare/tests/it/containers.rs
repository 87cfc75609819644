//! Container logs: files in the exact formats containerd, CRI-O (conmon)
//! and Docker's json-file driver write, tailed with the `cri` and `docker`
//! parsers (pieces of long lines joined per stream, across reads, rotation
//! and restarts; multiline after the join; `max_line_size`), the
//! Kubernetes and Docker fields from the file names; a real dockerd with
//! the `fluentd` and `json-file` log drivers; the example configs of
//! docs/containers.md.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::common::dockerd::Dockerd;
use crate::common::*;

/// containerd's cut (`max_container_log_line_size`, 16 KiB by default).
const CUT: usize = 16 * 1024;
const ID: &str = "4f3c2b1a0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a";

/// How a runtime writes the time of a piece.
#[derive(Clone, Copy)]
enum Clock {
    /// containerd: Go's RFC3339Nano in UTC (trailing zeros of the fraction cut).
    Containerd,
    /// CRI-O's conmon: `%Y-%m-%dT%H:%M:%S.%09ld` and the offset as `±hh:mm`.
    Conmon,
}

/// The time of piece `n`: 2026-11-28T10:00:00 plus n·0.01 s.
fn stamp(clock: Clock, n: u64) -> String {
    let (s, ns) = (n / 100, (n % 100) * 10_000_000);
    let base = format!("2026-11-28T10:{:02}:{:02}", s / 60, s % 60);
    match clock {
        Clock::Containerd if ns == 0 => format!("{base}Z"),
        Clock::Containerd => {
            let frac = format!("{ns:09}");
            format!("{base}.{}Z", frac.trim_end_matches('0'))
        }
        Clock::Conmon => format!("{base}.{ns:09}+00:00"),
    }
}

fn epoch_of(n: u64) -> String {
    // 2026-11-28T10:00:00Z, as the stdout output prints times.
    let (s, ns) = (n / 100, (n % 100) * 10_000_000);
    format!("2026-11-28T10:{:02}:{:02}.{ns:09}Z", s / 60, s % 60)
}

/// Writes one line of `stream` as the runtime does: pieces of CUT bytes
/// tagged `P`, the last `F`; each piece a write of its own, its time
/// from the counter `t`. Returns the lines written.
fn cri_line(clock: Clock, t: &mut u64, stream: &str, text: &str) -> Vec<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        let end = (at + CUT).min(bytes.len());
        let last = end == bytes.len();
        out.push(format!(
            "{} {stream} {} {}\n",
            stamp(clock, *t),
            if last { "F" } else { "P" },
            std::str::from_utf8(&bytes[at..end]).unwrap()
        ));
        *t += 1;
        at = end;
        if last {
            return out;
        }
    }
}

fn append(path: &Path, text: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

fn tail_config(glob: &Path, dir: &Path, extra: &str, parser: &str) -> String {
    format!(
        r#"
[[input]]
type = "tail"
path = "{glob}"
tag = "kubernetes.*"
position_db = "{dir}/tail.pos"
read_from_head = true
refresh_interval = "100ms"
poll_interval = "20ms"
{extra}
[input.parser]
{parser}

[[output]]
type = "stdout"
match = "**"
format = "json"
[output.buffer]
flush_interval = "20ms"
"#,
        glob = glob.display(),
        dir = dir.display()
    )
}

fn events(lines: &[String]) -> Vec<serde_json::Value> {
    lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// (stream, message) of each event, in order.
fn messages(ev: &[serde_json::Value]) -> Vec<(String, String)> {
    ev.iter()
        .map(|e| {
            (
                e["record"]["stream"].as_str().unwrap_or("?").to_string(),
                e["record"]["message"].as_str().unwrap_or("?").to_string(),
            )
        })
        .collect()
}

/// (stream, message) with long messages shortened to their length and
/// ends, for assertions that print readably.
fn brief(v: &[(String, String)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(s, m)| {
            let m = if m.len() > 80 {
                format!("{}…{} ({} bytes)", &m[..30], &m[m.len() - 30..], m.len())
            } else {
                m.clone()
            };
            (s.clone(), m)
        })
        .collect()
}

fn long(c: char, n: usize) -> String {
    std::iter::repeat_n(c, n).collect()
}

/// The kubelet's layout: the runtime writes /var/log/pods/<ns>_<pod>_<uid>/<container>/0.log,
/// /var/log/containers/<pod>_<namespace>_<container>-<id>.log links to it.
fn kubelet_layout(d: &Path) -> (PathBuf, PathBuf) {
    let pod_dir = d.join("pods/shop_web-7d4b9c-x2x_0c1d/nginx");
    std::fs::create_dir_all(&pod_dir).unwrap();
    std::fs::create_dir_all(d.join("containers")).unwrap();
    let log = pod_dir.join("0.log");
    std::fs::write(&log, "").unwrap();
    let link = d.join(format!("containers/web-7d4b9c-x2x_shop_nginx-{ID}.log"));
    std::os::unix::fs::symlink(&log, &link).unwrap();
    (log, link)
}

#[test]
fn cri_pieces_join_per_stream_across_reads_and_the_kubelets_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (log, link) = kubelet_layout(d);
    let config = tail_config(
        &d.join("containers/*.log"),
        d,
        "container_fields = \"kubernetes\"",
        "type = \"cri\"",
    );
    let mut daemon = Daemon::start(d, "nagare", &config, None);
    let clock = Clock::Containerd;
    let mut t = 0;
    let mut want: Vec<(String, String)> = Vec::new();
    // A line of 2.4 pieces on stdout, its pieces read one at a time, with
    // stderr lines between them.
    let big = format!("{}{}{}", long('a', CUT), long('b', CUT), long('c', 7000));
    let pieces = cri_line(clock, &mut t, "stdout", &big);
    assert_eq!(pieces.len(), 3);
    append(&log, &pieces[0]);
    daemon.wait_read_to_end(&log);
    let err1 = cri_line(clock, &mut t, "stderr", "err 1");
    append(&log, &err1[0]);
    want.push(("stderr".into(), "err 1".into()));
    daemon.wait_read_to_end(&log);
    append(&log, &pieces[1]);
    daemon.wait_read_to_end(&log);
    append(&log, &pieces[2]);
    want.push(("stdout".into(), big.clone()));
    // Short lines of both streams, an empty one, one of exactly CUT bytes.
    let mut text = String::new();
    for i in 0..200u64 {
        let stream = if i % 3 == 0 { "stderr" } else { "stdout" };
        let msg = match i {
            50 => String::new(),
            51 => long('x', CUT),
            _ => format!("line {i} {}", long('y', (i % 40) as usize)),
        };
        for l in cri_line(clock, &mut t, stream, &msg) {
            text.push_str(&l);
        }
        want.push((stream.into(), msg));
    }
    append(&log, &text);
    daemon.wait_read_to_end(&log);
    // A line whose first piece is written before the kubelet rotates and
    // its last after: the runtime's reopen comes between its pieces.
    let straddle = format!("{}{}", long('s', CUT), "rest after the rotation");
    let sp = cri_line(clock, &mut t, "stdout", &straddle);
    append(&log, &sp[0]);
    daemon.wait_read_to_end(&log);
    // The kubelet rotates: rename, the runtime reopens a new 0.log; the
    // rotated file is compressed later (a .gz sibling).
    let rotated = log.with_file_name("0.log.20261128-100500");
    std::fs::rename(&log, &rotated).unwrap();
    std::fs::write(&log, "").unwrap();
    let after = format!("{}{}", long('d', CUT), long('e', 100));
    let mut text = sp[1].clone();
    want.push(("stdout".into(), straddle));
    let p = cri_line(clock, &mut t, "stdout", &after);
    text.push_str(&p[0]);
    let e = cri_line(clock, &mut t, "stderr", "after rotation");
    text.push_str(&e[0]);
    text.push_str(&p[1]);
    want.push(("stderr".into(), "after rotation".into()));
    want.push(("stdout".into(), after));
    append(&log, &text);
    let status = std::process::Command::new("gzip")
        .arg(&rotated)
        .status()
        .unwrap();
    assert!(status.success());
    assert!(rotated.with_file_name("0.log.20261128-100500.gz").exists());

    daemon.wait_stdout_lines(want.len());
    daemon.wait_read_to_end(&log);
    assert!(daemon.terminate().success(), "{}", daemon.stderr());
    let lines: Vec<String> = daemon.stdout().lines().map(String::from).collect();
    let ev = events(&lines);
    assert_eq!(ev.len(), want.len(), "no event lost or doubled");
    let got = messages(&ev);
    assert_eq!(brief(&got), brief(&want));
    assert!(got == want, "the texts differ");
    let tag = format!(
        "kubernetes.{}",
        link.display()
            .to_string()
            .trim_start_matches('/')
            .replace('/', ".")
    );
    for e in &ev {
        assert_eq!(e["tag"], tag.as_str());
        let k = &e["record"]["kubernetes"];
        assert_eq!(k["pod_name"], "web-7d4b9c-x2x", "{e}");
        assert_eq!(k["namespace_name"], "shop");
        assert_eq!(k["container_name"], "nginx");
        assert_eq!(k["container_id"], ID);
        assert!(e["record"].get("partial").is_none() && e["record"].get("truncated").is_none());
        let keys: Vec<&String> = e["record"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["message", "stream", "kubernetes"]);
    }
    // Each event has the time of its first piece (the big line's three
    // pieces are times 0-2, "err 1" is 3).
    assert_eq!(ev[0]["time"], epoch_of(3).as_str());
    assert_eq!(ev[1]["time"], epoch_of(0).as_str());
    assert_eq!(ev[2]["time"], epoch_of(4).as_str());
}

#[test]
fn crio_lines_with_java_stack_traces_joined_after_the_pieces() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("containers")).unwrap();
    let log = d.join(format!("containers/api-0_prod_java-{ID}.log"));
    let clock = Clock::Conmon;
    let mut t = 0;
    let mut text = String::new();
    let long_msg = format!(
        "2026-11-28 10:00:00 ERROR request failed: {}",
        long('q', 20_000)
    );
    let trace = [
        long_msg.as_str(),
        "java.lang.IllegalStateException: boom",
        "\tat com.example.Api.handle(Api.java:42)",
        "\tat com.example.Server.run(Server.java:7)",
    ];
    for (i, l) in trace.iter().enumerate() {
        for p in cri_line(clock, &mut t, "stderr", l) {
            text.push_str(&p);
        }
        if i == 1 {
            // stdout between the lines of the trace
            for p in cri_line(clock, &mut t, "stdout", "2026-11-28 10:00:01 INFO ok") {
                text.push_str(&p);
            }
        }
    }
    for p in cri_line(clock, &mut t, "stderr", "2026-11-28 10:00:02 INFO next") {
        text.push_str(&p);
    }
    std::fs::write(&log, &text).unwrap();
    let config = tail_config(
        &d.join("containers/*.log"),
        d,
        "container_fields = \"kubernetes\"",
        "type = \"cri\"\nformat_firstline = '^\\d{4}-\\d{2}-\\d{2} '\npartial_flush_interval = \"300ms\"",
    );
    let mut daemon = Daemon::start(d, "nagare", &config, None);
    daemon.wait_stdout_lines(3);
    assert!(daemon.terminate().success(), "{}", daemon.stderr());
    let lines: Vec<String> = daemon.stdout().lines().map(String::from).collect();
    let ev = events(&lines);
    let got = messages(&ev);
    let want = [
        ("stderr".to_string(), trace.join("\n")),
        (
            "stdout".to_string(),
            "2026-11-28 10:00:01 INFO ok".to_string(),
        ),
        (
            "stderr".to_string(),
            "2026-11-28 10:00:02 INFO next".to_string(),
        ),
    ];
    assert_eq!(brief(&got), brief(&want));
    assert!(got == want, "the texts differ");
    assert_eq!(ev[0]["time"], epoch_of(0).as_str());
    assert_eq!(ev[0]["record"]["kubernetes"]["namespace_name"], "prod");
}

#[test]
fn a_line_over_max_line_size_is_cut_and_marked_and_a_restart_mid_line_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("containers")).unwrap();
    let log = d.join(format!("containers/p_ns_c-{ID}.log"));
    std::fs::write(&log, "").unwrap();
    let config = tail_config(
        &d.join("containers/*.log"),
        d,
        "max_line_size = \"20KiB\"",
        "type = \"cri\"",
    );
    let clock = Clock::Containerd;
    let mut t = 0;
    let mut daemon = Daemon::start(d, "nagare", &config, None);
    let big = long('z', 40_000);
    let mut text = String::new();
    for p in cri_line(clock, &mut t, "stdout", &big) {
        text.push_str(&p);
    }
    append(&log, &text);
    // A line whose last piece comes after a restart.
    let split = format!("{}{}", long('s', CUT), "end");
    let pieces = cri_line(clock, &mut t, "stdout", &split);
    append(&log, &pieces[0]);
    daemon.wait_stdout_lines(1);
    daemon.wait_read_to_end(&log);
    assert!(daemon.terminate().success(), "{}", daemon.stderr());
    let first = daemon.stdout();
    append(&log, &pieces[1]);
    let mut daemon = Daemon::start(d, "nagare", &config, None);
    daemon.wait_stdout_lines(1);
    daemon.wait_read_to_end(&log);
    assert!(daemon.terminate().success(), "{}", daemon.stderr());
    let lines: Vec<String> = first
        .lines()
        .chain(daemon.stdout().lines())
        .map(String::from)
        .collect();
    let ev = events(&lines);
    assert_eq!(ev.len(), 2, "{:?}", brief(&messages(&ev)));
    let r = &ev[0]["record"];
    assert!(r["message"].as_str().unwrap() == long('z', 20 * 1024));
    assert_eq!(r["truncated"], 40_000 - 20 * 1024);
    assert!(ev[1]["record"]["message"].as_str().unwrap() == split);
    assert!(ev[1]["record"].get("truncated").is_none());
}

/// A json-file line as moby's jsonfilelog writes it: the newline only on
/// a whole line or the last piece.
fn json_file_line(stream: &str, log: &str, n: u64) -> String {
    format!(
        "{}\n",
        serde_json::json!({"log": log, "stream": stream, "time": stamp(Clock::Containerd, n)})
    )
}

#[test]
fn docker_json_file_pieces_join_and_the_container_id_comes_from_the_name() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cdir = d.join(format!("containers/{ID}"));
    std::fs::create_dir_all(&cdir).unwrap();
    let log = cdir.join(format!("{ID}-json.log"));
    std::fs::write(&log, "").unwrap();
    let config = tail_config(
        &d.join("containers/*/*-json.log"),
        d,
        "container_fields = \"docker\"",
        "type = \"docker\"",
    )
    .replace("kubernetes.*", "docker.*");
    let mut daemon = Daemon::start(d, "nagare", &config, None);
    let big = format!("{}{}", long('j', CUT), "tail \"quoted\" \\ done");
    append(&log, &json_file_line("stdout", &big[..CUT], 0));
    daemon.wait_read_to_end(&log);
    append(&log, &json_file_line("stderr", "oops\n", 1));
    append(
        &log,
        &json_file_line("stdout", &format!("{}\n", &big[CUT..]), 2),
    );
    let mut want = vec![
        ("stderr".to_string(), "oops".to_string()),
        ("stdout".to_string(), big.clone()),
    ];
    for i in 0..100u64 {
        let s = if i % 2 == 0 { "stdout" } else { "stderr" };
        append(&log, &json_file_line(s, &format!("n{i} é\t\n"), 3 + i));
        want.push((s.into(), format!("n{i} é\t")));
    }
    daemon.wait_read_to_end(&log);
    // Docker's rotation (max-size): <id>-json.log becomes <id>-json.log.1.
    std::fs::rename(&log, cdir.join(format!("{ID}-json.log.1"))).unwrap();
    append(&log, &json_file_line("stdout", "rotated\n", 200));
    want.push(("stdout".into(), "rotated".into()));
    daemon.wait_stdout_lines(want.len());
    daemon.wait_read_to_end(&log);
    assert!(daemon.terminate().success(), "{}", daemon.stderr());
    let lines: Vec<String> = daemon.stdout().lines().map(String::from).collect();
    let ev = events(&lines);
    assert_eq!(brief(&messages(&ev)), brief(&want));
    assert!(messages(&ev) == want, "the texts differ");
    for e in &ev {
        assert_eq!(e["record"]["container_id"], ID);
        let keys: Vec<&String> = e["record"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["message", "stream", "container_id"]);
    }
    assert_eq!(ev[1]["time"], epoch_of(0).as_str());
}

/// An example config of examples/ (and docs/containers.md, which must show
/// it as it is).
fn example(name: &str) -> String {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let text = read_file(&Path::new(root).join("examples").join(name));
    let doc = read_file(&Path::new(root).join("docs/containers.md"));
    assert!(
        doc.contains(&text),
        "docs/containers.md does not show examples/{name} as it is"
    );
    text
}

/// A second nagare: a forward input on a free port that prints the events
/// it receives as JSON lines. Returns it and its port.
fn receiver(d: &Path) -> (Daemon, u16) {
    let port = free_port();
    let dir = d.join("receiver");
    std::fs::create_dir_all(&dir).unwrap();
    let config = format!(
        "{}\n[[output]]\ntype = \"stdout\"\nmatch = \"**\"\nformat = \"json\"\n[output.buffer]\nflush_interval = \"20ms\"\n",
        forward_input(port)
    );
    let mut daemon = Daemon::start(&dir, "receiver", &config, None);
    daemon.wait_port(port);
    (daemon, port)
}

#[test]
fn the_kubernetes_daemonset_example_ships_a_nodes_container_logs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (log, _link) = kubelet_layout(d);
    // The payments pod's Java container, CRI-O style.
    let pay_dir = d.join("pods/payments_api-0_9f8e/java");
    std::fs::create_dir_all(&pay_dir).unwrap();
    let pay_log = pay_dir.join("0.log");
    std::os::unix::fs::symlink(
        &pay_log,
        d.join(format!("containers/api-0_payments_java-{ID}.log")),
    )
    .unwrap();
    let (mut t, mut text, mut pay) = (0, String::new(), String::new());
    let big = long('k', 50_000);
    for l in cri_line(Clock::Containerd, &mut t, "stdout", &big) {
        text.push_str(&l);
    }
    for l in cri_line(Clock::Containerd, &mut t, "stderr", "warn") {
        text.push_str(&l);
    }
    let trace = "2026-11-28 10:00:00 ERROR charge failed\njava.lang.RuntimeException: declined\n\tat com.example.Pay.charge(Pay.java:9)";
    for line in trace.lines().chain(["2026-11-28 10:00:01 INFO done"]) {
        for l in cri_line(Clock::Conmon, &mut t, "stderr", line) {
            pay.push_str(&l);
        }
    }
    std::fs::write(&log, &text).unwrap();
    std::fs::write(&pay_log, &pay).unwrap();
    let (mut receiver, sink) = receiver(d);
    let config = example("kubernetes-daemonset.toml")
        .replace(
            "/var/log/containers",
            &d.join("containers").display().to_string(),
        )
        .replace("/var/lib/nagare", &d.display().to_string())
        .replace("aggregator.logging.svc:24224", &format!("127.0.0.1:{sink}"));
    let mut daemon = Daemon::start(d, "nagare", &config, None);
    receiver.wait_stdout_lines(4);
    assert!(daemon.terminate().success(), "{}", daemon.stderr());
    assert!(receiver.terminate().success(), "{}", receiver.stderr());
    let lines: Vec<String> = receiver.stdout().lines().map(String::from).collect();
    let ev = events(&lines);
    let mut got: Vec<(String, String, String)> = ev
        .iter()
        .map(|e| {
            let r = &e["record"];
            (
                r["kubernetes"]["namespace_name"]
                    .as_str()
                    .unwrap()
                    .to_string(),
                r["stream"].as_str().unwrap().to_string(),
                r["message"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    got.sort();
    let want = [
        ("payments", "stderr", "2026-11-28 10:00:00 ERROR charge failed\njava.lang.RuntimeException: declined\n\tat com.example.Pay.charge(Pay.java:9)"),
        ("payments", "stderr", "2026-11-28 10:00:01 INFO done"),
        ("shop", "stderr", "warn"),
        ("shop", "stdout", big.as_str()),
    ]
    .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()));
    let short = |v: &[(String, String, String)]| -> Vec<String> {
        v.iter()
            .map(|(a, b, c)| format!("{a} {b} {}", brief(&[(String::new(), c.clone())])[0].1))
            .collect()
    };
    assert_eq!(short(&got), short(&want));
    assert!(got == want);
    for e in &ev {
        assert_eq!(e["record"]["kubernetes"]["container_id"], ID);
    }
}

// ------------------------------------------------------------ a real dockerd

/// What each container writes: a line of 40000 bytes (Docker cuts it into
/// 16 KiB pieces), 2000 short lines written as fast as they come, and on
/// stderr a line and one of 20000 bytes.
const SCRIPT: &str = "head -c 40000 /dev/zero | tr '\\0' a; echo; echo err1 >&2; seq 1 2000; \
                      head -c 20000 /dev/zero | tr '\\0' b >&2; echo >&2";

fn script_events() -> (Vec<String>, Vec<String>) {
    let mut out = vec![long('a', 40_000)];
    out.extend((1..=2000).map(|i| i.to_string()));
    (out, vec!["err1".to_string(), long('b', 20_000)])
}

/// The texts of `stream`'s events, in order.
fn texts(ev: &[&serde_json::Value], key: &str, stream_key: &str, stream: &str) -> Vec<String> {
    ev.iter()
        .filter(|e| e["record"][stream_key] == stream)
        .map(|e| e["record"][key].as_str().unwrap_or("?").to_string())
        .collect()
}

fn brief_texts(v: &[String]) -> Vec<String> {
    let pairs: Vec<(String, String)> = v.iter().map(|t| (String::new(), t.clone())).collect();
    brief(&pairs).into_iter().map(|(_, t)| t).collect()
}

#[test]
fn docker_engine_fluentd_and_json_file_drivers_into_nagare() {
    let Some(docker) = Dockerd::start_or_skip() else {
        return;
    };
    let image = docker.busybox_image();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // examples/docker-host.toml, as docs/containers.md shows it, on this
    // dockerd's folders and free ports; its forward output goes to a
    // second nagare that prints what it receives.
    let port = free_port();
    let (receiver, sink) = receiver(d);
    let config = example("docker-host.toml")
        .replace("127.0.0.1:24224", &format!("127.0.0.1:{port}"))
        .replace("aggregator.example:24224", &format!("127.0.0.1:{sink}"))
        .replace("/var/lib/docker", &docker.root().display().to_string())
        .replace("/var/lib/nagare", &d.display().to_string());
    let mut daemon = Daemon::start(d, "nagare", &config, None);
    daemon.wait_port(port);
    let address = format!("fluentd-address=tcp://127.0.0.1:{port}");
    let fluentd = docker
        .docker(&[
            "run",
            "-d",
            "--network",
            "none",
            "--name",
            "fl1",
            "--log-driver",
            "fluentd",
            "--log-opt",
            &address,
            "--log-opt",
            "tag=docker.{{.Name}}",
            "--log-opt",
            "fluentd-async=true",
            "--log-opt",
            "fluentd-sub-second-precision=true",
            image,
            "sh",
            "-c",
            SCRIPT,
        ])
        .unwrap();
    // json-file, rotated once by Docker at 150 KB (of about 210: rename to -json.log.1, a
    // new file): the container writes once nagare follows its log file (a
    // file rotated away before a tailer opened it is one no tailer reads).
    let gate = d.join("gate");
    std::fs::create_dir_all(&gate).unwrap();
    let volume = format!("{}:/gate", gate.display());
    let gated = format!("while [ ! -e /gate/go ]; do sleep 0.05; done; {SCRIPT}");
    let json = docker
        .docker(&[
            "run",
            "-d",
            "--network",
            "none",
            "--name",
            "js1",
            "-v",
            &volume,
            "--log-driver",
            "json-file",
            "--log-opt",
            "max-size=150k",
            "--log-opt",
            "max-file=2",
            image,
            "sh",
            "-c",
            &gated,
        ])
        .unwrap();
    daemon.wait_log(&format!("{json}-json.log offset=0"));
    std::fs::write(gate.join("go"), "").unwrap();
    for id in [&fluentd, &json] {
        assert_eq!(docker.docker(&["wait", id]).unwrap(), "0");
    }
    let (want_out, want_err) = script_events();
    let total = 2 * (want_out.len() + want_err.len());
    docker.wait_events(
        total,
        || {
            // While nagare writes, the last line may be in part.
            events(&receiver.stdout_lines())
                .iter()
                .map(|e| e["tag"].as_str().unwrap_or("?").to_string())
                .collect()
        },
        || daemon.stderr(),
    );
    assert!(daemon.terminate().success(), "{}", daemon.stderr());
    let mut receiver = receiver;
    assert!(receiver.terminate().success(), "{}", receiver.stderr());
    let lines: Vec<String> = receiver.stdout().lines().map(String::from).collect();
    let ev = events(&lines);
    assert_eq!(ev.len(), total, "no event lost or doubled");

    // The fluentd driver: moby's record, the pieces joined.
    let fl: Vec<&serde_json::Value> = ev.iter().filter(|e| e["tag"] == "docker.fl1").collect();
    for (stream, want) in [("stdout", &want_out), ("stderr", &want_err)] {
        let got = texts(&fl, "log", "source", stream);
        assert_eq!(brief_texts(&got), brief_texts(want), "fluentd {stream}");
        assert!(&got == want);
    }
    for e in &fl {
        let r = e["record"].as_object().unwrap();
        // A Go map: its keys in any order.
        let mut keys: Vec<&String> = r.keys().collect();
        keys.sort();
        assert_eq!(
            keys,
            ["container_id", "container_name", "log", "source"],
            "{e}"
        );
        assert_eq!(r["container_id"], fluentd.as_str());
        assert_eq!(r["container_name"], "/fl1");
    }
    // fluentd-sub-second-precision: EventTime with nanoseconds.
    assert!(fl
        .iter()
        .any(|e| !e["time"].as_str().unwrap().ends_with(".000000000Z")));

    // json-file through tail: the same lines, the id from the file name.
    let tag_prefix = format!(
        "docker.json.{}",
        docker
            .root()
            .display()
            .to_string()
            .trim_start_matches('/')
            .replace('/', ".")
    );
    let js: Vec<&serde_json::Value> = ev
        .iter()
        .filter(|e| e["tag"].as_str().unwrap().starts_with(&tag_prefix))
        .collect();
    assert_eq!(js.len(), want_out.len() + want_err.len());
    for (stream, want) in [("stdout", &want_out), ("stderr", &want_err)] {
        let got = texts(&js, "log", "stream", stream);
        assert_eq!(brief_texts(&got), brief_texts(want), "json-file {stream}");
        assert!(&got == want);
    }
    for e in &js {
        assert_eq!(e["record"]["container_id"], json.as_str());
    }
    let rotated = docker
        .root()
        .join(format!("containers/{json}/{json}-json.log.1"));
    assert!(rotated.exists(), "Docker rotated the json-file log");
    for name in ["fl1", "js1"] {
        docker.docker(&["rm", name]).unwrap();
    }
}
