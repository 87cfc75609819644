//! Shared helpers for the end-to-end tests: free loopback ports, a running
//! `nagare` process (killed on drop), a forward sender and a forward sink
//! built on the nagare-forward codec, and small HTTP/metrics readers.
//!
//! Everything is bounded in time: every wait takes a timeout and panics with
//! what it was waiting for.

pub mod ch_server;
pub mod dockerd;
pub mod kafka_broker;
pub mod lines;
pub mod netns;
pub mod opensearch;
pub mod pg_server;
pub mod redis_server;
pub mod scripted_http;
pub mod sql;
pub mod tls;
pub mod victoria_logs;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use nagare_forward::handshake::{self, Helo, Ping, Pong};
use nagare_forward::msgpack::{skip_value, write_map_len, write_str, write_uint};
use nagare_forward::{
    encode_forward, encode_message, encode_packed_forward, scan_frame, write_entry, Compression,
    EventTime, Limits, ScanError,
};

/// The default bound of every wait in these tests.
pub const WAIT: Duration = Duration::from_secs(20);

pub const BIN: &str = env!("CARGO_BIN_EXE_nagare");

/// Runs `nagare check -c <config>` and returns its output.
pub fn run_check(config: impl AsRef<std::ffi::OsStr>) -> std::process::Output {
    Command::new(BIN)
        .arg("check")
        .arg("-c")
        .arg(config)
        .output()
        .unwrap()
}

/// A forward input on 127.0.0.1:0, the start of the configs the
/// `assert_check_errors` cases add a section to (line 5 is their first).
pub const CHECK_BASE: &str = "[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:0\"\n\n";

/// For each (section, at, what): `nagare check` on `base` + section, each
/// in its own file in `dir`, exits 2 and its stderr holds `<file><at>`
/// (e.g. ":7: key `command`:") and `what`.
pub fn assert_check_errors<S, A, W>(dir: &Path, base: &str, cases: &[(S, A, W)])
where
    S: AsRef<str>,
    A: AsRef<str>,
    W: AsRef<str>,
{
    for (i, (section, at, what)) in cases.iter().enumerate() {
        let (section, at, what) = (section.as_ref(), at.as_ref(), what.as_ref());
        let p = dir.join(format!("bad{i}.toml"));
        std::fs::write(&p, format!("{base}{section}")).unwrap();
        let out = run_check(&p);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{section}: {err}");
        assert!(
            err.contains(&format!("{}{at}", p.display())) && err.contains(what),
            "{section}: expected `{at}` and {what:?} in:\n{err}"
        );
    }
}

/// A forward input on 127.0.0.1:`port`.
pub fn forward_input(port: u16) -> String {
    format!("[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:{port}\"\n")
}

/// A forward output of the tags `pattern` selects to 127.0.0.1:`port`,
/// flushing every 50 ms.
pub fn forward_output_to(pattern: &str, port: u16) -> String {
    format!(
        "[[output]]\ntype = \"forward\"\nmatch = \"{pattern}\"\n[[output.server]]\naddress = \"127.0.0.1:{port}\"\n[output.buffer]\nflush_interval = \"50ms\"\n"
    )
}

/// Starts nagare with a monitor, a forward input, then `sections` (its
/// filters and outputs); returns it once the input and the monitor listen,
/// and the input's port.
pub fn start_forward_daemon(dir: &Path, sections: &str) -> (Daemon, u16) {
    let (port, mon) = (free_port(), free_port());
    let config = format!(
        "[monitor]\nbind = \"127.0.0.1:{mon}\"\n\n{}{sections}\n",
        forward_input(port)
    );
    let mut d = Daemon::start(dir, "nagare", &config, Some(mon));
    d.wait_port(port);
    d.wait_port(mon);
    (d, port)
}

/// `start_forward_daemon` with `filters`, then a forward output of every
/// tag to the sink on `sink`: the relay the filter tests send through.
pub fn filter_daemon(dir: &Path, filters: &str, sink: u16) -> (Daemon, u16) {
    start_forward_daemon(dir, &format!("{filters}{}", forward_output_to("**", sink)))
}

