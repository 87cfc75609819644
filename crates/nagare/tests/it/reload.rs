//! Reload without loss (issue 15): the real binary, an acked forward load on
//! one connection, and reloads by `POST /api/reload`, SIGHUP and `nagare
//! reload`. Every test checks what arrived by content, count and sequence:
//! 0 lost, 0 duplicated, and the load's one connection never refused, reset
//! or left unanswered.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::common::*;

/// Events per frame of the load.
const FRAME: u64 = 50;

/// A steady acked forward load on one connection (like flowbench with
/// acks): frames of `FRAME` events, seqs counting up from 0, each frame's
/// ack awaited before the next. A refused or reset connection or a missing
/// ack fails the test (the thread panics, `stop` reports it). It can pause
/// between two frames and resume the sequence on the same connection.
struct Load {
    stop: Arc<AtomicBool>,
    /// Every seq below is acked.
    acked: Arc<AtomicU64>,
    /// Every seq below was written (the frame in flight ends here).
    sent: Arc<AtomicU64>,
    pause: Arc<Pause>,
    thread: Option<JoinHandle<()>>,
}

/// The load's pause, between two frames: (asked, taken). The test asks and
/// waits until the load thread has taken it (its last frame acked).
#[derive(Default)]
struct Pause {
    state: Mutex<(bool, bool)>,
    changed: Condvar,
}

impl Pause {
    /// In the load thread, between two frames: while a pause is asked (and
    /// the load not stopped), says it is taken and waits.
    fn hold(&self, stop: &AtomicBool) {
        let mut st = self.state.lock().unwrap();
        while st.0 && !stop.load(SeqCst) {
            st.1 = true;
            self.changed.notify_all();
            st = self.changed.wait(st).unwrap();
        }
        st.1 = false;
    }
}

impl Load {
    fn start(port: u16, tag: &'static str) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicU64::new(0));
        let sent = Arc::new(AtomicU64::new(0));
        let pause = Arc::new(Pause::default());
        let (st, ack, snt, pse) = (stop.clone(), acked.clone(), sent.clone(), pause.clone());
        let thread = std::thread::spawn(move || {
            let mut s = Sender::tcp(port);
            let mut seq = 0;
            while !st.load(SeqCst) {
                pse.hold(&st);
                if st.load(SeqCst) {
                    break;
                }
                let id = format!("{tag}-{seq}");
                snt.store(seq + FRAME, SeqCst);
                s.packed(tag, seq..seq + FRAME, Some(id.as_bytes()));
                let got = s.read_msg().unwrap_or_else(|e| {
                    panic!("load on {tag}: no ack for the frame from seq {seq}: {e}")
                });
                assert_eq!(got, ack_bytes(&mp_str(id.as_bytes())), "ack for {id}");
                seq += FRAME;
                ack.store(seq, SeqCst);
            }
            s.finish();
        });
        Load {
            stop,
            acked,
            sent,
            pause,
            thread: Some(thread),
        }
    }

    fn acked(&self) -> u64 {
        self.acked.load(SeqCst)
    }

    fn sent(&self) -> u64 {
        self.sent.load(SeqCst)
    }

    fn wait_acked(&self, n: u64) {
        wait_until(WAIT, &format!("{n} events acked"), || {
            assert!(
                !self.thread.as_ref().unwrap().is_finished(),
                "the load stopped early"
            );
            self.acked() >= n
        });
    }

    /// Stops sending after the frame in flight (its ack awaited); returns
    /// how many events were acked, all there is until `resume`.
    fn pause(&self) -> u64 {
        let mut st = self.pause.state.lock().unwrap();
        st.0 = true;
        let start = Instant::now();
        while !st.1 {
            assert!(
                !self.thread.as_ref().unwrap().is_finished(),
                "the load stopped early"
            );
            assert!(start.elapsed() < WAIT, "the load did not pause");
            st = (self.pause.changed)
                .wait_timeout(st, Duration::from_millis(100))
                .unwrap()
                .0;
        }
        self.acked()
    }

    /// Sends again, the sequence going on from where it paused.
    fn resume(&self) {
        self.pause.state.lock().unwrap().0 = false;
        self.pause.changed.notify_all();
    }

