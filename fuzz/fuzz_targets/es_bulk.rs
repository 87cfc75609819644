//! The `elasticsearch` input's `_bulk` decoder: arbitrary bodies, cut into
//! pieces as hyper hands them over (the first byte picks the piece size).
//! Asserts: no panic; a body taken gives well-formed entries, as many as
//! the answer's items that succeeded, and an answer that is JSON.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use nagare::inputs::common::http_listener::Body;
use nagare::inputs::elasticsearch::{ElasticsearchInputConfig, EsDecode};

fuzz_target!(|data: &[u8]| {
    let Some((&size, rest)) = data.split_first() else {
        return;
    };
    let cfg: ElasticsearchInputConfig =
        toml::from_str("bind = \"127.0.0.1:0\"\nindex_key = \"i\"").unwrap();
    let d = EsDecode::new(&cfg).unwrap();
    let mut body = Body::default();
    for piece in rest.chunks(size as usize + 1) {
        body.push(Bytes::copy_from_slice(piece));
    }
    if let Ok((events, answer)) = d.bulk(Some("idx".into()), &body) {
        let answer: serde_json::Value =
            serde_json::from_slice(&answer).expect("the answer is JSON");
        let ok = answer["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i.as_object().unwrap().values().any(|v| v["status"] == 201))
            .count();
        let mut n = 0;
        for e in &events {
            let entries = nagare_core::record::entries(&e.entries).count();
            assert_eq!(entries, e.count as usize);
            n += entries;
        }
        assert_eq!(n, ok);
    }
});
