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
    /// Some entries were written and others were not (a bulk API that
    /// answers per item): the buffer counts the written ones delivered and
    /// never sends them again, retries the `retry` ones alone with backoff
    /// (as `Retry`), and hands the `rejected` ones to the secondary output
    /// or dead letters at once, with their reasons (as `Permanent`).
    #[error("{}", .0.message)]
    Partial(PartialWrite),
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

/// What a partial write left undone. Entries are named by their index in
/// the chunk given to `write` (0 to `count - 1`); an output that derives
/// ids from them uses `Chunk::position`, which stays the same when the
/// buffer sends a part of the chunk again.
#[derive(Debug, Clone, Default)]
pub struct PartialWrite {
    /// Entries that may be taken later (e.g. answered 429 or 5xx).
    pub retry: Vec<u32>,
    /// Entries that can never be written as they are, each with the
    /// reason (e.g. "mapper_parsing_exception: failed to parse field
    /// [n]"); the text up to the first ':' is the reason's name in the
    /// `rejected` counter.
    pub rejected: Vec<(u32, String)>,
    /// One line for the log: why entries are retried.
    pub message: String,
}

impl PartialWrite {
    /// Whether nothing is left undone.
    pub fn is_empty(&self) -> bool {
        self.retry.is_empty() && self.rejected.is_empty()
    }
}

#[async_trait]
pub trait Output: Send + Sync {
    /// Writes every event of the chunk, or none that matters for a retry,
    /// or says which were not written (`FlushError::Partial`).
    async fn write(&self, chunk: &Chunk) -> Result<(), FlushError>;

    /// Hands the output its counters (before `start`), for the ones of
    /// its own kind it keeps (e.g. `label_overflow`); `nagare check`
    /// builds outputs without calling it.
    fn attach(&self, _stats: &std::sync::Arc<crate::metrics::PluginStats>) {}

    /// Starts background work (heartbeats, …) once the daemon runs; `nagare
    /// check` builds outputs without calling it.
    fn start(&self) {}

    /// Closes what it keeps open once its buffer is drained at shutdown,
    /// politely (a TLS close_notify, …): a peer logs a connection dropped
    /// without one as an error.
    async fn stop(&self) {}
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
