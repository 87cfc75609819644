//! Inputs that once made the decoder panic, kept as tests (see docs/fuzzing.md).

mod common;

use bytes::Bytes;
use common::*;
use nagare_forward::{normalize_entries, scan_frame, DecodeError, Limits};

/// A PackedForward payload ending in a lone array header: `normalize_entries`
/// read the byte after it (the entry's time) without a bounds check.
#[test]
fn payload_ending_in_an_array_header() {
    let good = entry(&et(1, 2), &rec("a", 1));
    for payload in [vec![0x92], cat(&[&good, &[0x92]]), vec![0xdc, 0x00, 0x02]] {
        assert_eq!(
            normalize_entries(Bytes::from(payload.clone()), NOW),
            Err(DecodeError::Malformed("value runs past its container")),
            "{payload:02x?}"
        );
        // The same inside a frame, plain and compressed.
        for f in [
            cat(&[&arr(2), &s(b"t"), &bin(&payload)]),
            cat(&[
                &arr(3),
                &s(b"t"),
                &bin(&gzip(&payload)),
                &opts(&[("compressed", s(b"gzip"))]),
            ]),
        ] {
            let sc = scan_frame(&f, &Limits::default()).unwrap().unwrap();
            let r = sc.into_frame(Bytes::from(f), &Limits::default(), NOW);
            assert!(matches!(r, Err(DecodeError::Malformed(_))), "{r:?}");
        }
    }
}
