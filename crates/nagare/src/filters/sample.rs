//! `sample`: keeps a share of the events (Vector's sample): 1 in `rate`,
//! or a `ratio`. With `key`, by the hash of that field's value, so the
//! same value is always kept or always dropped (all of a request's or
//! trace's events together); otherwise by counting, evenly. Events that
//! match an `exclude` rule (errors, say) are always kept.
//!
//! The share is a fraction n/d in lowest terms (`rate = N`: 1/N; `ratio`:
//! its millionths). By hash, an event is kept when XXH3-64 (seed 0) of
//! its key field's text, mod d, is below n: n/d of the distinct values on
//! average. By counting, the k-th event counted (from 0) is kept when
//! k·n mod d is below n: exactly n of every d, spread evenly.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use bytes::Bytes;
use nagare_core::filter::FilterPlugin;
use nagare_core::filter::{Filter, Filtered};
use nagare_core::plugin::{BuildContext, OptionError};
use nagare_core::record::{value_text, FieldPath, Fields, Span};
use regex_automata::meta;
use serde::Deserialize;
use xxhash_rust::xxh3::xxh3_64;

use super::common::rules::{rules, GrepRule, Rule};
use super::common::search::CachePool;

#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SampleConfig {
    /// Keep 1 event in `rate` (`rate = 10` keeps a tenth). Give `rate` or
    /// `ratio`, not both.
    #[serde(default)]
    pub rate: Option<u64>,
    /// Keep this share of the events, from 0.000001 to 1 (`ratio = 0.25`
    /// keeps a quarter); read to six decimal places.
    #[serde(default)]
    pub ratio: Option<f64>,
    /// A field (`name` or `$.a.b`) whose value decides: an event is kept
    /// when the XXH3-64 hash (seed 0) of its text (a str as its bytes, a
    /// number as its JSON text), taken modulo d, is below n, the share in
    /// lowest terms n/d. So the same value is always kept or always
    /// dropped, in every run and on every host. Events without the field
    /// are sampled by counting. Default: every event by counting (exactly
    /// 1 in `rate`, the first kept).
    #[serde(default)]
    pub key: Option<String>,
    /// `[[filter.exclude]]`: rules (`key`, `pattern`, as grep's) that keep
    /// an event whatever the sampling: one matching rule is enough, and
    /// the event does not count toward the sampled ones.
    #[serde(default)]
    pub exclude: Vec<GrepRule>,
}

impl FilterPlugin for SampleConfig {
    const TYPE: &'static str = "sample";
    const DOC: &'static str = "Keeps 1 in `rate` or a `ratio` of the events, by counting or, with `key`, by a stable hash of a field (the same value always kept or always dropped), like Vector's sample; events matching `[[filter.exclude]]` rules are always kept. Dropped events count as `dropped_events_total` of the filter.";

    fn build(self, _cx: &mut BuildContext) -> Result<Box<dyn Filter>, OptionError> {
        Ok(Box::new(self.sample()?))
    }
}

impl SampleConfig {
    /// Checks the options and makes the filter.
    fn sample(self) -> Result<Sample, OptionError> {
        let share = match (self.rate, self.ratio) {
            (Some(_), Some(_)) => {
                return Err(OptionError::new(
                    "ratio",
                    "give `rate` or `ratio`, not both",
                ))
            }
            (None, None) => return Err(OptionError::new(
                "",
                "a sample filter needs `rate` (keep 1 in N) or `ratio` (keep a share, e.g. 0.1)",
            )),
            (Some(0), None) => {
                return Err(OptionError::new(
                    "rate",
                    "must be at least 1 (1 keeps every event)",
                ))
            }
            (Some(n), None) => Share::new(1, n),
            (None, Some(r)) => {
                if !(r > 0.0 && r <= 1.0) {
                    return Err(OptionError::new(
                        "ratio",
                        format!("{r} is not a share: write a number above 0 and at most 1"),
                    ));
                }
                let millionths = (r * 1e6).round() as u64;
                if millionths == 0 {
                    return Err(OptionError::new(
                        "ratio",
                        format!("{r} is below the smallest share, 0.000001"),
                    ));
                }
                Share::new(millionths, 1_000_000)
            }
        };
        let mut fields = Fields::default();
        let exclude = rules("exclude", &self.exclude, &mut fields)?;
        let key = match &self.key {
            None => None,
            Some(k) => {
                Some(fields.add(&FieldPath::parse(k).map_err(|e| OptionError::new("key", e))?))
            }
        };
        Ok(Sample {
            share,
            key,
            exclude,
            fields,
            counted: AtomicU64::new(0),
            caches: CachePool::default(),
        })
    }
}

