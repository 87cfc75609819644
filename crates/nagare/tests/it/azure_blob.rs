//! The azure_blob output against Azurite (Microsoft's Azure Storage
//! emulator, MIT; npm `azurite`, installed by scripts/test-all.sh), with
//! the blobs read back by azure-storage-blob (the Azure SDK for Python, a
//! client that is not nagare's; tests/objects/read_azure.py) and compared
//! by content: every seq once, names from the template, one blob per chunk.
//! One Azurite serves the whole test binary (a container per test); the
//! test that stops the server starts its own. The test bodies are the s3
//! output's (objects.rs).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::common::*;
use crate::objects::{self, *};

/// The account Azurite serves (AZURITE_ACCOUNTS) and its key (base64).
const ACCOUNT: &str = "nagare";
const KEY: &str = "bmFnYXJlLXRlc3QtYWNjb3VudC1rZXktMDEyMzQ1Njc4OQ==";
/// Another valid key, not the account's.
const WRONG_KEY: &str = "bm90LXRoZS1hY2NvdW50LWtleS0wMTIzNDU2Nzg5MDEy";

/// Azurite's blob server: NAGARE_AZURITE, the set-up's npm folder
/// (~/.cache/nagare-test/azurite), or PATH.
fn azurite_bin() -> Option<PathBuf> {
    let cached = cache_dir().map(|c| c.join("nagare-test/azurite/node_modules/.bin/azurite-blob"));
    installed_tool("NAGARE_AZURITE", cached, "azurite-blob", "--version")
}

/// Skips (true) without the server or the reader.
fn skip_without_tools() -> bool {
    skip_unless(
        azurite_bin().is_some(),
        "Azurite is not installed (scripts/test-all.sh: npm install azurite@3.37.0 into ~/.cache/nagare-test/azurite)",
    ) || skip_unless(
        objects::python().exists(),
        "no venv with azure-storage-blob at crates/nagare/tests/objects/.venv (scripts/test-all.sh makes it)",
    )
}

/// An Azurite blob server on a free loopback port, its data in `data`;
/// stopped with SIGTERM (it saves its blob list on the way out; a SIGKILL
/// would lose what it had not saved yet, which no client could be blamed
/// for).
struct Azurite {
    proc: Proc,
}

impl Azurite {
    fn start(data: &Path, shared: bool) -> Azurite {
        std::fs::create_dir_all(data).unwrap();
        let dir = data.to_path_buf();
        let proc = Proc::start(
            move |port| {
                let mut c = Command::new(azurite_bin().expect("azurite"));
                c.args(["--blobHost", "127.0.0.1", "--blobPort"])
                    .arg(port.to_string())
                    .arg("--location")
                    .arg(&dir)
                    .args([
                        "--silent",
                        "--disableTelemetry",
                        "--disableProductStyleUrl",
                        "--skipApiVersionCheck",
                    ])
                    .env("AZURITE_ACCOUNTS", format!("{ACCOUNT}:{KEY}"));
                c
            },
            libc::SIGTERM,
            shared,
        );
        Azurite { proc }
    }

    /// The account's Blob service URL (path-style).
    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}/{ACCOUNT}", self.proc.port)
    }

    fn python(&self, what: &str, container: &str) -> Stored {
        read_with(
            "read_azure.py",
            &[&self.endpoint(), ACCOUNT, KEY, what, container],
        )
    }
}

impl Store for Azurite {
    fn output_type(&self) -> &'static str {
        "azure_blob"
    }

    fn port(&self) -> u16 {
        self.proc.port
    }

    fn target_at(&self, container: &str, base: &str) -> String {
        format!(
            "container = \"{container}\"\naccount = \"{ACCOUNT}\"\nendpoint = \"{base}/{ACCOUNT}\"\naccess_key = \"{KEY}\"\n"
        )
    }

    fn bucket(&self, name: &str) -> String {
        let out = Command::new(objects::python())
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/objects/read_azure.py"
            ))
            .args([&self.endpoint(), ACCOUNT, KEY, "create", name])
            .output()
            .expect("run read_azure.py");
        assert!(
            out.status.success(),
            "create {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        name.to_string()
    }

    fn read(&self, container: &str) -> Stored {
        self.python("read", container)
    }

    fn kill(&mut self) {
        self.proc.kill();
    }

    fn restart(&mut self) {
        self.proc.restart();
    }
}

