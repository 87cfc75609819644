//! Decoding every forward mode and option, byte for byte.

mod common;

use bytes::Bytes;
use common::*;
use nagare_forward::decode::decode_all;
use nagare_forward::handshake::decode_ack;
use nagare_forward::{encode_ack, scan_frame, EventTime, Limits, Mode};
use rmpv::Value;

const T: u32 = 1_700_000_000;

// ---------------------------------------------------------------- Message

#[test]
fn message_without_options() {
    let r = rec("hello", 1);
    let f = cat(&[&arr(3), &s(b"app.x"), &et(T, 5), &r]);
    let ev = decode(&f).unwrap();
    assert_eq!(ev.tag, "app.x");
    assert_eq!(ev.mode, Mode::Message);
    assert_eq!(ev.count, 1);
    assert_eq!(ev.chunk, None);
    assert_eq!(ev.size, None);
    assert_eq!(ev.signal, None);
    assert_eq!(&ev.entries[..], &entry(&et(T, 5), &r)[..]);
}

#[test]
fn message_with_option_map_and_chunk() {
    let r = rec("hello", 1);
    let f = cat(&[
        &arr(4),
        &s(b"app.x"),
        &et(T, 5),
        &r,
        &opts(&[("chunk", s(b"abc"))]),
    ]);
    let ev = decode(&f).unwrap();
    assert_eq!(ev.mode, Mode::Message);
    assert_eq!(ev.count, 1);
    assert_eq!(ev.chunk.as_deref(), Some(&s(b"abc")[..]));
    assert_eq!(&ev.entries[..], &entry(&et(T, 5), &r)[..]);

    // An empty option map and a nil option are accepted too.
    for o in [map(0), vec![0xc0]] {
        let f = cat(&[&arr(4), &s(b"app.x"), &et(T, 5), &r, &o]);
        let ev = decode(&f).unwrap();
        assert_eq!(ev.chunk, None);
        assert_eq!(&ev.entries[..], &entry(&et(T, 5), &r)[..]);
    }
}

#[test]
fn message_with_integer_time_keeps_it() {
    let r = rec("x", 2);
    for t in [uint(5), uint(T as u64), vec![0xcd, 0x01, 0x00]] {
        let f = cat(&[&arr(3), &s(b"t"), &t, &r]);
        let ev = decode(&f).unwrap();
        assert_eq!(&ev.entries[..], &entry(&t, &r)[..]);
    }
}

#[test]
fn message_ext8_time_becomes_fixext8() {
    let r = rec("x", 2);
    let f = cat(&[&arr(3), &s(b"t"), &et_ext8(T, 7), &r]);
    let ev = decode(&f).unwrap();
    assert_eq!(&ev.entries[..], &entry(&et(T, 7), &r)[..]);
}

#[test]
fn message_zero_or_nil_time_is_now() {
    let r = rec("x", 2);
    for t in [vec![0x00], vec![0xc0], vec![0xcc, 0x00], vec![0xd0, 0x00]] {
        let f = cat(&[&arr(3), &s(b"t"), &t, &r]);
        let ev = decode(&f).unwrap();
        assert_eq!(&ev.entries[..], &entry(&NOW.to_bytes(), &r)[..], "{t:?}");
    }
}

#[test]
fn float_time_becomes_event_time() {
    let r = rec("x", 2);
    let f = cat(&[&arr(3), &s(b"t"), &f64_time(1_700_000_000.5), &r]);
    let ev = decode(&f).unwrap();
    assert_eq!(&ev.entries[..], &entry(&et(T, 500_000_000), &r)[..]);

    // float32
    let mut t32 = vec![0xca];
    t32.extend_from_slice(&1024.25f32.to_be_bytes());
    let f = cat(&[&arr(3), &s(b"t"), &t32, &r]);
    let ev = decode(&f).unwrap();
    assert_eq!(&ev.entries[..], &entry(&et(1024, 250_000_000), &r)[..]);

    // Same in a Forward entry.
    let body = cat(&[&arr(1), &entry(&f64_time(12.125), &r)]);
    let f = cat(&[&arr(2), &s(b"t"), &body]);
    let ev = decode(&f).unwrap();
    assert_eq!(&ev.entries[..], &entry(&et(12, 125_000_000), &r)[..]);
}