    /// Stops after the frame in flight; returns how many events were acked.
    fn stop(mut self) -> u64 {
        self.stop.store(true, SeqCst);
        // Wakes a paused load (under the lock: it cannot miss the stop).
        drop(self.pause.state.lock().unwrap());
        self.pause.changed.notify_all();
        if let Err(e) = self.thread.take().unwrap().join() {
            std::panic::resume_unwind(e);
        }
        self.acked()
    }
}

fn base(port: u16, mon: u16) -> String {
    format!(
        "[monitor]\nbind = \"127.0.0.1:{mon}\"\n\n[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:{port}\"\n\n"
    )
}

/// A modify filter that marks the events of `app.**` with `reloaded = "yes"`.
const MARK: &str =
    "[[filter]]\ntype = \"modify\"\nmatch = \"app.**\"\n[filter.add]\nreloaded = \"yes\"\n\n";

/// `nagare_<name>` of the input `plugin` (an output may have its name).
fn input_metric(d: &Daemon, name: &str, plugin: &str) -> u64 {
    let want = format!("nagare_{name}{{plugin=\"{plugin}\",kind=\"input\"");
    let metrics = d.metrics();
    metrics
        .lines()
        .find(|l| l.starts_with(&want))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {want} in\n{metrics}"))
}

fn config_hash(mon: u16) -> String {
    let (st, body) = http_get(mon, "/api/config");
    assert_eq!(st, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["hash"].as_str().expect("a hash").to_string()
}

/// Writes `config` and reloads it with POST /api/reload (which answers once
/// the new table routes); returns (acked before, sent after): events below
/// the first were routed by the old config, from the second on by the new.
fn reload_to(d: &Daemon, load: &Load, config: &str) -> (u64, u64) {
    let before = load.acked();
    std::fs::write(&d.config, config).unwrap();
    let (st, body) = http_post(d.monitor.unwrap(), "/api/reload");
    assert_eq!(st, 200, "reload: {body}\nstderr:\n{}", d.stderr());
    (before, load.sent())
}

/// The seqs of `sink`'s events whose record has `reloaded = "yes"`, and of
/// those without.
fn marked(sink: &Sink) -> (Vec<u64>, Vec<u64>) {
    let (yes, no): (Vec<_>, Vec<_>) = sink
        .records()
        .into_iter()
        .partition(|(_, _, r)| field_of(r, "reloaded").and_then(|v| v.as_str()) == Some("yes"));
    let seqs = |v: Vec<(String, _, rmpv::Value)>| v.iter().map(|(_, _, r)| seq_of(r)).collect();
    (seqs(yes), seqs(no))
}

#[test]
fn reloads_change_filters_and_outputs_under_load_and_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (port, mon) = (free_port(), free_port());
    let (s1, s2, s3) = (
        Sink::start(SinkOpts::default()),
        Sink::start(SinkOpts::default()),
        Sink::start(SinkOpts::default()),
    );
    let base = base(port, mon);
    let app_to = |p: u16| forward_output_to("app.**", p);
    // The audit output holds its events for 60 s: only the drain of a
    // removed output can deliver them before that.
    let audit = format!(
        "[[output]]\ntype = \"forward\"\nmatch = \"audit.**\"\n[[output.server]]\naddress = \"127.0.0.1:{}\"\n[output.buffer]\nflush_interval = \"60s\"\n",
        s3.port
    );
    let mut d = Daemon::start(
        dir.path(),
        "nagare",
        &format!("{base}{}", app_to(s1.port)),
        Some(mon),
    );
    d.wait_port(port);
    let mut hashes = vec![config_hash(mon)];
    let load = Load::start(port, "app.x");
    load.wait_acked(500);

    // 1. A filter added: the events after the reload carry its mark.
    let (b1, a1) = reload_to(&d, &load, &format!("{base}{MARK}{}", app_to(s1.port)));
    hashes.push(config_hash(mon));
    load.wait_acked(a1 + 500);

    // 2. The filter removed and the output's server changed (an output
    //    option): from then on unmarked events go to s2; the chunks the
    //    buffer held go there too.
    let (b2, a2) = reload_to(&d, &load, &format!("{base}{}", app_to(s2.port)));
    hashes.push(config_hash(mon));
    load.wait_acked(a2 + 500);

    // 3. An output added (audit.** to s3), with its own load; 4. removed
    //    while it still holds the audit events (flush_interval 60 s).
    let (_, a3) = reload_to(&d, &load, &format!("{base}{}{audit}", app_to(s2.port)));
    hashes.push(config_hash(mon));
    let audit_load = Load::start(port, "audit.x");
    audit_load.wait_acked(300);
    let audit_total = audit_load.stop();
    assert_eq!(s3.count(), 0, "the audit output flushed before its removal");
    let (_, a4) = reload_to(&d, &load, &format!("{base}{}", app_to(s2.port)));
    hashes.push(config_hash(mon));
    s3.wait_count(audit_total as usize);
    load.wait_acked(a3.max(a4) + 500);

    let total = load.stop();
    let stderr = d.stderr();
    // wait_port's probe, then one connection per load, never re-opened.
    assert_eq!(
        input_metric(&d, "connections_total", "forward#0"),
        3,
        "stderr:\n{stderr}"
    );
    assert_eq!(
        stderr
            .matches("POST /api/reload: configuration reloaded")
            .count(),
        4,
        "{stderr}"
    );
    assert!(d.terminate().success(), "{}", d.stderr());
    for s in [&s1, &s2, &s3] {
        s.wait_disconnected();
    }

    // 0 lost, 0 duplicated, across the two servers the output had.
    let mut app = s1.seqs();
    app.extend(s2.seqs());
    assert_exact_seqs(&app, total);
    assert_exact_seqs(&s3.seqs(), audit_total);
    // The new behaviour by content: marked exactly while the filter ran.
    let (mut yes, mut no) = marked(&s1);
    let (y2, n2) = marked(&s2);
    yes.extend(y2);
    no.extend(n2);
    assert!(
        yes.iter().all(|&s| s >= b1 && s < a2),
        "marked outside the filter's time"
    );
    assert!(
        no.iter().all(|&s| s < a1 || s >= b2),
        "unmarked while the filter ran"
    );
    assert!(
        (a1..b2).all(|s| yes.contains(&s)),
        "events after reload 1 not marked"
    );
    // After reload 2 nothing more reached the first server.
    assert!(
        s1.seqs().iter().all(|&s| s < a2),
        "s1 got events after the output moved to s2"
    );
    // Each applied config has its own hash.
    let distinct: std::collections::BTreeSet<&String> = hashes.iter().collect();
    assert_eq!(distinct.len(), 4, "hashes {hashes:?}"); // configs 2 and 4 are equal
    assert_eq!(hashes[2], hashes[4]);
}

