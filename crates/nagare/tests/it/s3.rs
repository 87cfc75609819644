//! The s3 output against a real S3 server, versitygw (Apache-2.0, `go
//! install`ed by scripts/test-all.sh), with the objects read back by boto3
//! (a client that is not nagare's; tests/objects/read_s3.py in the venv
//! next to tests/objects/requirements.txt) and compared by content: every
//! seq once, keys from the template, one object per chunk. One versitygw
//! serves the whole test binary (a bucket per test); the tests that stop
//! or fill the server start their own. The test bodies the azure_blob
//! output runs too are in objects.rs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::common::*;
use crate::objects::{self, *};

const ACCESS: &str = "nagare-test";
const SECRET: &str = "nagare-secret";

/// The versitygw binary: NAGARE_VERSITYGW, the set-up's GOBIN
/// (~/.cache/nagare-go/bin), or PATH.
fn versitygw_bin() -> Option<PathBuf> {
    let cached = cache_dir().map(|c| c.join("nagare-go/bin/versitygw"));
    installed_tool("NAGARE_VERSITYGW", cached, "versitygw", "--version")
}

/// Skips (true) without the server or the reader.
fn skip_without_tools() -> bool {
    skip_unless(
        versitygw_bin().is_some(),
        "versitygw is not installed (scripts/test-all.sh: go install github.com/versity/versitygw/cmd/versitygw@v1.8.0)",
    ) || skip_unless(
        objects::python().exists(),
        "no venv with boto3 at crates/nagare/tests/objects/.venv (scripts/test-all.sh makes it)",
    )
}

/// A versitygw on a free loopback port, serving the folders of `data` as
/// buckets (posix backend); killed on drop.
struct Versity {
    proc: Proc,
    data: PathBuf,
}

impl Versity {
    fn start(data: &Path, shared: bool) -> Versity {
        std::fs::create_dir_all(data).unwrap();
        let dir = data.to_path_buf();
        let proc = Proc::start(
            move |port| {
                let mut c = Command::new(versitygw_bin().expect("versitygw"));
                c.args(["--access", ACCESS, "--secret", SECRET, "--port"])
                    .arg(format!("127.0.0.1:{port}"))
                    .arg("posix")
                    .arg(&dir);
                c
            },
            libc::SIGKILL,
            shared,
        );
        Versity {
            proc,
            data: data.to_path_buf(),
        }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.proc.port)
    }
}

impl Store for Versity {
    fn output_type(&self) -> &'static str {
        "s3"
    }

    fn port(&self) -> u16 {
        self.proc.port
    }

    fn target_at(&self, bucket: &str, base: &str) -> String {
        format!("bucket = \"{bucket}\"\nendpoint = \"{base}\"\n{KEYS}")
    }

    /// A new bucket (a folder of the posix backend).
    fn bucket(&self, name: &str) -> String {
        std::fs::create_dir_all(self.data.join(name)).unwrap();
        name.to_string()
    }

    fn read(&self, bucket: &str) -> Stored {
        read_with("read_s3.py", &[&self.endpoint(), ACCESS, SECRET, bucket])
    }

    fn kill(&mut self) {
        self.proc.kill();
    }

    fn restart(&mut self) {
        self.proc.restart();
    }
}

/// The test binary's one versitygw, started by the first test that asks;
/// killed and its folder removed when the process exits.
fn shared() -> Option<&'static Versity> {
    static SERVER: OnceLock<Versity> = OnceLock::new();
    shared_server(&SERVER, !skip_without_tools(), |data| {
        Versity::start(data, true)
    })
}

const KEYS: &str = "access_key_id = \"nagare-test\"\nsecret_access_key = \"nagare-secret\"\n";

#[test]
fn every_event_is_stored_once_under_keys_from_the_template() {
    let Some(v) = shared() else { return };
    let st = objects::every_event_once_under_keys_from_the_template(
        v,
        "keys",
        "storage_class = \"STANDARD\"\n",
    );
    assert!(st.objects.iter().all(|o| o.storage_class == "STANDARD"));
}

#[test]
fn gzip_zstd_msgpack_and_raw_messages_read_back_by_boto3() {
    let Some(v) = shared() else { return };
    objects::gzip_zstd_msgpack_and_raw_messages(v, "objects");
}