#[test]
fn float_time_out_of_range_is_an_error() {
    let r = rec("x", 2);
    for t in [-1.0, f64::NAN, f64::INFINITY, 4_294_967_296.0] {
        let f = cat(&[&arr(3), &s(b"t"), &f64_time(t), &r]);
        assert!(decode(&f).is_err(), "{t}");
    }
}

// ---------------------------------------------------------------- Forward

#[test]
fn forward_without_and_with_options() {
    let e1 = entry(&et(T, 1), &rec("a", 1));
    let e2 = entry(&et(T, 2), &rec("b", 2));
    let body = cat(&[&arr(2), &e1, &e2]);
    let want = cat(&[&e1, &e2]);

    let f = cat(&[&arr(2), &s(b"fwd"), &body]);
    let ev = decode(&f).unwrap();
    assert_eq!(ev.mode, Mode::Forward);
    assert_eq!(ev.count, 2);
    assert_eq!(ev.chunk, None);
    assert_eq!(&ev.entries[..], &want[..]);

    let f = cat(&[
        &arr(3),
        &s(b"fwd"),
        &body,
        &opts(&[("chunk", s(b"id-9")), ("size", uint(2))]),
    ]);
    let ev = decode(&f).unwrap();
    assert_eq!(ev.mode, Mode::Forward);
    assert_eq!(ev.count, 2);
    assert_eq!(ev.size, Some(2));
    assert_eq!(ev.chunk.as_deref(), Some(&s(b"id-9")[..]));
    assert_eq!(&ev.entries[..], &want[..]);
}

#[test]
fn forward_canonical_entries_are_not_copied() {
    let e1 = entry(&et(T, 1), &rec("a", 1));
    let f = Bytes::from(cat(&[&arr(2), &s(b"fwd"), &arr(1), &e1]));
    let lim = Limits::default();
    let sc = scan_frame(&f, &lim).unwrap().unwrap();
    let ev = sc.into_frame(f.clone(), &lim, NOW).unwrap();
    let range = f.as_ptr() as usize..f.as_ptr() as usize + f.len();
    assert!(range.contains(&(ev.entries.as_ptr() as usize)));
}

#[test]
fn forward_mixed_time_forms_are_normalised() {
    let r = rec("a", 1);
    let body = cat(&[
        &arr(5),
        &entry(&et(T, 1), &r),
        &entry(&et_ext8(T, 2), &r),
        &entry(&uint(T as u64), &r),
        &entry(&[0x00], &r),
        &entry(&[0xc0], &r),
    ]);
    let f = cat(&[&arr(2), &s(b"fwd"), &body]);
    let ev = decode(&f).unwrap();
    assert_eq!(ev.count, 5);
    let want = cat(&[
        &entry(&et(T, 1), &r),
        &entry(&et(T, 2), &r),
        &entry(&uint(T as u64), &r),
        &entry(&NOW.to_bytes(), &r),
        &entry(&NOW.to_bytes(), &r),
    ]);
    assert_eq!(&ev.entries[..], &want[..]);
}

#[test]
fn forward_empty_entries() {
    let f = cat(&[&arr(2), &s(b"fwd"), &arr(0)]);
    let ev = decode(&f).unwrap();
    assert_eq!(ev.count, 0);
    assert!(ev.entries.is_empty());
}

// ---------------------------------------------------------------- PackedForward

fn payload3() -> Vec<u8> {
    cat(&[
        &entry(&et(T, 1), &rec("a", 1)),
        &entry(&et(T, 2), &rec("b", 2)),
        &entry(&uint(T as u64 + 1), &rec("c", 3)),
    ])
}

