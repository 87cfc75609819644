//! `null`: counts events and discards them (for tests and benchmarks).

use async_trait::async_trait;
use serde::Deserialize;

use super::{FlushError, Output};
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