/// A share of events, n/d in lowest terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Share {
    n: u64,
    d: u64,
}

impl Share {
    fn new(n: u64, d: u64) -> Share {
        let (mut a, mut b) = (n, d);
        while b != 0 {
            (a, b) = (b, a % b);
        }
        Share { n: n / a, d: d / a }
    }

    /// Whether the `k`-th event sampled by counting (from 0) is kept: k·n
    /// mod d runs through every remainder once in any d consecutive counts
    /// (n and d have no common factor), so exactly n of them are below n,
    /// spread evenly (3/10 keeps counts 0, 4 and 7 of each ten).
    fn keeps_count(self, k: u64) -> bool {
        let (n, d) = (u128::from(self.n), u128::from(self.d));
        u128::from(k) * n % d < n
    }

    /// Whether an event whose key field's text is `text` is kept: by its
    /// XXH3-64 hash (seed 0), which is spread evenly over the u64 range.
    fn keeps_hash(self, text: &[u8]) -> bool {
        xxh3_64(text) % self.d < self.n
    }
}

struct Sample {
    share: Share,
    /// The `key` field among `fields`.
    key: Option<usize>,
    exclude: Vec<Rule>,
    /// The fields the rules and `key` read, found in the walk of each entry.
    fields: Fields,
    /// Events sampled by counting so far (shared by every input's task).
    counted: AtomicU64,
    /// The `exclude` rules' search caches, taken once per batch.
    caches: CachePool<Vec<meta::Cache>>,
}

impl Sample {
    fn keeps(
        &self,
        record: &[u8],
        spans: &[Span],
        scratch: &mut Vec<u8>,
        caches: &mut [meta::Cache],
    ) -> bool {
        let mut rules = self.exclude.iter().zip(caches);
        if rules.any(|(r, cache)| r.matches_at(record, spans, scratch, cache)) {
            return true;
        }
        match self.key.and_then(|k| spans[k]) {
            Some((a, b)) => self.share.keeps_hash(value_text(&record[a..b], scratch)),
            None => self.share.keeps_count(self.counted.fetch_add(1, Relaxed)),
        }
    }
}

