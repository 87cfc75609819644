//! The `elasticsearch` output (docs/outputs-search.md) against a real
//! OpenSearch 2.19 node (common/opensearch.rs): documents counted and
//! compared by content, a data stream, a strict mapping whose refusals go
//! to dead letters with their reasons, 429 items under a tiny write queue,
//! kill -9 with a file buffer, the server down and back, TLS through a
//! terminating proxy; and a hand-written server for what OpenSearch without
//! its security plugin cannot answer (401, garbage, 413).

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::opensearch::{shared_opensearch, OpenSearch};
use crate::common::*;

/// Longer than WAIT: a JVM server under a loaded CI machine.
const ES_WAIT: Duration = Duration::from_secs(60);

/// An elasticsearch output of `pattern` to `url`, with `extra` options and
/// `buffer` lines, flushing every 50 ms and retrying quickly.
fn es_output(pattern: &str, url: &str, extra: &str, buffer: &str) -> String {
    format!(
        r#"
[[output]]
type = "elasticsearch"
match = "{pattern}"
endpoint = "{url}"
{extra}
[output.buffer]
flush_interval = "50ms"
retry_wait = "100ms"
retry_max_interval = "500ms"
{buffer}
"#
    )
}

/// Each seq once and no other.
fn assert_each_once(mut seqs: Vec<u64>, want: impl IntoIterator<Item = u64>) {
    seqs.sort_unstable();
    let mut want: Vec<u64> = want.into_iter().collect();
    want.sort_unstable();
    let (lost, dups) = lost_and_duplicated_of(&seqs, &want);
    assert!(
        lost.is_empty() && dups == 0,
        "lost {} ({:?}…), duplicated {dups}",
        lost.len(),
        &lost[..lost.len().min(10)]
    );
    assert_eq!(seqs, want);
}

fn lost_and_duplicated_of(got: &[u64], want: &[u64]) -> (Vec<u64>, usize) {
    let mut n: HashMap<u64, usize> = HashMap::new();
    for s in got {
        *n.entry(*s).or_default() += 1;
    }
    let lost = want
        .iter()
        .filter(|s| !n.contains_key(s))
        .copied()
        .collect();
    let dups = n.values().map(|c| c.saturating_sub(1)).sum();
    (lost, dups)
}

