//! The s3 output against a real S3 server, versitygw (Apache-2.0, `go
//! install`ed by scripts/test-all.sh), with the objects read back by boto3
//! (a client that is not nagare's; a venv next to tests/s3/requirements.txt)
//! and compared by content: every seq once, keys from the template, one
//! object per chunk. One versitygw serves the whole test binary (a bucket
//! per test); the tests that stop or fill the server start their own.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};

use base64::Engine as _;

use crate::common::*;

const ACCESS: &str = "nagare-test";
const SECRET: &str = "nagare-secret";

/// The versitygw binary: NAGARE_VERSITYGW, the set-up's GOBIN
/// (~/.cache/nagare-go/bin), or PATH.
fn versitygw_bin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("NAGARE_VERSITYGW") {
        return Some(PathBuf::from(p));
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    let p = cache.join("nagare-go/bin/versitygw");
    if p.exists() {
        return Some(p);
    }
    Command::new("versitygw")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
        .then(|| PathBuf::from("versitygw"))
}

fn python() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/s3/.venv/bin/python")
}

/// Skips (true) without the server or the reader.
fn skip_without_tools() -> bool {
    skip_unless(
        versitygw_bin().is_some(),
        "versitygw is not installed (scripts/test-all.sh: go install github.com/versity/versitygw/cmd/versitygw@v1.8.0)",
    ) || skip_unless(
        python().exists(),
        "no venv with boto3 at crates/nagare/tests/s3/.venv (scripts/test-all.sh makes it)",
    )
}

/// A versitygw on a free loopback port, serving the folders of `data` as
/// buckets (posix backend); killed on drop.
struct Versity {
    port: u16,
    data: PathBuf,
    secret: String,
    child: Option<Child>,
    /// The shared server: its pid is killed at exit.
    shared: bool,
}

static SHARED_PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl Versity {
    fn start(data: &Path) -> Versity {
        let mut v = Versity {
            port: free_port(),
            data: data.to_path_buf(),
            secret: SECRET.into(),
            child: None,
            shared: false,
        };
        v.restart();
        v
    }

    fn restart(&mut self) {
        std::fs::create_dir_all(&self.data).unwrap();
        let child = Command::new(versitygw_bin().expect("versitygw"))
            .args(["--access", ACCESS, "--secret", &self.secret, "--port"])
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("posix")
            .arg(&self.data)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start versitygw");
        if self.shared {
            SHARED_PID.store(child.id(), std::sync::atomic::Ordering::SeqCst);
        }
        self.child = Some(child);
        wait_port(self.port);
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A new bucket (a folder of the posix backend).
    fn bucket(&self, name: &str) -> String {
        std::fs::create_dir_all(self.data.join(name)).unwrap();
        name.to_string()
    }

    /// What boto3 reads from `bucket`.
    fn read(&self, bucket: &str) -> Stored {
        let out = Command::new(python())
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/s3/read_objects.py"
            ))
            .args([&self.endpoint(), ACCESS, SECRET, bucket])
            .output()
            .expect("run read_objects.py");
        assert!(
            out.status.success(),
            "read_objects.py: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let objects = v["objects"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| Object {
                key: o["key"].as_str().unwrap().to_string(),
                etag: o["etag"].as_str().unwrap_or("").to_string(),
                content_type: o["content_type"].as_str().unwrap_or("").to_string(),
                storage_class: o["storage_class"].as_str().unwrap_or("").to_string(),
                body: base64::engine::general_purpose::STANDARD
                    .decode(o["body"].as_str().unwrap())
                    .unwrap(),
            })
            .collect();
        Stored {
            objects,
            uploads: v["uploads"].as_u64().unwrap(),
        }
    }
}

impl Drop for Versity {
    fn drop(&mut self) {
        self.kill();
    }
}

struct Object {
    key: String,
    etag: String,
    content_type: String,
    storage_class: String,
    /// Decompressed.
    body: Vec<u8>,
}

struct Stored {
    objects: Vec<Object>,
    /// Multipart uploads neither completed nor aborted.
    uploads: u64,
}

