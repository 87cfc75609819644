//! The `elasticsearch` input's `_bulk` decoder.
//! What it feeds and asserts: `checks::es_bulk` (fuzz/checks.rs), which the
//! seed replay test (crates/nagare/tests/it/fuzz_seeds.rs) also runs.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::es_bulk(data));
