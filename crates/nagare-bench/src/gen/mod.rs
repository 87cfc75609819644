//! `nagare gen`: a fast dummy log and event generator.
//!
//! A config file (TOML) and/or flags describe the lines (fields, layout, a
//! fixed message or a file to replay), the pace (`rate`, `workers`,
//! `count`/`duration`) and the target. Each worker thread owns a line
//! generator and a reusable buffer; line numbers come from one shared
//! counter in blocks, so `countup` fields and forward `seq` values are unique
//! and contiguous across workers.

pub mod fields;
pub mod format;
pub mod rate;
pub mod targets;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;

pub use fields::{FieldGen, FieldSpec, Rng};
pub use format::{Layout, LineGen};
pub use rate::RateLimiter;
pub use targets::{Endpoint, TargetSpec};

/// Parses `10s`, `1m30s`, `500ms`, or plain seconds (`2.5`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    if let Ok(secs) = s.parse::<f64>() {
        if secs >= 0.0 && secs.is_finite() {
            return Ok(Duration::from_secs_f64(secs));
        }
    }
    humantime::parse_duration(s).map_err(|e| format!("{s:?}: {e}"))
}

/// `nagare gen` flags; each overrides the config file.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct GenArgs {
    /// Config file (TOML) with fields, layout and target.
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Lines (events) per second over all workers; 0 = as fast as possible.
    #[arg(long, value_name = "N")]
    pub rate: Option<f64>,
    /// Worker threads.
    #[arg(long, value_name = "N")]
    pub workers: Option<usize>,
    /// Stop after this many lines.
    #[arg(long, value_name = "N", conflicts_with = "duration")]
    pub count: Option<u64>,
    /// Stop after this long (`30s`, `5m`, `1h`).
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Append lines to this file.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["stdout", "forward"])]
    pub output: Option<PathBuf>,
    /// Write lines to standard output.
    #[arg(long, conflicts_with = "forward")]
    pub stdout: bool,
    /// Send events with the forward protocol to HOST:PORT (or unix:/PATH).
    #[arg(long, value_name = "HOST:PORT")]
    pub forward: Option<String>,
    /// Write this fixed text on every line (no fields).
    #[arg(long, value_name = "TEXT")]
    pub message: Option<String>,
}

/// The config file.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct GenFile {
    /// Append lines to this file.
    pub output: Option<PathBuf>,
    /// Write lines to standard output.
    #[serde(default)]
    pub stdout: bool,
    /// Forward protocol target, `HOST:PORT` or `unix:/PATH`.
    pub forward: Option<String>,
    /// Raw TCP target: newline-terminated lines to `HOST:PORT`.
    pub tcp: Option<String>,
    /// HTTP target: `POST` JSON lines to `http://HOST:PORT/PATH`.
    pub http: Option<String>,
    pub rate: Option<f64>,
    pub workers: Option<usize>,
    pub count: Option<u64>,
    /// `"30s"`, `"5m"`.
    pub duration: Option<String>,
    /// Between fields (labeled and delimited layouts). Default tab.
    pub delimiter: Option<String>,
    /// `label:value` pairs (LTSV). Default true.
    pub labeled: Option<bool>,
    /// `ltsv`, `delimited`, `json` or `template`. Default from `labeled`.
    pub format: Option<String>,
    /// For `format = "template"`: text with `{field}` placeholders.
    pub template: Option<String>,
    /// A fixed line instead of fields.
    pub message: Option<String>,
    /// Replay this file's lines in rotation instead of fields.
    pub input: Option<PathBuf>,
    /// File target: fsync after each write.
    #[serde(default)]
    pub fsync: bool,
    /// Forward: events per frame; HTTP: lines per request. Default 500.
    pub batch: Option<usize>,
    /// Forward: request an ack for each frame and wait for it.
    #[serde(default)]
    pub ack: bool,
    /// Forward: the tag. Default `gen.load`.
    pub tag: Option<String>,
    #[serde(default)]
    pub field: Vec<FieldSpec>,
}

