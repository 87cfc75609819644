//! The `nagare` command line.

mod buffer;
mod cli;
mod config;
mod daemon;
mod dedup;
mod filters;
mod formats;
mod forward_io;
mod handover;
mod holder;
mod inputs;
mod kafka_conn;
mod logging;
mod monitor;
mod outputs;
mod parsers;
mod plugin;
mod redis_conn;
mod redis_resp;
mod reload;
mod router;
mod service;
mod shutdown;
mod stats;
mod tap;
mod testing;
mod thrift;
mod tls;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    /// Ask a running nagare to reload its config (SIGHUP to the process of its pid file).
    Reload(cli::reload::ReloadArgs),
    /// Check a configuration file and exit 0 (valid) or 2 (errors listed).
    Check(cli::check::CheckArgs),
    /// Run the [[test]] tables of a config (and of test files) through its filters and routes; exit 0, 1 (a test failed) or 2 (bad config).
    Test(cli::test::TestArgs),
    /// List the input, filter and output types this binary has.
    Plugins(cli::plugins::PluginsArgs),
    /// Send JSON objects read from stdin, one per line, as events (like fluent-cat).
    Cat(cli::cat::CatArgs),
    /// Send chunk files (a file buffer's dead letters) to a forward server, with acks.
    Replay(cli::replay::ReplayArgs),
    /// A live view of a running daemon: per plugin rates, buffers, retries and errors.
    Top(cli::top::TopArgs),
    /// Print the events a running daemon routes with matching tags, as JSON lines.
    Tap(cli::tap::TapArgs),
    /// Generate log lines or events at a given rate (like dummer), to a file, stdout, forward, TCP or HTTP.
    Gen(nagare_bench::gen::GenArgs),
    /// Benchmark a forward relay (nagare, Fluentd, Fluent Bit): a matrix of rates, sizes and batches.
    Bench(Box<nagare_bench::bench::BenchArgs>),
}

fn main() -> ExitCode {
    tune_allocator();
    let cli = Cli::parse();
    match cli.command {
        Command::Run(a) => cli::run::main(a),
        Command::Reload(a) => cli::reload::main(a),
        Command::Check(a) => cli::check::main(a),
        Command::Test(a) => cli::test::main(a),
        Command::Plugins(a) => cli::plugins::main(a),
        Command::Cat(a) => cli::cat::main(a),
        Command::Replay(a) => cli::replay::main(a),
        Command::Top(a) => cli::top::main(a),
        Command::Tap(a) => cli::tap::main(a),
        Command::Gen(a) => cli::exit(nagare_bench::gen::run_gen(a)),
        Command::Bench(a) => cli::exit(nagare_bench::bench::run_bench(*a)),
    }
}

/// Two glibc settings:
///
/// - Big receive buffers (a frame of large events is hundreds of KiB) would
///   be mapped and unmapped by glibc for every frame, and the page faults
///   were the top cost of relaying large events: serve them from the heap
///   and keep freed memory for reuse instead.
/// - One arena for all threads. With one per thread (glibc's default, up to
///   8 per core), a buffer's chunks are allocated by whichever worker ran the
///   input and freed by the flush worker, so each arena grows to hold a
///   buffer's worth at some moment and peak memory was 2-3 times
///   `total_limit_size` while events flowed (tail of 300 MB into a forward
///   output, 64 MiB buffer: 145 MB, 82 MB with one arena). Small
///   allocations still come from each thread's cache without the lock.
fn tune_allocator() {
    // SAFETY: mallopt only tunes the allocator; called before any threads start.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 128 << 20);
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}
