//! `stdout`: one line per event (JSON or LTSV), or raw msgpack entries.

use std::sync::Arc;

use async_trait::async_trait;
use nagare_core::output::OutputPlugin;
use nagare_core::output::{FlushError, Output};
use nagare_core::plugin::{serde_inline_default, BuildContext, OptionError};
use serde::Deserialize;
use tokio::io::AsyncWriteExt;

use crate::buffer::Chunk;
use crate::formats::Format;
use crate::formats::{render, DEFAULT_MESSAGE_KEY};

#[serde_inline_default]
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct StdoutConfig {
    /// "json" (default), "ltsv", "msgpack" or "single_value".
    #[serde(default)]
    pub format: Format,
    /// The field written by format "single_value" (default "message").
    #[serde_inline_default(DEFAULT_MESSAGE_KEY.into())]
    pub message_key: String,
}

pub struct Stdout {
    cfg: StdoutConfig,
}

impl Stdout {
    pub fn new(cfg: StdoutConfig) -> Self {
        Stdout { cfg }
    }
}

#[async_trait]
impl Output for Stdout {
    async fn write(&self, chunk: &Chunk) -> Result<(), FlushError> {
        let mut out = Vec::with_capacity(chunk.len * 2);
        render(self.cfg.format, &self.cfg.message_key, chunk, &mut out);
        let mut so = tokio::io::stdout();
        so.write_all(&out)
            .await
            .map_err(|e| FlushError::Retry(format!("writing to stdout: {e}")))?;
        so.flush()
            .await
            .map_err(|e| FlushError::Retry(format!("writing to stdout: {e}")))
    }
}

impl OutputPlugin for StdoutConfig {
    const TYPE: &'static str = "stdout";
    const DOC: &'static str = "Prints events to standard output.";

    fn build(self, _cx: &mut BuildContext) -> Result<Arc<dyn Output>, OptionError> {
        Ok(Arc::new(Stdout::new(self)))
    }
}
