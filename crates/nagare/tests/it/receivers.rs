//! The receivers for senders users already run, end to end, each with a
//! client that is not nagare's code:
//!
//! - the `elasticsearch` input with Elasticsearch's and OpenSearch's Python
//!   clients (`helpers.bulk`, gzip too) and curl for bad requests;
//! - the `beats` input with elastic/go-lumber's client (the one Beats'
//!   `output.logstash` is built on), plain, compressed and over TLS, and
//!   hand-made frames for bad input;
//! - the `splunk_hec` input with the splunk-data-sender HEC client (events,
//!   gzip, channels, indexer acknowledgements) and curl (raw, tokens, bad
//!   requests).
//!
//! The Python packages live in a venv next to tests/receivers/requirements.txt,
//! which scripts/test-all.sh makes.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nagare_forward::EventTime;

use crate::common::*;

/// The venv's python, or None (the test skips) when it is not made.
fn venv_python() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/receivers/.venv/bin/python");
    let made = p.exists();
    if skip_unless(
        made,
        "no venv with the Elasticsearch/OpenSearch clients at crates/nagare/tests/receivers/.venv (scripts/test-all.sh makes it)",
    ) {
        return None;
    }
    Some(p)
}

/// nagare with a monitor, an input of `kind` (plus `extra` options) and a
/// forward output to `sink`.
fn input_to_sink(dir: &Path, kind: &str, extra: &str, sink: u16) -> (Daemon, u16) {
    let (port, mon) = (free_port(), free_port());
    let config = format!(
        "[monitor]\nbind = \"127.0.0.1:{mon}\"\n\n[[input]]\ntype = \"{kind}\"\nbind = \"127.0.0.1:{port}\"\n{extra}\n\
         [[output]]\ntype = \"forward\"\nmatch = \"**\"\n[[output.server]]\naddress = \"127.0.0.1:{sink}\"\n\
         [output.buffer]\nflush_interval = \"50ms\"\n"
    );
    let mut d = Daemon::start(dir, "nagare", &config, Some(mon));
    d.wait_port(port);
    (d, port)
}

