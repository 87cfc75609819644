//! The `nagare` command line.

mod buffer;
mod cli;
mod config;
mod daemon;
mod dedup;
mod formats;
mod inputs;
mod monitor;
mod outputs;
mod router;
mod stats;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// mimalloc keeps freed memory for reuse: the forward input's big receive
/// buffers would otherwise be mapped and unmapped per frame, and page faults
/// showed up as the top cost of relaying large events.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "nagare",
    version,
    about = "A fast log and event collector that speaks Fluentd's forward protocol"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the collector (on the embedded default configuration without -c).
    Run(cli::run::RunArgs),
    /// Check a configuration file and exit 0 (valid) or 2 (errors listed).
    Check(cli::check::CheckArgs),
    /// Send JSON objects read from stdin, one per line, as events (like fluent-cat).
    Cat(cli::cat::CatArgs),
    /// Send chunk files (a file buffer's dead letters) to a forward server, with acks.
    Replay(cli::replay::ReplayArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run(a) => cli::run::main(a),
        Command::Check(a) => cli::check::main(a),
        Command::Cat(a) => cli::cat::main(a),
        Command::Replay(a) => cli::replay::main(a),
    }
}
