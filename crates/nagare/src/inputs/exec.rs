//! `exec`: runs a command and turns each line of its standard output into
//! an event through `[input.parser]`, like Fluentd's in_exec, Fluent Bit's
//! in_exec and Vector's exec source: on an interval (`scheduled`, e.g. a
//! `df` every minute), or kept running (`streaming`, e.g. a program that
//! prints what it watches, started again when it ends).
//!
//! Output is bounded: a line longer than `max_line_size` is cut (the rest
//! skipped, counted as an error), and a scheduled run that prints more than
//! `max_bytes_per_run` is stopped. The command's stderr is logged (at most
//! 20 lines a second), its exit status too (an error when it is not 0).
//! The command runs in its own process group; at shutdown or when a reload
//! removes the input, the group gets SIGTERM, and SIGKILL after
//! `KILL_AFTER`; the lines it printed until then become events.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use nagare_core::metrics::PluginStats;
use nagare_core::plugin::{serde_inline_default, BuildContext, OptionError};
use nagare_core::units::{Dur, Size};
use nagare_forward::EventTime;
use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::inputs::common::append::append_batch;
use crate::inputs::common::lines::encode_line;
use crate::inputs::common::sockets::framing::{Framer, Framing};
use crate::inputs::common::sockets::lines::LineOptions;
use crate::inputs::common::DEFAULT_MAX_LINE;
use crate::inputs::{Input, InputContext, InputPlugin};
use crate::parsers::{Parser, ParserConfig};
use crate::router::LiveRouter;

/// When the command runs.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ExecMode {
    /// Every `interval`, each run to its end (default).
    #[default]
    Scheduled,
    /// Kept running; started again `respawn_interval` after it ends.
    Streaming,
}

#[serde_inline_default]
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecInputConfig {
    /// The program and its arguments, e.g. `["df", "-P"]` or `["sh", "-c",
    /// "…"]`; a name without a `/` is looked up on `PATH`. Required.
    pub command: Vec<String>,
    /// The events' tag. Required.
    pub tag: String,
    /// "scheduled" (default): run every `interval`; "streaming": keep it
    /// running.
    #[serde(default)]
    pub mode: ExecMode,
    /// scheduled: how often a run starts (default "60s"); a run still going
    /// when the next is due delays that one.
    #[serde_inline_default(Dur::secs(60))]
    pub interval: Dur,
    /// scheduled: a run still going after this long is stopped (default "60s").
    #[serde_inline_default(Dur::secs(60))]
    pub timeout: Dur,
    /// streaming: the wait before starting the command again after it
    /// ended (default "1s").
    #[serde_inline_default(Dur::secs(1))]
    pub respawn_interval: Dur,
    /// `[input.env]`: environment variables for the command, on top of nagare's own.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The command's working directory (default: nagare's).
    #[serde(default)]
    pub cwd: Option<String>,
    /// Longest line kept whole (default "1MiB"); a longer one is cut to this
    /// size, the rest of it skipped, and counted as an error.
    #[serde_inline_default(DEFAULT_MAX_LINE)]
    pub max_line_size: Size,
    /// scheduled: the most output one run may print (default "16MiB"); a
    /// run that prints more is stopped there (logged, counted as an error).
    #[serde_inline_default(Size::mib(16))]
    pub max_bytes_per_run: Size,
    /// `[input.parser]`: how a line becomes a record (default type "none":
    /// `{"message": "<line>"}`).
    #[serde(default)]
    pub parser: Option<Box<ParserConfig>>,
}

impl ExecInputConfig {
    fn lines(&self) -> LineOptions<'_> {
        LineOptions {
            tag: &self.tag,
            parser: self.parser.as_deref(),
            delimiter: "\n",
            source_address_key: None,
        }
    }
}

impl InputPlugin for ExecInputConfig {
    const TYPE: &'static str = "exec";
    const DOC: &'static str = "Runs a command every `interval` (or keeps it running: `mode = \"streaming\"`) and turns each line of its output into an event through `[input.parser]`; its stderr and exit status are logged, its output bounded (see [Host sources](host-sources.md#exec)).";

