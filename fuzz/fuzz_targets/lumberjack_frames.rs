//! The `beats` input's Lumberjack v2 frame reader: arbitrary bytes as a
//! connection's frames (window sizes, JSON and key/value data frames,
//! compressed frames), with a small max_frame_size so the limits are
//! reached. Asserts: no panic; every window made ready holds well-formed
//! entries of its count.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nagare::inputs::beats::{BeatsInputConfig, Decoder, Window};

fuzz_target!(|data: &[u8]| {
    let cfg: BeatsInputConfig = toml::from_str("max_frame_size = \"64KiB\"").unwrap();
    let d = Decoder::new(&cfg).unwrap();
    let (mut w, mut ready) = (Window::default(), Vec::new());
    let _ = d.frames(data, &mut w, &mut ready, 0);
    for r in &ready {
        assert_eq!(
            nagare_core::record::entries(&r.entries).count(),
            r.count as usize
        );
    }
});