/// The seqs of an object's events, by its key's format.
fn seqs_in(o: &Object) -> Vec<u64> {
    let k = o.key.trim_end_matches(".gz").trim_end_matches(".zst");
    if k.ends_with(".msgpack") {
        decode_timed_entries(&o.body)
            .iter()
            .map(|(_, r)| seq_of(r))
            .collect()
    } else if k.ends_with(".log") {
        // single_value: the message field, "event number N".
        String::from_utf8(o.body.clone())
            .unwrap()
            .lines()
            .map(|l| {
                l.strip_prefix("event number ")
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("{}: line {l:?}", o.key))
            })
            .collect()
    } else {
        String::from_utf8(o.body.clone())
            .unwrap()
            .lines()
            .map(|l| {
                let v: serde_json::Value =
                    serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}: {l:?}", o.key));
                v["record"]["seq"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("{}: no seq in {l}", o.key))
            })
            .collect()
    }
}

impl Stored {
    fn seqs(&self) -> Vec<u64> {
        self.objects.iter().flat_map(seqs_in).collect()
    }

    /// The chunk id in each key (the 32 hex digits before the extension).
    fn chunk_ids(&self) -> Vec<String> {
        self.objects
            .iter()
            .map(|o| chunk_id_of(&o.key).unwrap_or_else(|| panic!("no chunk id in {}", o.key)))
            .collect()
    }
}

fn chunk_id_of(key: &str) -> Option<String> {
    let name = key.rsplit('/').next()?;
    let id = name.split('.').next()?.rsplit('-').next()?;
    (id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id.to_string())
}

/// The test binary's one versitygw, started by the first test that asks;
/// killed and its folder removed when the process exits (atexit).
fn shared() -> Option<&'static Versity> {
    static SERVER: OnceLock<Option<Versity>> = OnceLock::new();
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    extern "C" fn stop() {
        let pid = SHARED_PID.load(std::sync::atomic::Ordering::SeqCst);
        if pid != 0 {
            // SAFETY: kill(2) on the server this process started.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        if let Some(dir) = DIR.get() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    SERVER
        .get_or_init(|| {
            if skip_without_tools() {
                return None;
            }
            let dir = DIR.get_or_init(|| tempfile::tempdir().unwrap().keep());
            // SAFETY: registers a plain function with no state of its own.
            unsafe { libc::atexit(stop) };
            let mut v = Versity {
                port: free_port(),
                data: dir.join("data"),
                secret: SECRET.into(),
                child: None,
                shared: true,
            };
            v.restart();
            Some(v)
        })
        .as_ref()
}

/// A forward input on `port` and an s3 output to `bucket` with `extra`
/// output options and a buffer (`[output.buffer]` lines; flush_interval
/// 200ms unless they set it).
fn config(port: u16, endpoint: &str, bucket: &str, extra: &str, buffer: &str) -> String {
    let flush = if buffer.contains("flush_interval") || extra.contains("upload_timeout") {
        ""
    } else {
        "flush_interval = \"200ms\""
    };
    format!(
        r#"
[[input]]
type = "forward"
bind = "127.0.0.1:{port}"

[[output]]
type = "s3"
match = "**"
bucket = "{bucket}"
endpoint = "{endpoint}"
{extra}
[output.buffer]
{flush}
retry_wait = "100ms"
retry_max_interval = "500ms"
{buffer}
"#
    )
}

const KEYS: &str = "access_key_id = \"nagare-test\"\nsecret_access_key = \"nagare-secret\"\n";

/// Waits until `bucket` holds `n` events (or more: a duplicate fails the
/// caller's exact check), and returns what it holds.
fn wait_events(v: &Versity, bucket: &str, n: usize) -> Stored {
    let mut last = None;
    wait_until(WAIT * 3, &format!("{n} events in bucket {bucket}"), || {
        let s = v.read(bucket);
        let done = s.seqs().len() >= n;
        last = Some(s);
        done
    });
    last.unwrap()
}

/// `wait_events`, with the daemon's log in the message if it times out.
fn wait_events_of(d: &Daemon, v: &Versity, bucket: &str, n: usize) -> Stored {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| wait_events(v, bucket, n)));
    r.unwrap_or_else(|e| {
        let s = v.read(bucket);
        let held: Vec<(String, usize)> = s
            .objects
            .iter()
            .map(|o| (o.key.clone(), seqs_in(o).len()))
            .collect();
        panic!(
            "{e:?}; {bucket} holds {held:?}; nagare's log:\n{}",
            d.stderr()
        )
    })
}

