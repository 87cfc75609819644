//! nagare, the log and event collector: the daemon and its command line as
//! a library (the binary, main.rs, only calls `cli::main`).
//!
//! Layers, each depending only on those below it (docs/architecture.md;
//! `scripts/check-layers.sh` keeps it so in CI):
//!
//! - nagare-core (its own crate): the event and batch model, plugin
//!   contracts, option units, tag patterns, metrics;
//! - `logging`, `formats`, `parsers`, `net`, `proto`, `convert`: the
//!   daemon's log, shared encoders, parsers, network code, protocol clients,
//!   and the translation of Fluentd and Fluent Bit configs into TOML text
//!   (it names plugins by their options, never imports them);
//! - `buffer`, then `router`: chunks, limits, retries; routing by tag;
//! - `inputs`, `filters`, `outputs`: one file per plugin, never importing a
//!   sibling (what they share is in `inputs/common`, `net`, `proto`, ...);
//! - `config`: parses a file and builds its plugins through the registries;
//! - `topology`, `test_tables`: the running pipeline; `nagare test`;
//! - `monitor`, then `daemon`, then `cli`.

pub mod buffer;
pub mod cli;
pub mod config;
pub mod convert;
pub mod daemon;
pub mod filters;
pub mod formats;
pub mod inputs;
pub mod logging;
pub mod monitor;
pub mod net;
pub mod outputs;
pub mod parsers;
pub mod proto;
pub mod router;
pub mod test_tables;
pub mod topology;
