//! Outputs: each writes closed chunks to a destination. The buffer in front
//! of each output (see `buffer`) owns batching, retries and backpressure.

pub mod file;
pub mod forward;
pub mod null;
pub mod stdout;

use std::sync::Arc;

use async_trait::async_trait;

use crate::buffer::{Buffer, BufferType, Chunk, FileStore};
use crate::config::OutputSpec;
use crate::router::{Outputs, Pattern};
use crate::stats::Registry;

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
}

/// An output as the router sees it: the buffer in front of it.
pub type OutputHandle = Arc<Buffer>;

#[derive(Debug, Clone)]
pub enum OutputKind {
    Stdout(stdout::StdoutConfig),
    Null(null::NullConfig),
    File(file::FileConfig),
    Forward(forward::ForwardOutputConfig),
    Copy(Vec<OutputSpec>),
}

impl OutputKind {
    pub fn type_name(&self) -> &'static str {
        match self {
            OutputKind::Stdout(_) => "stdout",
            OutputKind::Null(_) => "null",
            OutputKind::File(_) => "file",
            OutputKind::Forward(_) => "forward",
            OutputKind::Copy(_) => "copy",
        }
    }
}

fn make(kind: &OutputKind, name: &str) -> anyhow::Result<Arc<dyn Output>> {
    Ok(match kind {
        OutputKind::Stdout(c) => Arc::new(stdout::Stdout::new(c.clone())),
        OutputKind::Null(_) => Arc::new(null::Null),
        OutputKind::File(c) => Arc::new(file::FileOutput::new(c.clone(), name)?),
        OutputKind::Forward(c) => Arc::new(forward::ForwardOutput::new(c.clone(), name)?),
        OutputKind::Copy(_) => anyhow::bail!("{name}: copy cannot be nested"),
    })
}

fn build_one(spec: &OutputSpec, reg: &Registry) -> anyhow::Result<Arc<Buffer>> {
    let store = match (spec.buffer.kind, &spec.buffer.path) {
        (BufferType::File, Some(path)) => Some(
            FileStore::open(
                std::path::Path::new(path),
                &spec.name,
                // About as many free chunk files as chunks fit the buffer.
                (spec.buffer.total_limit_size.0 / spec.buffer.chunk_limit_size.0.max(1)) as usize,
                spec.buffer.memory_limit_size.0 as usize,
            )
            .map_err(anyhow::Error::msg)?,
        ),
        (BufferType::File, None) => {
            anyhow::bail!(
                "{}: a file buffer needs `path` in [output.buffer]",
                spec.name
            )
        }
        (BufferType::Memory, _) => None,
    };
    let stats = reg.register("output", &spec.name, spec.kind.type_name());
    let output = make(&spec.kind, &spec.name)?;
    let secondary = match &spec.secondary {
        Some(s) => {
            let name = format!("{}.secondary", spec.name);
            let st = reg.register("output", &name, s.kind.type_name());
            Some((make(&s.kind, &name)?, st))
        }
        None => None,
    };
    Ok(Buffer::new(
        &spec.name,
        spec.buffer.clone(),
        stats,
        output,
        secondary,
        store,
    ))
}

/// Routing rules in config order: the patterns of an output and its route.
pub type Rules = Vec<(Vec<Pattern>, Outputs)>;

/// Builds every output with its buffer; returns the routing rules and the
/// buffers (to start and to drain at shutdown).
pub fn build(specs: &[OutputSpec], reg: &Registry) -> anyhow::Result<(Rules, Vec<Arc<Buffer>>)> {
    let mut rules = Vec::new();
    let mut all = Vec::new();
    for spec in specs {
        let patterns = Pattern::parse_list(&spec.patterns).map_err(anyhow::Error::msg)?;
        let targets: Vec<Arc<Buffer>> = match &spec.kind {
            OutputKind::Copy(stores) => stores
                .iter()
                .map(|s| build_one(s, reg))
                .collect::<anyhow::Result<_>>()?,
            _ => vec![build_one(spec, reg)?],
        };
        all.extend(targets.iter().cloned());
        rules.push((patterns, Outputs::from(targets)));
    }
    Ok((rules, all))
}
