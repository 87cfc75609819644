//! The redis input and output against a real redis-server (one per test,
//! on a free loopback port): every data type by content, count and order;
//! nagare killed with SIGKILL while it consumes a reliable list or a stream
//! group; redis-server restarted mid-stream; bad data kept.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::redis_server::{skip_without_redis, RedisCluster, RedisSentinel, RedisServer};
use crate::common::*;

/// A forward input on `port`.
fn forward_in(port: u16) -> String {
    format!("[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:{port}\"\n")
}

/// A forward output of every event to the sink, with a file buffer in
/// `dir/buf` (what was buffered survives a kill -9).
fn forward_out(sink: u16, dir: &Path) -> String {
    format!(
        r#"[[output]]
type = "forward"
match = "**"
[[output.server]]
address = "127.0.0.1:{sink}"
[output.buffer]
type = "file"
path = "{}"
flush_interval = "50ms"
"#,
        dir.join("buf").display()
    )
}

/// `n` JSON elements `{"seq":i,"message":"event number i"}`.
fn json_elements(range: std::ops::Range<u64>) -> Vec<String> {
    range
        .map(|i| format!(r#"{{"seq":{i},"message":"{}"}}"#, message_for(i)))
        .collect()
}

/// Adds each value to stream `key` as an entry's `message` field, in one pipeline.
fn xadd_messages(redis: &RedisServer, key: &str, values: &[String]) {
    let mut pipe = redis::pipe();
    for v in values {
        pipe.cmd("XADD")
            .arg(key)
            .arg("*")
            .arg("message")
            .arg(v)
            .ignore();
    }
    let _: () = pipe.query(&mut redis.con()).unwrap();
}

fn rpush(redis: &RedisServer, key: &str, values: &[String]) {
    for chunk in values.chunks(1000) {
        let mut c = redis::cmd("RPUSH");
        c.arg(key).arg(chunk);
        let _: u64 = c.query(&mut redis.con()).unwrap();
    }
}

#[test]
fn output_writes_lists_channels_and_streams_in_order() {
    if skip_without_redis() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path());
    // A subscriber that is listening before anything is published.
    let mut sub_con = redis.con();
    let messages = std::thread::scope(|scope| {
        let mut pubsub = sub_con.as_pubsub();
        pubsub.subscribe("chan.app").unwrap();
        pubsub.set_read_timeout(Some(WAIT)).unwrap();
        let reader = scope.spawn(move || {
            (0..300)
                .map(|_| {
                    pubsub
                        .get_message()
                        .expect("a published message")
                        .get_payload_bytes()
                        .to_vec()
                })
                .collect::<Vec<_>>()
        });
        let port = free_port();
        let rport = redis.port;
        let sock = redis.socket();
        // One flush worker per output: chunks reach Redis in the order they closed.
        let buffer = "[output.buffer]\nflush_interval = \"20ms\"\nflush_thread_count = 1\n";
        let cfg = format!(
            r#"{}
[[output]]
type = "redis"
match = "list.**"
address = "127.0.0.1:{rport}"
key = "logs:${{tag}}"
tag_key = "tag"
{buffer}
[[output]]
type = "redis"
match = "lpush.**"
path = "{}"
key = "l:${{tag}}"
push = "lpush"
format = "single_value"
{buffer}
[[output]]
type = "redis"
match = "chan.**"
address = "redis://127.0.0.1:{rport}/0"
data_type = "channel"
key = "${{tag}}"
workers = 2
{buffer}
[[output]]
type = "redis"
match = "stream.**"
address = "127.0.0.1:{rport}"
data_type = "stream"
key = "s:${{tag}}"
format = "msgpack"
maxlen = 100000
{buffer}"#,
            forward_in(port),
            sock.display()
        );
        let mut nagare = Daemon::start(dir.path(), "out", &cfg, None);
        nagare.wait_port(port);
        let mut s = Sender::tcp(port);
        for tag in ["list.app", "lpush.app", "chan.app", "stream.app"] {
            s.send_acked(tag, 0..300, 50, tag);
        }
        let messages = reader.join().unwrap();
        wait_until(WAIT, "300 stream entries", || {
            redis.cmd::<u64>(&["XLEN", "s:stream.app"]) == 300
        });
        nagare.terminate();
        messages
    });

    // The list: RPUSH, Logstash's JSON layout, in order, with the tag field.
    let list: Vec<Vec<u8>> = redis.cmd(&["LRANGE", "logs:list.app", "0", "-1"]);
    assert_eq!(list.len(), 300);
    for (i, v) in list.iter().enumerate() {
        let j = json_value(v);
        assert_eq!(j["seq"], i as u64, "{j}");
        assert_eq!(j["message"], message_for(i as u64));
        assert_eq!(j["tag"], "list.app");
        let ts = j["@timestamp"].as_str().expect("@timestamp");
        assert!(
            chrono::DateTime::parse_from_rfc3339(ts).is_ok() && ts.ends_with('Z'),
            "{ts}"
        );
        assert_eq!(j.as_object().unwrap().len(), 4, "{j}");
    }
    // LPUSH over the UNIX socket, single values: the newest first.
    let lpushed: Vec<String> = redis.cmd(&["LRANGE", "l:lpush.app", "0", "-1"]);
    let expected: Vec<String> = (0..300).rev().map(message_for).collect();
    assert_eq!(lpushed, expected);
    // The channel, through two connections: every message, each whole.
    let mut seqs: Vec<u64> = messages
        .iter()
        .map(|m| json_value(m)["seq"].as_u64().unwrap())
        .collect();
    seqs.sort();
    assert_exact_seqs(&seqs, 300);
    // The stream: msgpack [time, record] entries, in order.
    let entries: redis::streams::StreamRangeReply =
        redis.cmd(&["XRANGE", "s:stream.app", "-", "+"]);
    let stream_seqs: Vec<u64> = entries
        .ids
        .iter()
        .map(|e| {
            let redis::Value::BulkString(b) = &e.map["message"] else {
                panic!("field message: {:?}", e.map)
            };
            seq_of(&decode_entries(b)[0])
        })
        .collect();
    assert_eq!(stream_seqs, (0..300).collect::<Vec<_>>());
}

#[test]
fn a_key_of_another_type_sends_the_chunk_to_the_secondary_at_once() {
    if skip_without_redis() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path());
    let _: () = redis.cmd(&["SET", "logs:app", "not a list"]);
    let port = free_port();
    let dead = dir.path().join("dead.log");
    let cfg = format!(
        r#"{}
[[output]]
type = "redis"
match = "**"
address = "127.0.0.1:{}"
key = "logs:${{tag}}"
[output.buffer]
flush_interval = "20ms"
retry_wait = "10s"
[output.secondary]
type = "file"
path = "{}"
"#,
        forward_in(port),
        redis.port,
        dead.display()
    );
    let mut nagare = Daemon::start(dir.path(), "wrongtype", &cfg, None);
    nagare.wait_port(port);
    let mut s = Sender::tcp(port);
    s.send_acked("app", 0..10, 10, "w");
    // retry_wait is 10 s: the secondary has them before any retry could run.
    let text = wait_file_lines(&dead, 10);
    assert_eq!(seqs(&json_lines_seqs(&text)), (0..10).collect::<Vec<_>>());
    // Logged before the chunk went to the secondary; the reader of nagare's
    // stderr may lag.
    nagare.wait_log("WRONGTYPE");
    assert_eq!(redis.cmd::<String>(&["GET", "logs:app"]), "not a list");
    nagare.terminate();
}

