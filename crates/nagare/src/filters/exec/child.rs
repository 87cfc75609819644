//! The running program: its process and one thread per pipe. The writer
//! thread writes batches to stdin while the reader thread reads answers
//! from stdout, so a batch larger than a pipe's buffer cannot deadlock
//! with an answer that fills the other pipe; the stderr thread logs what
//! the program says there (at most `STDERR_LINES_PER_SEC` lines a second)
//! and always reads on, so the program never blocks on a full stderr.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::protocol::{next_value, ExecFormat};
use super::ExecConfig;

/// An answer bigger than this without its end of batch is an error (so a
/// program that never ends a batch cannot fill nagare's memory).
pub const MAX_ANSWER: usize = 64 << 20;
/// Lines of the program's stderr logged per second at most.
const STDERR_LINES_PER_SEC: u32 = 20;
/// A longer stderr line is logged in pieces of this size.
const MAX_STDERR_LINE: u64 = 4096;
/// The last stderr lines kept for the log line of a failure.
const STDERR_TAIL: usize = 5;

/// An answer to one batch (its bytes before the end of the batch), or why
/// there is none.
type Answer = Result<Vec<u8>, String>;

pub struct Running {
    process: Child,
    to_stdin: Sender<Vec<u8>>,
    answers: Receiver<Answer>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    /// Disconnected once the stderr thread has read everything.
    stderr_done: Receiver<()>,
}

impl Running {
    /// Starts `program` with the config's arguments, environment and
    /// working directory; `name` is the filter's, for logs and threads.
    pub fn start(name: &str, program: &Path, cfg: &ExecConfig) -> std::io::Result<Running> {
        let mut cmd = Command::new(program);
        cmd.args(&cfg.command[1..])
            .envs(&cfg.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group: a Ctrl-C at nagare's terminal stops
            // nagare (which then drains through the program), not the program.
            .process_group(0);
        if let Some(dir) = &cfg.cwd {
            cmd.current_dir(dir);
        }
        let mut process = cmd.spawn()?;
        let (stdin, stdout, stderr) = (
            process.stdin.take().expect("piped stdin"),
            process.stdout.take().expect("piped stdout"),
            process.stderr.take().expect("piped stderr"),
        );
        let (to_stdin, batches) = mpsc::channel();
        let (answered, answers) = mpsc::channel();
        let (stderr_end, stderr_done) = mpsc::channel();
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let tail = stderr_tail.clone();
        let (format, log_name) = (cfg.format, name.to_string());
        let threads = [
            spawn(name, "stdin", move || write_batches(stdin, batches)),
            spawn(name, "stdout", move || {
                read_answers(format, stdout, answered)
            }),
            spawn(name, "stderr", move || {
                log_stderr(&log_name, stderr, &tail);
                drop(stderr_end);
            }),
        ];
        if let Some(Err(e)) = threads.into_iter().find(Result::is_err) {
            let _ = process.kill();
            let _ = process.wait();
            return Err(e);
        }
        Ok(Running {
            process,
            to_stdin,
            answers,
            stderr_tail,
            stderr_done,
        })
    }

    /// Sends a batch (with its end) and waits up to `timeout` for the answer.
    pub fn round_trip(&self, input: Vec<u8>, timeout: Duration) -> Answer {
        if self.to_stdin.send(input).is_err() {
            return Err("it no longer reads its input".into());
        }
        match self.answers.recv_timeout(timeout) {
            Ok(answer) => answer,
            Err(RecvTimeoutError::Timeout) => Err(format!(
                "it did not answer within {} (timeout)",
                humantime::format_duration(timeout)
            )),
            Err(RecvTimeoutError::Disconnected) => Err("its output could not be read".into()),
        }
    }

    /// Ends the program after a failure: how it ended (its exit status, or
    /// "killed" when it was still running) and its last stderr lines.
    pub fn stop(mut self) -> (String, Vec<String>) {
        // Close its stdin (a program that reads to the end then exits) and
        // give it a moment: one that closed its output is usually exiting,
        // and its exit status says more than "killed".
        (self.to_stdin, _) = mpsc::channel();
        let deadline = Instant::now() + Duration::from_millis(200);
        let mut exited = self.process.try_wait().ok().flatten();
        while exited.is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
            exited = self.process.try_wait().ok().flatten();
        }
        let how = match exited {
            Some(status) => describe(status),
            None => {
                let _ = self.process.kill();
                let _ = self.process.wait();
                "was killed by nagare".to_string()
            }
        };
        // The stderr thread ends when every holder of the pipe has exited;
        // a child the program left running may hold it open: wait briefly.
        let _ = self.stderr_done.recv_timeout(Duration::from_millis(500));
        let tail = self
            .stderr_tail
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        (how, tail.iter().cloned().collect())
    }
}

