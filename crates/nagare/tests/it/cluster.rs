//! Many hosts (issue 16): five forwarders → three aggregators → one sink
//! host, each host a network namespace with its own nagare (see
//! tests/it/common/netns.rs and tests/cluster/topology.toml).
//!
//! One topology, one steady acked load from every forwarder, and the faults
//! one after another: an aggregator killed, a fourth one added, another
//! aggregator's host gone silent, a forwarder cut off for 10 s while another
//! forwarder's link has 200 ± 20 ms of delay (so packets are reordered) and
//! 5 % loss each way, and, on that slow link, the aggregator it sends to
//! killed and started again. At the end the sink host's file holds every
//! event the forwarders acknowledged, once, each key's in order: a chunk
//! resent through another aggregator after a fault carries the chunk id it
//! had through the first one (the aggregators keep the forwarders' chunks
//! whole, `keep_chunks`), and the sink drops the copy. Failover and
//! recovery times are printed (`cargo test --test cluster -- --nocapture`).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::netns::{self, Impairment, Net};
use crate::common::*;

const FORWARDERS: [&str; 5] = ["f1", "f2", "f3", "f4", "f5"];
const AGGREGATORS: [&str; 4] = ["a1", "a2", "a3", "a4"];
/// Every nagare listens on this port of its host's address (each host has
/// its own network stack, so they do not collide).
const PORT: u16 = 24224;
/// The sink host's monitor, on its own loopback.
const MONITOR: u16 = 24225;
/// Events per frame and frames per second of each forwarder's load
/// (1,000 events/s each: the debug build on a busy 2-core machine keeps up).
const FRAME: u64 = 10;
const PERIOD: Duration = Duration::from_millis(10);

fn topology() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cluster/topology.toml")
}

/// A forwarder: events from its own loopback, forwarded to every aggregator
/// (a4 is listed from the start and is down until it runs), waiting for
/// acks. The tag (`app.<host>`) is the key whose order the sink checks.
fn forwarder_config(net: &Net) -> String {
    let mut c = format!(
        r#"[[input]]
type = "forward"
bind = "127.0.0.1:{PORT}"

[[output]]
type = "forward"
match = "**"
# Each forwarder's tag always to the same aggregator while it is up.
lb = "consistent_hash"
require_ack_response = true
ack_response_timeout = "5s"
connect_timeout = "1s"
send_timeout = "5s"
heartbeat_interval = "250ms"
phi_threshold = 8
[output.buffer]
# One chunk in flight at a time keeps each key in order; a chunk every
# 200 ms leaves that worker room for the aggregator's round trip.
flush_interval = "200ms"
flush_thread_count = 1
retry_wait = "100ms"
retry_max_interval = "1s"
"#
    );
    for a in AGGREGATORS {
        c += &format!("[[output.server]]\naddress = \"{}:{PORT}\"\n", net.addr(a));
    }
    c
}

/// An aggregator: acks a chunk only once the sink host acked it
/// (`ack = "delivered"`), so a killed aggregator loses nothing: what it
/// had not passed on is resent by the forwarders. Each forwarder's chunk
/// stays a chunk of its own, with an id derived from the forwarder's
/// (`keep_chunks`, on by default with "delivered"), so the same chunk
/// resent through another aggregator is dropped by the sink. It stamps `via`.
fn aggregator_config(net: &Net, me: &str) -> String {
    format!(
        r#"[[input]]
type = "forward"
bind = "{addr}:{PORT}"
ack = "delivered"
keep_chunks = true

[[filter]]
type = "modify"
match = "**"
[filter.set]
via = "{me}"

[[output]]
type = "forward"
match = "**"
require_ack_response = true
ack_response_timeout = "5s"
connect_timeout = "1s"
heartbeat_interval = "250ms"
[[output.server]]
address = "{sink}:{PORT}"
[output.buffer]
# The forwarders wait for this flush (ack = "delivered"): keep it short.
flush_interval = "20ms"
flush_thread_count = 1
retry_wait = "100ms"
retry_max_interval = "1s"
"#,
        addr = net.addr(me),
        sink = net.addr("sink"),
    )
}

/// The sink host: one file of JSON lines, written by one flush worker in
/// the order the chunks arrived. Its forward input drops chunks it already
/// acked (chunk-id dedup, on by default).
fn sink_config(net: &Net, out: &Path) -> String {
    format!(
        r#"[monitor]
bind = "127.0.0.1:{MONITOR}"

[[input]]
type = "forward"
bind = "{}:{PORT}"

[[output]]
type = "file"
match = "**"
path = "{}"
[output.buffer]
flush_interval = "50ms"
"#,
        net.addr("sink"),
        out.display()
    )
}

