//! `nagare bench`: runs a matrix (target events/s × bytes/event ×
//! events/frame) against one or more systems, verifies every run by
//! sequence number at a built-in sink, samples the system's CPU and RSS, and
//! writes a report (Markdown, CSV, JSON, SVG plots, and PNG plots with the
//! `png` feature).
//!
//! Systems:
//! - `direct` (`--baseline`, or when nothing else is given): sender → sink.
//! - `--target HOST:PORT`: a running forward server that forwards to the sink
//!   at `--sink` (`--target-pid` to sample it).
//! - `--config FILE`: starts `nagare run -c FILE`; ports come from the file.
//! - `--compare NAME=COMMAND` (repeatable): starts each command in turn
//!   (`{sut_port}`/`{sink_port}` are filled in; `NAME=config:FILE` runs nagare
//!   with that config), one after another in one run, so ratios are fair.
//! - `--file-config FILE`: the file-transfer case through a `tail` input.

pub mod report;
pub mod sampler;
pub mod sink;
pub mod standin;
pub mod sut;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::gen::{self, parse_duration, GenPlan, LineGen, TargetSpec};
use report::Row;
use sampler::Sampler;
use sink::Sink;
use sut::{read_config_ports, Sut};

/// `nagare bench` options.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// Send to this running forward server (nagare, Fluentd, Fluent Bit…); it
    /// must forward to the built-in sink at --sink.
    #[arg(long, value_name = "HOST:PORT")]
    pub target: Option<String>,
    /// Name of the --target system in the report.
    #[arg(long, value_name = "NAME", default_value = "target")]
    pub target_name: String,
    /// PID of the --target process, to sample its CPU and RSS.
    #[arg(long, value_name = "PID")]
    pub target_pid: Option<u32>,
    /// Where the built-in sink listens for --target.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:24225")]
    pub sink: String,
    /// Drive this nagare config end to end: starts `nagare run -c FILE`,
    /// sends to its first forward input, and listens as its forward output's server.
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Name of the --config system in the report.
    #[arg(long, value_name = "NAME", default_value = "nagare")]
    pub config_name: String,
    /// The nagare binary for --config and `config:` compare entries (default: this program).
    #[arg(long, value_name = "PATH")]
    pub nagare_bin: Option<PathBuf>,
    /// Also benchmark this system: NAME=COMMAND, run with `sh -c` in its own
    /// process group; `{sut_port}` and `{sink_port}` in COMMAND (and the env
    /// NAGARE_BENCH_SUT_PORT, NAGARE_BENCH_SINK_PORT) give its ports.
    /// NAME=config:FILE runs the nagare binary with that config. Repeatable.
    #[arg(long, value_name = "NAME=COMMAND")]
    pub compare: Vec<String>,
    /// Add the sender → sink run without any collector ("direct").
    #[arg(long)]
    pub baseline: bool,
    /// Target events/s, comma-separated; 0 = as fast as possible.
    #[arg(long, value_delimiter = ',', default_value = "10000,100000,0")]
    pub rates: Vec<f64>,
    /// Bytes per event (the `message` value), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "100,1000")]
    pub sizes: Vec<usize>,
    /// Events per frame, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "100")]
    pub batches: Vec<usize>,
    /// Measurement window of each run.
    #[arg(long, value_parser = parse_duration, default_value = "5s")]
    pub duration: Duration,
    /// Sending before the window opens.
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    pub warmup: Duration,
    /// After sending, stop waiting when the sink was idle this long.
    #[arg(long, value_parser = parse_duration, default_value = "2s")]
    pub drain_idle: Duration,
    /// After sending, wait at most this long for the rest.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    pub drain_max: Duration,
    /// Sender connections (threads).
    #[arg(long, default_value_t = 1)]
    pub conns: usize,
    /// Ask for an ack per frame and wait for it.
    #[arg(long)]
    pub ack: bool,
    /// How long a started system may take to listen.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    pub ready_timeout: Duration,
    /// Port the --compare commands listen on (default: a free port).
    #[arg(long)]
    pub sut_port: Option<u16>,
    /// Port the sink listens on for --compare commands (default: a free port).
    #[arg(long)]
    pub sink_port: Option<u16>,
    /// The file-transfer case: a nagare config with a `tail` input and a
    /// forward output (PENDING: needs the tail input of the daemon).
    #[arg(long, value_name = "FILE")]
    pub file_config: Option<PathBuf>,
    /// Line sizes of the file-transfer case.
    #[arg(long, value_delimiter = ',', default_value = "10,1024,4096")]
    pub file_sizes: Vec<usize>,
    /// Lines/s written in the file-transfer case (0 = as fast as possible).
    #[arg(long, default_value_t = 50_000.0)]
    pub file_rate: f64,
    /// Report folder.
    #[arg(
        short = 'o',
        long = "out",
        value_name = "DIR",
        default_value = "bench-report"
    )]
    pub out: PathBuf,
    /// Report title.
    #[arg(long, default_value = "nagare bench")]
    pub title: String,
    /// SVG plots only (the default in a build without the `png` feature).
    #[arg(long)]
    pub no_png: bool,
    /// Run nothing: write the report (into --out) from an earlier results.json.
    #[arg(long, value_name = "FILE")]
    pub from_json: Option<PathBuf>,
}

