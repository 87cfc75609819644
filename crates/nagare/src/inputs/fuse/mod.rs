//! `fuse`: a directory mounted through FUSE (K2HFTFUSE's model). Whatever
//! applications write into files under the mountpoint becomes events, one per
//! line, without touching the disk; the tag comes from the file's path
//! relative to the mountpoint.
//!
//! The filesystem is an in-memory tree of folders and files that hold no data:
//! reads return nothing, and a file's size is the number of bytes written to
//! it since it was created or last truncated (so `ls -l` looks sane). Files
//! are opened with direct I/O, so every write() reaches the daemon as it is.
//!
//! Two threads share the work: fuser's session thread answers the kernel and
//! hands each write's bytes to a bounded channel; a tokio task splits them
//! into lines, encodes the entries and appends batches to the outputs. When
//! the outputs push back (a full buffer with `overflow_action = "block"`), the
//! channel fills and the writer's write() blocks: memory stays bounded and
//! nothing is dropped. Each writing process (the kernel's pid of the writer)
//! has its own partial-line buffer per file, so concurrent appenders never
//! interleave inside a line, as in K2HFTFUSE; a partial line goes out when
//! its writer closes the file or after `partial_line_timeout` without more
//! data from that writer. That timeout is separate from `flush_interval` (how
//! long complete lines wait in a batch) and long by default: a writer that
//! pauses mid-line (block-buffered stdio on a loaded machine) must not get its
//! line cut in two by a short batching delay.
//!
//! The pieces: `mount` prepares the mountpoint, mounts and detaches; `tree`
//! holds the names (folders, and files without data); `fs` answers the
//! kernel's requests from the tree and passes the written bytes on; `lines`
//! is the task that turns those bytes into batches of events.

mod fs;
mod lines;
mod mount;
mod tree;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nagare_core::metrics::PluginStats;
use nagare_core::plugin::{serde_inline_default, BuildContext, OptionError};
use nagare_core::units::{Dur, Size};
use serde::Deserialize;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use self::fs::DropFs;
use self::lines::Lines;
use self::tree::Tree;
use crate::inputs::common::follow::LongLines;
use crate::inputs::common::DEFAULT_MAX_LINE;
use crate::inputs::{Input, InputContext, InputPlugin};
use crate::parsers::{Parser, ParserConfig};
use crate::router::LiveRouter;

#[serde_inline_default]
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FuseConfig {
    /// The folder to mount the FUSE filesystem on (created if missing). A
    /// stale mount left by a killed daemon is unmounted first.
    pub mountpoint: String,
    /// The events' tag; a `*` is replaced by the file's path relative to the
    /// mountpoint, `/` as `.` (`fuse.*` + `app/x.log` = `fuse.app.x.log`).
    #[serde_inline_default("fuse.*".into())]
    pub tag: String,
    /// Longest line kept whole (default "1MiB").
    #[serde_inline_default(DEFAULT_MAX_LINE)]
    pub max_line_size: Size,
    /// What happens to a longer line: "split" (default: pieces of max_line_size) or "skip".
    #[serde(default)]
    pub long_lines: LongLines,
    /// Add the file's path relative to the mountpoint to each record under this key.
    #[serde(default)]
    pub path_key: Option<String>,
    /// Mount with FUSE's `allow_other`: users other than the daemon's may use
    /// the mount (for a non-root daemon, /etc/fuse.conf needs `user_allow_other`).
    #[serde(default)]
    pub allow_other: bool,
    /// How long complete lines may wait in a batch before they go to the outputs (default "100ms").
    #[serde_inline_default(Dur::millis(100))]
    pub flush_interval: Dur,
    /// How long a writer's unfinished last line (no newline yet) waits for more
    /// data from that writer before it is an event on its own; closing the file
    /// ends it at once (default "5s").
    #[serde_inline_default(Dur::secs(5))]
    pub partial_line_timeout: Dur,
    /// `[input.parser]` (default "none": the line in `message`; "multiline" is not supported here).
    #[serde(default)]
    pub parser: Option<Box<ParserConfig>>,
}

/// Largest write the kernel is asked to send at once (it caps this at
/// /proc/sys/fs/fuse/max_pages_limit pages, 1 MiB by default).
const MAX_WRITE: u32 = 1 << 20;
/// Writes in flight between the FUSE thread and the line task: with
/// MAX_WRITE, at most 16 MiB of data waits here before writers block.
const CHANNEL: usize = 16;
/// At shutdown, how long files still open on the (already detached) mount
/// may keep writing before their writers get errors.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// From the FUSE thread to the line task.
enum Msg {
    /// Bytes `pid` wrote to the file `ino` (tag and relative path as of now).
    Data {
        ino: u64,
        pid: u32,
        tag: Arc<str>,
        path: Arc<str>,
        data: Vec<u8>,
    },
    /// `pid` closed the file: its unterminated last line is complete.
    Close { ino: u64, pid: u32 },
}

