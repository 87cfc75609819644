//! Hot path of the forward input: scanning and checking a PackedForward frame.
use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use nagare_forward::{
    encode_packed_forward, scan_frame, write_entry, Compression, EventTime, Limits,
};

fn frame(events: u32, size: usize) -> Vec<u8> {
    let mut entries = Vec::new();
    for seq in 0..events {
        let mut rec = vec![0x82, 0xa3, b's', b'e', b'q', 0xce];
        rec.extend_from_slice(&seq.to_be_bytes());
        rec.extend_from_slice(&[0xa7, b'm', b'e', b's', b's', b'a', b'g', b'e', 0xda]);
        rec.extend_from_slice(&(size as u16).to_be_bytes());
        rec.extend(std::iter::repeat(b'x').take(size));
        write_entry(&mut entries, EventTime::new(1_700_000_000, seq), &rec);
    }
    let mut f = Vec::new();
    encode_packed_forward(
        &mut f,
        "bench.load",
        &entries,
        events,
        None,
        Compression::None,
    )
    .unwrap();
    f
}

fn bench(c: &mut Criterion) {
    let lim = Limits::default();
    for size in [100usize, 1024] {
        let f = Bytes::from(frame(200, size));
        let mut g = c.benchmark_group(format!("packed_200x{size}"));
        g.throughput(Throughput::Elements(200));
        g.bench_function("scan+check", |b| {
            b.iter(|| {
                let s = scan_frame(&f, &lim).unwrap().unwrap();
                s.into_frame(f.clone(), &lim, EventTime::default()).unwrap()
            })
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
