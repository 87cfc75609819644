//! The journald input against the real systemd-journald: each test starts
//! its own journald in a private mount namespace (`unshare -m`: a tmpfs on
//! /run for its sockets, a tmpfs on /var/log with the test's folder bound
//! at /var/log/journal, and a journald.conf of the test's), writes to it
//! with `systemd-cat`, `logger` and the native protocol, and checks what
//! nagare read (through `directory`) against `journalctl -D … -o json`;
//! then restarts of nagare, of journald, a rotation and a vacuum.
//!
//! Needs root (mount namespaces), util-linux's `unshare` and `nsenter`, and
//! systemd's journald, journalctl and systemd-cat (Debian's `systemd`
//! package; scripts/test-all.sh installs it).

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use nagare_forward::EventTime;

use crate::common::*;

const JOURNALD: &str = "/lib/systemd/systemd-journald";

/// Why these tests cannot run here, if they cannot.
fn missing() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root for a mount namespace".into());
    }
    if !Path::new(JOURNALD).exists() {
        return Some(format!("{JOURNALD} is missing (Debian package systemd)"));
    }
    for tool in ["journalctl", "systemd-cat", "unshare", "nsenter", "logger"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            return Some(format!("`{tool}` is not installed"));
        }
    }
    None
}

fn skip() -> bool {
    let why = missing();
    skip_unless(why.is_none(), why.as_deref().unwrap_or(""))
}

/// A systemd-journald in its own mount namespace writing into `dir`.
struct Journald {
    /// Where its journal files are (the `directory` nagare reads).
    dir: PathBuf,
    conf: PathBuf,
    child: Child,
}

impl Journald {
    fn start(base: &Path) -> Journald {
        let dir = base.join("journal");
        std::fs::create_dir_all(&dir).unwrap();
        let conf = base.join("journald.conf");
        // Persistent storage in the bound folder; no rate limit (a test
        // writes thousands of lines at once); nothing forwarded elsewhere.
        std::fs::write(
            &conf,
            "[Journal]\nStorage=persistent\nRateLimitBurst=0\nForwardToSyslog=no\nForwardToWall=no\nForwardToConsole=no\nForwardToKMsg=no\nReadKMsg=no\nAudit=no\n",
        )
        .unwrap();
        let script = format!(
            "set -e
             mount -t tmpfs tmpfs /run
             mkdir -p /run/systemd/journal
             mount -t tmpfs tmpfs /var/log
             mkdir -p /var/log/journal
             mount --bind '{dir}' /var/log/journal
             mount --bind '{conf}' /etc/systemd/journald.conf
             # journald names its folder by the machine id: a container
             # may have none (an empty or missing /etc/machine-id).
             if [ ! -s /etc/machine-id ]; then
               [ -e /etc/machine-id ] || : > /etc/machine-id
               echo 5a1e0000000000000000000000000001 > '{base}/machine-id'
               mount --bind '{base}/machine-id' /etc/machine-id
             fi
             # Already flushed: journald writes to /var/log/journal at once
             # (no systemd-journal-flush.service here to ask for it).
             touch /run/systemd/journal/flushed
             exec {JOURNALD}",
            dir = dir.display(),
            conf = conf.display(),
            base = base.display(),
        );
        Self::spawn(dir, conf, &script)
    }