#[test]
fn input_reads_lists_in_batches_and_keeps_bad_data() {
    if skip_without_redis() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path());
    let mut values = json_elements(0..1000);
    values.insert(500, "not json at all".into());
    values.insert(10, r#"{"seq":"#.into());
    values[0] = format!(
        r#"{{"@timestamp":"2026-01-02T03:04:05.678Z","seq":0,"message":"{}"}}"#,
        message_for(0)
    );
    rpush(&redis, "jobs", &values);
    let out = dir.path().join("out.log");
    let cfg = format!(
        r#"[[input]]
type = "redis"
address = "127.0.0.1:{}"
key = "jobs"
threads = 2
batch_count = 50
[[output]]
type = "file"
match = "**"
path = "{}"
[output.buffer]
flush_interval = "50ms"
"#,
        redis.port,
        out.display()
    );
    let mut nagare = Daemon::start(dir.path(), "in", &cfg, None);
    let text = wait_file_lines(&out, 1002);
    let lines: Vec<serde_json::Value> = text.lines().map(|l| json_value(l.as_bytes())).collect();
    assert!(
        lines.iter().all(|l| l["tag"] == "jobs"),
        "the tag is the key's name"
    );
    let (bad, good): (Vec<_>, Vec<_>) = lines
        .iter()
        .partition(|l| l["record"].get("parse_error").is_some());
    let mut bad_messages: Vec<&str> = bad
        .iter()
        .map(|l| l["record"]["message"].as_str().unwrap())
        .collect();
    bad_messages.sort();
    assert_eq!(bad_messages, ["not json at all", r#"{"seq":"#]);
    let seqs: Vec<u64> = good
        .iter()
        .map(|l| l["record"]["seq"].as_u64().unwrap())
        .collect();
    assert_exact_seqs(&seqs, 1000);
    // Logstash's @timestamp is the event's time, not a field.
    let first = good.iter().find(|l| l["record"]["seq"] == 0).unwrap();
    assert_eq!(first["time"], "2026-01-02T03:04:05.678000000Z");
    assert!(first["record"].get("@timestamp").is_none());
    assert_eq!(redis.cmd::<u64>(&["LLEN", "jobs"]), 0);
    nagare.terminate();
}

#[test]
fn input_subscribes_to_channel_patterns() {
    if skip_without_redis() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path());
    let sink = Sink::start(SinkOpts::default());
    let cfg = format!(
        r#"[[input]]
type = "redis"
path = "{}"
data_type = "pattern_channel"
key = "app.*"
format = "msgpack"
{}"#,
        redis.socket().display(),
        forward_out(sink.port, dir.path())
    );
    let mut nagare = Daemon::start(dir.path(), "sub", &cfg, None);
    wait_until(WAIT, "nagare to subscribe", || {
        redis.cmd::<u64>(&["PUBSUB", "NUMPAT"]) == 1
    });
    let mut con = redis.con();
    for i in 0..200u64 {
        let channel = if i % 2 == 0 { "app.web" } else { "app.db" };
        let _: u64 = redis::cmd("PUBLISH")
            .arg(channel)
            .arg(record(i, &message_for(i)))
            .query(&mut con)
            .unwrap();
    }
    // Not matched by the pattern: not read.
    let _: u64 = redis::cmd("PUBLISH")
        .arg("other")
        .arg(record(999, "x"))
        .query(&mut con)
        .unwrap();
    sink.wait_records(200);
    let events = sink.events();
    for (tag, parity) in [("app.web", 0), ("app.db", 1)] {
        let got: Vec<u64> = events
            .iter()
            .filter(|(t, _)| t == tag)
            .map(|(_, s)| *s)
            .collect();
        let want: Vec<u64> = (0..200).filter(|s| s % 2 == parity).collect();
        assert_eq!(
            got, want,
            "{tag}: every message, in order, tagged by its channel"
        );
    }
    nagare.terminate();
    assert_eq!(sink.count(), 200);
}

#[test]
fn input_reads_a_stream_group_and_acknowledges_what_it_buffered() {
    if skip_without_redis() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path());
    let sink = Sink::start(SinkOpts::default());
    let mut con = redis.con();
    for (i, v) in json_elements(0..500).iter().enumerate() {
        // Half route by a field, half fall back to the fixed tag.
        let v = if i % 2 == 0 {
            v.replace('}', r#","dest":"by.field"}"#)
        } else {
            v.clone()
        };
        let _: String = redis::cmd("XADD")
            .arg("events")
            .arg("*")
            .arg("message")
            .arg(v)
            .query(&mut con)
            .unwrap();
    }
    let cfg = format!(
        r#"[[input]]
type = "redis"
address = "127.0.0.1:{}"
data_type = "stream"
key = "events"
tag = "fixed"
tag_key = "dest"
batch_count = 64
{}"#,
        redis.port,
        forward_out(sink.port, dir.path())
    );
    let mut nagare = Daemon::start(dir.path(), "stream", &cfg, None);
    sink.wait_records(500);
    let events = sink.events();
    let by_tag = |tag: &str| {
        events
            .iter()
            .filter(|(t, _)| t == tag)
            .map(|(_, s)| *s)
            .collect::<Vec<_>>()
    };
    assert_eq!(by_tag("by.field"), (0..500).step_by(2).collect::<Vec<_>>());
    assert_eq!(by_tag("fixed"), (1..500).step_by(2).collect::<Vec<_>>());
    wait_until(WAIT, "every entry acknowledged", || {
        let pending: (u64, Option<String>, Option<String>, redis::Value) =
            redis.cmd(&["XPENDING", "events", "nagare"]);
        pending.0 == 0
    });
    nagare.terminate();
    assert_eq!(sink.count(), 500);
}

/// Config of a consumer with a fixed consumer name (so a restart finds its
/// processing list or pending entries) forwarding to the sink.
fn consumer_config(redis: &RedisServer, sink: u16, dir: &Path, extra: &str) -> String {
    format!(
        r#"[[input]]
type = "redis"
address = "127.0.0.1:{}"
key = "jobs"
consumer = "c"
threads = 2
batch_count = 100
{extra}
{}"#,
        redis.port,
        forward_out(sink, dir)
    )
}

/// Kills nagare (config `cfg`) with SIGKILL once the sink has some of the
/// events, starts it again (config `cfg_again`), waits until `drained` and
/// the sink has every seq of 0..n, and returns how many came twice.
fn kill_mid_stream(
    dir: &Path,
    (cfg, cfg_again): (&str, &str),
    sink: &Sink,
    n: u64,
    drained: impl Fn() -> bool,
) -> usize {
    let mut nagare = Daemon::start(dir, "consumer", cfg, None);
    wait_until(WAIT, "the first events at the sink", || {
        sink.count() >= 2000
    });
    nagare.signal(libc::SIGKILL);
    nagare.wait_exit(WAIT);
    let before = sink.count();
    assert!(
        before < n as usize,
        "killed after everything arrived: the test proves nothing"
    );
    let mut again = Daemon::start(dir, "consumer-again", cfg_again, None);
    wait_until(Duration::from_secs(60), "every event at the sink", || {
        drained() && lost_and_duplicated(&sink.seqs(), n).0.is_empty()
    });
    let (lost, dups) = lost_and_duplicated(&sink.seqs(), n);
    assert!(lost.is_empty());
    again.terminate();
    eprintln!("killed after {before} of {n} events; 0 lost, {dups} read twice (at least once)");
    dups
}

#[test]
fn a_reliable_list_loses_nothing_when_nagare_is_killed() {
    if skip_without_redis() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path());
    let sink = Sink::start(SinkOpts::default());
    let n = 60_000;
    rpush(&redis, "jobs", &json_elements(0..n));
    let cfg = consumer_config(&redis, sink.port, dir.path(), "reliable = true");
    let dups = kill_mid_stream(dir.path(), (&cfg, &cfg), &sink, n, || {
        redis.cmd::<u64>(&["LLEN", "jobs"]) == 0
            && redis
                .cmd::<Vec<String>>(&["KEYS", "jobs:processing:*"])
                .is_empty()
    });
    // At most the batches in flight at the kill (2 threads × 100) come twice.
    assert!(dups <= 200, "{dups} duplicates");
}

