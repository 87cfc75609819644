//! What the object-storage output tests (s3.rs against versitygw,
//! azure_blob.rs against Azurite) share: the emulator process, the objects
//! as a client that is not nagare's reads them back (tests/objects/*.py in
//! a venv with boto3 and azure-storage-blob), the checks by content (every
//! seq once, one object per chunk id), and the test bodies both outputs
//! run: keys from the template, formats and compressions, gathering by size
//! and time, the server stopped and restarted under load, kill -9 of
//! nagare under an acked load, a server that closes mid-body.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, Once, OnceLock};

use base64::Engine as _;

use crate::common::*;

/// The venv's python (scripts/test-all.sh makes it from
/// tests/objects/requirements.txt).
pub fn python() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/objects/.venv/bin/python")
}

/// Runs a reader script of tests/objects with `args`; its JSON as
/// [`Stored`].
pub fn read_with(script: &str, args: &[&str]) -> Stored {
    let out = Command::new(python())
        .arg(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/objects")
                .join(script),
        )
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {script}: {e}"));
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let text = |o: &serde_json::Value, k: &str| o[k].as_str().unwrap_or("").to_string();
    let objects = v["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| Object {
            key: text(o, "key"),
            etag: text(o, "etag"),
            content_type: text(o, "content_type"),
            storage_class: text(o, "storage_class"),
            blocks: o["blocks"].as_u64().unwrap_or(0),
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

pub struct Object {
    pub key: String,
    pub etag: String,
    pub content_type: String,
    /// S3's storage class, Azure's access tier.
    pub storage_class: String,
    /// Azure: the committed blocks (0: put whole).
    pub blocks: u64,
    /// Decompressed.
    pub body: Vec<u8>,
}

pub struct Stored {
    pub objects: Vec<Object>,
    /// Multipart uploads (S3) or blobs with uncommitted blocks (Azure)
    /// neither completed nor aborted.
    pub uploads: u64,
}

/// The seqs of an object's events, by its key's format.
pub fn seqs_in(o: &Object) -> Vec<u64> {
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
    pub fn seqs(&self) -> Vec<u64> {
        self.objects.iter().flat_map(seqs_in).collect()
    }

    /// The chunk id in each key (the 32 hex digits before the extension).
    pub fn chunk_ids(&self) -> Vec<String> {
        self.objects
            .iter()
            .map(|o| chunk_id_of(&o.key).unwrap_or_else(|| panic!("no chunk id in {}", o.key)))
            .collect()
    }

    /// Every chunk id once: one object per chunk.
    #[track_caller]
    pub fn assert_one_object_per_chunk(&self) {
        let mut ids = self.chunk_ids();
        let n = ids.len();
        ids.sort();
        ids.dedup();
        assert_eq!(
            ids.len(),
            n,
            "one object per chunk: {:?}",
            events_per_object(self)
        );
    }
}

pub fn chunk_id_of(key: &str) -> Option<String> {
    let name = key.rsplit('/').next()?;
    let id = name.split('.').next()?.rsplit('-').next()?;
    (id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id.to_string())
}

/// The events of each object, by its key.
pub fn events_per_object(s: &Stored) -> Vec<(String, usize)> {
    s.objects
        .iter()
        .map(|o| (o.key.clone(), seqs_in(o).len()))
        .collect()
}

// ------------------------------------------------------------- the servers

/// The pids and folders of the servers shared by a whole test binary:
/// killed and removed when the process exits (atexit).
static AT_EXIT: Mutex<Vec<(u32, Option<PathBuf>)>> = Mutex::new(Vec::new());

extern "C" fn stop_shared() {
    if let Ok(list) = AT_EXIT.lock() {
        for (pid, dir) in list.iter() {
            if *pid != 0 {
                // SAFETY: kill(2) on a server this process started.
                unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
            }
            if let Some(d) = dir {
                let _ = std::fs::remove_dir_all(d);
            }
        }
    }
}

/// The test binary's one server of a kind, held in `cell`: started in a
/// folder of its own (its `data` under it, removed at exit) by the first
/// test that asks; None when `can_run` is false, which the caller works
/// out (and reports as a skip) on every call, so each test that cannot
/// run says so.
pub fn shared_server<T>(
    cell: &'static OnceLock<T>,
    can_run: bool,
    start: impl FnOnce(&Path) -> T,
) -> Option<&'static T> {
    if !can_run {
        return None;
    }
    Some(cell.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep();
        remove_at_exit(&dir);
        start(&dir.join("data"))
    }))
}

