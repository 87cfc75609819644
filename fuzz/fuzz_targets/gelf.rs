//! The `gelf` input: UDP datagrams (plain, compressed, chunked) or a TCP stream.
//! What it feeds and asserts: `checks::gelf` (fuzz/checks.rs), which the
//! seed replay test (crates/nagare/tests/it/fuzz_seeds.rs) also runs.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::gelf(data));
