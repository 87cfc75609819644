//! Outputs: each writes closed chunks to a destination. The buffer in
//! front of each output owns batching, retries, backoff, dead letters and
//! backpressure; an output only writes a chunk and says whether a retry
//! can help.

use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;

pub use crate::chunk::Chunk;
use crate::plugin::{
    registration, BuildContext, Built, OptionError, Registration, Section, SectionError,
};

/// A failed write, and whether trying again can help.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FlushError {
    /// The destination may take the chunk later (down, timeout, disk full):
    /// the buffer retries it with backoff until its retry limits send it to
    /// the secondary output.
    #[error("{0}")]
    Retry(String),
    /// The chunk can never be written as it is (a rejected record, a 4xx, a
    /// permission error, a path that is not a directory): the buffer hands it
    /// to the secondary output (or dead letters) at once, without retries.
    #[error("{0}")]
    Permanent(String),
}

#[async_trait]
pub trait Output: Send + Sync {
    /// Writes every event of the chunk, or none that matters for a retry.
    async fn write(&self, chunk: &Chunk) -> Result<(), FlushError>;

    /// Starts background work (heartbeats, …) once the daemon runs; `nagare
    /// check` builds outputs without calling it.
    fn start(&self) {}
}

/// An output type: its options struct.
pub trait OutputPlugin: DeserializeOwned + JsonSchema + 'static {
    /// The `type` of its `[[output]]` sections.
    const TYPE: &'static str;
    /// One paragraph for the configuration reference.
    const DOC: &'static str;
    /// The output, built without I/O; its connections and files open on the
    /// first write (or in `Output::start`).
    fn build(self, cx: &mut BuildContext) -> Result<Arc<dyn Output>, OptionError>;
}

pub type OutputRegistration = Registration<Arc<dyn Output>>;

/// The registration of the output type `T`.
pub const fn output<T: OutputPlugin>() -> OutputRegistration {
    fn build<'a, T: OutputPlugin>(
        s: Section<'a>,
        cx: &mut BuildContext,
    ) -> Result<Built<'a, Arc<dyn Output>>, SectionError> {
        Ok(Built::One(s.options::<T>()?.build(cx)?))
    }
    registration::<T, _>(T::TYPE, T::DOC, build::<T>)
}
