//! The kafka input and output against a real single-node Kafka broker (one
//! for the whole file, KRaft mode, from Maven Central jars): what the output
//! writes (content, count, key → partition, headers; a forward input's
//! `ack = "delivered"` held until Kafka stored the events), what the input reads
//! (content, count, bad data kept), and faults counted in lost and
//! duplicated events: nagare killed with SIGKILL while it consumes, the
//! broker killed and restarted mid-stream, one of two consumers of a group
//! killed.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::RwLockReadGuard;

use crate::common::kafka_broker::{shared_broker, KafkaBroker};
use crate::common::*;

/// The broker, shared with the tests running alongside (None: skipped).
fn broker() -> Option<RwLockReadGuard<'static, KafkaBroker>> {
    Some(shared_broker()?.read().unwrap_or_else(|e| e.into_inner()))
}

/// JSON messages `{"seq":i,"message":"event number i"}`, keyed by `i % keys`.
fn json_messages(range: std::ops::Range<u64>, keys: u64) -> Vec<(Option<String>, Vec<u8>)> {
    range
        .map(|i| {
            let v = format!(r#"{{"seq":{i},"message":"{}"}}"#, message_for(i));
            (Some(format!("k{}", i % keys)), v.into_bytes())
        })
        .collect()
}

/// A kafka input of `topics` in `group` from the earliest offset, with
/// `extra` options, to a forward output to the sink (file buffer in
/// `dir/buf`: what was buffered survives a kill -9).
fn consumer_config(
    broker: &KafkaBroker,
    topics: &str,
    group: &str,
    extra: &str,
    sink: u16,
    dir: &Path,
) -> String {
    format!(
        r#"[[input]]
type = "kafka"
addresses = ["{}"]
topics = {topics}
group = "{group}"
start_from = "earliest"
commit_interval = "200ms"
{extra}
# A consumer killed with SIGKILL leaves the group after this long.
properties = {{ "session.timeout.ms" = "6000", "heartbeat.interval.ms" = "500" }}

[[output]]
type = "forward"
match = "**"
[[output.server]]
address = "127.0.0.1:{sink}"
[output.buffer]
type = "file"
path = "{}"
flush_interval = "50ms"
"#,
        broker.bootstrap(),
        dir.join("buf").display()
    )
}

/// SIGTERM: the daemon commits, drains and exits 0.
fn assert_stopped(d: &mut Daemon) {
    let st = d.terminate();
    assert!(
        st.success(),
        "nagare exited with {st}; stderr:\n{}",
        d.stderr()
    );
}

/// Waits until the daemon's log says it holds partitions of its topics.
fn wait_assigned(d: &Daemon, want: usize) {
    wait_until(
        WAIT,
        &format!("nagare to be assigned {want} partitions"),
        || {
            d.stderr()
                .lines()
                .rfind(|l| l.contains("partitions assigned"))
                .is_some_and(|l| l.contains(&format!("assigned={want}")))
        },
    );
}

/// The partition of one key's messages, and their (offset, seq).
type KeyedMessages = (i32, Vec<(i64, u64)>);

#[test]
fn output_writes_keys_headers_and_content() {
    let Some(broker) = broker() else { return };
    broker.create_topic("out.app", 3);
    broker.create_topic("out.mp", 1);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = format!(
        r#"[[input]]
type = "forward"
bind = "127.0.0.1:{port}"

[[output]]
type = "kafka"
match = "app"
addresses = ["{b}"]
topic = "out.${{tag}}"
key_field = "user"
header_fields = ["host", "seq"]
compression = "lz4"
tag_key = "tag"
[output.buffer]
flush_interval = "20ms"

[[output]]
type = "kafka"
match = "mp"
addresses = ["{b}"]
topic = "out.mp"
format = "msgpack"
compression = "zstd"
[output.buffer]
flush_interval = "20ms"
"#,
        b = broker.bootstrap()
    );
    let mut nagare = Daemon::start(dir.path(), "out", &cfg, None);
    nagare.wait_port(port);
    let mut s = Sender::tcp(port);
    // Records {"seq": i, "message": …, "user": "u<i % 7>", "host": "h<i % 2>"}.
    let n = 700u64;
    let records: Vec<rmpv::Value> = (0..n)
        .map(|i| {
            m(&[
                ("seq", i.into()),
                ("message", message_for(i).into()),
                ("user", format!("u{}", i % 7).into()),
                ("host", format!("h{}", i % 2).into()),
            ])
        })
        .collect();
    for (i, part) in records.chunks(100).enumerate() {
        send_records_acked(&mut s, "app", part, &format!("app{i}"));
    }
    s.send_acked("mp", 0..50, 25, "mp");
    let got = broker.read_all("out.app", n as usize);
    let mp = broker.read_all("out.mp", 50);
    assert_stopped(&mut nagare);

    let mut seqs = Vec::new();
    let mut by_key: HashMap<Vec<u8>, KeyedMessages> = HashMap::new();
    for r in &got {
        let j = json_value(&r.payload);
        let seq = j["seq"].as_u64().expect("seq");
        seqs.push(seq);
        assert_eq!(j["message"], message_for(seq));
        assert_eq!(j["tag"], "app");
        assert!(
            j["@timestamp"].as_str().is_some_and(|t| t.ends_with('Z')),
            "{j}"
        );
        let key = r.key.clone().expect("a key");
        assert_eq!(key, format!("u{}", seq % 7).into_bytes());
        let headers: BTreeMap<&str, &[u8]> = r
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), &v[..]))
            .collect();
        assert_eq!(
            headers.get("host"),
            Some(&format!("h{}", seq % 2).as_bytes()),
            "{headers:?}"
        );
        assert_eq!(headers.get("seq"), Some(&seq.to_string().as_bytes()));
        let e = by_key.entry(key).or_insert((r.partition, Vec::new()));
        assert_eq!(e.0, r.partition, "one key, one partition");
        e.1.push((r.offset, seq));
    }
    assert_exact_seqs(&seqs, n);
    let partitions: std::collections::BTreeSet<i32> = by_key.values().map(|(p, _)| *p).collect();
    assert!(
        partitions.len() > 1,
        "7 keys over 3 partitions use more than one: {partitions:?}"
    );
    // Within a key, the partition holds its events in the order they were sent.
    for (key, (_, mut v)) in by_key {
        v.sort();
        let in_order: Vec<u64> = v.iter().map(|(_, s)| *s).collect();
        let mut sorted = in_order.clone();
        sorted.sort();
        assert_eq!(in_order, sorted, "key {:?}", String::from_utf8_lossy(&key));
    }
    // msgpack: the [time, record] entries as they were, in order.
    let mp_seqs: Vec<u64> = mp
        .iter()
        .map(|r| seq_of(&decode_entries(&r.payload)[0]))
        .collect();
    assert_eq!(mp_seqs, (0..50).collect::<Vec<_>>());
    assert!(mp.iter().all(|r| r.key.is_none()));
}

