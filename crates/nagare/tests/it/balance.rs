//! The forward output across several servers: load balancing by weight and
//! by consistent hashing, failover to a standby when the primary dies, and
//! back; heartbeats with the shared-key handshake; servers from a file and
//! from DNS (dnsmasq).

use std::collections::{BTreeMap, HashSet};

use crate::common::*;

#[test]
fn load_balancing_across_two_receivers() {
    let dir = tempfile::tempdir().unwrap();
    let (s1, s2) = (
        Sink::start(SinkOpts::default()),
        Sink::start(SinkOpts::default()),
    );
    let (port, mon) = (free_port(), free_port());
    let cfg = format!(
        r#"[monitor]
bind = "127.0.0.1:{mon}"
[[input]]
type = "forward"
bind = "127.0.0.1:{port}"
[[output]]
type = "forward"
match = "**"
heartbeat_interval = "200ms"
[[output.server]]
address = "127.0.0.1:{}"
[[output.server]]
address = "127.0.0.1:{}"
[output.buffer]
flush_interval = "20ms"
chunk_limit_records = 100
"#,
        s1.port, s2.port
    );
    let mut d = Daemon::start(dir.path(), "lb", &cfg, Some(mon));
    d.wait_port(port);
    let n = 6000u64;
    let mut tx = Sender::tcp(port);
    // One acked frame at a time, so each frame is one batch and one chunk
    // (chunk_limit_records = 100).
    tx.send_acked("lb.events", 0..n, 100, "lb");
    tx.finish();
    wait_until(WAIT, "all events at the two sinks", || {
        s1.count() + s2.count() >= n as usize
    });
    d.wait_metric("events_out_total", "forward#0", n);
    let mut all = s1.seqs();
    all.extend(s2.seqs());
    assert_exact_seqs(&all, n);
    // Equal weights: chunks alternate, so each gets a fair share.
    let (c1, c2) = (s1.count() as u64, s2.count() as u64);
    assert!(
        c1 >= n / 4 && c2 >= n / 4,
        "both receivers get a share: {c1} and {c2}"
    );
    assert!(d.terminate().success());
    assert_eq!(s1.count() + s2.count(), n as usize);
}

#[test]
fn failover_to_standby_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut primary = Sink::start(SinkOpts::default());
    let standby = Sink::start(SinkOpts::default());
    let (port, mon) = (free_port(), free_port());
    let cfg = format!(
        r#"[monitor]
bind = "127.0.0.1:{mon}"
[[input]]
type = "forward"
bind = "127.0.0.1:{port}"
[[output]]
type = "forward"
match = "**"
require_ack_response = true
ack_response_timeout = "2s"
heartbeat_type = "transport"
heartbeat_interval = "200ms"
[[output.server]]
address = "127.0.0.1:{}"
[[output.server]]
address = "127.0.0.1:{}"
standby = true
[output.buffer]
flush_interval = "20ms"
chunk_limit_records = 50
retry_wait = "100ms"
retry_max_interval = "500ms"
"#,
        primary.port, standby.port
    );
    let mut d = Daemon::start(dir.path(), "failover", &cfg, Some(mon));
    d.wait_port(port);
    let mut tx = Sender::tcp(port);

    // 1. The primary is up: it gets everything, the standby nothing.
    tx.send_seqs("fo.events", 1000, 50);
    primary.wait_count(1000);
    assert_exact_seqs(&primary.seqs(), 1000);
    assert_eq!(
        standby.count(),
        0,
        "the standby gets nothing while the primary is up"
    );

    // 2. The primary is killed: the standby takes over; nothing is lost.
    primary.stop();
    let mut s = 1000;
    while s < 3000 {
        tx.packed("fo.events", s..s + 50, None);
        s += 50;
    }
    wait_until(WAIT, "events 0..3000 delivered", || {
        primary.count() + standby.count() >= 3000
    });
    let mut all = primary.seqs();
    all.extend(standby.seqs());
    assert_exact_seqs(&all, 3000);
    assert_eq!(
        standby.count(),
        2000,
        "the standby took every event after the kill"
    );
    d.wait_log_line("the primary marked down", |l| {
        l.contains("forward server marked down")
            && l.contains(&format!("server=127.0.0.1:{}", primary.port))
    });

    // 3. The primary comes back: it is used again, the standby rests.
    primary.restart();
    d.wait_log_line("the primary marked up again", |l| {
        l.contains("forward server is up")
            && l.contains(&format!("server=127.0.0.1:{}", primary.port))
    });
    let before = standby.count();
    tx.packed("fo.events", 3000..3500, None);
    tx.finish();
    wait_until(WAIT, "events 3000..3500 at the primary", || {
        primary.count() >= 1500
    });
    assert_eq!(
        standby.count(),
        before,
        "the standby rests once the primary is back"
    );
    let mut all = primary.seqs();
    all.extend(standby.seqs());
    assert_exact_seqs(&all, 3500);
    let back: HashSet<u64> = primary.seqs().into_iter().filter(|&s| s >= 3000).collect();
    assert_eq!(back.len(), 500);
    assert!(d.terminate().success());
}