/// The text of `tests/samples/parsers/<name>`.
pub fn sample(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/samples/parsers/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

// ---------------------------------------------------------------- skipping

/// When this environment variable is set, a test that cannot run here fails
/// instead of skipping. scripts/test-all.sh sets it in CI and wherever the
/// machine can run everything (root with /dev/fuse).
pub const REQUIRE_ENV: &str = "NAGARE_TEST_REQUIRE";

/// Skips the calling test unless `cond` holds; returns true when it skipped,
/// so tests read `if skip_unless(cond, "why") { return; }`.
///
/// A skip prints `SKIPPED: it::<area>::<test>: <reason>` on stderr,
/// around the test harness's capture (libtest captures only `print!` and
/// `eprint!`), so it shows in every run and scripts/test-all.sh counts it.
/// With NAGARE_TEST_REQUIRE set it panics instead: the test must run here.
pub fn skip_unless(cond: bool, reason: &str) -> bool {
    if cond {
        return false;
    }
    let test = test_name();
    if std::env::var_os(REQUIRE_ENV).is_some() {
        panic!("{test} cannot run here ({reason}), and {REQUIRE_ENV} says every test must run");
    }
    report_skipped(&test, reason);
    true
}

/// Reports a part of the calling test that this machine cannot run (the
/// rest of the test runs and asserts as usual), so scripts/test-all.sh
/// lists it among the skips instead of counting it as passed. Unlike
/// `skip_unless` it does not fail under NAGARE_TEST_REQUIRE: use it only
/// where nothing the test set-up could install would make the part run
/// (a kernel module the kernel lacks).
pub fn skipped_part(part: &str, reason: &str) {
    report_skipped(&format!("{} ({part})", test_name()), reason);
}

fn test_name() -> String {
    format!(
        "{}::{}",
        env!("CARGO_CRATE_NAME"),
        std::thread::current().name().unwrap_or("?")
    )
}

/// On stderr around libtest's capture, in one write so lines of tests
/// running in parallel do not interleave.
fn report_skipped(test: &str, reason: &str) {
    let _ = std::io::stderr().write_all(format!("\nSKIPPED: {test}: {reason}\n").as_bytes());
}

/// Runs `body` on a thread of its own inside a new network namespace whose
/// loopback is up; processes it starts (the daemon) are in it too. So a
/// test may bind fixed ports (the embedded default's 24224 and 24220)
/// without meeting a Fluentd or Fluent Bit running on the machine. Needs
/// CAP_SYS_ADMIN (root) and `ip` (iproute2); Err says why it cannot run.
pub fn in_private_network<T: Send>(body: impl FnOnce() -> T + Send) -> Result<T, String> {
    std::thread::scope(|s| {
        let t = s.spawn(|| {
            // SAFETY: unshare(2) with CLONE_NEWNET moves only the calling
            // thread (this one, made for the purpose) to a new namespace.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                let e = std::io::Error::last_os_error();
                return Err(format!("unshare(CLONE_NEWNET): {e}"));
            }
            match Command::new("ip")
                .args(["link", "set", "lo", "up"])
                .status()
            {
                Ok(st) if st.success() => Ok(body()),
                Ok(st) => Err(format!("`ip link set lo up` failed ({st})")),
                Err(e) => Err(format!("cannot run `ip` (iproute2): {e}")),
            }
        });
        t.join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// A loopback port that was free a moment ago (bind port 0, read it, drop).
pub fn free_port() -> u16 {
    // The kernel may hand the same port out again once its listener is
    // closed, so two calls in a row (a test's data and monitor ports, or two
    // tests in parallel) could get one port twice: never return one twice.
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    loop {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = l.local_addr().unwrap().port();
        let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// Polls `cond` every 20 ms until it holds; panics after `timeout` naming `what`.
pub fn wait_until(timeout: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    loop {
        if cond() {
            return;
        }
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `progress` (a producer's count, short of its goal `n` while it
/// is blocked) stops moving for 500 ms, then checks it stays put for another
/// second. `who` names the producer in panics. A stall has no event to wait
/// for: it is the absence of progress over time, so the sleeps here are the
/// observation windows, not waits for something to happen.
pub fn wait_stalled(progress: &AtomicU64, n: u64, who: &str) {
    let start = Instant::now();
    let stalled = loop {
        let a = progress.load(SeqCst);
        std::thread::sleep(Duration::from_millis(500));
        let b = progress.load(SeqCst);
        assert!(
            b < n,
            "the {who} was not slowed: got through all {n} while the sink was paused"
        );
        if a == b {
            break b;
        }
        assert!(start.elapsed() < WAIT, "the {who} never stalled");
    };
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(
        progress.load(SeqCst),
        stalled,
        "the {who} made progress while blocked"
    );
}

/// Waits until a TCP connect to 127.0.0.1:port succeeds.
pub fn wait_port(port: u16) {
    wait_until(WAIT, &format!("127.0.0.1:{port} to accept"), || {
        TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
}

/// Asserts that `seqs` holds every number of 0..n exactly once.
#[track_caller]
pub fn assert_exact_seqs(seqs: &[u64], n: u64) {
    let mut counts: BTreeMap<u64, usize> = BTreeMap::new();
    for &s in seqs {
        *counts.entry(s).or_default() += 1;
    }
    let dups: Vec<u64> = counts
        .iter()
        .filter(|(_, &c)| c > 1)
        .map(|(&s, _)| s)
        .collect();
    let missing: Vec<u64> = (0..n).filter(|s| !counts.contains_key(s)).collect();
    let extra: Vec<u64> = counts.keys().copied().filter(|&s| s >= n).collect();
    assert!(
        dups.is_empty() && missing.is_empty() && extra.is_empty() && seqs.len() as u64 == n,
        "expected seq 0..{n} once each; got {} events; duplicated {:?}; missing {:?} (first 20); out of range {:?}",
        seqs.len(),
        &dups[..dups.len().min(20)],
        &missing[..missing.len().min(20)],
        &extra[..extra.len().min(20)],
    );
}

/// Counts of each seq: (missing of 0..n, duplicated events).
pub fn lost_and_duplicated(seqs: &[u64], n: u64) -> (Vec<u64>, usize) {
    let mut counts: BTreeMap<u64, usize> = BTreeMap::new();
    for &s in seqs {
        *counts.entry(s).or_default() += 1;
    }
    let missing = (0..n).filter(|s| !counts.contains_key(s)).collect();
    let dups = counts.values().map(|c| c - 1).sum();
    (missing, dups)
}

// ---------------------------------------------------------------- records

/// The msgpack map `{"seq": seq, "message": message}`.
pub fn record(seq: u64, message: &str) -> Vec<u8> {
    let mut r = Vec::new();
    write_map_len(&mut r, 2);
    write_str(&mut r, b"seq");
    write_uint(&mut r, seq);
    write_str(&mut r, b"message");
    write_str(&mut r, message.as_bytes());
    r
}

pub fn message_for(seq: u64) -> String {
    format!("event number {seq}")
}

/// Canonical PackedForward entries for the given seqs, time = now.
pub fn entries(seqs: impl IntoIterator<Item = u64>) -> (Vec<u8>, u32) {
    let t = EventTime::now();
    let mut e = Vec::new();
    let mut n = 0;
    for s in seqs {
        write_entry(&mut e, t, &record(s, &message_for(s)));
        n += 1;
    }
    (e, n)
}

/// One PackedForward frame of the records of `seqs` with `pad` as their
/// message (each at the time it is written).
pub fn padded_frame(tag: &str, seqs: std::ops::Range<u64>, pad: &str) -> Vec<u8> {
    let mut e = Vec::new();
    let n = seqs.end - seqs.start;
    for s in seqs {
        write_entry(&mut e, EventTime::now(), &record(s, pad));
    }
    let mut f = Vec::new();
    encode_packed_forward(&mut f, tag, &e, n as u32, None, Compression::None).unwrap();
    f
}

/// Decodes concatenated `[time, record]` entries into records.
pub fn decode_entries(mut buf: &[u8]) -> Vec<rmpv::Value> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let v = rmpv::decode::read_value(&mut buf).expect("entry is msgpack");
        let arr = v.as_array().expect("entry is an array").clone();
        assert_eq!(arr.len(), 2, "entry [time, record]");
        out.push(arr[1].clone());
    }
    out
}

/// Decodes canonical `[time, record]` entries into (time, record).
pub fn decode_timed_entries(mut buf: &[u8]) -> Vec<(EventTime, rmpv::Value)> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let v = rmpv::decode::read_value(&mut buf).expect("entry is msgpack");
        let arr = v.as_array().expect("entry is an array").clone();
        assert_eq!(arr.len(), 2, "entry [time, record]");
        let t = match &arr[0] {
            rmpv::Value::Ext(0, p) if p.len() == 8 => EventTime::from_payload(p),
            v => EventTime::new(
                v.as_u64().expect("time is an EventTime or an integer") as u32,
                0,
            ),
        };
        out.push((t, arr[1].clone()));
    }
    out
}

/// The value of a record's top-level field `key`.
pub fn field_of<'a>(record: &'a rmpv::Value, key: &str) -> Option<&'a rmpv::Value> {
    record
        .as_map()?
        .iter()
        .find(|(k, _)| k.as_str() == Some(key))
        .map(|(_, v)| v)
}

pub fn seq_of(record: &rmpv::Value) -> u64 {
    record
        .as_map()
        .and_then(|m| {
            m.iter()
                .find(|(k, _)| k.as_str() == Some("seq"))
                .and_then(|(_, v)| v.as_u64())
        })
        .expect("record has an integer seq")
}

// ---------------------------------------------------------------- daemon

/// A running `nagare` with its output captured; killed on drop.
pub struct Daemon {
    pub child: Child,
    pub dir: PathBuf,
    pub config: PathBuf,
    pub monitor: Option<u16>,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    readers: Vec<JoinHandle<()>>,
    exited: Option<ExitStatus>,
}

fn capture<R: Read + Send + 'static>(mut r: R, into: Arc<Mutex<Vec<u8>>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut b = [0u8; 65536];
        loop {
            match r.read(&mut b) {
                Ok(0) | Err(_) => return,
                Ok(n) => into.lock().unwrap().extend_from_slice(&b[..n]),
            }
        }
    })
}

impl Daemon {
    /// Writes `config` to `dir/name.toml` and starts `nagare run -c` on it.
    /// `monitor` names the monitor port (if the config has one) for the
    /// metric helpers. Does not wait for ports; see [`Daemon::wait_port`].
    pub fn start(dir: &Path, name: &str, config: &str, monitor: Option<u16>) -> Daemon {
        Self::start_with_env(dir, name, config, monitor, &[])
    }

    /// `start`, with the environment variables `envs` set for the daemon.
    pub fn start_with_env(
        dir: &Path,
        name: &str,
        config: &str,
        monitor: Option<u16>,
        envs: &[(&str, &str)],
    ) -> Daemon {
        let path = dir.join(format!("{name}.toml"));
        std::fs::write(&path, config).expect("write config");
        let mut cmd = Command::new(BIN);
        cmd.arg("run")
            .arg("-c")
            .arg(&path)
            .envs(envs.iter().copied());
        Self::spawn(cmd, dir, path, monitor)
    }

    pub fn spawn(mut cmd: Command, dir: &Path, config: PathBuf, monitor: Option<u16>) -> Daemon {
        cmd.env("NAGARE_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn nagare");
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let readers = vec![
            capture(child.stdout.take().unwrap(), stdout.clone()),
            capture(child.stderr.take().unwrap(), stderr.clone()),
        ];
        Daemon {
            child,
            dir: dir.to_path_buf(),
            config,
            monitor,
            stdout,
            stderr,
            readers,
            exited: None,
        }
    }

    /// Waits until `port` accepts; panics with the daemon's stderr if it died.
    pub fn wait_port(&mut self, port: u16) {
        let start = Instant::now();
        loop {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return;
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!(
                    "nagare exited ({st}) before 127.0.0.1:{port} accepted; stderr:\n{}",
                    self.stderr()
                );
            }
            if start.elapsed() > WAIT {
                panic!(
                    "127.0.0.1:{port} not accepting after {WAIT:?}; stderr:\n{}",
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout.lock().unwrap()).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        let r = unsafe { libc::kill(self.child.id() as i32, sig) };
        assert_eq!(r, 0, "kill({}, {sig})", self.child.id());
    }

    /// Sends SIGTERM and waits for the exit; returns the status.
    pub fn terminate(&mut self) -> ExitStatus {
        self.wait_catches(libc::SIGTERM);
        self.signal(libc::SIGTERM);
        self.wait_exit(WAIT)
    }

    /// Waits until the daemon handles `sig` (its bit in SigCgt of
    /// /proc/PID/status). nagare installs its SIGTERM handler once its inputs
    /// have started; a SIGTERM before that would kill it with the default
    /// action instead of draining it. Returns at once if it has exited.
    pub fn wait_catches(&mut self, sig: i32) {
        let status = format!("/proc/{}/status", self.child.id());
        wait_until(WAIT, &format!("nagare to handle signal {sig}"), || {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return true;
            }
            let caught = std::fs::read_to_string(&status)
                .ok()
                .and_then(|s| {
                    let mask = s.lines().find_map(|l| l.strip_prefix("SigCgt:"))?;
                    u64::from_str_radix(mask.trim(), 16).ok()
                })
                .unwrap_or(0);
            caught & (1 << (sig - 1)) != 0
        });
    }

    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                self.exited = Some(st);
                for r in self.readers.drain(..) {
                    let _ = r.join();
                }
                return st;
            }
            if start.elapsed() > timeout {
                let _ = self.child.kill();
                panic!(
                    "nagare did not exit within {timeout:?}; stderr:\n{}",
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until the daemon has read `path` to its end: one of its file
    /// descriptors on that file has its offset (/proc/PID/fdinfo `pos`) at
    /// the file's size. What the file held is then inside the daemon.
    pub fn wait_read_to_end(&self, path: &Path) {
        let path = std::fs::canonicalize(path).expect("the file exists");
        let pid = self.child.id();
        wait_until(
            WAIT,
            &format!("nagare to read {} to its end", path.display()),
            || {
                let size = std::fs::metadata(&path).map(|m| m.len()).ok();
                read_offsets(pid, &path).any(|pos| Some(pos) == size)
            },
        );
    }

    /// Waits until a line of the daemon's log (stderr) satisfies `is`;
    /// returns it. `what` names the line in the panic, with the log.
    pub fn wait_log_line(&self, what: &str, is: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            if let Some(l) = self.stderr().lines().find(|l| is(l)) {
                return l.to_string();
            }
            if start.elapsed() > WAIT {
                panic!(
                    "no line of nagare's log shows {what} after {WAIT:?}; stderr:\n{}",
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until a line of the daemon's log holds `text`; returns it.
    pub fn wait_log(&self, text: &str) -> String {
        self.wait_log_line(&format!("{text:?}"), |l| l.contains(text))
    }

    /// Waits until the daemon has logged closing the connection of `peer`
    /// for bad input (see `bad_peer_lines`); returns every such line.
    pub fn wait_bad_peer(&self, peer: &str) -> Vec<String> {
        self.wait_log_line(&format!("a connection of {peer} closed"), |l| {
            !bad_peer_lines(l, peer).is_empty()
        });
        bad_peer_lines(&self.stderr(), peer)
    }

    /// Waits for the daemon's "listening" line naming `what` (a port or a path).
    pub fn wait_listening(&self, what: &str) -> String {
        self.wait_log_line(&format!("an input listening on {what}"), |l| {
            l.contains("listening") && l.contains(what)
        })
    }

    /// Waits until stdout holds `n` lines.
    pub fn wait_stdout_lines(&self, n: usize) -> Vec<String> {
        wait_until(WAIT, &format!("{n} lines on nagare's stdout"), || {
            self.stdout_lines().len() >= n
        });
        self.stdout_lines()
    }

    /// The lines nagare has written whole to stdout so far: a line still
    /// being written (read from the pipe in part) is left out.
    pub fn stdout_lines(&self) -> Vec<String> {
        let out = self.stdout();
        let whole = out.rfind('\n').map_or(0, |i| i + 1);
        out[..whole].lines().map(String::from).collect()
    }

    pub fn metrics(&self) -> String {
        http_get(self.monitor.expect("a monitor port"), "/metrics").1
    }

    /// The value of `nagare_<name>{plugin="<plugin>",…}` in /metrics.
    pub fn metric(&self, name: &str, plugin: &str) -> u64 {
        metric_value(&self.metrics(), name, plugin)
    }

    /// Waits until `metric(name, plugin)` is `want`. The monitor may start
    /// listening after the inputs: until it does, the metric has no value.
    pub fn wait_metric(&self, name: &str, plugin: &str, want: u64) {
        let monitor = self.monitor.expect("a monitor port");
        let start = Instant::now();
        loop {
            let last = TcpStream::connect(("127.0.0.1", monitor))
                .is_ok()
                .then(|| self.metric(name, plugin));
            if last == Some(want) {
                return;
            }
            if start.elapsed() > WAIT {
                panic!(
                    "metric nagare_{name}{{plugin={plugin}}} is {last:?}, expected {want}; stderr:\n{}",
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.exited.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The offsets of process `pid`'s file descriptors open on `path`.
fn read_offsets(pid: u32, path: &Path) -> impl Iterator<Item = u64> + '_ {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten();
    fds.flatten()
        .filter(move |fd| std::fs::read_link(fd.path()).is_ok_and(|p| p == path))
        .filter_map(move |fd| {
            let info = format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy());
            let info = std::fs::read_to_string(info).ok()?;
            info.lines()
                .find_map(|l| l.strip_prefix("pos:"))
                .and_then(|v| v.trim().parse().ok())
        })
}

/// Reads `nagare_<name>{plugin="<plugin>",…} VALUE` from Prometheus text.
pub fn metric_value(text: &str, name: &str, plugin: &str) -> u64 {
    let prefix = format!("nagare_{name}{{plugin=\"{plugin}\",");
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix(&prefix) {
            let v = rest.rsplit(' ').next().unwrap();
            return v
                .parse()
                .unwrap_or_else(|_| panic!("metric value in {line:?}"));
        }
    }
    panic!("no metric nagare_{name} for plugin {plugin} in:\n{text}");
}

/// A minimal HTTP/1.1 GET on loopback; returns (status, body).
pub fn http_get(port: u16, path: &str) -> (u16, String) {
    http_request("GET", port, path)
}

/// A POST without a body (e.g. `/api/reload`); returns (status, body).
pub fn http_post(port: u16, path: &str) -> (u16, String) {
    http_request("POST", port, path)
}

fn http_request(method: &str, port: u16, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the monitor");
    s.set_read_timeout(Some(WAIT)).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).expect("read the HTTP response");
    let text = String::from_utf8_lossy(&resp).into_owned();
    let status: u16 = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("bad HTTP response {text:?}"));
    let (head, body) = text.split_once("\r\n\r\n").expect("HTTP head and body");
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    (status, body)
}

pub fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((len, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(len.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}

// ---------------------------------------------------------------- sender

pub trait Conn: Read + Write + Send {
    fn set_timeout(&self, d: Option<Duration>);
    fn shutdown_write(&self);
    /// This end's address as the daemon logs it as `peer=`.
    fn local(&self) -> String;
}

impl Conn for TcpStream {
    fn set_timeout(&self, d: Option<Duration>) {
        self.set_read_timeout(d).unwrap();
        self.set_write_timeout(d).unwrap();
    }
    fn shutdown_write(&self) {
        let _ = self.shutdown(std::net::Shutdown::Write);
    }
    fn local(&self) -> String {
        self.local_addr().unwrap().to_string()
    }
}

impl Conn for UnixStream {
    fn set_timeout(&self, d: Option<Duration>) {
        self.set_read_timeout(d).unwrap();
        self.set_write_timeout(d).unwrap();
    }
    fn shutdown_write(&self) {
        let _ = self.shutdown(std::net::Shutdown::Write);
    }
    fn local(&self) -> String {
        String::new()
    }
}

/// A forward protocol client on a blocking socket.
pub struct Sender {
    pub conn: Box<dyn Conn>,
    buf: Vec<u8>,
}

impl Sender {
    pub fn tcp(port: u16) -> Sender {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect to nagare");
        s.set_nodelay(true).unwrap();
        s.set_timeout(Some(WAIT));
        Sender {
            conn: Box::new(s),
            buf: Vec::new(),
        }
    }

    /// A sender whose socket has a small fixed send buffer, so back-pressure
    /// shows up in its progress soon.
    pub fn tcp_small(port: u16) -> Sender {
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        sock.set_send_buffer_size(64 * 1024).unwrap();
        let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
        sock.connect(&addr.into()).expect("connect to nagare");
        let s: TcpStream = sock.into();
        s.set_nodelay(true).unwrap();
        s.set_timeout(Some(Duration::from_secs(60)));
        Sender {
            conn: Box::new(s),
            buf: Vec::new(),
        }
    }

    pub fn unix(path: &Path) -> Sender {
        let s = UnixStream::connect(path).expect("connect to nagare's UNIX socket");
        s.set_timeout(Some(WAIT));
        Sender {
            conn: Box::new(s),
            buf: Vec::new(),
        }
    }

    /// A sender over a connection made elsewhere (e.g. `tls::tls_sender`).
    pub fn over(conn: Box<dyn Conn>) -> Sender {
        Sender {
            conn,
            buf: Vec::new(),
        }
    }

    pub fn local(&self) -> String {
        self.conn.local()
    }

    pub fn raw(&mut self, bytes: &[u8]) {
        self.conn.write_all(bytes).expect("send");
    }

    /// One PackedForward frame holding the given seqs.
    pub fn packed(&mut self, tag: &str, seqs: std::ops::Range<u64>, chunk: Option<&[u8]>) {
        let (e, n) = entries(seqs);
        let mut f = Vec::new();
        encode_packed_forward(&mut f, tag, &e, n, chunk, Compression::None).unwrap();
        self.raw(&f);
    }

    /// One CompressedPackedForward (gzip) frame.
    pub fn compressed(&mut self, tag: &str, seqs: std::ops::Range<u64>, chunk: Option<&[u8]>) {
        let (e, n) = entries(seqs);
        let mut f = Vec::new();
        encode_packed_forward(&mut f, tag, &e, n, chunk, Compression::Gzip).unwrap();
        self.raw(&f);
    }

    /// One Forward-mode frame.
    pub fn forward(&mut self, tag: &str, seqs: std::ops::Range<u64>, chunk: Option<&[u8]>) {
        let (e, n) = entries(seqs);
        let mut f = Vec::new();
        encode_forward(&mut f, tag, &e, n, chunk);
        self.raw(&f);
    }

    /// One Message-mode frame.
    pub fn message(&mut self, tag: &str, seq: u64, chunk: Option<&[u8]>) {
        let mut f = Vec::new();
        encode_message(
            &mut f,
            tag,
            EventTime::now(),
            &record(seq, &message_for(seq)),
            chunk,
        );
        self.raw(&f);
    }

    /// Sends `n` events in PackedForward frames of `per_frame`.
    pub fn send_seqs(&mut self, tag: &str, n: u64, per_frame: u64) {
        let mut s = 0;
        while s < n {
            let e = (s + per_frame).min(n);
            self.packed(tag, s..e, None);
            s = e;
        }
    }

    /// Sends `seqs` in PackedForward frames of `per_frame`, each with chunk id
    /// `{id_prefix}{first seq}`, and asserts each frame's ack before sending the next.
    pub fn send_acked(
        &mut self,
        tag: &str,
        seqs: std::ops::Range<u64>,
        per_frame: u64,
        id_prefix: &str,
    ) {
        let mut s = seqs.start;
        while s < seqs.end {
            let e = (s + per_frame).min(seqs.end);
            let id = format!("{id_prefix}{s}");
            self.packed(tag, s..e, Some(id.as_bytes()));
            assert_eq!(
                self.read_ack(),
                ack_bytes(&mp_str(id.as_bytes())),
                "ack for {id}"
            );
            s = e;
        }
    }

    /// Reads one complete msgpack value (ack, HELO, PONG) as raw bytes.
    pub fn read_msg(&mut self) -> Result<Vec<u8>, String> {
        read_msg(&mut *self.conn, &mut self.buf)
    }

    /// Reads an ack and returns the raw message bytes.
    pub fn read_ack(&mut self) -> Vec<u8> {
        self.read_msg().expect("an ack")
    }

    /// True when the peer closed the connection (read returns 0 or an error)
    /// within the socket's timeout.
    pub fn closed_by_peer(&mut self) -> bool {
        let mut b = [0u8; 256];
        loop {
            match self.conn.read(&mut b) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    return false
                }
                Err(_) => return true,
            }
        }
    }

    /// Client side of the handshake; returns the PONG.
    pub fn handshake(&mut self, key: &str, hostname: &str, user: &str, pass: &str) -> Pong {
        let helo = Helo::decode(&self.read_msg().expect("HELO")).expect("a HELO");
        // Clients that decode msgpack str as UTF-8 (Node's, Python's) must
        // hash the very bytes the server sent.
        assert!(
            std::str::from_utf8(&helo.nonce).is_ok() && std::str::from_utf8(&helo.auth).is_ok(),
            "HELO nonce and auth salt are str: they must be valid UTF-8"
        );
        let salt = b"0123456789abcdef".to_vec();
        let ping = Ping {
            hostname: hostname.as_bytes().to_vec(),
            shared_key_salt: salt.clone(),
            shared_key_digest: handshake::shared_key_digest(
                &salt,
                hostname.as_bytes(),
                &helo.nonce,
                key.as_bytes(),
            )
            .into_bytes(),
            username: user.as_bytes().to_vec(),
            password_digest: if helo.auth.is_empty() {
                Vec::new()
            } else {
                handshake::password_digest(&helo.auth, user.as_bytes(), pass.as_bytes())
                    .into_bytes()
            },
        };
        let mut out = Vec::new();
        ping.encode(&mut out);
        self.raw(&out);
        let pong = Pong::decode(&self.read_msg().expect("PONG")).expect("a PONG");
        if pong.auth_ok {
            let want =
                handshake::shared_key_digest(&salt, &pong.hostname, &helo.nonce, key.as_bytes());
            assert_eq!(
                pong.shared_key_digest,
                want.into_bytes(),
                "server digest in PONG"
            );
        }
        pong
    }

    pub fn finish(self) {
        self.conn.shutdown_write();
    }
}

/// Connects to the forward input on `port`, sends `seqs` with `tag` in
/// frames of 50, each acked before the next (`Sender::send_acked`), and
/// closes.
pub fn send_acked_to(port: u16, tag: &str, seqs: std::ops::Range<u64>) {
    let mut s = Sender::tcp(port);
    s.send_acked(tag, seqs, 50, "c");
    s.finish();
}

/// Reads one msgpack value from a blocking stream, keeping extra bytes in `buf`.
pub fn read_msg<R: Read + ?Sized>(r: &mut R, buf: &mut Vec<u8>) -> Result<Vec<u8>, String> {
    loop {
        match skip_value(buf, 0) {
            Ok(end) => {
                let m = buf[..end].to_vec();
                buf.drain(..end);
                return Ok(m);
            }
            Err(ScanError::Invalid(m)) => return Err(m.to_string()),
            Err(ScanError::Incomplete(_)) => {}
        }
        let mut b = [0u8; 4096];
        match r.read(&mut b) {
            Ok(0) => return Err("closed".into()),
            Ok(n) => buf.extend_from_slice(&b[..n]),
            // A signal landed on this thread (seen under heavy load): read again.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// The ack message for a raw msgpack chunk value: `{"ack": <chunk>}`.
pub fn ack_bytes(raw_chunk_value: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    nagare_forward::encode_ack(&mut out, raw_chunk_value);
    out
}

/// msgpack str bytes (header included) of `s`.
pub fn mp_str(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    write_str(&mut out, s);
    out
}

// ---------------------------------------------------------------- sink

#[derive(Clone, Default)]
pub struct SinkOpts {
    /// Require the handshake with this key.
    pub shared_key: Option<String>,
    /// Do not answer acks (the sender times out and resends).
    pub no_ack: bool,
    /// A small fixed SO_RCVBUF (no autotuning), so a paused sink pushes back soon.
    pub rcvbuf: Option<usize>,
}

#[derive(Default)]
struct SinkState {
    events: Mutex<Vec<(String, u64)>>,
    /// (tag, canonical entries) of every frame, in order of arrival.
    raw: Mutex<Vec<(String, Bytes)>>,
    connections: Mutex<u64>,
    /// Connections that ended before the sink stopped (the peer closed or
    /// reset them after everything it sent was read, or a frame was bad).
    ended: Mutex<u64>,
    paused: AtomicBool,
}

/// An in-test forward server on 127.0.0.1:port that decodes frames with
/// nagare_forward, records (tag, seq), answers acks, and can be stopped and
/// started again on the same port.
pub struct Sink {
    pub port: u16,
    opts: SinkOpts,
    state: Arc<SinkState>,
    stop: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    thread: Option<JoinHandle<()>>,
}

impl Sink {
    pub fn start(opts: SinkOpts) -> Sink {
        Self::start_on(free_port(), opts)
    }

    pub fn start_on(port: u16, opts: SinkOpts) -> Sink {
        let mut s = Sink {
            port,
            opts,
            state: Arc::new(SinkState::default()),
            stop: Arc::new(AtomicBool::new(true)),
            conns: Arc::new(Mutex::new(Vec::new())),
            thread: None,
        };
        s.restart();
        s
    }

    /// (Re)binds the port and accepts again; recorded events are kept.
    pub fn restart(&mut self) {
        assert!(self.thread.is_none(), "sink already running");
        let start = Instant::now();
        let l = loop {
            match listen(self.port, self.opts.rcvbuf) {
                Ok(l) => break l,
                Err(_) if start.elapsed() < WAIT => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("sink cannot bind 127.0.0.1:{}: {e}", self.port),
            }
        };
        l.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        self.stop = stop.clone();
        let state = self.state.clone();
        let conns = self.conns.clone();
        let opts = self.opts.clone();
        self.thread = Some(std::thread::spawn(move || {
            let mut handlers = Vec::new();
            while !stop.load(SeqCst) {
                match l.accept() {
                    Ok((c, _)) => {
                        c.set_nonblocking(false).unwrap();
                        *state.connections.lock().unwrap() += 1;
                        conns.lock().unwrap().push(c.try_clone().unwrap());
                        let (state, stop, opts) = (state.clone(), stop.clone(), opts.clone());
                        handlers.push(std::thread::spawn(move || {
                            // Ended unless the sink stopped first: closed or
                            // reset by the peer, or given up on a bad frame.
                            if !matches!(sink_conn(c, &state, &stop, &opts), Ok(false)) {
                                *state.ended.lock().unwrap() += 1;
                            }
                        }));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            drop(l);
            for c in conns.lock().unwrap().drain(..) {
                let _ = c.shutdown(std::net::Shutdown::Both);
            }
            for h in handlers {
                let _ = h.join();
            }
        }));
    }

    /// Stops accepting and closes every connection (like a killed server).
    pub fn stop(&mut self) {
        self.stop.store(true, SeqCst);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }

    /// While paused, connections stop reading (the sender's writes back up).
    pub fn pause(&self, on: bool) {
        self.state.paused.store(on, SeqCst);
    }

    pub fn events(&self) -> Vec<(String, u64)> {
        self.state.events.lock().unwrap().clone()
    }

    pub fn seqs(&self) -> Vec<u64> {
        self.events().into_iter().map(|(_, s)| s).collect()
    }

    pub fn count(&self) -> usize {
        self.state.events.lock().unwrap().len()
    }

    /// Every event received: (tag, time, record), in order of arrival.
    pub fn records(&self) -> Vec<(String, EventTime, rmpv::Value)> {
        let raw = self.state.raw.lock().unwrap();
        raw.iter()
            .flat_map(|(tag, e)| {
                decode_timed_entries(e)
                    .into_iter()
                    .map(move |(t, r)| (tag.clone(), t, r))
            })
            .collect()
    }

    /// The records received with `tag`, in order of arrival.
    pub fn records_of(&self, tag: &str) -> Vec<rmpv::Value> {
        self.records()
            .into_iter()
            .filter(|(t, _, _)| t == tag)
            .map(|(_, _, r)| r)
            .collect()
    }

    /// The entries received for `tag`, concatenated, as they came on the wire.
    pub fn raw_entries(&self, tag: &str) -> Vec<u8> {
        let raw = self.state.raw.lock().unwrap();
        raw.iter()
            .filter(|(t, _)| t == tag)
            .flat_map(|(_, e)| e.iter().copied())
            .collect()
    }

    pub fn wait_records(&self, n: usize) {
        wait_until(
            WAIT,
            &format!("{n} records at the sink on {}", self.port),
            || self.records().len() >= n,
        );
    }

    pub fn connections(&self) -> u64 {
        *self.state.connections.lock().unwrap()
    }

    /// Connections accepted and not yet ended by their peer.
    pub fn open_connections(&self) -> u64 {
        self.connections() - *self.state.ended.lock().unwrap()
    }

    /// Waits until every connection the sink accepted was closed by its peer
    /// and read to its end: once the sender (a daemon that exited) is gone,
    /// the sink holds everything it sent, so a check of what arrived is final.
    pub fn wait_disconnected(&self) {
        wait_until(
            WAIT,
            &format!(
                "every connection to the sink on {} closed and read",
                self.port
            ),
            || *self.state.ended.lock().unwrap() == self.connections(),
        );
    }

    pub fn wait_count(&self, n: usize) {
        wait_until(
            WAIT,
            &format!("{n} events at the sink on {}", self.port),
            || self.count() >= n,
        );
    }
}

fn listen(port: u16, rcvbuf: Option<usize>) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    s.set_reuse_address(true)?;
    if let Some(n) = rcvbuf {
        s.set_recv_buffer_size(n)?;
    }
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    s.bind(&addr.into())?;
    s.listen(128)?;
    Ok(s.into())
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Serves one connection; Ok(true) when the peer closed it and every frame
/// it sent was recorded, Ok(false) when the sink was stopped first, Err
/// when the peer reset it (after the bytes before the reset were read) or
/// sent something the sink refuses.
fn sink_conn(
    mut c: TcpStream,
    st: &SinkState,
    stop: &AtomicBool,
    opts: &SinkOpts,
) -> Result<bool, String> {
    c.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut buf: Vec<u8> = Vec::new();
    if let Some(key) = &opts.shared_key {
        sink_handshake(&mut c, &mut buf, key, stop)?;
    }
    let limits = Limits::default();
    let mut b = vec![0u8; 256 * 1024];
    loop {
        if stop.load(SeqCst) {
            return Ok(false);
        }
        // Decode every complete frame.
        loop {
            let sc = match scan_frame(&buf, &limits) {
                Ok(Some(sc)) => sc,
                Ok(None) => break,
                Err(e) => return Err(format!("sink: bad frame: {e}")),
            };
            let bytes = Bytes::copy_from_slice(&buf[..sc.len]);
            buf.drain(..sc.len);
            let f = sc
                .into_frame(bytes, &limits, EventTime::now())
                .map_err(|e| format!("sink: bad frame: {e}"))?;
            let recs = decode_entries(&f.entries);
            assert_eq!(recs.len() as u32, f.count);
            {
                // Records without a seq (a filter rewrote them) are only in `raw`.
                let mut ev = st.events.lock().unwrap();
                for r in recs.iter().filter(|r| field_of(r, "seq").is_some()) {
                    ev.push((f.tag.clone(), seq_of(r)));
                }
                st.raw
                    .lock()
                    .unwrap()
                    .push((f.tag.clone(), f.entries.clone()));
            }
            if let Some(id) = &f.chunk {
                if !opts.no_ack {
                    c.write_all(&ack_bytes(id)).map_err(|e| e.to_string())?;
                }
            }
        }
        if st.paused.load(SeqCst) {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        match c.read(&mut b) {
            Ok(0) => return Ok(true),
            Ok(n) => buf.extend_from_slice(&b[..n]),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(e) => return Err(e.to_string()),
        }
    }
}

fn sink_handshake(
    c: &mut TcpStream,
    buf: &mut Vec<u8>,
    key: &str,
    stop: &AtomicBool,
) -> Result<(), String> {
    let nonce = b"sink-nonce-\xff\x00\x01".to_vec();
    let mut out = Vec::new();
    Helo {
        nonce: nonce.clone(),
        auth: Vec::new(),
        keepalive: true,
    }
    .encode(&mut out);
    c.write_all(&out).map_err(|e| e.to_string())?;
    let ping = loop {
        match read_msg(c, buf) {
            Ok(m) => break Ping::decode(&m).map_err(|e| e.to_string())?,
            Err(e) if e.contains("temporarily") || e.contains("timed out") => {
                if stop.load(SeqCst) {
                    return Err("stopped".into());
                }
            }
            Err(e) => return Err(e),
        }
    };
    let want = handshake::shared_key_digest(
        &ping.shared_key_salt,
        &ping.hostname,
        &nonce,
        key.as_bytes(),
    );
    let ok = want.as_bytes() == ping.shared_key_digest.as_slice();
    out.clear();
    Pong {
        auth_ok: ok,
        reason: if ok { Vec::new() } else { b"bad key".to_vec() },
        hostname: b"sink".to_vec(),
        shared_key_digest: handshake::shared_key_digest(
            &ping.shared_key_salt,
            b"sink",
            &nonce,
            key.as_bytes(),
        )
        .into_bytes(),
    }
    .encode(&mut out);
    c.write_all(&out).map_err(|e| e.to_string())?;
    if ok {
        Ok(())
    } else {
        Err("bad key".into())
    }
}

// ---------------------------------------------------------------- outputs

/// Parses JSON lines `{"time","tag","record"}` and returns (tag, seq) of each.
pub fn json_lines_seqs(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}"));
            (
                v["tag"].as_str().expect("tag").to_string(),
                v["record"]["seq"].as_u64().expect("record.seq"),
            )
        })
        .collect()
}

/// Parses `text` as JSON; panics showing it when it is not.
pub fn json_value(text: &[u8]) -> serde_json::Value {
    serde_json::from_slice(text)
        .unwrap_or_else(|e| panic!("not JSON: {:?}: {e}", String::from_utf8_lossy(text)))
}

/// Reads a file (empty string when it does not exist yet).
pub fn read_file(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// Waits until the file at `p` holds `n` lines; returns its text.
pub fn wait_file_lines(p: &Path, n: usize) -> String {
    wait_until(WAIT, &format!("{n} lines in {}", p.display()), || {
        read_file(p).lines().count() >= n
    });
    read_file(p)
}

pub fn seqs(v: &[(String, u64)]) -> Vec<u64> {
    v.iter().map(|(_, s)| *s).collect()
}

/// Lines of `stderr` that log a closed connection of `peer` with a reason.
pub fn bad_peer_lines(stderr: &str, peer: &str) -> Vec<String> {
    let needle = format!("peer={peer} ");
    stderr
        .lines()
        .filter(|l| {
            (l.contains(&needle) || l.ends_with(&format!("peer={peer}"))) && l.contains("reason=")
        })
        .map(String::from)
        .collect()
}

// ---------------------------------------------------------------- nagare cat

/// Runs `nagare cat ARGS` with `input` on stdin; waits (bounded) for it to exit.
pub fn nagare_cat(args: &[&str], input: &str) -> std::process::Output {
    let mut c = Command::new(BIN)
        .arg("cat")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = c.stdin.take().unwrap();
    let input = input.to_string();
    let w = std::thread::spawn(move || {
        // nagare cat may exit before reading everything (connection refused).
        let _ = stdin.write_all(input.as_bytes());
    });
    // bounded: poll for exit
    let start = std::time::Instant::now();
    loop {
        if c.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > WAIT {
            let _ = c.kill();
            panic!("nagare cat did not finish");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    w.join().unwrap();
    c.wait_with_output().unwrap()
}

/// JSON lines `{"seq":N,"message":…}` for `nagare cat`.
pub fn json_input(range: std::ops::Range<u64>) -> String {
    range
        .map(|s| format!("{{\"seq\":{s},\"message\":\"{}\"}}\n", message_for(s)))
        .collect()
}

/// A msgpack map with string keys, in order.
pub fn m(pairs: &[(&str, rmpv::Value)]) -> rmpv::Value {
    rmpv::Value::Map(
        pairs
            .iter()
            .map(|(k, v)| (rmpv::Value::from(*k), v.clone()))
            .collect(),
    )
}

/// A value as msgpack bytes.
pub fn encode(v: &rmpv::Value) -> Vec<u8> {
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, v).unwrap();
    out
}

/// The time every event of `send_records_acked` carries.
pub const T0: EventTime = EventTime {
    secs: 1_700_000_000,
    nanos: 7,
};

/// Sends one PackedForward frame of `records` (time T0) with a chunk id and
/// waits for its ack; returns the entries sent.
pub fn send_records_acked(s: &mut Sender, tag: &str, records: &[rmpv::Value], id: &str) -> Vec<u8> {
    let mut e = Vec::new();
    for r in records {
        write_entry(&mut e, T0, &encode(r));
    }
    let mut f = Vec::new();
    encode_packed_forward(
        &mut f,
        tag,
        &e,
        records.len() as u32,
        Some(id.as_bytes()),
        Compression::None,
    )
    .unwrap();
    s.raw(&f);
    assert_eq!(
        s.read_ack(),
        ack_bytes(&mp_str(id.as_bytes())),
        "ack for chunk {id}"
    );
    e
}

/// `nagare replay` of `path` into a fresh sink delivers exactly seqs 0..n.
pub fn replay_delivers(path: &Path, n: u64) {
    let sink = Sink::start(SinkOpts::default());
    let out = Command::new(BIN)
        .args(["replay", path.to_str().unwrap(), "--to"])
        .arg(format!("127.0.0.1:{}", sink.port))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    sink.wait_count(n as usize);
    assert_exact_seqs(&sink.seqs(), n);
}

/// The cache the set-up installs tools into (XDG_CACHE_HOME or ~/.cache).
pub fn cache_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
}

/// A server or tool scripts/test-all.sh installs: the path in the
/// environment variable `env`, else `cached` (where the set-up puts it)
/// when it exists, else `name` on the PATH when `name version_arg` runs.
pub fn installed_tool(
    env: &str,
    cached: Option<PathBuf>,
    name: &str,
    version_arg: &str,
) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        return Some(PathBuf::from(p));
    }
    if let Some(p) = cached.filter(|p| p.exists()) {
        return Some(p);
    }
    std::process::Command::new(name)
        .arg(version_arg)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
        .then(|| PathBuf::from(name))
}