#[test]
fn packed_forward_bin_and_str_payload() {
    let p = payload3();
    for body in [bin(&p), s(&p)] {
        let f = cat(&[&arr(3), &s(b"pk"), &body, &opts(&[("size", uint(3))])]);
        let ev = decode(&f).unwrap();
        assert_eq!(ev.mode, Mode::PackedForward);
        assert_eq!(ev.count, 3);
        assert_eq!(ev.size, Some(3));
        assert_eq!(&ev.entries[..], &p[..]);
    }
    // Without an option map.
    let f = cat(&[&arr(2), &s(b"pk"), &bin(&p)]);
    let ev = decode(&f).unwrap();
    assert_eq!((ev.count, ev.size, ev.chunk), (3, None, None));
    assert_eq!(&ev.entries[..], &p[..]);
}

#[test]
fn packed_forward_canonical_payload_is_not_copied() {
    let p = payload3();
    let f = Bytes::from(cat(&[&arr(2), &s(b"pk"), &bin(&p)]));
    let lim = Limits::default();
    let sc = scan_frame(&f, &lim).unwrap().unwrap();
    let ev = sc.into_frame(f.clone(), &lim, NOW).unwrap();
    let start = f.as_ptr() as usize;
    assert_eq!(ev.entries.as_ptr() as usize, start + f.len() - p.len());
}

#[test]
fn packed_forward_ext8_and_zero_times_rewritten() {
    let r = rec("a", 1);
    let p = cat(&[
        &entry(&et(T, 1), &r),
        &entry(&et_ext8(T, 9), &r),
        &entry(&[0x00], &r),
    ]);
    let f = cat(&[&arr(2), &s(b"pk"), &bin(&p)]);
    let ev = decode(&f).unwrap();
    let want = cat(&[
        &entry(&et(T, 1), &r),
        &entry(&et(T, 9), &r),
        &entry(&NOW.to_bytes(), &r),
    ]);
    assert_eq!(ev.count, 3);
    assert_eq!(&ev.entries[..], &want[..]);
}

#[test]
fn fluent_bit_metadata_form_is_normalised() {
    let r1 = rec("a", 1);
    let r2 = rec("b", 2);
    let meta = enc(&Value::Map(vec![(Value::from("otel"), Value::from(1))]));
    // [[EventTime, {metadata}], record]
    let fb = |t: &[u8], r: &[u8]| cat(&[&[0x92, 0x92], t, &meta, r]);
    let p = cat(&[
        &entry(&et(T, 1), &r1),
        &fb(&et(T, 2), &r2),
        &fb(&et_ext8(T, 3), &r1),
        &cat(&[&[0x92, 0x92], &et(T, 4), &map(0), &r2]),
    ]);
    let f = cat(&[&arr(3), &s(b"fb"), &bin(&p), &opts(&[("size", uint(4))])]);
    let ev = decode(&f).unwrap();
    let want = cat(&[
        &entry(&et(T, 1), &r1),
        &entry(&et(T, 2), &r2),
        &entry(&et(T, 3), &r1),
        &entry(&et(T, 4), &r2),
    ]);
    assert_eq!(ev.count, 4);
    assert_eq!(&ev.entries[..], &want[..]);

    // Metadata that is not a map, or a header of the wrong length, is refused.
    for bad in [
        cat(&[&[0x92, 0x92], &et(T, 2), &[0x01], &r2]),
        cat(&[&[0x92, 0x91], &et(T, 2), &r2]),
        cat(&[&[0x92, 0x93], &et(T, 2), &map(0), &map(0), &r2]),
    ] {
        let f = cat(&[&arr(2), &s(b"fb"), &bin(&bad)]);
        assert!(decode(&f).is_err(), "{bad:02x?}");
    }
}