impl Drop for Running {
    /// The filter is going away (nagare stops or reloads): the program too.
    fn drop(&mut self) {
        if let Ok(None) = self.process.try_wait() {
            let _ = self.process.kill();
            let _ = self.process.wait();
        }
    }
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        _ => status.to_string(),
    }
}

fn spawn(
    name: &str,
    pipe: &str,
    f: impl FnOnce() + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("{name} {pipe}"))
        .spawn(f)
}

/// Writes each batch to the program's stdin; ends (closing stdin) when the
/// program stops reading or the filter lets go of it.
fn write_batches(mut stdin: ChildStdin, batches: Receiver<Vec<u8>>) {
    for batch in batches {
        if stdin.write_all(&batch).is_err() {
            return;
        }
    }
}

/// Reads the program's stdout and sends the answer to each batch, framed
/// by the end-of-batch `null`; ends at the first error (the filter then
/// stops the program).
fn read_answers(format: ExecFormat, mut stdout: ChildStdout, answered: Sender<Answer>) {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    // The answer so far is buf[..scanned]; whole values only.
    let mut scanned = 0;
    loop {
        loop {
            match next_value(format, &buf, scanned) {
                Ok(Some((end, true))) => {
                    let rest = buf.split_off(end);
                    let mut answer = std::mem::replace(&mut buf, rest);
                    answer.truncate(scanned);
                    scanned = 0;
                    if answered.send(Ok(answer)).is_err() {
                        return;
                    }
                }
                Ok(Some((end, false))) => scanned = end,
                Ok(None) => break,
                Err(e) => {
                    let _ = answered.send(Err(e));
                    return;
                }
            }
        }
        if buf.len() > MAX_ANSWER {
            let _ = answered.send(Err(format!(
                "it answered more than {} MiB without ending the batch",
                MAX_ANSWER >> 20
            )));
            return;
        }
        match stdout.read(&mut chunk) {
            Ok(0) => {
                let _ = answered.send(Err("it closed its output before ending the batch".into()));
                return;
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                let _ = answered.send(Err(format!("reading its output: {e}")));
                return;
            }
        }
    }
}

/// Logs the program's stderr line by line, rate limited, and keeps the
/// last lines for the log line of a failure.
fn log_stderr(name: &str, stderr: ChildStderr, tail: &Mutex<VecDeque<String>>) {
    let mut r = BufReader::new(stderr);
    let mut line = Vec::new();
    let mut window = Instant::now();
    let (mut logged, mut skipped) = (0u32, 0u64);
    loop {
        line.clear();
        match (&mut r).take(MAX_STDERR_LINE).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(line.trim_ascii_end()).into_owned();
        if window.elapsed() >= Duration::from_secs(1) {
            if skipped > 0 {
                tracing::warn!(filter = %name, "{skipped} more stderr lines of the program were not logged (over {STDERR_LINES_PER_SEC} a second)");
            }
            (window, logged, skipped) = (Instant::now(), 0, 0);
        }
        if logged < STDERR_LINES_PER_SEC {
            logged += 1;
            tracing::warn!(filter = %name, "program stderr: {text}");
        } else {
            skipped += 1;
        }
        let mut tail = tail.lock().unwrap_or_else(PoisonError::into_inner);
        if tail.len() == STDERR_TAIL {
            tail.pop_front();
        }
        tail.push_back(text);
    }
    if skipped > 0 {
        tracing::warn!(filter = %name, "{skipped} more stderr lines of the program were not logged (over {STDERR_LINES_PER_SEC} a second)");
    }
}