/// Events `seqs` with `host` = "h{seq % hosts}", sent in acked frames of 50.
fn send_hosts(tx: &mut Sender, seqs: std::ops::Range<u64>, hosts: u64) {
    let records: Vec<rmpv::Value> = seqs
        .clone()
        .map(|s| {
            m(&[
                ("host", format!("h{}", s % hosts).into()),
                ("seq", s.into()),
            ])
        })
        .collect();
    for (i, part) in records.chunks(50).enumerate() {
        send_records_acked(tx, "ch.events", part, &format!("c{}-{i}", seqs.start));
    }
}

/// host -> (index of the sink that got its events, their seqs in order of
/// arrival), for the events with seq in `range`; panics when a host's
/// events of that range went to two sinks.
fn hosts_at(sinks: &[&Sink], range: std::ops::Range<u64>) -> BTreeMap<String, (usize, Vec<u64>)> {
    let mut at: BTreeMap<String, (usize, Vec<u64>)> = BTreeMap::new();
    for (i, s) in sinks.iter().enumerate() {
        for (_, _, r) in s.records() {
            let seq = seq_of(&r);
            if !range.contains(&seq) {
                continue;
            }
            let host = field_of(&r, "host").unwrap().as_str().unwrap().to_string();
            let e = at.entry(host.clone()).or_insert((i, Vec::new()));
            assert_eq!(
                e.0, i,
                "{host}'s events {range:?} went to sinks {} and {i}",
                e.0
            );
            e.1.push(seq);
        }
    }
    for (host, (_, seqs)) in &at {
        assert!(
            seqs.windows(2).all(|w| w[0] < w[1]),
            "{host} out of order: {seqs:?}"
        );
    }
    at
}