#[test]
fn fluent_signal_and_size_options() {
    let p = payload3();
    for sig in [0u64, 1, 2] {
        let f = cat(&[
            &arr(3),
            &s(b"fb"),
            &bin(&p),
            &opts(&[("fluent_signal", uint(sig)), ("size", uint(3))]),
        ]);
        let ev = decode(&f).unwrap();
        assert_eq!(ev.signal, Some(sig));
        assert_eq!(ev.size, Some(3));
    }
    // Large size values in every uint form.
    for v in [0u64, 200, 70_000, 5_000_000_000] {
        let f = cat(&[&arr(3), &s(b"fb"), &bin(&p), &opts(&[("size", uint(v))])]);
        assert_eq!(decode(&f).unwrap().size, Some(v));
    }
    // Unknown options are ignored.
    let f = cat(&[
        &arr(3),
        &s(b"fb"),
        &bin(&p),
        &opts(&[("x-custom", enc(&Value::from(vec![Value::from(1)])))]),
    ]);
    assert_eq!(decode(&f).unwrap().count, 3);
}

// ---------------------------------------------------------------- CompressedPackedForward

#[test]
fn compressed_gzip() {
    let p = payload3();
    let f = cat(&[
        &arr(3),
        &s(b"gz"),
        &bin(&gzip(&p)),
        &opts(&[("size", uint(3)), ("compressed", s(b"gzip"))]),
    ]);
    let ev = decode(&f).unwrap();
    assert_eq!(ev.mode, Mode::CompressedPackedForward);
    assert_eq!(ev.count, 3);
    assert_eq!(&ev.entries[..], &p[..]);
}

#[test]
fn compressed_gzip_concatenated_members() {
    // Fluentd appends one gzip member per event stream to a chunk.
    let e: Vec<Vec<u8>> = (0..4)
        .map(|i| entry(&et(T, i), &rec("m", i as i64)))
        .collect();
    let z = cat(&[&gzip(&e[0]), &gzip(&cat(&[&e[1], &e[2]])), &gzip(&e[3])]);
    let f = cat(&[
        &arr(3),
        &s(b"gz"),
        &bin(&z),
        &opts(&[("compressed", s(b"gzip"))]),
    ]);
    let ev = decode(&f).unwrap();
    assert_eq!(ev.count, 4);
    assert_eq!(&ev.entries[..], &e.concat()[..]);
}

#[test]
fn compressed_zstd() {
    let p = payload3();
    // One frame, and two concatenated frames.
    for z in [zstd(&p), cat(&[&zstd(&p[..24]), &zstd(&p[24..])])] {
        let f = cat(&[
            &arr(3),
            &s(b"zs"),
            &bin(&z),
            &opts(&[("compressed", s(b"zstd")), ("size", uint(3))]),
        ]);
        let ev = decode(&f).unwrap();
        assert_eq!(ev.mode, Mode::CompressedPackedForward);
        assert_eq!(ev.count, 3);
        assert_eq!(&ev.entries[..], &p[..]);
    }
}

#[test]
fn compressed_text_is_uncompressed() {
    let p = payload3();
    let f = cat(&[
        &arr(3),
        &s(b"tx"),
        &bin(&p),
        &opts(&[("compressed", s(b"text"))]),
    ]);
    let ev = decode(&f).unwrap();
    assert_eq!(ev.mode, Mode::PackedForward);
    assert_eq!(&ev.entries[..], &p[..]);
}

#[test]
fn compressed_payload_is_normalised_after_inflating() {
    let r = rec("z", 1);
    let p = cat(&[&entry(&et_ext8(T, 3), &r), &entry(&[0xc0], &r)]);
    let f = cat(&[
        &arr(3),
        &s(b"gz"),
        &bin(&gzip(&p)),
        &opts(&[("compressed", s(b"gzip"))]),
    ]);
    let ev = decode(&f).unwrap();
    let want = cat(&[&entry(&et(T, 3), &r), &entry(&NOW.to_bytes(), &r)]);
    assert_eq!(&ev.entries[..], &want[..]);
}

