//! What the tests of the line and syslog inputs share (`lines` and `syslog`):
//! a daemon whose every event goes to a JSON-lines file, readers of that
//! file, and the misbehaving clients of their bad-input tests.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{read_file, Daemon, WAIT};

/// A daemon with `inputs` and a JSON file output (`out.log`) of every tag.
pub fn daemon(dir: &Path, inputs: &str) -> Daemon {
    let config = format!(
        r#"{inputs}
[[output]]
type = "file"
match = "**"
path = "{dir}/out.log"
[output.buffer]
flush_interval = "50ms"
"#,
        dir = dir.display()
    );
    Daemon::start(dir, "lines", &config, None)
}

/// (tag, record) of every line of the file output.
pub fn events(dir: &Path) -> Vec<(String, serde_json::Value)> {
    // Whole lines only: the file output may be writing the last one.
    read_file(&dir.join("out.log"))
        .split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}"));
            (v["tag"].as_str().unwrap().to_string(), v["record"].clone())
        })
        .collect()
}

/// Waits for `n` events in the file output; a timeout names them by tag.
pub fn wait_events(dir: &Path, n: usize) -> Vec<(String, serde_json::Value)> {
    let start = std::time::Instant::now();
    while events(dir).len() < n {
        if start.elapsed() > WAIT {
            let mut by_tag = std::collections::BTreeMap::new();
            for (t, _) in events(dir) {
                *by_tag.entry(t).or_insert(0) += 1;
            }
            panic!("timed out waiting for {n} events in out.log; have {by_tag:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    events(dir)
}

/// The records of the events of `tag`, in file order.
pub fn of_tag<'a>(ev: &'a [(String, serde_json::Value)], tag: &str) -> Vec<&'a serde_json::Value> {
    ev.iter()
        .filter(|(t, _)| t == tag)
        .map(|(_, r)| r)
        .collect()
}

/// The `message` fields of `records` (each must have one).
pub fn msgs(records: &[&serde_json::Value]) -> Vec<String> {
    records
        .iter()
        .map(|r| r["message"].as_str().unwrap().to_string())
        .collect()
}

/// Whether `cmd` is a program on the PATH.
pub fn have(cmd: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {cmd}"))
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// True when the peer closed `s` (a read gives 0 or a reset) within WAIT.
pub fn closed_by_peer(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut b = [0u8; 16];
    match s.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

/// A slow client: writes a byte every 50 ms (so it is never idle, and never
/// ends a line or a frame) until the daemon closes the connection; the
/// thread returns whether it did within 10 s. The 50 ms is the client's
/// pace, the behaviour under test, not a wait.
pub fn trickle(mut slow: TcpStream) -> JoinHandle<bool> {
    std::thread::spawn(move || {
        for _ in 0..200 {
            if slow.write_all(b"s").is_err() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    })
}
