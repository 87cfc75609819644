//! Subcommands.

pub mod cat;
pub mod check;
pub mod replay;
pub mod run;

/// Exit code for a bad configuration or bad usage.
pub const EXIT_CONFIG: u8 = 2;
/// Exit code for a failure at run time.
pub const EXIT_RUNTIME: u8 = 1;