impl GenFile {
    pub fn load(path: &Path) -> Result<GenFile> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        toml::from_str(&text).map_err(|e| anyhow!("{}: {e}", path.display()))
    }
}

/// Everything a run needs, resolved.
#[derive(Debug, Clone)]
pub struct GenPlan {
    pub gen: LineGen,
    pub target: TargetSpec,
    /// Lines per second over all workers; 0 = unlimited.
    pub rate: f64,
    pub workers: usize,
    pub count: Option<u64>,
    pub duration: Option<Duration>,
    /// Lines per frame (forward) or request (HTTP).
    pub batch: usize,
    /// Print a progress line on stderr every second.
    pub progress: bool,
}

/// The default line when nothing else is given.
pub const DEFAULT_MESSAGE: &str = "nagare gen: a dummy log line";

impl GenPlan {
    /// Merges the file (if any) and the flags; flags win.
    pub fn from_args(args: &GenArgs) -> Result<GenPlan> {
        let file = match &args.config {
            Some(p) => GenFile::load(p)?,
            None => GenFile::default(),
        };
        let mut file = file;
        if let Some(o) = &args.output {
            file.output = Some(o.clone());
            (file.stdout, file.forward, file.tcp, file.http) = (false, None, None, None);
        }
        if args.stdout {
            file.stdout = true;
            (file.output, file.forward, file.tcp, file.http) = (None, None, None, None);
        }
        if let Some(f) = &args.forward {
            file.forward = Some(f.clone());
            file.stdout = false;
            (file.output, file.tcp, file.http) = (None, None, None);
        }
        if let Some(m) = &args.message {
            file.message = Some(m.clone());
            file.input = None;
        }
        if args.rate.is_some() {
            file.rate = args.rate;
        }
        if args.workers.is_some() {
            file.workers = args.workers;
        }
        let mut duration = match &file.duration {
            Some(d) => Some(parse_duration(d).map_err(|e| anyhow!("duration: {e}"))?),
            None => None,
        };
        let mut count = file.count;
        if args.count.is_some() {
            count = args.count;
            duration = None;
        }
        if args.duration.is_some() {
            duration = args.duration;
            count = None;
        }
        let progress = std::io::stderr().is_terminal();
        Self::from_file(file, count, duration, progress)
    }

