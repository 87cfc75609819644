//! Property tests: round trips through every mode, no panics on arbitrary or
//! mutated input, and stream prefixes.

mod common;

use bytes::Bytes;
use common::*;
use nagare_forward::{
    bytes_needed, count_entries, encode_forward, encode_message, encode_packed_forward,
    normalize_entries, scan_frame, write_entry, Compression, EventFrame, EventTime, Limits, Mode,
};
use proptest::collection::vec;
use proptest::prelude::*;
use rmpv::Value;

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Nil),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        "\\PC{0,24}".prop_map(Value::from),
        vec(any::<u8>(), 0..40).prop_map(Value::from),
        // long strings reach str16 / bin16
        (0usize..400).prop_map(|n| Value::from("y".repeat(n))),
        (any::<i8>(), vec(any::<u8>(), 0..20)).prop_map(|(t, d)| Value::Ext(t, d)),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(Value::Array),
            vec(("\\PC{0,10}".prop_map(Value::from), inner), 0..6).prop_map(Value::Map),
        ]
    })
}

fn record() -> impl Strategy<Value = Value> {
    vec(("[a-z_]{1,10}".prop_map(Value::from), value()), 0..8).prop_map(Value::Map)
}

fn tag() -> impl Strategy<Value = String> {
    prop_oneof!["[a-z0-9_]{1,12}(\\.[a-z0-9_]{1,12}){0,3}", "\\PC{0,40}",]
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Message,
    Forward,
    Packed,
    Gzip,
    Zstd,
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Message),
        Just(Kind::Forward),
        Just(Kind::Packed),
        Just(Kind::Gzip),
        Just(Kind::Zstd),
    ]
}

#[derive(Debug, Clone)]
struct Spec {
    kind: Kind,
    tag: String,
    events: Vec<(EventTime, Value)>,
    chunk: Option<Vec<u8>>,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        kind(),
        tag(),
        vec(
            (any::<u32>(), 0u32..1_000_000_000, record())
                .prop_map(|(s, n, r)| (EventTime::new(s, n), r)),
            1..6,
        ),
        proptest::option::of(vec(any::<u8>(), 0..40)),
    )
        .prop_map(|(kind, tag, mut events, chunk)| {
            if matches!(kind, Kind::Message) {
                events.truncate(1);
            }
            Spec {
                kind,
                tag,
                events,
                chunk,
            }
        })
}

fn canonical(spec: &Spec) -> Vec<u8> {
    let mut e = Vec::new();
    for (t, r) in &spec.events {
        write_entry(&mut e, *t, &enc(r));
    }
    e
}

fn encode(spec: &Spec) -> Vec<u8> {
    let e = canonical(spec);
    let n = spec.events.len() as u32;
    let chunk = spec.chunk.as_deref();
    let mut out = Vec::new();
    match spec.kind {
        Kind::Message => {
            let (t, r) = &spec.events[0];
            encode_message(&mut out, &spec.tag, *t, &enc(r), chunk);
        }
        Kind::Forward => encode_forward(&mut out, &spec.tag, &e, n, chunk),
        Kind::Packed => {
            encode_packed_forward(&mut out, &spec.tag, &e, n, chunk, Compression::None).unwrap()
        }
        Kind::Gzip => {
            encode_packed_forward(&mut out, &spec.tag, &e, n, chunk, Compression::Gzip).unwrap()
        }
        Kind::Zstd => {
            encode_packed_forward(&mut out, &spec.tag, &e, n, chunk, Compression::Zstd).unwrap()
        }
    }
    out
}

fn check_frame(spec: &Spec, ev: &EventFrame) -> Result<(), TestCaseError> {
    prop_assert_eq!(&ev.tag, &spec.tag);
    prop_assert_eq!(ev.count as usize, spec.events.len());
    prop_assert_eq!(&ev.entries[..], &canonical(spec)[..]);
    let want_chunk = spec.chunk.as_ref().map(|c| s(c));
    prop_assert_eq!(ev.chunk.as_deref(), want_chunk.as_deref());
    let want = match spec.kind {
        Kind::Message => Mode::Message,
        Kind::Forward => Mode::Forward,
        Kind::Packed => Mode::PackedForward,
        Kind::Gzip | Kind::Zstd => Mode::CompressedPackedForward,
    };
    prop_assert_eq!(ev.mode, want);
    let got = entries(&ev.entries);
    for ((t, r), (wt, wr)) in got.iter().zip(&spec.events) {
        prop_assert_eq!(as_event_time(t), *wt);
        prop_assert_eq!(r, wr);
    }
    Ok(())
}

/// Whatever decodes must come out canonical: normalizing again changes nothing.
fn check_canonical(ev: &EventFrame) -> Result<(), TestCaseError> {
    let (again, n) = normalize_entries(ev.entries.clone(), NOW).unwrap();
    prop_assert_eq!(n, ev.count);
    prop_assert_eq!(&again[..], &ev.entries[..]);
    prop_assert_eq!(count_entries(&ev.entries).unwrap(), ev.count);
    Ok(())
}

