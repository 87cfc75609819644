//! `directory`: a drop box. Every file created in the folder tree, or
//! appended to, is shipped line by line from its start, tagged by its path
//! relative to the folder; with `remove_after`, a file is removed once it was
//! shipped and has stayed unchanged that long (`cat data > dir/x` and forget
//! it). Built on the tail input's machinery (positions, rotation, parsers).

use std::path::PathBuf;
use std::sync::Arc;

use nagare_core::metrics::PluginStats;
use nagare_core::plugin::{serde_inline_default, BuildContext, OptionError};
use nagare_core::units::{Dur, Size};
use serde::Deserialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::inputs::common::follow::{
    start_with, DirectoryMode, LongLines, OneOrMany, TailConfig, DEFAULT_POLL, DEFAULT_REFRESH,
};
use crate::inputs::common::DEFAULT_MAX_LINE;
use crate::inputs::{Input, InputContext, InputPlugin};
use crate::parsers::ParserConfig;
use crate::router::LiveRouter;

#[serde_inline_default]
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DirectoryConfig {
    /// The folder to watch (its whole tree).
    pub path: String,
    /// The events' tag; a `*` is replaced by the file's path relative to the
    /// folder, `/` as `.` (`drop.*` + `app/x.log` = `drop.app.x.log`).
    #[serde_inline_default("dir.*".into())]
    pub tag: String,
    /// Globs (matched against the whole path or the file name) to leave out.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Remove a file once it was shipped and has not changed for this long (default: keep files).
    #[serde(default)]
    pub remove_after: Option<Dur>,
    /// File that keeps each file's read position across restarts.
    #[serde(default)]
    pub position_db: Option<String>,
    /// How often the folder is scanned for new files (default "1s").
    #[serde_inline_default(DEFAULT_REFRESH)]
    pub refresh_interval: Dur,
    /// How often files are checked for new lines (default "100ms").
    #[serde_inline_default(DEFAULT_POLL)]
    pub poll_interval: Dur,
    /// Watch the folder tree with inotify: new files and lines are read at
    /// once, the timers above are only the fallback (default true).
    #[serde_inline_default(true)]
    pub watch: bool,
    /// Longest line kept whole (default "1MiB").
    #[serde_inline_default(DEFAULT_MAX_LINE)]
    pub max_line_size: Size,
    /// What happens to a longer line: "split" (default) or "skip".
    #[serde(default)]
    pub long_lines: LongLines,
    /// Add the file's path to each record under this key.
    #[serde(default)]
    pub path_key: Option<String>,
    /// `[input.parser]` (default "none": the line in `message`).
    #[serde(default)]
    pub parser: Option<Box<ParserConfig>>,
}

pub async fn start(
    name: &str,
    cfg: DirectoryConfig,
    router: LiveRouter,
    stats: Arc<PluginStats>,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<Vec<JoinHandle<()>>> {
    std::fs::create_dir_all(&cfg.path)
        .map_err(|e| anyhow::anyhow!("{name}: cannot create the folder {}: {e}", cfg.path))?;
    let root = PathBuf::from(&cfg.path);
    let glob_root = glob::Pattern::escape(cfg.path.trim_end_matches('/'));
    let tail_cfg = TailConfig {
        path: OneOrMany::One(format!("{glob_root}/**/*")),
        exclude: cfg.exclude,
        tag: cfg.tag,
        position_db: cfg.position_db,
        import_fluentd_pos_file: None,
        import_fluent_bit_db: None,
        // A drop box ships whole files, also those already there at start.
        read_from_head: true,
        refresh_interval: cfg.refresh_interval,
        poll_interval: cfg.poll_interval,
        watch: cfg.watch,
        max_line_size: cfg.max_line_size,
        long_lines: cfg.long_lines,
        path_key: cfg.path_key,
        batch_lines: 10_000,
        parser: cfg.parser,
    };
    let mode = DirectoryMode {
        root,
        remove_after: cfg.remove_after.map(|d| d.0),
    };
    start_with(name, tail_cfg, Some(mode), router, stats, shutdown).await
}

impl InputPlugin for DirectoryConfig {
    const TYPE: &'static str = "directory";
    const DOC: &'static str = "A drop box: every file created in the folder tree, or appended to, is shipped line by line from its start, tagged by its relative path; `remove_after` removes shipped files.";

    fn build(self, cx: &mut BuildContext) -> Result<Box<dyn Input>, OptionError> {
        crate::inputs::common::follow::check_globs_and_parser(
            "path",
            &[],
            &self.exclude,
            self.parser.as_deref(),
        )?;
        // The folder is created at start; files are removed from it with remove_after.
        cx.writes_in("path", &self.path);
        if let Some(p) = &self.position_db {
            cx.writes_file("position_db", p);
        }
        Ok(Box::new(self))
    }
}

#[async_trait::async_trait]
impl Input for DirectoryConfig {
    async fn start(self: Box<Self>, cx: InputContext) -> anyhow::Result<Vec<JoinHandle<()>>> {
        start(&cx.name, *self, cx.router, cx.stats, cx.shutdown).await
    }
}
