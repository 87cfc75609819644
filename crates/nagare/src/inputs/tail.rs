//! `tail`: follows files and turns each line into an event. The file
//! follower it runs (positions, rotation, inotify, parsers) is shared with
//! the `directory` input: inputs/common/follow/.

use nagare_core::plugin::{BuildContext, OptionError};
use tokio::task::JoinHandle;

pub use super::common::follow::TailConfig;
use super::common::follow::{check_globs_and_parser, start};
use crate::inputs::{Input, InputContext, InputPlugin};

impl InputPlugin for TailConfig {
    const TYPE: &'static str = "tail";
    const DOC: &'static str = "Follows files and turns each line into an event: `{\"message\": \"<line>\"}` with the default parser `none`, or the record its `[input.parser]` makes; rotation (rename and copytruncate), truncation and deletion are detected; positions survive restarts. New files and lines are found at once through inotify (`watch`), the two intervals are the fallback (see [The tail and directory inputs](#the-tail-and-directory-inputs)).";

    fn build(self, cx: &mut BuildContext) -> Result<Box<dyn Input>, OptionError> {
        check_globs_and_parser(
            "path",
            &self.path.list(),
            &self.exclude,
            self.parser.as_deref(),
        )?;
        for (key, import) in [
            ("import_fluentd_pos_file", &self.import_fluentd_pos_file),
            ("import_fluent_bit_db", &self.import_fluent_bit_db),
        ] {
            if import.is_some() && self.position_db.is_none() {
                return Err(OptionError::new(
                    key,
                    "needs `position_db`: nagare keeps its own positions from the first start on",
                ));
            }
        }
        match &self.position_db {
            Some(p) => cx.writes_file("position_db", p),
            None => cx.warn(
                "position_db",
                "no position_db: after a restart, files are read again from their end (lines written meanwhile are skipped); set one, e.g. position_db = \"/var/lib/nagare/tail.pos\"",
            ),
        }
        Ok(Box::new(self))
    }
}

#[async_trait::async_trait]
impl Input for TailConfig {
    async fn start(self: Box<Self>, cx: InputContext) -> anyhow::Result<Vec<JoinHandle<()>>> {
        start(&cx.name, *self, cx.router, cx.stats, cx.shutdown).await
    }
}
