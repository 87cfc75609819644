//! nagare's own log: text or JSON lines, to stderr or to a file that is
//! opened again on SIGUSR1 (logrotate's `postrotate`).
//!
//! The file is a `Mutex<File>` behind a `MakeWriter`: each log line is
//! formatted first and then written with one `write_all` under the lock, so
//! swapping the file between two lines loses none and splits none.
//! tracing-appender was not used: its file appender rotates by time on its
//! own and cannot be told to reopen a path that logrotate renamed.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};

use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

/// `[system] log_format`.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    serde::Deserialize,
    serde::Serialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line: timestamp, level, message and the event's fields.
    Json,
}

/// The log file, once `init` opened one: SIGUSR1 reopens it.
static LOG_FILE: OnceLock<LogFile> = OnceLock::new();

/// A log file that can be opened again at the same path.
struct LogFile {
    path: PathBuf,
    file: Mutex<File>,
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// Hands tracing the log file under its lock, one line at a time.
#[derive(Clone, Copy)]
struct LogFileWriter(&'static LogFile);

impl<'a> MakeWriter<'a> for LogFileWriter {
    type Writer = LockedFile<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        // A thread that panicked while logging leaves the file usable.
        LockedFile(self.0.file.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

struct LockedFile<'a>(MutexGuard<'a, File>);

impl Write for LockedFile<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// Sets up the global subscriber: level from `NAGARE_LOG` or `level`
/// (default info), `format`, and `file` (default stderr; stdout carries the
/// `stdout` output's events). Fails only when the file cannot be opened.
pub fn init(level: Option<&str>, format: LogFormat, file: Option<&Path>) -> anyhow::Result<()> {
    // fuser warns "Unmount failed" at every shutdown: the fuse input detaches
    // its mount itself first (fuser's unmount fails while a file is open).
    let filter = EnvFilter::try_from_env("NAGARE_LOG")
        .unwrap_or_else(|_| EnvFilter::new(format!("{},fuser=error", level.unwrap_or("info"))));
    let (writer, ansi) = match file {
        None => (
            BoxMakeWriter::new(io::stderr),
            io::IsTerminal::is_terminal(&io::stderr()),
        ),
        Some(path) => {
            let file = open_append(path).map_err(|e| {
                anyhow::anyhow!("[system] log_file {}: cannot open: {e}", path.display())
            })?;
            let log = LOG_FILE.get_or_init(|| LogFile {
                path: path.to_path_buf(),
                file: Mutex::new(file),
            });
            (BoxMakeWriter::new(LogFileWriter(log)), false)
        }
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(writer)
        .with_ansi(ansi);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
    Ok(())
}

/// SIGUSR1: opens the log file's path again (a new file once logrotate has
/// renamed the old one). Lines logged before the swap are in the old file,
/// those after in the new one. If the path cannot be opened, logging goes
/// on into the old file and says why.
pub fn reopen() {
    let Some(log) = LOG_FILE.get() else {
        tracing::info!("SIGUSR1: nagare logs to stderr; no log file to reopen");
        return;
    };
    match open_append(&log.path) {
        Ok(new) => {
            *log.file.lock().unwrap_or_else(|e| e.into_inner()) = new;
            tracing::info!(log_file = %log.path.display(), "SIGUSR1: log file reopened");
        }
        Err(e) => tracing::error!(log_file = %log.path.display(),
            "SIGUSR1: cannot reopen the log file ({e}); still logging to the file open before"),
    }
}