#[test]
fn corrupt_compressed_payload_is_an_error() {
    let p = payload3();
    let mut z = gzip(&p);
    let n = z.len();
    z[n - 6] ^= 0xff; // the CRC32 of the member
    for (c, body) in [("gzip", z), ("zstd", b"not zstd at all".to_vec())] {
        let f = cat(&[
            &arr(3),
            &s(b"gz"),
            &bin(&body),
            &opts(&[("compressed", s(c.as_bytes()))]),
        ]);
        assert!(
            matches!(decode(&f), Err(nagare_forward::DecodeError::Decompress(_))),
            "{c}"
        );
    }
}

#[test]
fn decompression_bomb_is_refused() {
    // 1 MiB of well-formed entries, allowed to expand to 64 KiB only.
    let one = entry(&et(T, 0), &rec(&"x".repeat(1000), 0));
    let big: Vec<u8> = one.repeat((1 << 20) / one.len() + 1);
    let lim = Limits {
        max_frame_size: 1 << 20,
        max_decompressed_size: 64 << 10,
    };
    for (c, z) in [("gzip", gzip(&big)), ("zstd", zstd(&big))] {
        let f = cat(&[
            &arr(3),
            &s(b"bomb"),
            &bin(&z),
            &opts(&[("compressed", s(c.as_bytes()))]),
        ]);
        assert!(f.len() < 64 << 10, "the compressed frame is small");
        assert_eq!(
            decode_with(&f, &lim),
            Err(nagare_forward::DecodeError::Oversized { limit: 64 << 10 }),
            "{c}"
        );
    }
    // Exactly at the limit is accepted.
    let n = (64 << 10) / one.len();
    let exact = one.repeat(n);
    let lim = Limits {
        max_frame_size: 1 << 20,
        max_decompressed_size: exact.len(),
    };
    let f = cat(&[
        &arr(3),
        &s(b"ok"),
        &bin(&gzip(&exact)),
        &opts(&[("compressed", s(b"gzip"))]),
    ]);
    assert_eq!(decode_with(&f, &lim).unwrap().count, n as u32);
}

// ---------------------------------------------------------------- chunk and tag

#[test]
fn chunk_ids_echoed_byte_for_byte() {
    // Fluentd sends Base64.encode64(16 random bytes): 24 characters plus "\n".
    let id = b"q0wz8s3RlJg9bm0Wd1yN2A==\n";
    let p = payload3();
    for raw in [s(id), bin(id), s(&[0xff, 0x00, b'\n'])] {
        let f = cat(&[
            &arr(3),
            &s(b"c"),
            &bin(&p),
            &opts(&[("size", uint(3)), ("chunk", raw.clone())]),
        ]);
        let ev = decode(&f).unwrap();
        let chunk = ev.chunk.expect("chunk");
        assert_eq!(&chunk[..], &raw[..]);
        let mut ack = Vec::new();
        encode_ack(&mut ack, &chunk);
        assert_eq!(ack, cat(&[&[0x81], &s(b"ack"), &raw]));
        let echoed = decode_ack(&ack).unwrap();
        assert_eq!(&echoed[..], &raw[raw.len() - echoed.len()..]);
    }
    // The chunk must be a string.
    let f = cat(&[&arr(3), &s(b"c"), &bin(&p), &opts(&[("chunk", uint(5))])]);
    assert!(decode(&f).is_err());
}

#[test]
fn tag_as_str_and_bin() {
    let r = rec("x", 1);
    for tag in [s(b"a.b.c"), bin(b"a.b.c")] {
        let f = cat(&[&arr(3), &tag, &et(T, 0), &r]);
        assert_eq!(decode(&f).unwrap().tag, "a.b.c");
    }
    let f = cat(&[&arr(3), &s("ログ.ü".as_bytes()), &et(T, 0), &r]);
    assert_eq!(decode(&f).unwrap().tag, "ログ.ü");
    // Not UTF-8
    let f = cat(&[&arr(3), &bin(&[0xff, 0xfe]), &et(T, 0), &r]);
    assert!(decode(&f).is_err());
    // Not a string
    let f = cat(&[&arr(3), &uint(7), &et(T, 0), &r]);
    assert!(scan_frame(&f, &Limits::default()).is_err());
}

