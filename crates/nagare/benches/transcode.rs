//! The receivers' per-event floor (issue 32): what the elasticsearch and
//! beats inputs must do per event, against what the forward input does,
//! for the events of benches/receivers.sh (`{"seq":N,"message":"xxx…"}` of
//! about 100 and 1024 bytes, 1,000 per request or window).
//!
//! - `json_to_msgpack`: one document written as msgpack: `transcoder`
//!   (formats::json_msgpack, what the inputs use), `serde_visitor` (serde's
//!   visitors driven by serde_json, written as they go: the json parser's
//!   way before, and what serde_transcode into a msgpack serializer does),
//!   `value_tree` (a serde_json `Value`, then msgpack: the gelf input's
//!   way), and `copy` (the text copied as one msgpack string: no reader
//!   can do less).
//! - `receive`: a whole request or window, per event: the elasticsearch
//!   input's `_bulk` decoder (action line, document, the answer's item),
//!   the beats input's frame reader (inflate, frames, documents, with the
//!   thread's inflater kept between windows) and its inflating alone, and the forward input's frame decoder
//!   (PackedForward, the same records already in msgpack).
//!
//!   cargo bench -p nagare --bench transcode
use std::io::Write;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use nagare::formats::json_msgpack::{object_to_msgpack, Top};
use nagare::inputs::beats::{BeatsInputConfig, Decoder, Inflater, Window};
use nagare::inputs::common::http_listener::Body;
use nagare::inputs::elasticsearch::{ElasticsearchInputConfig, EsDecode};
// serde's visitors writing msgpack as serde_json reads: the json parser's
// converter before formats::json_msgpack (the exec filter's still).
use nagare::parsers::json::Emit;
use serde::de::DeserializeSeed;

const EVENTS: usize = 1000;

/// The load program's document (benches/receivers-load/main.go).
fn doc(i: usize, size: usize) -> String {
    let head = format!("{{\"seq\":{i},\"message\":\"");
    let n = size.saturating_sub(head.len() + 2).max(1);
    format!("{head}{}\"}}", "x".repeat(n))
}

fn es_body(size: usize) -> Vec<u8> {
    let mut b = Vec::new();
    for i in 0..EVENTS {
        b.extend_from_slice(b"{\"create\":{\"_index\":\"bench\"}}\n");
        b.extend_from_slice(doc(i, size).as_bytes());
        b.push(b'\n');
    }
    b
}

fn beats_window(size: usize) -> Vec<u8> {
    let mut frames = Vec::new();
    for i in 0..EVENTS {
        let d = doc(i, size);
        frames.extend_from_slice(b"2J");
        frames.extend_from_slice(&(i as u32 + 1).to_be_bytes());
        frames.extend_from_slice(&(d.len() as u32).to_be_bytes());
        frames.extend_from_slice(d.as_bytes());
    }
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(3));
    z.write_all(&frames).unwrap();
    let z = z.finish().unwrap();
    let mut out = b"2W".to_vec();
    out.extend_from_slice(&(EVENTS as u32).to_be_bytes());
    out.extend_from_slice(b"2C");
    out.extend_from_slice(&(z.len() as u32).to_be_bytes());
    out.extend_from_slice(&z);
    out
}

/// A PackedForward message of the same records: `[tag, entries, {}]`.
fn forward_message(size: usize) -> Vec<u8> {
    let mut entries = Vec::new();
    let now = nagare_forward::EventTime::now();
    for i in 0..EVENTS {
        entries.push(0x92);
        entries.extend_from_slice(&now.to_bytes());
        object_to_msgpack(doc(i, size).as_bytes(), &Top::default(), &mut entries).unwrap();
    }
    let mut m = vec![0x93];
    nagare_forward::msgpack::write_str(&mut m, b"bench");
    nagare_forward::msgpack::write_bin_header(&mut m, entries.len());
    m.extend_from_slice(&entries);
    m.push(0x80);
    m
}

fn json_to_msgpack(c: &mut Criterion) {
    let mut g = c.benchmark_group("json_to_msgpack");
    for size in [100, 1024] {
        let docs: Vec<String> = (0..EVENTS).map(|i| doc(i, size)).collect();
        g.throughput(Throughput::Elements(EVENTS as u64));
        let mut out = Vec::with_capacity(EVENTS * (size + 16));
        g.bench_with_input(BenchmarkId::new("transcoder", size), &docs, |b, docs| {
            b.iter(|| {
                out.clear();
                for d in docs {
                    object_to_msgpack(d.as_bytes(), &Top::default(), &mut out).unwrap();
                }
            })
        });
        g.bench_with_input(BenchmarkId::new("serde_visitor", size), &docs, |b, docs| {
            b.iter(|| {
                out.clear();
                for d in docs {
                    let mut de = serde_json::Deserializer::from_slice(d.as_bytes());
                    Emit(&mut out).deserialize(&mut de).unwrap();
                    de.end().unwrap();
                }
            })
        });
        g.bench_with_input(BenchmarkId::new("value_tree", size), &docs, |b, docs| {
            b.iter(|| {
                out.clear();
                for d in docs {
                    let v: serde_json::Value = serde_json::from_slice(d.as_bytes()).unwrap();
                    nagare_core::json::msgpack_from_json(&v, &mut out);
                }
            })
        });
        g.bench_with_input(BenchmarkId::new("copy", size), &docs, |b, docs| {
            b.iter(|| {
                out.clear();
                for d in docs {
                    nagare_forward::msgpack::write_str(&mut out, d.as_bytes());
                }
            })
        });
    }
    g.finish();
}

fn receive(c: &mut Criterion) {
    let mut g = c.benchmark_group("receive");
    let es: ElasticsearchInputConfig = toml::from_str("bind = \"127.0.0.1:0\"").unwrap();
    let es = EsDecode::new(&es).unwrap();
    let beats: BeatsInputConfig = toml::from_str("").unwrap();
    let beats = Decoder::new(&beats).unwrap();
    let limits = nagare_forward::decode::Limits::default();
    for size in [100, 1024] {
        g.throughput(Throughput::Elements(EVENTS as u64));
        let body = Bytes::from(es_body(size));
        g.bench_function(BenchmarkId::new("es_bulk", size), |b| {
            b.iter(|| {
                let body = Body::from(body.clone());
                let (events, answer) = es.bulk(None, &body).unwrap();
                assert_eq!(events[0].count as usize, EVENTS);
                answer.len()
            })
        });
        let window = beats_window(size);
        g.bench_function(BenchmarkId::new("beats_window", size), |b| {
            // One Window for all, as a connection's: the room for the
            // next window's events is sized by the last (and the thread's
            // inflater is kept, as in the input).
            let (mut w, mut ready) = (Window::default(), Vec::new());
            b.iter(|| {
                ready.clear();
                beats.frames(&window, &mut w, &mut ready, 0).unwrap();
                assert_eq!(ready[0].count as usize, EVENTS);
            })
        });
        let z = &window[12..];
        g.bench_function(BenchmarkId::new("beats_inflate_only", size), |b| {
            let mut inflater = Inflater::new();
            b.iter(|| inflater.inflate(z, usize::MAX / 2).unwrap().len())
        });
        let fwd = forward_message(size);
        g.bench_function(BenchmarkId::new("forward_frame", size), |b| {
            b.iter(|| {
                let frames = nagare_forward::decode::decode_all(&fwd, &limits).unwrap();
                assert_eq!(frames.len(), 1);
            })
        });
    }
    g.finish();
}

criterion_group!(benches, json_to_msgpack, receive);
criterion_main!(benches);