#[test]
fn every_event_is_stored_once_under_keys_from_the_template() {
    let Some(v) = shared() else { return };
    let bucket = v.bucket("keys");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let extra = format!("{KEYS}storage_class = \"STANDARD\"\n");
    let cfg = config(
        port,
        &v.endpoint(),
        &bucket,
        &extra,
        "chunk_limit_size = \"64KiB\"",
    );
    let mut d = Daemon::start(dir.path(), "s3", &cfg, None);
    d.wait_port(port);
    send_acked_to(port, "app.web", 0..3000);
    let s = wait_events(v, &bucket, 3000);
    assert_exact_seqs(&s.seqs(), 3000);
    // 3000 events of ~100 bytes of JSON in chunks of 64 KiB: several objects.
    assert!(s.objects.len() > 1, "{} objects", s.objects.len());
    for o in &s.objects {
        // logs/${tag}/%Y/%m/%d/%H%M%S-${chunk_id}${ext}, the time being the
        // object's first event's: its JSON "time" is "YYYY-MM-DDTHH:MM:SS.…Z".
        let first: serde_json::Value = serde_json::from_str(
            std::str::from_utf8(&o.body)
                .unwrap()
                .lines()
                .next()
                .unwrap(),
        )
        .unwrap();
        let t = first["time"].as_str().unwrap();
        let want = format!(
            "logs/app.web/{}/{}/{}/{}{}{}-",
            &t[0..4],
            &t[5..7],
            &t[8..10],
            &t[11..13],
            &t[14..16],
            &t[17..19]
        );
        assert!(o.key.starts_with(&want), "{} for {want}", o.key);
        let id = chunk_id_of(&o.key).unwrap();
        assert_eq!(o.key, format!("{want}{id}.json"));
        assert_eq!(o.content_type, "application/x-ndjson");
        assert_eq!(o.storage_class, "STANDARD");
    }
    // One object per chunk: every chunk id once.
    let mut ids = s.chunk_ids();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), s.objects.len());
    assert!(d.terminate().success(), "{}", d.stderr());
}

#[test]
fn gzip_zstd_msgpack_and_raw_messages_read_back_by_boto3() {
    let Some(v) = shared() else { return };
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let ep = v.endpoint();
    let (gz, zst, raw) = (
        v.bucket("gzip-objects"),
        v.bucket("zstd-objects"),
        v.bucket("raw-objects"),
    );
    let cfg = format!(
        r#"
[[input]]
type = "forward"
bind = "127.0.0.1:{port}"

[[output]]
type = "s3"
match = "c.gz"
bucket = "{gz}"
endpoint = "{ep}"
{KEYS}compression = "gzip"
[output.buffer]
flush_interval = "200ms"

[[output]]
type = "s3"
match = "c.zst"
bucket = "{zst}"
endpoint = "{ep}"
{KEYS}compression = "zstd"
format = "msgpack"
key = "${{tag}}/${{hostname}}/${{chunk_id}}${{ext}}"
[output.buffer]
flush_interval = "200ms"

[[output]]
type = "s3"
match = "c.raw"
bucket = "{raw}"
endpoint = "{ep}"
{KEYS}format = "single_value"
[output.buffer]
flush_interval = "200ms"
"#
    );
    let mut d = Daemon::start(dir.path(), "s3", &cfg, None);
    d.wait_port(port);
    // Chunk ids of their own per tag: the forward input drops a chunk id
    // it has seen as a re-send.
    let mut sender = Sender::tcp(port);
    for tag in ["c.gz", "c.zst", "c.raw"] {
        sender.send_acked(tag, 0..500, 50, tag);
    }
    sender.finish();
    let s = wait_events(v, &gz, 500);
    assert_exact_seqs(&s.seqs(), 500);
    assert!(s
        .objects
        .iter()
        .all(|o| o.key.ends_with(".json.gz") && o.content_type == "application/gzip"));
    let s = wait_events_of(&d, v, &zst, 500);
    assert_exact_seqs(&s.seqs(), 500);
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    for o in &s.objects {
        assert!(
            o.key.starts_with(&format!("c.zst/{host}/")) && o.key.ends_with(".msgpack.zst"),
            "{}",
            o.key
        );
    }
    let s = wait_events(v, &raw, 500);
    assert_exact_seqs(&s.seqs(), 500);
    assert!(s.objects.iter().all(|o| o.key.ends_with(".log")));
    assert!(d.terminate().success(), "{}", d.stderr());
}

