//! README promises that failed in issue 17: close() after a long backoff,
//! counters after close, spilled events on disk within the sync interval.

mod common;

use std::time::{Duration, Instant};

use common::{free_port, Opts, Server};
use nagare_logger::{Config, Error, Logger, Overflow};

fn emit_range(log: &Logger, tag: &str, r: std::ops::Range<u64>) {
    for i in r {
        log.emit(tag, &serde_json::json!({ "seq": i })).unwrap();
    }
}

fn to(port: u16) -> Config {
    Config::new()
        .servers([format!("127.0.0.1:{port}")])
        .unwrap()
        .flush_interval(Duration::from_millis(10))
        .connect_timeout(Duration::from_secs(1))
}

#[test]
fn close_reconnects_at_once_after_a_long_backoff() {
    let port = free_port();
    let errors = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let e2 = errors.clone();
    // after the first refused round the sender waits 10-20 s
    let cfg = to(port)
        .backoff(Duration::from_secs(20), Duration::from_secs(30))
        .on_error(move |_| {
            e2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
    let log = Logger::new(cfg).unwrap();
    emit_range(&log, "app.late", 0..1000);
    let deadline = Instant::now() + Duration::from_secs(10);
    while errors.load(std::sync::atomic::Ordering::Relaxed) == 0 {
        assert!(Instant::now() < deadline, "no connect attempt failed");
        std::thread::sleep(Duration::from_millis(5));
    }
    let srv = Server::start_on(port, Opts::default());
    let t0 = Instant::now();
    log.close(Duration::from_secs(5)).unwrap();
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert!(srv.wait_for(1000, Duration::from_secs(10)));
    let seqs: Vec<u64> = srv.events().iter().map(|e| e.seq()).collect();
    assert_eq!(seqs, (0..1000).collect::<Vec<_>>());
    let st = log.stats();
    assert_eq!((st.sent, st.dropped, st.buffered), (1000, 0, 0));
}

#[test]
fn counters_add_up_after_a_close_without_spill_file() {
    let log =
        Logger::new(to(free_port()).backoff(Duration::from_millis(20), Duration::from_millis(100)))
            .unwrap();
    emit_range(&log, "app.lost", 0..500);
    assert!(matches!(
        log.close(Duration::from_millis(300)),
        Err(Error::Timeout { remaining: 500 })
    ));
    let st = log.stats();
    assert_eq!((st.sent, st.dropped, st.buffered), (0, 500, 0));
}

#[test]
fn spilled_events_are_on_disk_within_the_sync_interval() {
    let dir = std::env::temp_dir().join(format!("nagare-logger-{}-sync", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("spill.bin");
    // a tiny memory buffer: almost every event goes to the spill file, a few
    // KiB in all (well under the 64 KiB write buffer)
    let cfg = to(free_port())
        .backoff(Duration::from_secs(20), Duration::from_secs(30))
        .buffer_limit(256)
        .overflow(Overflow::Spill)
        .spill_path(&path);
    let log = Logger::new(cfg).unwrap();
    emit_range(&log, "app.sync", 0..200);
    // spilled counts only what is in the file
    let deadline = Instant::now() + Duration::from_secs(5);
    while log.stats().spilled < 150 {
        assert!(Instant::now() < deadline, "stats {:?}", log.stats());
        std::thread::sleep(Duration::from_millis(5));
    }
    let on_disk = std::fs::metadata(&path).unwrap().len();
    assert!(on_disk > 150 * 10, "spill file holds {on_disk} bytes");
    let _ = log.close(Duration::from_millis(100));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn events_go_to_the_spill_file_while_no_server_answers() {
    let dir = std::env::temp_dir().join(format!("nagare-logger-{}-outage", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let port = free_port();
    // memory has room for everything: the events are spilled because no
    // server answers, not because memory is full
    let cfg = to(port)
        .backoff(Duration::from_millis(50), Duration::from_millis(200))
        .overflow(Overflow::Spill)
        .spill_path(dir.join("spill.bin"));
    let log = Logger::new(cfg).unwrap();
    emit_range(&log, "app.outage", 0..500);
    let deadline = Instant::now() + Duration::from_secs(10);
    while log.stats().spilled < 500 {
        assert!(Instant::now() < deadline, "stats {:?}", log.stats());
        std::thread::sleep(Duration::from_millis(5));
    }
    // later events follow them into the file, in order
    emit_range(&log, "app.outage", 500..1000);
    let srv = Server::start_on(port, Opts::default());
    log.close(Duration::from_secs(10)).unwrap();
    assert!(srv.wait_for(1000, Duration::from_secs(10)));
    let seqs: Vec<u64> = srv.events().iter().map(|e| e.seq()).collect();
    assert_eq!(seqs, (0..1000).collect::<Vec<_>>());
    let st = log.stats();
    assert_eq!((st.sent, st.dropped, st.buffered), (1000, 0, 0));
    std::fs::remove_dir_all(&dir).unwrap();
}
