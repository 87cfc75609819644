//! Not tests but measurements, run by hand:
//! `cargo test --release -p nagare --bin nagare filter_cost -- --ignored --nocapture`
//! (`FILTER_COST=grep` times grep alone, e.g. to profile it).
//!
//! Times grep, modify and rewrite_tag, built as benches/filter-*.toml
//! builds them, on batches like the filter bench's (200 events `{seq,
//! message}` of 100 bytes, log-like words as flowbench writes them), in
//! CPU time of this thread, alternately, medians of 11 rounds: the
//! filters' own cost per event, without the relay's sockets and copies
//! around it. The walk of the batch's entries (`record::entry_bounds`, which
//! any filter reading fields must at least do) is timed beside them.

use std::hint::black_box;

use bytes::Bytes;
use nagare_core::filter::Filter;
use nagare_core::plugin::{BuildContext, Built, Section};
use nagare_forward::msgpack::{write_map_len, write_str};
use nagare_forward::EventTime;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::common::timing::{cpu_ns, median};

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

/// The filter of type `type_name` with the options `toml_text`, built
/// through the registry as the config loader builds it (so this harness
/// names no filter's code).
fn build(type_name: &str, toml_text: &str) -> Box<dyn Filter> {
    let registration = super::REGISTRY
        .iter()
        .find(|r| r.type_name == type_name)
        .unwrap_or_else(|| panic!("no filter type {type_name}"));
    let table = DeTable::parse(toml_text).unwrap();
    let span = table.span();
    let section = Section::new(Spanned::new(span, DeValue::Table(table.into_inner())), "");
    match (registration.build)(section, &mut BuildContext::new("cost")) {
        Ok(Built::One(f)) => f,
        Ok(Built::Fanout(_)) => panic!("{type_name}: one filter expected"),
        Err(e) => panic!("{type_name}: {e:?}"),
    }
}

#[test]
#[ignore = "a measurement, run by hand"]
fn filter_cost() {
    let filters: Vec<(&str, Box<dyn Filter>)> = vec![
        (
            "grep",
            build(
                "grep",
                "[[exclude]]\nkey = \"message\"\npattern = \"panic\"\n",
            ),
        ),
        (
            "modify",
            build(
                "modify",
                "[set]\nhost = \"${hostname}\"\nsource = \"${tag}\"\n",
            ),
        ),
        (
            "rewrite_tag",
            build(
                "rewrite_tag",
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
            black_box(nagare_core::record::entry_bounds(&parts[0]).count());
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