#[test]
fn consistent_hash_keeps_each_key_on_one_server_and_moves_only_a_leavers_keys() {
    let dir = tempfile::tempdir().unwrap();
    let mut sinks: Vec<Sink> = (0..3).map(|_| Sink::start(SinkOpts::default())).collect();
    let (port, mon) = (free_port(), free_port());
    let servers: String = sinks
        .iter()
        .map(|s| format!("[[output.server]]\naddress = \"127.0.0.1:{}\"\n", s.port))
        .collect();
    let cfg = format!(
        r#"[monitor]
bind = "127.0.0.1:{mon}"
[[input]]
type = "forward"
bind = "127.0.0.1:{port}"
[[output]]
type = "forward"
match = "**"
lb = "consistent_hash"
hash_key = "host"
require_ack_response = true
heartbeat_interval = "200ms"
{servers}[output.buffer]
flush_interval = "20ms"
retry_wait = "100ms"
retry_max_interval = "300ms"
"#
    );
    let mut d = Daemon::start(dir.path(), "ch", &cfg, Some(mon));
    d.wait_port(port);
    let mut tx = Sender::tcp(port);
    let hosts = 40;
    let all = |sinks: &[Sink]| sinks.iter().map(|s| s.count()).sum::<usize>();

    // 1. All three up: each host's events at one sink, in order; every sink
    //    holds some hosts.
    send_hosts(&mut tx, 0..400, hosts);
    wait_until(WAIT, "400 events at the sinks", || all(&sinks) >= 400);
    d.wait_metric("events_out_total", "forward#0", 400);
    let refs: Vec<&Sink> = sinks.iter().collect();
    let first = hosts_at(&refs, 0..400);
    assert_eq!(first.len(), hosts as usize);
    for i in 0..3 {
        assert!(
            first.values().any(|(s, _)| *s == i),
            "sink {i} holds no host: {first:?}"
        );
    }

    // 2. Sink 1 leaves: only its hosts move; the others' stay where they were.
    sinks[1].stop();
    send_hosts(&mut tx, 400..800, hosts);
    wait_until(WAIT, "800 events at the sinks", || all(&sinks) >= 800);
    let refs: Vec<&Sink> = sinks.iter().collect();
    let second = hosts_at(&refs, 400..800);
    let mut moved = 0;
    for (host, (was, _)) in &first {
        let now = second[host].0;
        if *was == 1 {
            assert_ne!(now, 1);
            moved += 1;
        } else {
            assert_eq!(
                now, *was,
                "{host} moved from sink {was} to {now} though its sink stayed"
            );
        }
    }
    assert!(moved > 0);

    // 3. Sink 1 returns: its hosts come back to it, the others stay.
    sinks[1].restart();
    let back = format!("server=127.0.0.1:{}", sinks[1].port);
    d.wait_log_line("sink 1 marked up again", |l| {
        l.contains("forward server is up") && l.contains(&back)
    });
    send_hosts(&mut tx, 800..1200, hosts);
    tx.finish();
    wait_until(WAIT, "1200 events at the sinks", || all(&sinks) >= 1200);
    let refs: Vec<&Sink> = sinks.iter().collect();
    let third = hosts_at(&refs, 800..1200);
    for (host, (was, _)) in &first {
        assert_eq!(
            third[host].0, *was,
            "{host} is back where it was before sink 1 left"
        );
    }
    let mut seqs: Vec<u64> = sinks.iter().flat_map(|s| s.seqs()).collect();
    seqs.sort_unstable();
    assert_exact_seqs(&seqs, 1200);
    assert!(d.terminate().success());
}

/// Waits until the forward input's metric `name` is at least `n`.
fn wait_at_least(d: &Daemon, name: &str, n: u64) {
    wait_until(WAIT, &format!("{name} of forward#0 at least {n}"), || {
        d.metric(name, "forward#0") >= n
    });
}

/// A nagare aggregator with a forward input that requires `key`, writing
/// what it receives to `out`.
fn keyed_aggregator(
    dir: &std::path::Path,
    name: &str,
    key: &str,
) -> (Daemon, u16, u16, std::path::PathBuf) {
    let (port, mon) = (free_port(), free_port());
    let out = dir.join(format!("{name}.log"));
    let cfg = format!(
        r#"[monitor]
bind = "127.0.0.1:{mon}"
[[input]]
type = "forward"
bind = "127.0.0.1:{port}"
shared_key = "{key}"
[[output]]
type = "file"
match = "**"
path = "{}"
[output.buffer]
flush_interval = "50ms"
"#,
        out.display()
    );
    let mut d = Daemon::start(dir, name, &cfg, Some(mon));
    d.wait_port(port);
    d.wait_port(mon);
    (d, port, mon, out)
}

/// A forwarder sending everything to `servers` (`[[output.server]]` tables)
/// with the shared key "k3y", transport heartbeats every 100 ms and acks.
fn keyed_forwarder(dir: &std::path::Path, servers: &str) -> (Daemon, u16) {
    acking_forwarder(
        dir,
        "forwarder",
        &format!("shared_key = \"k3y\"\n{servers}"),
    )
}

