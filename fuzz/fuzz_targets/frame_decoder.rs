//! Arbitrary bytes through the forward decoder as a TCP stream delivers them, and the handshake and ack decoders.
//! What it feeds and asserts: `checks::frame_decoder` (fuzz/checks.rs), which the
//! seed replay test (crates/nagare/tests/it/fuzz_seeds.rs) also runs.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::frame_decoder(data));
