//! The running pipeline and its life: building the running parts of a
//! checked config (build.rs), starting them, reloading them without loss
//! (pipeline.rs, with what a reload compares in sections.rs; the listeners
//! it hands over wait in net/handover.rs, which the inputs use too), the
//! control the monitor asks for reloads through (control.rs), draining at
//! shutdown (shutdown.rs), the signals (signals.rs) and systemd's
//! notifications (service.rs).

mod build;
mod control;
mod pipeline;
pub mod sections;
pub mod service;
mod shutdown;
pub mod signals;

pub use build::{open_buffer_with, stages};
pub use control::{Control, Outcome, Request, Summary};
pub use pipeline::Pipeline;
