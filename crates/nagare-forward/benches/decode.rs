//! Hot path of the forward input: scanning and checking a frame.
//!
//! `cargo bench -p nagare-forward --bench decode` (add `-- --quick` for a
//! short run). Throughput is in events.
use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use nagare_forward::{
    encode_forward, encode_packed_forward, msgpack::skip_value, scan_frame, write_entry,
    Compression, EventTime, Limits,
};

/// `events` entries of `{"seq": u32, "message": <size bytes>}`.
fn entries(events: u32, size: usize) -> Vec<u8> {
    let mut entries = Vec::new();
    for seq in 0..events {
        let mut rec = vec![0x82, 0xa3, b's', b'e', b'q', 0xce];
        rec.extend_from_slice(&seq.to_be_bytes());
        rec.extend_from_slice(&[0xa7, b'm', b'e', b's', b's', b'a', b'g', b'e', 0xda]);
        rec.extend_from_slice(&(size as u16).to_be_bytes());
        rec.resize(rec.len() + size, b'x');
        write_entry(&mut entries, EventTime::new(1_700_000_000, seq), &rec);
    }
    entries
}

fn packed(events: u32, size: usize, c: Compression) -> Vec<u8> {
    let mut f = Vec::new();
    encode_packed_forward(
        &mut f,
        "bench.load",
        &entries(events, size),
        events,
        None,
        c,
    )
    .unwrap();
    f
}

fn forward(events: u32, size: usize) -> Vec<u8> {
    let mut f = Vec::new();
    encode_forward(&mut f, "bench.load", &entries(events, size), events, None);
    f
}

fn bench_frame(c: &mut Criterion, name: &str, f: Vec<u8>) {
    let lim = Limits::default();
    let f = Bytes::from(f);
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(200));
    g.bench_function("scan+check", |b| {
        b.iter(|| {
            let s = scan_frame(&f, &lim).unwrap().unwrap();
            s.into_frame(f.clone(), &lim, EventTime::default()).unwrap()
        })
    });
    g.finish();
}

/// Finding each entry's end in a chunk of them (what the redis output's
/// msgpack path and the redis input's check of each element do).
fn bench_entries(c: &mut Criterion) {
    let e = entries(200, 100);
    let mut g = c.benchmark_group("entries_200x100");
    g.throughput(Throughput::Elements(200));
    g.bench_function("skip_value", |b| {
        b.iter(|| {
            let mut p = 0;
            while p < e.len() {
                p = skip_value(&e, p).unwrap();
            }
            p
        })
    });
    g.finish();
}

fn bench(c: &mut Criterion) {
    bench_entries(c);
    for size in [100usize, 1024] {
        bench_frame(
            c,
            &format!("packed_200x{size}"),
            packed(200, size, Compression::None),
        );
    }
    bench_frame(c, "forward_200x100", forward(200, 100));
    bench_frame(c, "gzip_200x100", packed(200, 100, Compression::Gzip));
    bench_frame(c, "zstd_200x100", packed(200, 100, Compression::Zstd));
}

criterion_group!(benches, bench);
criterion_main!(benches);