    fn build(self, _cx: &mut BuildContext) -> Result<Box<dyn Input>, OptionError> {
        match self.command.first() {
            Some(p) if !p.trim().is_empty() => {}
            _ => {
                return Err(OptionError::new(
                    "command",
                    "needs the program to run and its arguments, such as [\"df\", \"-P\"]",
                ))
            }
        }
        self.lines().check()?;
        if let Some(d) = &self.cwd {
            if !std::path::Path::new(d).is_dir() {
                return Err(OptionError::new("cwd", format!("{d:?} is not a directory")));
            }
        }
        for (key, d) in [
            ("interval", self.interval),
            ("timeout", self.timeout),
            ("respawn_interval", self.respawn_interval),
        ] {
            if d.0.is_zero() && key != "respawn_interval" {
                return Err(OptionError::new(key, "must be more than 0s"));
            }
        }
        if self.max_line_size.0 == 0 {
            return Err(OptionError::new("max_line_size", "must be at least 1 byte"));
        }
        if self.max_bytes_per_run.0 == 0 {
            return Err(OptionError::new(
                "max_bytes_per_run",
                "must be at least 1 byte",
            ));
        }
        Ok(Box::new(self))
    }
}

#[async_trait::async_trait]
impl Input for ExecInputConfig {
    async fn start(self: Box<Self>, cx: InputContext) -> anyhow::Result<Vec<JoinHandle<()>>> {
        let parser = Parser::new(&self.parser.as_deref().cloned().unwrap_or_default())
            .map_err(|e| anyhow::anyhow!("{}: [input.parser]: {e}", cx.name))?;
        let runner = Runner {
            name: cx.name,
            cfg: *self,
            parser,
            router: cx.router,
            stats: cx.stats,
        };
        // The first run starts here, so a command that cannot be started at
        // all stops nagare's start with the reason.
        let first = runner.spawn()?;
        Ok(vec![tokio::spawn(runner.run(first, cx.shutdown))])
    }
}

/// After SIGTERM, the command's group gets SIGKILL this much later.
const KILL_AFTER: Duration = Duration::from_secs(2);
/// Lines of the command's stderr logged per second at most.
const STDERR_LINES_PER_SEC: u32 = 20;
/// A longer stderr line is logged cut to this size.
const MAX_STDERR_LINE: usize = 4096;
/// What one read from the command's stdout takes at most.
const READ_SIZE: usize = 64 * 1024;

struct Runner {
    name: String,
    cfg: ExecInputConfig,
    parser: Parser,
    router: LiveRouter,
    stats: Arc<PluginStats>,
}

/// How a run ended.
#[derive(PartialEq, Eq)]
enum Ended {
    /// The command ended (or was stopped for its bounds).
    Done,
    /// nagare stops, or a reload removed the input.
    Stopping,
}