/// The `nagare_refused_events_total` of `plugin` by reason.
fn refused_by_reason(d: &Daemon, plugin: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let prefix = format!("nagare_refused_events_total{{plugin=\"{plugin}\",");
    for line in d.metrics().lines() {
        if let Some(rest) = line.strip_prefix(&prefix) {
            let reason = rest
                .split("reason=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or("?")
                .to_string();
            let n: u64 = rest.rsplit(' ').next().unwrap().parse().unwrap();
            *out.entry(reason).or_default() += n;
        }
    }
    out
}

#[test]
fn documents_arrive_once_with_their_content_in_indexes_and_a_data_stream() {
    let Some(es) = shared_opensearch() else {
        return;
    };
    // A data stream takes `create` only.
    es.put(
        "/_index_template/it-ds",
        r#"{"index_patterns":["logs-itds-*"],"data_stream":{},"template":{"settings":{"number_of_replicas":0}}}"#,
    );
    let dir = tempfile::tempdir().unwrap();
    let url = es.url();
    let sections = es_output(
        "es.plain.**",
        &url,
        "index = \"It-Plain-${tag}-%Y.%m.%d\"\ntag_key = \"tag\"\ncompress = \"gzip\"",
        "",
    ) + &es_output(
        "es.ds.**",
        &url,
        "index = \"logs-itds-${tag}\"\naction = \"create\"",
        "",
    );
    let (d, port) = start_forward_daemon(dir.path(), &sections);
    let line = d.wait_log("elasticsearch reachable");
    assert!(
        line.contains("opensearch") && line.contains("2.19") && line.contains("nagare-test"),
        "the healthcheck names the distribution, version and cluster: {line}"
    );
    let mut s = Sender::tcp(port);
    s.send_seqs("es.plain.a", 3000, 100);
    let mut ds = Sender::tcp(port);
    ds.send_seqs("es.ds.b", 1000, 100);
    s.finish();
    ds.finish();
    wait_until(ES_WAIT, "3000 documents in the daily index", || {
        es.count("it-plain-*") >= 3000
    });
    wait_until(ES_WAIT, "1000 documents in the data stream", || {
        es.count("logs-itds-es.ds.b") >= 1000
    });

    let docs = es.docs("it-plain-*");
    assert_each_once(
        docs.iter()
            .map(|(_, _, s)| s["seq"].as_u64().unwrap())
            .collect(),
        0..3000,
    );
    for (index, id, doc) in &docs {
        let seq = doc["seq"].as_u64().unwrap();
        assert_eq!(doc["message"], message_for(seq), "{doc}");
        assert_eq!(doc["tag"], "es.plain.a", "{doc}");
        let ts = doc["@timestamp"]
            .as_str()
            .unwrap_or_else(|| panic!("{doc}"));
        // RFC 3339 in UTC; the index's day is the event's.
        assert!(ts.ends_with('Z') && ts.len() >= 20, "{ts}");
        let day = ts[..10].replace('-', ".");
        assert_eq!(
            index,
            &format!("it-plain-es.plain.a-{day}"),
            "lower case, with the day"
        );
        let (chunk, pos) = id.rsplit_once('-').unwrap_or_else(|| panic!("_id {id}"));
        assert_eq!(chunk.len(), 22, "the chunk id in base64: {id}");
        pos.parse::<u32>()
            .unwrap_or_else(|_| panic!("the position: {id}"));
    }
    let ids: std::collections::HashSet<&str> = docs.iter().map(|(_, id, _)| id.as_str()).collect();
    assert_eq!(ids.len(), 3000);

    let docs = es.docs("logs-itds-es.ds.b");
    assert_each_once(
        docs.iter()
            .map(|(_, _, s)| s["seq"].as_u64().unwrap())
            .collect(),
        0..1000,
    );
    assert!(docs
        .iter()
        .all(|(index, _, _)| index.starts_with(".ds-logs-itds-es.ds.b-")));
    assert_eq!(d.metric("lost_events_total", "elasticsearch#0"), 0);
    assert_eq!(d.metric("secondary_events_total", "elasticsearch#1"), 0);
}

/// The example of docs/outputs-search.md (examples/elasticsearch.toml)
/// runs as written, its addresses and paths pointed at the test's.
#[test]
fn the_documented_example_delivers() {
    let Some(es) = shared_opensearch() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/elasticsearch.toml"
    ))
    .unwrap();
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/outputs-search.md"
    ))
    .unwrap();
    assert!(
        doc.contains(example.trim()),
        "docs/outputs-search.md shows examples/elasticsearch.toml as it is"
    );
    let port = free_port();
    let config = example
        .replace("127.0.0.1:24224", &format!("127.0.0.1:{port}"))
        .replace("http://127.0.0.1:9200", &es.url())
        .replace("/var/lib/nagare", &dir.path().display().to_string());
    assert_ne!(config, example);
    let mut d = Daemon::start(dir.path(), "example", &config, None);
    d.wait_port(port);
    let mut s = Sender::tcp(port);
    s.send_seqs("example.web", 500, 50);
    s.finish();
    wait_until(ES_WAIT, "the example's 500 documents", || {
        es.count("logs-example.web-*") >= 500
    });
    assert_each_once(es.seqs("logs-example.web-*"), 0..500);
}

