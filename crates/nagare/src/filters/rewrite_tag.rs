//! `rewrite_tag`: gives events new tags by ordered rules on their fields,
//! like Fluentd's rewrite_tag_filter. The first rule that applies to an
//! event names its new tag (`$1` captures, `${tag}`, `${tag_parts[N]}`).
//!
//! Events are grouped by new tag into one batch each, entry bytes copied as
//! they are; the router sends each group on through the filters after this
//! one that select its tag, and to its output (router/mod.rs,
//! `Router::filter`). A batch whose events all keep their tag goes on
//! uncopied.

use bytes::Bytes;
use nagare_core::filter::FilterPlugin;
use nagare_core::filter::{Filter, Filtered};
use nagare_core::plugin::{BuildContext, OptionError};
use nagare_core::record::{str_at, value_text, FieldPath, Fields, Span};
use regex_automata::meta;
use regex_automata::util::captures::Captures;
use regex_automata::Input;
use serde::Deserialize;

use super::common::search::{CachePool, Pattern};
use super::common::tag_template::{render, tag_template, Part};

#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RewriteTagConfig {
    /// `[[filter.rule]]`, in order: the first rule that applies to an event
    /// gives it its new tag. Required (at least one).
    pub rule: Vec<RewriteRule>,
    /// What happens to an event no rule applies to: "keep" (it goes on
    /// with its tag) or "drop" (Fluentd's rewrite_tag_filter drops it).
    #[serde(default)]
    pub unmatched: Unmatched,
}

/// One rule: a field, a regular expression and the new tag.
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RewriteRule {
    /// The field: `name` (a top-level key, as written) or `$.a.b` (a nested
    /// one); a missing field reads as "". Required.
    pub key: String,
    /// A regular expression (Rust regex syntax, unanchored) the field's
    /// text is matched with. Required.
    pub pattern: String,
    /// The new tag: `$1`…`$9` are the pattern's capture groups, `${tag}`
    /// and `${tag_parts[N]}` the event's tag and its parts. Required.
    pub tag: String,
    /// The rule applies when the pattern does NOT match (then `$N` cannot
    /// be used, and an empty or missing field does not apply).
    #[serde(default)]
    pub invert: bool,
    /// Only a string value can match: a number, boolean, map or array
    /// reads as a missing field. Fluent Bit's rewrite_tag rules match
    /// strings only (`nagare convert` sets this for them); Fluentd's
    /// rewrite_tag_filter matches any value by its text (the default).
    #[serde(default)]
    pub strings_only: bool,
    /// The event also goes on with its own tag: a copy goes to the new
    /// tag (Fluent Bit's `KEEP true`). Default false: it moves.
    #[serde(default)]
    pub keep: bool,
}

#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Unmatched {
    /// The event goes on with its tag.
    #[default]
    Keep,
    /// The event is dropped (counted in the filter's `dropped_events_total`).
    Drop,
}

impl FilterPlugin for RewriteTagConfig {
    const TYPE: &'static str = "rewrite_tag";
    const DOC: &'static str = "Gives events new tags by ordered `[[filter.rule]]` rules on their fields, like Fluentd's rewrite_tag_filter; the events go on through the later filters and to the output their new tag selects.";

    fn build(self, _cx: &mut BuildContext) -> Result<Box<dyn Filter>, OptionError> {
        if self.rule.is_empty() {
            return Err(OptionError::new(
                "rule",
                "needs at least one [[filter.rule]]",
            ));
        }
        let mut fields = Fields::default();
        let rules: Vec<Rule> = self
            .rule
            .iter()
            .enumerate()
            .map(|(i, r)| {
                Rule::new(r, &mut fields)
                    .map_err(|(k, e)| OptionError::new(format!("rule[{i}].{k}"), e))
            })
            .collect::<Result<_, _>>()?;
        Ok(Box::new(RewriteTag {
            rules,
            fields,
            unmatched: self.unmatched,
            caches: CachePool::default(),
        }))
    }
}

struct Rule {
    /// The rule's field among `RewriteTag::fields` (rules on the same field share it).
    key_id: usize,
    /// The pattern, searched with a cache of the batch's own (see
    /// `RewriteTag::caches`), for the match test and for captures.
    test: Pattern,
    invert: bool,
    strings_only: bool,
    keep: bool,
    tag: Vec<Part>,
    captures: bool,
}