/// Removes `dir` at exit (a shared server's data).
pub fn remove_at_exit(dir: &Path) {
    register_at_exit();
    AT_EXIT.lock().unwrap().push((0, Some(dir.to_path_buf())));
}

fn register_at_exit() {
    static ONCE: Once = Once::new();
    // SAFETY: registers a plain function with no state of its own.
    ONCE.call_once(|| unsafe {
        libc::atexit(stop_shared);
    });
}

/// A server process on a free loopback port, started by `command`; stopped
/// on drop (with `stop_signal`: SIGKILL, or SIGTERM for a server that saves
/// its state on the way out).
pub struct Proc {
    pub port: u16,
    command: Box<dyn Fn(u16) -> Command + Send + Sync>,
    stop_signal: i32,
    child: Option<Child>,
    /// Shared by the test binary: its pid is killed at exit.
    shared: bool,
}

impl Proc {
    pub fn start(
        command: impl Fn(u16) -> Command + Send + Sync + 'static,
        stop_signal: i32,
        shared: bool,
    ) -> Proc {
        let mut p = Proc {
            port: free_port(),
            command: Box::new(command),
            stop_signal,
            child: None,
            shared,
        };
        p.restart();
        p
    }

    pub fn restart(&mut self) {
        let child = (self.command)(self.port)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the server");
        if self.shared {
            register_at_exit();
            AT_EXIT.lock().unwrap().push((child.id(), None));
        }
        self.child = Some(child);
        wait_port(self.port);
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: a signal to the server this process started.
            unsafe { libc::kill(c.id() as i32, self.stop_signal) };
            let _ = c.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop_signal = libc::SIGKILL;
        self.kill();
    }
}

/// An emulator of one object store, as the shared test bodies drive it.
pub trait Store: Sync {
    /// The output's `type`.
    fn output_type(&self) -> &'static str;
    /// The emulator's port.
    fn port(&self) -> u16;
    /// The output's lines naming `bucket` (a bucket or container) and its
    /// keys, at the server `base` ("http://127.0.0.1:PORT": the server's
    /// own, or a proxy's in front of it).
    fn target_at(&self, bucket: &str, base: &str) -> String;
    /// [`Store::target_at`] the server itself.
    fn target(&self, bucket: &str) -> String {
        self.target_at(bucket, &format!("http://127.0.0.1:{}", self.port()))
    }
    /// Creates `name` (a bucket or container) and returns it.
    fn bucket(&self, name: &str) -> String;
    /// What a client that is not nagare's reads from `bucket`.
    fn read(&self, bucket: &str) -> Stored;
    /// Stops the server (as a stopped or crashed server looks to clients).
    fn kill(&mut self);
    fn restart(&mut self);
}

/// A forward input on `port` and the output of `target` with `extra`
/// output options and a buffer (`[output.buffer]` lines; flush_interval
/// 200ms unless they set it).
pub fn config(port: u16, ty: &str, target: &str, extra: &str, buffer: &str) -> String {
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
type = "{ty}"
match = "**"
{target}
{extra}
[output.buffer]
{flush}
retry_wait = "100ms"
retry_max_interval = "500ms"
{buffer}
"#
    )
}

/// [`config`] for `s`'s output to `bucket`.
pub fn config_for(s: &dyn Store, port: u16, bucket: &str, extra: &str, buffer: &str) -> String {
    config(port, s.output_type(), &s.target(bucket), extra, buffer)
}

/// Waits until `bucket` holds `n` events (or more: a duplicate fails the
/// caller's exact check), and returns what it holds.
pub fn wait_events(s: &dyn Store, bucket: &str, n: usize) -> Stored {
    let mut last = None;
    wait_until(WAIT * 3, &format!("{n} events in {bucket}"), || {
        let st = s.read(bucket);
        let done = st.seqs().len() >= n;
        last = Some(st);
        done
    });
    last.unwrap()
}

/// `wait_events`, with the daemon's log in the message if it times out.
pub fn wait_events_of(d: &Daemon, s: &dyn Store, bucket: &str, n: usize) -> Stored {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| wait_events(s, bucket, n)));
    r.unwrap_or_else(|e| {
        let held = events_per_object(&s.read(bucket));
        panic!(
            "{e:?}; {bucket} holds {held:?}; nagare's log:\n{}",
            d.stderr()
        )
    })
}