/// A strict mapping refuses documents with a field it does not know or a
/// value of the wrong type: those go to the dead letters with the server's
/// reasons (and are counted by reason); the rest arrive once.
#[test]
fn refused_documents_go_to_dead_letters_with_their_reasons_the_rest_once() {
    let Some(es) = shared_opensearch() else {
        return;
    };
    es.put(
        "/it-strict",
        r#"{"settings":{"number_of_shards":2,"number_of_replicas":0},
            "mappings":{"dynamic":"strict","properties":{
              "seq":{"type":"long"},"message":{"type":"text"},
              "n":{"type":"integer"},"@timestamp":{"type":"date"}}}}"#,
    );
    let dir = tempfile::tempdir().unwrap();
    let letters = dir.path().join("letters");
    let sections = format!(
        "[system]\ndead_letter_dir = \"{}\"\n{}",
        letters.display(),
        es_output("es.strict", &es.url(), "index = \"it-strict\"", "")
    );
    let (d, port) = start_forward_daemon(dir.path(), &sections);
    let bad_type = |s: u64| s % 10 == 3;
    let unknown_field = |s: u64| s % 10 == 7;
    let records: Vec<rmpv::Value> = (0..400u64)
        .map(|seq| {
            let mut r = vec![
                ("seq", rmpv::Value::from(seq)),
                ("message", message_for(seq).into()),
            ];
            if bad_type(seq) {
                r.push(("n", "not a number".into()));
            } else if unknown_field(seq) {
                r.push(("surprise", true.into()));
            } else {
                r.push(("n", rmpv::Value::from(seq)));
            }
            m(&r)
        })
        .collect();
    let mut s = Sender::tcp(port);
    for (i, part) in records.chunks(100).enumerate() {
        send_records_acked(&mut s, "es.strict", part, &format!("strict{i}"));
    }
    s.finish();
    let good: Vec<u64> = (0..400)
        .filter(|&s| !bad_type(s) && !unknown_field(s))
        .collect();
    let bad: Vec<u64> = (0..400)
        .filter(|&s| bad_type(s) || unknown_field(s))
        .collect();
    wait_until(ES_WAIT, "80 refused events counted", || {
        refused_by_reason(&d, "elasticsearch#0")
            .values()
            .sum::<u64>()
            == 80
    });
    let reasons = refused_by_reason(&d, "elasticsearch#0");
    assert_eq!(
        reasons,
        BTreeMap::from([
            ("mapper_parsing_exception".to_string(), 40),
            ("strict_dynamic_mapping_exception".to_string(), 40)
        ]),
        "counted by reason"
    );
    wait_until(ES_WAIT, "the 320 accepted documents", || {
        es.count("it-strict") >= 320
    });
    assert_each_once(es.seqs("it-strict"), good.iter().copied());
    assert_eq!(d.metric("lost_events_total", "elasticsearch#0"), 0);

    // The dead letters: chunk files with a .reasons file each, naming the
    // server's reason per event.
    let out = letters.join("elasticsearch#0");
    wait_until(WAIT, "the dead-letter files", || {
        std::fs::read_dir(&out).is_ok_and(|r| {
            r.filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "reasons")
            })
            .count()
                >= 1
        })
    });
    d.wait_log("written to the dead-letter file");
    let mut lines = Vec::new();
    for e in std::fs::read_dir(&out).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "reasons") {
            lines.extend(read_file(&p).lines().map(str::to_string));
        }
    }
    assert_eq!(lines.len(), 80, "{lines:?}");
    let typed = lines
        .iter()
        .filter(|l| l.contains("\tmapper_parsing_exception: failed to parse field [n]"))
        .count();
    let strict = lines
        .iter()
        .filter(|l| l.contains("\tstrict_dynamic_mapping_exception:") && l.contains("surprise"))
        .count();
    assert_eq!((typed, strict), (40, 40), "{lines:?}");

    // `nagare replay` sends exactly the refused events.
    let sink = Sink::start(SinkOpts::default());
    let st = std::process::Command::new(BIN)
        .args(["replay", out.to_str().unwrap(), "--to"])
        .arg(format!("127.0.0.1:{}", sink.port))
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    sink.wait_count(80);
    assert_each_once(sink.seqs(), bad);
}

/// A node whose write queue holds one task answers 429 for items under
/// concurrent bulk requests: those items are sent again alone, later, and
/// every event arrives once.
#[test]
fn items_answered_429_arrive_later_once() {
    let dir = tempfile::tempdir().unwrap();
    let Some(es) = OpenSearch::start(
        dir.path(),
        &["thread_pool.write.queue_size=1", "node.processors=1"],
    ) else {
        return;
    };
    es.put(
        "/it-busy",
        r#"{"settings":{"number_of_shards":8,"number_of_replicas":0}}"#,
    );
    let sections = es_output(
        "es.busy",
        &es.url(),
        "index = \"it-busy\"",
        "flush_thread_count = 8\nchunk_limit_records = 200",
    );
    let (d, port) = start_forward_daemon(dir.path(), &sections);
    let n = 8_000u64;
    let senders: Vec<_> = (0..4u64)
        .map(|k| {
            std::thread::spawn(move || {
                let mut s = Sender::tcp(port);
                let mut a = k * n / 4;
                while a < (k + 1) * n / 4 {
                    s.packed("es.busy", a..a + 200, None);
                    a += 200;
                }
                s.finish();
            })
        })
        .collect();
    for s in senders {
        s.join().unwrap();
    }
    wait_until(ES_WAIT, "every document", || es.count("it-busy") >= n);
    assert_each_once(es.seqs("it-busy"), 0..n);
    let stderr = d.stderr();
    assert!(
        stderr.contains("rejected_execution_exception") && stderr.contains("to send again"),
        "the node answered 429 for some items, and they were sent again:\n{}",
        &stderr[stderr.len().saturating_sub(3000)..]
    );
    assert!(d.metric("retries_total", "elasticsearch#0") > 0);
    assert_eq!(d.metric("lost_events_total", "elasticsearch#0"), 0);
}