#[test]
fn a_chunk_over_the_part_size_goes_up_in_parts() {
    let Some(v) = shared() else { return };
    let st = objects::a_chunk_over_the_part_size(v, "multipart");
    // A multipart object's ETag is the MD5 of its parts' MD5s, then "-<parts>".
    assert!(
        st.objects[0].etag.ends_with("-2"),
        "etag {}",
        st.objects[0].etag
    );
}

#[test]
fn a_wrong_secret_is_a_clear_error_and_a_reload_with_the_right_one_delivers() {
    let Some(v) = shared() else { return };
    let wrong = v.target("secret").replace(SECRET, "not-the-secret");
    objects::wrong_keys_then_a_reload(
        v,
        "secret",
        &wrong,
        "SignatureDoesNotMatch",
        "secret_access_key",
    );
}

#[test]
fn a_bucket_that_does_not_exist_is_a_clear_error_and_events_wait_for_it() {
    let Some(v) = shared() else { return };
    objects::a_missing_bucket_waits(v, "not-yet", "NoSuchBucket");
}

#[test]
fn the_server_killed_and_restarted_under_load_loses_and_duplicates_nothing() {
    if skip_without_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut v = Versity::start(&dir.path().join("data"), false);
    objects::the_server_stopped_and_restarted_under_load(&mut v, dir.path());
}

#[test]
fn kill_9_of_nagare_with_a_file_buffer_stores_every_acked_event_once() {
    let Some(v) = shared() else { return };
    let bucket = v.bucket("kill9");
    let dir = tempfile::tempdir().unwrap();
    // Keys from a credentials file's profile this time.
    let creds = dir.path().join("credentials");
    std::fs::write(
        &creds,
        format!("[default]\naws_access_key_id = x\naws_secret_access_key = y\n\n[test]\naws_access_key_id = {ACCESS}\naws_secret_access_key = {SECRET}\n"),
    )
    .unwrap();
    let target = format!(
        "bucket = \"{bucket}\"\nendpoint = \"{}\"\ncredentials_file = \"{}\"\nprofile = \"test\"\n",
        v.endpoint(),
        creds.display()
    );
    objects::kill_9_under_acked_load(v, &bucket, &target, "", "chunk_limit_size = \"16KiB\"");
}

#[test]
fn total_file_size_gathers_batches_into_objects_of_that_size() {
    let Some(v) = shared() else { return };
    objects::total_file_size_gathers(v, "gather-size");
}

#[test]
fn upload_timeout_gathers_what_comes_within_it_into_one_object() {
    let Some(v) = shared() else { return };
    objects::upload_timeout_gathers(v, "gather-time");
}

#[test]
fn kill_9_with_gathered_objects_stores_every_acked_event_once() {
    let Some(v) = shared() else { return };
    objects::kill_9_with_gathered_objects(v, "gather-kill9");
}

#[test]
fn a_server_that_closes_mid_body_is_retried_and_stores_each_chunk_once() {
    let Some(v) = shared() else { return };
    objects::a_server_that_closes_mid_body(v, "cut-mid-body");
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
    let v = Versity::start(&data, false);
    let bucket = v.bucket("full");
    let port = free_port();
    let cfg = config_for(&v, port, &bucket, "", "chunk_limit_size = \"256KiB\"");
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
    let st = wait_events_of(&d, &v, &bucket, n as usize);
    assert_exact_seqs(&st.seqs(), n);
    assert!(d.terminate().success(), "{}", d.stderr());
}

/// The example of docs/outputs-storage.md's s3 section, run as written
/// (its server address, forward port, buffer path and upload_timeout
/// swapped for the test's), with the keys from the environment as the docs
/// say.
#[test]
fn the_documented_example_runs() {
    let Some(v) = shared() else { return };
    objects::the_documented_example_runs(
        v,
        "## `s3`",
        "logs",
        &[("http://127.0.0.1:7070", v.endpoint())],
        &[
            ("AWS_ACCESS_KEY_ID", ACCESS),
            ("AWS_SECRET_ACCESS_KEY", SECRET),
        ],
    );
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
