//! `nagare run [-c FILE]`

use std::path::PathBuf;
use std::process::ExitCode;

use nagare_core::holder::PidLock;

use crate::{config, daemon, logging};

#[derive(clap::Args)]
pub struct RunArgs {
    /// Configuration file (TOML). Without it, the embedded default runs:
    /// forward on 127.0.0.1:24224, monitor on 127.0.0.1:24220, events to stdout.
    #[arg(short, long)]
    pub config: Option<PathBuf>,
    /// Check the configuration as `nagare check` does, then exit (0 or 2).
    #[arg(long)]
    pub dry_run: bool,
    /// Write the process id to this file, locked while nagare runs: a second
    /// nagare with the same pid file refuses to start, naming the first.
    /// Removed at a clean exit.
    #[arg(long)]
    pub pid_file: Option<PathBuf>,
}

pub fn main(a: RunArgs) -> ExitCode {
    if a.dry_run {
        return match a.config {
            Some(config) => super::check::main(super::check::CheckArgs { config }),
            None => {
                println!("<embedded default>: ok");
                ExitCode::SUCCESS
            }
        };
    }
    // The text is kept: a reload compares the file's sections with it. A
    // Fluentd or Fluent Bit config is converted (its notes printed first).
    let (text, file) = match &a.config {
        Some(p) => match config::read_source(p) {
            Ok(s) => {
                for n in &s.notes {
                    eprintln!("note: {n}");
                }
                (s.text, s.name)
            }
            Err(errors) => {
                for e in errors {
                    eprintln!("error: {e}");
                }
                return ExitCode::from(super::EXIT_CONFIG);
            }
        },
        None => (
            config::DEFAULT_CONFIG.to_string(),
            "<embedded default>".to_string(),
        ),
    };
    let cfg = match config::parse(&text, &file) {
        Ok(c) => c,
        Err(errors) => {
            for e in errors {
                eprintln!("error: {e}");
            }
            return ExitCode::from(super::EXIT_CONFIG);
        }
    };
    let log_file = cfg.system.log_file.as_deref().map(std::path::Path::new);
    if let Err(e) = logging::init(
        cfg.system.log_level.as_deref(),
        cfg.system.log_format,
        log_file,
    ) {
        eprintln!("error: {e}");
        return ExitCode::from(super::EXIT_RUNTIME);
    }
    let pid_lock = match &a.pid_file {
        Some(path) => match PidLock::acquire(path) {
            Ok(lock) => Some(lock),
            Err(e) => {
                tracing::error!("pid file {}: {e}", path.display());
                return ExitCode::from(super::EXIT_RUNTIME);
            }
        },
        None => None,
    };
    let result = daemon::run(cfg, text, a.config.clone());
    if let (Some(path), Some(lock)) = (&a.pid_file, pid_lock) {
        // Removed while still locked: no other process can have taken it.
        let _ = std::fs::remove_file(path);
        drop(lock);
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The log goes to stderr already: one line, not two.
            tracing::error!("{e:#}");
            ExitCode::from(super::EXIT_RUNTIME)
        }
    }
}
