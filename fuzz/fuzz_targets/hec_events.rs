//! The `splunk_hec` input's event and raw decoders.
//! What it feeds and asserts: `checks::hec_events` (fuzz/checks.rs), which the
//! seed replay test (crates/nagare/tests/it/fuzz_seeds.rs) also runs.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::hec_events(data));