impl Runner {
    fn spawn(&self) -> anyhow::Result<tokio::process::Child> {
        let mut cmd = tokio::process::Command::new(&self.cfg.command[0]);
        cmd.args(&self.cfg.command[1..])
            .envs(&self.cfg.env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            // Its own process group: the whole group is stopped at the end
            // (a shell's children too), and a Ctrl-C at nagare's terminal
            // reaches nagare only.
            .process_group(0);
        if let Some(d) = &self.cfg.cwd {
            cmd.current_dir(d);
        }
        cmd.spawn()
            .map_err(|e| anyhow::anyhow!("{}: cannot run {:?}: {e}", self.name, self.cfg.command))
    }

    async fn run(self, first: tokio::process::Child, mut shutdown: watch::Receiver<bool>) {
        let mut child = Some(first);
        loop {
            let started = Instant::now();
            if let Some(c) = child.take() {
                if self.read_run(c, &mut shutdown).await == Ended::Stopping {
                    return;
                }
            }
            let wait = match self.cfg.mode {
                ExecMode::Scheduled => self.cfg.interval.0.saturating_sub(started.elapsed()),
                ExecMode::Streaming => self.cfg.respawn_interval.0,
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.changed() => {}
            }
            if *shutdown.borrow() {
                return;
            }
            match self.spawn() {
                Ok(c) => child = Some(c),
                Err(e) => {
                    PluginStats::add(&self.stats.errors, 1);
                    tracing::warn!(input = %self.name, error = %e, "will try again");
                }
            }
        }
    }

    /// Reads one run's output to its end, turning lines into events.
    async fn read_run(
        &self,
        mut child: tokio::process::Child,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Ended {
        let pid = child.id();
        let mut stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let stderr_task = tokio::spawn(log_stderr(self.name.clone(), stderr));
        let scheduled = self.cfg.mode == ExecMode::Scheduled;
        let deadline = scheduled.then(|| tokio::time::Instant::now() + self.cfg.timeout.0);
        let max_line = self.cfg.max_line_size.0 as usize;
        let mut framer = Framer::new(
            Framing::Lines {
                delimiter: b"\n".to_vec(),
            },
            max_line,
        );
        let mut buf = BytesMut::with_capacity(READ_SIZE);
        let mut batch = Vec::new();
        let (mut lines, mut bytes) = (0u64, 0u64);
        let mut stopping = false;
        // Why nagare stopped the command, if it did.
        let mut stopped: Option<String> = None;
        let mut term_sent: Option<tokio::time::Instant> = None;
        // After SIGKILL, the pipe is read this long at most (a process that
        // left the group may hold it open).
        let mut give_up: Option<tokio::time::Instant> = None;
        loop {
            let kill_at = term_sent.map(|t| t + KILL_AFTER);
            let read = tokio::select! {
                r = stdout.read_buf(&mut buf) => r,
                _ = shutdown.changed(), if !stopping => {
                    stopping = true;
                    stopped.get_or_insert_with(|| "nagare stops".into());
                    term_sent.get_or_insert_with(|| terminate(pid));
                    continue;
                }
                _ = sleep_until(deadline), if term_sent.is_none() => {
                    stopped = Some(format!("it ran longer than timeout ({})", humantime::format_duration(self.cfg.timeout.0)));
                    term_sent = Some(terminate(pid));
                    continue;
                }
                _ = sleep_until(kill_at) => {
                    kill_group(pid, libc::SIGKILL);
                    term_sent = None;
                    give_up = Some(tokio::time::Instant::now() + KILL_AFTER);
                    continue;
                }
                _ = sleep_until(give_up) => break,
            };
            let n = match read {
                Ok(0) => 0,
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(input = %self.name, error = %e, "cannot read the command's output");
                    0
                }
            };
            let at_end = n == 0;
            bytes += n as u64;
            let over = scheduled && bytes > self.cfg.max_bytes_per_run.0;
            if over {
                // Only what fits the bound becomes events.
                let extra = (bytes - self.cfg.max_bytes_per_run.0) as usize;
                buf.truncate(buf.len().saturating_sub(extra));
            }
            let now = EventTime::now();
            let mut count = 0u32;
            let mut errors = 0u64;
            let mut emit = |m: crate::inputs::common::sockets::framing::Message<'_>| {
                if let Some(len) = m.truncated {
                    errors += 1;
                    tracing::warn!(input = %self.name, bytes = len, max_line_size = max_line, "a line longer than max_line_size: cut");
                }
                if !encode_line(&mut batch, now, m.bytes, &self.parser, None) {
                    errors += 1;
                }
                count += 1;
            };
            framer.split(&mut buf, &mut emit);
            if at_end || over {
                framer.finish(&mut buf, &mut emit);
            }
            if errors > 0 {
                PluginStats::add(&self.stats.errors, errors);
            }
            if count > 0 {
                lines += count as u64;
                let entries = Bytes::from(std::mem::take(&mut batch));
                let appended = append_batch(
                    &self.name,
                    &self.router,
                    &self.stats,
                    &self.cfg.tag,
                    entries,
                    count,
                    false,
                )
                .await;
                if !appended && !stopping {
                    // The outputs are closed: nagare stops.
                    stopping = true;
                    stopped.get_or_insert_with(|| "nagare stops".into());
                    term_sent.get_or_insert_with(|| terminate(pid));
                }
            }
            if over && stopped.is_none() {
                PluginStats::add(&self.stats.errors, 1);
                stopped = Some(format!(
                    "it printed more than max_bytes_per_run ({} bytes)",
                    self.cfg.max_bytes_per_run.0
                ));
                term_sent = Some(terminate(pid));
            }
            if at_end || over {
                break;
            }
        }
        // Its stdout is closed (or no longer read): the command ends, or is
        // ended.
        drop(stdout);
        let status = match tokio::time::timeout(KILL_AFTER, child.wait()).await {
            Ok(s) => s,
            Err(_) => {
                kill_group(pid, libc::SIGKILL);
                child.wait().await
            }
        };
        let last_stderr = match tokio::time::timeout(Duration::from_millis(500), stderr_task).await
        {
            Ok(Ok(s)) => s,
            _ => String::new(),
        };
        let how = match &status {
            Ok(s) => describe(*s),
            Err(e) => format!("could not be waited for: {e}"),
        };
        match (&stopped, status.as_ref().map(|s| s.success())) {
            (None, Ok(true)) => {
                tracing::debug!(input = %self.name, lines, bytes, "the command exited with status 0")
            }
            (Some(why), _) if stopping => {
                tracing::info!(input = %self.name, lines, "the command was stopped ({why}); it {how}")
            }
            (Some(why), _) => {
                PluginStats::add(&self.stats.errors, 1);
                tracing::warn!(input = %self.name, lines, last_stderr = %last_stderr, "the command was stopped: {why}; it {how}")
            }
            (None, _) => {
                PluginStats::add(&self.stats.errors, 1);
                tracing::warn!(input = %self.name, lines, last_stderr = %last_stderr, "the command {how}")
            }
        }
        if stopping || *shutdown.borrow() {
            Ended::Stopping
        } else {
            Ended::Done
        }
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Sends SIGTERM to the command's process group; returns when.
fn terminate(pid: Option<u32>) -> tokio::time::Instant {
    kill_group(pid, libc::SIGTERM);
    tokio::time::Instant::now()
}

fn kill_group(pid: Option<u32>, sig: i32) {
    if let Some(pid) = pid {
        // SAFETY: kill(2) on the process group our child leads
        // (process_group(0) made its pid the group id).
        unsafe { libc::kill(-(pid as i32), sig) };
    }
}

fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        _ => status.to_string(),
    }
}