/// An acked forward load in another thread, frames of 25 with chunk ids,
/// until `stop`; returns the acked seqs. A frame whose ack does not come
/// (nagare killed) is sent again, same chunk id, to the restarted daemon:
/// the forward input's dedup window (kept in the file buffer) takes it once.
pub fn acked_load(
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

/// A TCP proxy to `to` that closes its first `cut` connections after
/// reading `after` bytes of the request (headers and part of the body),
/// then passes every later connection through. Returns its port.
pub fn cutting_proxy(to: u16, cut: usize, after: usize) -> u16 {
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

// -------------------------------------------------- test bodies both run

/// 3000 events in chunks of 64 KiB: several objects, every event once,
/// keys `logs/${tag}/%Y/%m/%d/%H%M%S-${chunk_id}.json` with the first
/// event's time, one object per chunk id, JSON lines' Content-Type.
/// `extra`: more output options (a storage class); returns what is stored
/// for the caller's own checks.
pub fn every_event_once_under_keys_from_the_template(
    s: &dyn Store,
    name: &str,
    extra: &str,
) -> Stored {
    let bucket = s.bucket(name);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = config_for(s, port, &bucket, extra, "chunk_limit_size = \"64KiB\"");
    let mut d = Daemon::start(dir.path(), "objects", &cfg, None);
    d.wait_port(port);
    send_acked_to(port, "app.web", 0..3000);
    let st = wait_events_of(&d, s, &bucket, 3000);
    assert_exact_seqs(&st.seqs(), 3000);
    // 3000 events of ~100 bytes of JSON in chunks of 64 KiB: several objects.
    assert!(st.objects.len() > 1, "{} objects", st.objects.len());
    for o in &st.objects {
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
    }
    st.assert_one_object_per_chunk();
    assert!(d.terminate().success(), "{}", d.stderr());
    st
}

/// gzip (JSON), zstd (msgpack, a key of tag, hostname and chunk id) and
/// raw messages (single_value), each into a bucket of its own, read back
/// and decompressed by the reader.
pub fn gzip_zstd_msgpack_and_raw_messages(s: &dyn Store, prefix: &str) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let (gz, zst, raw) = (
        s.bucket(&format!("{prefix}-gzip")),
        s.bucket(&format!("{prefix}-zstd")),
        s.bucket(&format!("{prefix}-raw")),
    );
    let ty = s.output_type();
    let (tgz, tzst, traw) = (s.target(&gz), s.target(&zst), s.target(&raw));
    let cfg = format!(
        r#"
[[input]]
type = "forward"
bind = "127.0.0.1:{port}"

[[output]]
type = "{ty}"
match = "c.gz"
{tgz}
compression = "gzip"
[output.buffer]
flush_interval = "200ms"

[[output]]
type = "{ty}"
match = "c.zst"
{tzst}
compression = "zstd"
format = "msgpack"
key = "${{tag}}/${{hostname}}/${{chunk_id}}${{ext}}"
[output.buffer]
flush_interval = "200ms"

[[output]]
type = "{ty}"
match = "c.raw"
{traw}
format = "single_value"
[output.buffer]
flush_interval = "200ms"
"#
    );
    let mut d = Daemon::start(dir.path(), "formats", &cfg, None);
    d.wait_port(port);
    // Chunk ids of their own per tag: the forward input drops a chunk id
    // it has seen as a re-send.
    let mut sender = Sender::tcp(port);
    for tag in ["c.gz", "c.zst", "c.raw"] {
        sender.send_acked(tag, 0..500, 50, tag);
    }
    sender.finish();
    let st = wait_events_of(&d, s, &gz, 500);
    assert_exact_seqs(&st.seqs(), 500);
    assert!(st
        .objects
        .iter()
        .all(|o| o.key.ends_with(".json.gz") && o.content_type == "application/gzip"));
    let st = wait_events_of(&d, s, &zst, 500);
    assert_exact_seqs(&st.seqs(), 500);
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    for o in &st.objects {
        assert!(
            o.key.starts_with(&format!("c.zst/{host}/"))
                && o.key.ends_with(".msgpack.zst")
                && o.content_type == "application/zstd",
            "{} {}",
            o.key,
            o.content_type
        );
    }
    let st = wait_events_of(&d, s, &raw, 500);
    assert_exact_seqs(&st.seqs(), 500);
    assert!(st.objects.iter().all(|o| o.key.ends_with(".log")));
    assert!(d.terminate().success(), "{}", d.stderr());
}

/// One chunk of ~6.6 MiB of JSON with `part_size` 5MiB: one object, sent
/// in two parts (the caller checks how its server shows them).
pub fn a_chunk_over_the_part_size(s: &dyn Store, name: &str) -> Stored {
    let bucket = s.bucket(name);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    // Sent in well under flush_interval, so one chunk holds it all.
    let cfg = config_for(
        s,
        port,
        &bucket,
        "part_size = \"5MiB\"\nupload_concurrency = 2\n",
        "chunk_limit_size = \"64MiB\"\nflush_interval = \"3s\"",
    );
    let mut d = Daemon::start(dir.path(), "multipart", &cfg, None);
    d.wait_port(port);
    let pad = "x".repeat(1000);
    let n = 6000u64;
    let mut sender = Sender::tcp(port);
    for f in 0..n / 500 {
        sender.raw(&padded_frame("big", f * 500..f * 500 + 500, &pad));
    }
    sender.finish();
    let st = wait_events_of(&d, s, &bucket, n as usize);
    assert_exact_seqs(&st.seqs(), n);
    assert_eq!(st.objects.len(), 1, "one chunk, one object");
    assert!(st.objects[0].body.len() > 5 << 20);
    assert_eq!(st.uploads, 0, "no upload left open");
    assert!(d.terminate().success(), "{}", d.stderr());
    st
}

/// Wrong keys (`wrong`: the target with a wrong secret): a clear error
/// naming the place, what the server said (`code`) and the options to
/// check (`hint`), nothing stored, the events kept; a reload with the
/// right keys delivers them.
pub fn wrong_keys_then_a_reload(s: &dyn Store, name: &str, wrong: &str, code: &str, hint: &str) {
    let bucket = s.bucket(name);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let ty = s.output_type();
    let cfg = config(port, ty, wrong, "", "");
    let mut d = Daemon::start(dir.path(), "keys", &cfg, None);
    d.wait_port(port);
    send_acked_to(port, "sec", 0..200);
    let line = d.wait_log(code);
    let port_text = format!("127.0.0.1:{}", s.port());
    for want in [
        &format!("{bucket:?}"),
        port_text.as_str(),
        "access denied",
        hint,
        "will retry",
    ] {
        assert!(line.contains(want), "{want:?} not in {line}");
    }
    assert!(s.read(&bucket).objects.is_empty());
    // The events wait in the buffer; a reload with the right keys keeps
    // the buffer and delivers them.
    std::fs::write(&d.config, config_for(s, port, &bucket, "", "")).unwrap();
    d.signal(libc::SIGHUP);
    d.wait_log("configuration reloaded");
    let st = wait_events_of(&d, s, &bucket, 200);
    assert_exact_seqs(&st.seqs(), 200);
    assert!(d.terminate().success(), "{}", d.stderr());
}

/// A bucket (container) that does not exist: a clear error (`code`, "does
/// not exist"), the events wait and go in once it is created.
pub fn a_missing_bucket_waits(s: &dyn Store, name: &str, code: &str) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = config_for(s, port, name, "", "");
    let mut d = Daemon::start(dir.path(), "missing", &cfg, None);
    d.wait_port(port);
    send_acked_to(port, "nb", 0..100);
    let line = d.wait_log(code);
    assert!(
        line.contains(name)
            && line.contains("does not exist")
            && line.contains(&format!("127.0.0.1:{}", s.port())),
        "{line}"
    );
    s.bucket(name);
    let st = wait_events_of(&d, s, name, 100);
    assert_exact_seqs(&st.seqs(), 100);
    assert!(d.terminate().success(), "{}", d.stderr());
}