/// Kafka's own Java client and nagare agree: a key goes to the same
/// partition from either producer (murmur2), and what the Java console
/// producer writes, the kafka input reads.
#[test]
fn java_producer_and_nagare_agree_on_keys() {
    let Some(broker) = broker() else { return };
    broker.create_topic("interop", 5);
    let lines: Vec<String> = (0..50)
        .map(|i| {
            format!(
                r#"u{}:{{"seq":{i},"message":"{}","from":"java"}}"#,
                i % 10,
                message_for(i)
            )
        })
        .collect();
    broker.console_produce("interop", &lines);

    let dir = tempfile::tempdir().unwrap();
    let (port, sink) = (free_port(), Sink::start(SinkOpts::default()));
    let cfg = format!(
        "[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:{port}\"\n\n[[output]]\ntype = \"kafka\"\nmatch = \"app\"\naddresses = [\"{b}\"]\ntopic = \"interop\"\nkey_field = \"user\"\n\n[[input]]\ntype = \"kafka\"\naddresses = [\"{b}\"]\ntopics = [\"interop\"]\ngroup = \"interop\"\nstart_from = \"earliest\"\n{}",
        forward_output_to("interop", sink.port),
        b = broker.bootstrap()
    );
    let mut nagare = Daemon::start(dir.path(), "interop", &cfg, None);
    nagare.wait_port(port);
    let records: Vec<rmpv::Value> = (50..100)
        .map(|i| {
            m(&[
                ("seq", i.into()),
                ("user", format!("u{}", i % 10).into()),
                ("from", "nagare".into()),
            ])
        })
        .collect();
    send_records_acked(&mut Sender::tcp(port), "app", &records, "n1");
    // The input reads both producers' messages.
    sink.wait_count(100);
    let got = broker.read_all("interop", 100);
    assert_stopped(&mut nagare);
    assert_exact_seqs(&sink.seqs(), 100);
    let java = sink
        .records()
        .iter()
        .filter(|(_, _, r)| field_of(r, "from").and_then(|v| v.as_str()) == Some("java"))
        .count();
    assert_eq!(java, 50);
    // key → the partitions it was found in, by producer.
    let mut partitions: BTreeMap<(Vec<u8>, String), std::collections::BTreeSet<i32>> =
        BTreeMap::new();
    for r in &got {
        let from = json_value(&r.payload)["from"].as_str().unwrap().to_string();
        partitions
            .entry((r.key.clone().expect("a key"), from))
            .or_default()
            .insert(r.partition);
    }
    for k in 0..10 {
        let key = format!("u{k}").into_bytes();
        let java = &partitions[&(key.clone(), "java".to_string())];
        let nagare = &partitions[&(key, "nagare".to_string())];
        assert_eq!(java.len(), 1, "u{k}: one partition from Java");
        assert_eq!(
            java, nagare,
            "u{k}: the Java client and nagare chose different partitions"
        );
    }
}

