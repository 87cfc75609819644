//! Subcommands.

pub mod cat;
pub mod check;
pub mod replay;
pub mod run;

/// Exit code for a bad configuration or bad usage.
pub const EXIT_CONFIG: u8 = 2;
/// Exit code for a failure at run time.
pub const EXIT_RUNTIME: u8 = 1;

/// Exit status of a library command: errors are printed with their causes.
pub fn exit(r: anyhow::Result<()>) -> std::process::ExitCode {
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(EXIT_RUNTIME)
        }
    }
}
