//! Filters: steps between the router and the outputs (`[[filter]]`), applied
//! in file order, each to the batches whose tag its `match` selects, as in
//! Fluentd. Each filter type lives in its own file.
//!
//! A filter sees a whole batch (the PackedForward entries of one tag, as the
//! input made them) and answers with a new batch or "unchanged", so a filter
//! that only looks at the tag copies nothing, and one that needs fields
//! decodes the entries it touches and re-encodes them once into one buffer.
//! The router (router/mod.rs) keeps, per tag, the filters whose `match`
//! selects it: a tag without filters costs nothing extra.

use std::sync::Arc;

use bytes::Bytes;

use crate::config::FilterSection;
use crate::plugin::{filter, registry, FilterRegistration};
use crate::router::Pattern;
use crate::stats::{PluginStats, Registry};

#[cfg(test)]
mod cost;
pub(crate) mod record;
mod search;

registry! {
    FilterRegistration;
    parser => filter::<parser::ParserFilterConfig>(),
    grep => filter::<grep::GrepConfig>(),
    modify => filter::<modify::ModifyConfig>(),
    rewrite_tag => filter::<rewrite_tag::RewriteTagConfig>(),
    throttle => filter::<throttle::ThrottleConfig>(),
    sample => filter::<sample::SampleConfig>(),
    exec => filter::<exec::ExecConfig>(),
    lua => filter::<lua::LuaConfig>(),
}

/// What a filter made of a batch.
#[derive(Debug, Default)]
pub struct Filtered {
    /// The new entries (canonical `[time, record]` PackedForward entries)
    /// and their count; `None` when the batch goes on unchanged. A count of
    /// 0 drops the batch (the input still acknowledges it).
    pub batch: Option<(Bytes, u32)>,
    /// A new tag for the whole batch; `None` keeps it. The batch then goes
    /// on through the filters that select the new tag and come after this
    /// one in file order, and to the output the new tag routes to (see
    /// `Router::filter`).
    pub tag: Option<String>,
    /// Events given other tags one by one (rewrite_tag): (new tag, its
    /// entries, their count), each going on like a retagged batch. They are
    /// not in `batch`, which keeps the events that stay.
    pub moved: Vec<(String, Bytes, u32)>,
    /// Events the filter could not treat as configured: counted as errors
    /// of the filter. Without an error label they stay in `batch`, marked
    /// (e.g. a `parse_error` field); see `failed`.
    pub errors: u64,
    /// When the filter was built with `BuildContext::failures_routed`: the
    /// events it failed on, as it would have kept them (marked), moved out
    /// of `batch`, and their count (also counted in `errors`). The router
    /// sends them, with their tag, to the error label (`[system]
    /// error_label`). A filter built without `failures_routed` leaves this
    /// `None` (should it not, the router puts them back in the batch).
    pub failed: Option<(Bytes, u32)>,
    /// Events over a rate limit (throttle), dropped or in `moved`: counted
    /// as the filter's `throttled_events_total`.
    pub throttled: u64,
    /// Restarts of what the filter depends on (an exec filter's program),
    /// counted in the filter's `retries_total`.
    pub retries: u64,
}

/// A filter type. Synchronous: it runs on the input's task, on a batch
/// already in memory, and must not block on I/O (the exec filter, which
/// waits for its program, does so inside `block_in_place`: filters/exec).
pub trait Filter: Send + Sync {
    /// Filters a batch of `count` events of `tag`: `parts` are runs of
    /// canonical PackedForward entries, in order.
    fn filter(&self, tag: &str, parts: &[Bytes], count: u32) -> Filtered;
}

/// A configured filter as the router holds it.
pub struct Stage {
    /// Position among the `[[filter]]` sections (file order).
    pub index: usize,
    pub name: String,
    pub patterns: Vec<Pattern>,
    pub filter: Box<dyn Filter>,
    pub stats: Arc<PluginStats>,
}

impl Stage {
    pub fn matches(&self, tag: &str) -> bool {
        self.patterns.iter().any(|p| p.matches(tag))
    }
}

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