impl Rule {
    /// The rule `r`; its field is added to `fields`.
    fn new(r: &RewriteRule, fields: &mut Fields) -> Result<Rule, (&'static str, String)> {
        let key = FieldPath::parse(&r.key).map_err(|e| ("key", e))?;
        let test = Pattern::new(&r.pattern).map_err(|e| ("pattern", format!("bad regex: {e}")))?;
        let tag = tag_template(&r.tag).map_err(|e| ("tag", e))?;
        let groups = test
            .regex()
            .group_info()
            .group_len(regex_automata::PatternID::ZERO)
            - 1;
        let mut captures = false;
        for p in &tag {
            if let Part::Capture(n) = p {
                if r.invert {
                    return Err(("tag", format!("${n}: an inverted rule has no captures")));
                }
                if *n > groups {
                    return Err((
                        "tag",
                        format!("${n}: the pattern has {groups} capture group(s)"),
                    ));
                }
                captures = true;
            }
        }
        if tag.is_empty() {
            return Err(("tag", "must not be empty".into()));
        }
        Ok(Rule {
            key_id: fields.add(&key),
            test,
            invert: r.invert,
            strings_only: r.strings_only,
            keep: r.keep,
            tag,
            captures,
        })
    }

    /// Whether the rule applies to `record`; with captures in its tag,
    /// writes the new tag into `out` (the others' tags are made once per
    /// batch, see `RewriteTag::filter`). `spans` holds where each of
    /// `RewriteTag::fields` is in the record.
    #[allow(clippy::too_many_arguments)]
    fn apply(
        &self,
        search: &mut Search,
        tag: &str,
        record: &[u8],
        spans: &[Span],
        json: &mut Vec<u8>,
        out: &mut String,
    ) -> bool {
        let text: &[u8] = match spans[self.key_id] {
            Some((a, b)) if self.strings_only => match str_at(&record[a..b], 0) {
                Some((x, y)) => &record[a + x..a + y],
                None => b"",
            },
            Some((a, b)) => value_text(&record[a..b], json),
            None => b"",
        };
        let matches = self.test.is_match(&mut search.cache, text);
        if self.invert {
            return !text.is_empty() && !matches;
        }
        // A match test first: most events match no rule, and it is the cheap test.
        if !matches {
            return false;
        }
        if self.captures {
            let Search { cache, caps } = search;
            self.test
                .regex()
                .search_captures_with(cache, &Input::new(text), caps);
            if caps.is_match() {
                render(&self.tag, tag, Some((caps, text)), out);
            }
        }
        true
    }
}

struct RewriteTag {
    rules: Vec<Rule>,
    /// The fields the rules read, found in the walk of each entry.
    fields: Fields,
    unmatched: Unmatched,
    /// Search state, one per rule, taken once per batch.
    caches: CachePool<Vec<Search>>,
}

/// A rule's search state for one batch: the regex's cache and room for a
/// match's groups (made once, not per event).
struct Search {
    cache: meta::Cache,
    caps: Captures,
}

/// The events of one new tag.
struct Group {
    tag: String,
    entries: Vec<u8>,
    count: u32,
}

impl Filter for RewriteTag {
    fn filter(&self, tag: &str, parts: &[Bytes], _count: u32) -> Filtered {
        let make = || {
            let search = |r: &Rule| Search {
                cache: r.test.regex().create_cache(),
                caps: r.test.regex().create_captures(),
            };
            self.rules.iter().map(search).collect()
        };
        self.caches
            .with(make, |caches| self.filter_with(caches, tag, parts))
    }
}