/// SASL is passed through to librdkafka: PLAIN and SCRAM-SHA-256 (its
/// hashing is OpenSSL's, linked into the binary) with the right password
/// write; a wrong password is refused by the broker and nothing is written.
#[test]
fn sasl_plain_and_scram_authenticate() {
    let Some(broker) = broker() else { return };
    for mechanism in ["PLAIN", "SCRAM-SHA-256"] {
        sasl_round(&broker, mechanism);
    }
}

fn sasl_round(broker: &KafkaBroker, mechanism: &str) {
    let topic = format!("sasl.{mechanism}");
    broker.create_topic(&topic, 1);
    let dir = tempfile::tempdir().unwrap();
    let (port, bad_port) = (free_port(), free_port());
    let config = |port: u16, password: &str| {
        format!(
            r#"[[input]]
type = "forward"
bind = "127.0.0.1:{port}"

[[output]]
type = "kafka"
match = "**"
addresses = ["127.0.0.1:{}"]
topic = "{topic}"
sasl = {{ mechanism = "{mechanism}", username = "nagare", password = "{password}" }}
[output.buffer]
flush_interval = "20ms"
"#,
            broker.sasl_port
        )
    };
    let mut good = Daemon::start(dir.path(), "good", &config(port, "kafka-secret"), None);
    let mut bad = Daemon::start(dir.path(), "bad", &config(bad_port, "wrong"), None);
    good.wait_port(port);
    bad.wait_port(bad_port);
    Sender::tcp(port).send_acked("good", 0..20, 10, "g");
    Sender::tcp(bad_port).send_acked("bad", 100..120, 10, "b");
    let got = broker.read_all(&topic, 20);
    let seqs: Vec<u64> = got
        .iter()
        .map(|r| json_value(&r.payload)["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (0..20).collect::<Vec<_>>(), "{mechanism}");
    bad.wait_log("Authentication failed");
    assert_stopped(&mut good);
    // Nothing of the refused producer reached the topic (it is killed on
    // drop, its events still in its buffer).
    assert_eq!(broker.end_offsets(&topic, 1), vec![20], "{mechanism}");
}

/// TLS: the output and the input reach the broker's SSL listener and check
/// its certificate against `tls.ca` (librdkafka's ssl.ca.location, host
/// name checked); an output that trusts another CA is refused and writes
/// nothing.
#[test]
fn tls_to_the_brokers_ssl_listener() {
    let Some(broker) = broker() else { return };
    let topic = "tls.events";
    broker.create_topic(topic, 1);
    let dir = tempfile::tempdir().unwrap();
    let other = crate::common::tls::Ca::new(dir.path(), "other");
    let sink = Sink::start(SinkOpts::default());
    let (port, bad_port) = (free_port(), free_port());
    let ssl = format!("127.0.0.1:{}", broker.ssl_port);
    let producer = |port: u16, ca: &Path| {
        format!(
            r#"[[input]]
type = "forward"
bind = "127.0.0.1:{port}"

[[output]]
type = "kafka"
match = "**"
addresses = ["{ssl}"]
topic = "{topic}"
tls = {{ ca = {ca:?} }}
[output.buffer]
flush_interval = "20ms"
"#
        )
    };
    let consumer = format!(
        r#"[[input]]
type = "kafka"
addresses = ["{ssl}"]
topics = ["{topic}"]
group = "tls"
start_from = "earliest"
tls = {{ ca = {:?} }}

[[output]]
type = "forward"
match = "**"
[[output.server]]
address = "127.0.0.1:{}"
[output.buffer]
flush_interval = "20ms"
"#,
        broker.ca, sink.port
    );
    let mut good = Daemon::start(dir.path(), "good", &producer(port, &broker.ca), None);
    let mut bad = Daemon::start(dir.path(), "bad", &producer(bad_port, &other.path), None);
    let mut c = Daemon::start(dir.path(), "consumer", &consumer, None);
    good.wait_port(port);
    bad.wait_port(bad_port);
    Sender::tcp(port).send_acked("tls", 0..200, 50, "t");
    Sender::tcp(bad_port).send_acked("tls", 1000..1020, 10, "b");
    sink.wait_records(200);
    assert_eq!(sink.seqs(), (0..200).collect::<Vec<_>>());
    bad.wait_log("certificate verify failed");
    assert_stopped(&mut good);
    assert_stopped(&mut c);
    assert_eq!(
        broker.end_offsets(topic, 1),
        vec![200],
        "nothing from the refused output"
    );
    assert_eq!(sink.count(), 200);
}

#[test]
fn delivered_acks_wait_for_kafka() {
    let Some(broker) = broker() else { return };
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    // The topic does not exist yet (the test broker creates none on first use).
    let cfg = format!(
        r#"[[input]]
type = "forward"
bind = "127.0.0.1:{port}"
ack = "delivered"

[[output]]
type = "kafka"
match = "**"
addresses = ["{}"]
topic = "late"
timeout = "60s"
[output.buffer]
flush_interval = "20ms"
"#,
        broker.bootstrap()
    );
    let mut nagare = Daemon::start(dir.path(), "delivered", &cfg, None);
    nagare.wait_port(port);
    let mut s = Sender::tcp(port);
    s.packed("app", 0..10, Some(b"d1"));
    // No ack while Kafka cannot store the events: an absence, observed for
    // a while (there is no event to wait for).
    s.conn.set_timeout(Some(std::time::Duration::from_secs(2)));
    assert!(
        s.read_msg().is_err(),
        "acked before Kafka stored the events"
    );
    s.conn.set_timeout(Some(WAIT));
    broker.create_topic("late", 1);
    assert_eq!(
        s.read_ack(),
        ack_bytes(&mp_str(b"d1")),
        "the ack once Kafka has them"
    );
    let got = broker.read_all("late", 10);
    let seqs: Vec<u64> = got
        .iter()
        .map(|r| json_value(&r.payload)["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (0..10).collect::<Vec<_>>());
    assert_stopped(&mut nagare);
}

#[test]
fn input_reads_json_text_and_bad_data() {
    let Some(broker) = broker() else { return };
    broker.create_topic("in.json", 2);
    broker.create_topic("in.text", 1);
    let mut messages = json_messages(0..1000, 10);
    // Not JSON: kept, with a parse_error, and the input goes on.
    messages.insert(500, (None, b"this is not json".to_vec()));
    broker.produce("in.json", &messages);
    let lines: Vec<(Option<String>, Vec<u8>)> = (0..20)
        .map(|i| (None, format!("line {i}").into_bytes()))
        .collect();
    broker.produce("in.text", &lines);

    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let cfg = format!(
        "{}\n[[input]]\ntype = \"kafka\"\naddresses = [\"{}\"]\ntopics = [\"in.text\"]\ngroup = \"input-text\"\nformat = \"raw\"\nstart_from = \"earliest\"\ntag = \"text.${{topic}}\"\n",
        consumer_config(&broker, r#"["^in\\.js.*"]"#, "input-test", "", sink.port, dir.path()),
        broker.bootstrap()
    );
    let mut nagare = Daemon::start(dir.path(), "in", &cfg, None);
    sink.wait_records(1021);
    // Every offset read is committed once buffered.
    wait_until(
        WAIT,
        "the group's committed offsets to reach the end",
        || {
            broker
                .committed("input-test", "in.json", 2)
                .iter()
                .sum::<i64>()
                == 1001
        },
    );
    assert_stopped(&mut nagare);

    let records = sink.records();
    assert_eq!(records.len(), 1021);
    let json: Vec<&rmpv::Value> = records
        .iter()
        .filter(|(t, _, _)| t == "in.json")
        .map(|(_, _, r)| r)
        .collect();
    let seqs: Vec<u64> = json
        .iter()
        .filter(|r| field_of(r, "seq").is_some())
        .map(|r| seq_of(r))
        .collect();
    assert_exact_seqs(&seqs, 1000);
    for r in json.iter().filter(|r| field_of(r, "seq").is_some()) {
        assert_eq!(
            field_of(r, "message").and_then(|v| v.as_str()),
            Some(message_for(seq_of(r)).as_str())
        );
    }
    let bad: Vec<&&rmpv::Value> = json
        .iter()
        .filter(|r| field_of(r, "seq").is_none())
        .collect();
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert_eq!(
        field_of(bad[0], "message").and_then(|v| v.as_str()),
        Some("this is not json")
    );
    assert!(field_of(bad[0], "parse_error").is_some(), "{bad:?}");
    let text: Vec<&str> = records
        .iter()
        .filter(|(t, _, _)| t == "text.in.text")
        .map(|(_, _, r)| {
            field_of(r, "message")
                .and_then(|v| v.as_str())
                .expect("message")
        })
        .collect();
    assert_eq!(
        text,
        (0..20).map(|i| format!("line {i}")).collect::<Vec<_>>()
    );
}

#[test]
fn consumer_killed_and_restarted_loses_nothing() {
    let Some(broker) = broker() else { return };
    broker.create_topic("kill9", 3);
    broker.produce("kill9", &json_messages(0..20_000, 50));
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let cfg = consumer_config(
        &broker,
        r#"["kill9"]"#,
        "kill9",
        "batch_count = 200",
        sink.port,
        dir.path(),
    );
    let nagare = Daemon::start(dir.path(), "consumer", &cfg, None);
    sink.wait_count(2_000);
    drop(nagare); // SIGKILL, mid-stream
    let at_kill = sink.count();
    // Written while no consumer runs.
    broker.produce("kill9", &json_messages(20_000..30_000, 50));
    let mut nagare = Daemon::start(dir.path(), "consumer", &cfg, None);
    let n = 30_000u64;
    wait_until(WAIT * 3, "every event at the sink", || {
        lost_and_duplicated(&sink.seqs(), n).0.is_empty()
    });
    assert_stopped(&mut nagare);
    let (missing, dups) = lost_and_duplicated(&sink.seqs(), n);
    eprintln!(
        "kill -9 of the consumer after {at_kill} events: lost {}, duplicated {dups}",
        missing.len()
    );
    assert!(missing.is_empty());
    assert!(at_kill < n as usize, "killed before the end");
}

#[test]
fn broker_restarted_mid_stream_loses_nothing() {
    let Some(lock) = shared_broker() else { return };
    // This test restarts the broker: it has it to itself.
    let mut broker = lock.write().unwrap_or_else(|e| e.into_inner());
    broker.create_topic("restart", 2);
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let port = free_port();
    // nagare forward in → kafka out, and a second nagare kafka in → forward out.
    let producer_cfg = format!(
        r#"[[input]]
type = "forward"
bind = "127.0.0.1:{port}"

[[output]]
type = "kafka"
match = "**"
addresses = ["{}"]
topic = "restart"
key_field = "seq"
[output.buffer]
flush_interval = "20ms"
retry_wait = "100ms"
retry_max_interval = "1s"
"#,
        broker.bootstrap()
    );
    let mut producer = Daemon::start(dir.path(), "producer", &producer_cfg, None);
    producer.wait_port(port);
    let consumer_dir = dir.path().join("consumer");
    std::fs::create_dir_all(&consumer_dir).unwrap();
    let mut consumer = Daemon::start(
        &consumer_dir,
        "consumer",
        &consumer_config(
            &broker,
            r#"["restart"]"#,
            "restart",
            "",
            sink.port,
            &consumer_dir,
        ),
        None,
    );
    let mut s = Sender::tcp(port);
    s.send_acked("app", 0..5_000, 100, "a");
    sink.wait_count(1_000);
    broker.stop();
    // Accepted (buffered) while the broker is down.
    s.send_acked("app", 5_000..8_000, 100, "b");
    broker.restart();
    s.send_acked("app", 8_000..10_000, 100, "c");
    let n = 10_000u64;
    wait_until(WAIT * 3, "every event at the sink", || {
        lost_and_duplicated(&sink.seqs(), n).0.is_empty()
    });
    assert_stopped(&mut producer);
    assert_stopped(&mut consumer);
    let (missing, dups) = lost_and_duplicated(&sink.seqs(), n);
    eprintln!(
        "broker restarted mid-stream: lost {}, duplicated {dups}",
        missing.len()
    );
    assert!(missing.is_empty());
}

#[test]
fn a_killed_consumers_partitions_go_to_the_other() {
    let Some(broker) = broker() else { return };
    broker.create_topic("group2", 4);
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let (a_dir, b_dir) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir_all(&a_dir).unwrap();
    std::fs::create_dir_all(&b_dir).unwrap();
    let config = |d: &Path| {
        consumer_config(
            &broker,
            r#"["group2"]"#,
            "pair",
            "batch_count = 100",
            sink.port,
            d,
        )
    };
    let mut a = Daemon::start(&a_dir, "a", &config(&a_dir), None);
    let b = Daemon::start(&b_dir, "b", &config(&b_dir), None);
    wait_assigned(&a, 2);
    wait_assigned(&b, 2);
    broker.produce("group2", &json_messages(0..10_000, 40));
    sink.wait_count(1_000);
    drop(b); // SIGKILL
    broker.produce("group2", &json_messages(10_000..20_000, 40));
    // After the session timeout, the group gives all four partitions to a,
    // which reads what b had not committed, and everything written since.
    wait_assigned(&a, 4);
    wait_until(
        WAIT * 3,
        "every event written after the kill at the sink",
        || {
            let seqs: std::collections::HashSet<u64> = sink.seqs().into_iter().collect();
            (10_000..20_000).all(|s| seqs.contains(&s))
        },
    );
    // What b committed but had not sent yet waits in its file buffer; it
    // goes out when b starts again on it.
    let mut b = Daemon::start(&b_dir, "b", &config(&b_dir), None);
    let n = 20_000u64;
    wait_until(WAIT * 3, "every event at the sink", || {
        lost_and_duplicated(&sink.seqs(), n).0.is_empty()
    });
    assert_stopped(&mut a);
    assert_stopped(&mut b);
    let (missing, dups) = lost_and_duplicated(&sink.seqs(), n);
    eprintln!(
        "one of two consumers killed: lost {}, duplicated {dups}",
        missing.len()
    );
    assert!(missing.is_empty());
}

#[test]
fn check_names_bad_kafka_options() {
    // No broker needed: `nagare check` builds the plugins without connecting.
    let out = "[[output]]\ntype = \"kafka\"\nmatch = \"**\"\ntopic = \"t\"\n";
    let cases = [
        (
            format!("{out}acks = \"leader\"\n"),
            ":5: key `idempotence`",
            "needs acks = \"all\"",
        ),
        (format!("{out}compression = \"brotli\"\n"), ":9:", "brotli"),
        (
            format!("{out}properties = {{ \"no.such.property\" = \"1\" }}\n"),
            ":9: key `properties`",
            "No such configuration property: \"no.such.property\"",
        ),
        (
            format!("{out}tls = {{ ca = \"/no/such/ca.pem\" }}\n"),
            ":9: key `tls.ca`",
            "/no/such/ca.pem: no such file",
        ),
        (
            "[[input]]\ntype = \"kafka\"\ntopics = []\n".to_string(),
            ":7: key `topics`",
            "at least one topic",
        ),
        (
            "[[input]]\ntype = \"kafka\"\ntopics = [\"^(bad\"]\n".to_string(),
            ":7: key `topics`",
            "unclosed group",
        ),
        (
            "[[input]]\ntype = \"kafka\"\ntopics = [\"t\"]\nstart_from = \"middle\"\n".to_string(),
            ":8:",
            "middle",
        ),
    ];
    assert_check_errors(tempfile::tempdir().unwrap().path(), CHECK_BASE, &cases);
    // The scale-out examples are valid.
    for example in ["kafka-forwarder.toml", "kafka-aggregator.toml"] {
        let path = format!("{}/../../examples/{example}", env!("CARGO_MANIFEST_DIR"));
        let out = run_check(&path);
        assert!(
            out.status.success(),
            "{example}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// librdkafka, OpenSSL, zlib and zstd are built or linked into the binary:
/// the kafka plugins add no library the binary (or the .deb) needs at run
/// time. Checked with ldd on the binary these tests run and on NAGARE_BIN.
#[test]
fn kafka_support_adds_no_runtime_library() {
    let ldd_runs = std::process::Command::new("ldd")
        .arg("--version")
        .output()
        .is_ok();
    if skip_unless(ldd_runs, "ldd not found (Debian: libc-bin)") {
        return;
    }
    let mut bins = vec![BIN.to_string()];
    bins.extend(std::env::var("NAGARE_BIN").ok());
    for bin in bins {
        let out = std::process::Command::new("ldd")
            .arg(&bin)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        for lib in [
            "librdkafka",
            "libssl",
            "libcrypto",
            "libz.",
            "libzstd",
            "libsasl",
            "libcurl",
            "liblz4",
        ] {
            assert!(!text.contains(lib), "{bin} links {lib}:\n{text}");
        }
    }
}