// ---------------------------------------------------------------- streams

fn sample_frames() -> Vec<Vec<u8>> {
    let r = rec("hello", 1);
    let p = payload3();
    vec![
        cat(&[&arr(3), &s(b"m"), &et(T, 5), &r]),
        cat(&[
            &arr(4),
            &s(b"m"),
            &uint(T as u64),
            &r,
            &opts(&[("chunk", s(b"k\n"))]),
        ]),
        cat(&[&arr(2), &s(b"f"), &arr(3), &p]),
        cat(&[&arr(3), &s(b"p"), &bin(&p), &opts(&[("size", uint(3))])]),
        cat(&[&arr(3), &s(b"p"), &s(&p), &opts(&[("chunk", bin(b"idid"))])]),
        cat(&[
            &arr(3),
            &s(b"g"),
            &bin(&gzip(&p)),
            &opts(&[("compressed", s(b"gzip")), ("chunk", s(b"c"))]),
        ]),
        cat(&[
            &arr(3),
            &s(b"z"),
            &bin(&zstd(&p)),
            &opts(&[("compressed", s(b"zstd"))]),
        ]),
    ]
}

#[test]
fn incomplete_input_at_every_cut_is_none() {
    let lim = Limits::default();
    for f in sample_frames() {
        for cut in 0..f.len() {
            assert_eq!(
                scan_frame(&f[..cut], &lim).map(|o| o.map(|s| s.len)),
                Ok(None),
                "cut {cut} of {f:02x?}"
            );
            // The reader may reserve this much: more than it has, never
            // more than the frame.
            let need = nagare_forward::bytes_needed(&f[..cut]).expect("incomplete");
            assert!(
                cut < need && need <= f.len(),
                "cut {cut}: {need} of {}",
                f.len()
            );
        }
        assert_eq!(nagare_forward::bytes_needed(&f), None);
        assert_eq!(scan_frame(&f, &lim).unwrap().unwrap().len, f.len());
    }
}

/// A stream reader's way: the buffer grows a few bytes per read and each
/// scan goes on from the last one's progress. Every prefix is incomplete
/// (with a `need` past it, never past the frame), the whole frame scans as
/// it does in one piece, and the progress is reset for the next frame.
#[test]
fn a_resumed_scan_of_a_growing_buffer_finds_the_same_frame() {
    let lim = Limits::default();
    for f in sample_frames() {
        for step in [1, 3, 7] {
            let mut progress = nagare_forward::ScanProgress::default();
            let mut cut = 0;
            while cut < f.len() {
                let got = nagare_forward::scan_frame_resumed(&f[..cut], &lim, &mut progress)
                    .map(|o| o.map(|s| s.len));
                assert_eq!(got, Ok(None), "step {step}, cut {cut} of {f:02x?}");
                assert!(
                    cut < progress.need && progress.need <= f.len(),
                    "step {step}, cut {cut}: need {} of {}",
                    progress.need,
                    f.len()
                );
                cut = (cut + step).min(f.len());
            }
            let whole = scan_frame(&f, &lim).unwrap().unwrap();
            let resumed = nagare_forward::scan_frame_resumed(&f, &lim, &mut progress)
                .unwrap()
                .unwrap();
            assert_eq!(resumed.len, whole.len, "step {step}");
            let now = EventTime::new(0, 0);
            assert_eq!(
                resumed.into_frame(Bytes::from(f.clone()), &lim, now),
                whole.into_frame(Bytes::from(f.clone()), &lim, now),
                "step {step}"
            );
            assert_eq!(progress, nagare_forward::ScanProgress::default());
        }
    }
}

