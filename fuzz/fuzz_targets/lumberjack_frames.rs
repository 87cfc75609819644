//! The `beats` input's Lumberjack v2 frame reader.
//! What it feeds and asserts: `checks::lumberjack_frames` (fuzz/checks.rs), which the
//! seed replay test (crates/nagare/tests/it/fuzz_seeds.rs) also runs.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::lumberjack_frames(data));
