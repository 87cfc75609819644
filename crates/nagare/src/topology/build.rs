//! Building the running parts of a checked config: the router's filter
//! stages, and the buffers in front of the outputs with the routing rules
//! that lead to them.

use std::sync::Arc;

use nagare_core::metrics::{PluginStats, Registry};
use nagare_core::output::Output;

use crate::buffer::{Buffer, BufferType, FileStore, Secondary};
use crate::config::{FilterSection, OutputSection, OutputTarget};
use crate::router::{Outputs, Rules, Stage};

/// Makes the router's stages of the built filters, in file order, with
/// their counters ("filter" kind).
pub fn stages(sections: Vec<FilterSection>, reg: &Registry) -> Vec<Arc<Stage>> {
    sections
        .into_iter()
        .enumerate()
        .map(|(index, s)| {
            Arc::new(Stage {
                index,
                stats: reg.register("filter", &s.name, s.type_name),
                name: s.name,
                patterns: s.patterns,
                filter: s.filter,
            })
        })
        .collect()
}

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
    output.attach(&stats);
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
            o.attach(&st);
            o.start();
            Ok(Some((o, st)))
        }
        OutputTarget::Copy(_) => anyhow::bail!("{}: a secondary cannot be a copy", s.name),
    }
}

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
