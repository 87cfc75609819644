//! Against the real daemon: `nagare run` with a forward input and a stdout
//! output prints one JSON line per event. Fails (does not skip) when the
//! binary is missing: build it with `cargo build --release -p nagare`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nagare_logger::{Config, Logger};

#[test]
fn real_nagare_receives_every_event() {
    let bin = std::env::var("NAGARE_BIN").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/release/nagare").to_string()
    });
    assert!(
        std::path::Path::new(&bin).exists(),
        "nagare binary not found at {bin}: build it (cargo build --release -p nagare) or set NAGARE_BIN"
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = std::env::temp_dir().join(format!("nagare-logger-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("nagare.toml");
    std::fs::write(
        &conf,
        format!(
            "[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:{port}\"\n\n[[output]]\ntype = \"stdout\"\nmatch = \"**\"\n"
        ),
    )
    .unwrap();
    let mut child = Command::new(&bin)
        .args(["run", "-c"])
        .arg(&conf)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start nagare");
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(l) = line else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    // Wait until it listens.
    let t0 = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if t0.elapsed() > Duration::from_secs(15) {
            let _ = child.kill();
            panic!("nagare did not listen on {port}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    const N: u64 = 5000;
    let log = Logger::new(
        Config::new()
            .servers([format!("127.0.0.1:{port}")])
            .unwrap()
            .require_ack(true)
            .flush_interval(Duration::from_millis(20)),
    )
    .unwrap();
    for seq in 0..N {
        log.emit(
            "sdk.rust",
            &serde_json::json!({"seq": seq, "message": "hello from rust"}),
        )
        .unwrap();
    }
    let flushed = log.close(Duration::from_secs(20));
    let mut seen = vec![false; N as usize];
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while got < N && Instant::now() < deadline {
        let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) else {
            continue;
        };
        let v: serde_json::Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(_) => continue,
        };
        if v["tag"] != "sdk.rust" {
            continue;
        }
        assert_eq!(v["record"]["message"], "hello from rust");
        assert!(v["time"].as_str().is_some_and(|t| t.contains('T')));
        let seq = v["record"]["seq"].as_u64().unwrap() as usize;
        assert!(!seen[seq], "seq {seq} printed twice");
        seen[seq] = true;
        got += 1;
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    flushed.expect("close delivered everything");
    assert_eq!(got, N, "nagare printed {got} of {N} events");
}