/// A forwarder whose forward output acks, beats every 100 ms and retries
/// fast; `output` adds the output's own lines (keys, servers, tables).
fn acking_forwarder(dir: &std::path::Path, name: &str, output: &str) -> (Daemon, u16) {
    let (port, mon) = (free_port(), free_port());
    let cfg = format!(
        r#"[monitor]
bind = "127.0.0.1:{mon}"
[[input]]
type = "forward"
bind = "127.0.0.1:{port}"
[[output]]
type = "forward"
match = "**"
require_ack_response = true
heartbeat_interval = "100ms"
{output}
[output.buffer]
flush_interval = "20ms"
retry_wait = "100ms"
retry_max_interval = "300ms"
"#
    );
    let mut d = Daemon::start(dir, name, &cfg, Some(mon));
    d.wait_port(port);
    (d, port)
}

#[test]
fn heartbeats_complete_the_handshake_and_a_refused_key_keeps_the_server_down() {
    let dir = tempfile::tempdir().unwrap();
    let (mut good, good_port, _, good_out) = keyed_aggregator(dir.path(), "good", "k3y");
    let (mut bad, bad_port, _, _) = keyed_aggregator(dir.path(), "bad", "another key");
    // The wait_port probes closed during the handshake: one bad input each.
    good.wait_metric("bad_input_total", "forward#0", 1);
    bad.wait_metric("bad_input_total", "forward#0", 1);
    let standby = Sink::start(SinkOpts {
        shared_key: Some("k3y".into()),
        ..SinkOpts::default()
    });

    // The right key: heartbeats are complete clients to the aggregator.
    let (mut f, port) = keyed_forwarder(
        dir.path(),
        &format!("[[output.server]]\naddress = \"127.0.0.1:{good_port}\"\n"),
    );
    // Ten heartbeats (and no data yet): ten connections.
    wait_at_least(&good, "connections_total", 11);
    let mut tx = Sender::tcp(port);
    tx.send_seqs("hb.good", 300, 50);
    tx.finish();
    let got = json_lines_seqs(&wait_file_lines(&good_out, 300));
    assert_exact_seqs(&seqs(&got), 300);
    wait_at_least(&good, "connections_total", 20);
    assert_eq!(
        good.metric("bad_input_total", "forward#0"),
        1,
        "heartbeats left handshake errors at the receiver:\n{}",
        good.stderr()
    );
    assert!(f.terminate().success());

    // A refused key: the server is marked down once, never up again (no
    // flapping with the heartbeats), and the standby takes the events.
    let (mut f, port) = keyed_forwarder(
        dir.path(),
        &format!(
            "[[output.server]]\naddress = \"127.0.0.1:{bad_port}\"\n\
             [[output.server]]\naddress = \"127.0.0.1:{}\"\nstandby = true\n",
            standby.port
        ),
    );
    let mut tx = Sender::tcp(port);
    tx.send_seqs("hb.bad", 300, 50);
    tx.finish();
    standby.wait_count(300);
    assert_exact_seqs(&standby.seqs(), 300);
    // Twenty more heartbeats refused.
    let refused = bad.metric("connections_total", "forward#0");
    wait_at_least(&bad, "connections_total", refused + 20);
    let server = format!("server=127.0.0.1:{bad_port}");
    let lines: Vec<String> = f
        .stderr()
        .lines()
        .filter(|l| l.contains(&server))
        .map(String::from)
        .collect();
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("forward server marked down"))
            .count(),
        1,
        "{lines:#?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains("forward server is up")),
        "the server refusing the key flapped: {lines:#?}"
    );
    assert!(
        lines.len() <= 2,
        "logged once per change, not per heartbeat: {lines:#?}"
    );
    assert!(f.terminate().success());
    assert!(good.terminate().success());
    assert!(bad.terminate().success());
}

/// A forwarder whose output's servers come from `discovery` (the body of
/// `[output.service_discovery]`) only.
fn discovering_forwarder(dir: &std::path::Path, discovery: &str) -> (Daemon, u16) {
    acking_forwarder(
        dir,
        "discovering",
        &format!("[output.service_discovery]\n{discovery}"),
    )
}