/// nagare killed with SIGKILL under acked load, with a file buffer: after a
/// restart every acked event is in the index once (chunks sent again after
/// the restart overwrite the documents they wrote before).
#[test]
fn kill_9_with_a_file_buffer_loses_and_doubles_nothing() {
    let Some(es) = shared_opensearch() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (port, mon) = (free_port(), free_port());
    let cfg = format!(
        "[monitor]\nbind = \"127.0.0.1:{mon}\"\n{}{}",
        forward_input(port),
        es_output(
            "es.kill",
            &es.url(),
            "index = \"it-kill\"",
            &format!(
                "type = \"file\"\npath = \"{}\"\nchunk_limit_records = 300\nflush_thread_count = 4",
                dir.path().join("buf").display()
            ),
        )
    );
    let mut d = Daemon::start(dir.path(), "nagare", &cfg, Some(mon));
    d.wait_port(port);
    let acked = Arc::new(Mutex::new(Vec::<u64>::new()));
    let acked2 = acked.clone();
    let load = std::thread::spawn(move || {
        let mut s = Sender::tcp(port);
        for f in 0u64.. {
            let (a, b) = (f * 50, f * 50 + 50);
            s.packed("es.kill", a..b, Some(format!("k{f}").as_bytes()));
            match s.read_msg() {
                Ok(_) => acked2.lock().unwrap().extend(a..b),
                Err(_) => return, // nagare died: unacked frames are the sender's
            }
        }
    });
    wait_until(ES_WAIT, "acked events, some of them indexed", || {
        acked.lock().unwrap().len() >= 8000 && es.count("it-kill") > 0
    });
    d.signal(libc::SIGKILL);
    d.wait_exit(WAIT);
    load.join().unwrap();
    let acked = acked.lock().unwrap().clone();
    let at_kill = es.count("it-kill");

    let mut d = Daemon::start(dir.path(), "nagare", &cfg, Some(mon));
    d.wait_port(port);
    wait_until(ES_WAIT, "every acked event indexed", || {
        es.count("it-kill") >= acked.len() as u64
    });
    // What nagare holds is delivered: its buffer drains.
    wait_until(ES_WAIT, "the buffer drained", || {
        d.metric("buffer_chunks", "elasticsearch#0") == 0
    });
    let seqs = es.seqs("it-kill");
    let (lost, dups) = lost_and_duplicated_of(&seqs, &acked);
    assert!(lost.is_empty(), "acked events lost: {}", lost.len());
    assert_eq!(dups, 0, "duplicates ({at_kill} were indexed at the kill)");
    eprintln!(
        "kill -9: {} acked, {at_kill} indexed at the kill, {} after, 0 lost, 0 duplicated",
        acked.len(),
        seqs.len()
    );
}

/// The server killed and started again on the same data while events keep
/// coming: nothing is lost, nothing doubled.
#[test]
fn server_down_and_back_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let Some(mut es) = OpenSearch::start(dir.path(), &[]) else {
        return;
    };
    let sections = es_output("es.outage", &es.url(), "index = \"it-outage\"", "");
    let (d, port) = start_forward_daemon(dir.path(), &sections);
    let mut s = Sender::tcp(port);
    s.send_seqs("es.outage", 500, 50);
    wait_until(ES_WAIT, "the first 500", || es.count("it-outage") >= 500);
    es.stop();
    for f in 0..10u64 {
        s.packed("es.outage", 500 + f * 100..600 + f * 100, None);
    }
    // Down for a while: nagare retries (and logs why) several times.
    wait_until(ES_WAIT, "retries while the server is down", || {
        d.metric("retries_total", "elasticsearch#0") >= 5
    });
    assert!(d.stderr().contains("cannot connect to 127.0.0.1:"));
    es.restart();
    s.finish();
    wait_until(ES_WAIT, "all 1500 after the restart", || {
        es.count("it-outage") >= 1500
    });
    assert_each_once(es.seqs("it-outage"), 0..1500);
    assert_eq!(d.metric("lost_events_total", "elasticsearch#0"), 0);
}

