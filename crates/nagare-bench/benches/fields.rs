//! Guards the generator's speed: dummer's sample config per line (the issue
//! asks for at least 2,000,000 lines/s per worker, i.e. under 500 ns a line),
//! each field kind alone, and the fixed message.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use nagare_bench::gen::fields::{now_nanos, FieldGen, FieldSpec, Rng};
use nagare_bench::gen::{GenFile, GenPlan};

/// dummer's sample configuration, as shipped in examples/.
const SAMPLE: &str = include_str!("../../../examples/gen/dummer-sample.toml");

const LINES: u64 = 1000;

fn lines(c: &mut Criterion) {
    let mut g = c.benchmark_group("lines");
    g.throughput(Throughput::Elements(LINES));
    for (name, text) in [
        ("dummer_sample_ltsv", SAMPLE.to_string()),
        (
            "dummer_sample_json",
            SAMPLE.replace("labeled = true", "format = \"json\""),
        ),
        ("fixed_message", "message = \"hello world\"".to_string()),
    ] {
        let f: GenFile = toml::from_str(&text).unwrap();
        let mut gen = GenPlan::from_file(f, None, None, false).unwrap().gen;
        let mut buf = Vec::with_capacity(1 << 20);
        let now = now_nanos();
        let mut idx = 0u64;
        g.bench_function(name, |b| {
            b.iter(|| {
                buf.clear();
                for _ in 0..LINES {
                    gen.write_line(idx, now, &mut buf);
                    buf.push(b'\n');
                    idx += 1;
                }
                black_box(buf.len())
            })
        });
    }
    g.finish();
}

fn fields(c: &mut Criterion) {
    let mut g = c.benchmark_group("fields");
    g.throughput(Throughput::Elements(LINES));
    for (name, text) in [
        (
            "integer_countup_fmt",
            "type='integer'\ncountup=true\nformat='%04d'",
        ),
        ("integer_range", "type='integer'\nrange=[0, 1000000]"),
        ("float_range", "type='float'\nrange=[0.1, 5.0]"),
        (
            "string_any",
            "type='string'\nany=['DEBUG','INFO','WARN','ERROR']",
        ),
        (
            "string_any_weighted",
            "type='string'\nany=['DEBUG','INFO','WARN','ERROR']\nweights=[1,6,2,1]",
        ),
        ("string_length_8", "type='string'\nlength=8"),
        ("datetime_now", "type='datetime'"),
        ("datetime_random", "type='datetime'\nrandom=true"),
        ("uuid", "type='uuid'"),
        ("ipv4", "type='ipv4'"),
    ] {
        let spec: FieldSpec = toml::from_str(&format!("name='f'\n{text}")).unwrap();
        let mut f = FieldGen::compile(&spec).unwrap();
        let mut rng = Rng::new(1);
        let mut buf = Vec::with_capacity(1 << 16);
        let now = now_nanos();
        g.bench_function(name, |b| {
            b.iter(|| {
                buf.clear();
                for i in 0..LINES {
                    f.write(i, now, &mut rng, false, &mut buf);
                }
                black_box(buf.len())
            })
        });
    }
    g.finish();
}

criterion_group!(benches, lines, fields);
criterion_main!(benches);
