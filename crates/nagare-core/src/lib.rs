//! nagare's core: what every other part of the daemon builds on, and that
//! depends on none of them.
//!
//! - the event and batch model: PackedForward entries and their fields
//!   walked without decoding ([`record`]), an event time's text
//!   ([`event`]), a record's JSON text ([`json`]), the closed [`chunk`] an
//!   output writes;
//! - the plugin contracts: [`plugin`] (options, build context,
//!   registration), [`filter`] and [`output`] (inputs' trait lives with the
//!   router they route through, in the daemon's inputs/mod.rs);
//! - what options are written in: [`units`] (sizes, durations),
//!   [`address`] (HOST:PORT), [`pattern`] (tag match patterns);
//! - per-plugin [`metrics`], and [`holder`] (who holds a lock file or a
//!   port).
//!
//! docs/architecture.md draws the layers above it.

pub mod address;
pub mod chunk;
pub mod event;
pub mod filter;
pub mod holder;
pub mod json;
pub mod metrics;
pub mod output;
pub mod pattern;
pub mod plugin;
pub mod record;
pub mod units;
