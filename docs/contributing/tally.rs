//! `tally`: appends `<tag> <events>` for each chunk to a file. A small
//! output that shows the whole plugin interface.

use std::sync::Arc;

use async_trait::async_trait;
use nagare_core::chunk::Chunk;
use nagare_core::output::{FlushError, Output, OutputPlugin};
use nagare_core::plugin::{BuildContext, OptionError};
use serde::Deserialize;
use tokio::io::AsyncWriteExt;

/// The options: one serde struct; its doc comments become the reference.
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TallyConfig {
    /// The file the lines are appended to. Required.
    pub path: String,
}

impl OutputPlugin for TallyConfig {
    const TYPE: &'static str = "tally";
    const DOC: &'static str = "Appends `<tag> <events>` for each chunk to a file.";

    /// Checks the options without I/O; says where the output will write.
    fn build(self, cx: &mut BuildContext) -> Result<Arc<dyn Output>, OptionError> {
        if self.path.trim().is_empty() {
            return Err(OptionError::new("path", "must name a file"));
        }
        cx.writes_file("path", &self.path);
        Ok(Arc::new(Tally { path: self.path }))
    }
}

struct Tally {
    path: String,
}

#[async_trait]
impl Output for Tally {
    /// The buffer calls this with each closed chunk and retries on errors.
    async fn write(&self, chunk: &Chunk) -> Result<(), FlushError> {
        let line = format!("{} {}\n", chunk.tag, chunk.count);
        let failed = |e: std::io::Error| FlushError::Retry(format!("{}: {e}", self.path));
        let mut f = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .await
            .map_err(failed)?;
        f.write_all(line.as_bytes()).await.map_err(failed)?;
        // tokio writes files on a blocking thread: flush waits until it did.
        f.flush().await.map_err(failed)
    }
}