#[test]
fn a_bad_config_is_refused_with_file_and_line_and_the_pipeline_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (port, mon) = (free_port(), free_port());
    let sink = Sink::start(SinkOpts::default());
    let good = format!(
        "{}{MARK}{}",
        base(port, mon),
        forward_output_to("app.**", sink.port)
    );
    let mut d = Daemon::start(dir.path(), "nagare", &good, Some(mon));
    d.wait_port(port);
    let hash = config_hash(mon);
    let load = Load::start(port, "app.x");
    load.wait_acked(300);

    // An unknown key among the filter's options.
    let bad = good.replace("[filter.add]", "bogus = 1\n[filter.add]");
    let line = bad.lines().position(|l| l == "bogus = 1").unwrap() + 1;
    std::fs::write(&d.config, &bad).unwrap();
    let at = format!("{}:{line}:", d.config.display());
    d.signal(libc::SIGHUP);
    d.wait_log("SIGHUP: reload failed");
    let stderr = d.stderr();
    assert!(stderr.contains(&at) && stderr.contains("bogus"), "{stderr}");
    let (st, body) = http_post(mon, "/api/reload");
    assert_eq!(st, 422, "{body}");
    assert!(body.contains(&at) && body.contains("bogus"), "{body}");
    assert_eq!(config_hash(mon), hash, "the running config changed");
    let metrics = d.metrics();
    assert!(
        metrics.contains(&format!("nagare_config_info{{hash=\"{hash}\"}} 1"))
            && metrics.contains("nagare_config_reloads_total{result=\"error\"} 2"),
        "{metrics}"
    );
    let after = load.sent();
    load.wait_acked(after + 300);
    let total = load.stop();
    assert!(d.terminate().success(), "{}", d.stderr());
    sink.wait_disconnected();
    assert_exact_seqs(&sink.seqs(), total);
    // The filter ran on every event, before and after the failed reloads.
    let (yes, no) = marked(&sink);
    assert_eq!((yes.len() as u64, no.len()), (total, 0));
}

