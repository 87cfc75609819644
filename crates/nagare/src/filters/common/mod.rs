//! What filters share, so that no filter imports another: regex searches
//! with their caches (search.rs), field rules (grep's and sample's, rules.rs),
//! tag templates (rewrite_tag's and throttle's, tag_template.rs), and the
//! CPU time measurements of the cost tests (timing.rs).

pub(crate) mod rules;
pub(crate) mod search;
pub(crate) mod tag_template;
#[cfg(test)]
pub(crate) mod timing;