/// The nagare of each host; when the test fails (or NAGARE_CLUSTER_LOGS is
/// set), their logs are printed.
#[derive(Default)]
struct Hosts(BTreeMap<String, Daemon>);

impl Hosts {
    /// Starts nagare on `host` and waits until its forward input listens.
    fn start(&mut self, net: &Net, host: &str, dir: &Path, config: &str) {
        let d = net.daemon(host, dir, config);
        d.wait_log("forward input listening");
        self.0.insert(host.to_string(), d);
    }
}

impl Hosts {
    /// How long after `since` every forwarder had logged `server` as down
    /// (waits until all five have).
    fn detected(&self, server: &str, since: chrono::DateTime<chrono::Utc>) -> Duration {
        self.detected_by(&FORWARDERS, server, since)
    }

    /// How long after `since` each of `forwarders` had logged `server` as
    /// down, the longest (waits until they all have).
    fn detected_by(
        &self,
        forwarders: &[&str],
        server: &str,
        since: chrono::DateTime<chrono::Utc>,
    ) -> Duration {
        let needle = format!("server={server}");
        let mut worst = Duration::ZERO;
        for &f in forwarders {
            let d = &self.0[f];
            let mut at = None;
            wait_until(WAIT, &format!("{f} to mark {server} down"), || {
                at = d.stderr().lines().find_map(|l| {
                    // "unreachable": it was down already (a slow link's
                    // heartbeat went unanswered) and now fails another way.
                    let down = l.contains("forward server marked down")
                        || l.contains("forward server unreachable");
                    if !(down && l.contains(&needle)) {
                        return None;
                    }
                    let t = chrono::DateTime::parse_from_rfc3339(l.split(' ').next()?).ok()?;
                    (t >= since).then_some(t)
                });
                at.is_some()
            });
            let took = (at.unwrap().to_utc() - since).to_std().unwrap_or_default();
            worst = worst.max(took);
        }
        worst
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        if std::thread::panicking() || std::env::var_os("NAGARE_CLUSTER_LOGS").is_some() {
            for (h, d) in &self.0 {
                eprintln!("--- nagare on {h}:\n{}", d.stderr());
            }
        }
    }
}

/// One acked load per forwarder: frames of FRAME events every PERIOD, tag
/// `app.<host>`, seq from 0 up; `acked` counts what the forwarder acked.
struct Load {
    stop: Arc<AtomicBool>,
    acked: Vec<Arc<AtomicU64>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(net: &Net) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let mut acked = Vec::new();
        let mut threads = Vec::new();
        for f in FORWARDERS {
            let (stop, n) = (stop.clone(), Arc::new(AtomicU64::new(0)));
            acked.push(n.clone());
            let tag = format!("app.{f}");
            threads.push(net.enter(f, move || {
                let mut tx = Sender::tcp(PORT);
                let mut next = Instant::now();
                let mut seq = 0;
                while !stop.load(SeqCst) {
                    tx.send_acked(&tag, seq..seq + FRAME, FRAME, &format!("{tag}-"));
                    seq += FRAME;
                    n.store(seq, SeqCst);
                    // Pacing, not synchronisation: a steady rate to watch.
                    next += PERIOD;
                    if let Some(d) = next.checked_duration_since(Instant::now()) {
                        std::thread::sleep(d);
                    }
                }
                tx.finish();
            }));
        }
        Load {
            stop,
            acked,
            threads,
        }
    }

    /// What each forwarder has acked so far, by key.
    fn snapshot(&self) -> BTreeMap<String, u64> {
        FORWARDERS
            .iter()
            .zip(&self.acked)
            .map(|(f, n)| (format!("app.{f}"), n.load(SeqCst)))
            .collect()
    }

    fn stop(self) -> BTreeMap<String, u64> {
        self.stop.store(true, SeqCst);
        for t in self.threads {
            t.join().expect("a sender failed");
        }
        FORWARDERS
            .iter()
            .zip(&self.acked)
            .map(|(f, n)| (format!("app.{f}"), n.load(SeqCst)))
            .collect()
    }
}

#[derive(Default)]
struct Key {
    /// Every seq below this arrived.
    below: u64,
    /// Seqs at or above `below` that arrived.
    ahead: BTreeSet<u64>,
    /// Seqs that arrived again, and how many events arrived in all.
    duplicates: Vec<u64>,
    events: u64,
    /// Events that arrived after one of a higher seq (of the same key).
    out_of_order: u64,
    last: u64,
}

