//! `parser`: parses one string field of each record with a parser (the same
//! `[filter.parser]` as a tail input's `[input.parser]`) and replaces the
//! record by what it found, like Fluentd's filter_parser.
//!
//! Records are walked in msgpack; the parsed map is written into a scratch
//! buffer reused for the whole batch, then copied (merged with the original
//! record for `reserve_data`) into the one output buffer of the batch: no
//! allocation per event. A record whose field is missing, not a string, or
//! does not parse is kept as it was with a `parse_error` field (the reason)
//! and counted as an error of the filter: never dropped silently. With an
//! error label (`[system] error_label`) such records, marked the same way,
//! go to that label instead of on with the others.

use bytes::Bytes;
use nagare_core::filter::FilterPlugin;
use nagare_core::filter::{Filter, Filtered};
use nagare_core::plugin::{BuildContext, OptionError};
use nagare_forward::msgpack::{read_str_or_bin, write_map_len, write_str, write_str_header};
use serde::Deserialize;

use crate::parsers::{Parser, ParserConfig};

impl FilterPlugin for ParserFilterConfig {
    const TYPE: &'static str = "parser";
    const DOC: &'static str = "Parses one string field of each record with a parser, like Fluentd's filter_parser; `[filter.parser]` takes the options of `[input.parser]` (any type but `multiline`). A record whose field is missing, not a string or does not parse is kept as it was with a `parse_error` field (or, with `[system] error_label`, sent so to that label).";

    fn build(self, cx: &mut BuildContext) -> Result<Box<dyn Filter>, OptionError> {
        let mut f = ParserFilter::new(&self)?;
        f.failures_routed = cx.failures_routed;
        Ok(Box::new(f))
    }
}

#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ParserFilterConfig {
    /// The field whose text is parsed. Required.
    pub key_name: String,
    /// Keep the record's other fields next to the parsed ones (the parsed
    /// ones win when a name is in both) (default false: the record becomes
    /// the parsed fields only).
    #[serde(default)]
    pub reserve_data: bool,
    /// With `reserve_data`: drop `key_name` from the record when its text parsed.
    #[serde(default)]
    pub remove_key_name_field: bool,
    /// Keep the event's time even when the parser found one in the text
    /// (default false: the parsed time replaces it).
    #[serde(default)]
    pub reserve_time: bool,
    /// A prefix added to the names of the parsed fields (default none).
    #[serde(default)]
    pub inject_key_prefix: String,
    /// Put the parsed fields in a map under this key instead of at the top
    /// level of the record (default none).
    #[serde(default)]
    pub hash_value_field: String,
    /// `[filter.parser]`: how the field's text is read (any parser type but
    /// "multiline"). Required.
    pub parser: ParserConfig,
}

pub struct ParserFilter {
    cfg: ParserFilterConfig,
    parser: Parser,
    /// Records that do not parse go to the error label (`Filtered::failed`).
    failures_routed: bool,
}

/// The field added to a record that could not be parsed.
const PARSE_ERROR: &[u8] = b"parse_error";

impl ParserFilter {
    pub fn new(cfg: &ParserFilterConfig) -> Result<ParserFilter, OptionError> {
        if cfg.parser.kind == crate::parsers::ParserType::Multiline {
            return Err(OptionError::new(
                "parser.type",
                "a parser filter parses one field of one event; \"multiline\" joins lines and only works in a tail or directory input",
            ));
        }
        if cfg.key_name.is_empty() {
            return Err(OptionError::new("key_name", "must name the field to parse"));
        }
        crate::parsers::check_options("parser", &cfg.parser)?;
        let parser =
            Parser::new(&cfg.parser).map_err(|e| OptionError::new("parser", format!("{e:#}")))?;
        Ok(ParserFilter {
            cfg: cfg.clone(),
            parser,
            failures_routed: false,
        })
    }