#[test]
fn a_chunk_over_the_part_size_goes_up_in_parts() {
    let Some(v) = shared() else { return };
    let bucket = v.bucket("multipart");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let extra = format!("{KEYS}part_size = \"5MiB\"\nupload_concurrency = 2\n");
    // One chunk of ~6.6 MiB of JSON: two parts, of 5 and ~1.6 MiB. Sent in
    // well under flush_interval, so one chunk holds it all.
    let cfg = config(
        port,
        &v.endpoint(),
        &bucket,
        &extra,
        "chunk_limit_size = \"64MiB\"\nflush_interval = \"3s\"",
    );
    let mut d = Daemon::start(dir.path(), "s3", &cfg, None);
    d.wait_port(port);
    let pad = "x".repeat(1000);
    let n = 6000u64;
    let mut s = Sender::tcp(port);
    for f in 0..n / 500 {
        s.raw(&padded_frame("big", f * 500..f * 500 + 500, &pad));
    }
    s.finish();
    let st = wait_events(v, &bucket, n as usize);
    assert_exact_seqs(&st.seqs(), n);
    assert_eq!(st.objects.len(), 1, "one chunk, one object");
    assert!(st.objects[0].body.len() > 5 << 20);
    // A multipart object's ETag is the MD5 of its parts' MD5s, then "-<parts>".
    assert!(
        st.objects[0].etag.ends_with("-2"),
        "etag {}",
        st.objects[0].etag
    );
    assert_eq!(st.uploads, 0, "no upload left open");
    assert!(d.terminate().success(), "{}", d.stderr());
}

#[test]
fn a_wrong_secret_is_a_clear_error_and_a_reload_with_the_right_one_delivers() {
    let Some(v) = shared() else { return };
    let bucket = v.bucket("secret");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let wrong = "access_key_id = \"nagare-test\"\nsecret_access_key = \"not-the-secret\"\n";
    let cfg = config(port, &v.endpoint(), &bucket, wrong, "");
    let mut d = Daemon::start(dir.path(), "s3", &cfg, None);
    d.wait_port(port);
    send_acked_to(port, "sec", 0..200);
    let line = d.wait_log("SignatureDoesNotMatch");
    for want in [
        "bucket \"secret\"",
        &v.endpoint(),
        "access denied",
        "secret_access_key",
        "will retry",
    ] {
        assert!(line.contains(want), "{want:?} not in {line}");
    }
    assert!(v.read(&bucket).objects.is_empty());
    // The events wait in the buffer; a reload with the right secret keeps
    // the buffer and delivers them.
    std::fs::write(&d.config, config(port, &v.endpoint(), &bucket, KEYS, "")).unwrap();
    d.signal(libc::SIGHUP);
    d.wait_log("configuration reloaded");
    let s = wait_events(v, &bucket, 200);
    assert_exact_seqs(&s.seqs(), 200);
    assert!(d.terminate().success(), "{}", d.stderr());
}

#[test]
fn a_bucket_that_does_not_exist_is_a_clear_error_and_events_wait_for_it() {
    let Some(v) = shared() else { return };
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = config(port, &v.endpoint(), "not-yet", KEYS, "");
    let mut d = Daemon::start(dir.path(), "s3", &cfg, None);
    d.wait_port(port);
    send_acked_to(port, "nb", 0..100);
    let line = d.wait_log("NoSuchBucket");
    assert!(
        line.contains("not-yet") && line.contains("does not exist") && line.contains(&v.endpoint()),
        "{line}"
    );
    v.bucket("not-yet");
    let s = wait_events(v, "not-yet", 100);
    assert_exact_seqs(&s.seqs(), 100);
    assert!(d.terminate().success(), "{}", d.stderr());
}

/// An acked forward load in another thread, frames of 25 with chunk ids,
/// until `stop`; returns the acked seqs. A frame whose ack does not come
/// (nagare killed) is sent again, same chunk id, to the restarted daemon:
/// the forward input's dedup window (kept in the file buffer) takes it once.
fn acked_load(
    port: u16,
    tag: &'static str,
    stop: Arc<Mutex<bool>>,
) -> std::thread::JoinHandle<Vec<u64>> {
    std::thread::spawn(move || {
        let mut acked = Vec::new();
        let mut f = 0u64;
        let mut conn: Option<Sender> = None;
        while !*stop.lock().unwrap() {
            let s = match conn.as_mut() {
                Some(s) => s,
                None => match std::net::TcpStream::connect(("127.0.0.1", port)) {
                    Ok(_) => conn.insert(Sender::tcp(port)),
                    Err(_) => {
                        std::thread::sleep(std::time::Duration::from_millis(50));
                        continue;
                    }
                },
            };
            let (a, b) = (f * 25, f * 25 + 25);
            let id = format!("k{f}");
            s.packed(tag, a..b, Some(id.as_bytes()));
            match s.read_msg() {
                Ok(_) => {
                    acked.extend(a..b);
                    f += 1;
                }
                Err(_) => conn = None,
            }
        }
        acked
    })
}