/// The server stopped while chunks go up under an acked load (file
/// buffer), then started again: every acked event once, one object per
/// chunk. `s` is a server of the test's own.
pub fn the_server_stopped_and_restarted_under_load(s: &mut dyn Store, dir: &Path) {
    let bucket = s.bucket("restart");
    let port = free_port();
    let buffer = format!(
        "type = \"file\"\npath = \"{}\"\nchunk_limit_size = \"16KiB\"",
        dir.join("buf").display()
    );
    let cfg = config_for(s, port, &bucket, "", &buffer);
    let mut d = Daemon::start(dir, "restart", &cfg, None);
    d.wait_port(port);
    let stop = Arc::new(Mutex::new(false));
    let load = acked_load(port, "rs", stop.clone());
    wait_until(WAIT, "some objects", || !s.read(&bucket).objects.is_empty());
    // Stopped while chunks go up; the load goes on into the buffer.
    s.kill();
    d.wait_log("will retry");
    s.restart();
    wait_until(WAIT * 2, "objects again", || {
        s.read(&bucket).objects.len() > 2
    });
    *stop.lock().unwrap() = true;
    let acked = load.join().unwrap();
    let st = wait_events_of(&d, s, &bucket, acked.len());
    assert!(d.terminate().success(), "{}", d.stderr());
    assert_exact_seqs(&st.seqs(), acked.len() as u64);
    st.assert_one_object_per_chunk();
}

