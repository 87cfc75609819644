//! gen end to end: every target, rate accuracy, workers.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nagare_bench::bench::sink::Sink;
use nagare_bench::gen::{run_plan, Endpoint, GenFile, GenPlan, LineGen, TargetSpec};

fn plan(text: &str, count: Option<u64>, duration: Option<Duration>) -> GenPlan {
    let f: GenFile = toml::from_str(text).unwrap();
    GenPlan::from_file(f, count, duration, false).unwrap()
}

const FIELDS: &str = r#"
[[field]]
name = "id"
type = "integer"
countup = true
[[field]]
name = "level"
type = "string"
any = ["INFO", "WARN"]
"#;

#[test]
fn file_target_appends_every_line_once_across_workers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.log");
    std::fs::write(&path, "existing\n").unwrap();
    let p = plan(
        &format!(
            "output = {:?}\nworkers = 3\n{FIELDS}",
            path.to_str().unwrap()
        ),
        Some(100_003),
        None,
    );
    let st = run_plan(&p, None).unwrap();
    assert_eq!(st.lines, 100_003);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("existing"));
    let mut ids: Vec<u64> = lines
        .map(|l| {
            let id = l.split('\t').next().unwrap();
            id.strip_prefix("id:").unwrap().parse().unwrap()
        })
        .collect();
    assert_eq!(st.bytes as usize, text.len() - "existing\n".len());
    ids.sort_unstable();
    assert_eq!(ids, (0..100_003).collect::<Vec<u64>>());
}

#[test]
fn file_target_with_fsync_and_duration() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.log");
    let p = plan(
        &format!(
            "output = {:?}\nfsync = true\nmessage = \"hi\"\nrate = 1000",
            path.to_str().unwrap()
        ),
        None,
        Some(Duration::from_millis(500)),
    );
    let st = run_plan(&p, None).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count() as u64, st.lines);
    assert!(text.lines().all(|l| l == "hi"));
    // The first step (10 lines) goes at once; the rate caps the rest at
    // 1000/s × 0.5 s. A slow fsync may only lower the count.
    assert!((10..=500).contains(&st.lines), "{}", st.lines);
}

#[test]
fn input_replays_lines_in_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.txt");
    std::fs::write(&input, "one\ntwo\r\nthree\n").unwrap();
    let path = dir.path().join("o.log");
    let p = plan(
        &format!(
            "output = {:?}\ninput = {:?}",
            path.to_str().unwrap(),
            input.to_str().unwrap()
        ),
        Some(7),
        None,
    );
    run_plan(&p, None).unwrap();
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "one\ntwo\nthree\none\ntwo\nthree\none\n"
    );
}

/// A paced run writes each step through (nothing waits in a buffer for the
/// end of the run) and never runs ahead of its rate. How evenly it paces is
/// tested against a controlled clock in src/gen/rate.rs.
#[test]
fn paced_lines_reach_the_file_during_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.log");
    let p = plan(
        &format!(
            "output = {:?}\nrate = 2000\nworkers = 2\n{FIELDS}",
            path.to_str().unwrap()
        ),
        None,
        Some(Duration::from_secs(600)),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let run = {
        let stop = stop.clone();
        std::thread::spawn(move || run_plan(&p, Some(stop)).unwrap())
    };
    wait_for(|| {
        std::fs::read_to_string(&path)
            .map(|t| t.lines().count() >= 100)
            .unwrap_or(false)
    });
    assert!(!run.is_finished(), "the run ended before it was stopped");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let st = run.join().unwrap();
    let elapsed = started.elapsed().as_secs_f64();
    let text = std::fs::read_to_string(&path).unwrap();
    let mut ids: Vec<u64> = text
        .lines()
        .map(|l| {
            l.split('\t').next().unwrap()["id:".len()..]
                .parse()
                .unwrap()
        })
        .collect();
    assert_eq!(ids.len() as u64, st.lines);
    ids.sort_unstable();
    assert_eq!(ids, (0..st.lines).collect::<Vec<u64>>());
    // At most the rate over the time it ran, plus each worker's first step
    // (1000/s per worker: steps of 10 lines).
    let cap = 2000.0 * elapsed + 2.0 * 10.0;
    assert!(
        st.lines as f64 <= cap,
        "{} lines in {elapsed:.3} s",
        st.lines
    );
}