#[test]
fn the_server_killed_and_restarted_under_load_loses_and_duplicates_nothing() {
    if skip_without_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut v = Versity::start(&dir.path().join("data"));
    let bucket = v.bucket("restart");
    let port = free_port();
    let buffer = format!(
        "type = \"file\"\npath = \"{}\"\nchunk_limit_size = \"16KiB\"",
        dir.path().join("buf").display()
    );
    let cfg = config(port, &v.endpoint(), &bucket, KEYS, &buffer);
    let mut d = Daemon::start(dir.path(), "s3", &cfg, None);
    d.wait_port(port);
    let stop = Arc::new(Mutex::new(false));
    let load = acked_load(port, "rs", stop.clone());
    wait_until(WAIT, "some objects", || !v.read(&bucket).objects.is_empty());
    // Killed while chunks go up; the load goes on into the buffer.
    v.kill();
    d.wait_log("will retry");
    v.restart();
    wait_until(WAIT, "objects again", || {
        let n = v.read(&bucket).objects.len();
        n > 2
    });
    *stop.lock().unwrap() = true;
    let acked = load.join().unwrap();
    let s = wait_events(&v, &bucket, acked.len());
    assert!(d.terminate().success(), "{}", d.stderr());
    assert_exact_seqs(&s.seqs(), acked.len() as u64);
    let mut ids = s.chunk_ids();
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "one object per chunk");
}

#[test]
fn kill_9_of_nagare_with_a_file_buffer_stores_every_acked_event_once() {
    let Some(v) = shared() else { return };
    let bucket = v.bucket("kill9");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    // Keys from a credentials file's profile this time.
    let creds = dir.path().join("credentials");
    std::fs::write(
        &creds,
        format!("[default]\naws_access_key_id = x\naws_secret_access_key = y\n\n[test]\naws_access_key_id = {ACCESS}\naws_secret_access_key = {SECRET}\n"),
    )
    .unwrap();
    let extra = format!(
        "credentials_file = \"{}\"\nprofile = \"test\"\n",
        creds.display()
    );
    let buffer = format!(
        "type = \"file\"\npath = \"{}\"\nchunk_limit_size = \"16KiB\"",
        dir.path().join("buf").display()
    );
    let cfg = config(port, &v.endpoint(), &bucket, &extra, &buffer);
    let mut d = Daemon::start(dir.path(), "s3", &cfg, None);
    d.wait_port(port);
    let stop = Arc::new(Mutex::new(false));
    let load = acked_load(port, "k9", stop.clone());
    wait_until(WAIT, "some objects", || v.read(&bucket).objects.len() >= 2);
    d.signal(libc::SIGKILL);
    d.wait_exit(WAIT);
    let mut d = Daemon::start(dir.path(), "s3", &cfg, None);
    d.wait_port(port);
    let before = v.read(&bucket).objects.len();
    wait_until(WAIT, "more objects after the restart", || {
        v.read(&bucket).objects.len() > before + 2
    });
    *stop.lock().unwrap() = true;
    let acked = load.join().unwrap();
    let s = wait_events(v, &bucket, acked.len());
    assert!(d.terminate().success(), "{}", d.stderr());
    assert_exact_seqs(&s.seqs(), acked.len() as u64);
    let mut ids = s.chunk_ids();
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "one object per chunk");
}

/// The events of each object, by its key.
fn events_per_object(s: &Stored) -> Vec<(String, usize)> {
    s.objects
        .iter()
        .map(|o| (o.key.clone(), seqs_in(o).len()))
        .collect()
}

