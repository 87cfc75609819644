//! `stdout`: one line per event (JSON or LTSV), or raw msgpack entries.

use async_trait::async_trait;
use serde::Deserialize;
use tokio::io::AsyncWriteExt;

use super::{FlushError, Output};
use crate::buffer::Chunk;
use crate::formats::{self, Format};
use crate::plugin::{BuildContext, OptionError, OutputPlugin};
use std::sync::Arc;

#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct StdoutConfig {
    /// "json" (default), "ltsv", "msgpack" or "single_value".
    #[serde(default)]
    pub format: Format,
    /// The field written by format "single_value" (default "message").
    #[serde(default = "default_message_key")]
    pub message_key: String,
}

pub fn default_message_key() -> String {
    "message".into()
}

pub struct Stdout {
    cfg: StdoutConfig,
}

impl Stdout {
    pub fn new(cfg: StdoutConfig) -> Self {
        Stdout { cfg }
    }
}

/// Formats a chunk's events for line-oriented outputs (stdout, file).
pub fn render(format: Format, message_key: &str, chunk: &Chunk, out: &mut Vec<u8>) {
    for (time, record, entry) in chunk.entries() {
        render_entry(format, message_key, &chunk.tag, time, record, entry, out);
    }
}

pub fn render_entry(
    format: Format,
    message_key: &str,
    tag: &str,
    time: nagare_forward::EventTime,
    record: &[u8],
    entry: &[u8],
    out: &mut Vec<u8>,
) {
    match format {
        Format::Json => formats::json::write_event(out, tag, time, record),
        Format::Ltsv => formats::ltsv::write_event(out, tag, time, record),
        Format::Msgpack => out.extend_from_slice(entry),
        Format::SingleValue => {
            if let Some(v) = formats::field(record, message_key.as_bytes()) {
                out.extend_from_slice(v);
            }
            out.push(b'\n');
        }
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
