//! Not tests but measurements, run by hand:
//! `cargo test --release -p nagare --bin nagare filter_cost -- --ignored --nocapture`
//! (`FILTER_COST=grep` times grep alone, e.g. to profile it).
//!
//! Times grep, modify and rewrite_tag, built as benches/filter-*.toml
//! builds them, on batches like the filter bench's (200 events `{seq,
//! message}` of 100 bytes, log-like words as flowbench writes them), in
//! CPU time of this thread, alternately, medians of 11 rounds: the
//! filters' own cost per event, without the relay's sockets and copies
//! around it. The walk of the batch's entries (`record::entries`, which
//! any filter reading fields must at least do) is timed beside them.

use std::hint::black_box;

use bytes::Bytes;
use nagare_forward::msgpack::{write_map_len, write_str};
use nagare_forward::EventTime;

use nagare_core::filter::Filter;
use nagare_core::filter::FilterPlugin;
use nagare_core::plugin::BuildContext;

const EVENTS: u32 = 200;

fn batch() -> Bytes {
    let words = [
        "GET",
        "POST",
        "/api/v1/users",
        "/healthz",
        "status=200",
        "status=500",
        "INFO",
        "WARN",
        "connection",
        "timeout",
        "retry",
        "upstream",
        "took",
        "ms",
        "bytes",
        "user",
    ];
    let mut e = Vec::new();
    for seq in 0..EVENTS {
        let mut message = String::new();
        let mut i = seq as usize;
        while message.len() < 80 {
            message.push_str(words[i % words.len()]);
            message.push(' ');
            i = i * 7 + 3;
        }
        message.truncate(80);
        let mut rec = Vec::new();
        write_map_len(&mut rec, 2);
        write_str(&mut rec, b"seq");
        // flowbench's seq: a uint 64, patched in place.
        rec.push(0xcf);
        rec.extend_from_slice(&(1_000_000 + u64::from(seq)).to_be_bytes());
        write_str(&mut rec, b"message");
        write_str(&mut rec, message.as_bytes());
        nagare_forward::write_entry(&mut e, EventTime::new(1_700_000_000, seq), &rec);
    }
    Bytes::from(e)
}

fn build<C: FilterPlugin + serde::de::DeserializeOwned>(toml_text: &str) -> Box<dyn Filter> {
    toml::from_str::<C>(toml_text)
        .unwrap()
        .build(&mut BuildContext::new("cost"))
        .unwrap_or_else(|e| panic!("{e}"))
}

/// This thread's CPU time: the machine's other load does not count
/// (the lua filter's `lua_cost` uses it too).
pub(super) fn cpu_ns() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e9 + ts.tv_nsec as f64
}

#[test]
#[ignore = "a measurement, run by hand"]
fn filter_cost() {
    let filters: Vec<(&str, Box<dyn Filter>)> = vec![
        (
            "grep",
            build::<super::grep::GrepConfig>(
                "[[exclude]]\nkey = \"message\"\npattern = \"panic\"\n",
            ),
        ),
        (
            "modify",
            build::<super::modify::ModifyConfig>(
                "[set]\nhost = \"${hostname}\"\nsource = \"${tag}\"\n",
            ),
        ),
        (
            "rewrite_tag",
            build::<super::rewrite_tag::RewriteTagConfig>(
                r#"
[[rule]]
key = "message"
pattern = "panic"
tag = "panics.${tag}"
[[rule]]
key = "message"
pattern = "^FATAL (\\w+)"
tag = "fatal.$1"
[[rule]]
key = "message"
pattern = "."
tag = "rewritten.${tag_parts[1]}"
"#,
            ),
        ),
    ];
    // FILTER_COST=name times that filter alone (to profile it).
    let only = std::env::var("FILTER_COST").ok();
    let filters: Vec<_> = filters
        .into_iter()
        .filter(|(n, _)| only.as_deref().is_none_or(|o| o == *n))
        .collect();
    let parts = [batch()];
    let batches = 2000;
    let per_event = |ns: f64| ns / f64::from(batches * EVENTS);
    let mut times = vec![Vec::new(); filters.len() + 1];
    for _ in 0..11 {
        let t = cpu_ns();
        for _ in 0..batches {
            black_box(nagare_core::record::entries(&parts[0]).count());
        }
        times[0].push(per_event(cpu_ns() - t));
        for (i, (_, f)) in filters.iter().enumerate() {
            let t = cpu_ns();
            for _ in 0..batches {
                black_box(f.filter("bench.load", &parts, EVENTS));
            }
            times[i + 1].push(per_event(cpu_ns() - t));
        }
    }
    let names = std::iter::once("entries walk").chain(filters.iter().map(|(n, _)| *n));
    for (name, t) in names.zip(times) {
        println!(
            "{name}: {:.1} ns/event (CPU time of this thread, median of 11)",
            median(t)
        );
    }
}

/// The median of `v` (not empty).
pub(super) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
