//! `nagare check -c FILE`: builds every plugin the way `nagare run` does,
//! without opening sockets, mounts or files for writing.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::config;

#[derive(clap::Args)]
pub struct CheckArgs {
    /// The configuration file to check.
    #[arg(short, long)]
    pub config: PathBuf,
}

pub fn main(a: CheckArgs) -> ExitCode {
    match config::load(&a.config) {
        Ok(c) => {
            for w in &c.warnings {
                eprintln!("warning: {w}");
            }
            let filters = match c.filters.len() {
                0 => String::new(),
                n => format!("{n} filters, "),
            };
            let tests = match c.tests.len() {
                0 => String::new(),
                n => format!(", {n} tests (run them with nagare test)"),
            };
            println!(
                "{}: ok ({} inputs, {filters}{} outputs{tests})",
                a.config.display(),
                c.inputs.len(),
                c.outputs.len()
            );
            ExitCode::SUCCESS
        }
        Err(errors) => {
            for e in errors {
                eprintln!("error: {e}");
            }
            ExitCode::from(super::EXIT_CONFIG)
        }
    }
}