/// kill -9 of nagare (file buffer) under an acked load, restarted: every
/// acked event once across the objects, one object per chunk id.
/// `target`: the output's lines for `bucket` (made by the caller: keys
/// from elsewhere); `extra`: more output options (gathering); `chunk`:
/// buffer lines.
pub fn kill_9_under_acked_load(
    s: &dyn Store,
    bucket: &str,
    target: &str,
    extra: &str,
    chunk: &str,
) -> Stored {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let buffer = format!(
        "type = \"file\"\npath = \"{}\"\n{chunk}",
        dir.path().join("buf").display()
    );
    let cfg = config(port, s.output_type(), target, extra, &buffer);
    let mut d = Daemon::start(dir.path(), "kill9", &cfg, None);
    d.wait_port(port);
    let stop = Arc::new(Mutex::new(false));
    let load = acked_load(port, "k9", stop.clone());
    wait_until(WAIT, "some objects", || s.read(bucket).objects.len() >= 2);
    d.signal(libc::SIGKILL);
    d.wait_exit(WAIT);
    let mut d = Daemon::start(dir.path(), "kill9", &cfg, None);
    d.wait_port(port);
    let before = s.read(bucket).objects.len();
    wait_until(WAIT, "more objects after the restart", || {
        s.read(bucket).objects.len() > before + 2
    });
    *stop.lock().unwrap() = true;
    let acked = load.join().unwrap();
    let st = wait_events_of(&d, s, bucket, acked.len());
    assert!(d.terminate().success(), "{}", d.stderr());
    assert_exact_seqs(&st.seqs(), acked.len() as u64);
    st.assert_one_object_per_chunk();
    st
}