/// TLS through a TLS-terminating proxy (socat) in front of OpenSearch: a
/// certificate from the CA in `tls.ca` delivers; one from another CA is
/// refused, the error naming the certificate problem and the server.
#[test]
fn tls_delivers_and_a_certificate_of_another_ca_is_refused_by_name() {
    let Some(es) = shared_opensearch() else {
        return;
    };
    if skip_unless(
        std::process::Command::new("socat")
            .arg("-V")
            .output()
            .is_ok(),
        "socat is not installed",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ours = crate::common::tls::Ca::new(dir.path(), "ours");
    let theirs = crate::common::tls::Ca::new(dir.path(), "theirs");
    let pair = theirs.issue("server", &["127.0.0.1", "localhost"]);
    let tport = free_port();
    // Killed on drop, when the test fails too.
    struct Proxy(std::process::Child);
    impl Drop for Proxy {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _proxy = Proxy(
        std::process::Command::new("socat")
            .arg(format!(
                "OPENSSL-LISTEN:{tport},bind=127.0.0.1,reuseaddr,fork,verify=0,cert={},key={}",
                pair.cert.display(),
                pair.key.display()
            ))
            .arg(format!("TCP:127.0.0.1:{}", es.port))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_port(tport);
    let url = format!("https://127.0.0.1:{tport}");
    let sections = es_output(
        "es.tls.bad",
        &url,
        &format!(
            "index = \"it-tls-bad\"\n[output.tls]\nca = \"{}\"",
            ours.path.display()
        ),
        "",
    ) + &es_output(
        "es.tls.good",
        &url,
        &format!(
            "index = \"it-tls\"\n[output.tls]\nca = \"{}\"",
            theirs.path.display()
        ),
        "",
    );
    let (d, port) = start_forward_daemon(dir.path(), &sections);
    let mut s = Sender::tcp(port);
    s.send_seqs("es.tls.good", 300, 100);
    s.send_seqs("es.tls.bad", 100, 100);
    s.finish();
    wait_until(ES_WAIT, "the 300 sent over TLS", || {
        es.count("it-tls") >= 300
    });
    assert_each_once(es.seqs("it-tls"), 0..300);
    // The events wait and are retried; the error names the server and
    // the certificate's problem.
    let line = d.wait_log_line("a retried flush with the certificate error", |l| {
        l.contains("flush failed; will retry") && l.contains("elasticsearch#0")
    });
    assert!(
        line.contains(&format!("127.0.0.1:{tport}")) && line.contains("UnknownIssuer"),
        "{line}"
    );
    assert_eq!(es.count("it-tls-bad"), 0);
    assert_eq!(d.metric("lost_events_total", "elasticsearch#0"), 0);
}

/// What a hand-written server saw: each accepted document by `_id`, and
/// the ids of the documents of each request it did not accept.
#[derive(Default)]
struct Seen {
    /// (_id, seq) of the documents in requests answered 200 with items.
    accepted: Vec<(String, u64)>,
    /// (_id, seq) of the documents in requests answered otherwise.
    refused: Vec<(String, u64)>,
    authorization: Vec<String>,
    bodies: Vec<usize>,
}

/// A server speaking just enough `_bulk`: the first request answered 401,
/// the second a 200 that is not JSON, any request of more than 20
/// documents 413, the rest 201 per item.
fn fake_bulk_server(seen: Arc<Mutex<Seen>>) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { return };
            let seen = seen.clone();
            std::thread::spawn(move || serve_bulk(c, &seen));
        }
    });
    port
}

