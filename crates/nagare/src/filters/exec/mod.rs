//! `exec`: sends events through a long-lived program (any language) on its
//! stdin and stdout, and goes on with the events it answers — none, one or
//! many per event, with any tag. The model is K2HFTFUSE's external plugins
//! and Fluentd's exec_filter: the transformation one would write as a
//! Fluentd plugin in Ruby, written in any language.
//!
//! - protocol.rs: what goes over the pipes (JSON lines or msgpack, and the
//!   `null` that ends a batch, which `cat` echoes).
//! - child.rs: the process and its pipe threads.
//! - here: the options, and the batch round trip with restarts.
//!
//! The `Filter` trait is synchronous and runs on the input's task; a round
//! trip waits for another process, so it runs inside
//! `tokio::task::block_in_place` on the daemon's multi-threaded runtime:
//! the worker thread hands its other tasks to another thread while it
//! waits (see `blocking`). Batches from several inputs take turns: one
//! program per filter, one batch at a time.

mod child;
mod protocol;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde::Deserialize;

use self::child::Running;
pub use self::protocol::ExecFormat;
use nagare_core::filter::FilterPlugin;
use nagare_core::filter::{Filter, Filtered};
use nagare_core::plugin::{serde_inline_default, BuildContext, OptionError};
use nagare_core::units::Dur;

#[serde_inline_default]
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecConfig {
    /// The program and its arguments, e.g. `["python3", "enrich.py"]`. A
    /// name without a `/` is looked up on `PATH` (the `PATH` of `env` when
    /// it sets one); `nagare check` refuses a program that is not there or
    /// not executable. Required.
    pub command: Vec<String>,
    /// `[filter.env]`: environment variables for the program, on top of
    /// nagare's own.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The program's working directory (default: nagare's); a relative
    /// program path in `command` is relative to it.
    #[serde(default)]
    pub cwd: Option<String>,
    /// What goes over the pipes: "json" (one event per line) or "msgpack"
    /// (a stream of `[tag, time, record]` arrays). Either way a batch ends
    /// with `null`, which the program echoes when it has answered the batch.
    #[serde(default)]
    pub format: ExecFormat,
    /// How long the program may take to answer one batch. Then it is
    /// killed and restarted, and the batch goes on unchanged, each record
    /// with an `exec_error` field.
    #[serde_inline_default(Dur::secs(5))]
    pub timeout: Dur,
    /// The wait before starting the program again after it failed (exited,
    /// hung, or answered something that is not the protocol); doubles with
    /// each failure in a row, up to `max_restart_delay`. Batches that
    /// arrive meanwhile go on unchanged, marked with `exec_error`.
    #[serde_inline_default(Dur::secs(1))]
    pub restart_delay: Dur,
    /// The longest wait between restarts (`restart_delay` when that is longer).
    #[serde_inline_default(Dur::mins(1))]
    pub max_restart_delay: Dur,
}

impl FilterPlugin for ExecConfig {
    const TYPE: &'static str = "exec";
    const DOC: &'static str = "Sends events through a long-lived program (any language) on its stdin and stdout, as JSON lines or msgpack, and goes on with the events it answers: none, one or many per event, with any tag. A program that exits, hangs or breaks the protocol is restarted (with backoff), and its batch goes on unchanged with an `exec_error` field.";

    fn build(self, cx: &mut BuildContext) -> Result<Box<dyn Filter>, OptionError> {
        if self.timeout.0.is_zero() {
            return Err(OptionError::new("timeout", "must be more than 0s"));
        }
        let program = find_program(&self)?;
        // The program starts with the first batch: `nagare check` builds
        // filters too, and must not run anything.
        Ok(Box::new(Exec {
            name: cx.name.clone(),
            failures_routed: cx.failures_routed,
            program,
            cfg: self,
            state: Mutex::new(State::default()),
        }))
    }
}

