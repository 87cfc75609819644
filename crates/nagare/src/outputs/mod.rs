//! Outputs: each writes closed chunks to a destination. The buffer in front
//! of each output (see `buffer`) owns batching, retries and backpressure.
//! Each output type lives in its own file and is registered below (see
//! plugin.rs).

use std::sync::Arc;

use async_trait::async_trait;

use crate::buffer::{Buffer, BufferType, Chunk, FileStore, Secondary};
use crate::config::OutputSection;
use crate::plugin::{output, registry, OutputRegistration};
use crate::router::{Outputs, Pattern};
use crate::stats::{PluginStats, Registry};

pub(crate) mod net;

pub(crate) mod http_client;

registry! {
    OutputRegistration;
    stdout => output::<stdout::StdoutConfig>(),
    null => output::<null::NullConfig>(),
    file => output::<file::FileConfig>(),
    forward => output::<forward::ForwardOutputConfig>(),
    redis => output::<redis::RedisOutputConfig>(),
    kafka => output::<kafka::KafkaOutputConfig>(),
    syslog => output::<syslog::SyslogOutputConfig>(),
    tcp => output::<tcp::TcpOutputConfig>(),
    scribe => output::<scribe::ScribeOutputConfig>(),
    http => output::<http::HttpOutputConfig>(),
    opentelemetry => output::<opentelemetry::OtlpOutputConfig>(),
    copy => copy::REGISTRATION,
}

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

/// What an output section sends its events to: one output, or (a `copy`
/// output) several output sections that each get every event.
pub enum OutputTarget {
    One(Arc<dyn Output>),
    Copy(Vec<OutputSection>),
}

/// An output as the router sees it: the buffer in front of it.
pub type OutputHandle = Arc<Buffer>;

/// Opens the buffer (and its file store) in front of one built output, with
/// `stats` (a reload's replaced output's counters) or new counters.
pub fn open_buffer_with(
    section: OutputSection,
    output: Arc<dyn Output>,
    reg: &Registry,
    stats: Option<Arc<PluginStats>>,
) -> anyhow::Result<Arc<Buffer>> {
    let b = &section.buffer;
    let store = match (b.kind, &b.path) {
        (BufferType::File, Some(path)) => Some(
            FileStore::open(
                std::path::Path::new(path),
                &section.name,
                // About as many free chunk files as chunks fit the buffer.
                (b.total_limit_size.0 / b.chunk_limit_size.0.max(1)) as usize,
                b.memory_limit_size.0 as usize,
            )
            .map_err(anyhow::Error::msg)?,
        ),
        // The config loader refuses a file buffer without a path.
        _ => None,
    };
    let stats = stats.unwrap_or_else(|| reg.register("output", &section.name, section.type_name));
    output.start();
    let secondary = start_secondary(section.secondary, reg)?;
    Ok(Buffer::new(
        &section.name,
        section.buffer,
        stats,
        output,
        secondary,
        store,
    ))
}

/// Starts a section's secondary output (with its counters).
pub fn start_secondary(
    secondary: Option<Box<OutputSection>>,
    reg: &Registry,
) -> anyhow::Result<Option<Secondary>> {
    let Some(s) = secondary else {
        return Ok(None);
    };
    match s.target {
        OutputTarget::One(o) => {
            let st = reg.register("output", &s.name, s.type_name);
            o.start();
            Ok(Some((o, st)))
        }
        OutputTarget::Copy(_) => anyhow::bail!("{}: a secondary cannot be a copy", s.name),
    }
}

/// Routing rules in config order: the patterns of an output and its route.
pub type Rules = Vec<(Vec<Pattern>, Outputs)>;

/// Opens every built output's buffer; returns the routing rules and the
/// buffers (to start and to drain at shutdown).
pub fn open(
    sections: Vec<OutputSection>,
    reg: &Registry,
) -> anyhow::Result<(Rules, Vec<Arc<Buffer>>)> {
    open_each(sections, |s, o| open_buffer_with(s, o, reg, None))
}