/// Reads the sink host's file as it grows, keeping per key what arrived.
struct SinkFile {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
    keys: BTreeMap<String, Key>,
    /// Events relayed by each aggregator.
    via: BTreeMap<String, u64>,
    /// The aggregator that relayed each key's latest event.
    last_via: BTreeMap<String, String>,
}

impl SinkFile {
    fn new(path: PathBuf) -> SinkFile {
        SinkFile {
            path,
            offset: 0,
            partial: Vec::new(),
            keys: BTreeMap::new(),
            via: BTreeMap::new(),
            last_via: BTreeMap::new(),
        }
    }

    fn update(&mut self) {
        let Ok(mut f) = std::fs::File::open(&self.path) else {
            return;
        };
        f.seek(SeekFrom::Start(self.offset)).unwrap();
        let mut b = Vec::new();
        f.read_to_end(&mut b).unwrap();
        self.offset += b.len() as u64;
        self.partial.extend_from_slice(&b);
        let end = match self.partial.iter().rposition(|&c| c == b'\n') {
            Some(i) => i + 1,
            None => return,
        };
        let lines: Vec<u8> = self.partial.drain(..end).collect();
        for l in lines.split(|&c| c == b'\n').filter(|l| !l.is_empty()) {
            let v: serde_json::Value = serde_json::from_slice(l).unwrap_or_else(|e| {
                panic!(
                    "{}: {e}: {}",
                    self.path.display(),
                    String::from_utf8_lossy(l)
                )
            });
            let tag = v["tag"].as_str().expect("tag").to_string();
            let seq = v["record"]["seq"].as_u64().expect("record.seq");
            let via = v["record"]["via"].as_str().expect("record.via").to_string();
            *self.via.entry(via.clone()).or_default() += 1;
            self.last_via.insert(tag.clone(), via);
            let k = self.keys.entry(tag).or_default();
            k.events += 1;
            if seq < k.last {
                k.out_of_order += 1;
            }
            k.last = k.last.max(seq);
            if seq < k.below || !k.ahead.insert(seq) {
                k.duplicates.push(seq);
            }
            while k.ahead.remove(&k.below) {
                k.below += 1;
            }
        }
    }

    fn below(&self, key: &str) -> u64 {
        self.keys.get(key).map_or(0, |k| k.below)
    }

