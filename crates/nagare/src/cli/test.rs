//! `nagare test -c FILE [TEST_FILE…]`: runs the `[[test]]` tables of the
//! config (and of test files beside it) through the real router and
//! filters, without sockets or outputs (see test_tables/). Exit 0 when every
//! test passes, 1 when one fails, 2 for a bad config or test file.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::test_tables::run::run_files;

#[derive(clap::Args)]
pub struct TestArgs {
    /// The configuration file (its own `[[test]]` tables run too).
    #[arg(short, long)]
    pub config: PathBuf,
    /// Files of more `[[test]]` tables, e.g. tests/*.toml.
    pub tests: Vec<PathBuf>,
}

pub fn main(a: TestArgs) -> ExitCode {
    let outcomes = match run_files(&a.config, &a.tests) {
        Ok(o) => o,
        Err(errors) => {
            for e in errors {
                eprintln!("error: {e}");
            }
            return ExitCode::from(super::EXIT_CONFIG);
        }
    };
    if outcomes.is_empty() {
        eprintln!(
            "error: {}: no [[test]] tables (in the config or the files given)",
            a.config.display()
        );
        return ExitCode::from(super::EXIT_CONFIG);
    }
    let failed = outcomes.iter().filter(|o| !o.failures.is_empty()).count();
    for o in &outcomes {
        if o.failures.is_empty() {
            println!("test {} ... ok", o.name);
        } else {
            println!("test {} ... FAILED", o.name);
            for f in &o.failures {
                println!("    {f}");
            }
        }
    }
    println!("\n{} passed, {failed} failed", outcomes.len() - failed);
    if failed > 0 {
        ExitCode::from(super::EXIT_RUNTIME)
    } else {
        ExitCode::SUCCESS
    }
}