/// Makes the routing rules of the output sections; `open_buffer` gives
/// the buffer of each output (a copy's stores one by one), e.g. a reload's
/// choice between the running buffer and a new one. Returns the rules and
/// every buffer, in order.
pub fn open_each(
    sections: Vec<OutputSection>,
    mut open_buffer: impl FnMut(OutputSection, Arc<dyn Output>) -> anyhow::Result<Arc<Buffer>>,
) -> anyhow::Result<(Rules, Vec<Arc<Buffer>>)> {
    let mut rules = Vec::new();
    let mut all = Vec::new();
    for mut section in sections {
        let patterns = std::mem::take(&mut section.patterns);
        let targets: Vec<Arc<Buffer>> =
            match std::mem::replace(&mut section.target, OutputTarget::Copy(Vec::new())) {
                OutputTarget::Copy(stores) => stores
                    .into_iter()
                    .map(|mut s| {
                        match std::mem::replace(&mut s.target, OutputTarget::Copy(Vec::new())) {
                            OutputTarget::One(o) => open_buffer(s, o),
                            OutputTarget::Copy(_) => {
                                anyhow::bail!("{}: copy cannot be nested", s.name)
                            }
                        }
                    })
                    .collect::<anyhow::Result<_>>()?,
                OutputTarget::One(o) => vec![open_buffer(section, o)?],
            };
        all.extend(targets.iter().cloned());
        rules.push((patterns, Outputs::from(targets)));
    }
    Ok((rules, all))
}

/// The example output of docs/contributing.md, built and run here so the
/// walk-through stays true.
#[cfg(test)]
#[path = "../../../../docs/contributing/tally.rs"]
mod tally;

#[cfg(test)]
mod contributing_example {
    use super::*;
    use crate::plugin::Registries;

    #[tokio::test]
    async fn the_example_output_loads_and_writes() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("tally.txt");
        let mut outputs: Vec<OutputRegistration> = Vec::new();
        outputs.extend(REGISTRY.iter().map(|r| OutputRegistration { ..*r }));
        outputs.push(output::<tally::TallyConfig>());
        let registries = Registries {
            outputs: Vec::leak(outputs),
            ..Registries::builtin()
        };
        let text = format!(
            "[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:0\"\n[[output]]\ntype = \"tally\"\nmatch = \"**\"\npath = \"{}\"\n",
            out.display()
        );
        let cfg = crate::config::parse_with(&text, "t.toml", registries)
            .unwrap_or_else(|e| panic!("{e:?}"));
        let OutputTarget::One(o) = &cfg.outputs[0].target else {
            panic!("one output")
        };
        let mut entries = Vec::new();
        for i in 0..3u32 {
            nagare_forward::write_entry(
                &mut entries,
                nagare_forward::EventTime::new(i, 0),
                &[0x80],
            );
        }
        let chunk = Chunk::in_memory([0; 16], "app.web".into(), entries, 3);
        o.write(&chunk).await.unwrap();
        o.write(&chunk).await.unwrap();
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            "app.web 3\napp.web 3\n"
        );
        let bad = text.replace("path = ", "pth = ");
        let e = crate::config::parse_with(&bad, "t.toml", registries)
            .err()
            .unwrap();
        assert_eq!((e[0].line, e[0].key.as_str()), (7, "pth"), "{e:?}");
    }

    /// docs/contributing.md shows the example file as it is.
    #[test]
    fn the_walkthrough_shows_the_example() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/contributing");
        let doc = std::fs::read_to_string(format!("{root}.md")).unwrap();
        let file = std::fs::read_to_string(format!("{root}/tally.rs")).unwrap();
        assert!(
            doc.contains(&format!("```rust\n{file}```")),
            "docs/contributing.md must show docs/contributing/tally.rs in a rust block, unchanged"
        );
    }
}