/// A system under test.
#[derive(Debug, Clone)]
pub enum System {
    Direct,
    Target {
        name: String,
        addr: String,
        sink: String,
        pid: Option<u32>,
    },
    Config {
        name: String,
        path: PathBuf,
    },
    Command {
        name: String,
        command: String,
    },
    Tail {
        name: String,
        path: PathBuf,
    },
}

impl System {
    pub fn name(&self) -> &str {
        match self {
            System::Direct => "direct",
            System::Target { name, .. }
            | System::Config { name, .. }
            | System::Command { name, .. }
            | System::Tail { name, .. } => name,
        }
    }
}

/// Set by SIGINT/SIGTERM during `run_bench`: the run stops and the systems
/// it started are stopped with it.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

fn install_signal_handlers() {
    let h = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, h);
        libc::signal(libc::SIGTERM, h);
    }
}

fn check_interrupted() -> Result<()> {
    if INTERRUPTED.load(Ordering::Relaxed) {
        bail!("interrupted");
    }
    Ok(())
}

/// A system made ready: where to send, the sink, and the process if local.
struct Live {
    send_to: String,
    sink: Sink,
    sut: Option<Sut>,
    sampler: Option<Sampler>,
    tail_path: Option<PathBuf>,
}

fn nagare_bin(args: &BenchArgs) -> Result<PathBuf> {
    match &args.nagare_bin {
        Some(p) => Ok(p.clone()),
        None => std::env::current_exe().context("finding the current executable"),
    }
}

fn start_config(name: &str, path: &Path, args: &BenchArgs, tail: bool) -> Result<Live> {
    let ports = read_config_ports(path)?;
    let out = ports.output.clone().ok_or_else(|| {
        anyhow!(
            "{}: bench needs a forward output ([[output]] type = \"forward\")",
            path.display()
        )
    })?;
    let sink = Sink::start(&out, None)?;
    std::fs::create_dir_all(&args.out)?;
    let log = args.out.join(format!("{}.log", file_safe(name)));
    let bin = nagare_bin(args)?;
    let mut sut = Sut::start(
        name,
        &bin.to_string_lossy(),
        &[
            "run".into(),
            "-c".into(),
            path.to_string_lossy().into_owned(),
        ],
        &[],
        &log,
    )?;
    let send_to = if tail {
        // A tail-only config has no port to wait for: give it a moment.
        std::thread::sleep(Duration::from_millis(500));
        sut.check_alive()?;
        String::new()
    } else {
        let input = ports.input.clone().ok_or_else(|| {
            anyhow!(
                "{}: bench needs a forward input ([[input]] type = \"forward\")",
                path.display()
            )
        })?;
        let input = input.replace("0.0.0.0", "127.0.0.1");
        sut.wait_listening(&input, args.ready_timeout)?;
        input
    };
    let sampler = Some(Sampler::start(sut.pid, Duration::from_millis(200)));
    Ok(Live {
        send_to,
        sink,
        sampler,
        sut: Some(sut),
        tail_path: ports.tail_path,
    })
}

