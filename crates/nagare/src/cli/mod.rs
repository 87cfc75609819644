//! The `nagare` command line: its subcommands, parsed with clap.

pub mod cat;
pub mod check;
pub mod convert;
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
    Run(run::RunArgs),
    /// Ask a running nagare to reload its config (SIGHUP to the process of its pid file).
    Reload(reload::ReloadArgs),
    /// Check a configuration file and exit 0 (valid) or 2 (errors listed).
    Check(check::CheckArgs),
    /// Write the nagare TOML of a Fluentd or Fluent Bit config; exit 0 (complete), 3 (something left out: see the notes) or 2 (unreadable).
    Convert(convert::ConvertArgs),
    /// Run the [[test]] tables of a config (and of test files) through its filters and routes; exit 0, 1 (a test failed) or 2 (bad config).
    Test(test::TestArgs),
    /// List the input, filter and output types this binary has.
    Plugins(plugins::PluginsArgs),
    /// Send JSON objects read from stdin, one per line, as events (like fluent-cat).
    Cat(cat::CatArgs),
    /// Send chunk files (a file buffer's dead letters) to a forward server, with acks.
    Replay(replay::ReplayArgs),
    /// A live view of a running daemon: per plugin rates, buffers, retries and errors.
    Top(top::TopArgs),
    /// Print the events a running daemon routes with matching tags, as JSON lines.
    Tap(tap::TapArgs),
    /// Generate log lines or events at a given rate (like dummer), to a file, stdout, forward, TCP or HTTP.
    Gen(nagare_bench::gen::GenArgs),
    /// Benchmark a forward relay (nagare, Fluentd, Fluent Bit): a matrix of rates, sizes and batches.
    Bench(Box<nagare_bench::bench::BenchArgs>),
}

/// Parses the command line and runs the subcommand.
pub fn main() -> ExitCode {
    tune_allocator();
    let cli = Cli::parse();
    match cli.command {
        Command::Run(a) => run::main(a),
        Command::Reload(a) => reload::main(a),
        Command::Check(a) => check::main(a),
        Command::Test(a) => test::main(a),
        Command::Convert(a) => convert::main(a),
        Command::Plugins(a) => plugins::main(a),
        Command::Cat(a) => cat::main(a),
        Command::Replay(a) => replay::main(a),
        Command::Top(a) => top::main(a),
        Command::Tap(a) => tap::main(a),
        Command::Gen(a) => exit(nagare_bench::gen::run_gen(a)),
        Command::Bench(a) => exit(nagare_bench::bench::run_bench(*a)),
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
