//! `grep`: keeps or drops events by regular expressions on their fields,
//! like Fluentd's filter_grep (`<regexp>`, `<exclude>`, `<and>`, `<or>`).
//!
//! The rules' fields are found in the walk that finds each entry's end
//! (`record::Fields`; no record is decoded), and each rule matches its
//! field's bytes with a bytes regex, so a str field is never checked or
//! copied as UTF-8. A batch whose events all pass goes on as it came (no
//! copy); otherwise the events that pass are copied, entry by entry, into
//! one new batch.

use bytes::Bytes;
use nagare_core::filter::FilterPlugin;
use nagare_core::filter::{Filter, Filtered};
use nagare_core::plugin::{serde_inline_default, BuildContext, OptionError};
use nagare_core::record::{Fields, Span};
use regex_automata::meta;
use serde::Deserialize;

use super::common::rules::{rules, GrepRule, Rule};
use super::common::search::CachePool;

#[serde_inline_default]
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrepConfig {
    /// `[[filter.regex]]`: rules an event must pass to be kept (Fluentd's
    /// `<regexp>`): its field exists and its text matches the pattern. By
    /// default every rule must pass (see `regex_combine`).
    #[serde(default)]
    pub regex: Vec<GrepRule>,
    /// `[[filter.exclude]]`: rules that drop an event (Fluentd's
    /// `<exclude>`): its field exists and its text matches the pattern. By
    /// default one matching rule drops it (see `exclude_combine`).
    #[serde(default)]
    pub exclude: Vec<GrepRule>,
    /// How the `regex` rules combine: "and" (every rule passes; Fluentd's
    /// default and its `<and>`) or "or" (one rule is enough; Fluentd's `<or>`).
    #[serde_inline_default(Combine::And)]
    pub regex_combine: Combine,
    /// How the `exclude` rules combine: "or" (one matching rule drops the
    /// event; Fluentd's default and its `<or>`) or "and" (every rule must
    /// match; Fluentd's `<and>`).
    #[serde_inline_default(Combine::Or)]
    pub exclude_combine: Combine,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Combine {
    /// Every rule.
    And,
    /// At least one rule.
    Or,
}

impl FilterPlugin for GrepConfig {
    const TYPE: &'static str = "grep";
    const DOC: &'static str = "Keeps the events whose fields match `[[filter.regex]]` rules and drops those that match `[[filter.exclude]]` rules, like Fluentd's filter_grep. Dropped events count as `dropped_events_total` of the filter.";

    fn build(self, _cx: &mut BuildContext) -> Result<Box<dyn Filter>, OptionError> {
        if self.regex.is_empty() && self.exclude.is_empty() {
            return Err(OptionError::new(
                "",
                "a grep filter needs at least one [[filter.regex]] or [[filter.exclude]] rule",
            ));
        }
        let mut fields = Fields::default();
        let mut all = rules("regex", &self.regex, &mut fields)?;
        all.extend(rules("exclude", &self.exclude, &mut fields)?);
        Ok(Box::new(Grep {
            rules: all,
            regex_rules: self.regex.len(),
            regex_combine: self.regex_combine,
            exclude_combine: self.exclude_combine,
            fields,
            caches: CachePool::default(),
        }))
    }
}

struct Grep {
    /// The `regex` rules, then the `exclude` rules.
    rules: Vec<Rule>,
    /// How many of `rules` are `regex` rules.
    regex_rules: usize,
    regex_combine: Combine,
    exclude_combine: Combine,
    /// The rules' fields, found in the walk of each entry.
    fields: Fields,
    /// Search caches, one per rule, taken once per batch.
    caches: CachePool<Vec<meta::Cache>>,
}

impl Grep {
    fn keeps(
        &self,
        record: &[u8],
        spans: &[Span],
        scratch: &mut Vec<u8>,
        caches: &mut [meta::Cache],
    ) -> bool {
        // Rules by index, not zipped iterators: for one or two rules the
        // zips' set-up cost more than the rules' own tests.
        let mut hit = |i: usize| self.rules[i].matches_at(record, spans, scratch, &mut caches[i]);
        let (regex, exclude) = (0..self.regex_rules, self.regex_rules..self.rules.len());
        let passes = regex.is_empty()
            || match self.regex_combine {
                Combine::And => regex.into_iter().all(&mut hit),
                Combine::Or => regex.into_iter().any(&mut hit),
            };
        let excluded = passes
            && !exclude.is_empty()
            && match self.exclude_combine {
                Combine::And => exclude.into_iter().all(&mut hit),
                Combine::Or => exclude.into_iter().any(&mut hit),
            };
        passes && !excluded
    }
}

impl Filter for Grep {
    fn filter(&self, _tag: &str, parts: &[Bytes], _count: u32) -> Filtered {
        let make = || self.rules.iter().map(Rule::cache).collect();
        let mut scratch = Vec::new();
        self.caches
            .with(make, |caches: &mut Vec<meta::Cache>| Filtered {
                batch: nagare_core::record::retain_with(parts, &self.fields, |record, _, spans| {
                    self.keeps(record, spans, &mut scratch, caches)
                }),
                ..Filtered::default()
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nagare_forward::{write_entry, EventTime};
    use rmpv::Value;

    fn grep(toml_text: &str) -> Box<dyn Filter> {
        let cfg: GrepConfig = toml::from_str(toml_text).unwrap();
        cfg.build(&mut BuildContext::default()).unwrap()
    }

    fn build_err(toml_text: &str) -> OptionError {
        let cfg: GrepConfig = toml::from_str(toml_text).unwrap();
        cfg.build(&mut BuildContext::default()).err().unwrap()
    }

    /// Runs records through (split in two parts); returns the seq of each
    /// kept record, or None when the batch went on unchanged.
    fn kept(f: &dyn Filter, records: &[Value]) -> Option<Vec<i64>> {
        let mut a = Vec::new();
        let mut b = Vec::new();
        for (i, r) in records.iter().enumerate() {
            let mut bytes = Vec::new();
            rmpv::encode::write_value(&mut bytes, r).unwrap();
            let half = if i < records.len() / 2 {
                &mut a
            } else {
                &mut b
            };
            write_entry(half, EventTime::new(1, 0), &bytes);
        }
        let out = f.filter("t", &[Bytes::from(a), Bytes::from(b)], records.len() as u32);
        let (bytes, n) = out.batch?;
        let seqs: Vec<i64> = nagare_core::record::entries(&bytes)
            .map(|(_, r, _)| {
                let v = rmpv::decode::read_value(&mut &r[..]).unwrap();
                v.as_map().unwrap()[0].1.as_i64().unwrap()
            })
            .collect();
        assert_eq!(seqs.len(), n as usize);
        Some(seqs)
    }

    fn ev(seq: i64, pairs: &[(&str, Value)]) -> Value {
        let mut m = vec![("seq".into(), seq.into())];
        m.extend(pairs.iter().map(|(k, v)| (Value::from(*k), v.clone())));
        Value::Map(m)
    }

    #[test]
    fn regex_rules_all_pass_and_excludes_drop() {
        let f = grep(
            r#"
[[regex]]
key = "level"
pattern = "^(warn|error)$"
[[regex]]
key = "$.http.code"
pattern = "^5"
[[exclude]]
key = "path"
pattern = "healthz"
"#,
        );
        let http = |c: i64| Value::Map(vec![("code".into(), c.into())]);
        let records = [
            ev(0, &[("level", "warn".into()), ("http", http(503))]),
            ev(1, &[("level", "info".into()), ("http", http(503))]),
            ev(2, &[("level", "error".into()), ("http", http(200))]),
            ev(
                3,
                &[
                    ("level", "error".into()),
                    ("http", http(500)),
                    ("path", "/healthz".into()),
                ],
            ),
            ev(4, &[("level", "error".into())]),
            ev(
                5,
                &[
                    ("level", Value::Binary(b"error".to_vec())),
                    ("http", http(502)),
                ],
            ),
        ];
        assert_eq!(kept(&*f, &records), Some(vec![0, 5]));
        // Every event passes: the batch goes on as it came.
        assert_eq!(kept(&*f, &records[..1]), None);
    }

    #[test]
    fn or_groups_and_only_excludes() {
        let f = grep(
            r#"
regex_combine = "or"
exclude_combine = "and"
[[regex]]
key = "a"
pattern = "x"
[[regex]]
key = "b"
pattern = "y"
[[exclude]]
key = "a"
pattern = "^xx$"
[[exclude]]
key = "b"
pattern = "^yy$"
"#,
        );
        let records = [
            ev(0, &[("a", "x".into())]),
            ev(1, &[("b", "y".into())]),
            ev(2, &[("c", "x".into())]),
            ev(3, &[("a", "xx".into()), ("b", "yy".into())]),
            ev(4, &[("a", "xx".into()), ("b", "y".into())]),
        ];
        assert_eq!(kept(&*f, &records), Some(vec![0, 1, 4]));
        // Excludes alone: a missing field excludes nothing; nil reads as "".
        let f = grep("[[exclude]]\nkey = \"level\"\npattern = \"^(debug|)$\"\n");
        let records = [
            ev(0, &[("level", "debug".into())]),
            ev(1, &[("msg", "no level".into())]),
            ev(2, &[("level", Value::Nil)]),
            ev(3, &[("level", 7.into())]),
        ];
        assert_eq!(kept(&*f, &records), Some(vec![1, 3]));
        // Everything dropped: an empty batch.
        let f = grep("[[regex]]\nkey = \"seq\"\npattern = \"^9$\"\n");
        assert_eq!(kept(&*f, &records), Some(vec![]));
    }

    #[test]
    fn bad_rules_are_refused_with_their_key() {
        let e = build_err("[[regex]]\nkey = \"a\"\npattern = \"(x\"\n");
        assert_eq!(e.key, "regex[0].pattern");
        assert!(e.message.starts_with("bad regex"), "{e}");
        let e = build_err(
            "[[regex]]\nkey = \"a\"\npattern = \"x\"\n[[exclude]]\nkey = \"$.a..b\"\npattern = \"x\"\n",
        );
        assert_eq!(e.key, "exclude[0].key");
        assert!(build_err("").message.contains("at least one"));
        assert!(toml::from_str::<GrepConfig>("regex_combine = \"xor\"\n").is_err());
    }
}