fn file_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn start_system(sys: &System, args: &BenchArgs) -> Result<Live> {
    Ok(match sys {
        System::Direct => {
            let sink = Sink::start("127.0.0.1:0", None)?;
            Live {
                send_to: sink.addr().to_string(),
                sink,
                sut: None,
                sampler: None,
                tail_path: None,
            }
        }
        System::Target {
            addr, sink, pid, ..
        } => Live {
            send_to: addr.clone(),
            sink: Sink::start(sink, None)?,
            sut: None,
            sampler: pid.map(|p| Sampler::start(p, Duration::from_millis(200))),
            tail_path: None,
        },
        System::Config { name, path } => start_config(name, path, args, false)?,
        System::Tail { name, path } => start_config(name, path, args, true)?,
        System::Command { name, command } => {
            if let Some(f) = command.strip_prefix("config:") {
                return start_config(name, &PathBuf::from(f.trim()), args, false);
            }
            let sut_port = match args.sut_port {
                Some(p) => p,
                None => sut::free_port()?,
            };
            let sink_port = match args.sink_port {
                Some(p) => p,
                None => sut::free_port()?,
            };
            let sink = Sink::start(&format!("127.0.0.1:{sink_port}"), None)?;
            let cmd = command
                .replace("{sut_port}", &sut_port.to_string())
                .replace("{sink_port}", &sink_port.to_string());
            std::fs::create_dir_all(&args.out)?;
            let log = args.out.join(format!("{}.log", file_safe(name)));
            let mut sut = Sut::start(
                name,
                "/bin/sh",
                &["-c".into(), cmd],
                &[
                    ("NAGARE_BENCH_SUT_PORT".into(), sut_port.to_string()),
                    ("NAGARE_BENCH_SINK_PORT".into(), sink_port.to_string()),
                ],
                &log,
            )?;
            let send_to = format!("127.0.0.1:{sut_port}");
            sut.wait_listening(&send_to, args.ready_timeout)?;
            Live {
                send_to,
                sink,
                sampler: Some(Sampler::start(sut.pid, Duration::from_millis(200))),
                sut: Some(sut),
                tail_path: None,
            }
        }
    })
}

/// The `message` of a bench event: `size` printable ASCII bytes.
pub fn payload(size: usize) -> Vec<u8> {
    (0..size).map(|i| b'a' + (i % 26) as u8).collect()
}

/// One cell's settings.
#[derive(Debug, Clone, Copy)]
pub struct Cell {
    pub rate: f64,
    pub size: usize,
    pub batch: usize,
}

/// Measures one forward run against a ready system.
fn run_forward_cell(
    sys: &str,
    live: &mut Live,
    tag: &str,
    cell: Cell,
    args: &BenchArgs,
) -> Result<Row> {
    let counters = live.sink.begin(Some(tag));
    let plan = GenPlan {
        gen: LineGen::message(&payload(cell.size)),
        target: TargetSpec::Forward {
            addr: gen::Endpoint::parse(&live.send_to)?,
            tag: tag.to_owned(),
            ack: args.ack,
        },
        rate: cell.rate,
        workers: args.conns.max(1),
        count: None,
        duration: Some(args.warmup + args.duration),
        batch: cell.batch,
        progress: false,
    };
    measure(sys, "forward", live, &counters, plan, cell, args)
}