/// The test binary's one Azurite, started by the first test that asks;
/// killed and its folder removed when the process exits.
fn shared() -> Option<&'static Azurite> {
    static SERVER: OnceLock<Azurite> = OnceLock::new();
    shared_server(&SERVER, !skip_without_tools(), |data| {
        Azurite::start(data, true)
    })
}

#[test]
fn every_event_is_stored_once_under_names_from_the_template() {
    let Some(a) = shared() else { return };
    let st = objects::every_event_once_under_keys_from_the_template(
        a,
        "keys",
        "access_tier = \"Cool\"\n",
    );
    // Put whole (no blocks), in the tier asked for.
    for o in &st.objects {
        assert_eq!(
            (o.storage_class.as_str(), o.blocks),
            ("Cool", 0),
            "{}",
            o.key
        );
    }
}

#[test]
fn gzip_zstd_msgpack_and_raw_messages_read_back_by_the_azure_sdk() {
    let Some(a) = shared() else { return };
    objects::gzip_zstd_msgpack_and_raw_messages(a, "blobs");
}

#[test]
fn a_chunk_over_the_part_size_goes_up_in_blocks() {
    let Some(a) = shared() else { return };
    let st = objects::a_chunk_over_the_part_size(a, "blocks");
    // Put Block twice (5 MiB and the rest), then Put Block List.
    assert_eq!(st.objects[0].blocks, 2, "committed blocks");
}

#[test]
fn a_wrong_key_is_a_clear_error_and_a_reload_with_the_right_one_delivers() {
    let Some(a) = shared() else { return };
    let wrong = a.target("wrong-key").replace(KEY, WRONG_KEY);
    // Azurite's code for a signature that does not match (Azure's own
    // service says AuthenticationFailed); 403 either way.
    objects::wrong_keys_then_a_reload(
        a,
        "wrong-key",
        &wrong,
        "AuthorizationFailure",
        "access_key or sas_token",
    );
}