pub async fn start(
    name: &str,
    cfg: FuseConfig,
    router: LiveRouter,
    stats: Arc<PluginStats>,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<Vec<JoinHandle<()>>> {
    let parser = Parser::new(&cfg.parser.as_deref().cloned().unwrap_or_default())
        .map_err(|e| anyhow::anyhow!("{name}: [input.parser]: {e}"))?;
    if parser.multiline().is_some() {
        anyhow::bail!("{name}: [input.parser] type \"multiline\" is not supported by the fuse input; use a tail or directory input for multi-line events");
    }
    let mp = PathBuf::from(&cfg.mountpoint);
    let task_name = name.to_string();
    let mp2 = mp.clone();
    tokio::task::spawn_blocking(move || mount::prepare_mountpoint(&task_name, &mp2)).await??;
    // The path as the kernel's mount table will show it (for the unmount).
    let mp = std::fs::canonicalize(&mp).unwrap_or(mp);
    if !Path::new("/dev/fuse").exists() {
        anyhow::bail!(
            "{name}: cannot mount {}: /dev/fuse is absent; load the fuse kernel module (modprobe fuse), or run the container with --device /dev/fuse",
            mp.display()
        );
    }

    let (tx, rx) = mpsc::channel(CHANNEL);
    let tree = Arc::new(Mutex::new(Tree::new(cfg.allow_other, cfg.tag.clone())));
    let fs = DropFs::new(tree.clone(), tx);
    let options = mount::options(cfg.allow_other);
    let mp2 = mp.clone();
    let session = tokio::task::spawn_blocking(move || fuser::spawn_mount(fs, &mp2, &options))
        .await?
        .map_err(|e| mount::mount_error(name, &mp, e))?;
    tracing::info!(input = %name, mountpoint = %mp.display(), "FUSE filesystem mounted");

    let worker = Lines::new(name, &cfg, parser, router, stats);
    let (finish_tx, finish_rx) = oneshot::channel();
    let lines = tokio::spawn(worker.run(rx, finish_rx));

    let name = name.to_string();
    let mut sd = shutdown;
    let unmount = tokio::spawn(async move {
        let _ = sd.wait_for(|s| *s).await;
        // Detach first (MNT_DETACH, like `umount -l`): new opens fail at
        // once, while files still open may finish their writes; the session
        // ends when the last one is closed. A plain thread, not
        // spawn_blocking: if a writer keeps a file open, the join never
        // returns, and the runtime must not wait for it at exit (the exit
        // then ends the connection).
        let (detached_tx, detached_rx) = oneshot::channel();
        let (done_tx, done_rx) = oneshot::channel();
        let mp2 = mp.clone();
        let _ = std::thread::Builder::new()
            .name("fuse-unmount".into())
            .spawn(move || {
                let _ = detached_tx.send(mount::detach(&mp2));
                let _ = done_tx.send(session.join());
            });
        match detached_rx.await {
            Ok(Ok(())) => {
                tracing::info!(input = %name, mountpoint = %mp.display(), "FUSE filesystem unmounted")
            }
            Ok(Err(e)) => {
                tracing::error!(input = %name, mountpoint = %mp.display(), error = %e,
                    "cannot unmount the FUSE filesystem; the next start unmounts it")
            }
            Err(_) => {}
        }
        let finished = tokio::select! {
            _ = done_rx => true,
            _ = tokio::time::sleep(CLOSE_GRACE) => false,
        };
        if !finished {
            let open = tree.lock().map(|t| t.open_files()).unwrap_or(0);
            tracing::warn!(input = %name, mountpoint = %mp.display(), open_files = open,
                "files are still open on the detached FUSE filesystem; what was written so far goes on, later writes fail");
            let _ = finish_tx.send(());
        }
        let _ = lines.await;
    });
    Ok(vec![unmount])
}

impl InputPlugin for FuseConfig {
    const TYPE: &'static str = "fuse";
    const DOC: &'static str = "Mounts a folder through FUSE: every line applications write into files there is an event (nothing is stored on disk), tagged by the file's path relative to the mountpoint; each writing process has its own partial line, so concurrent appenders never interleave inside a line.";

    fn build(self, cx: &mut BuildContext) -> Result<Box<dyn Input>, OptionError> {
        crate::inputs::common::follow::check_globs_and_parser(
            "",
            &[],
            &[],
            self.parser.as_deref(),
        )?;
        if self
            .parser
            .as_deref()
            .is_some_and(|p| p.kind == crate::parsers::ParserType::Multiline)
        {
            return Err(OptionError::new(
                "parser.type",
                "type \"multiline\" is not supported by the fuse input; use a tail or directory input for multi-line events",
            ));
        }
        // The mountpoint is created at start when missing.
        if let Some(parent) = Path::new(&self.mountpoint).parent() {
            if !Path::new(&self.mountpoint).exists() && !parent.as_os_str().is_empty() {
                cx.writes_in("mountpoint", parent);
            }
        }
        Ok(Box::new(self))
    }
}

#[async_trait::async_trait]
impl Input for FuseConfig {
    async fn start(self: Box<Self>, cx: InputContext) -> anyhow::Result<Vec<JoinHandle<()>>> {
        start(&cx.name, *self, cx.router, cx.stats, cx.shutdown).await
    }
}