fn run_python(python: &Path, script: &str, args: &[&str]) -> String {
    let out = Command::new(python)
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

// ------------------------------------------------------------ elasticsearch

/// Sends N documents with Elasticsearch's Python client: `info()` (the
/// version check), then `helpers.bulk` in chunks of 100, gzip-compressed
/// when argv[4] is "gzip"; the odd ones with an `_id`, every 7th as
/// `create`. Prints the version and helpers.bulk's count of successes.
const ES_SENDER: &str = r#"
import sys
from elasticsearch import Elasticsearch, helpers
url, index, n, comp = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "gzip"
es = Elasticsearch(url, http_compress=comp, request_timeout=20)
version = es.info()["version"]["number"]
assert es.ping()
def docs():
    for i in range(n):
        d = {"_index": index, "_source": {"seq": i, "message": "log line %d" % i, "nested": {"k": [i, "x"]}}}
        if i % 2:
            d["_id"] = "doc-%d" % i
        if i % 7 == 0:
            d["_op_type"] = "create"
        yield d
ok, errors = helpers.bulk(es, docs(), chunk_size=100)
print(version, ok, len(errors))
"#;

/// The same with OpenSearch's Python client.
const OPENSEARCH_SENDER: &str = r#"
import sys
from opensearchpy import OpenSearch, helpers
url, index, n, comp = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "gzip"
client = OpenSearch(hosts=[url], http_compress=comp, timeout=20)
version = client.info()["version"]["number"]
def docs():
    for i in range(n):
        yield {"_index": index, "_source": {"seq": i, "message": "log line %d" % i, "@timestamp": "2024-05-01T10:00:%02dZ" % (i % 60)}}
ok, errors = helpers.bulk(client, docs(), chunk_size=50)
print(version, ok, len(errors))
"#;

/// The records at the sink of tag `tag`, in order.
fn records_of(sink: &Sink, tag: &str) -> Vec<(EventTime, rmpv::Value)> {
    sink.records()
        .into_iter()
        .filter(|(t, _, _)| t == tag)
        .map(|(_, time, r)| (time, r))
        .collect()
}

#[test]
fn elasticsearch_and_opensearch_clients_bulk_documents() {
    let Some(python) = venv_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let (_d, port) = input_to_sink(dir.path(), "elasticsearch", "id_key = \"_id\"", sink.port);
    let url = format!("http://127.0.0.1:{port}");
    let n = 1000;
    let out = run_python(
        &python,
        ES_SENDER,
        &[&url, "app-logs", &n.to_string(), "plain"],
    );
    assert_eq!(out.trim(), format!("8.17.0 {n} 0"));
    let out = run_python(
        &python,
        ES_SENDER,
        &[&url, "app-gzip", &n.to_string(), "gzip"],
    );
    assert_eq!(out.trim(), format!("8.17.0 {n} 0"));
    let out = run_python(
        &python,
        OPENSEARCH_SENDER,
        &[&url, "os-logs", "300", "gzip"],
    );
    assert_eq!(out.trim(), "8.17.0 300 0");
    sink.wait_records(2 * n + 300);
    assert_eq!(sink.records().len(), 2 * n + 300);
    for tag in ["es.app-logs", "es.app-gzip"] {
        let recs = records_of(&sink, tag);
        assert_eq!(recs.len(), n, "{tag}");
        for (i, (t, r)) in recs.iter().enumerate() {
            assert_eq!(seq_of(r), i as u64, "{tag}: order");
            assert_eq!(
                field_of(r, "message").and_then(|v| v.as_str()),
                Some(format!("log line {i}").as_str())
            );
            let nested = field_of(r, "nested").unwrap();
            let k = field_of(nested, "k").unwrap().as_array().unwrap();
            assert_eq!(k[0].as_u64(), Some(i as u64));
            let id = field_of(r, "_id").and_then(|v| v.as_str()).unwrap();
            if i % 2 == 1 {
                assert_eq!(id, format!("doc-{i}"));
            } else {
                assert_eq!(id.len(), 20);
            }
            // No @timestamp: the time of arrival.
            assert!(t.secs > 1_700_000_000);
        }
    }
    let recs = records_of(&sink, "es.os-logs");
    assert_eq!(recs.len(), 300);
    for (i, (t, r)) in recs.iter().enumerate() {
        assert_eq!(seq_of(r), i as u64);
        // The event time is @timestamp's, which stays in the record.
        assert_eq!(t.secs, 1_714_557_600 + (i % 60) as u32);
        assert!(field_of(r, "@timestamp").is_some());
    }
}

fn curl(args: &[&str], body: &[u8]) -> (u16, String) {
    let mut child = Command::new("curl")
        .args(["-sS", "--max-time", "20", "-o", "-", "-w", "\n%{http_code}"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run curl");
    child.stdin.take().unwrap().write_all(body).unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (code.trim().parse().unwrap(), body.to_string())
}

fn bulk(port: u16, path: &str, body: &[u8]) -> (u16, serde_json::Value) {
    let (code, text) = curl(
        &[
            "-H",
            "Content-Type: application/x-ndjson",
            "--data-binary",
            "@-",
            &format!("http://127.0.0.1:{port}{path}"),
        ],
        body,
    );
    (
        code,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    )
}

#[test]
fn elasticsearch_answers_setup_calls_per_item_results_and_bad_requests() {
    if skip_unless(
        Command::new("curl").arg("--version").output().is_ok(),
        "curl is not installed",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let (d, port) = input_to_sink(
        dir.path(),
        "elasticsearch",
        "tag = \"bulk\"\nindex_key = \"index\"\nmax_body_size = \"4KiB\"\nheader_timeout = \"1s\"\nbody_timeout = \"1s\"",
        sink.port,
    );
    let base = format!("http://127.0.0.1:{port}");
    // What Beats and clients ask before sending.
    let (code, root) = curl(&[&format!("{base}/")], b"");
    assert_eq!(code, 200);
    let root: serde_json::Value = serde_json::from_str(&root).unwrap();
    assert_eq!(root["version"]["number"], "8.17.0");
    let (code, lic) = curl(&[&format!("{base}/_license?human=false")], b"");
    assert_eq!(code, 200);
    assert!(lic.contains("\"status\":\"active\""), "{lic}");
    assert_eq!(curl(&["-I", &format!("{base}/")], b"").0, 200);
    assert_eq!(
        curl(&["-I", &format!("{base}/_index_template/filebeat-8")], b"").0,
        200
    );
    let (code, put) = curl(
        &[
            "-X",
            "PUT",
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            "@-",
            &format!("{base}/_index_template/filebeat-8"),
        ],
        b"{\"index_patterns\":[\"filebeat-*\"]}",
    );
    assert_eq!((code, put.as_str()), (200, "{\"acknowledged\":true}"));

    // Per-item results: index and create taken, update and delete
    // refused, a document that is not an object refused alone.
    let body = b"{\"index\":{\"_index\":\"a\",\"_id\":\"1\"}}\n{\"seq\":0}\n\
{\"delete\":{\"_index\":\"a\",\"_id\":\"1\"}}\n\
{\"update\":{\"_index\":\"a\",\"_id\":\"1\"}}\n{\"doc\":{\"seq\":9}}\n\
{\"create\":{}}\n{\"seq\":1}\n\
{\"index\":{\"_index\":\"a\"}}\n\"not an object\"\n\
{\"index\":{}}\n{\"seq\":2}\n";
    let (code, answer) = bulk(port, "/path-index/_bulk", body);
    assert_eq!(code, 200, "{answer}");
    assert_eq!(answer["errors"], true);
    let statuses: Vec<(String, u64)> = answer["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let (op, v) = i.as_object().unwrap().iter().next().unwrap();
            (op.clone(), v["status"].as_u64().unwrap())
        })
        .collect();
    let want = [
        ("index", 201),
        ("delete", 400),
        ("update", 400),
        ("create", 201),
        ("index", 400),
        ("index", 201),
    ];
    assert_eq!(
        statuses,
        want.map(|(o, s)| (o.to_string(), s as u64)).to_vec()
    );
    assert_eq!(answer["items"][3]["create"]["_index"], "path-index");
    sink.wait_records(3);
    let recs = records_of(&sink, "bulk");
    let got: Vec<(u64, String)> = recs
        .iter()
        .map(|(_, r)| {
            (
                seq_of(r),
                field_of(r, "index").unwrap().as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (0, "a".to_string()),
            (1, "path-index".to_string()),
            (2, "path-index".to_string())
        ]
    );

    // Bad requests: each refused alone, with a log line naming the peer.
    let (code, e) = bulk(port, "/_bulk", b"{\"index\":{}}\n");
    assert_eq!(code, 400, "{e}");
    let (code, e) = bulk(port, "/_bulk", b"nonsense\n{}\n");
    assert_eq!(
        (code, e["error"]["type"].as_str()),
        (400, Some("illegal_argument_exception"))
    );
    let (code, _) = bulk(port, "/_bulk", &vec![b' '; 5000]);
    assert_eq!(code, 413);
    let (code, _) = curl(
        &[
            "-H",
            "Content-Encoding: gzip",
            "--data-binary",
            "@-",
            &format!("{base}/_bulk"),
        ],
        b"not gzip at all",
    );
    assert_eq!(code, 400);
    // A slow client: headers never finished.
    let mut slow = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let slow_peer = slow.local_addr().unwrap().to_string();
    slow.write_all(b"POST /_bulk HTTP/1.1\r\n").unwrap();
    slow.set_read_timeout(Some(WAIT)).unwrap();
    let mut b = [0u8; 256];
    let n = slow.read(&mut b).unwrap_or(0);
    assert!(!String::from_utf8_lossy(&b[..n]).contains(" 200 "));
    let lines = d.wait_bad_peer(&slow_peer);
    assert!(
        lines.iter().any(|l| l.contains("header_timeout")),
        "{lines:?}"
    );
    // A truncated body: Content-Length promised more than came.
    let mut cut = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let cut_peer = cut.local_addr().unwrap().to_string();
    cut.write_all(b"POST /_bulk HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"index\":{}}\n{\"seq\":")
        .unwrap();
    cut.set_read_timeout(Some(WAIT)).unwrap();
    let n = cut.read(&mut b).unwrap_or(0);
    assert!(String::from_utf8_lossy(&b[..n]).contains(" 408 "));
    d.wait_bad_peer(&cut_peer);
    // Garbage instead of HTTP.
    let mut junk = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let junk_peer = junk.local_addr().unwrap().to_string();
    junk.write_all(b"\x16\x03\x01\x02\x00garbage\r\n\r\n")
        .unwrap();
    d.wait_bad_peer(&junk_peer);

    // The listener goes on: a good request after all of that.
    let (code, answer) = bulk(
        port,
        "/_bulk",
        b"{\"index\":{\"_index\":\"z\"}}\n{\"seq\":3}\n",
    );
    assert_eq!(
        (code, &answer["errors"]),
        (200, &serde_json::Value::Bool(false))
    );
    sink.wait_records(4);
    let seqs: Vec<u64> = records_of(&sink, "bulk")
        .iter()
        .map(|(_, r)| seq_of(r))
        .collect();
    assert_eq!(seqs, vec![0, 1, 2, 3]);
}

/// helpers.streaming_bulk with retries on 429 (the whole request refused
/// while the buffer is full): 60 documents in chunks of 10.
const ES_RETRYING_SENDER: &str = r#"
import sys
from elasticsearch import Elasticsearch, helpers
es = Elasticsearch(sys.argv[1], request_timeout=20)
docs = ({"_index": "full", "_source": {"seq": i, "pad": "x" * 300}} for i in range(60))
n = 0
for ok, info in helpers.streaming_bulk(es, docs, chunk_size=10, max_retries=100, initial_backoff=0.1, max_backoff=0.3):
    assert ok, info
    n += 1
print(n)
"#;

#[test]
fn elasticsearch_answers_429_while_the_buffer_is_full_and_the_client_retries() {
    let Some(python) = venv_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // The sink is down: the output's small buffer fills.
    let (sink_port, port, mon) = (free_port(), free_port(), free_port());
    let config = format!(
        "[monitor]\nbind = \"127.0.0.1:{mon}\"\n\n[[input]]\ntype = \"elasticsearch\"\nbind = \"127.0.0.1:{port}\"\nwait_for_room = \"0s\"\n\n\
         [[output]]\ntype = \"forward\"\nmatch = \"**\"\n[[output.server]]\naddress = \"127.0.0.1:{sink_port}\"\n\
         [output.buffer]\nflush_interval = \"50ms\"\ntotal_limit_size = \"8KiB\"\nchunk_limit_size = \"2KiB\"\nretry_wait = \"100ms\"\nretry_max_interval = \"200ms\"\n"
    );
    let mut d = Daemon::start(dir.path(), "nagare", &config, Some(mon));
    d.wait_port(port);
    let url = format!("http://127.0.0.1:{port}");
    // What a refused request gets, by curl.
    let mut body = String::new();
    for i in 0..20 {
        body.push_str(&format!(
            "{{\"index\":{{\"_index\":\"probe\"}}}}\n{{\"i\":{i},\"pad\":\"{}\"}}\n",
            "y".repeat(300)
        ));
    }
    let (code, answer) = bulk(port, "/_bulk", body.as_bytes());
    assert_eq!(code, 200);
    let (code, answer2) = bulk(port, "/_bulk", body.as_bytes());
    assert_eq!(code, 429, "{answer} {answer2}");
    assert_eq!(answer2["status"], 429);
    assert_eq!(answer2["error"]["type"], "es_rejected_execution_exception");

    let client = Command::new(&python)
        .arg("-c")
        .arg(ES_RETRYING_SENDER)
        .arg(&url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until(WAIT, "the client's request refused with 429", || {
        d.metric("rejected_events_total", "elasticsearch#0") >= 30
    });
    let sink = Sink::start_on(sink_port, SinkOpts::default());
    let out = client.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "60");
    sink.wait_records(80);
    let seqs: Vec<u64> = records_of(&sink, "es.full")
        .iter()
        .map(|(_, r)| seq_of(r))
        .collect();
    assert_exact_seqs(&seqs, 60);
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "order: {seqs:?}");
    assert_eq!(records_of(&sink, "es.probe").len(), 20);
}

// ------------------------------------------------------------ beats

/// elastic/go-lumber's client, built by scripts/test-all.sh (or here, when
/// Go is installed and the binary is missing).
fn lumber() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/receivers/lumber");
    let bin = dir.join("lumber");
    if !bin.exists() {
        let _ = Command::new("go")
            .args(["build", "-o", "lumber", "."])
            .current_dir(&dir)
            .status();
    }
    if skip_unless(
        bin.exists(),
        "no go-lumber sender at crates/nagare/tests/receivers/lumber/lumber (scripts/test-all.sh builds it with Go)",
    ) {
        return None;
    }
    Some(bin)
}

/// Runs the go-lumber sender to completion: its "acked" lines.
fn lumber_send(
    bin: &Path,
    port: u16,
    start: u64,
    n: u64,
    window: u64,
    compress: u32,
    ca: Option<&Path>,
) -> String {
    let mut cmd = Command::new(bin);
    cmd.args([
        "-addr",
        &format!("127.0.0.1:{port}"),
        "-start",
        &start.to_string(),
        "-n",
        &n.to_string(),
        "-window",
        &window.to_string(),
        "-compress",
        &compress.to_string(),
    ]);
    if let Some(ca) = ca {
        cmd.arg("-ca").arg(ca);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "lumber: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn check_beats_records(recs: &[(EventTime, rmpv::Value)], seqs: std::ops::Range<u64>) {
    assert_eq!(recs.len() as u64, seqs.end - seqs.start);
    for ((t, r), seq) in recs.iter().zip(seqs) {
        assert_eq!(seq_of(r), seq, "order");
        assert_eq!(
            field_of(r, "message").and_then(|v| v.as_str()),
            Some(format!("line {seq}").as_str())
        );
        let meta = field_of(r, "@metadata").unwrap();
        assert_eq!(
            field_of(meta, "beat").and_then(|v| v.as_str()),
            Some("filebeat")
        );
        let host = field_of(r, "host").unwrap();
        assert_eq!(
            field_of(host, "name").and_then(|v| v.as_str()),
            Some("web-1")
        );
        assert_eq!(*t, EventTime::new(1_714_557_600 + (seq % 60) as u32, 0));
    }
}

#[test]
fn beats_go_lumber_sends_windows_plain_compressed_and_over_tls() {
    let Some(bin) = lumber() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ca = crate::common::tls::Ca::new(dir.path(), "beats");
    let server = ca.issue("server", &["localhost", "127.0.0.1"]);
    let sink = Sink::start(SinkOpts::default());
    let (port, tls_port, mon) = (free_port(), free_port(), free_port());
    let config = format!(
        "[monitor]\nbind = \"127.0.0.1:{mon}\"\n\n\
         [[input]]\ntype = \"beats\"\nbind = \"127.0.0.1:{port}\"\n\n\
         [[input]]\ntype = \"beats\"\nbind = \"127.0.0.1:{tls_port}\"\ntag = \"beats.tls\"\n{}\n\
         [[output]]\ntype = \"forward\"\nmatch = \"**\"\n[[output.server]]\naddress = \"127.0.0.1:{}\"\n\
         [output.buffer]\nflush_interval = \"50ms\"\n",
        crate::common::tls::tls_table("input", Some(&server), None, ""),
        sink.port
    );
    let mut d = Daemon::start(dir.path(), "nagare", &config, Some(mon));
    d.wait_port(port);
    d.wait_port(tls_port);
    let out = lumber_send(&bin, port, 0, 1000, 100, 0, None);
    assert_eq!(out.lines().count(), 10);
    assert_eq!(out.lines().last(), Some("acked 1000"));
    // Compressed windows of uneven size (the last one short).
    let out = lumber_send(&bin, port, 1000, 1000, 300, 3, None);
    assert_eq!(out.lines().last(), Some("acked 1000"));
    let out = lumber_send(&bin, tls_port, 2000, 500, 64, 5, Some(&ca.path));
    assert_eq!(out.lines().last(), Some("acked 500"));
    sink.wait_records(2500);
    assert_eq!(sink.records().len(), 2500);
    check_beats_records(&records_of(&sink, "beats"), 0..2000);
    check_beats_records(&records_of(&sink, "beats.tls"), 2000..2500);
}

#[test]
fn beats_acks_a_window_only_once_it_is_in_the_buffer() {
    let Some(bin) = lumber() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (port, sink_port) = (free_port(), free_port());
    let config = format!(
        "[[input]]\ntype = \"beats\"\nbind = \"127.0.0.1:{port}\"\n\n\
         [[output]]\ntype = \"forward\"\nmatch = \"**\"\n[[output.server]]\naddress = \"127.0.0.1:{sink_port}\"\n\
         [output.buffer]\ntype = \"file\"\npath = {:?}\nflush_interval = \"100ms\"\nretry_wait = \"100ms\"\nretry_max_interval = \"300ms\"\n",
        dir.path().join("buf")
    );
    // The downstream is down: every acknowledged event can only be on disk.
    let mut d = Daemon::start(dir.path(), "nagare", &config, None);
    d.wait_port(port);
    let out = lumber_send(&bin, port, 0, 600, 50, 1, None);
    assert_eq!(out.lines().last(), Some("acked 600"));
    d.signal(libc::SIGKILL);
    d.wait_exit(WAIT);
    let sink = Sink::start_on(sink_port, SinkOpts::default());
    let mut d = Daemon::start(dir.path(), "nagare", &config, None);
    d.wait_port(port);
    sink.wait_records(600);
    let seqs: Vec<u64> = records_of(&sink, "beats")
        .iter()
        .map(|(_, r)| seq_of(r))
        .collect();
    assert_exact_seqs(&seqs, 600);
}

/// A window-size frame announcing `n` events, then JSON frames for `seqs`.
fn lumber_frames(n: u32, seqs: std::ops::Range<u32>) -> Vec<u8> {
    let mut f = b"2W".to_vec();
    f.extend_from_slice(&n.to_be_bytes());
    for s in seqs {
        let json = format!("{{\"seq\":{s},\"message\":\"m{s}\"}}");
        f.extend_from_slice(b"2J");
        f.extend_from_slice(&(s + 1).to_be_bytes());
        f.extend_from_slice(&(json.len() as u32).to_be_bytes());
        f.extend_from_slice(json.as_bytes());
    }
    f
}

#[test]
fn beats_bad_frames_close_only_their_connection() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let (d, port) = input_to_sink(
        dir.path(),
        "beats",
        "max_frame_size = \"4KiB\"\nwindow_timeout = \"1s\"",
        sink.port,
    );
    // A good connection stays open across the bad ones.
    let mut good = TcpStream::connect(("127.0.0.1", port)).unwrap();
    good.set_read_timeout(Some(WAIT)).unwrap();
    good.write_all(&lumber_frames(2, 0..2)).unwrap();
    let mut ack = [0u8; 6];
    good.read_exact(&mut ack).unwrap();
    assert_eq!(&ack, b"2A\0\0\0\x02");

    let bad = |bytes: &[u8], close_write: bool| {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let peer = s.local_addr().unwrap().to_string();
        s.write_all(bytes).unwrap();
        if close_write {
            s.shutdown(std::net::Shutdown::Write).unwrap();
        }
        let lines = d.wait_bad_peer(&peer);
        // Nothing acknowledged.
        s.set_read_timeout(Some(WAIT)).unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        assert!(rest.is_empty(), "{rest:?}");
        lines.join("\n")
    };
    // Not Lumberjack; v1; an unknown frame type.
    assert!(bad(b"GET / HTTP/1.1\r\n\r\n", false).contains("not Lumberjack v2"));
    assert!(bad(b"1W\0\0\0\x01", false).contains("v1"));
    assert!(bad(b"2Q\0\0", false).contains("unknown"));
    // A data frame larger than max_frame_size.
    let mut big = b"2W\0\0\0\x01\x32J\0\0\0\x01".to_vec();
    big.extend_from_slice(&100_000u32.to_be_bytes());
    assert!(bad(&big, false).contains("max_frame_size"));
    // A compressed frame that does not inflate.
    assert!(bad(b"2W\0\0\0\x01\x32C\0\0\0\x04abcd", false).contains("inflate"));
    // A document that is not JSON.
    assert!(bad(b"2W\0\0\0\x01\x32J\0\0\0\x01\0\0\0\x03{x}", false).contains("data frame 1"));
    // Truncated: the window cut short by the sender's close.
    let mut cut = lumber_frames(3, 0..2);
    cut.extend_from_slice(b"2J\0\0");
    assert!(bad(&cut, true).contains("closed inside a frame"));
    // Slow: a window begun and never finished.
    assert!(bad(&lumber_frames(5, 0..1), false).contains("window_timeout"));

    // The good connection goes on.
    let mut next = b"2W\0\0\0\x01".to_vec();
    next.extend_from_slice(&lumber_frames(1, 2..3)[6..]);
    good.write_all(&next).unwrap();
    good.read_exact(&mut ack).unwrap();
    assert_eq!(&ack, b"2A\0\0\0\x03");
    sink.wait_records(3);
    let seqs: Vec<u64> = sink.records().iter().map(|(_, _, r)| seq_of(r)).collect();
    assert_eq!(seqs, vec![0, 1, 2]);
}

// ------------------------------------------------------------ splunk_hec

/// Sends N events with splunk-data-sender (a HEC client from PyPI):
/// health check, events in batches of 50 (gzip), on a channel in the
/// header, then asks the acks of every batch. Prints the ack ids and the
/// answer of /ack.
const HEC_SENDER: &str = r#"
import json, sys
from splunk_data_sender import SplunkSender
port, token, channel, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
s = SplunkSender(endpoint="127.0.0.1", port=port, token=token, protocol="http",
                 channel=channel, channel_in="header", api_url="collector/event",
                 source="shop", source_type="_json", index="main", allow_overrides=True,
                 max_buf_size=50, compress=True, retry_count=2, timeout=20)
assert s.get_health()
ids = []
for i in range(n):
    r = s.send_data({"event": {"seq": i, "message": "payment %d" % i}, "time": 1714557600 + i % 60 + 0.25, "host": "web-1"})
    if r is not None:
        assert r["code"] == 0, r
        ids.append(r["ackId"])
r = s.flush_buffer()
if r is not None:
    ids.append(r["ackId"])
acks = s.send_acks(ids + [999])
print(json.dumps({"ids": ids, "acks": acks}))
"#;

#[test]
fn splunk_hec_client_sends_events_with_channels_and_acks() {
    let Some(python) = venv_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let (_d, port) = input_to_sink(
        dir.path(),
        "splunk_hec",
        "tokens = [\"11111111-2222-3333-4444-555555555555\", \"other\"]\nindexer_acknowledgement = true",
        sink.port,
    );
    let channel = "0aeeac95-ac74-4aa9-b30d-6c4c0ac581ba";
    let out = run_python(
        &python,
        HEC_SENDER,
        &[
            &port.to_string(),
            "11111111-2222-3333-4444-555555555555",
            channel,
            "230",
        ],
    );
    let out: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(out["ids"], serde_json::json!([0, 1, 2, 3, 4]));
    assert_eq!(
        out["acks"],
        serde_json::json!({"acks": {"0": true, "1": true, "2": true, "3": true, "4": true, "999": false}})
    );
    sink.wait_records(230);
    let recs = records_of(&sink, "splunk.hec");
    assert_eq!(recs.len(), 230);
    for (i, (t, r)) in recs.iter().enumerate() {
        let event = field_of(r, "event").unwrap();
        assert_eq!(seq_of(event), i as u64, "order");
        assert_eq!(
            field_of(event, "message").and_then(|v| v.as_str()),
            Some(format!("payment {i}").as_str())
        );
        assert_eq!(field_of(r, "host").and_then(|v| v.as_str()), Some("web-1"));
        assert_eq!(
            field_of(r, "sourcetype").and_then(|v| v.as_str()),
            Some("_json")
        );
        assert_eq!(field_of(r, "source").and_then(|v| v.as_str()), Some("shop"));
        assert!(field_of(r, "time").is_none());
        assert_eq!(
            *t,
            EventTime::new(1_714_557_600 + (i % 60) as u32, 250_000_000)
        );
    }
}

fn hec(port: u16, path: &str, headers: &[&str], body: &[u8]) -> (u16, serde_json::Value) {
    let mut args: Vec<String> = Vec::new();
    for h in headers {
        args.push("-H".into());
        args.push(h.to_string());
    }
    args.push("--data-binary".into());
    args.push("@-".into());
    args.push(format!("http://127.0.0.1:{port}{path}"));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, text) = curl(&args, body);
    (
        code,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    )
}

#[test]
fn splunk_hec_raw_tokens_and_bad_requests() {
    if skip_unless(
        Command::new("curl").arg("--version").output().is_ok(),
        "curl is not installed",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let (d, port) = input_to_sink(
        dir.path(),
        "splunk_hec",
        "tokens = [\"secret\"]\nmax_body_size = \"4KiB\"\nheader_timeout = \"1s\"",
        sink.port,
    );
    let auth = "Authorization: Splunk secret";
    // Tokens: none, a wrong scheme, a wrong token.
    let (code, a) = hec(port, "/services/collector/event", &[], b"{\"event\":1}");
    assert_eq!((code, &a["code"]), (401, &serde_json::json!(2)));
    let (code, a) = hec(
        port,
        "/services/collector/event",
        &["Authorization: Token x"],
        b"{\"event\":1}",
    );
    assert_eq!((code, &a["code"]), (401, &serde_json::json!(3)));
    let (code, a) = hec(
        port,
        "/services/collector/event",
        &["Authorization: Splunk nope"],
        b"{\"event\":1}",
    );
    assert_eq!(
        (code, &a["text"], &a["code"]),
        (
            403,
            &serde_json::json!("Invalid token"),
            &serde_json::json!(4)
        )
    );
    // Acks are off here.
    let (code, a) = hec(port, "/services/collector/ack", &[auth], b"{\"acks\":[0]}");
    assert_eq!((code, &a["code"]), (400, &serde_json::json!(14)));
    // Bad events refuse the whole request, naming the event.
    let (code, a) = hec(
        port,
        "/services/collector",
        &[auth],
        b"{\"event\":\"ok\"}{\"host\":\"x\"}",
    );
    assert_eq!(
        (code, &a["code"], &a["invalid-event-number"]),
        (400, &serde_json::json!(12), &serde_json::json!(1))
    );
    let (code, a) = hec(port, "/services/collector", &[auth], b"{\"event\":\"\"}");
    assert_eq!((code, &a["code"]), (400, &serde_json::json!(13)));
    let (code, a) = hec(
        port,
        "/services/collector",
        &[auth],
        b"{\"event\":\"ok\"} {\"event",
    );
    assert_eq!((code, &a["code"]), (400, &serde_json::json!(6)));
    let (code, a) = hec(port, "/services/collector", &[auth], b"");
    assert_eq!((code, &a["code"]), (400, &serde_json::json!(5)));
    let (code, _) = hec(port, "/services/collector", &[auth], &vec![b' '; 5000]);
    assert_eq!(code, 413);
    let (code, _) = hec(port, "/nope", &[auth], b"{}");
    assert_eq!(code, 404);
    // A slow client.
    let mut slow = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let slow_peer = slow.local_addr().unwrap().to_string();
    slow.write_all(b"POST /services/collector HTTP/1.1\r\n")
        .unwrap();
    let lines = d.wait_bad_peer(&slow_peer);
    assert!(
        lines.iter().any(|l| l.contains("header_timeout")),
        "{lines:?}"
    );

    // Raw: one event per line, with the query's metadata.
    let (code, a) = hec(
        port,
        "/services/collector/raw?host=web-2&sourcetype=access_combined",
        &["Authorization: Basic eDpzZWNyZXQ="],
        b"GET /a 200\nGET /b 404\r\n\n",
    );
    assert_eq!((code, &a["text"]), (200, &serde_json::json!("Success")));
    let (code, _) = hec(
        port,
        "/services/collector/event/1.0",
        &[auth],
        b"{\"event\":\"after\",\"time\":\"1714557600\"}\n",
    );
    assert_eq!(code, 200);
    sink.wait_records(3);
    let recs = records_of(&sink, "splunk.hec");
    let events: Vec<&str> = recs
        .iter()
        .map(|(_, r)| field_of(r, "event").unwrap().as_str().unwrap())
        .collect();
    assert_eq!(events, vec!["GET /a 200", "GET /b 404", "after"]);
    assert_eq!(
        field_of(&recs[0].1, "host").and_then(|v| v.as_str()),
        Some("web-2")
    );
    assert_eq!(
        field_of(&recs[1].1, "sourcetype").and_then(|v| v.as_str()),
        Some("access_combined")
    );
    assert_eq!(recs[2].0, EventTime::new(1_714_557_600, 0));
}

// ------------------------------------------------------------ docs

/// Every TOML example of docs/migration-senders.md passes `nagare check`.
#[test]
fn the_migration_page_examples_check() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/migration-senders.md"
    ))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut n = 0;
    for (i, block) in doc.split("```toml\n").skip(1).enumerate() {
        let block = block.split("```").next().unwrap();
        let path = dir.path().join(format!("example{i}.toml"));
        std::fs::write(&path, block).unwrap();
        let out = run_check(&path);
        assert!(
            out.status.success(),
            "example {i}:\n{block}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        n += 1;
    }
    assert_eq!(n, 3);
}

