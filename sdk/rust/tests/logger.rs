//! Behaviour against the scripted test server (tests/common).

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{free_port, Opts, Server};
use nagare_logger::{Config, Error, Logger, Overflow};
use serde::Serialize;

#[derive(Serialize)]
struct Rec<'a> {
    seq: u64,
    message: &'a str,
}

fn fast(cfg: Config) -> Config {
    cfg.flush_interval(Duration::from_millis(10))
        .backoff(Duration::from_millis(20), Duration::from_millis(200))
        .connect_timeout(Duration::from_secs(1))
        .close_timeout(Duration::from_secs(2))
}

/// `fast` settings for a server on 127.0.0.1:port.
fn fast_to(port: u16) -> Config {
    fast(
        Config::new()
            .servers([format!("127.0.0.1:{port}")])
            .unwrap(),
    )
}

fn emit_range(log: &Logger, tag: &str, r: std::ops::Range<u64>) {
    for i in r {
        log.emit(
            tag,
            &Rec {
                seq: i,
                message: "hello",
            },
        )
        .unwrap();
    }
}

fn seqs(s: &Server) -> Vec<u64> {
    s.events().iter().map(|e| e.seq()).collect()
}

/// The server reads asynchronously: wait until it got `n` events, then list
/// the seqs of all it got (extra events that came by then show too).
fn seqs_n(s: &Server, n: usize) -> Vec<u64> {
    assert!(
        s.wait_for(n, Duration::from_secs(10)),
        "{n} events at the server"
    );
    seqs(s)
}

/// After the logger was closed: waits for `n` events and for every
/// connection to end (all the logger sent was read), then lists the seqs
/// of all the server got. Nothing more can come: an extra event shows.
fn seqs_final(s: &Server, n: usize) -> Vec<u64> {
    assert!(
        s.wait_for(n, Duration::from_secs(10)),
        "{n} events at the server"
    );
    assert!(
        s.wait_closed(Duration::from_secs(10)),
        "the logger's connections closed"
    );
    seqs(s)
}