#[test]
fn stdout_target_via_the_binary() {
    let out = Command::new(env!("CARGO_BIN_EXE_nagare-bench-dev"))
        .args([
            "gen",
            "--stdout",
            "--count",
            "1234",
            "--message",
            "hello stdout",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1234);
    assert!(text.lines().all(|l| l == "hello stdout"));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("1234 lines"), "summary: {err}");
}

#[test]
fn flags_override_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("g.toml");
    let file_out = dir.path().join("from-file.log");
    let flag_out = dir.path().join("from-flag.log");
    std::fs::write(
        &cfg,
        format!(
            "output = {:?}\ncount = 5\nrate = 1\n{FIELDS}",
            file_out.to_str().unwrap()
        ),
    )
    .unwrap();
    let st = Command::new(env!("CARGO_BIN_EXE_nagare-bench-dev"))
        .args([
            "gen",
            "-c",
            cfg.to_str().unwrap(),
            "--output",
            flag_out.to_str().unwrap(),
        ])
        .args(["--count", "50", "--rate", "0"])
        .status()
        .unwrap();
    assert!(st.success());
    assert!(!file_out.exists());
    assert_eq!(
        std::fs::read_to_string(&flag_out).unwrap().lines().count(),
        50
    );
}

#[test]
fn forward_tcp_target_is_verified_by_the_sink() {
    let sink = Sink::start("127.0.0.1:0", None).unwrap();
    let run = sink.begin(Some("gen.load"));
    let p = plan(
        &format!(
            "forward = \"{}\"\nbatch = 333\nworkers = 2\n{FIELDS}",
            sink.addr()
        ),
        Some(10_000),
        None,
    );
    let st = run_plan(&p, None).unwrap();
    assert_eq!(st.lines, 10_000);
    wait_for(|| run.unique() >= 10_000);
    let v = run.verify(10_000);
    assert!(v.clean(), "{v:?}");
    assert_eq!(v.received, 10_000);
    assert_eq!(
        run.frames.load(std::sync::atomic::Ordering::Relaxed),
        10_000u64.div_ceil(333)
    );
}

#[test]
fn forward_unix_target_with_ack() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("fwd.sock");
    let sink = Sink::start("127.0.0.1:0", Some(sock.clone())).unwrap();
    let run = sink.begin(Some("t.ack"));
    let p = plan(
        &format!(
            "forward = \"unix:{}\"\nack = true\ntag = \"t.ack\"\nbatch = 100\nmessage = \"m\"",
            sock.display()
        ),
        Some(5_000),
        None,
    );
    assert!(matches!(
        p.target,
        TargetSpec::Forward {
            addr: Endpoint::Unix(_),
            ack: true,
            ..
        }
    ));
    run_plan(&p, None).unwrap();
    // With acks, everything is in before run_plan returns.
    let v = run.verify(5_000);
    assert!(v.clean() && v.received == 5_000, "{v:?}");
    assert_eq!(run.acks.load(std::sync::atomic::Ordering::Relaxed), 50);
    assert_eq!(
        run.payload.load(std::sync::atomic::Ordering::Relaxed),
        5_000
    );
}

#[test]
fn forward_to_nothing_is_an_error() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let p = plan(&format!("forward = \"127.0.0.1:{port}\""), Some(10), None);
    let e = format!("{:#}", run_plan(&p, None).unwrap_err());
    assert!(e.contains("connecting"), "{e}");
}

