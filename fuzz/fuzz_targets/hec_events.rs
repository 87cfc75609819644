//! The `splunk_hec` input's decoders: an arbitrary body as an
//! `/services/collector/event` body (concatenated JSON objects) and as a
//! `/raw` body. Asserts: no panic; what is taken is well-formed entries of
//! the count given.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nagare::inputs::splunk_hec::{HecDecode, SplunkHecInputConfig};

fuzz_target!(|data: &[u8]| {
    let cfg: SplunkHecInputConfig = toml::from_str("bind = \"127.0.0.1:0\"").unwrap();
    let d = HecDecode::new(&cfg).unwrap();
    for e in [d.events(data), d.raw(Some("host=h&source=s"), data)]
        .into_iter()
        .flatten()
    {
        assert!(e.count > 0);
        assert_eq!(
            nagare_core::record::entries(&e.entries).count(),
            e.count as usize
        );
    }
});