/// Waits until the logger reported an error containing `what`.
fn wait_error(errs: &Errs, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !errs.lock().unwrap().iter().any(|(_, m)| m.contains(what)) {
        assert!(Instant::now() < deadline, "no error {what:?} reported");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn tmpdir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("nagare-logger-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

type Errs = Arc<Mutex<Vec<(Instant, String)>>>;

fn collect_errors(cfg: Config) -> (Config, Errs) {
    let errs: Errs = Arc::new(Mutex::new(Vec::new()));
    let e2 = errs.clone();
    (
        cfg.on_error(move |e| e2.lock().unwrap().push((Instant::now(), e.to_string()))),
        errs,
    )
}

#[test]
fn close_flushes_everything_in_order() {
    let srv = Server::start(Opts::default());
    let log = Logger::new(fast(Config::new().servers([&srv.addr]).unwrap())).unwrap();
    emit_range(&log, "app.test", 0..5000);
    log.close(Duration::from_secs(5)).unwrap();
    assert_eq!(seqs_final(&srv, 5000), (0..5000).collect::<Vec<_>>());
    let ev = &srv.events()[0];
    assert_eq!(ev.tag, "app.test");
    assert_eq!(ev.field("message").unwrap().as_str(), Some("hello"));
    assert!(ev.time.secs > 1_700_000_000);
    let st = log.stats();
    assert_eq!((st.sent, st.buffered, st.dropped), (5000, 0, 0));
    assert!(matches!(
        log.emit(
            "x",
            &Rec {
                seq: 0,
                message: ""
            }
        ),
        Err(Error::Closed)
    ));
    // Frames are PackedForward, several events per frame.
    assert!(srv.with_log(|l| l.frames) < 5000);
}

#[test]
fn emit_rejects_non_maps_and_accepts_maps() {
    let srv = Server::start(Opts::default());
    let log = Logger::new(fast(Config::new().servers([&srv.addr]).unwrap())).unwrap();
    assert!(matches!(log.emit("t", &5u32), Err(Error::NotAMap)));
    assert!(matches!(log.emit("t", "str"), Err(Error::NotAMap)));
    let mut m = std::collections::BTreeMap::new();
    m.insert("seq", 7u64);
    log.emit("t", &m).unwrap();
    log.emit_msgpack(
        "t",
        nagare_logger::EventTime::new(1, 2),
        &[0x81, 0xa3, b's', b'e', b'q', 8],
    )
    .unwrap();
    log.flush(Duration::from_secs(5)).unwrap();
    assert_eq!(seqs_n(&srv, 2), vec![7, 8]);
    log.close(Duration::from_secs(5)).unwrap();
    assert_eq!(seqs_final(&srv, 2), vec![7, 8]);
    assert_eq!(srv.events()[1].time, nagare_logger::EventTime::new(1, 2));
}

#[test]
fn nothing_lost_across_server_restart() {
    for ack in [false, true] {
        let mut srv = Server::start(Opts::default());
        let port = srv.port();
        let (cfg, errs) = collect_errors(
            fast(Config::new().servers([&srv.addr]).unwrap())
                .require_ack(ack)
                .ack_timeout(Duration::from_secs(2)),
        );
        let log = Logger::new(cfg).unwrap();
        emit_range(&log, "app.r", 0..1000);
        log.flush(Duration::from_secs(5)).unwrap();
        assert!(srv.wait_for(1000, Duration::from_secs(5)));
        srv.stop();
        // The server is gone (its FIN is in the client's socket): these events
        // must be kept until it is back.
        emit_range(&log, "app.r", 1000..2000);
        // Once the logger found the server gone (it cannot reconnect), the
        // events are still held.
        wait_error(&errs, "cannot connect");
        assert!(log.stats().buffered > 0, "events retained while down");
        let srv2 = Server::start_on(port, Opts::default());
        log.flush(Duration::from_secs(10)).unwrap();
        assert!(srv2.wait_for(1000, Duration::from_secs(5)));
        let mut got = seqs(&srv);
        got.extend(seqs(&srv2));
        got.sort();
        got.dedup();
        assert_eq!(got, (0..2000).collect::<Vec<_>>(), "ack={ack}");
        assert_eq!(
            seqs(&srv2).len(),
            1000,
            "ack={ack}: nothing written into the dead socket"
        );
        assert!(log.stats().reconnects >= 1);
        log.close(Duration::from_secs(2)).unwrap();
        assert_eq!(seqs_final(&srv2, 1000), (1000..2000).collect::<Vec<_>>());
    }
}

#[test]
fn backoff_intervals_grow() {
    let port = free_port();
    let (cfg, errs) = collect_errors(
        Config::new()
            .servers([format!("127.0.0.1:{port}")])
            .unwrap()
            .flush_interval(Duration::from_millis(5))
            .backoff(Duration::from_millis(50), Duration::from_secs(5)),
    );
    let log = Logger::new(cfg).unwrap();
    emit_range(&log, "t", 0..1);
    let attempts = || -> Vec<Instant> {
        errs.lock()
            .unwrap()
            .iter()
            .filter(|(_, m)| m.contains("cannot connect"))
            .map(|(t, _)| *t)
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while attempts().len() < 5 {
        assert!(
            Instant::now() < deadline,
            "only {} attempts",
            attempts().len()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // The k-th delay is d = 50 ms × 2^k with equal jitter, within [d/2, d].
    // Lower bounds only: a busy machine makes gaps longer, never shorter,
    // and a backoff that did not grow fails the later ones (200 ms at k = 3).
    let times = attempts();
    for (k, w) in times.windows(2).take(4).enumerate() {
        let floor = Duration::from_millis(25 << k);
        assert!(
            w[1] - w[0] >= floor,
            "gap {k}: {:?} < {floor:?}",
            w[1] - w[0]
        );
    }
    assert_eq!(log.stats().buffered, 1);
    // Nothing listens: close gives up and says how much was left.
    assert!(matches!(
        log.close(Duration::from_millis(100)),
        Err(Error::Timeout { remaining: 1 })
    ));
}

#[test]
fn spill_to_disk_and_drain_in_order() {
    let dir = tmpdir("spill");
    let port = free_port();
    let log = Logger::new(
        fast_to(port)
            .buffer_limit(4096)
            .overflow(Overflow::Spill)
            .spill_path(dir.join("spill.bin")),
    )
    .unwrap();
    emit_range(&log, "app.s", 0..3000);
    // `spilled` counts what reached the file: within the sync interval
    let deadline = Instant::now() + Duration::from_secs(5);
    while log.stats().spilled <= 2500 {
        assert!(Instant::now() < deadline, "{:?}", log.stats());
        std::thread::sleep(Duration::from_millis(5));
    }
    let st = log.stats();
    assert_eq!(st.dropped, 0);
    assert_eq!(st.buffered, 3000);
    assert!(std::fs::metadata(dir.join("spill.bin")).unwrap().len() > 0);
    let srv = Server::start_on(port, Opts::default());
    log.flush(Duration::from_secs(10)).unwrap();
    assert_eq!(seqs_n(&srv, 3000), (0..3000).collect::<Vec<_>>());
    assert_eq!(std::fs::metadata(dir.join("spill.bin")).unwrap().len(), 0);
    log.close(Duration::from_secs(2)).unwrap();
    assert_eq!(seqs_final(&srv, 3000), (0..3000).collect::<Vec<_>>());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn close_keeps_undelivered_events_in_the_spill_file() {
    let dir = tmpdir("persist");
    let port = free_port();
    let cfg = fast_to(port).spill_path(dir.join("spill.bin"));
    let log = Logger::new(cfg.clone()).unwrap();
    emit_range(&log, "app.p", 0..500);
    assert!(matches!(
        log.close(Duration::from_millis(200)),
        Err(Error::Timeout { remaining: 500 })
    ));
    drop(log);
    // The next logger with that spill file sends them first.
    let srv = Server::start_on(port, Opts::default());
    let log = Logger::new(cfg).unwrap();
    // the file's 500 events count as buffered (the sender may already have
    // sent some to the listening server: those count as sent)
    let st = log.stats();
    assert_eq!(st.buffered + st.sent, 500, "{st:?}");
    emit_range(&log, "app.p", 500..600);
    log.flush(Duration::from_secs(10)).unwrap();
    assert_eq!(seqs_n(&srv, 600), (0..600).collect::<Vec<_>>());
    log.close(Duration::from_secs(2)).unwrap();
    assert_eq!(seqs_final(&srv, 600), (0..600).collect::<Vec<_>>());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn overflow_drop_counts_and_reports() {
    let port = free_port();
    let (cfg, errs) = collect_errors(fast_to(port).buffer_limit(2048).overflow(Overflow::Drop));
    let log = Logger::new(cfg).unwrap();
    let mut dropped = 0;
    for i in 0..1000 {
        match log.emit(
            "t",
            &Rec {
                seq: i,
                message: "x",
            },
        ) {
            Ok(()) => {}
            Err(Error::Dropped) => dropped += 1,
            Err(e) => panic!("{e}"),
        }
    }
    let st = log.stats();
    assert!(dropped > 900);
    assert_eq!(st.dropped, dropped);
    assert_eq!(st.buffered, 1000 - dropped);
    let _ = log.close(Duration::from_millis(50));
    // one report per second at most, with the count: they add up to the drops
    let told: Vec<u64> = errs
        .lock()
        .unwrap()
        .iter()
        .filter_map(|(_, m)| {
            m.strip_prefix("buffer full: ")?
                .strip_suffix(" events dropped")?
                .parse()
                .ok()
        })
        .collect();
    assert!(!told.is_empty() && told.len() <= 3, "reports {told:?}");
    assert_eq!(told.iter().sum::<u64>(), dropped);
}

#[test]
fn overflow_block_waits_for_room() {
    // Nobody listens: a blocked emit gives up after block_timeout.
    let port = free_port();
    let log = Logger::new(
        fast_to(port)
            .buffer_limit(1024)
            .overflow(Overflow::Block)
            .block_timeout(Some(Duration::from_millis(150))),
    )
    .unwrap();
    let t0 = Instant::now();
    let mut res = Ok(());
    for i in 0..100 {
        res = log.emit(
            "t",
            &Rec {
                seq: i,
                message: "x",
            },
        );
        if res.is_err() {
            break;
        }
    }
    assert!(matches!(res, Err(Error::Dropped)));
    assert!(t0.elapsed() >= Duration::from_millis(140));
    let _ = log.close(Duration::from_millis(50));

    // With a server, a tiny buffer and block, nothing is dropped.
    let srv = Server::start(Opts::default());
    let log = Logger::new(
        fast(Config::new().servers([&srv.addr]).unwrap())
            .buffer_limit(1024)
            .batch_bytes(512)
            .overflow(Overflow::Block),
    )
    .unwrap();
    emit_range(&log, "t", 0..5000);
    log.close(Duration::from_secs(5)).unwrap();
    assert_eq!(seqs_final(&srv, 5000), (0..5000).collect::<Vec<_>>());
    assert_eq!(log.stats().dropped, 0);
}

#[test]
fn failover_and_return_to_primary() {
    let mut primary = Server::start(Opts::default());
    let pport = primary.port();
    let secondary = Server::start(Opts::default());
    let log = Logger::new(
        fast(
            Config::new()
                .servers([&primary.addr, &secondary.addr])
                .unwrap(),
        )
        .primary_retry(Duration::from_millis(300)),
    )
    .unwrap();
    emit_range(&log, "f", 0..100);
    log.flush(Duration::from_secs(5)).unwrap();
    assert_eq!(seqs_n(&primary, 100), (0..100).collect::<Vec<_>>());

    primary.stop();
    emit_range(&log, "f", 100..200);
    log.flush(Duration::from_secs(5)).unwrap();
    assert_eq!(seqs_n(&secondary, 100), (100..200).collect::<Vec<_>>());

    let primary2 = Server::start_on(pport, Opts::default());
    // Let primary_retry (300 ms) pass: the logger goes back to the primary
    // at its first send after that, and not before.
    std::thread::sleep(Duration::from_millis(400));
    emit_range(&log, "f", 200..300);
    log.flush(Duration::from_secs(5)).unwrap();
    assert_eq!(seqs_n(&primary2, 100), (200..300).collect::<Vec<_>>());
    log.close(Duration::from_secs(2)).unwrap();
    assert_eq!(seqs_final(&primary, 100), (0..100).collect::<Vec<_>>());
    assert_eq!(seqs_final(&secondary, 100), (100..200).collect::<Vec<_>>());
    assert_eq!(seqs_final(&primary2, 100), (200..300).collect::<Vec<_>>());
}

#[test]
fn ack_mode_resends_unacked_frames() {
    let srv = Server::start(Opts {
        withhold_acks: 1,
        ..Opts::default()
    });
    let (cfg, errs) = collect_errors(
        fast(Config::new().servers([&srv.addr]).unwrap())
            .require_ack(true)
            .ack_timeout(Duration::from_millis(300)),
    );
    let log = Logger::new(cfg).unwrap();
    emit_range(&log, "a", 0..10);
    log.flush(Duration::from_secs(5)).unwrap();
    let chunks = srv.with_log(|l| l.chunks.clone());
    let first = chunks[0].clone().expect("frames carry a chunk id");
    assert_eq!(
        String::from_utf8(first.clone()).unwrap().len(),
        24,
        "base64 of 16 bytes"
    );
    // The unacked first frame came again with the same id; every other frame once.
    assert_eq!(
        chunks.iter().filter(|c| c.as_ref() == Some(&first)).count(),
        2,
        "{chunks:?}"
    );
    let mut ids: Vec<_> = chunks.iter().map(|c| c.clone().unwrap()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), chunks.len() - 1);
    let mut u = seqs(&srv);
    assert!(u.len() > 10, "the first frame's events arrived twice");
    u.sort();
    u.dedup();
    assert_eq!(u, (0..10).collect::<Vec<_>>());
    assert_eq!(log.stats().sent, 10);
    assert!(errs
        .lock()
        .unwrap()
        .iter()
        .any(|(_, m)| m.contains("no ack")));
    assert_eq!(srv.connections(), 2);
    log.close(Duration::from_secs(2)).unwrap();
}

#[test]
fn unix_socket() {
    let dir = tmpdir("unix");
    let srv = Server::start_unix(dir.join("n.sock"), Opts::default());
    let log = Logger::new(fast(Config::new().servers([&srv.addr]).unwrap())).unwrap();
    emit_range(&log, "u", 0..300);
    log.close(Duration::from_secs(5)).unwrap();
    assert_eq!(seqs_final(&srv, 300), (0..300).collect::<Vec<_>>());
    drop(srv);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn shared_key_handshake() {
    let srv = Server::start(Opts {
        shared_key: Some("s3cret".into()),
        ..Opts::default()
    });
    let log = Logger::new(
        fast(Config::new().servers([&srv.addr]).unwrap())
            .shared_key("s3cret")
            .client_hostname("test-client"),
    )
    .unwrap();
    emit_range(&log, "h", 0..10);
    log.close(Duration::from_secs(5)).unwrap();
    assert_eq!(seqs_final(&srv, 10), (0..10).collect::<Vec<_>>());

    let (cfg, errs) =
        collect_errors(fast(Config::new().servers([&srv.addr]).unwrap()).shared_key("wrong"));
    let log = Logger::new(cfg).unwrap();
    emit_range(&log, "h", 10..20);
    assert!(log.flush(Duration::from_millis(300)).is_err());
    assert_eq!(srv.count(), 10);
    assert!(srv.with_log(|l| l.handshake_failures) >= 1);
    assert!(errs
        .lock()
        .unwrap()
        .iter()
        .any(|(_, m)| m.contains("handshake") && m.contains("shared key mismatch")));
    let _ = log.close(Duration::from_millis(50));
}

#[cfg(feature = "tracing")]
#[test]
fn tracing_layer_emits_fields() {
    use tracing_subscriber::layer::SubscriberExt;
    let srv = Server::start(Opts::default());
    let log = Logger::new(fast(Config::new().servers([&srv.addr]).unwrap())).unwrap();
    let sub = tracing_subscriber::registry()
        .with(nagare_logger::NagareLayer::new(log.clone(), "app").tag_from_target(true));
    tracing::subscriber::with_default(sub, || {
        tracing::info!(
            seq = 1u64,
            user = "ann",
            ok = true,
            ratio = 0.5,
            delta = -3i64,
            "hello {}",
            "world"
        );
        tracing::warn!(target: "db::pool", seq = 2u64, "slow");
    });
    log.flush(Duration::from_secs(5)).unwrap();
    assert!(srv.wait_for(2, Duration::from_secs(5)));
    let ev = srv.events();
    assert_eq!(ev.len(), 2);
    assert_eq!(ev[0].tag, "app.logger");
    assert_eq!(
        ev[0].field("message").unwrap().as_str(),
        Some("hello world")
    );
    assert_eq!(ev[0].field("level").unwrap().as_str(), Some("INFO"));
    assert_eq!(ev[0].field("user").unwrap().as_str(), Some("ann"));
    assert_eq!(ev[0].field("ok").unwrap().as_bool(), Some(true));
    assert_eq!(ev[0].field("ratio").unwrap().as_f64(), Some(0.5));
    assert_eq!(ev[0].field("delta").unwrap().as_i64(), Some(-3));
    assert_eq!(ev[0].seq(), 1);
    assert_eq!(ev[1].tag, "app.db.pool");
    assert_eq!(ev[1].field("level").unwrap().as_str(), Some("WARN"));
    log.close(Duration::from_secs(2)).unwrap();
}

#[test]
fn gzip_compressed_frames() {
    let srv = Server::start(Opts::default());
    let log = Logger::new(
        fast(Config::new().servers([&srv.addr]).unwrap())
            .compress(nagare_logger::Compress::Gzip)
            .require_ack(true),
    )
    .unwrap();
    emit_range(&log, "gz", 0..2000);
    log.close(Duration::from_secs(5)).unwrap();
    assert_eq!(seqs_final(&srv, 2000), (0..2000).collect::<Vec<_>>());
    let (frames, gz) = srv.with_log(|l| (l.frames, l.compressed_frames));
    assert!(frames > 0);
    assert_eq!(frames, gz, "every frame gzip-compressed");
}

#[test]
fn batches_stay_within_batch_bytes_after_an_outage() {
    let port = free_port();
    let (cfg, errs) = collect_errors(
        fast_to(port)
            .batch_bytes(4096)
            .backoff(Duration::from_millis(300), Duration::from_millis(300)),
    );
    let log = Logger::new(cfg).unwrap();
    emit_range(&log, "b", 0..3000);
    // The outage: the logger tried and failed before the server starts.
    wait_error(&errs, "cannot connect");
    let srv = Server::start_on(port, Opts::default());
    log.flush(Duration::from_secs(10)).unwrap();
    assert_eq!(seqs_n(&srv, 3000), (0..3000).collect::<Vec<_>>());
    let sizes = srv.with_log(|l| l.entry_bytes.clone());
    assert!(sizes.len() >= 20, "{sizes:?}");
    assert!(sizes.iter().all(|&n| n < 4096 + 64), "{sizes:?}");
    log.close(Duration::from_secs(2)).unwrap();
    assert_eq!(seqs_final(&srv, 3000), (0..3000).collect::<Vec<_>>());
}

/// After fork() the child's first emit starts a new generation of the
/// logger's state (its own buffer, connection and sender thread): the child
/// delivers its own events, and the parent's buffered events arrive once,
/// from the parent.
#[test]
fn a_forked_child_sends_its_own_events_once() {
    let srv = Server::start(Opts::default());
    let log = Logger::new(fast(Config::new().servers([&srv.addr]).unwrap())).unwrap();
    emit_range(&log, "parent", 0..5);
    // SAFETY: the child only uses the logger (whose fork handler gives it a
    // fresh state) and leaves through _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        emit_range(&log, "child", 0..10);
        let ok = log.flush(Duration::from_secs(5)).is_ok() && log.stats().sent == 10;
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child: {status:#x}"
    );
    emit_range(&log, "parent", 5..10);
    log.flush(Duration::from_secs(5)).unwrap();
    assert!(srv.wait_for(20, Duration::from_secs(5)));
    let ev = srv.events();
    let of = |t: &str| -> Vec<u64> { ev.iter().filter(|e| e.tag == t).map(|e| e.seq()).collect() };
    assert_eq!(of("child"), (0..10).collect::<Vec<_>>());
    assert_eq!(of("parent"), (0..10).collect::<Vec<_>>());
    assert_eq!(ev.len(), 20);
    log.close(Duration::from_secs(2)).unwrap();
}