fn serve_bulk(c: TcpStream, seen: &Mutex<Seen>) {
    let mut w = c.try_clone().unwrap();
    let mut r = BufReader::new(c);
    loop {
        let mut head = Vec::new();
        loop {
            let mut line = String::new();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            head.push(line);
        }
        let header = |name: &str| {
            head.iter().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
            })
        };
        let len: usize = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        r.read_exact(&mut body).unwrap();
        let (status, answer) = if head[0].starts_with("GET ") {
            (
                200,
                r#"{"cluster_name":"fake","version":{"number":"8.15.0"}}"#.to_string(),
            )
        } else {
            let text = String::from_utf8(body).unwrap();
            let lines: Vec<&str> = text.lines().collect();
            let docs: Vec<(String, u64)> = lines
                .chunks(2)
                .map(|p| {
                    let a: serde_json::Value = serde_json::from_str(p[0]).unwrap();
                    let d: serde_json::Value = serde_json::from_str(p[1]).unwrap();
                    (
                        a["index"]["_id"].as_str().unwrap().to_string(),
                        d["seq"].as_u64().unwrap(),
                    )
                })
                .collect();
            let mut s = seen.lock().unwrap();
            s.authorization.extend(header("authorization"));
            s.bodies.push(docs.len());
            let nth = s.bodies.len();
            let (status, answer) = if nth == 1 {
                (401, r#"{"error":"unauthorized"}"#.to_string())
            } else if nth == 2 {
                (200, "<html>a proxy's error page</html>".to_string())
            } else if docs.len() > 20 {
                (413, "request entity too large".to_string())
            } else {
                let items: Vec<String> = docs
                    .iter()
                    .map(|_| r#"{"index":{"status":201}}"#.to_string())
                    .collect();
                (
                    200,
                    format!(r#"{{"errors":false,"items":[{}]}}"#, items.join(",")),
                )
            };
            if status == 200 && nth > 2 {
                s.accepted.extend(docs);
            } else {
                s.refused.extend(docs);
            }
            (status, answer)
        };
        let _ = write!(
            w,
            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{answer}",
            answer.len()
        );
    }
}

/// 401 (credentials): kept and retried with a clear error; a 200 that is
/// not a bulk answer: retried whole, with the same `_id`s; 413: the request
/// cut in halves until the server takes them. Every event arrives once.
#[test]
fn unauthorized_garbage_and_too_large_answers_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let sport = fake_bulk_server(seen.clone());
    let sections = es_output(
        "es.fake",
        &format!("http://127.0.0.1:{sport}"),
        "api_key = \"dGVzdDpzZWNyZXQ=\"",
        "",
    );
    let (d, port) = start_forward_daemon(dir.path(), &sections);
    let mut s = Sender::tcp(port);
    s.packed("es.fake", 0..100, None);
    s.finish();
    wait_until(WAIT, "100 documents accepted", || {
        seen.lock().unwrap().accepted.len() >= 100
    });
    let seen = seen.lock().unwrap();
    assert_each_once(seen.accepted.iter().map(|(_, s)| *s).collect(), 0..100);
    // A document sent again carries the id it had.
    let ids: HashMap<u64, &str> = seen
        .accepted
        .iter()
        .map(|(id, s)| (*s, id.as_str()))
        .collect();
    for (id, seq) in &seen.refused {
        assert_eq!(ids[seq], id, "seq {seq} sent again under another _id");
    }
    assert!(
        seen.authorization
            .iter()
            .all(|a| a == "ApiKey dGVzdDpzZWNyZXQ="),
        "{:?}",
        seen.authorization
    );
    assert_eq!(
        seen.bodies[..3],
        [100, 100, 100],
        "401, garbage, then 413: {:?}",
        seen.bodies
    );
    assert!(
        seen.bodies[3..].iter().all(|&n| n <= 50),
        "{:?}",
        seen.bodies
    );
    d.wait_log(
        "answered 401 Unauthorized: the server refused the credentials; check the output's `bearer_token`, `username`/`password`, `api_key`",
    );
    d.wait_log("but not a bulk answer");
    d.wait_log("request too large: sending it in two halves");
    assert_eq!(d.metric("lost_events_total", "elasticsearch#0"), 0);
    assert_eq!(d.metric("secondary_events_total", "elasticsearch#0"), 0);
}

#[test]
fn check_names_bad_options() {
    let base = forward_input(free_port());
    let out = |extra: &str| {
        format!("[[output]]\ntype = \"elasticsearch\"\nmatch = \"**\"\nendpoint = \"http://127.0.0.1:9200\"\n{extra}\n")
    };
    let cases = vec![
        (out("index = \"logs-%Q\""), ":8:", "strftime"),
        (out("index = \"logs-${oops\""), ":8:", "without its"),
        (out("action = \"upsert\""), ":8:", "upsert"),
        (out("api_key = \"k\"\nusername = \"u\""), ":8:", "api_key"),
        (out("pipeline = \"a b\""), ":8:", "pipeline id"),
        (
            "[[output]]\ntype = \"elasticsearch\"\nmatch = \"**\"\nendpoint = \"ftp://x\"\n"
                .to_string(),
            ":7:",
            "expected http://",
        ),
    ];
    assert_check_errors(tempfile::tempdir().unwrap().path(), &base, &cases);
}
