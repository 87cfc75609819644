//! The `http` input's body decoder: arbitrary bodies as JSON, NDJSON,
//! msgpack (Fluent Bit's out_http chunks, Fluentd's runs of maps) and form
//! requests (the first byte picks the Content-Type, the second the size of
//! the pieces the body arrives in). Asserts: no panic; a body taken gives
//! well-formed entries of the count given, under a tag.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use nagare::inputs::common::http_listener::{Body, Decode};
use nagare::inputs::http::{HttpDecode, HttpInputConfig};

const TYPES: [&str; 5] = [
    "application/json",
    "application/x-ndjson",
    "application/msgpack",
    "application/x-www-form-urlencoded",
    "text/plain",
];

fuzz_target!(|data: &[u8]| {
    let [kind, size, rest @ ..] = data else {
        return;
    };
    let cfg: HttpInputConfig =
        toml::from_str("bind = \"127.0.0.1:0\"\ntag = \"t\"\ntag_key = \"tag\"").unwrap();
    let d = HttpDecode::new(&cfg).unwrap();
    let ctype = TYPES[*kind as usize % TYPES.len()];
    let (head, ()) = hyper::Request::post("/fuzz?time=1700000000")
        .header("content-type", ctype)
        .body(())
        .unwrap()
        .into_parts();
    let mut body = Body::default();
    for piece in rest.chunks(*size as usize + 1) {
        body.push(Bytes::copy_from_slice(piece));
    }
    if let Ok(batches) = d.decode(&head, body) {
        for e in &batches {
            assert!(!e.tag.is_empty());
            assert_eq!(
                nagare_core::record::entries(&e.entries).count(),
                e.count as usize
            );
        }
    }
});