/// Logs the command's stderr (at most `STDERR_LINES_PER_SEC` lines a
/// second, each cut to `MAX_STDERR_LINE`), reading it all so the command
/// never blocks on it; returns its last line.
async fn log_stderr(name: String, stderr: tokio::process::ChildStderr) -> String {
    let mut r = tokio::io::BufReader::new(stderr);
    let mut line = Vec::new();
    let mut last = String::new();
    let mut window = Instant::now();
    let (mut logged, mut skipped) = (0u32, 0u64);
    loop {
        line.clear();
        match (&mut r)
            .take(MAX_STDERR_LINE as u64)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(line.trim_ascii_end()).into_owned();
        if window.elapsed() >= Duration::from_secs(1) {
            if skipped > 0 {
                tracing::warn!(input = %name, "{skipped} more stderr lines of the command were not logged (over {STDERR_LINES_PER_SEC} a second)");
            }
            (window, logged, skipped) = (Instant::now(), 0, 0);
        }
        if logged < STDERR_LINES_PER_SEC {
            logged += 1;
            tracing::warn!(input = %name, "command stderr: {text}");
        } else {
            skipped += 1;
        }
        last = text;
    }
    if skipped > 0 {
        tracing::warn!(input = %name, "{skipped} more stderr lines of the command were not logged (over {STDERR_LINES_PER_SEC} a second)");
    }
    last
}