#[test]
fn a_stream_group_loses_nothing_when_nagare_is_killed() {
    if skip_without_redis() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path());
    let sink = Sink::start(SinkOpts::default());
    let n = 60_000u64;
    xadd_messages(&redis, "jobs", &json_elements(0..n));
    let cfg = consumer_config(&redis, sink.port, dir.path(), "data_type = \"stream\"");
    let dups = kill_mid_stream(dir.path(), (&cfg, &cfg), &sink, n, || {
        let pending: (u64, Option<String>, Option<String>, redis::Value) =
            redis.cmd(&["XPENDING", "jobs", "nagare"]);
        pending.0 == 0
    });
    assert!(dups <= 200, "{dups} duplicates");
}

#[test]
fn entries_a_dead_consumer_left_pending_are_claimed_by_another() {
    if skip_without_redis() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path());
    let sink = Sink::start(SinkOpts::default());
    let n = 60_000u64;
    xadd_messages(&redis, "jobs", &json_elements(0..n));
    // The first consumer ("c") never comes back; "d" takes over what it
    // read and did not acknowledge once it was idle for claim_idle.
    let first = consumer_config(&redis, sink.port, dir.path(), "data_type = \"stream\"");
    let other = first
        .replace("consumer = \"c\"", "consumer = \"d\"")
        .replace(
            "data_type = \"stream\"",
            "data_type = \"stream\"\nclaim_idle = \"300ms\"",
        );
    kill_mid_stream(dir.path(), (&first, &other), &sink, n, || {
        let pending: (u64, Option<String>, Option<String>, redis::Value) =
            redis.cmd(&["XPENDING", "jobs", "nagare"]);
        pending.0 == 0
    });
}