    /// Waits until every key has every seq below `want[key]`; returns how long.
    fn wait_all(
        &mut self,
        want: &BTreeMap<String, u64>,
        timeout: Duration,
        what: &str,
    ) -> Duration {
        let start = Instant::now();
        loop {
            self.update();
            if want.iter().all(|(k, &n)| self.below(k) >= n) {
                return start.elapsed();
            }
            if start.elapsed() > timeout {
                let have: BTreeMap<&String, u64> =
                    want.keys().map(|k| (k, self.below(k))).collect();
                panic!(
                    "timed out after {timeout:?} waiting for {what}: want {want:?}, have {have:?}"
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn via(&mut self, agg: &str) -> u64 {
        self.update();
        self.via.get(agg).copied().unwrap_or(0)
    }
}

/// Prints a measurement so it shows in the test's output (`--nocapture`)
/// and in scripts/test-all.sh's log.
fn report(line: &str) {
    eprintln!("cluster: {line}");
}

#[test]
fn five_forwarders_three_aggregators_one_sink_under_faults() {
    if skip_unless(
        netns::unavailable().is_none(),
        &netns::unavailable().unwrap_or_default(),
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let net = Net::create(&topology());
    let out = dir.path().join("sink.jsonl");
    let mut hosts = Hosts::default();
    hosts.start(&net, "sink", dir.path(), &sink_config(&net, &out));
    for a in ["a1", "a2", "a3"] {
        hosts.start(&net, a, dir.path(), &aggregator_config(&net, a));
    }
    for f in FORWARDERS {
        hosts.start(&net, f, dir.path(), &forwarder_config(&net));
    }
    let mut file = SinkFile::new(out);
    let load = Load::start(&net);

    // Steady state: how long an acked event takes to reach the sink host.
    let t = Instant::now();
    wait_until(WAIT, "events of every forwarder at the sink", || {
        file.update();
        FORWARDERS
            .iter()
            .all(|f| file.below(&format!("app.{f}")) > 0)
    });
    report(&format!(
        "first events of all five at the sink after {:?}",
        t.elapsed()
    ));
    let latency = file.wait_all(&load.snapshot(), WAIT, "the steady load at the sink");
    report(&format!(
        "steady state: acked events reach the sink within {latency:?}"
    ));

    // Kill an aggregator (SIGKILL): the forwarders resend what it had not
    // acked to the others. Failover time: from the kill until everything
    // the forwarders had acked before it is at the sink host.
    let mut a2 = hosts.0.remove("a2").unwrap();
    let before = load.snapshot();
    let killed = chrono::Utc::now();
    a2.child.kill().unwrap();
    a2.child.wait().unwrap();
    let failover = file.wait_all(&before, WAIT, "the events of before the kill at the sink");
    report(&format!("aggregator a2 killed: everything acked before the kill at the sink after {failover:?} (steady state: {latency:?})"));
    let detected = hosts.detected(net.addr("a2"), killed);
    report(&format!(
        "aggregator a2 killed: all five forwarders had marked it down after {detected:?}"
    ));
    let after = load.snapshot();
    let via_a2 = file.via("a2");
    file.wait_all(&after, WAIT, "the events of after the kill at the sink");
    assert_eq!(
        file.via("a2"),
        via_a2,
        "a2 relayed events after it was killed"
    );

    // Add a fourth aggregator: the forwarders' heartbeats find it up and it
    // takes its share.
    let t4 = Instant::now();
    hosts.start(&net, "a4", dir.path(), &aggregator_config(&net, "a4"));
    wait_until(WAIT, "events relayed by the new aggregator a4", || {
        file.via("a4") > 0
    });
    report(&format!(
        "aggregator a4 added: relaying after {:?}",
        t4.elapsed()
    ));

    // An aggregator's host goes silent (its link down, as a host that lost
    // power: no reset, no FIN), then its nagare is killed. Chunks in flight
    // to it get no ack; the forwarders give up on it and resend elsewhere.
    let before = load.snapshot();
    let silenced = chrono::Utc::now();
    net.set_link("a3", false);
    let silent = file.wait_all(
        &before,
        WAIT,
        "the events of before a3 went silent at the sink",
    );
    report(&format!(
        "aggregator a3's host silent: everything acked before at the sink after {silent:?}"
    ));
    let detected = hosts.detected(net.addr("a3"), silenced);
    report(&format!(
        "aggregator a3's host silent: all five forwarders had marked it down after {detected:?} (phi_threshold 8, heartbeat 250 ms); failover complete {:?} after the last of them",
        silent.saturating_sub(detected)
    ));
    let mut a3 = hosts.0.remove("a3").unwrap();
    a3.child.kill().unwrap();
    a3.child.wait().unwrap();

    // Cut f3 off for 10 s while f5's link has 200 ± 20 ms of delay and 5 %
    // loss each way (an NFQUEUE and a delayer thread: this kernel has no
    // netem). On that slow link, the aggregator f5 sends to is killed once
    // f5's events come through, and started again after the failover.
    net.set_link("f3", false);
    let cut = Instant::now();
    let f3_acked_at_cut = load.snapshot()["app.f3"];
    let impairment = Impairment {
        delay: Duration::from_millis(200),
        jitter: Duration::from_millis(20),
        loss_percent: 5,
    };
    let impaired = match net.impair("f5", impairment) {
        Ok(g) => Some(g),
        Err(e) => {
            skipped_part("200 ms delay and 5 % loss on a link (NFQUEUE)", &e);
            None
        }
    };
    let f3_at_cut = file.below("app.f3");
    // While f3 is cut off (the partition's length is the fault itself, so
    // this polls until it is over), f5's events still come through its
    // faulty link, and f5 fails over on it.
    let f5_want = BTreeMap::from([("app.f5".to_string(), load.snapshot()["app.f5"])]);
    let mut f5_through = None;
    let mut restarted = None;
    while cut.elapsed() < Duration::from_secs(10) {
        file.update();
        if f5_through.is_none() && file.below("app.f5") >= f5_want["app.f5"] {
            f5_through = Some(cut.elapsed());
        }
        if f5_through.is_some() && impaired.is_some() && restarted.is_none() {
            let victim = file.last_via["app.f5"].clone();
            let mut d = hosts.0.remove(&victim).unwrap();
            let before = BTreeMap::from([("app.f5".to_string(), load.snapshot()["app.f5"])]);
            let killed = chrono::Utc::now();
            d.child.kill().unwrap();
            d.child.wait().unwrap();
            let failover = file.wait_all(&before, WAIT, "f5's events of before the kill");
            let detected = hosts.detected_by(&["f5"], net.addr(&victim), killed);
            report(&format!("f5's aggregator {victim} killed, f5's link slow and lossy: f5 marked it down after {detected:?}; everything f5 acked before the kill at the sink after {failover:?}"));
            hosts.start(&net, &victim, dir.path(), &aggregator_config(&net, &victim));
            restarted = Some(victim);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let f3_acked = load.snapshot()["app.f3"];
    file.update();
    // Nothing f3 took in after the cut can have left it.
    let f3_max = file.keys.get("app.f3").map_or(0, |k| k.last + 1);
    net.set_link("f3", true);
    let healed = Instant::now();
    assert!(
        f3_max <= f3_acked_at_cut && f3_acked > f3_acked_at_cut,
        "f3's link was down, yet the sink has its seq {f3_max} (acked at the cut: {f3_acked_at_cut}, now {f3_acked})",
    );
    let f5_through = match f5_through {
        Some(t) => t,
        None => {
            cut.elapsed() + file.wait_all(&f5_want, WAIT, "f5's events through its faulty link")
        }
    };
    let fault = "200 ± 20 ms delay and 5 % loss each way";
    report(&format!("f5 ({fault}): what it had acked at the start of the fault reached the sink within {f5_through:?}"));
    if let Some(g) = impaired {
        assert!(
            restarted.is_some(),
            "f5's aggregator was not killed within the 10 s of the fault"
        );
        let st = g.stop().expect("the delayer");
        report(&format!(
            "f5's link: {} packets delayed, {} of them let go after a later one, {} dropped",
            st.passed, st.reordered, st.dropped
        ));
        assert!(
            st.dropped > 0 && st.passed > 0,
            "the impairment did nothing: {st:?}"
        );
    }
    let held = f3_acked - f3_at_cut;
    let back = file.wait_all(
        &BTreeMap::from([("app.f3".to_string(), f3_acked)]),
        Duration::from_secs(60),
        "f3's events of the partition at the sink",
    );
    report(&format!("f3 cut off for {:?} (f5: {fault}): the {held} events it held reached the sink {back:?} after the link came back", healed - cut));
    if let Some(victim) = &restarted {
        let via = file.via(victim);
        wait_until(WAIT, &format!("events relayed by {victim} again"), || {
            file.via(victim) > via
        });
    }

    // Stop the load; everything acked arrives, once.
    let acked = load.stop();
    file.wait_all(
        &acked,
        Duration::from_secs(30),
        "every acked event at the sink",
    );
    // Copies the sink dropped by chunk id: resends through another
    // aggregator after a fault (how many depends on where the faults hit).
    let dropped = net
        .enter("sink", || http_get(MONITOR, "/metrics").1)
        .join()
        .unwrap();
    report(&format!(
        "the sink dropped {} events it already had (resent chunks, by chunk id)",
        metric_value(&dropped, "duplicate_events_total", "forward#0")
    ));
    // Everything is in; stop the relays, then the sink (which writes out
    // what it holds), so a late resend would be in the file too.
    for tier in ["f", "a", "sink"] {
        for (h, d) in hosts.0.iter_mut().filter(|(h, _)| h.starts_with(tier)) {
            assert!(
                d.terminate().success(),
                "nagare on {h} did not exit cleanly"
            );
        }
    }
    file.update();
    for (key, k) in &file.keys {
        report(&format!(
            "{key}: {} acked, {} at the sink, {} duplicated, {} out of order",
            acked[key],
            k.events,
            k.duplicates.len(),
            k.out_of_order
        ));
    }
    report(&format!("relayed per aggregator: {:?}", file.via));
    for (key, k) in &file.keys {
        assert_eq!(k.below, acked[key], "{key}: lost events");
        assert!(
            k.ahead.is_empty(),
            "{key}: seqs beyond what was acked: {:?}",
            k.ahead
        );
        // A chunk resent through another aggregator after a fault carries
        // the id it had through the first one: the sink drops the copy.
        assert!(
            k.duplicates.is_empty(),
            "{key}: {} events arrived twice (seqs {:?})",
            k.duplicates.len(),
            k.duplicates
        );
        // consistent_hash: a key's chunks go to one aggregator at a time,
        // one flush worker at each hop.
        assert_eq!(k.out_of_order, 0, "{key}: events out of order");
    }
}