    /// Builds a plan from a parsed file (count/duration already resolved).
    pub fn from_file(
        file: GenFile,
        count: Option<u64>,
        duration: Option<Duration>,
        progress: bool,
    ) -> Result<GenPlan> {
        let targets = [
            file.output.is_some(),
            file.stdout,
            file.forward.is_some(),
            file.tcp.is_some(),
            file.http.is_some(),
        ];
        if targets.iter().filter(|t| **t).count() > 1 {
            bail!("give one target: output, stdout, forward, tcp or http");
        }
        let target = if let Some(p) = file.output {
            TargetSpec::File {
                path: p,
                fsync: file.fsync,
            }
        } else if let Some(f) = file.forward {
            TargetSpec::Forward {
                addr: Endpoint::parse(&f)?,
                tag: file.tag.unwrap_or_else(|| "gen.load".into()),
                ack: file.ack,
            }
        } else if let Some(t) = file.tcp {
            TargetSpec::Tcp(t)
        } else if let Some(h) = file.http {
            TargetSpec::http(&h)?
        } else {
            TargetSpec::Stdout
        };
        let delim = file.delimiter.unwrap_or_else(|| "\t".into()).into_bytes();
        let labeled = file.labeled.unwrap_or(true);
        let sources = [
            file.message.is_some(),
            file.input.is_some(),
            !file.field.is_empty(),
        ];
        if sources.iter().filter(|s| **s).count() > 1 {
            bail!("give one of `message`, `input` or `[[field]]`");
        }
        let gen = if let Some(m) = &file.message {
            LineGen::message(m.as_bytes())
        } else if let Some(p) = &file.input {
            let text = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
            let lines: Vec<Vec<u8>> = text
                .split(|c| *c == b'\n')
                .map(|l| l.strip_suffix(b"\r").unwrap_or(l).to_vec())
                .filter(|l| !l.is_empty())
                .collect();
            if lines.is_empty() {
                bail!("{} has no lines to replay", p.display());
            }
            LineGen::new(&[], |_| Ok(Layout::Input(lines)))?
        } else if file.field.is_empty() {
            LineGen::message(DEFAULT_MESSAGE.as_bytes())
        } else {
            let fmt = file.format.clone();
            let template = file.template.clone();
            LineGen::new(&file.field, |fields| {
                Ok(match fmt.as_deref() {
                    None if template.is_some() => Layout::Template(format::parse_template(
                        template.as_deref().unwrap(),
                        fields,
                    )?),
                    None if labeled => Layout::Labeled(delim),
                    None => Layout::Delimited(delim),
                    Some("ltsv") | Some("labeled") => Layout::Labeled(delim),
                    Some("delimited") => Layout::Delimited(delim),
                    Some("json") => Layout::Json,
                    Some("template") => Layout::Template(format::parse_template(
                        template
                            .as_deref()
                            .ok_or_else(|| anyhow!("format = \"template\" needs `template`"))?,
                        fields,
                    )?),
                    Some(o) => bail!("unknown format {o:?} (ltsv, delimited, json, template)"),
                })
            })?
        };
        let rate = file.rate.unwrap_or(0.0);
        if !(rate >= 0.0 && rate.is_finite()) {
            bail!("rate must be 0 or more");
        }
        let workers = file.workers.unwrap_or(1);
        if workers == 0 {
            bail!("workers must be at least 1");
        }
        let batch = file.batch.unwrap_or(500);
        if batch == 0 {
            bail!("batch must be at least 1");
        }
        Ok(GenPlan {
            gen,
            target,
            rate,
            workers,
            count,
            duration,
            batch,
            progress,
        })
    }
}

/// What a run did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GenStats {
    pub lines: u64,
    /// Bytes written to the target (wire bytes for forward and HTTP).
    pub bytes: u64,
    pub seconds: f64,
}

impl GenStats {
    pub fn lines_per_s(&self) -> f64 {
        if self.seconds > 0.0 {
            self.lines as f64 / self.seconds
        } else {
            0.0
        }
    }
}

/// Lines generated per block when nothing else limits the block.
const BLOCK: usize = 4096;