    fn spawn(dir: PathBuf, conf: PathBuf, script: &str) -> Journald {
        let child = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("unshare");
        let j = Journald { dir, conf, child };
        let pid = j.pid();
        // Once the shell has exec'd journald, its mounts are in place: the
        // socket path then names journald's own socket (not the host's).
        wait_until(WAIT, "journald's sockets and journal file", || {
            std::fs::read_link(format!("/proc/{pid}/exe"))
                .is_ok_and(|e| e.ends_with("systemd-journald"))
                && Path::new(&format!("/proc/{pid}/root/run/systemd/journal/stdout")).exists()
                && j.journal_files()
                    .iter()
                    .any(|p| p.ends_with("system.journal"))
        });
        j
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops it (SIGTERM: it syncs and closes its files) and starts a new
    /// one on the same folder.
    fn restart(&mut self) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.pid() as i32, libc::SIGTERM) };
        self.child.wait().unwrap();
        let (dir, conf) = (self.dir.clone(), self.conf.clone());
        let base = dir.parent().unwrap().to_path_buf();
        let _ = std::mem::replace(self, Journald::start(&base));
        assert_eq!((self.dir.clone(), self.conf.clone()), (dir, conf));
    }

    fn journal_files(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for d in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            for f in std::fs::read_dir(d.path()).into_iter().flatten().flatten() {
                out.push(f.path());
            }
        }
        out.sort();
        out
    }

    /// Runs `args` inside journald's namespace; panics unless it succeeds.
    fn run_inside(&self, args: &[&str], stdin: &[u8]) {
        let pid = self.pid().to_string();
        let mut c = Command::new("nsenter")
            .args(["-t", &pid, "-m", "--"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(stdin).unwrap();
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Lines `seq-<n> …` for n in `seqs` through `systemd-cat -t <ident>`
    /// (its stdout stream: one entry a line, in order).
    fn cat(&self, ident: &str, seqs: std::ops::Range<u64>) {
        let text: String = seqs.map(line_for).collect();
        self.run_inside(&["systemd-cat", "-t", ident], text.as_bytes());
    }

    /// One message through `logger` to the syslog socket.
    fn logger(&self, ident: &str, message: &str) {
        self.run_inside(
            &[
                "logger",
                "--socket",
                "/run/systemd/journal/dev-log",
                "-t",
                ident,
                message,
            ],
            b"",
        );
    }

    /// One entry through the native protocol, each field in the binary
    /// form (so values may hold newlines and any bytes).
    fn native(&self, fields: &[(&str, &[u8])]) {
        let mut msg = Vec::new();
        for (k, v) in fields {
            msg.extend_from_slice(k.as_bytes());
            msg.push(b'\n');
            msg.extend_from_slice(&(v.len() as u64).to_le_bytes());
            msg.extend_from_slice(v);
            msg.push(b'\n');
        }
        let socket = format!("/proc/{}/root/run/systemd/journal/socket", self.pid());
        UnixDatagram::unbound()
            .unwrap()
            .send_to(&msg, socket)
            .expect("send to journald's native socket");
    }

    /// Asks journald to start new journal files (the old ones are archived).
    fn rotate(&self) {
        let before = self.journal_files().len();
        self.run_inside(&["journalctl", "--rotate"], b"");
        wait_until(WAIT, "an archived journal file", || {
            self.journal_files().len() > before
        });
    }

    /// Deletes every archived journal file (`--vacuum-files` counts the
    /// active one too: 1 keeps only that; 0 would mean no limit).
    fn vacuum(&self) {
        let out = Command::new("journalctl")
            .arg(format!("--directory={}", self.dir.display()))
            .arg("--vacuum-files=1")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }

    /// The entries of `idents`, as journalctl reads them (`-o json`).
    fn entries(&self, idents: &[&str]) -> Vec<serde_json::Value> {
        let mut c = Command::new("journalctl");
        c.arg(format!("--directory={}", self.dir.display()))
            .args(["-o", "json", "--no-pager"]);
        for i in idents {
            c.arg(format!("SYSLOG_IDENTIFIER={i}"));
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for Journald {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn line_for(seq: u64) -> String {
    format!("seq-{seq} {}\n", "j".repeat((seq % 40) as usize))
}

/// The seq of a `seq-<n> …` message.
fn seq_in(message: &str) -> u64 {
    message
        .strip_prefix("seq-")
        .and_then(|m| m.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not a seq line: {message:?}"))
}

fn config(d: &Path, j: &Journald, extra: &str) -> String {
    format!(
        r#"
[[input]]
type = "journald"
directory = "{journal}"
cursor_file = "{d}/journald.cursor"
read_from_head = true
tag = "journal.${{record.SYSLOG_IDENTIFIER}}"
{extra}
[[output]]
type = "file"
match = "journal.**"
path = "{d}/out/${{tag}}.mp"
format = "msgpack"
[output.buffer]
flush_interval = "50ms"
"#,
        journal = j.dir.display(),
        d = d.display(),
    )
}

/// What nagare wrote for `tag`: (time, record) in order.
fn read_out(d: &Path, tag: &str) -> Vec<(EventTime, rmpv::Value)> {
    let p = d.join(format!("out/{tag}.mp"));
    decode_timed_entries(&std::fs::read(p).unwrap_or_default())
}

fn text(record: &rmpv::Value, key: &str) -> String {
    field_of(record, key)
        .and_then(|v| v.as_str())
        .unwrap_or_else(|| panic!("no text field {key} in {record}"))
        .to_string()
}

/// Waits until nagare wrote `n` events for `tag`; returns their seqs.
fn wait_seqs(d: &Path, tag: &str, n: usize) -> Vec<u64> {
    wait_until(WAIT, &format!("{n} events tagged {tag}"), || {
        read_out(d, tag).len() >= n
    });
    seqs(d, tag)
}

fn seqs(d: &Path, tag: &str) -> Vec<u64> {
    read_out(d, tag)
        .iter()
        .map(|(_, r)| seq_in(&text(r, "MESSAGE")))
        .collect()
}

/// journalctl's JSON of a field value: a string, or bytes as an array of
/// numbers; as bytes.
fn json_bytes(v: &serde_json::Value) -> Vec<u8> {
    match v {
        serde_json::Value::String(s) => s.as_bytes().to_vec(),
        serde_json::Value::Array(a) => a.iter().map(|b| b.as_u64().unwrap() as u8).collect(),
        other => panic!("unexpected journal JSON value {other}"),
    }
}

fn msgpack_bytes(v: &rmpv::Value) -> Vec<u8> {
    match v {
        rmpv::Value::String(s) => s.as_bytes().to_vec(),
        rmpv::Value::Binary(b) => b.clone(),
        other => panic!("unexpected record value {other}"),
    }
}

#[test]
fn entries_are_the_journals_fields_times_and_tags() {
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let j = Journald::start(d);
    j.cat("nagtest", 0..500);
    j.logger("nagsys", "seq-0 from logger");
    j.logger("nagsys", "seq-1 from logger");
    let blob: &[u8] = &[0xff, 0x00, b'\n', 0xfe, b'x'];
    j.native(&[
        ("MESSAGE", b"seq-2 two lines\nsecond line"),
        ("SYSLOG_IDENTIFIER", b"nagsys"),
        ("NAGARE_BLOB", blob),
        ("REPEATED", b"first"),
        ("REPEATED", b"second"),
    ]);
    // Not selected by the matches below.
    j.cat("other", 0..20);
    let matches = r#"matches = ["SYSLOG_IDENTIFIER=nagtest", "SYSLOG_IDENTIFIER=nagsys"]"#;
    let mut nagare = Daemon::start(d, "journald", &config(d, &j, matches), None);
    wait_seqs(d, "journal.nagtest", 500);
    wait_seqs(d, "journal.nagsys", 3);
    nagare.terminate();

    // Entry by entry, what journalctl reads from the same files.
    for ident in ["nagtest", "nagsys"] {
        let want = j.entries(&[ident]);
        let got = read_out(d, &format!("journal.{ident}"));
        assert_eq!(got.len(), want.len(), "{ident}: one event per entry");
        for ((time, rec), w) in got.iter().zip(&want) {
            let us: u64 = w["__REALTIME_TIMESTAMP"].as_str().unwrap().parse().unwrap();
            assert_eq!(
                *time,
                EventTime::new((us / 1_000_000) as u32, (us % 1_000_000) as u32 * 1000),
                "the event time is __REALTIME_TIMESTAMP"
            );
            let fields: BTreeMap<String, &rmpv::Value> = rec
                .as_map()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.as_str().unwrap().to_string(), v))
                .collect();
            let journal: BTreeMap<&String, &serde_json::Value> = w
                .as_object()
                .unwrap()
                .iter()
                .filter(|(k, _)| !k.starts_with("__"))
                .collect();
            assert_eq!(
                fields.keys().collect::<Vec<_>>(),
                journal.keys().copied().collect::<Vec<_>>(),
                "every field but the __ ones, trusted _ fields as they are"
            );
            for (k, v) in &journal {
                match (v, fields[*k]) {
                    (serde_json::Value::Array(a), rmpv::Value::Array(b))
                        if a.first().is_some_and(|x| !x.is_number()) =>
                    {
                        let a: Vec<Vec<u8>> = a.iter().map(json_bytes).collect();
                        let b: Vec<Vec<u8>> = b.iter().map(msgpack_bytes).collect();
                        assert_eq!(a, b, "{k}: every value of a repeated field");
                    }
                    (v, f) => assert_eq!(json_bytes(v), msgpack_bytes(f), "{k}"),
                }
            }
        }
    }
    // Sent to two sockets (syslog's, the native one): journald may take
    // them in either order.
    let nagsys = read_out(d, "journal.nagsys");
    let by_transport = |t: &str| -> Vec<&rmpv::Value> {
        nagsys
            .iter()
            .map(|(_, r)| r)
            .filter(|r| text(r, "_TRANSPORT") == t)
            .collect()
    };
    let native = by_transport("journal")[0];
    assert_eq!(text(native, "MESSAGE"), "seq-2 two lines\nsecond line");
    assert_eq!(
        field_of(native, "NAGARE_BLOB"),
        Some(&rmpv::Value::Binary(blob.to_vec())),
        "bytes that are not UTF-8 stay bytes"
    );
    let syslog: Vec<String> = by_transport("syslog")
        .iter()
        .map(|r| text(r, "MESSAGE"))
        .collect();
    assert_eq!(syslog, ["seq-0 from logger", "seq-1 from logger"]);
    assert_eq!(
        text(&read_out(d, "journal.nagtest")[0].1, "_TRANSPORT"),
        "stdout"
    );
    assert!(
        read_out(d, "journal.other").is_empty(),
        "entries the matches leave out are not read"
    );
    assert_exact_seqs(&seqs(d, "journal.nagtest"), 500);
}

#[test]
fn restarts_reloads_and_journald_restarts_lose_and_repeat_nothing() {
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut j = Journald::start(d);
    // Entries from before the first start: read_from_head reads them.
    j.cat("nagtest", 0..1000);
    let cfg = config(d, &j, r#"matches = ["SYSLOG_IDENTIFIER=nagtest"]"#);
    let mut nagare = Daemon::start(d, "journald", &cfg, None);
    wait_seqs(d, "journal.nagtest", 1000);

    // nagare stops while entries are being written, and starts again.
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            for k in 0..20 {
                j.cat("nagtest", 1000 + k * 100..1100 + k * 100);
            }
        });
        wait_until(WAIT, "nagare to read some of the new entries", || {
            read_out(d, "journal.nagtest").len() > 1100
        });
        assert_eq!(nagare.terminate().code(), Some(0), "{}", nagare.stderr());
        let cursor = std::fs::read_to_string(d.join("journald.cursor")).unwrap();
        assert!(cursor.starts_with("s="), "the cursor was saved: {cursor:?}");
        writer.join().unwrap();
    });
    let stopped_at = read_out(d, "journal.nagtest").len();
    eprintln!("nagare stopped after {stopped_at} of 3000 entries");
    // And entries written while nagare is stopped.
    j.cat("nagtest", 3000..3200);
    nagare = Daemon::start(d, "journald", &cfg, None);
    assert_exact_seqs(&wait_seqs(d, "journal.nagtest", 3200), 3200);

    // journald stops and starts again; nagare goes on reading.
    j.restart();
    j.cat("nagtest", 3200..3700);
    assert_exact_seqs(&wait_seqs(d, "journal.nagtest", 3700), 3700);

    // A reload that changes the input replaces it: the new one goes on
    // from the old one's cursor.
    std::fs::write(
        &nagare.config,
        cfg.replace(
            "read_from_head = true",
            "read_from_head = true\nmax_field_size = \"2MiB\"",
        ),
    )
    .unwrap();
    nagare.signal(libc::SIGHUP);
    nagare.wait_log("configuration reloaded");
    j.cat("nagtest", 3700..3900);
    assert_exact_seqs(&wait_seqs(d, "journal.nagtest", 3900), 3900);
    nagare.terminate();
    assert_exact_seqs(&seqs(d, "journal.nagtest"), 3900);
    let got = seqs(d, "journal.nagtest");
    // In the journal's order (not always the seqs': journald may take
    // the last lines of one systemd-cat after the first of the next).
    let journal: Vec<u64> = j
        .entries(&["nagtest"])
        .iter()
        .map(|e| seq_in(e["MESSAGE"].as_str().unwrap()))
        .collect();
    assert_eq!(got, journal, "in the journal's order");
}

#[test]
fn rotation_and_vacuum_lose_and_repeat_nothing() {
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let j = Journald::start(d);
    j.cat("nagtest", 0..500);
    let cfg = config(d, &j, r#"matches = ["SYSLOG_IDENTIFIER=nagtest"]"#);
    let mut nagare = Daemon::start(d, "journald", &cfg, None);
    wait_seqs(d, "journal.nagtest", 500);

    // Rotated and vacuumed while nagare reads.
    j.rotate();
    j.cat("nagtest", 500..1000);
    wait_seqs(d, "journal.nagtest", 1000);
    let archived = j.journal_files().len();
    j.vacuum();
    assert!(
        j.journal_files().len() < archived,
        "the vacuum removed archived files: {:?}",
        j.journal_files()
    );
    j.cat("nagtest", 1000..1500);
    assert_exact_seqs(&wait_seqs(d, "journal.nagtest", 1500), 1500);

    // Stopped; meanwhile the file holding the cursor's entry is rotated
    // away and vacuumed: the restart goes on after it all the same.
    nagare.terminate();
    j.rotate();
    j.cat("nagtest", 1500..2000);
    j.vacuum();
    j.cat("nagtest", 2000..2200);
    let mut nagare = Daemon::start(d, "journald", &cfg, None);
    assert_exact_seqs(&wait_seqs(d, "journal.nagtest", 2200), 2200);
    nagare.terminate();
    assert_exact_seqs(&seqs(d, "journal.nagtest"), 2200);
    let journal: Vec<u64> = j
        .entries(&["nagtest"])
        .iter()
        .map(|e| seq_in(e["MESSAGE"].as_str().unwrap()))
        .collect();
    let got: Vec<u64> = seqs(d, "journal.nagtest");
    assert_eq!(
        got[1500..].to_vec(),
        journal,
        "after the restart: what the journal holds after the vacuum, from the entry after the cursor on"
    );
}

#[test]
fn without_read_from_head_only_new_entries() {
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let j = Journald::start(d);
    j.cat("nagtest", 0..100);
    let cfg = config(d, &j, "").replace("read_from_head = true", "read_from_head = false");
    let mut nagare = Daemon::start(d, "journald", &cfg, None);
    nagare.wait_log("reading the journal");
    // journalctl has seeked to the end once it waits for new entries: a
    // marker entry written now is the first one read.
    wait_until(WAIT, "the marker entry", || {
        j.logger("nagtest", "seq-100 marker");
        !read_out(d, "journal.nagtest").is_empty()
    });
    let first = seqs(d, "journal.nagtest")[0];
    assert_eq!(first, 100, "nothing from before the start");
    nagare.terminate();
}