#[test]
fn tls_acl_user_and_database() {
    if skip_without_redis() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pki = dir.path().join("pki");
    std::fs::create_dir_all(&pki).unwrap();
    let openssl = |args: &str| {
        let st = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("openssl {args}"))
            .current_dir(&pki)
            .stderr(std::process::Stdio::null())
            .status()
            .expect("openssl");
        assert!(st.success(), "openssl {args}");
    };
    openssl("req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 1 -subj /CN=nagare-test-ca");
    openssl("req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=localhost");
    std::fs::write(
        pki.join("san.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .unwrap();
    openssl("x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 1 -extfile san.ext");
    let tls_port = free_port();
    let p = |f: &str| pki.join(f).display().to_string();
    let tls_port_s = tls_port.to_string();
    let (cert, key, ca) = (p("server.pem"), p("server.key"), p("ca.pem"));
    let redis = RedisServer::start_args(
        dir.path(),
        &[
            "--tls-port",
            &tls_port_s,
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca,
            "--tls-auth-clients",
            "no",
            // The user nagare logs in as may only touch keys "secure:*".
            "--user",
            "app",
            "on",
            ">s3cret",
            "~secure:*",
            "&*",
            "+@all",
        ],
    );
    let sink = Sink::start(SinkOpts::default());
    let port = free_port();
    let conn = format!(
        "address = \"rediss://127.0.0.1:{tls_port}\"\nusername = \"app\"\npassword = \"s3cret\"\ndb = 3\ntls = {{ ca = \"{ca}\" }}"
    );
    let cfg = format!(
        r#"{}
[[input]]
type = "redis"
key = "secure:in"
tag = "from.redis"
{conn}
[[output]]
type = "redis"
match = "to.redis"
key = "secure:${{tag}}"
{conn}
[output.buffer]
flush_interval = "20ms"
{}"#,
        forward_in(port),
        forward_out(sink.port, dir.path())
    );
    let mut nagare = Daemon::start(dir.path(), "tls", &cfg, None);
    nagare.wait_port(port);
    Sender::tcp(port).send_acked("to.redis", 0..100, 50, "t");
    // The output wrote to database 3 over TLS as "app"…
    let mut con = redis.con();
    let _: () = redis::cmd("SELECT").arg(3).query(&mut con).unwrap();
    wait_until(WAIT, "100 elements in db 3", || {
        redis::cmd("LLEN")
            .arg("secure:to.redis")
            .query::<u64>(&mut con)
            .unwrap()
            == 100
    });
    // …and the input reads database 3 over TLS as "app".
    let moved: Vec<Vec<u8>> = redis::cmd("LRANGE")
        .arg("secure:to.redis")
        .arg(0)
        .arg(-1)
        .query(&mut con)
        .unwrap();
    let _: u64 = redis::cmd("RPUSH")
        .arg("secure:in")
        .arg(moved)
        .query(&mut con)
        .unwrap();
    sink.wait_records(100);
    assert!(sink.events().iter().all(|(t, _)| t == "from.redis"));
    assert_eq!(sink.seqs(), (0..100).collect::<Vec<_>>());
    assert_eq!(
        redis.cmd::<u64>(&["LLEN", "secure:to.redis"]),
        0,
        "db 0 untouched"
    );
    nagare.terminate();
}

#[test]
fn output_writes_to_a_redis_cluster() {
    if skip_without_redis() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cluster = RedisCluster::start(dir.path());
    let port = free_port();
    let cfg = format!(
        r#"{}
[[output]]
type = "redis"
match = "**"
addresses = ["127.0.0.1:{}"]
key = "logs:${{tag}}"
format = "single_value"
[output.buffer]
flush_interval = "20ms"
flush_thread_count = 1
"#,
        forward_in(port),
        cluster.nodes[0].port
    );
    let mut nagare = Daemon::start(dir.path(), "cluster", &cfg, None);
    nagare.wait_port(port);
    let tags: Vec<String> = (0..12).map(|i| format!("app{i}")).collect();
    let mut s = Sender::tcp(port);
    for tag in &tags {
        s.send_acked(tag, 0..50, 50, tag);
    }
    let mut con = cluster.con();
    for tag in &tags {
        let key = format!("logs:{tag}");
        wait_until(WAIT, &format!("50 elements in {key}"), || {
            redis::cmd("LLEN").arg(&key).query::<u64>(&mut con).unwrap() == 50
        });
        let got: Vec<String> = redis::cmd("LRANGE")
            .arg(&key)
            .arg(0)
            .arg(-1)
            .query(&mut con)
            .unwrap();
        assert_eq!(got, (0..50).map(message_for).collect::<Vec<_>>(), "{key}");
    }
    // The keys are spread over the nodes: every node holds some.
    for n in &cluster.nodes {
        assert!(
            n.cmd::<u64>(&["DBSIZE"]) > 0,
            "node {} holds none of the 12 keys",
            n.port
        );
    }
    nagare.terminate();
}

/// A master, its replica and a sentinel; nagare → list → nagare → sink,
/// both nagares finding the master through the sentinel. A failover
/// (SENTINEL FAILOVER) in the middle of the stream: both follow the new
/// master, and with `wait_replicas = 1` no acknowledged event is lost to
/// Redis's asynchronous replication.
#[test]
fn sentinel_failover_mid_stream_loses_nothing() {
    if skip_without_redis() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let master = RedisServer::start(&dir.path().join("m"));
    let replica = RedisServer::start_args(
        &dir.path().join("r"),
        &["--replicaof", "127.0.0.1", &master.port.to_string()],
    );
    let sentinel = RedisSentinel::start(dir.path(), master.port);
    let sink = Sink::start(SinkOpts::default());
    let port = free_port();
    let via_sentinel = format!(
        "sentinels = [\"127.0.0.1:{}\"]\nmaster_name = \"mymaster\"\nkey = \"jobs\"",
        sentinel.port
    );
    let producer = format!(
        r#"{}
[[output]]
type = "redis"
match = "**"
{via_sentinel}
wait_replicas = 1
timeout = "2s"
[output.buffer]
flush_interval = "20ms"
retry_wait = "100ms"
retry_max_interval = "500ms"
"#,
        forward_in(port),
    );
    let consumer = format!(
        "[[input]]\ntype = \"redis\"\n{via_sentinel}\nreliable = true\nconsumer = \"c\"\nbatch_count = 100\n{}",
        forward_out(sink.port, &dir.path().join("c"))
    );
    let mut p = Daemon::start(dir.path(), "producer", &producer, None);
    let mut c = Daemon::start(dir.path(), "consumer", &consumer, None);
    p.wait_port(port);
    let n = 20_000u64;
    let mut s = Sender::tcp(port);
    s.send_acked("app", 0..n / 2, 100, "s");
    wait_until(WAIT, "the first events at the sink", || {
        sink.count() >= 2000
    });
    sentinel.failover();
    // Sent while the sentinel fails the master over.
    s.send_acked("app", n / 2..n, 100, "s");
    wait_until(WAIT, "the sentinel to name the replica as master", || {
        sentinel.master_port() == replica.port
    });
    s.finish();
    wait_until(Duration::from_secs(60), "every event at the sink", || {
        lost_and_duplicated(&sink.seqs(), n).0.is_empty()
    });
    let (lost, dups) = lost_and_duplicated(&sink.seqs(), n);
    assert!(lost.is_empty());
    // The old master was demoted: what came after was written to the new one.
    wait_until(WAIT, "the old master to be a replica", || {
        master.cmd::<Vec<redis::Value>>(&["ROLE"]).first()
            == Some(&redis::Value::BulkString(b"slave".to_vec()))
    });
    wait_until(WAIT, "the new master's list to be drained", || {
        replica.cmd::<u64>(&["LLEN", "jobs"]) == 0
    });
    eprintln!("sentinel failover: 0 lost, {dups} duplicated");
    p.terminate();
    c.terminate();
}

#[test]
fn redis_restarted_mid_stream_loses_nothing() {
    if skip_without_redis() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut redis = RedisServer::start_durable(dir.path());
    let sink = Sink::start(SinkOpts::default());
    let port = free_port();
    // nagare → Redis list → nagare → sink.
    let producer = format!(
        r#"{}
[[output]]
type = "redis"
match = "**"
address = "127.0.0.1:{}"
key = "jobs"
timeout = "2s"
[output.buffer]
flush_interval = "20ms"
retry_wait = "100ms"
retry_max_interval = "500ms"
"#,
        forward_in(port),
        redis.port
    );
    let consumer = consumer_config(&redis, sink.port, &dir.path().join("c"), "reliable = true");
    let mut p = Daemon::start(dir.path(), "producer", &producer, None);
    let mut c = Daemon::start(dir.path(), "consumer", &consumer, None);
    p.wait_port(port);
    let n = 20_000u64;
    let mut s = Sender::tcp(port);
    s.send_acked("app", 0..n / 2, 100, "r");
    wait_until(WAIT, "the first events at the sink", || {
        sink.count() >= 3000
    });
    redis.stop();
    // Sent while Redis is down: the producer buffers them (acks) and retries.
    s.send_acked("app", n / 2..n, 100, "r");
    p.wait_log("flush failed; will retry");
    c.wait_log("cannot read");
    redis.restart();
    s.finish();
    let start = Instant::now();
    wait_until(Duration::from_secs(60), "every event at the sink", || {
        lost_and_duplicated(&sink.seqs(), n).0.is_empty()
    });
    let (lost, dups) = lost_and_duplicated(&sink.seqs(), n);
    assert!(lost.is_empty());
    eprintln!(
        "redis restarted: 0 lost, {dups} duplicated, drained in {:?}",
        start.elapsed()
    );
    p.terminate();
    c.terminate();
}

#[test]
fn the_input_waits_out_a_key_of_another_type() {
    if skip_without_redis() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start(dir.path());
    let sink = Sink::start(SinkOpts::default());
    let _: () = redis.cmd(&["SET", "jobs", "a string"]);
    let cfg = consumer_config(&redis, sink.port, dir.path(), "");
    let mut nagare = Daemon::start(dir.path(), "wrongtype", &cfg, None);
    nagare.wait_log("WRONGTYPE");
    let _: u64 = redis.cmd(&["DEL", "jobs"]);
    rpush(&redis, "jobs", &json_elements(0..10));
    sink.wait_records(10);
    let mut seqs = sink.seqs();
    seqs.sort();
    assert_exact_seqs(&seqs, 10);
    nagare.terminate();
}

/// With `sentinels`, `address` is not used: `check` does not read it, and
/// neither does the input's start (it built a plain client from it, and an
/// address `check` let through stopped nagare at start). Needs no server:
/// the input asks a sentinel that is not there, logs it and tries again.
#[test]
fn an_input_with_sentinels_starts_whatever_its_address() {
    let dir = tempfile::tempdir().unwrap();
    let nobody = free_port();
    let cfg = format!(
        "[[input]]\ntype = \"redis\"\nkey = \"jobs\"\nsentinels = [\"127.0.0.1:{nobody}\"]\naddress = \"redis://[unused\"\n\
         [[output]]\ntype = \"null\"\nmatch = \"**\"\n"
    );
    let mut nagare = Daemon::start(dir.path(), "sentinel-start", &cfg, None);
    nagare.wait_log("trying again");
    assert!(
        nagare.stderr().contains(&format!("127.0.0.1:{nobody}")),
        "the retry names the sentinel: {}",
        nagare.stderr()
    );
    let status = nagare.terminate();
    assert!(status.success(), "{status}: {}", nagare.stderr());
}

#[test]
fn check_names_bad_options() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("[[input]]\ntype = \"redis\"\nkey = \"k\"\ndata_type = \"stream\"\nreliable = true\n", "reliable"),
        ("[[input]]\ntype = \"redis\"\nkey = \"k\"\nformat = \"json\"\n[input.parser]\ntype = \"none\"\n", "parser"),
        ("[[input]]\ntype = \"redis\"\nkey = \"k\"\naddress = \"redis://[nope\"\n", "address"),
        ("[[output]]\ntype = \"redis\"\nmatch = \"**\"\nkey = \"k\"\nmaxlen = 5\n", "maxlen"),
        ("[[output]]\ntype = \"redis\"\nmatch = \"**\"\nkey = \"\"\n", "key"),
        ("[[output]]\ntype = \"redis\"\nmatch = \"**\"\nkey = \"k\"\ntls = { ca = \"/nonexistent.pem\" }\n", "tls.ca"),
        ("[[input]]\ntype = \"redis\"\nkey = \"k\"\naddresses = [\"127.0.0.1:7000\"]\n", "addresses"),
        ("[[output]]\ntype = \"redis\"\nmatch = \"**\"\nkey = \"k\"\naddresses = [\"127.0.0.1:7000\"]\ndb = 2\n", "db"),
        ("[[output]]\ntype = \"redis\"\nmatch = \"**\"\nkey = \"k\"\naddresses = [\"127.0.0.1:7000\"]\nwait_replicas = 1\n", "wait_replicas"),
        ("[[output]]\ntype = \"redis\"\nmatch = \"**\"\nkey = \"k\"\nsentinels = [\"127.0.0.1:26379\"]\npath = \"/tmp/r.sock\"\n", "sentinels"),
        ("[[input]]\ntype = \"redis\"\nkey = \"k\"\nsentinels = [\"redis://[nope\"]\n", "sentinels"),
        ("[[input]]\ntype = \"redis\"\nkey = \"k\"\nsentinels = [\"127.0.0.1:26379\"]\nmaster_name = \"\"\n", "master_name"),
    ];
    for (i, (text, key)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("c{i}.toml"));
        std::fs::write(&path, text).unwrap();
        let out = run_check(&path);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text}: {err}");
        assert!(
            err.contains(&format!("`{key}`")),
            "{text}: the error names `{key}`: {err}"
        );
    }
}