/// `nagare check` names the file, line and key of each receiver's bad option.
#[test]
fn receivers_bad_options_are_reported_by_check() {
    let dir = tempfile::tempdir().unwrap();
    let es = "[[input]]\ntype = \"elasticsearch\"\nbind = \"127.0.0.1:0\"\n";
    let hec = "[[input]]\ntype = \"splunk_hec\"\nbind = \"127.0.0.1:0\"\n";
    let beats = "[[input]]\ntype = \"beats\"\nbind = \"127.0.0.1:0\"\n";
    assert_check_errors(
        dir.path(),
        CHECK_BASE,
        &[
            (
                format!("{es}tag = \"a b.${{index}}\"\n"),
                ":8: key `tag`:",
                "not a tag",
            ),
            (
                format!("{es}version = \"eight\"\n"),
                ":8: key `version`:",
                "MAJOR.MINOR.PATCH",
            ),
            (
                format!("{es}index_key = \"\"\n"),
                ":8: key `index_key`:",
                "must name a field",
            ),
            (format!("{es}shards = 1\n"), ":8:", "unknown key `shards`"),
            (
                format!("{hec}tokens = [\" \"]\n"),
                ":8: key `tokens`:",
                "must not be empty",
            ),
            (
                format!("{hec}max_channels = 0\n"),
                ":8: key `max_channels`:",
                "at least 1",
            ),
            (
                format!("{beats}max_frame_size = \"10B\"\n"),
                ":8: key `max_frame_size`:",
                "from 1KiB",
            ),
            (
                format!("{beats}tag = \"\"\n"),
                ":8: key `tag`:",
                "must be a tag",
            ),
            (
                format!("{beats}max_connections = 0\n"),
                ":8: key `max_connections`:",
                "at least 1",
            ),
        ],
    );
}
