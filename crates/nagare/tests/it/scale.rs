//! Correctness under parallelism (issue 34): many sender connections into
//! a relay on several worker threads, with several flush workers, deliver
//! every event once; with `flush_thread_count = 1` each connection's events
//! of a tag also leave in the order they came. The frames mix the buffer's
//! three ways of taking a batch: small ones copied into the tag's staged
//! chunk under its lock, mid-size ones (4–32 KiB) copied apart before the
//! lock, and big ones (≥ 32 KiB) kept as they arrived.

use std::collections::HashMap;

use crate::common::*;

/// Connections sending at once.
const CONNS: u64 = 16;
/// Events each connection sends.
const PER_CONN: u64 = 8_000;
/// Events per frame, in turn: about 50 B, 3 KB, 10 KB, 34 KB and 150 B of
/// entries (each event is about 49 bytes).
const FRAMES: [u64; 5] = [1, 60, 200, 700, 3];
/// Tags: a connection's frames go to them in turn, so every tag's staged
/// chunk takes batches from every connection.
const TAGS: u64 = 4;

/// Relays CONNS × PER_CONN events through nagare with `workers = 4` and
/// `flush_thread_count`, into an in-test sink; returns the (tag, seq) of
/// every event the sink received, in order of arrival. Connection `c`
/// sends the seqs c × PER_CONN.. in order.
fn relay_many(flush_thread_count: u32) -> Vec<(String, u64)> {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start(SinkOpts::default());
    let (d, port) = start_forward_daemon(
        dir.path(),
        &format!(
            "{}chunk_limit_size = \"64KiB\"\nflush_thread_count = {flush_thread_count}\n\n[system]\nworkers = 4\n",
            forward_output_to("scale.**", sink.port)
        ),
    );
    std::thread::scope(|s| {
        for c in 0..CONNS {
            s.spawn(move || {
                let mut tx = Sender::tcp(port);
                let (mut seq, end) = (c * PER_CONN, (c + 1) * PER_CONN);
                let mut frame = 0;
                while seq < end {
                    let n = FRAMES[frame % FRAMES.len()].min(end - seq);
                    let tag = format!("scale.{}", (c + frame as u64) % TAGS);
                    tx.packed(&tag, seq..seq + n, None);
                    seq += n;
                    frame += 1;
                }
                tx.finish();
            });
        }
    });
    let total = CONNS * PER_CONN;
    wait_until(WAIT, &format!("{total} events at the sink"), || {
        sink.count() as u64 >= total
    });
    // Everything the buffer took in has gone out: no chunk left to add to
    // the sink's count (a duplicate would show in the count below).
    d.wait_metric("events_out_total", "forward#0", total);
    sink.events()
}

/// Asserts that every connection's events of each tag arrived in the order
/// the connection sent them.
fn assert_per_tag_connection_order(events: &[(String, u64)]) {
    let mut last: HashMap<(&str, u64), u64> = HashMap::new();
    for (tag, seq) in events {
        let key = (tag.as_str(), seq / PER_CONN);
        if let Some(prev) = last.insert(key, *seq) {
            assert!(
                prev < *seq,
                "tag {tag}, connection {}: seq {seq} arrived after {prev}",
                seq / PER_CONN
            );
        }
    }
}

#[test]
fn many_connections_and_flush_workers_deliver_every_event_once() {
    let events = relay_many(4);
    let seqs: Vec<u64> = events.iter().map(|(_, s)| *s).collect();
    assert_exact_seqs(&seqs, CONNS * PER_CONN);
    // Each event kept its tag.
    let mut frame_of = HashMap::new();
    for c in 0..CONNS {
        let (mut seq, mut frame) = (c * PER_CONN, 0usize);
        while seq < (c + 1) * PER_CONN {
            let n = FRAMES[frame % FRAMES.len()].min((c + 1) * PER_CONN - seq);
            for s in seq..seq + n {
                frame_of.insert(s, format!("scale.{}", (c + frame as u64) % TAGS));
            }
            seq += n;
            frame += 1;
        }
    }
    for (tag, seq) in &events {
        assert_eq!(tag, &frame_of[seq], "the tag of seq {seq}");
    }
}

#[test]
fn one_flush_worker_keeps_each_connections_order_per_tag() {
    let events = relay_many(1);
    let seqs: Vec<u64> = events.iter().map(|(_, s)| *s).collect();
    assert_exact_seqs(&seqs, CONNS * PER_CONN);
    assert_per_tag_connection_order(&events);
}