/// The number of chunk files in a file buffer's directory.
fn chunk_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "chunk"))
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn a_file_buffer_hands_its_chunks_to_the_reloaded_output() {
    let dir = tempfile::tempdir().unwrap();
    let (port, mon) = (free_port(), free_port());
    let buf = dir.path().join("buf");
    // The first server is down: the chunks stay in the file buffer.
    let down = free_port();
    let out = |server: u16, flush: &str| {
        format!(
            "[[output]]\ntype = \"forward\"\nmatch = \"**\"\n[[output.server]]\naddress = \"127.0.0.1:{server}\"\n[output.buffer]\ntype = \"file\"\npath = \"{}\"\nflush_interval = \"{flush}\"\nretry_wait = \"100ms\"\n",
            buf.display()
        )
    };
    let base = base(port, mon);
    let mut d = Daemon::start(
        dir.path(),
        "nagare",
        &format!("{base}{}", out(down, "50ms")),
        Some(mon),
    );
    d.wait_port(port);
    let mut s = Sender::tcp(port);
    s.send_acked("app.x", 0..300, 50, "a");
    wait_until(WAIT, "chunk files in the buffer", || chunk_files(&buf) > 0);

    // The output's server changes: the running file buffer, with its
    // chunks, goes on with the new output.
    let sink = Sink::start(SinkOpts::default());
    std::fs::write(&d.config, format!("{base}{}", out(sink.port, "50ms"))).unwrap();
    let (st, body) = http_post(mon, "/api/reload");
    assert_eq!(st, 200, "{body}");
    assert!(body.contains("\"replaced\":[\"forward#0\"]"), "{body}");
    sink.wait_count(300);
    s.send_acked("app.x", 300..400, 50, "b");

    // Its buffer options change on the same path: the chunks stay, the new
    // options wait for a restart (said in the log).
    std::fs::write(&d.config, format!("{base}{}", out(sink.port, "100ms"))).unwrap();
    let (st, body) = http_post(mon, "/api/reload");
    assert_eq!(st, 200, "{body}");
    assert!(body.contains("apply at the next restart"), "{body}");
    s.send_acked("app.x", 400..500, 50, "c");
    s.finish();
    sink.wait_count(500);
    assert!(d.terminate().success(), "{}", d.stderr());
    sink.wait_disconnected();
    assert_exact_seqs(&sink.seqs(), 500);
    assert!(!d.stderr().contains("quarantine"), "{}", d.stderr());
}

#[test]
fn tail_positions_survive_a_reload_of_the_tail_input() {
    let dir = tempfile::tempdir().unwrap();
    let (port, mon) = (free_port(), free_port());
    let sink = Sink::start(SinkOpts::default());
    let log = dir.path().join("app.log");
    let lines =
        |r: std::ops::Range<u64>| -> String { r.map(|i| format!("{{\"seq\":{i}}}\n")).collect() };
    std::fs::write(&log, lines(0..100)).unwrap();
    let tail = |refresh: &str| {
        format!(
            "[[input]]\ntype = \"tail\"\npath = \"{}\"\ntag = \"t\"\nread_from_head = true\nposition_db = \"{}\"\nrefresh_interval = \"{refresh}\"\n[input.parser]\ntype = \"json\"\n\n{}",
            log.display(),
            dir.path().join("pos.db").display(),
            forward_output_to("t", sink.port)
        )
    };
    let mut d = Daemon::start(
        dir.path(),
        "nagare",
        &format!("{}{}", base(port, mon), tail("1s")),
        Some(mon),
    );
    d.wait_port(port);
    sink.wait_count(100);

    // The tail input changes (an option): the old one stops, the new one
    // goes on from the saved position, not from the head.
    std::fs::write(&d.config, format!("{}{}", base(port, mon), tail("2s"))).unwrap();
    let (st, body) = http_post(mon, "/api/reload");
    assert_eq!(st, 200, "{body}");
    assert!(body.contains("\"replaced\":[\"tail#1\"]"), "{body}");
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    f.write_all(lines(100..200).as_bytes()).unwrap();
    sink.wait_count(200);
    assert!(d.terminate().success(), "{}", d.stderr());
    sink.wait_disconnected();
    assert_exact_seqs(&sink.seqs(), 200);
}