/// Runs a plan to its end (count, duration, or `stop` set).
pub fn run_plan(plan: &GenPlan, stop: Option<Arc<AtomicBool>>) -> Result<GenStats> {
    let shared = plan.target.open_shared()?;
    let next = Arc::new(AtomicU64::new(0));
    let lines = Arc::new(AtomicU64::new(0));
    let bytes = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let stop = stop.unwrap_or_default();
    let start = Instant::now();
    let deadline = plan.duration.map(|d| start + d);
    let per_worker = plan.rate / plan.workers as f64;
    let block = if plan.target.is_batched() {
        plan.batch
    } else if plan.rate > 0.0 {
        RateLimiter::step(per_worker, BLOCK)
    } else {
        BLOCK
    };
    let buffered = plan.rate == 0.0;
    // Connect every worker before the clock matters.
    let mut senders = Vec::with_capacity(plan.workers);
    for _ in 0..plan.workers {
        senders.push(plan.target.open_worker(&shared, buffered)?);
    }
    let mut handles = Vec::new();
    for (w, mut sender) in senders.into_iter().enumerate() {
        let mut gen = plan.gen.clone();
        gen.rng = Rng::new(Rng::from_entropy().next_u64() ^ w as u64);
        let (next, lines, bytes, stop) = (next.clone(), lines.clone(), bytes.clone(), stop.clone());
        let count = plan.count;
        let rate = per_worker;
        handles.push(std::thread::spawn(move || -> Result<()> {
            let mut limiter = (rate > 0.0).then(|| RateLimiter::new(rate));
            let mut written_lines = 0u64;
            let mut res = Ok(());
            loop {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                if let Some(d) = deadline {
                    if Instant::now() >= d {
                        break;
                    }
                }
                let first = next.fetch_add(block as u64, Ordering::Relaxed);
                let mut n = block as u64;
                if let Some(c) = count {
                    if first >= c {
                        break;
                    }
                    n = n.min(c - first);
                }
                if let Some(l) = &mut limiter {
                    if !l.take(n, deadline) {
                        break;
                    }
                }
                let now = fields::now_nanos();
                match sender.send(&mut gen, first, n, now) {
                    Ok(b) => {
                        written_lines += n;
                        if b > 0 {
                            bytes.fetch_add(b, Ordering::Relaxed);
                            lines.fetch_add(written_lines, Ordering::Relaxed);
                            written_lines = 0;
                        }
                    }
                    Err(e) => {
                        res = Err(e);
                        break;
                    }
                }
            }
            let fin = sender.finish();
            match (res, fin) {
                (Ok(()), Ok(b)) => {
                    bytes.fetch_add(b, Ordering::Relaxed);
                    lines.fetch_add(written_lines, Ordering::Relaxed);
                    Ok(())
                }
                (Err(e), _) | (_, Err(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                    stop.store(true, Ordering::Relaxed);
                    Ok(())
                }
                (Err(e), _) | (_, Err(e)) => Err(anyhow!(e)),
            }
        }));
    }
    if plan.progress {
        let (lines, done) = (lines.clone(), done.clone());
        std::thread::spawn(move || {
            let mut last = (Instant::now(), 0u64);
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                let now = Instant::now();
                if now - last.0 >= Duration::from_secs(1) && !done.load(Ordering::Relaxed) {
                    let n = lines.load(Ordering::Relaxed);
                    let r = (n - last.1) as f64 / (now - last.0).as_secs_f64();
                    eprint!(
                        "\r\x1b[2K{:>12} lines/s  total {:>14}  elapsed {:>7.1}s",
                        human(r),
                        n,
                        (now - start).as_secs_f64()
                    );
                    last = (now, n);
                }
            }
        });
    }
    let mut err = None;
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                stop.store(true, Ordering::Relaxed);
                err.get_or_insert(e);
            }
            Err(_) => {
                err.get_or_insert(anyhow!("a worker panicked"));
            }
        }
    }
    done.store(true, Ordering::Relaxed);
    if plan.progress {
        eprint!("\r\x1b[2K");
    }
    if let Some(e) = err {
        return Err(e.context(format!("gen to {}", plan.target.describe())));
    }
    Ok(GenStats {
        lines: lines.load(Ordering::Relaxed),
        bytes: bytes.load(Ordering::Relaxed),
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// `12.3M`-style numbers.
pub fn human(x: f64) -> String {
    if x >= 1e9 {
        format!("{:.2}G", x / 1e9)
    } else if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

/// `nagare gen`.
pub fn run_gen(args: GenArgs) -> Result<()> {
    let plan = GenPlan::from_args(&args)?;
    let stats = run_plan(&plan, None)?;
    eprintln!(
        "gen: {} lines, {} bytes in {:.3}s to {}: {} lines/s, {:.1} MB/s ({} workers{})",
        stats.lines,
        stats.bytes,
        stats.seconds,
        plan.target.describe(),
        human(stats.lines_per_s()),
        stats.bytes as f64 / stats.seconds.max(1e-9) / 1e6,
        plan.workers,
        if plan.rate > 0.0 {
            format!(", target {} lines/s", human(plan.rate))
        } else {
            String::new()
        }
    );
    Ok(())
}