#[test]
fn a_stream_of_frames_decodes_in_order() {
    let frames = sample_frames();
    let stream = frames.concat();
    let got = decode_all(&stream, &Limits::default()).unwrap();
    assert_eq!(got.len(), frames.len());
    let modes: Vec<Mode> = got.iter().map(|f| f.mode).collect();
    assert_eq!(
        modes,
        [
            Mode::Message,
            Mode::Message,
            Mode::Forward,
            Mode::PackedForward,
            Mode::PackedForward,
            Mode::CompressedPackedForward,
            Mode::CompressedPackedForward
        ]
    );
    for f in &got[2..] {
        assert_eq!(&f.entries[..], &payload3()[..]);
    }
    // The scanner stops at each frame's end when the next one follows.
    let s = scan_frame(&stream, &Limits::default()).unwrap().unwrap();
    assert_eq!(s.len, frames[0].len());
}

// ---------------------------------------------------------------- limits

#[test]
fn oversized_complete_frame() {
    let p = vec![0u8; 0]; // empty payload is fine; make the tag large instead
    let big_tag = vec![b'a'; 2000];
    let f = cat(&[&arr(2), &s(&big_tag), &bin(&p)]);
    let lim = Limits {
        max_frame_size: 1000,
        max_decompressed_size: 1000,
    };
    assert_eq!(
        scan_frame(&f, &lim).map(|o| o.is_some()),
        Err(nagare_forward::DecodeError::Oversized { limit: 1000 })
    );
    // The same frame under a larger limit is fine.
    let lim2 = Limits {
        max_frame_size: f.len(),
        max_decompressed_size: 1000,
    };
    assert_eq!(scan_frame(&f, &lim2).unwrap().unwrap().len, f.len());
}

#[test]
fn oversized_while_incomplete() {
    let lim = Limits {
        max_frame_size: 1000,
        max_decompressed_size: 1000,
    };
    // A bin32 header announcing 1 GiB: refused from the header alone.
    let mut f = cat(&[&arr(2), &s(b"t"), &[0xc6], &(1u32 << 30).to_be_bytes()]);
    assert_eq!(
        scan_frame(&f, &lim).map(|o| o.is_some()),
        Err(nagare_forward::DecodeError::Oversized { limit: 1000 })
    );
    // A payload that would fit is just incomplete.
    let g = cat(&[&arr(2), &s(b"t"), &[0xc5], &500u16.to_be_bytes(), &[0; 10]]);
    assert_eq!(scan_frame(&g, &lim).map(|o| o.is_some()), Ok(false));
    // Forward entries that keep coming past the limit, each one small.
    f = cat(&[&arr(2), &s(b"t"), &[0xdd], &u32::MAX.to_be_bytes()]);
    let e = entry(&et(T, 0), &rec("x", 0));
    while f.len() <= 1000 {
        f.extend_from_slice(&e);
    }
    assert_eq!(
        scan_frame(&f, &lim).map(|o| o.is_some()),
        Err(nagare_forward::DecodeError::Oversized { limit: 1000 })
    );
    assert_eq!(scan_frame(&f[..900], &lim).map(|o| o.is_some()), Ok(false));
}

// ---------------------------------------------------------------- malformed