/// `total_file_size` closes an object at that size (the buffer's chunk):
/// 60 batches of 50 go into a few objects, each but the last full, every
/// event once; `upload_timeout` of an hour keeps the last one staged until
/// nagare stops, which writes it.
#[test]
fn total_file_size_gathers_batches_into_objects_of_that_size() {
    let Some(v) = shared() else { return };
    let bucket = v.bucket("gather-size");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let extra = format!("{KEYS}total_file_size = \"32KiB\"\nupload_timeout = \"1h\"\n");
    let cfg = config(port, &v.endpoint(), &bucket, &extra, "");
    let mut d = Daemon::start(dir.path(), "s3", &cfg, None);
    d.wait_port(port);
    send_acked_to(port, "app.size", 0..3000);
    // The full objects go up while the last one waits for its hour.
    wait_until(WAIT * 3, "objects closed by size", || {
        v.read(&bucket).objects.len() >= 3
    });
    assert!(d.terminate().success(), "{}", d.stderr());
    let s = v.read(&bucket);
    assert_exact_seqs(&s.seqs(), 3000);
    let mut per = events_per_object(&s);
    per.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    // Gathered: far fewer objects than the 60 batches, and one per chunk.
    assert!(per.len() >= 3 && per.len() < 20, "{per:?}");
    let mut ids = s.chunk_ids();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), per.len(), "one object per chunk: {per:?}");
    // Each object closed by size holds about as many events as the
    // fullest (a batch of 50 that does not fit starts the next one).
    let most = per[0].1;
    for (key, n) in &per[..per.len() - 1] {
        assert!(
            *n + 50 >= most,
            "{key}: {n} events, the fullest {most}: {per:?}"
        );
    }
}

/// `upload_timeout` gathers what comes within it into one object: 10
/// batches, one object; the next 10 batches after it, a second one.
#[test]
fn upload_timeout_gathers_what_comes_within_it_into_one_object() {
    let Some(v) = shared() else { return };
    let bucket = v.bucket("gather-time");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let extra = format!("{KEYS}total_file_size = \"64MiB\"\nupload_timeout = \"2s\"\n");
    let cfg = config(port, &v.endpoint(), &bucket, &extra, "");
    let mut d = Daemon::start(dir.path(), "s3", &cfg, None);
    d.wait_port(port);
    send_acked_to(port, "app.time", 0..500);
    let s = wait_events_of(&d, v, &bucket, 500);
    assert_eq!(s.objects.len(), 1, "{:?}", events_per_object(&s));
    send_acked_to(port, "app.time", 500..1000);
    let s = wait_events_of(&d, v, &bucket, 1000);
    assert!(d.terminate().success(), "{}", d.stderr());
    assert_exact_seqs(&s.seqs(), 1000);
    let mut per = events_per_object(&s);
    per.sort();
    assert_eq!(per.len(), 2, "{per:?}");
    assert!(per.iter().all(|(_, n)| *n == 500), "{per:?}");
}

/// Gathered objects are stored once too: kill -9 of nagare (file buffer)
/// under an acked load, with objects of `total_file_size` and
/// `upload_timeout`, leaves every acked event once across the objects and
/// one object per chunk id.
#[test]
fn kill_9_with_gathered_objects_stores_every_acked_event_once() {
    let Some(v) = shared() else { return };
    let bucket = v.bucket("gather-kill9");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let extra = format!("{KEYS}total_file_size = \"48KiB\"\nupload_timeout = \"500ms\"\n");
    let buffer = format!(
        "type = \"file\"\npath = \"{}\"",
        dir.path().join("buf").display()
    );
    let cfg = config(port, &v.endpoint(), &bucket, &extra, &buffer);
    let mut d = Daemon::start(dir.path(), "s3", &cfg, None);
    d.wait_port(port);
    let stop = Arc::new(Mutex::new(false));
    let load = acked_load(port, "gk", stop.clone());
    wait_until(WAIT, "some objects", || v.read(&bucket).objects.len() >= 2);
    d.signal(libc::SIGKILL);
    d.wait_exit(WAIT);
    let mut d = Daemon::start(dir.path(), "s3", &cfg, None);
    d.wait_port(port);
    let before = v.read(&bucket).objects.len();
    wait_until(WAIT, "more objects after the restart", || {
        v.read(&bucket).objects.len() > before + 2
    });
    *stop.lock().unwrap() = true;
    let acked = load.join().unwrap();
    let s = wait_events_of(&d, v, &bucket, acked.len());
    assert!(d.terminate().success(), "{}", d.stderr());
    assert_exact_seqs(&s.seqs(), acked.len() as u64);
    let mut ids = s.chunk_ids();
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "one object per chunk");
    // Gathered: batches of 25 events, several per object (how many
    // depends on how fast the acked load goes within upload_timeout).
    assert!(
        n * 2 * 25 <= acked.len(),
        "{n} objects for {} events in batches of 25",
        acked.len()
    );
}

