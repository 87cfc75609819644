//! The `http` input's body decoder (JSON, NDJSON, msgpack, form, text).
//! What it feeds and asserts: `checks::http_body` (fuzz/checks.rs), which the
//! seed replay test (crates/nagare/tests/it/fuzz_seeds.rs) also runs.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::http_body(data));