impl Filter for Sample {
    fn filter(&self, _tag: &str, parts: &[Bytes], _count: u32) -> Filtered {
        let make = || self.exclude.iter().map(Rule::cache).collect();
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

    fn build(toml_text: &str) -> Result<Sample, OptionError> {
        toml::from_str::<SampleConfig>(toml_text).unwrap().sample()
    }

    fn batch(records: &[Value]) -> Bytes {
        let mut e = Vec::new();
        for r in records {
            let mut b = Vec::new();
            rmpv::encode::write_value(&mut b, r).unwrap();
            write_entry(&mut e, EventTime::new(1, 0), &b);
        }
        Bytes::from(e)
    }

    /// The seqs of the events kept out of `records` (each a map whose first
    /// field is its seq).
    fn kept(f: &Sample, records: &[Value]) -> Vec<i64> {
        let b = batch(records);
        let entries = match f
            .filter("t", std::slice::from_ref(&b), records.len() as u32)
            .batch
        {
            None => b,
            Some((k, n)) => {
                assert_eq!(nagare_core::record::entries(&k).count(), n as usize);
                k
            }
        };
        nagare_core::record::entries(&entries)
            .map(|(_, r, _)| {
                let v = rmpv::decode::read_value(&mut &r[..]).unwrap();
                v.as_map().unwrap()[0].1.as_i64().unwrap()
            })
            .collect()
    }

    fn ev(seq: i64, pairs: &[(&str, Value)]) -> Value {
        let mut m = vec![("seq".into(), seq.into())];
        m.extend(pairs.iter().map(|(k, v)| (Value::from(*k), v.clone())));
        Value::Map(m)
    }

    #[test]
    fn shares_are_in_lowest_terms_and_counting_is_exact_and_even() {
        assert_eq!(Share::new(300_000, 1_000_000), Share { n: 3, d: 10 });
        assert_eq!(Share::new(1, 7), Share { n: 1, d: 7 });
        let s = Share::new(3, 10);
        let kept: Vec<u64> = (0..20).filter(|&k| s.keeps_count(k)).collect();
        assert_eq!(kept, [0, 4, 7, 10, 14, 17]);
        for (n, d) in [(1, 1), (1, 3), (7, 9), (333_333, 1_000_000)] {
            let s = Share::new(n, d);
            for start in [0, 5, u64::MAX - 3 * s.d] {
                let window = (start..start + s.d).filter(|&k| s.keeps_count(k)).count();
                assert_eq!(window as u64, s.n, "{n}/{d} from {start}");
            }
        }
    }

    #[test]
    fn counting_keeps_one_in_rate_across_batches() {
        let f = build("rate = 3\n").unwrap();
        let evs: Vec<Value> = (0..7).map(|i| ev(i, &[])).collect();
        assert_eq!(kept(&f, &evs[..4]), [0, 3]);
        // The count goes on from the previous batch.
        assert_eq!(kept(&f, &evs[4..]), [6]);
        let f = build("ratio = 0.25\n").unwrap();
        let evs: Vec<Value> = (0..100).map(|i| ev(i, &[])).collect();
        assert_eq!(kept(&f, &evs).len(), 25);
    }

    #[test]
    fn a_key_keeps_or_drops_each_value_always_by_its_hash() {
        // The documented rule, computed here: kept when XXH3-64(text) % 4 == 0.
        let f = build("rate = 4\nkey = \"$.req.id\"\n").unwrap();
        let req = |id: &str| Value::Map(vec![("id".into(), id.into())]);
        let ids: Vec<String> = (0..200).map(|i| format!("r{i}")).collect();
        let evs: Vec<Value> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| ev(i as i64, &[("req", req(id))]))
            .collect();
        let want: Vec<i64> = (0..200)
            .filter(|&i| xxh3_64(ids[i as usize].as_bytes()).is_multiple_of(4))
            .collect();
        assert!(
            (30..70).contains(&want.len()),
            "about a quarter: {}",
            want.len()
        );
        assert_eq!(kept(&f, &evs), want);
        // Again, in another order and another filter: the same values kept.
        let g = build("rate = 4\nkey = \"$.req.id\"\n").unwrap();
        let mut back = evs.clone();
        back.reverse();
        let mut again = kept(&g, &back);
        again.reverse();
        assert_eq!(again, want);
        // A number reads as its JSON text; events without the field are counted.
        let f = build("ratio = 0.5\nkey = \"id\"\n").unwrap();
        let by_number = kept(&f, &[ev(0, &[("id", 42.into())])]).len();
        assert_eq!(by_number, usize::from(xxh3_64(b"42").is_multiple_of(2)));
        let f = build("rate = 2\nkey = \"id\"\n").unwrap();
        assert_eq!(kept(&f, &[ev(0, &[]), ev(1, &[]), ev(2, &[])]), [0, 2]);
    }

    #[test]
    fn excluded_events_are_always_kept_and_not_counted() {
        let f = build(
            "rate = 2\n[[exclude]]\nkey = \"level\"\npattern = \"^error$\"\n[[exclude]]\nkey = \"keep\"\npattern = \"yes\"\n",
        )
        .unwrap();
        let evs = [
            ev(0, &[]),
            ev(1, &[("level", "error".into())]),
            ev(2, &[]),
            ev(3, &[("keep", "yes".into())]),
            ev(4, &[("level", "info".into())]),
        ];
        // Counted: 0 (kept), 2 (dropped), 4 (kept).
        assert_eq!(kept(&f, &evs), [0, 1, 3, 4]);
        // ratio = 1 keeps everything: the batch goes on unchanged.
        let f = build("ratio = 1.0\nkey = \"level\"\n").unwrap();
        let b = batch(&evs);
        assert!(f.filter("t", &[b], 5).batch.is_none());
    }

    #[test]
    fn bad_options_name_their_key() {
        let err = |t: &str| build(t).err().unwrap();
        assert_eq!(err("rate = 0\n").key, "rate");
        assert_eq!(err("ratio = 1.5\n").key, "ratio");
        assert_eq!(err("ratio = 0.0\n").key, "ratio");
        assert_eq!(err("ratio = -0.1\n").key, "ratio");
        assert!(err("ratio = 0.0000001\n").message.contains("smallest"));
        assert!(err("ratio = nan\n").message.contains("not a share"));
        assert!(err("rate = 2\nratio = 0.5\n").message.contains("not both"));
        assert!(err("").message.contains("needs `rate`"));
        assert_eq!(err("rate = 2\nkey = \"$.\"\n").key, "key");
        let e = err("rate = 2\n[[exclude]]\nkey = \"a\"\npattern = \"(\"\n");
        assert_eq!(e.key, "exclude[0].pattern");
    }
}
