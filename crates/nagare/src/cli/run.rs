//! `nagare run [-c FILE]`

use std::path::PathBuf;
use std::process::ExitCode;

use tracing_subscriber::EnvFilter;

use crate::{config, daemon};

#[derive(clap::Args)]
pub struct RunArgs {
    /// Configuration file (TOML). Without it, the embedded default runs:
    /// forward on 127.0.0.1:24224, monitor on 127.0.0.1:24220, events to stdout.
    #[arg(short, long)]
    pub config: Option<PathBuf>,
}

pub fn main(a: RunArgs) -> ExitCode {
    let parsed = match &a.config {
        Some(p) => config::load(p),
        None => config::parse(config::DEFAULT_CONFIG, "<embedded default>"),
    };
    let cfg = match parsed {
        Ok(c) => c,
        Err(errors) => {
            for e in errors {
                eprintln!("error: {e}");
            }
            return ExitCode::from(super::EXIT_CONFIG);
        }
    };
    init_logging(cfg.system.log_level.as_deref());
    match daemon::run(cfg, a.config.clone()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The log goes to stderr already: one line, not two.
            tracing::error!("{e:#}");
            ExitCode::from(super::EXIT_RUNTIME)
        }
    }
}

/// Logs go to stderr (stdout carries events for the stdout output).
fn init_logging(level: Option<&str>) {
    // fuser warns "Unmount failed" at every shutdown: the fuse input detaches
    // its mount itself first (fuser's unmount fails while a file is open).
    let filter = EnvFilter::try_from_env("NAGARE_LOG")
        .unwrap_or_else(|_| EnvFilter::new(format!("{},fuser=error", level.unwrap_or("info"))));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
}
