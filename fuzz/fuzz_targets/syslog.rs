//! The `syslog` input: datagrams or a TCP stream (octet counting or lines), each format.
//! What it feeds and asserts: `checks::syslog` (fuzz/checks.rs), which the
//! seed replay test (crates/nagare/tests/it/fuzz_seeds.rs) also runs.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::syslog(data));