/// A shared access signature instead of the account's key: one with
/// write and create permissions stores every event once; one with read
/// permission only is refused (403, access denied, events kept).
#[test]
fn a_sas_token_signs_instead_of_the_key() {
    let Some(a) = shared() else { return };
    let container = a.bucket("sas");
    let sas = |perms: &str| {
        let out = Command::new(objects::python())
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/objects/read_azure.py"
            ))
            .args([&a.endpoint(), ACCOUNT, KEY, "sas", &container, perms])
            .output()
            .expect("run read_azure.py");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let target = |token: &str| {
        format!(
            "container = \"{container}\"\naccount = \"{ACCOUNT}\"\nendpoint = \"{}\"\nsas_token = \"?{token}\"\n",
            a.endpoint()
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = objects::config(port, "azure_blob", &target(&sas("r")), "", "");
    let mut d = Daemon::start(dir.path(), "sas", &cfg, None);
    d.wait_port(port);
    send_acked_to(port, "sas", 0..300);
    let line = d.wait_log("access denied");
    assert!(
        line.contains("will retry") && line.contains("sas_token"),
        "{line}"
    );
    assert!(a.read(&container).objects.is_empty());
    std::fs::write(
        &d.config,
        objects::config(port, "azure_blob", &target(&sas("wc")), "", ""),
    )
    .unwrap();
    d.signal(libc::SIGHUP);
    d.wait_log("configuration reloaded");
    let st = wait_events_of(&d, a, &container, 300);
    assert_exact_seqs(&st.seqs(), 300);
    st.assert_one_object_per_chunk();
    assert!(d.terminate().success(), "{}", d.stderr());
}

#[test]
fn a_container_that_does_not_exist_is_a_clear_error_and_events_wait_for_it() {
    let Some(a) = shared() else { return };
    objects::a_missing_bucket_waits(a, "not-yet", "ContainerNotFound");
}

#[test]
fn the_server_stopped_and_restarted_under_load_loses_and_duplicates_nothing() {
    if skip_without_tools() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut a = Azurite::start(&dir.path().join("data"), false);
    objects::the_server_stopped_and_restarted_under_load(&mut a, dir.path());
}

#[test]
fn kill_9_of_nagare_with_a_file_buffer_stores_every_acked_event_once() {
    let Some(a) = shared() else { return };
    let container = a.bucket("kill9");
    objects::kill_9_under_acked_load(
        a,
        &container,
        &a.target(&container),
        "",
        "chunk_limit_size = \"16KiB\"",
    );
}

#[test]
fn total_file_size_gathers_batches_into_blobs_of_that_size() {
    let Some(a) = shared() else { return };
    objects::total_file_size_gathers(a, "gather-size");
}

#[test]
fn upload_timeout_gathers_what_comes_within_it_into_one_blob() {
    let Some(a) = shared() else { return };
    objects::upload_timeout_gathers(a, "gather-time");
}

#[test]
fn kill_9_with_gathered_blobs_stores_every_acked_event_once() {
    let Some(a) = shared() else { return };
    objects::kill_9_with_gathered_objects(a, "gather-kill9");
}

#[test]
fn a_server_that_closes_mid_body_is_retried_and_stores_each_chunk_once() {
    let Some(a) = shared() else { return };
    objects::a_server_that_closes_mid_body(a, "cut-mid-body");
}

/// The example of docs/outputs-storage.md's azure_blob section, run as
/// written (its endpoint, forward port, buffer path and upload_timeout
/// swapped for the test's), with the account's key from the environment
/// as the docs say.
#[test]
fn the_documented_example_runs() {
    let Some(a) = shared() else { return };
    objects::the_documented_example_runs(
        a,
        "## `azure_blob`",
        "logs",
        &[
            ("http://127.0.0.1:10000/devstoreaccount1", a.endpoint()),
            (
                "account = \"devstoreaccount1\"",
                format!("account = \"{ACCOUNT}\""),
            ),
        ],
        &[("AZURE_STORAGE_ACCOUNT_KEY", KEY)],
    );
}

/// `nagare check` names the key and says what is wrong; no server needed.
#[test]
fn bad_options_are_clear_errors_at_check() {
    let dir = tempfile::tempdir().unwrap();
    let az = |extra: &str| {
        format!(
            "[[output]]\ntype = \"azure_blob\"\nmatch = \"**\"\ncontainer = \"c\"\naccount = \"a\"\n{extra}\n"
        )
    };
    let cases = [
        (
            az("key = \"a/${tga}\""),
            ":10: key `key`:".to_string(),
            "\"${tga}\" is not a placeholder".to_string(),
        ),
        (
            az("part_size = \"512KiB\""),
            ":10: key `part_size`:".into(),
            "from 1MiB to 4000MiB".into(),
        ),
        (
            az("access_tier = \"Warm\""),
            ":10: key `access_tier`:".into(),
            "not an access tier".into(),
        ),
        (
            az("access_key = \"not base64!\""),
            ":10: key `access_key`:".into(),
            "is not base64".into(),
        ),
        (
            az("access_key = \"AAAA\"\nsas_token = \"sv=1\""),
            ":11: key `sas_token`:".into(),
            "not both".into(),
        ),
        (
            az("endpoint = \"http://h:1/a\"\n[output.tls]\nca = \"/x\""),
            ":11: key `tls`:".into(),
            "the endpoint is http://".into(),
        ),
        (
            az("total_file_size = \"1MiB\"\n[output.buffer]\nchunk_limit_size = \"1MiB\""),
            ":12: key `buffer.chunk_limit_size`:".into(),
            "`total_file_size` of this output sets the buffer's chunk_limit_size: write one of them".into(),
        ),
        (
            "[[output]]\ntype = \"azure_blob\"\nmatch = \"**\"\ncontainer = \"c\"\n".into(),
            ":5: key `account`:".into(),
            "AZURE_STORAGE_ACCOUNT_NAME".into(),
        ),
    ];
    assert_check_errors(dir.path(), CHECK_BASE, &cases);
}
