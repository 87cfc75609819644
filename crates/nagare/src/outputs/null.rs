//! `null`: counts events and discards them (for tests and benchmarks).

use std::sync::Arc;

use async_trait::async_trait;
use nagare_core::output::OutputPlugin;
use nagare_core::output::{FlushError, Output};
use nagare_core::plugin::{BuildContext, OptionError};
use serde::Deserialize;

use crate::buffer::Chunk;

/// `type = "null"` takes no options.
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct NullConfig {}

pub struct Null;

#[async_trait]
impl Output for Null {
    async fn write(&self, _chunk: &Chunk) -> Result<(), FlushError> {
        Ok(())
    }
}

impl OutputPlugin for NullConfig {
    const TYPE: &'static str = "null";
    const DOC: &'static str = "Counts events and discards them.";

    fn build(self, _cx: &mut BuildContext) -> Result<Arc<dyn Output>, OptionError> {
        Ok(Arc::new(Null))
    }
}