fn measure(
    sys: &str,
    case: &str,
    live: &mut Live,
    counters: &Arc<sink::RunCounters>,
    plan: GenPlan,
    cell: Cell,
    args: &BenchArgs,
) -> Result<Row> {
    if let Some(s) = &live.sampler {
        s.reset_peak();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = counters.start;
    let sender = {
        let stop = stop.clone();
        std::thread::spawn(move || gen::run_plan(&plan, Some(stop)))
    };
    let sleep_until = |t: Instant| {
        while Instant::now() < t {
            if INTERRUPTED.load(Ordering::Relaxed) {
                stop.store(true, Ordering::Relaxed);
                return;
            }
            std::thread::sleep((t - Instant::now()).min(Duration::from_millis(50)));
        }
    };
    sleep_until(t0 + args.warmup);
    let cpu0 = live.sampler.as_ref().map(|s| s.now().cpu_s);
    sleep_until(t0 + args.warmup + args.duration);
    let cpu1 = live.sampler.as_ref().map(|s| s.now().cpu_s);
    let stats = sender
        .join()
        .map_err(|_| anyhow!("sender panicked"))?
        .with_context(|| format!("{sys}: sending"))?;
    check_interrupted()?;
    let send_end = Instant::now();
    // Drain: until everything arrived, the sink went idle, or the cap.
    loop {
        check_interrupted()?;
        if let Some(sut) = &mut live.sut {
            sut.check_alive()?;
        }
        if counters.unique() + counters.no_seq.load(Ordering::Relaxed) >= stats.lines {
            break;
        }
        let idle_since = counters.last_event().unwrap_or(send_end).max(send_end);
        if idle_since.elapsed() >= args.drain_idle || send_end.elapsed() >= args.drain_max {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let v = counters.verify(stats.lines);
    let window = counters.events_between(args.warmup, args.warmup + args.duration);
    let secs = args.duration.as_secs_f64();
    let achieved = window as f64 / secs;
    let drain_s = counters
        .last_event()
        .map(|l| l.saturating_duration_since(send_end).as_secs_f64())
        .unwrap_or(0.0);
    let calls = if cell.batch > 0 {
        stats.lines as f64 / cell.batch as f64
    } else {
        0.0
    };
    let row = Row {
        system: sys.to_owned(),
        case: case.to_owned(),
        target_rate: cell.rate,
        bytes_per_msg: cell.size,
        msgs_per_call: cell.batch,
        calls_per_s: calls / stats.seconds.max(1e-9),
        sent: stats.lines,
        achieved_msgs_per_s: achieved,
        achieved_mbps: achieved * cell.size as f64 * 8.0 / 1e6,
        received: v.received,
        lost: v.missing,
        duplicates: v.duplicates,
        sut_cores: cpu0.zip(cpu1).map(|(a, b)| (b - a) / secs),
        sut_peak_rss_mb: live.sampler.as_ref().map(|s| s.peak_rss() as f64 / 1e6),
        drain_s,
        ok: v.clean() && v.received > 0,
    };
    eprintln!(
        "bench: {sys:<12} {case:<7} rate {:>8} size {:>5} batch {:>4}: sent {:>9} achieved {:>9.0} msg/s {:>8.2} Mbps lost {} dup {}{}",
        if cell.rate == 0.0 { "max".into() } else { format!("{:.0}", cell.rate) },
        cell.size,
        cell.batch,
        stats.lines,
        row.achieved_msgs_per_s,
        row.achieved_mbps,
        row.lost,
        row.duplicates,
        if v.errors > 0 || v.no_seq > 0 || v.unexpected > 0 {
            format!(" errors {} no_seq {} unexpected {}", v.errors, v.no_seq, v.unexpected)
        } else {
            String::new()
        }
    );
    Ok(row)
}

/// The file-transfer case for one line size: lines `%010d xxx…` appended to
/// the tail input's file at `file_rate`, counted at the sink.
fn run_tail_cell(sys: &str, live: &mut Live, size: usize, args: &BenchArgs) -> Result<Row> {
    if size < 10 {
        bail!("file-transfer line sizes must be at least 10 bytes (the seq takes 10)");
    }
    let path = live
        .tail_path
        .clone()
        .ok_or_else(|| anyhow!("the file config has no tail input path"))?;
    let counters = live.sink.begin(None);
    let plan = GenPlan {
        gen: tail_line_gen(size)?,
        target: TargetSpec::File { path, fsync: false },
        rate: args.file_rate,
        workers: 1,
        count: None,
        duration: Some(args.warmup + args.duration),
        batch: 1,
        progress: false,
    };
    let cell = Cell {
        rate: args.file_rate,
        size,
        batch: 0,
    };
    measure(sys, "tail", live, &counters, plan, cell, args)
}

/// Lines of exactly `size` bytes (newline excluded): a 10-digit seq, then
/// a space and filler when there is room.
pub fn tail_line_gen(size: usize) -> Result<LineGen> {
    let mut specs = vec![gen::FieldSpec {
        name: "seq".into(),
        kind: "integer".into(),
        countup: true,
        format: Some("%010d".into()),
        ..Default::default()
    }];
    if size > 11 {
        specs.push(gen::FieldSpec {
            name: "pad".into(),
            kind: "string".into(),
            value: Some(toml::Value::String(
                String::from_utf8(payload(size - 11)).unwrap(),
            )),
            ..Default::default()
        });
    }
    LineGen::new(&specs, |_| Ok(gen::Layout::Delimited(b" ".to_vec())))
}

/// The systems the arguments name, in order.
pub fn systems(args: &BenchArgs) -> Result<Vec<System>> {
    let mut v = Vec::new();
    if args.baseline {
        v.push(System::Direct);
    }
    if let Some(t) = &args.target {
        v.push(System::Target {
            name: args.target_name.clone(),
            addr: t.clone(),
            sink: args.sink.clone(),
            pid: args.target_pid,
        });
    }
    if let Some(c) = &args.config {
        v.push(System::Config {
            name: args.config_name.clone(),
            path: c.clone(),
        });
    }
    for c in &args.compare {
        let (name, cmd) = c
            .split_once('=')
            .ok_or_else(|| anyhow!("--compare {c:?}: expected NAME=COMMAND"))?;
        if name.is_empty() || cmd.trim().is_empty() {
            bail!("--compare {c:?}: expected NAME=COMMAND");
        }
        v.push(System::Command {
            name: name.to_owned(),
            command: cmd.to_owned(),
        });
    }
    if let Some(f) = &args.file_config {
        v.push(System::Tail {
            name: "nagare (tail)".into(),
            path: f.clone(),
        });
    }
    if v.is_empty() {
        v.push(System::Direct);
    }
    let mut names: Vec<&str> = v.iter().map(System::name).collect();
    names.sort();
    if names.windows(2).any(|w| w[0] == w[1]) {
        bail!("two systems share a name: {names:?}");
    }
    Ok(v)
}

/// Runs every system's matrix; returns the rows.
pub fn run_matrix(args: &BenchArgs) -> Result<Vec<Row>> {
    if args.rates.iter().any(|r| !(*r >= 0.0 && r.is_finite())) {
        bail!("--rates must be 0 or more");
    }
    if args.sizes.is_empty() || args.batches.is_empty() || args.rates.is_empty() {
        bail!("--rates, --sizes and --batches need at least one value each");
    }
    if args.batches.contains(&0) {
        bail!("--batches must be at least 1");
    }
    let mut rows = Vec::new();
    for (si, sys) in systems(args)?.iter().enumerate() {
        eprintln!("bench: starting {}", sys.name());
        let mut live =
            start_system(sys, args).with_context(|| format!("starting {}", sys.name()))?;
        let mut run = 0;
        if let System::Tail { .. } = sys {
            for &size in &args.file_sizes {
                rows.push(run_tail_cell(sys.name(), &mut live, size, args)?);
            }
        } else {
            for &rate in &args.rates {
                for &size in &args.sizes {
                    for &batch in &args.batches {
                        let tag = format!("bench.s{si}.r{run}");
                        run += 1;
                        let cell = Cell { rate, size, batch };
                        rows.push(run_forward_cell(sys.name(), &mut live, &tag, cell, args)?);
                    }
                }
            }
        }
        if let Some(sut) = live.sut.take() {
            let how = sut.stop(Duration::from_secs(10));
            eprintln!("bench: stopped {} ({how})", sys.name());
        }
        live.sink.stop();
    }
    Ok(rows)
}

/// `nagare bench`.
pub fn run_bench(args: BenchArgs) -> Result<()> {
    install_signal_handlers();
    let rows = match &args.from_json {
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            serde_json::from_str::<Vec<Row>>(&text)
                .with_context(|| format!("{}: not a results.json", p.display()))?
        }
        None => run_matrix(&args)?,
    };
    let command = std::env::args()
        .map(|a| if a.contains(' ') { format!("'{a}'") } else { a })
        .collect::<Vec<_>>()
        .join(" ");
    let mut notes = vec![format!(
        "Each run: {}s warmup, then a {}s measurement window; {} sender connection(s){}.",
        args.warmup.as_secs_f64(),
        args.duration.as_secs_f64(),
        args.conns,
        if args.ack { ", ack per frame" } else { "" }
    )];
    for s in systems(&args)? {
        notes.push(match s {
            System::Direct => {
                "`direct`: sender → built-in sink, no collector (the baseline).".into()
            }
            System::Target {
                name, addr, sink, ..
            } => {
                format!("`{name}`: forward server at {addr}, forwarding to the sink at {sink}.")
            }
            System::Config { name, path } => format!(
                "`{name}`: `{} run -c {}`.",
                nagare_bin(&args)?.display(),
                path.display()
            ),
            System::Command { name, command } => format!("`{name}`: `{command}`."),
            System::Tail { name, path } => format!(
                "`{name}`: file-transfer case through the tail input of `{}`.",
                path.display()
            ),
        });
    }
    if !args.no_png && !report::PNG {
        eprintln!("bench: SVG plots only: this nagare was built without the `png` feature");
    }
    let files = report::write_report(
        &args.out,
        &args.title,
        &command,
        &notes,
        &rows,
        !args.no_png && report::PNG,
    )?;
    println!("{}", report::markdown_table(&rows));
    for f in files {
        eprintln!("bench: wrote {}", f.display());
    }
    if rows.iter().any(|r| !r.ok) {
        bail!("some runs lost or duplicated events (see the report)");
    }
    Ok(())
}
