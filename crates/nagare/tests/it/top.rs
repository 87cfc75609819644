//! `nagare top` in a real terminal: tmux at 80×24, keys sent with
//! send-keys, the screen read with capture-pane.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::common::*;

/// A private tmux server (its own socket) with one 80×24 session running a
/// shell; killed on drop.
struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    fn start(dir: &Path) -> Tmux {
        let t = Tmux {
            socket: dir.join("tmux.sock"),
        };
        t.run(&[
            "new-session",
            "-d",
            "-x",
            "80",
            "-y",
            "24",
            "-s",
            "top",
            "sh",
        ]);
        t
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run tmux");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "top"];
        args.extend(keys);
        self.run(&args);
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "top"])
    }

    /// Waits until the screen satisfies `cond`; returns it.
    fn wait_screen(&self, what: &str, cond: impl Fn(&str) -> bool) -> String {
        let mut last = String::new();
        let start = std::time::Instant::now();
        while start.elapsed() < WAIT {
            last = self.screen();
            if cond(&last) {
                return last;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("screen never showed {what}; last screen:\n{last}");
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-S")
            .arg(&self.socket)
            .arg("kill-server")
            .output();
    }
}

/// The cells after PLUGIN and KIND (IN/s, OUT/s, …) of the table row of
/// `plugin` ("name kind", e.g. "forward#0 in").
fn row<'a>(screen: &'a str, plugin: &str) -> Option<Vec<&'a str>> {
    screen
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.len() > 2 && cells[..2].join(" ") == plugin)
        .map(|cells| cells[2..].to_vec())
}

#[test]
fn top_shows_live_rates_sorts_and_quits_restoring_the_terminal() {
    let tmux_there = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if skip_unless(tmux_there, "no tmux (apt-get install tmux)") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mon = free_port();
    let tmux = Tmux::start(dir.path());
    // top starts before the daemon: it says so and keeps retrying.
    tmux.keys(&[
        &format!("{BIN} top --monitor 127.0.0.1:{mon} --interval 300ms; echo top exited $?"),
        "Enter",
    ]);
    tmux.wait_screen("that the monitor cannot be reached", |s| {
        s.contains(&format!("cannot reach the monitor at 127.0.0.1:{mon}"))
            && s.contains("retrying")
    });

    let sink = Sink::start(SinkOpts::default());
    let port = free_port();
    let config = format!(
        "[monitor]\nbind = \"127.0.0.1:{mon}\"\n\n[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:{port}\"\n\n{}",
        forward_output_to("**", sink.port)
    );
    let mut d = Daemon::start(dir.path(), "nagare", &config, Some(mon));
    d.wait_port(port);
    // Inputs and outputs are numbered apart: both are forward#0.
    let (input, output) = ("forward#0 in", "forward#0 out");
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let load = {
        let (stop, sent) = (stop.clone(), sent.clone());
        std::thread::spawn(move || {
            let mut s = Sender::tcp(port);
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                s.send_acked("load", i..i + 100, 100, "c");
                i += 100;
                sent.store(i, Ordering::Relaxed);
            }
        })
    };
    // Under load: both rows show non-zero rates while /api/plugins'
    // counters move.
    let screen = tmux.wait_screen("non-zero rates for the input and output", |s| {
        let moving =
            |p: &str, col: usize| row(s, p).is_some_and(|r| r.len() > col && r[col] != "0");
        moving(input, 0) && moving(output, 0) && moving(output, 1)
    });
    let events_in = |p: &str| -> u64 {
        let v: serde_json::Value = serde_json::from_str(&http_get(mon, "/api/plugins").1).unwrap();
        let list = v["plugins"].as_array().unwrap();
        let input = list.iter().find(|x| x["kind"] == "input").unwrap();
        assert_eq!(input["name"], p);
        input["events_in"].as_u64().unwrap()
    };
    let before = events_in("forward#0");
    wait_until(WAIT, "the input's counter to move", || {
        events_in("forward#0") > before
    });
    // 80 columns: every column but TYPE, in the documented order.
    let header = screen
        .lines()
        .find(|l| l.starts_with("PLUGIN"))
        .expect("table header");
    let titles: Vec<&str> = header.split_whitespace().collect();
    assert_eq!(
        titles,
        [
            "PLUGIN", "KIND", "IN/s", "OUT/s", "BYTES/s", "BUFFER", "CHUNKS", "RETRIES", "ERRORS",
            "DROPPED"
        ]
    );
    assert!(
        screen.contains("q quit") && screen.contains("s sort: config order"),
        "{screen}"
    );

    // Sorting: by name, then IN/s; r reverses.
    tmux.keys(&["s"]);
    tmux.wait_screen("the sort by name", |s| s.contains("sort: PLUGIN"));
    tmux.keys(&["s"]);
    tmux.wait_screen("the sort by IN/s", |s| {
        s.contains("sort: IN/s") && !s.contains("reversed")
    });
    tmux.keys(&["r"]);
    tmux.wait_screen("the reversed sort", |s| s.contains("sort: IN/s, reversed"));

    // Load stopped: once every event arrived, the rates fall to 0.
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();
    let n = sent.load(Ordering::Relaxed);
    sink.wait_count(n as usize);
    assert_eq!(events_in("forward#0"), n);
    tmux.wait_screen("rates back to 0", |s| {
        [input, output]
            .iter()
            .all(|p| row(s, p).is_some_and(|r| r[0] == "0" && r[1] == "0"))
    });

    // q quits with 0, and the shell's screen is back (no alternate screen,
    // cursor shown).
    tmux.keys(&["q"]);
    let screen = tmux.wait_screen("top's exit", |s| s.contains("top exited 0"));
    assert!(!screen.contains("PLUGIN"), "{screen}");
    let state = tmux.run(&[
        "display-message",
        "-p",
        "-t",
        "top",
        "#{alternate_on} #{cursor_flag}",
    ]);
    assert_eq!(state.trim(), "0 1", "alternate screen off, cursor visible");
    assert!(d.terminate().success());
}