/// A TCP proxy to `to` that closes its first `cut` connections after
/// reading `after` bytes of the request (headers and part of the body),
/// then passes every later connection through. Returns its port.
fn cutting_proxy(to: u16, cut: usize, after: usize) -> u16 {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for (i, c) in l.incoming().enumerate() {
            let Ok(mut c) = c else { return };
            if i < cut {
                let mut b = vec![0u8; after];
                let _ = c.read_exact(&mut b);
                continue; // dropped: closed mid-body
            }
            let Ok(up) = std::net::TcpStream::connect(("127.0.0.1", to)) else {
                continue;
            };
            let (mut c2, mut up2) = (c.try_clone().unwrap(), up.try_clone().unwrap());
            let mut up = up;
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut c2, &mut up2);
                let _ = up2.shutdown(std::net::Shutdown::Write);
            });
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut up, &mut c);
                let _ = c.flush();
                let _ = c.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    port
}

#[test]
fn a_server_that_closes_mid_body_is_retried_and_stores_each_chunk_once() {
    let Some(v) = shared() else { return };
    let bucket = v.bucket("cut-mid-body");
    let proxy = cutting_proxy(v.port, 8, 2000);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    // One chunk of ~20 KB: every request of the first 8 connections is cut
    // 2000 bytes in, past the headers.
    let cfg = config(
        port,
        &format!("http://127.0.0.1:{proxy}"),
        &bucket,
        &format!("{KEYS}request_retries = 1\n"),
        "flush_interval = \"1s\"",
    );
    let mut d = Daemon::start(dir.path(), "s3", &cfg, None);
    d.wait_port(port);
    send_acked_to(port, "cut", 0..200);
    let line = d.wait_log("will retry");
    assert!(line.contains("bucket \"cut-mid-body\""), "{line}");
    let s = wait_events_of(&d, v, &bucket, 200);
    assert_exact_seqs(&s.seqs(), 200);
    let mut ids = s.chunk_ids();
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n, "one object per chunk");
    assert!(d.terminate().success(), "{}", d.stderr());
}

/// A tmpfs mount, unmounted on drop.
struct Mount(PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_on_the_server_is_retried_until_space_returns() {
    if skip_without_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"])
        .arg(&data)
        .output();
    let ok = matches!(&mounted, Ok(o) if o.status.success());
    if skip_unless(
        ok,
        &format!(
            "a_full_disk_on_the_server: cannot mount a 2 MiB tmpfs ({:?}); run the tests as root",
            mounted.map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
        ),
    ) {
        return;
    }
    let _mount = Mount(data.clone());
    let v = Versity::start(&data);
    let bucket = v.bucket("full");
    let port = free_port();
    let cfg = config(
        port,
        &v.endpoint(),
        &bucket,
        KEYS,
        "chunk_limit_size = \"256KiB\"",
    );
    let mut d = Daemon::start(dir.path(), "s3", &cfg, None);
    d.wait_port(port);
    // ~4 MiB of JSON into a 2 MiB disk.
    let pad = "y".repeat(900);
    let n = 4000u64;
    let mut s = Sender::tcp(port);
    for f in 0..n / 200 {
        s.raw(&padded_frame("full", f * 200..f * 200 + 200, &pad));
    }
    s.finish();
    let line = d.wait_log("will retry");
    // versitygw answers 507 InsufficientStorage.
    assert!(
        line.contains("bucket \"full\"") && line.contains("InsufficientStorage"),
        "{line}"
    );
    // Space returns: every event once.
    let grown = Command::new("mount")
        .args(["-o", "remount,size=64m"])
        .arg(&data)
        .status()
        .unwrap();
    assert!(grown.success());
    let st = wait_events(&v, &bucket, n as usize);
    assert_exact_seqs(&st.seqs(), n);
    assert!(d.terminate().success(), "{}", d.stderr());
}

/// The example of docs/outputs-storage.md's s3 section, run as written
/// (its server address, forward port, buffer path and flush interval
/// swapped for the test's), with the
/// keys from the environment as the docs say.
#[test]
fn the_documented_example_runs() {
    let Some(v) = shared() else { return };
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/outputs-storage.md"
    ))
    .unwrap();
    let section = &doc[doc.find("## `s3`").expect("the s3 section")..];
    let example = section
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a toml block in the s3 section");
    let bucket = v.bucket("logs");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = example
        .replace("http://127.0.0.1:7070", &v.endpoint())
        .replace("127.0.0.1:24224", &format!("127.0.0.1:{port}"))
        .replace(
            "/var/lib/nagare/s3",
            &dir.path().join("buf").display().to_string(),
        )
        .replace("upload_timeout = \"5m\"", "upload_timeout = \"200ms\"");
    assert!(cfg != example);
    let mut d = Daemon::start_with_env(
        dir.path(),
        "example",
        &cfg,
        None,
        &[
            ("AWS_ACCESS_KEY_ID", ACCESS),
            ("AWS_SECRET_ACCESS_KEY", SECRET),
        ],
    );
    d.wait_port(port);
    send_acked_to(port, "app.web", 0..300);
    let s = wait_events(v, &bucket, 300);
    assert_exact_seqs(&s.seqs(), 300);
    let by_ext: BTreeMap<&str, usize> = s.objects.iter().fold(BTreeMap::new(), |mut m, o| {
        *m.entry(o.key.rsplit('.').next().unwrap()).or_default() += 1;
        m
    });
    assert!(by_ext.keys().all(|e| *e == "gz"), "{by_ext:?}");
    assert!(d.terminate().success(), "{}", d.stderr());
}