    /// Writes one `[time, record]` entry for the event (`time` is the raw
    /// msgpack time, `record` the raw map) into `out`; false when the event
    /// kept its record with a `parse_error`.
    fn one(&self, time: &[u8], record: &[u8], out: &mut Vec<u8>, s: &mut Scratch) -> bool {
        out.push(0x92);
        if pairs(record, &mut s.record).is_none() {
            // Inputs only pass maps on; should one not be, it goes on as it was.
            out.extend_from_slice(time);
            out.extend_from_slice(record);
            return false;
        }
        let key_name = self.cfg.key_name.as_bytes();
        let value = s
            .record
            .iter()
            .find(|p| p.key_is(record, key_name))
            .map(|p| read_str_or_bin(record, p.value));
        let text = match value {
            Some(Ok(Some((a, b)))) => &record[a..b],
            Some(_) => {
                out.extend_from_slice(time);
                let why = b"the field to parse is not a string";
                return keep(record, &mut s.record, why, out);
            }
            None => {
                out.extend_from_slice(time);
                return keep(record, &mut s.record, b"the field to parse is missing", out);
            }
        };
        s.parsed.clear();
        let parsed = self.parser.parse_with(text, &[], &mut s.parsed);
        if !parsed.ok || pairs(&s.parsed, &mut s.fields).is_none() {
            out.extend_from_slice(time);
            // The parser wrote {message_key: text, parse_error: reason}.
            let reason = nagare_core::record::field(&s.parsed, PARSE_ERROR)
                .filter(|r| !r.is_empty())
                .unwrap_or(b"the field does not parse");
            return keep(record, &mut s.record, reason, out);
        }
        match parsed.time {
            Some(t) if !self.cfg.reserve_time => out.extend_from_slice(&t.to_bytes()),
            _ => out.extend_from_slice(time),
        }
        self.compose(record, &mut s.record, &s.parsed, &s.fields, out);
        true
    }

    /// Writes the new record: the parsed fields (`fields`, the pairs of the
    /// map `parsed`), with their prefix or under hash_value_field, after the
    /// record's own fields (`own`, the pairs of `record`) for reserve_data.
    fn compose(
        &self,
        record: &[u8],
        own: &mut [Pair],
        parsed: &[u8],
        fields: &[Pair],
        out: &mut Vec<u8>,
    ) {
        let prefix = self.cfg.inject_key_prefix.as_bytes();
        let hvf = self.cfg.hash_value_field.as_bytes();
        let added = if hvf.is_empty() { fields.len() } else { 1 };
        if self.cfg.reserve_data {
            let key_name = self.cfg.key_name.as_bytes();
            // The record's fields give way to those the parse brings.
            let replaced = |k: &[u8]| {
                if self.cfg.remove_key_name_field && k == key_name {
                    return true;
                }
                if !hvf.is_empty() {
                    return k == hvf;
                }
                // Lengths first: most keys differ there, without a memcmp call.
                fields.iter().any(|f| {
                    let pk = f.key(parsed);
                    f.str_key
                        && k.len() == prefix.len() + pk.len()
                        && (prefix.is_empty() || k.starts_with(prefix))
                        && &k[prefix.len()..] == pk
                })
            };
            copy_pairs(record, own, added, out, replaced);
        } else {
            write_map_len(out, added);
        }
        if !hvf.is_empty() {
            write_str(out, hvf);
            write_map_len(out, fields.len());
        }
        for f in fields {
            if f.str_key && !prefix.is_empty() {
                write_str_parts(out, prefix, f.key(parsed));
            } else {
                out.extend_from_slice(&parsed[f.start..f.value]);
            }
            out.extend_from_slice(&parsed[f.value..f.end]);
        }
    }
}

/// Buffers reused for every event of a batch.
#[derive(Default)]
struct Scratch {
    /// The parser's map.
    parsed: Vec<u8>,
    /// Its pairs.
    fields: Vec<Pair>,
    /// The pairs of the event's record.
    record: Vec<Pair>,
}

impl Filter for ParserFilter {
    fn filter(&self, _tag: &str, parts: &[Bytes], _count: u32) -> Filtered {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let mut out = Vec::with_capacity(len + len / 4 + 64);
        let mut scratch = Scratch::default();
        let mut errors = 0u64;
        let mut count = 0u32;
        // The marked records, when they go to the error label.
        let mut failed = Vec::new();
        for part in parts {
            for (_, record, entry) in nagare_core::record::entries(part) {
                // entry = 0x92, time, record
                let time = &entry[1..entry.len() - record.len()];
                let at = out.len();
                if self.one(time, record, &mut out, &mut scratch) {
                    count += 1;
                    continue;
                }
                errors += 1;
                if self.failures_routed {
                    failed.extend_from_slice(&out[at..]);
                    out.truncate(at);
                } else {
                    count += 1;
                }
            }
        }
        let failed_count = if self.failures_routed {
            errors as u32
        } else {
            0
        };
        Filtered {
            batch: Some((Bytes::from(out), count)),
            errors,
            failed: (failed_count > 0).then(|| (Bytes::from(failed), failed_count)),
            ..Filtered::default()
        }
    }
}