/// The program to run: `command[0]` as a path (relative to `cwd`), or
/// looked up on `PATH`; an error says why it cannot be run.
fn find_program(cfg: &ExecConfig) -> Result<PathBuf, OptionError> {
    let name =
        match cfg.command.first() {
            Some(n) if !n.trim().is_empty() => n,
            _ => return Err(OptionError::new(
                "command",
                "needs the program to run and its arguments, such as [\"python3\", \"enrich.py\"]",
            )),
        };
    let cwd = match &cfg.cwd {
        Some(d) if !Path::new(d).is_dir() => {
            return Err(OptionError::new("cwd", format!("{d:?} is not a directory")))
        }
        Some(d) => Path::new(d),
        None => Path::new("."),
    };
    let absolute = |p: PathBuf| std::path::absolute(&p).unwrap_or(p);
    if name.contains('/') {
        let path = cwd.join(name);
        return match executable(&path) {
            Ok(()) => Ok(absolute(path)),
            Err(why) => Err(OptionError::new("command", format!("{name:?}: {why}"))),
        };
    }
    let path_var = match cfg.env.get("PATH") {
        Some(p) => p.clone(),
        None => std::env::var("PATH").unwrap_or_default(),
    };
    std::env::split_paths(&path_var)
        .map(|dir| cwd.join(dir).join(name))
        .find(|p| executable(p).is_ok())
        .map(absolute)
        .ok_or_else(|| {
            OptionError::new(
                "command",
                format!("no program {name:?} in any directory of PATH ({path_var})"),
            )
        })
}

fn executable(p: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(p).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".to_string(),
        _ => e.to_string(),
    })?;
    if !meta.is_file() {
        return Err("not a file".into());
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err("not executable (no x permission)".into());
    }
    Ok(())
}

struct Exec {
    name: String,
    /// A failed batch goes to the error label (`Filtered::failed`).
    failures_routed: bool,
    program: PathBuf,
    cfg: ExecConfig,
    state: Mutex<State>,
}

/// The program, when it runs, and when it may start again after failing.
#[derive(Default)]
struct State {
    running: Option<Running>,
    /// Failures in a row (0 after an answered batch).
    failures: u32,
    not_before: Option<Instant>,
}

/// What became of one batch.
struct Outcome {
    answer: Result<protocol::Answer, String>,
    /// The program was restarted for this batch.
    restarted: bool,
}

impl Exec {
    /// Sends the batch through the program, starting it when it is not
    /// running (and may start); on a failure, stops it.
    fn round_trip(&self, st: &mut State, tag: &str, input: Vec<u8>) -> Outcome {
        let mut restarted = false;
        if st.running.is_none() {
            if let Some(wait) = st
                .not_before
                .and_then(|t| t.checked_duration_since(Instant::now()))
            {
                // Rounded up: "restarts in 0s" would read as "now".
                let wait = match wait.as_secs() {
                    0 => Duration::from_millis(wait.as_millis() as u64 + 1),
                    s => Duration::from_secs(s + 1),
                };
                return Outcome {
                    answer: Err(format!(
                        "the program failed and restarts in {}",
                        humantime::format_duration(wait)
                    )),
                    restarted,
                };
            }
            match Running::start(&self.name, &self.program, &self.cfg) {
                Ok(r) => {
                    restarted = st.failures > 0;
                    if restarted {
                        tracing::info!(filter = %self.name, "program restarted after {} failure(s) in a row", st.failures);
                    }
                    st.running = Some(r);
                }
                Err(e) => {
                    let why = format!("cannot start {}: {e}", self.program.display());
                    return Outcome {
                        answer: Err(self.failed(st, why, None)),
                        restarted,
                    };
                }
            }
        }
        let running = st.running.as_ref().expect("started above");
        let answer = running
            .round_trip(input, self.cfg.timeout.0)
            .and_then(|a| protocol::decode(self.cfg.format, tag, &a));
        let answer = match answer {
            Ok(a) => {
                st.failures = 0;
                Ok(a)
            }
            Err(why) => {
                let running = st.running.take();
                Err(self.failed(st, why, running))
            }
        };
        Outcome { answer, restarted }
    }