/// `nagare check` names the key and says what is wrong; no server needed.
#[test]
fn bad_options_are_clear_errors_at_check() {
    let dir = tempfile::tempdir().unwrap();
    let creds = dir.path().join("credentials");
    std::fs::write(&creds, "[default]\naws_access_key_id = a\n").unwrap();
    let s3 = |extra: &str| {
        format!("[[output]]\ntype = \"s3\"\nmatch = \"**\"\nbucket = \"b\"\n{extra}\n")
    };
    let cases = [
        (
            s3("key = \"a/${tga}\""),
            ":9: key `key`:".to_string(),
            "\"${tga}\" is not a placeholder".to_string(),
        ),
        (
            s3("key = \"a/%Q-${chunk_id}\""),
            ":9: key `key`:".into(),
            "strftime does not know".into(),
        ),
        (
            s3("part_size = \"1MiB\""),
            ":9: key `part_size`:".into(),
            "below 5MiB".into(),
        ),
        (
            s3("access_key_id = \"a\""),
            ":9: key `access_key_id`:".into(),
            "set `secret_access_key` too".into(),
        ),
        (
            s3("endpoint = \"http://h:1/path\""),
            ":9: key `endpoint`:".into(),
            "write the server's URL only".into(),
        ),
        (
            s3("endpoint = \"http://h:1\"\n[output.tls]\nca = \"/x\""),
            ":10: key `tls`:".into(),
            "the endpoint is http://".into(),
        ),
        (
            s3(&format!(
                "credentials_file = {:?}\nprofile = \"nope\"",
                creds.display().to_string()
            )),
            ":10: key `profile`:".into(),
            "has no profile \"nope\"".into(),
        ),
        (
            s3("storage_class = \"bad class\""),
            ":9: key `storage_class`:".into(),
            "not a storage class name".into(),
        ),
        (
            s3("total_file_size = \"1MiB\"\n[output.buffer]\nchunk_limit_size = \"1MiB\""),
            ":11: key `buffer.chunk_limit_size`:".into(),
            "`total_file_size` of this output sets the buffer's chunk_limit_size: write one of them".into(),
        ),
        (
            s3("upload_timeout = \"10m\"\n[output.buffer]\nflush_interval = \"1s\""),
            ":11: key `buffer.flush_interval`:".into(),
            "`upload_timeout` of this output sets the buffer's flush_interval".into(),
        ),
        (
            s3("total_file_size = \"128MiB\"\n[output.buffer]\ntotal_limit_size = \"64MiB\""),
            ":11: key `buffer.total_limit_size`:".into(),
            "must be at least `total_file_size` (128MiB)".into(),
        ),
    ];
    assert_check_errors(dir.path(), CHECK_BASE, &cases);
    // A key without ${chunk_id} works, with a warning.
    let p = dir.path().join("warn.toml");
    std::fs::write(&p, format!("{CHECK_BASE}{}", s3("key = \"x/${tag}\""))).unwrap();
    let out = run_check(&p);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("warning:") && err.contains(":9: key `key`: has no ${chunk_id}"),
        "{err}"
    );
}