/// Waits for the log line of a change of the output's servers that adds
/// `port`.
fn wait_added(d: &Daemon, port: u16) {
    let addr = format!("127.0.0.1:{port}");
    d.wait_log_line(&format!("{addr} added to the servers"), |l| {
        l.contains("forward servers changed")
            && l.split("added=").nth(1).is_some_and(|a| a.contains(&addr))
    });
}

#[test]
fn servers_from_a_file_follow_its_changes() {
    let dir = tempfile::tempdir().unwrap();
    let (s1, s2) = (
        Sink::start(SinkOpts::default()),
        Sink::start(SinkOpts::default()),
    );
    let list = dir.path().join("servers.toml");
    let write = |text: String| {
        // As a deployment tool does: a new file renamed over the old one.
        let tmp = dir.path().join("servers.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &list).unwrap();
    };
    write(format!("[[server]]\naddress = \"127.0.0.1:{}\"\n", s1.port));
    let (mut d, port) = discovering_forwarder(
        dir.path(),
        &format!(
            "type = \"file\"\npath = \"{}\"\ninterval = \"100ms\"",
            list.display()
        ),
    );
    let mut tx = Sender::tcp(port);
    tx.send_seqs("sd.file", 100, 50);
    s1.wait_count(100);

    // The file now names the second server only: the events go there.
    write(format!("[[server]]\naddress = \"127.0.0.1:{}\"\n", s2.port));
    wait_added(&d, s2.port);
    for s in (100..200).step_by(50) {
        tx.packed("sd.file", s..s + 50, None);
    }
    s2.wait_count(100);
    assert_eq!(s1.count(), 100, "the removed server gets nothing more");

    // A broken file: logged, and the last list stays.
    write("[[server]]\naddress = \"no port\"\n".into());
    d.wait_log("service_discovery failed");
    for s in (200..300).step_by(50) {
        tx.packed("sd.file", s..s + 50, None);
    }
    tx.finish();
    s2.wait_count(200);
    let mut all = s1.seqs();
    all.extend(s2.seqs());
    assert_exact_seqs(&all, 300);
    assert!(d.stderr().contains("HOST:PORT"), "{}", d.stderr());
    assert!(d.terminate().success());
}

/// The dnsmasq binary: on PATH, or in /usr/sbin (not on a user's PATH).
fn dnsmasq() -> Option<std::path::PathBuf> {
    ["dnsmasq", "/usr/sbin/dnsmasq"]
        .into_iter()
        .map(std::path::PathBuf::from)
        .find(|b| {
            std::process::Command::new(b)
                .arg("--version")
                .stdout(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
}

/// dnsmasq answering on 127.0.0.1:`port` (UDP and TCP) with `records`
/// (dnsmasq options such as `--srv-host=…`), in the foreground.
struct Dnsmasq(std::process::Child);

impl Dnsmasq {
    fn start(port: u16, records: &[String]) -> Dnsmasq {
        let child = std::process::Command::new(dnsmasq().expect("dnsmasq"))
            .args([
                "--keep-in-foreground",
                "--no-resolv",
                "--no-hosts",
                "--no-poll",
                "--bind-interfaces",
                "--listen-address=127.0.0.1",
                "--pid-file=",
                "--local-ttl=0",
                &format!("--port={port}"),
            ])
            .args(records)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("dnsmasq");
        wait_port(port);
        Dnsmasq(child)
    }
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `[output.service_discovery]` by DNS: `name` asked of the dnsmasq on
/// `dns_port` every 200 ms.
fn dns_discovery(name: &str, dns_port: u16) -> String {
    format!(
        "type = \"dns\"\nname = \"{name}\"\nnameserver = \"127.0.0.1:{dns_port}\"\ninterval = \"200ms\""
    )
}

#[test]
fn servers_from_dns_srv_records_follow_the_answers() {
    if skip_unless(
        dnsmasq().is_some(),
        "dnsmasq is not installed (Debian package dnsmasq-base)",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (s1, s2) = (
        Sink::start(SinkOpts::default()),
        Sink::start(SinkOpts::default()),
    );
    let dns_port = free_port();
    let records = |sink: u16| {
        vec![
            format!("--srv-host=_forward._tcp.nagare.test,agg.nagare.test,{sink}"),
            "--host-record=agg.nagare.test,127.0.0.1".to_string(),
        ]
    };
    let dns = Dnsmasq::start(dns_port, &records(s1.port));
    let (mut d, port) = discovering_forwarder(
        dir.path(),
        &dns_discovery("_forward._tcp.nagare.test", dns_port),
    );
    wait_added(&d, s1.port);
    let mut tx = Sender::tcp(port);
    tx.send_seqs("sd.dns", 100, 50);
    s1.wait_count(100);

    // The SRV record now points at the second server.
    drop(dns);
    let _dns = Dnsmasq::start(dns_port, &records(s2.port));
    wait_added(&d, s2.port);
    for s in (100..200).step_by(50) {
        tx.packed("sd.dns", s..s + 50, None);
    }
    tx.finish();
    s2.wait_count(100);
    assert_eq!(
        s1.count(),
        100,
        "the server no longer in DNS gets nothing more"
    );
    let mut all = s1.seqs();
    all.extend(s2.seqs());
    assert_exact_seqs(&all, 200);
    assert!(d.terminate().success());
}

/// SRV priorities: the lowest priority's targets are the primaries, the
/// others standbys that get events only while every primary is down. A
/// records: the name's address with the configured `port`.
#[test]
fn dns_srv_priorities_pick_primaries_and_a_records_take_the_port() {
    if skip_unless(
        dnsmasq().is_some(),
        "dnsmasq is not installed (Debian package dnsmasq-base)",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut primary = Sink::start(SinkOpts::default());
    let (standby, by_a) = (
        Sink::start(SinkOpts::default()),
        Sink::start(SinkOpts::default()),
    );
    let dns_port = free_port();
    let _dns = Dnsmasq::start(
        dns_port,
        &[
            format!(
                "--srv-host=_forward._tcp.nagare.test,agg.nagare.test,{},10",
                primary.port
            ),
            format!(
                "--srv-host=_forward._tcp.nagare.test,agg.nagare.test,{},20",
                standby.port
            ),
            "--host-record=agg.nagare.test,127.0.0.1".to_string(),
        ],
    );
    let (mut d, port) = discovering_forwarder(
        dir.path(),
        &dns_discovery("_forward._tcp.nagare.test", dns_port),
    );
    wait_added(&d, primary.port);
    wait_added(&d, standby.port);
    let mut tx = Sender::tcp(port);
    tx.send_seqs("sd.srv", 500, 50);
    primary.wait_count(500);
    assert_eq!(standby.count(), 0, "the priority-20 standby rests");

    // The primary dies: the standby takes the rest.
    primary.stop();
    for s in (500..1000).step_by(50) {
        tx.packed("sd.srv", s..s + 50, None);
    }
    tx.finish();
    wait_until(WAIT, "events 0..1000 delivered", || {
        primary.count() + standby.count() >= 1000
    });
    let mut all = primary.seqs();
    all.extend(standby.seqs());
    assert_exact_seqs(&all, 1000);
    assert!(d.terminate().success());

    // record = "a": agg.nagare.test's address with `port`.
    let (mut d, port) = discovering_forwarder(
        dir.path(),
        &format!(
            "{}\nrecord = \"a\"\nport = {}",
            dns_discovery("agg.nagare.test", dns_port),
            by_a.port
        ),
    );
    wait_added(&d, by_a.port);
    let mut tx = Sender::tcp(port);
    tx.send_seqs("sd.a", 200, 50);
    tx.finish();
    by_a.wait_count(200);
    assert_exact_seqs(&by_a.seqs(), 200);
    assert!(d.terminate().success());
}