/// Writes `record` (whose pairs are `own`) unchanged but for a
/// `parse_error` field holding `reason` (replacing one it may have had).
fn keep(record: &[u8], own: &mut [Pair], reason: &[u8], out: &mut Vec<u8>) -> bool {
    copy_pairs(record, own, 1, out, |k| k == PARSE_ERROR);
    write_str(out, PARSE_ERROR);
    write_str(out, reason);
    false
}

/// One key/value pair of a msgpack map, by positions in the map's bytes.
#[derive(Debug, Clone, Copy)]
struct Pair {
    /// Where the key starts.
    start: usize,
    /// The key's text (a str or bin key; empty for other keys).
    text: (usize, usize),
    str_key: bool,
    /// Where the value starts and ends.
    value: usize,
    end: usize,
    /// Left out of the record being written (see `copy_pairs`).
    dropped: bool,
}

impl Pair {
    fn key<'a>(&self, map: &'a [u8]) -> &'a [u8] {
        &map[self.text.0..self.text.1]
    }

    fn key_is(&self, map: &[u8], k: &[u8]) -> bool {
        self.str_key && self.key(map) == k
    }
}

/// Reads the pairs of the map at the start of `map` into `out` (cleared
/// first); `None` when it is not a well-formed map.
fn pairs(map: &[u8], out: &mut Vec<Pair>) -> Option<()> {
    out.clear();
    let (n, mut p) = nagare_core::record::map_at(map, 0)?;
    for _ in 0..n {
        let pair = nagare_core::record::pair_at(map, p)?;
        out.push(Pair {
            start: p,
            text: pair.key.unwrap_or((p, p)),
            str_key: pair.key.is_some(),
            value: pair.value,
            end: pair.end,
            dropped: false,
        });
        p = pair.end;
    }
    Some(())
}

/// Writes a map header for the pairs of `record` (its pairs are `own`)
/// whose key `drop` refuses, plus `added` more, then those pairs as they
/// are; the caller writes the added pairs.
fn copy_pairs(
    record: &[u8],
    own: &mut [Pair],
    added: usize,
    out: &mut Vec<u8>,
    drop: impl Fn(&[u8]) -> bool,
) {
    // Decide once per pair: the header needs the count before the pairs.
    let mut kept = 0;
    for p in own.iter_mut() {
        p.dropped = p.str_key && drop(p.key(record));
        kept += usize::from(!p.dropped);
    }
    write_map_len(out, kept + added);
    for p in own.iter().filter(|p| !p.dropped) {
        out.extend_from_slice(&record[p.start..p.end]);
    }
}

/// Writes the str `a` + `b` without joining them first.
fn write_str_parts(out: &mut Vec<u8>, a: &[u8], b: &[u8]) {
    write_str_header(out, a.len() + b.len());
    out.extend_from_slice(a);
    out.extend_from_slice(b);
}

#[cfg(test)]
mod tests {
    use super::*;
    use nagare_forward::{write_entry, EventTime};
    use rmpv::Value;

    const T0: EventTime = EventTime {
        secs: 1_700_000_000,
        nanos: 5,
    };

    fn filter(toml_text: &str) -> ParserFilter {
        let cfg: ParserFilterConfig = toml::from_str(toml_text).unwrap();
        ParserFilter::new(&cfg).unwrap()
    }

