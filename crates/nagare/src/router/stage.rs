//! A configured filter as the router holds it: where it is in file order,
//! the tags it selects, and its counters.

use std::sync::Arc;

use nagare_core::filter::Filter;
use nagare_core::metrics::PluginStats;
use nagare_core::pattern::Pattern;

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