    /// Stops the program after a failure, logs why (with how it ended and
    /// its last stderr lines) and when it restarts; returns the reason the
    /// batch's records are marked with.
    fn failed(&self, st: &mut State, why: String, running: Option<Running>) -> String {
        st.failures += 1;
        let doublings = (st.failures - 1).min(20);
        let delay = self
            .cfg
            .restart_delay
            .0
            .saturating_mul(1 << doublings)
            .min(self.cfg.max_restart_delay.0.max(self.cfg.restart_delay.0));
        st.not_before = Some(Instant::now() + delay);
        let (reason, stderr) = match running {
            Some(r) => {
                let (how, stderr) = r.stop();
                (format!("the program failed: {why}; it {how}"), stderr)
            }
            None => (format!("the program failed: {why}"), Vec::new()),
        };
        let stderr = if stderr.is_empty() {
            "(none)".to_string()
        } else {
            stderr.join(" | ")
        };
        tracing::warn!(
            filter = %self.name,
            "{reason}; restarting it in {}; its last stderr lines: {stderr}",
            humantime::format_duration(delay)
        );
        reason
    }
}

impl Filter for Exec {
    fn filter(&self, tag: &str, parts: &[Bytes], count: u32) -> Filtered {
        let size: usize = parts.iter().map(|p| p.len()).sum();
        let mut input = Vec::with_capacity(size * 2 + 64);
        protocol::encode(self.cfg.format, tag, parts, &mut input);
        let outcome = blocking(|| {
            let mut st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            self.round_trip(&mut st, tag, input)
        });
        let retries = u64::from(outcome.restarted);
        match outcome.answer {
            Ok(answer) => {
                let mut groups = answer.groups.into_iter();
                let (_, own, n) = groups.next().expect("the batch's tag comes first");
                Filtered {
                    batch: Some((Bytes::from(own), n)),
                    moved: groups.map(|(t, e, n)| (t, Bytes::from(e), n)).collect(),
                    retries,
                    ..Filtered::default()
                }
            }
            Err(reason) => {
                tracing::debug!(filter = %self.name, tag, events = count, "events kept unchanged, marked: {reason}");
                let mut out = Vec::with_capacity(size + count as usize * (reason.len() + 16));
                protocol::mark(parts, &reason, &mut out);
                let marked = Some((Bytes::from(out), count));
                let (batch, failed) = match self.failures_routed {
                    true => (Some((Bytes::new(), 0)), marked),
                    false => (marked, None),
                };
                Filtered {
                    batch,
                    failed,
                    errors: u64::from(count),
                    retries,
                    ..Filtered::default()
                }
            }
        }
    }
}

