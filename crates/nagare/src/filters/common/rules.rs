//! Field rules: a field and a regular expression its text must match, as
//! grep's `[[filter.regex]]`/`[[filter.exclude]]` and sample's `exclude`
//! write them.

use nagare_core::plugin::OptionError;
use nagare_core::record::{value_text, FieldPath, Fields, Span};
use regex_automata::meta;
use serde::Deserialize;

use super::search::Pattern;

/// One rule: a field and a regular expression its text must match.
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrepRule {
    /// The field: `name` (a top-level key, as written) or `$.a.b` (a nested
    /// one). A str or bin value is matched as its bytes, nil as "", any
    /// other value as its JSON text (`42`, `true`). Required.
    pub key: String,
    /// A regular expression (Rust regex syntax, unanchored: write `^…$` to
    /// match the whole value). Required.
    pub pattern: String,
}

/// The rules of `[[filter.<what>]]`, checked (shared with sample's
/// `exclude`); their fields are added to `fields`.
pub(crate) fn rules(
    what: &str,
    rules: &[GrepRule],
    fields: &mut Fields,
) -> Result<Vec<Rule>, OptionError> {
    rules
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let key = FieldPath::parse(&r.key)
                .map_err(|e| OptionError::new(format!("{what}[{i}].key"), e))?;
            let pattern = Pattern::new(&r.pattern).map_err(|e| {
                OptionError::new(format!("{what}[{i}].pattern"), format!("bad regex: {e}"))
            })?;
            Ok(Rule {
                field: fields.add(&key),
                pattern,
            })
        })
        .collect()
}

pub(crate) struct Rule {
    /// The rule's field among the filter's `Fields`.
    field: usize,
    pattern: Pattern,
}

impl Rule {
    /// The record has the field (`spans`: where the filter's `Fields` are
    /// in it) and its text matches (searched with `cache`, one of this
    /// rule's `cache()`s).
    pub(crate) fn matches_at(
        &self,
        record: &[u8],
        spans: &[Span],
        scratch: &mut Vec<u8>,
        cache: &mut meta::Cache,
    ) -> bool {
        match spans[self.field] {
            Some((a, b)) => self
                .pattern
                .is_match(cache, value_text(&record[a..b], scratch)),
            None => false,
        }
    }

    pub(crate) fn cache(&self) -> meta::Cache {
        self.pattern.regex().create_cache()
    }
}
