//! Development front end for `nagare gen` and `nagare bench` until the
//! `nagare` CLI wires them in. `run -c FILE` is NOT the daemon: it is a byte
//! relay stand-in (forward input bind → forward output server) used only by
//! tests of `bench --config` while the daemon is being written.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "nagare-bench-dev")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// The load generator.
    Gen(nagare_bench::gen::GenArgs),
    /// The benchmark runner.
    Bench(Box<nagare_bench::bench::BenchArgs>),
    /// Stand-in SUT for tests: relays bytes from the config's forward input
    /// to its forward output server.
    Run {
        #[arg(short = 'c', long = "config")]
        config: std::path::PathBuf,
    },
}

fn main() {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Gen(a) => nagare_bench::gen::run_gen(a),
        Cmd::Bench(a) => nagare_bench::bench::run_bench(*a),
        Cmd::Run { config } => nagare_bench::bench::standin::run_relay(&config),
    };
    if let Err(e) = r {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