/// Runs work that waits on another process from a filter: on a
/// multi-threaded runtime (the daemon's) inside `block_in_place`, so the
/// worker's other tasks move to another thread meanwhile; elsewhere (no
/// runtime, a blocking thread, a current-thread runtime, where
/// `block_in_place` is not allowed) directly.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(command: &[&str]) -> ExecConfig {
        ExecConfig {
            command: command.iter().map(|s| s.to_string()).collect(),
            env: BTreeMap::new(),
            cwd: None,
            format: ExecFormat::Msgpack,
            timeout: Dur(Duration::from_secs(5)),
            restart_delay: Dur(Duration::ZERO),
            max_restart_delay: Dur(Duration::ZERO),
        }
    }

    fn build(c: ExecConfig) -> Result<Box<dyn Filter>, OptionError> {
        c.build(&mut BuildContext::new("exec#0"))
    }

    fn one_batch(n: u32) -> Bytes {
        let mut b = Vec::new();
        for i in 0..n {
            let mut rec = Vec::new();
            rmpv::encode::write_value(&mut rec, &rmpv::Value::Map(vec![("i".into(), i.into())]))
                .unwrap();
            nagare_forward::write_entry(&mut b, nagare_forward::EventTime::new(i, 0), &rec);
        }
        Bytes::from(b)
    }

    #[test]
    fn programs_are_found_on_path_or_refused() {
        assert!(build(cfg(&["cat"])).is_ok());
        let e = build(cfg(&["no-such-program-here"])).err().unwrap();
        assert_eq!(e.key, "command");
        assert!(
            e.message.contains("no program \"no-such-program-here\""),
            "{e}"
        );
        let e = build(cfg(&["./nope.py"])).err().unwrap();
        assert!(e.message.contains("\"./nope.py\": no such file"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("filter.py");
        std::fs::write(&script, "print()").unwrap();
        let e = build(cfg(&[script.to_str().unwrap()])).err().unwrap();
        assert!(e.message.contains("not executable"), "{e}");
        let mut c = cfg(&["./filter.py"]);
        c.cwd = Some(dir.path().to_str().unwrap().into());
        assert!(
            build(c).err().unwrap().message.contains("not executable"),
            "relative to cwd"
        );
        assert_eq!(build(cfg(&[])).err().unwrap().key, "command");
        let mut c = cfg(&["cat"]);
        c.cwd = Some("/no/such/dir".into());
        assert_eq!(build(c).err().unwrap().key, "cwd");
        let mut c = cfg(&["cat"]);
        c.env.insert("PATH".into(), "/nonexistent".into());
        assert!(build(c).is_err(), "the env's PATH is the one searched");
    }

    /// A batch far bigger than a pipe's buffer goes through `cat` (which
    /// writes while nagare still writes): no deadlock, every byte back.
    #[test]
    fn a_batch_bigger_than_the_pipes_goes_through_cat() {
        let f = build(cfg(&["cat"])).unwrap();
        let batch = one_batch(50_000);
        assert!(batch.len() > 256 * 1024);
        for _ in 0..2 {
            let out = f.filter("t", std::slice::from_ref(&batch), 50_000);
            assert_eq!(out.errors, 0);
            assert_eq!(out.batch.as_ref().unwrap().0, batch);
            assert!(out.moved.is_empty());
        }
    }

    /// stderr is always read: a program that writes far more than a pipe
    /// holds there (most of it not logged: rate limited) still answers.
    #[test]
    fn a_program_that_fills_stderr_does_not_block() {
        let mut c = cfg(&[
            "sh",
            "-c",
            "yes 'a line on stderr' | head -n 100000 >&2; exec cat",
        ]);
        c.timeout = Dur(Duration::from_secs(60));
        let f = build(c).unwrap();
        let batch = one_batch(10);
        let out = f.filter("t", std::slice::from_ref(&batch), 10);
        assert_eq!(out.errors, 0);
        assert_eq!(out.batch.unwrap().0, batch);
    }

    /// With an error label, a failed batch leaves the batch as `failed`,
    /// marked; without one it stays in the batch, marked.
    #[test]
    fn a_failed_batch_goes_to_the_error_label_when_there_is_one() {
        for routed in [false, true] {
            let mut cx = BuildContext::new("exec#0");
            cx.failures_routed = routed;
            let f = cfg(&["false"]).build(&mut cx).unwrap();
            let out = f.filter("t", &[one_batch(4)], 4);
            assert_eq!(out.errors, 4);
            let (kept, failed) = (out.batch.unwrap(), out.failed);
            let marked = if routed {
                assert_eq!(kept.1, 0);
                failed.expect("the failed batch")
            } else {
                assert!(failed.is_none());
                kept
            };
            assert_eq!(marked.1, 4);
            let records: Vec<_> = nagare_core::record::entries(&marked.0).collect();
            assert_eq!(records.len(), 4);
            assert!(records
                .iter()
                .all(|(_, r, _)| r.windows(10).any(|w| w == b"exec_error")));
        }
    }

    /// Works where `block_in_place` is not allowed (a current-thread
    /// runtime) and on the daemon's runtime.
    #[test]
    fn runs_on_either_runtime_flavor() {
        let f: std::sync::Arc<dyn Filter> = build(cfg(&["cat"])).unwrap().into();
        let batch = one_batch(3);
        let run = |f: std::sync::Arc<dyn Filter>, b: Bytes| async move {
            f.filter("t", &[b], 3).batch.unwrap().1
        };
        let current = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert_eq!(current.block_on(run(f.clone(), batch.clone())), 3);
        let multi = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        assert_eq!(
            multi.block_on(async { tokio::spawn(run(f, batch)).await.unwrap() }),
            3
        );
    }
}