    fn rec(pairs: &[(&str, Value)]) -> Vec<u8> {
        let v = Value::Map(
            pairs
                .iter()
                .map(|(k, v)| (Value::from(*k), v.clone()))
                .collect(),
        );
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, &v).unwrap();
        out
    }

    /// Runs the filter over one entry per record (in two parts, so batches
    /// of several parts are covered); returns (time, record) per event and
    /// the error count.
    fn run(f: &ParserFilter, records: &[Vec<u8>]) -> (Vec<(EventTime, Value)>, u64) {
        let mut a = Vec::new();
        let mut b = Vec::new();
        for (i, r) in records.iter().enumerate() {
            write_entry(
                if i < records.len() / 2 {
                    &mut a
                } else {
                    &mut b
                },
                T0,
                r,
            );
        }
        let parts = [Bytes::from(a), Bytes::from(b)];
        let out = f.filter("t", &parts, records.len() as u32);
        let (bytes, n) = out.batch.expect("a new batch");
        assert_eq!(n as usize, records.len());
        assert!(out.tag.is_none());
        let evs: Vec<_> = nagare_core::record::entries(&bytes)
            .map(|(t, r, _)| (t, rmpv::decode::read_value(&mut &r[..]).unwrap()))
            .collect();
        assert_eq!(evs.len(), records.len(), "every event comes out");
        (evs, out.errors)
    }

    fn one(f: &ParserFilter, record: Vec<u8>) -> (EventTime, Value, u64) {
        let (mut evs, errors) = run(f, &[record]);
        let (t, v) = evs.remove(0);
        (t, v, errors)
    }

    fn map(pairs: &[(&str, Value)]) -> Value {
        rmpv::decode::read_value(&mut &rec(pairs)[..]).unwrap()
    }

    const JSON: &str = "key_name = \"message\"\n[parser]\ntype = \"json\"\n";
    const LINE: &str = r#"{"time":"2026-11-22T01:02:03Z","level":"warn","n":3}"#;

    fn input() -> Vec<u8> {
        rec(&[
            ("message", LINE.into()),
            ("host", "h1".into()),
            ("level", "info".into()),
        ])
    }

    #[test]
    fn with_failures_routed_unparsed_records_leave_the_batch_marked() {
        let mut f = filter(JSON);
        f.failures_routed = true;
        let bad = rec(&[("message", "not json".into()), ("seq", 1.into())]);
        let mut entries = Vec::new();
        for r in [input(), bad, input()] {
            write_entry(&mut entries, T0, &r);
        }
        let out = f.filter("t", &[Bytes::from(entries)], 3);
        let (kept, n) = out.batch.expect("a new batch");
        assert_eq!((n, out.errors), (2, 1));
        assert_eq!(nagare_core::record::entries(&kept).count(), 2);
        let (failed, fn_) = out.failed.expect("the failed event");
        assert_eq!(fn_, 1);
        let evs: Vec<_> = nagare_core::record::entries(&failed)
            .map(|(t, r, _)| (t, rmpv::decode::read_value(&mut &r[..]).unwrap()))
            .collect();
        assert_eq!(evs.len(), 1);
        assert_eq!(evs[0].0, T0);
        let pe = evs[0]
            .1
            .as_map()
            .unwrap()
            .iter()
            .find(|(k, _)| k.as_str() == Some("parse_error"));
        assert!(pe.is_some(), "marked with parse_error: {:?}", evs[0].1);
        // A batch that all parses has nothing failed.
        let mut entries = Vec::new();
        write_entry(&mut entries, T0, &input());
        assert!(f.filter("t", &[Bytes::from(entries)], 1).failed.is_none());
    }

    #[test]
    fn parsed_fields_replace_the_record_and_the_time() {
        let (t, v, e) = one(&filter(JSON), input());
        assert_eq!(e, 0);
        assert_eq!(v, map(&[("level", "warn".into()), ("n", 3.into())]));
        assert_eq!(t, EventTime::new(1_795_309_323, 0));
    }

    #[test]
    fn reserve_time_keeps_the_event_time() {
        let f = filter(&format!("reserve_time = true\n{JSON}"));
        let (t, v, _) = one(&f, input());
        assert_eq!(t, T0);
        assert_eq!(v, map(&[("level", "warn".into()), ("n", 3.into())]));
        // Without a time in the text the event keeps its time, whatever its form.
        let f = filter(JSON);
        let (t, _, _) = one(&f, rec(&[("message", r#"{"a":1}"#.into())]));
        assert_eq!(t, T0);
    }

    #[test]
    fn reserve_data_keeps_other_fields_and_parsed_ones_win() {
        let f = filter(&format!("reserve_data = true\n{JSON}"));
        let (_, v, _) = one(&f, input());
        assert_eq!(
            v,
            map(&[
                ("message", LINE.into()),
                ("host", "h1".into()),
                ("level", "warn".into()),
                ("n", 3.into()),
            ])
        );
        let f = filter(&format!(
            "reserve_data = true\nremove_key_name_field = true\n{JSON}"
        ));
        let (_, v, _) = one(&f, input());
        assert_eq!(
            v,
            map(&[
                ("host", "h1".into()),
                ("level", "warn".into()),
                ("n", 3.into())
            ])
        );
        // remove_key_name_field alone changes nothing: the record is the parsed one.
        let f = filter(&format!("remove_key_name_field = true\n{JSON}"));
        let (_, v, _) = one(&f, input());
        assert_eq!(v, map(&[("level", "warn".into()), ("n", 3.into())]));
    }

    #[test]
    fn values_of_every_type_are_copied_whole() {
        let f = filter(&format!("reserve_data = true\n{JSON}"));
        let own = [
            ("u8", Value::from(200u8)),
            ("u16", Value::from(300u16)),
            ("u32", Value::from(70_000u32)),
            ("u64", Value::from(1u64 << 40)),
            ("neg", Value::from(-3i64)),
            ("i8", Value::from(-100i64)),
            ("i16", Value::from(-1000i64)),
            ("i32", Value::from(-100_000i64)),
            ("i64", Value::from(-(1i64 << 40))),
            ("f32", Value::F32(1.5)),
            ("f64", Value::F64(-2.25)),
            ("nil", Value::Nil),
            ("yes", Value::Boolean(true)),
            ("bin", Value::Binary(vec![0, 1, 2])),
            ("long", "y".repeat(300).into()),
            ("ext", Value::Ext(5, vec![1, 2, 3, 4])),
            ("arr", Value::Array(vec![1.into(), "a".into(), Value::Nil])),
            ("map", map(&[("k", Value::Array(vec![]))])),
        ];
        let mut pairs: Vec<(&str, Value)> = own.to_vec();
        pairs.push(("message", r#"{"x":[1,{"y":null}]}"#.into()));
        let (_, v, e) = one(&f, rec(&pairs));
        assert_eq!(e, 0);
        let mut want = own.to_vec();
        want.push(("message", r#"{"x":[1,{"y":null}]}"#.into()));
        want.push(("x", Value::Array(vec![1.into(), map(&[("y", Value::Nil)])])));
        assert_eq!(v, map(&want));
        // A non-string key in the record is kept too.
        let odd = Value::Map(vec![
            (Value::from(7), "seven".into()),
            ("message".into(), "{}".into()),
        ]);
        let (_, v, _) = one(&f, rec_of(&odd));
        assert_eq!(v, odd);
    }

    #[test]
    fn inject_key_prefix_and_hash_value_field() {
        let f = filter(&format!("inject_key_prefix = \"p_\"\n{JSON}"));
        let (_, v, _) = one(&f, input());
        assert_eq!(v, map(&[("p_level", "warn".into()), ("p_n", 3.into())]));

        let f = filter(&format!("hash_value_field = \"parsed\"\n{JSON}"));
        let (_, v, _) = one(&f, input());
        assert_eq!(
            v,
            map(&[("parsed", map(&[("level", "warn".into()), ("n", 3.into())]))])
        );

        // Both, with reserve_data: the record keeps its "level".
        let f = filter(&format!(
            "reserve_data = true\ninject_key_prefix = \"p_\"\nhash_value_field = \"parsed\"\n{JSON}"
        ));
        let (_, v, _) = one(&f, input());
        assert_eq!(
            v,
            map(&[
                ("message", LINE.into()),
                ("host", "h1".into()),
                ("level", "info".into()),
                (
                    "parsed",
                    map(&[("p_level", "warn".into()), ("p_n", 3.into())])
                ),
            ])
        );

        // A prefix long enough to need a longer str header.
        let long = "x".repeat(40);
        let f = filter(&format!("inject_key_prefix = \"{long}\"\n{JSON}"));
        let (_, v, _) = one(&f, input());
        assert_eq!(
            v,
            map(&[
                (&format!("{long}level"), "warn".into()),
                (&format!("{long}n"), 3.into())
            ])
        );
    }

    #[test]
    fn records_that_do_not_parse_are_kept_with_parse_error() {
        let f = filter(&format!("reserve_data = true\n{JSON}"));
        let bad = rec(&[("message", "{not json".into()), ("seq", 7.into())]);
        let missing = rec(&[("log", "x".into()), ("seq", 8.into())]);
        let not_str = rec(&[("message", 42.into()), ("seq", 9.into())]);
        // A parse_error from an earlier filter is replaced, not doubled.
        let again = rec(&[("parse_error", "old".into()), ("message", "[1]".into())]);
        let good = input();
        let (evs, errors) = run(&f, &[bad, missing, not_str, again, good]);
        assert_eq!(errors, 4);
        let reason = |v: &Value| -> String {
            let m = v.as_map().unwrap();
            let hits: Vec<_> = m
                .iter()
                .filter(|(k, _)| k.as_str() == Some("parse_error"))
                .collect();
            assert_eq!(hits.len(), 1, "one parse_error in {v}");
            hits[0].1.as_str().unwrap().to_string()
        };
        let strip = |v: &Value| -> Value {
            Value::Map(
                v.as_map()
                    .unwrap()
                    .iter()
                    .filter(|(k, _)| k.as_str() != Some("parse_error"))
                    .cloned()
                    .collect(),
            )
        };
        assert_eq!(
            strip(&evs[0].1),
            map(&[("message", "{not json".into()), ("seq", 7.into())])
        );
        assert!(!reason(&evs[0].1).is_empty());
        assert_eq!(
            strip(&evs[1].1),
            map(&[("log", "x".into()), ("seq", 8.into())])
        );
        assert_eq!(reason(&evs[1].1), "the field to parse is missing");
        assert_eq!(
            strip(&evs[2].1),
            map(&[("message", 42.into()), ("seq", 9.into())])
        );
        assert_eq!(reason(&evs[2].1), "the field to parse is not a string");
        assert_eq!(strip(&evs[3].1), map(&[("message", "[1]".into())]));
        assert_ne!(reason(&evs[3].1), "old");
        assert!(evs[..4].iter().all(|(t, _)| *t == T0), "kept times");
        assert_eq!(evs[4].0, EventTime::new(1_795_309_323, 0));
    }

    #[test]
    fn other_parsers_work_too() {
        let f = filter(
            r#"key_name = "log"
[parser]
type = "regex"
expression = '^(?<code>\d+) (?<path>\S+)$'
types = { code = "integer" }
"#,
        );
        let (_, v, e) = one(&f, rec(&[("log", "404 /x".into())]));
        assert_eq!(e, 0);
        assert_eq!(v, map(&[("code", 404.into()), ("path", "/x".into())]));
        let (_, v, e) = one(&f, rec(&[("log", "nope".into())]));
        assert_eq!(e, 1);
        assert_eq!(
            nagare_core::record::field(&rec_of(&v), b"log"),
            Some(&b"nope"[..])
        );
    }

    fn rec_of(v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, v).unwrap();
        out
    }

    #[test]
    fn multiline_and_bad_parsers_are_refused() {
        let cfg: ParserFilterConfig = toml::from_str(
            "key_name = \"m\"\n[parser]\ntype = \"multiline\"\nformat_firstline = \"^x\"\n",
        )
        .unwrap();
        let e = ParserFilter::new(&cfg).err().unwrap().to_string();
        assert!(e.contains("multiline"), "{e}");
        assert!(toml::from_str::<ParserFilterConfig>(
            "key_name = \"m\"\n[parser]\ntype = \"regex\"\n"
        )
        .is_err());
        let cfg: ParserFilterConfig =
            toml::from_str("key_name = \"m\"\n[parser]\ntype = \"regex\"\nexpression = \"(x\"\n")
                .unwrap();
        let e = ParserFilter::new(&cfg).err().unwrap();
        assert_eq!(e.key, "parser.expression");
        assert!(toml::from_str::<ParserFilterConfig>("[parser]\ntype = \"json\"\n").is_err());
        assert!(toml::from_str::<ParserFilterConfig>("key_name = \"m\"\n").is_err());
    }
}