#[test]
fn nagare_reload_signals_the_process_of_the_pid_file() {
    let dir = tempfile::tempdir().unwrap();
    let (port, mon) = (free_port(), free_port());
    let pid_file = dir.path().join("nagare.pid");
    let config = dir.path().join("nagare.toml");
    let sink = Sink::start(SinkOpts::default());
    let first = format!(
        "{}{}",
        base(port, mon),
        forward_output_to("app.**", sink.port)
    );
    std::fs::write(&config, &first).unwrap();
    let mut cmd = std::process::Command::new(BIN);
    cmd.arg("run")
        .arg("-c")
        .arg(&config)
        .arg("--pid-file")
        .arg(&pid_file);
    let mut d = Daemon::spawn(cmd, dir.path(), config.clone(), Some(mon));
    d.wait_port(port);
    d.wait_catches(libc::SIGHUP);
    let hash = config_hash(mon);

    let reload = |pid_file: &Path| {
        std::process::Command::new(BIN)
            .arg("reload")
            .arg("--pid-file")
            .arg(pid_file)
            .output()
            .unwrap()
    };
    std::fs::write(
        &config,
        format!(
            "{}{MARK}{}",
            base(port, mon),
            forward_output_to("app.**", sink.port)
        ),
    )
    .unwrap();
    let out = reload(&pid_file);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    d.wait_log("SIGHUP: configuration reloaded");
    assert_ne!(config_hash(mon), hash);
    let mut s = Sender::tcp(port);
    s.send_acked("app.x", 0..10, 10, "p");
    s.finish();
    sink.wait_count(10);
    let (yes, _) = marked(&sink);
    assert_eq!(yes.len(), 10, "the reloaded filter marks the events");

    // No such pid file, or one no nagare holds: a clear error.
    let missing = dir.path().join("none.pid");
    let out = reload(&missing);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot read the pid file") && err.contains("none.pid"),
        "{err}"
    );
    assert!(d.terminate().success(), "{}", d.stderr());
    std::fs::write(&pid_file, "12345\n").unwrap();
    let out = reload(&pid_file);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("no nagare is running with the pid file"),
        "{err}"
    );
}

/// The daemon's resident memory in KiB (VmRSS).
fn rss_kib(d: &Daemon) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", d.child.id())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

/// What the daemon holds that a leak would grow, counted exactly: its
/// threads, its open file descriptors (what each is, for the message) and
/// the series of its /metrics. Not counted: the connections the test's
/// own requests make to the monitor (closed a moment after the answer) and
/// the output's connections to the sink (which the sink counts itself,
/// heartbeats among them).
#[derive(Debug)]
struct Held {
    threads: usize,
    fds: Vec<String>,
    series: usize,
}

fn held(d: &Daemon, sink: &Sink) -> Held {
    let proc = format!("/proc/{}", d.child.id());
    let threads = std::fs::read_dir(format!("{proc}/task")).unwrap().count();
    let tcp = std::fs::read_to_string(format!("{proc}/net/tcp")).unwrap();
    let not_counted = |inode: &str| {
        connection_ports(&tcp, inode)
            .is_some_and(|(local, remote)| local == d.monitor.unwrap() || remote == sink.port)
    };
    let fds = std::fs::read_dir(format!("{proc}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .map(|to| to.display().to_string())
        .filter(|to| {
            let inode = to
                .strip_prefix("socket:[")
                .and_then(|i| i.strip_suffix(']'));
            !inode.is_some_and(not_counted)
        })
        .collect();
    let series = d
        .metrics()
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .count();
    Held {
        threads,
        fds,
        series,
    }
}

/// The (local, remote) ports of the TCP connection (not a listener) whose
/// socket has `inode`, from /proc/PID/net/tcp.
fn connection_ports(tcp: &str, inode: &str) -> Option<(u16, u16)> {
    const LISTEN: &str = "0A";
    let port = |addr: &str| u16::from_str_radix(addr.rsplit(':').next()?, 16).ok();
    tcp.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.get(9) != Some(&inode) || f[3] == LISTEN {
            return None;
        }
        Some((port(f[1])?, port(f[2])?))
    })
}

impl Held {
    /// (threads, fds, series): sockets and pipes differ by inode, not in
    /// number.
    fn counts(&self) -> (usize, usize, usize) {
        (self.threads, self.fds.len(), self.series)
    }

    fn same_as(&self, other: &Held) -> bool {
        self.counts() == other.counts()
    }
}

/// What the daemon holds, read until two readings in a row agree (what
/// is being opened or closed at that moment is not held).
fn settled(d: &Daemon, sink: &Sink) -> Held {
    let start = Instant::now();
    let mut last = held(d, sink);
    loop {
        let now = held(d, sink);
        if now.same_as(&last) {
            return now;
        }
        assert!(start.elapsed() < WAIT, "nagare's {now:?} did not settle");
        last = now;
    }
}