impl RewriteTag {
    fn filter_with(&self, caches: &mut [Search], tag: &str, parts: &[Bytes]) -> Filtered {
        let mut json = Vec::new();
        let mut new_tag = String::new();
        let mut spans: Vec<Span> = vec![None; self.fields.len()];
        // The new tag of each rule without captures: the same for the batch.
        let fixed: Vec<Option<String>> = self
            .rules
            .iter()
            .map(|r| {
                (!r.captures).then(|| {
                    let mut t = String::new();
                    render(&r.tag, tag, None, &mut t);
                    t
                })
            })
            .collect();
        // Events that stay: made at the first event that does not, with
        // every entry before it.
        let mut stay: Option<Vec<u8>> = None;
        let mut stayed = 0u32;
        let mut groups: Vec<Group> = Vec::new();
        // While every event so far goes to one new tag (or is dropped, ""),
        // nothing is copied: if the whole batch does, it goes on as it came
        // under that tag. This is (tag, events so far).
        let mut uniform: Option<(String, u32)> = None;
        let mut first = true;
        for (i, part) in parts.iter().enumerate() {
            let mut offset = 0;
            while let Some((r, end)) = self.fields.entry(part, offset, &mut spans) {
                let (record, entry) = (&part[r..end], &part[offset..end]);
                let found = self
                    .rules
                    .iter()
                    .zip(&fixed)
                    .zip(caches.iter_mut())
                    .find_map(|((r, f), search)| {
                        r.apply(search, tag, record, &spans, &mut json, &mut new_tag)
                            .then_some((f, r.keep))
                    });
                // A kept event goes to its new tag and stays too: never
                // part of a batch that moves whole.
                let keep = found.is_some_and(|(_, k)| k);
                let to = found.map(|(f, _)| f.as_deref().unwrap_or(&new_tag));
                let goes = match to {
                    Some(t) if t != tag => Some(t),
                    Some(_) => None,
                    None if self.unmatched == Unmatched::Drop => Some(""),
                    None => None,
                };
                if std::mem::take(&mut first) && !keep {
                    if let Some(to) = goes {
                        uniform = Some((to.to_string(), 1));
                        offset = end;
                        continue;
                    }
                }
                if let Some((u, n)) = &mut uniform {
                    if goes == Some(u.as_str()) && !keep {
                        *n += 1;
                        offset = end;
                        continue;
                    }
                    // The first event that goes elsewhere: those before it
                    // become the group of their tag, and none stayed.
                    if !u.is_empty() {
                        let mut entries = Vec::new();
                        parts[..i].iter().for_each(|p| entries.extend_from_slice(p));
                        entries.extend_from_slice(&part[..offset]);
                        groups.push(Group {
                            tag: std::mem::take(u),
                            entries,
                            count: *n,
                        });
                    }
                    stay = Some(Vec::new());
                    uniform = None;
                }
                match goes {
                    None => {
                        stayed += 1;
                        if let Some(s) = &mut stay {
                            s.extend_from_slice(entry);
                        }
                    }
                    Some(to) => {
                        if stay.is_none() {
                            let mut s = Vec::new();
                            parts[..i].iter().for_each(|p| s.extend_from_slice(p));
                            s.extend_from_slice(&part[..offset]);
                            stay = Some(s);
                        }
                        // "" (drop, or a tag that came out empty) goes nowhere.
                        if !to.is_empty() {
                            let g = match groups.iter().position(|g| g.tag == to) {
                                Some(g) => &mut groups[g],
                                None => {
                                    groups.push(Group {
                                        tag: to.to_string(),
                                        entries: Vec::new(),
                                        count: 0,
                                    });
                                    groups.last_mut().expect("just pushed")
                                }
                            };
                            g.entries.extend_from_slice(entry);
                            g.count += 1;
                        }
                        if keep {
                            stayed += 1;
                            if let Some(s) = &mut stay {
                                s.extend_from_slice(entry);
                            }
                        }
                    }
                }
                offset = end;
            }
        }
        match uniform {
            // Every event was dropped.
            Some((to, _)) if to.is_empty() => Filtered {
                batch: Some((Bytes::new(), 0)),
                ..Filtered::default()
            },
            // Every event got one new tag: the batch goes on uncopied.
            Some((to, _)) => Filtered {
                tag: Some(to),
                ..Filtered::default()
            },
            None => Filtered {
                batch: stay.map(|s| (Bytes::from(s), stayed)),
                moved: groups
                    .into_iter()
                    .map(|g| (g.tag, Bytes::from(g.entries), g.count))
                    .collect(),
                ..Filtered::default()
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nagare_forward::{write_entry, EventTime};
    use rmpv::Value;

    fn build(toml_text: &str) -> Result<Box<dyn Filter>, OptionError> {
        let cfg: RewriteTagConfig = toml::from_str(toml_text).unwrap();
        cfg.build(&mut BuildContext::default())
    }

    fn ev(seq: i64, pairs: &[(&str, Value)]) -> Vec<u8> {
        let mut m = vec![("seq".into(), seq.into())];
        m.extend(pairs.iter().map(|(k, v)| (Value::from(*k), v.clone())));
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, &Value::Map(m)).unwrap();
        out
    }

    fn seqs(entries: &[u8]) -> Vec<i64> {
        nagare_core::record::entries(entries)
            .map(|(_, r, _)| {
                let v = rmpv::decode::read_value(&mut &r[..]).unwrap();
                v.as_map().unwrap()[0].1.as_i64().unwrap()
            })
            .collect()
    }

    /// The seqs that stay (None when the batch is unchanged), and those
    /// moved, by new tag.
    type Outcome = (Option<Vec<i64>>, Vec<(String, Vec<i64>)>);

    fn run(f: &dyn Filter, tag: &str, records: &[Vec<u8>]) -> Outcome {
        let mut e = Vec::new();
        for r in records {
            write_entry(&mut e, EventTime::new(1, 0), r);
        }
        let out = f.filter(tag, &[Bytes::from(e.clone())], records.len() as u32);
        if let Some(t) = out.tag {
            // The whole batch, uncopied, under a new tag.
            assert!(out.batch.is_none() && out.moved.is_empty());
            return (Some(vec![]), vec![(t, seqs(&e))]);
        }
        let stay = out.batch.map(|(b, n)| {
            let s = seqs(&b);
            assert_eq!(s.len(), n as usize);
            s
        });
        let moved = out
            .moved
            .into_iter()
            .map(|(t, b, n)| {
                let s = seqs(&b);
                assert_eq!(s.len(), n as usize);
                (t, s)
            })
            .collect();
        (stay, moved)
    }

    const RULES: &str = r#"
[[rule]]
key = "level"
pattern = "^(warn|error)$"
tag = "alert.$1.${tag_parts[1]}"
[[rule]]
key = "$.http.code"
pattern = "^5\\d\\d$"
tag = "http5xx.${tag}"
[[rule]]
key = "level"
pattern = "^debug$"
invert = true
tag = "kept.${tag_parts[-1]}"
"#;

    #[test]
    fn first_rule_that_applies_gives_the_tag() {
        let f = build(RULES).unwrap();
        let http = |c: i64| Value::Map(vec![("code".into(), c.into())]);
        let (stay, moved) = run(
            &*f,
            "app.api",
            &[
                ev(0, &[("level", "warn".into())]),
                ev(1, &[("level", "debug".into()), ("http", http(503))]),
                ev(2, &[("level", "debug".into())]),
                ev(3, &[("level", "error".into()), ("http", http(500))]),
                ev(4, &[("level", "info".into())]),
                ev(5, &[]),
                ev(6, &[("level", "warn".into())]),
            ],
        );
        // No rule applies to 2 (debug) and 5 (no level: an inverted rule skips it).
        assert_eq!(stay, Some(vec![2, 5]));
        assert_eq!(
            moved,
            [
                ("alert.warn.api".to_string(), vec![0, 6]),
                ("http5xx.app.api".to_string(), vec![1]),
                ("alert.error.api".to_string(), vec![3]),
                ("kept.api".to_string(), vec![4]),
            ]
        );
        // Nothing moves: the batch goes on as it came.
        assert_eq!(
            run(&*f, "app.api", &[ev(0, &[("level", "debug".into())])]),
            (None, vec![])
        );
    }

    #[test]
    fn unmatched_events_may_be_dropped_and_the_same_tag_stays() {
        let f = build(&format!("unmatched = \"drop\"\n{RULES}")).unwrap();
        let (stay, moved) = run(
            &*f,
            "app.api",
            &[
                ev(0, &[("level", "debug".into())]),
                ev(1, &[("level", "warn".into())]),
            ],
        );
        assert_eq!(stay, Some(vec![]));
        assert_eq!(moved, [("alert.warn.api".to_string(), vec![1])]);
        // A rule whose tag is the event's own keeps it in the batch.
        let f = build("[[rule]]\nkey = \"a\"\npattern = \"x\"\ntag = \"${tag}\"\n").unwrap();
        assert_eq!(
            run(&*f, "t", &[ev(0, &[("a", "x".into())])]),
            (None, vec![])
        );
    }

    #[test]
    fn strings_only_rules_do_not_match_numbers() {
        let rules = |strings_only: bool| {
            format!("[[rule]]\nkey = \"$.http.status\"\npattern = \"^5\\\\d\\\\d$\"\ntag = \"alert\"\nstrings_only = {strings_only}\n")
        };
        let http = |c: Value| Value::Map(vec![("status".into(), c)]);
        let records = [
            ev(0, &[("http", http(503.into()))]),
            ev(1, &[("http", http("503".into()))]),
            ev(2, &[("http", http(Value::Boolean(true)))]),
        ];
        // Fluentd's way (the default): the number's text matches.
        let f = build(&rules(false)).unwrap();
        let (stay, moved) = run(&*f, "t", &records);
        assert_eq!(stay, Some(vec![2]));
        assert_eq!(moved, [("alert".to_string(), vec![0, 1])]);
        // Fluent Bit's: only the string does.
        let f = build(&rules(true)).unwrap();
        let (stay, moved) = run(&*f, "t", &records);
        assert_eq!(stay, Some(vec![0, 2]));
        assert_eq!(moved, [("alert".to_string(), vec![1])]);
    }

    #[test]
    fn kept_events_go_to_the_new_tag_and_stay() {
        let f = build(
            "[[rule]]\nkey = \"level\"\npattern = \"^error$\"\ntag = \"alert.${tag}\"\nkeep = true\n",
        )
        .unwrap();
        let err = || ev(0, &[("level", "error".into())]);
        // The first event is kept: no whole-batch move.
        let (stay, moved) = run(
            &*f,
            "app",
            &[
                err(),
                ev(1, &[("level", "info".into())]),
                ev(2, &[("level", "error".into())]),
            ],
        );
        assert_eq!(stay, Some(vec![0, 1, 2]));
        assert_eq!(moved, [("alert.app".to_string(), vec![0, 2])]);
        let (stay, moved) = run(&*f, "app", &[err(), err()]);
        assert_eq!(stay, Some(vec![0, 0]));
        assert_eq!(moved, [("alert.app".to_string(), vec![0, 0])]);
    }

    #[test]
    fn a_batch_that_goes_whole_to_one_tag_is_not_copied() {
        let f = build(RULES).unwrap();
        let warn = |i| ev(i, &[("level", "warn".into())]);
        let out = {
            let mut e = Vec::new();
            for i in 0..3 {
                write_entry(&mut e, EventTime::new(1, 0), &warn(i));
            }
            let out = f.filter("app.api", &[Bytes::from(e)], 3);
            (out.tag, out.batch.is_none(), out.moved.len())
        };
        assert_eq!(out, (Some("alert.warn.api".to_string()), true, 0));
        // One tag for a while, then another: the first ones become a group.
        let debug = |i| ev(i, &[("level", "debug".into())]);
        assert_eq!(
            run(
                &*f,
                "app.api",
                &[
                    warn(0),
                    warn(1),
                    debug(2),
                    warn(3),
                    ev(4, &[("level", "info".into())])
                ]
            ),
            (
                Some(vec![2]),
                vec![
                    ("alert.warn.api".to_string(), vec![0, 1, 3]),
                    ("kept.api".to_string(), vec![4])
                ]
            )
        );
        // Every event dropped: an empty batch.
        let f = build(&format!("unmatched = \"drop\"\n{RULES}")).unwrap();
        let out = f.filter(
            "app.api",
            &[{
                let mut e = Vec::new();
                write_entry(&mut e, EventTime::new(1, 0), &debug(0));
                Bytes::from(e)
            }],
            1,
        );
        assert_eq!((out.tag, out.batch.map(|b| b.1)), (None, Some(0)));
    }

    #[test]
    fn bad_rules_name_their_key() {
        let err = |t: &str| build(t).err().unwrap();
        let e = err("[[rule]]\nkey = \"a\"\npattern = \"(x\"\ntag = \"t\"\n");
        assert_eq!(e.key, "rule[0].pattern");
        let e = err("[[rule]]\nkey = \"a\"\npattern = \"(x)\"\ntag = \"t.$2\"\n");
        assert_eq!(e.key, "rule[0].tag");
        assert!(e.message.contains("1 capture group"), "{e}");
        let e = err("[[rule]]\nkey = \"a\"\npattern = \"(x)\"\ninvert = true\ntag = \"t.$1\"\n");
        assert!(e.message.contains("inverted"), "{e}");
        let e = err("[[rule]]\nkey = \"a\"\npattern = \"x\"\ntag = \"${tags}\"\n");
        assert!(
            e.message.contains("unknown template variable `${tags}`"),
            "{e}"
        );
        let e = err("[[rule]]\nkey = \"$.\"\npattern = \"x\"\ntag = \"t\"\n");
        assert_eq!(e.key, "rule[0].key");
        assert_eq!(err("rule = []\n").key, "rule");
    }
}