#[test]
fn raw_tcp_lines() {
    let ln = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = ln.local_addr().unwrap();
    let h = std::thread::spawn(move || {
        let (s, _) = ln.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        BufReader::new(s)
            .lines()
            .map(|l| l.unwrap())
            .collect::<Vec<_>>()
    });
    let p = plan(&format!("tcp = \"{addr}\"\n{FIELDS}"), Some(20_000), None);
    run_plan(&p, None).unwrap();
    let lines = h.join().unwrap();
    assert_eq!(lines.len(), 20_000);
    assert!(lines[19_999].starts_with("id:19999\tlevel:"));
}

/// A tiny HTTP/1.1 server: keeps connections alive, answers 200, records bodies.
fn http_server() -> (
    String,
    Arc<Mutex<Vec<String>>>,
    std::thread::JoinHandle<usize>,
) {
    let ln = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = ln.local_addr().unwrap().to_string();
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let b2 = bodies.clone();
    let h = std::thread::spawn(move || {
        let (mut s, _) = ln.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut buf = Vec::new();
        let mut tmp = [0u8; 65536];
        let mut requests = 0;
        loop {
            let head_end = loop {
                if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break Some(p + 4);
                }
                let n = s.read(&mut tmp).unwrap_or(0);
                if n == 0 {
                    break None;
                }
                buf.extend_from_slice(&tmp[..n]);
            };
            let Some(head_end) = head_end else {
                return requests;
            };
            let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
            assert!(head.starts_with("POST /ingest HTTP/1.1\r\n"), "{head}");
            let len: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap();
            while buf.len() < head_end + len {
                let n = s.read(&mut tmp).unwrap();
                assert!(n > 0);
                buf.extend_from_slice(&tmp[..n]);
            }
            b2.lock()
                .unwrap()
                .push(String::from_utf8(buf[head_end..head_end + len].to_vec()).unwrap());
            buf.drain(..head_end + len);
            requests += 1;
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .unwrap();
        }
    });
    (addr, bodies, h)
}

#[test]
fn http_posts_json_lines() {
    let (addr, bodies, h) = http_server();
    let p = plan(
        &format!("http = \"http://{addr}/ingest\"\nbatch = 250\nformat = \"json\"\n{FIELDS}"),
        Some(1_000),
        None,
    );
    run_plan(&p, None).unwrap();
    assert_eq!(h.join().unwrap(), 4);
    let bodies = bodies.lock().unwrap();
    let mut ids = Vec::new();
    for b in bodies.iter() {
        assert_eq!(b.lines().count(), 250);
        for l in b.lines() {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            ids.push(v["id"].as_u64().unwrap());
            assert!(v["level"].is_string());
        }
    }
    ids.sort_unstable();
    assert_eq!(ids, (0..1000).collect::<Vec<_>>());

    // Non-JSON layouts are wrapped as {"message": line}.
    let (addr, bodies, h) = http_server();
    let p = plan(
        &format!("http = \"http://{addr}/ingest\"\nmessage = \"say \\\"hi\\\"\""),
        Some(3),
        None,
    );
    run_plan(&p, None).unwrap();
    h.join().unwrap();
    let b = bodies.lock().unwrap();
    let v: serde_json::Value = serde_json::from_str(b[0].lines().next().unwrap()).unwrap();
    assert_eq!(v["message"], "say \"hi\"");
}

#[test]
fn http_error_status_fails_the_run() {
    let ln = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = ln.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut s, _) = ln.accept().unwrap();
        let mut tmp = [0u8; 4096];
        let _ = s.read(&mut tmp);
        let _ = s.write_all(b"HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n");
    });
    let p = plan(
        &format!("http = \"http://{addr}/\"\nmessage = \"x\""),
        Some(3),
        None,
    );
    let e = format!("{:#}", run_plan(&p, None).unwrap_err());
    assert!(e.contains("503"), "{e}");
}

#[test]
fn fixed_message_generator_is_the_message() {
    let mut g = LineGen::message(b"abc");
    let mut o = Vec::new();
    g.write_line(5, 0, &mut o);
    assert_eq!(o, b"abc");
}

fn wait_for(mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(20), "timed out");
        std::thread::sleep(Duration::from_millis(10));
    }
}