/// `total_file_size` closes an object at that size (the buffer's chunk):
/// 60 batches of 50 go into a few objects, each but the last full, every
/// event once; `upload_timeout` of an hour keeps the last one staged until
/// nagare stops, which writes it.
pub fn total_file_size_gathers(s: &dyn Store, name: &str) {
    let bucket = s.bucket(name);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = config_for(
        s,
        port,
        &bucket,
        "total_file_size = \"32KiB\"\nupload_timeout = \"1h\"\n",
        "",
    );
    let mut d = Daemon::start(dir.path(), "size", &cfg, None);
    d.wait_port(port);
    send_acked_to(port, "app.size", 0..3000);
    // The full objects go up while the last one waits for its hour.
    wait_until(WAIT * 3, "objects closed by size", || {
        s.read(&bucket).objects.len() >= 3
    });
    assert!(d.terminate().success(), "{}", d.stderr());
    let st = s.read(&bucket);
    assert_exact_seqs(&st.seqs(), 3000);
    let mut per = events_per_object(&st);
    per.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    // Gathered: far fewer objects than the 60 batches, and one per chunk.
    assert!(per.len() >= 3 && per.len() < 20, "{per:?}");
    st.assert_one_object_per_chunk();
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
pub fn upload_timeout_gathers(s: &dyn Store, name: &str) {
    let bucket = s.bucket(name);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = config_for(
        s,
        port,
        &bucket,
        "total_file_size = \"64MiB\"\nupload_timeout = \"2s\"\n",
        "",
    );
    let mut d = Daemon::start(dir.path(), "time", &cfg, None);
    d.wait_port(port);
    send_acked_to(port, "app.time", 0..500);
    let st = wait_events_of(&d, s, &bucket, 500);
    assert_eq!(st.objects.len(), 1, "{:?}", events_per_object(&st));
    send_acked_to(port, "app.time", 500..1000);
    let st = wait_events_of(&d, s, &bucket, 1000);
    assert!(d.terminate().success(), "{}", d.stderr());
    assert_exact_seqs(&st.seqs(), 1000);
    let mut per = events_per_object(&st);
    per.sort();
    assert_eq!(per.len(), 2, "{per:?}");
    assert!(per.iter().all(|(_, n)| *n == 500), "{per:?}");
}

/// Gathered objects are stored once too: kill -9 of nagare (file buffer)
/// under an acked load, with objects of `total_file_size` and
/// `upload_timeout`, leaves every acked event once across the objects and
/// one object per chunk id.
pub fn kill_9_with_gathered_objects(s: &dyn Store, name: &str) {
    let bucket = s.bucket(name);
    let st = kill_9_under_acked_load(
        s,
        &bucket,
        &s.target(&bucket),
        "total_file_size = \"48KiB\"\nupload_timeout = \"500ms\"\n",
        "",
    );
    // Gathered: batches of 25 events, several per object (how many
    // depends on how fast the acked load goes within upload_timeout).
    let n = st.objects.len();
    let events = st.seqs().len();
    assert!(
        n * 2 * 25 <= events,
        "{n} objects for {events} events in batches of 25"
    );
}

/// A server that closes the first 8 connections 2000 bytes into the
/// request (past the headers, in the body): retried, every event once, one
/// object per chunk.
pub fn a_server_that_closes_mid_body(s: &dyn Store, name: &str) {
    let bucket = s.bucket(name);
    let proxy = cutting_proxy(s.port(), 8, 2000);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    // One chunk of ~20 KB.
    let cfg = config(
        port,
        s.output_type(),
        &s.target_at(&bucket, &format!("http://127.0.0.1:{proxy}")),
        "request_retries = 1\n",
        "flush_interval = \"1s\"",
    );
    let mut d = Daemon::start(dir.path(), "cut", &cfg, None);
    d.wait_port(port);
    send_acked_to(port, "cut", 0..200);
    let line = d.wait_log("will retry");
    assert!(line.contains(&format!("{bucket:?}")), "{line}");
    let st = wait_events_of(&d, s, &bucket, 200);
    assert_exact_seqs(&st.seqs(), 200);
    st.assert_one_object_per_chunk();
    assert!(d.terminate().success(), "{}", d.stderr());
}

/// The example in `section` of docs/outputs-storage.md, run as written,
/// its place swapped by `swap` (pairs of text and replacement) and its
/// forward port, buffer path and upload_timeout swapped for the test's;
/// 300 events end up once in `bucket`, gzip-compressed.
pub fn the_documented_example_runs(
    s: &dyn Store,
    section: &str,
    bucket: &str,
    swap: &[(&str, String)],
    envs: &[(&str, &str)],
) {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/outputs-storage.md"
    ))
    .unwrap();
    let at = doc
        .find(section)
        .unwrap_or_else(|| panic!("the section {section}"));
    let example = doc[at..]
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a toml block in the section");
    let bucket = s.bucket(bucket);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut cfg = example
        .replace("127.0.0.1:24224", &format!("127.0.0.1:{port}"))
        .replace("upload_timeout = \"5m\"", "upload_timeout = \"200ms\"");
    let buf = dir.path().join("buf").display().to_string();
    cfg = regex_free_path(&cfg, "/var/lib/nagare/", &buf);
    for (from, to) in swap {
        assert!(cfg.contains(from), "{from:?} not in the example");
        cfg = cfg.replace(from, to);
    }
    let mut d = Daemon::start_with_env(dir.path(), "example", &cfg, None, envs);
    d.wait_port(port);
    send_acked_to(port, "app.web", 0..300);
    let st = wait_events_of(&d, s, &bucket, 300);
    assert_exact_seqs(&st.seqs(), 300);
    assert!(
        st.objects.iter().all(|o| o.key.ends_with(".gz")),
        "{:?}",
        events_per_object(&st)
    );
    assert!(d.terminate().success(), "{}", d.stderr());
}

/// `text` with the quoted path that starts with `prefix` replaced by `to`.
fn regex_free_path(text: &str, prefix: &str, to: &str) -> String {
    let Some(at) = text.find(prefix) else {
        return text.to_string();
    };
    let end = text[at..].find('"').map_or(text.len(), |e| at + e);
    format!("{}{to}{}", &text[..at], &text[end..])
}