/// Scans and builds, and never panics; returns what decoded.
fn try_decode(buf: &[u8], lim: &Limits) -> Option<EventFrame> {
    match scan_frame(buf, lim) {
        Ok(Some(s)) => {
            assert!(s.len <= buf.len() && s.len > 0);
            let f = Bytes::copy_from_slice(&buf[..s.len]);
            s.into_frame(f, lim, NOW).ok()
        }
        _ => None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn encode_decode_round_trip(spec in spec()) {
        let f = encode(&spec);
        let ev = decode(&f).unwrap();
        check_frame(&spec, &ev)?;
    }

    #[test]
    fn any_prefix_of_a_stream_is_none_or_the_next_frame(
        specs in vec(spec(), 1..5),
        cut_frac in 0.0f64..=1.0,
    ) {
        let frames: Vec<Vec<u8>> = specs.iter().map(encode).collect();
        let stream = frames.concat();
        let cut = ((stream.len() as f64) * cut_frac) as usize;
        let lim = Limits::default();
        let mut pos = 0;
        let mut i = 0;
        loop {
            match scan_frame(&stream[pos..cut], &lim) {
                Ok(Some(s)) => {
                    prop_assert_eq!(s.len, frames[i].len());
                    let f = Bytes::copy_from_slice(&stream[pos..pos + s.len]);
                    let ev = s.into_frame(f, &lim, NOW).unwrap();
                    check_frame(&specs[i], &ev)?;
                    pos += frames[i].len();
                    i += 1;
                }
                Ok(None) => {
                    // What is still needed is more than we have and no more
                    // than the frame's real length.
                    let have = cut - pos;
                    let need = bytes_needed(&stream[pos..cut]);
                    prop_assert!(need.is_some(), "bytes_needed on an incomplete frame");
                    let need = need.unwrap();
                    prop_assert!(need > have, "needs {} with {} bytes", need, have);
                    if i < frames.len() {
                        prop_assert!(need <= frames[i].len(), "needs {} of {}", need, frames[i].len());
                    }
                    break;
                }
                Err(e) => prop_assert!(false, "error on a valid prefix: {}", e),
            }
        }
        // Every frame that ends within the cut was returned.
        let complete = frames
            .iter()
            .scan(0, |end, f| { *end += f.len(); Some(*end) })
            .take_while(|end| *end <= cut)
            .count();
        prop_assert_eq!(i, complete);
    }

    #[test]
    fn arbitrary_bytes_never_panic(buf in vec(any::<u8>(), 0..600)) {
        let lim = Limits::default();
        if let Some(ev) = try_decode(&buf, &lim) {
            check_canonical(&ev)?;
        }
        let small = Limits { max_frame_size: 100, max_decompressed_size: 100 };
        let _ = try_decode(&buf, &small);
        if let Ok(None) = scan_frame(&buf, &lim) {
            let need = bytes_needed(&buf);
            prop_assert!(need.is_some_and(|n| n > buf.len()), "{:?} for {}", need, buf.len());
        }
        if let Ok((e, n)) = normalize_entries(Bytes::from(buf), NOW) {
            prop_assert_eq!(count_entries(&e).unwrap(), n);
        }
    }

    #[test]
    fn handshakes_never_panic_on_mutated_or_arbitrary_messages(
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        junk in vec(any::<u8>(), 0..300),
    ) {
        use nagare_forward::handshake::{ClientHandshake, Pong, ServerAuth, User};
        let users = vec![User { username: b"u".to_vec(), password: b"p".to_vec() }];
        let auth = ServerAuth::new(b"k", b"srv", users);
        let server = auth.start();
        let mut client = ClientHandshake::new(b"k", b"cli", b"u", b"p");
        let mut ping = client.ping(&server.helo()).unwrap();
        let i = at.index(ping.len());
        ping[i] = byte;
        for msg in [&ping, &junk] {
            // The server answers anything with a PONG; the client refuses
            // what is not one.
            let answer = server.answer(msg);
            prop_assert!(Pong::decode(&answer.pong).is_ok());
            let _ = client.check_pong(msg);
            let _ = ClientHandshake::new(b"k", b"cli", b"", b"").ping(msg);
        }
    }

    #[test]
    fn frame_shaped_bytes_never_panic(
        head in prop_oneof![Just(0x92u8), Just(0x93), Just(0x94)],
        tag in "[a-z]{0,4}",
        second in any::<u8>(),
        rest in vec(any::<u8>(), 0..300),
    ) {
        let buf = cat(&[&[head], &s(tag.as_bytes()), &[second], &rest]);
        if let Some(ev) = try_decode(&buf, &Limits::default()) {
            check_canonical(&ev)?;
        }
    }

    #[test]
    fn mutated_frames_never_panic(
        spec in spec(),
        edits in vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..6),
    ) {
        let mut f = encode(&spec);
        for (at, byte, op) in edits {
            if f.is_empty() {
                break;
            }
            let i = at.index(f.len());
            match op {
                0 => f[i] = byte,
                1 => f.insert(i, byte),
                _ => { f.remove(i); }
            }
        }
        for lim in [
            Limits::default(),
            Limits { max_frame_size: 200, max_decompressed_size: 200 },
        ] {
            if let Some(ev) = try_decode(&f, &lim) {
                check_canonical(&ev)?;
            }
        }
    }

    #[test]
    fn mutated_packed_payloads_never_panic(
        spec in spec(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        cut in any::<prop::sample::Index>(),
    ) {
        // Damage the entries themselves (inside a valid frame envelope).
        let mut e = canonical(&spec);
        let i = at.index(e.len());
        e[i] = byte;
        e.truncate(cut.index(e.len() + 1));
        if let Ok((out, n)) = normalize_entries(Bytes::from(e), NOW) {
            prop_assert_eq!(count_entries(&out).unwrap(), n);
            let (again, m) = normalize_entries(out.clone(), NOW).unwrap();
            prop_assert_eq!(m, n);
            prop_assert_eq!(again, out);
        }
    }
}
