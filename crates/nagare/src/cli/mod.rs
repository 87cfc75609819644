//! Subcommands.

pub mod cat;
pub mod check;
pub mod monitor_client;
pub mod plugins;
pub mod reload;
pub mod replay;
pub mod run;
pub mod tap;
pub mod test;
pub mod top;
pub mod top_table;

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

/// Runs a client command on a single-threaded runtime; on success prints its
/// summary line on stderr.
pub fn block_on<F>(task: F) -> std::process::ExitCode
where
    F: std::future::Future<Output = Result<String, String>>,
{
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|rt| rt.block_on(task));
    match result {
        Ok(summary) => {
            eprintln!("{summary}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::from(EXIT_RUNTIME)
        }
    }
}