/// What the daemon holds once its counts are those of `before`, or after
/// WAIT: a moment's difference goes, a leak stays.
fn held_back_to(d: &Daemon, sink: &Sink, before: &Held) -> Held {
    let start = Instant::now();
    loop {
        let now = held(d, sink);
        if now.same_as(before) || start.elapsed() > WAIT {
            return now;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The sum of the outputs' buffer gauges (bytes and chunks) in /metrics.
fn buffered(d: &Daemon) -> u64 {
    d.metrics()
        .lines()
        .filter(|l| l.starts_with("nagare_buffer_bytes{") || l.starts_with("nagare_buffer_chunks{"))
        .map(|l| {
            l.rsplit(' ')
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap()
        })
        .sum()
}

/// Brings the daemon to a quiet point and returns (RSS in KiB, what it
/// holds): the load paused, the sink holding every event acked, the
/// buffers empty, and only the running output's connection open at the
/// sink. A replaced output, drained, keeps its connection (and memory)
/// until the next reload forgets it (`Pipeline::forget_drained`): reloads
/// of the unchanged config make that happen. What the daemon holds then is
/// the running pipeline, not events in flight. The load stays paused.
fn quiet(d: &Daemon, load: &Load, sink: &Sink) -> (u64, Held) {
    let acked = load.pause();
    sink.wait_count(acked as usize);
    wait_until(
        WAIT,
        "one connection (the output's) open at the sink",
        || {
            let (st, body) = http_post(d.monitor.unwrap(), "/api/reload");
            assert_eq!(st, 200, "reload: {body}\nstderr:\n{}", d.stderr());
            sink.open_connections() == 1
        },
    );
    wait_until(WAIT, "empty buffers", || buffered(d) == 0);
    (rss_kib(d), settled(d, sink))
}

/// The reliability bar, short: 20 reloads one after another under
/// a steady acked load, alternating between two configs that differ in an
/// output's option (its memory buffer's flush_interval: a new buffer each
/// time, the old one drained) and a filter added or removed. 0 lost, 0
/// duplicated, the load's connection never refused or reset, every event
/// marked as the config that routed it says, and nothing leaked: at quiet
/// points (the load paused, everything acked delivered) before and after
/// the 20 (the first after two warm-up reloads), the same threads, file
/// descriptors and metric series, and RSS within 10 %.
#[test]
fn twenty_reloads_under_load_lose_nothing_and_leak_nothing() {
    const RELOADS: usize = 20;
    /// Events acked between two reloads (the load's pace, not a sleep).
    const BETWEEN: u64 = 3_000;
    let dir = tempfile::tempdir().unwrap();
    let (port, mon) = (free_port(), free_port());
    let sink = Sink::start(SinkOpts::default());
    let out = |flush: &str| {
        format!(
            "[[output]]\ntype = \"forward\"\nmatch = \"app.**\"\n[[output.server]]\naddress = \"127.0.0.1:{}\"\n[output.buffer]\nflush_interval = \"{flush}\"\n",
            sink.port
        )
    };
    // The input remembers the last dedup_window chunk ids (one per frame):
    // a window full before the first quiet point (at 20 * BETWEEN events)
    // grows no more.
    let input = format!("{}dedup_window = 1000\n\n", base(port, mon));
    let plain = format!("{input}{}", out("50ms"));
    let marking = format!("{input}{MARK}{}", out("100ms"));
    // Large transient buffers (the input's reads, big chunks) go to mmap
    // and back to the system when freed, not into glibc's heap, whose
    // high-water mark (what the load's peaks left) RSS would keep.
    let mmap = [("MALLOC_MMAP_THRESHOLD_", "131072")];
    let mut d = Daemon::start_with_env(dir.path(), "nagare", &plain, Some(mon), &mmap);
    d.wait_port(port);
    let load = Load::start(port, "app.x");
    load.wait_acked(20 * BETWEEN);
    // (acked before, sent after, marks from then on) of each reload.
    let mut reloads = Vec::new();
    // Two reloads before the first quiet point: what a first reload
    // allocates once (and keeps for the next) is not a leak. Both quiet
    // points run the plain config.
    let mut before = None;
    for i in 0..RELOADS + 2 {
        if i == 2 {
            before = Some(quiet(&d, &load, &sink));
            load.resume();
        }
        let marks = i % 2 == 0;
        let (b, a) = reload_to(&d, &load, if marks { &marking } else { &plain });
        reloads.push((b, a, marks));
        load.wait_acked(a + BETWEEN);
    }
    load.wait_acked(load.acked() + 20 * BETWEEN);
    let (rss_before, held_before) = before.unwrap();
    let (rss_after, _) = quiet(&d, &load, &sink);
    let held_after = held_back_to(&d, &sink, &held_before);
    load.resume();
    let total = load.stop();
    eprintln!(
        "at quiet points before and after the reloads: RSS {rss_before} and {rss_after} KiB, \
         (threads, fds, series) {:?} and {:?}; {total} events",
        held_before.counts(),
        held_after.counts()
    );
    assert_eq!(
        input_metric(&d, "connections_total", "forward#0"),
        2,
        "{}",
        d.stderr()
    );
    assert!(d.terminate().success(), "{}", d.stderr());
    sink.wait_disconnected();
    assert_exact_seqs(&sink.seqs(), total);
    let (yes, no) = marked(&sink);
    // The mark of an event routed wholly by one config (not in flight
    // during a reload) is that config's.
    let expect = |seq: u64| -> Option<bool> {
        let mut marks = false;
        for &(b, a, m) in &reloads {
            if seq >= b && seq < a {
                return None;
            }
            if seq >= a {
                marks = m;
            }
        }
        Some(marks)
    };
    for (seqs, marked) in [(&yes, true), (&no, false)] {
        let wrong: Vec<u64> = seqs
            .iter()
            .copied()
            .filter(|&s| expect(s) == Some(!marked))
            .take(10)
            .collect();
        assert!(
            wrong.is_empty(),
            "events marked={marked} under the other config: {wrong:?}"
        );
    }
    assert!(
        held_after.same_as(&held_before),
        "threads, fds or metric series grew over {RELOADS} reloads: \
         before {held_before:?}, after {held_after:?}"
    );
    assert!(
        rss_after * 10 <= rss_before * 11,
        "RSS at quiet points grew from {rss_before} KiB to {rss_after} KiB over {RELOADS} reloads"
    );
}

#[test]
fn a_changed_forward_input_hands_its_listener_on_and_refuses_no_connection() {
    let dir = tempfile::tempdir().unwrap();
    let (port, mon) = (free_port(), free_port());
    let sink = Sink::start(SinkOpts::default());
    let config = |idle: &str| {
        format!(
            "{}idle_timeout = \"{idle}\"\n\n{}",
            base(port, mon),
            forward_output_to("app.**", sink.port)
        )
    };
    let mut d = Daemon::start(dir.path(), "nagare", &config("300s"), Some(mon));
    d.wait_port(port);
    // Connects over and over while the input is replaced.
    let stop = Arc::new(AtomicBool::new(false));
    let (connected, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let prober = {
        let (stop, connected, refused) = (stop.clone(), connected.clone(), refused.clone());
        std::thread::spawn(move || {
            while !stop.load(SeqCst) {
                match std::net::TcpStream::connect(("127.0.0.1", port)) {
                    Ok(_) => connected.fetch_add(1, SeqCst),
                    Err(_) => refused.fetch_add(1, SeqCst),
                };
            }
        })
    };
    wait_until(WAIT, "the prober to connect", || {
        connected.load(SeqCst) > 10
    });
    std::fs::write(&d.config, config("301s")).unwrap();
    let (st, body) = http_post(mon, "/api/reload");
    assert_eq!(st, 200, "{body}");
    assert!(body.contains("\"replaced\":[\"forward#0\"]"), "{body}");
    let after = connected.load(SeqCst);
    wait_until(WAIT, "the prober to connect after the reload", || {
        connected.load(SeqCst) > after + 10
    });
    stop.store(true, SeqCst);
    prober.join().unwrap();
    assert_eq!(
        refused.load(SeqCst),
        0,
        "connections refused during the reload"
    );
    // The new input serves the port.
    let mut s = Sender::tcp(port);
    s.send_acked("app.x", 0..100, 50, "h");
    s.finish();
    sink.wait_count(100);
    assert!(d.terminate().success(), "{}", d.stderr());
    sink.wait_disconnected();
    assert_exact_seqs(&sink.seqs(), 100);
}