#[test]
fn malformed_frames_are_errors() {
    let r = rec("x", 1);
    let p = payload3();
    let lim = Limits::default();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("not an array", cat(&[&map(1), &s(b"t"), &r])),
        ("array of 1", cat(&[&arr(1), &s(b"t")])),
        (
            "array of 5",
            cat(&[&arr(5), &s(b"t"), &et(T, 0), &r, &map(0), &map(0)]),
        ),
        ("array of 0", arr(0)),
        (
            "message without record",
            cat(&[&arr(2), &s(b"t"), &et(T, 0)]),
        ),
        (
            "forward with extra",
            cat(&[&arr(4), &s(b"t"), &arr(0), &map(0), &map(0)]),
        ),
        (
            "packed with extra",
            cat(&[&arr(4), &s(b"t"), &bin(&p), &map(0), &map(0)]),
        ),
        (
            "options not a map",
            cat(&[&arr(3), &s(b"t"), &bin(&p), &uint(1)]),
        ),
        (
            "unknown compression",
            cat(&[
                &arr(3),
                &s(b"t"),
                &bin(&p),
                &opts(&[("compressed", s(b"lz4"))]),
            ]),
        ),
        (
            "compressed not a string",
            cat(&[
                &arr(3),
                &s(b"t"),
                &bin(&p),
                &opts(&[("compressed", uint(1))]),
            ]),
        ),
        ("reserved byte", vec![0xc1]),
        ("garbage", b"GET / HTTP/1.1\r\n\r\n".to_vec()),
        (
            "deep nesting",
            cat(&[
                &arr(3),
                &s(b"t"),
                &et(T, 0),
                &[0x81, 0xa1, b'a'].repeat(100),
                &[0xc0],
            ]),
        ),
    ];
    for (what, f) in cases {
        let r = scan_frame(&f, &lim).and_then(|o| match o {
            None => Ok(false),
            Some(s) => s
                .into_frame(Bytes::from(f.clone()), &lim, NOW)
                .map(|_| true),
        });
        assert!(r.is_err(), "{what}: {r:?}");
    }
}

#[test]
fn malformed_entries_are_errors() {
    let r = rec("x", 1);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("record not a map", entry(&et(T, 0), &uint(3))),
        ("record is an array", entry(&et(T, 0), &arr(0))),
        ("time is a string", entry(&s(b"now"), &r)),
        ("time is a bool", entry(&[0xc3], &r)),
        ("time is negative", entry(&[0xff], &r)),
        (
            "time is negative int32",
            entry(&[0xd2, 0xff, 0xff, 0xff, 0xff], &r),
        ),
        ("time is a map", entry(&map(0), &r)),
        (
            "ext of another type",
            cat(&[&[0x92, 0xd7, 0x01], &[0; 8], &r]),
        ),
        (
            "ext8 of 4 bytes",
            cat(&[&[0x92, 0xc7, 0x04, 0x00], &[0; 4], &r]),
        ),
        ("entry of 3", cat(&[&[0x93], &et(T, 0), &r, &r])),
        ("entry of 1", cat(&[&[0x91], &et(T, 0)])),
        ("entry not an array", r.clone()),
        ("truncated entry", entry(&et(T, 0), &r)[..8].to_vec()),
        ("lone array header", vec![0x92]),
        ("array header and time", cat(&[&[0x92], &et(T, 0)])),
    ];
    for (what, e) in cases {
        let good = entry(&et(T, 1), &r);
        let p = cat(&[&good, &e]);
        for f in [
            cat(&[&arr(2), &s(b"t"), &bin(&p)]),
            cat(&[
                &arr(3),
                &s(b"t"),
                &bin(&gzip(&p)),
                &opts(&[("compressed", s(b"gzip"))]),
            ]),
        ] {
            assert!(decode(&f).is_err(), "packed: {what}");
        }
    }
    // Message mode: record not a map, bad time.
    for (what, f) in [
        ("record", cat(&[&arr(3), &s(b"t"), &et(T, 0), &s(b"r")])),
        ("time", cat(&[&arr(3), &s(b"t"), &[0xc2], &r])),
        ("time neg", cat(&[&arr(3), &s(b"t"), &[0xe0], &r])),
    ] {
        assert!(decode(&f).is_err(), "message: {what}");
    }
}

#[test]
fn time_in_decoded_entries_matches_event_time() {
    let f = cat(&[&arr(3), &s(b"t"), &et_ext8(3, 4), &rec("a", 1)]);
    let ev = decode(&f).unwrap();
    let e = entries(&ev.entries);
    assert_eq!(as_event_time(&e[0].0), EventTime::new(3, 4));
}
