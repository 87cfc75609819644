//! `throttle`: a rate limit per group of events (Fluent Bit's throttle,
//! fluent-plugin-throttle): a token bucket for each distinct combination of
//! the `group_key` fields' values, `rate` events per `period` with room for
//! `burst`; the events over the limit are dropped or given `excess_tag`.
//!
//! The group's fields are read from the raw records (no record is decoded).
//! The buckets live in an LRU map bounded by `max_groups`: a new group past
//! that bound evicts the least recently seen one, whose bucket is forgotten
//! (it starts full again if that group comes back). Time comes from the
//! monotonic clock, once per batch; `Throttle::filter_at` takes it as an
//! argument so the unit tests drive the clock themselves.

use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use lru::LruCache;
use nagare_core::filter::FilterPlugin;
use nagare_core::filter::{Filter, Filtered};
use nagare_core::plugin::{serde_inline_default, BuildContext, OptionError};
use nagare_core::record::{value_text, FieldPath};
use nagare_core::units::Dur;
use serde::Deserialize;

use super::common::tag_template::{render, tag_template, Part};

#[serde_inline_default]
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThrottleConfig {
    /// The fields whose values make a group: `name` (a top-level key) or
    /// `$.a.b` (a nested one). Each distinct combination of their values
    /// has its own bucket; an event without one of the fields is in the
    /// group of that field missing (not the same as an empty value). Values
    /// compare as text (a str as its bytes, a number as its JSON text).
    /// None: one bucket for every event the filter selects.
    #[serde(default)]
    pub group_key: Vec<String>,
    /// Events a group may pass per `period`: the rate its bucket refills
    /// at, continuously (`rate = 100`, `period = "1m"`: one more event every
    /// 0.6 s). Required, at least 1.
    pub rate: u64,
    /// The time `rate` is counted over.
    #[serde_inline_default(Dur::secs(1))]
    pub period: Dur,
    /// The most events a group may pass at once after a quiet time: its
    /// bucket's size, full when the group is first seen. Default: `rate`.
    #[serde(default)]
    pub burst: Option<u64>,
    /// The most groups kept: a new group past it evicts
    /// the least recently seen one, so memory stays bounded whatever the
    /// fields hold. An evicted group that comes back starts with a full
    /// bucket.
    #[serde_inline_default(10_000)]
    pub max_groups: usize,
    /// Instead of dropping the events over the limit, give them this tag
    /// (`${tag}` and `${tag_parts[N]}` are the event's tag and its parts,
    /// e.g. "${tag}.throttled"); they go on through the later filters and
    /// to the output the new tag selects (a tag that comes out empty drops
    /// them). Default: they are dropped.
    #[serde(default)]
    pub excess_tag: Option<String>,
    /// Log a warning when a group goes over its limit, and a line when it
    /// is back under it: at its first event after a whole `period` without
    /// any over the limit, with the number that were over. So a group
    /// logs at most two lines per period, and one that stays over logs one.
    #[serde_inline_default(true)]
    pub log: bool,
}

impl FilterPlugin for ThrottleConfig {
    const TYPE: &'static str = "throttle";
    const DOC: &'static str = "Limits each group of events (by `group_key` fields) to `rate` events per `period` with a token bucket, like Fluent Bit's throttle; the excess is dropped or re-tagged with `excess_tag`. Events over the limit count as `throttled_events_total` of the filter (dropped ones also as `dropped_events_total`).";

    fn build(self, cx: &mut BuildContext) -> Result<Box<dyn Filter>, OptionError> {
        Ok(Box::new(self.throttle(cx)?))
    }
}

impl ThrottleConfig {
    /// Checks the options and makes the filter.
    fn throttle(self, cx: &BuildContext) -> Result<Throttle, OptionError> {
        if self.rate == 0 {
            return Err(OptionError::new(
                "rate",
                "must be at least 1 (events per period)",
            ));
        }
        if self.period.0.is_zero() {
            return Err(OptionError::new("period", "must be longer than 0s"));
        }
        let burst = self.burst.unwrap_or(self.rate);
        if burst == 0 {
            return Err(OptionError::new("burst", "must be at least 1"));
        }
        let max_groups = NonZeroUsize::new(self.max_groups)
            .ok_or_else(|| OptionError::new("max_groups", "must be at least 1"))?;
        let group_key = self
            .group_key
            .iter()
            .enumerate()
            .map(|(i, k)| {
                FieldPath::parse(k).map_err(|e| OptionError::new(format!("group_key[{i}]"), e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let excess_tag = match &self.excess_tag {
            None => None,
            Some(t) => Some(excess_tag(t).map_err(|e| OptionError::new("excess_tag", e))?),
        };
        Ok(Throttle {
            name: cx.name.clone(),
            group_key,
            group_names: self.group_key,
            limit: Limit {
                per_second: self.rate as f64 / self.period.0.as_secs_f64(),
                burst: burst as f64,
                text: format!("{} events per {}", self.rate, self.period),
                period: self.period.0,
            },
            excess_tag,
            log: self.log,
            groups: Mutex::new(LruCache::new(max_groups)),
        })
    }
}

/// Reads `excess_tag`: a tag template without captures that cannot be
/// the event's own tag (the excess would then just stay).
fn excess_tag(t: &str) -> Result<Vec<Part>, String> {
    let parts = tag_template(t)?;
    if parts.iter().any(|p| matches!(p, Part::Capture(_))) {
        return Err(format!(
            "{t:?}: `$N` has no meaning here (no pattern, no capture groups)"
        ));
    }
    if parts.is_empty() {
        return Err("must not be empty".into());
    }
    if matches!(parts[..], [Part::Tag]) {
        let hint = "add a suffix, e.g. \"${tag}.throttled\"";
        return Err(format!("\"${{tag}}\" is the event's own tag: {hint}"));
    }
    Ok(parts)
}

/// A group's limit, the same for every group.
struct Limit {
    /// Tokens added per second.
    per_second: f64,
    /// The bucket's size.
    burst: f64,
    /// "10 events per 1h", for the log lines.
    text: String,
    /// `period`: a group whose events have all passed for this long is no
    /// longer throttled.
    period: Duration,
}

/// One group's token bucket.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    /// When `tokens` was last brought up to date.
    at: Instant,
    /// Events over the limit since the group began to be throttled; 0
    /// when it is not.
    over: u64,
    /// When the last of them came (meaningful when `over` > 0).
    last_over: Instant,
}

impl Bucket {
    fn full(limit: &Limit, now: Instant) -> Bucket {
        Bucket {
            tokens: limit.burst,
            at: now,
            over: 0,
            last_over: now,
        }
    }

    /// Refills for the time since the last event, then takes a token if
    /// there is one: whether the event passes.
    fn take(&mut self, limit: &Limit, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * limit.per_second).min(limit.burst);
        self.at = self.at.max(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

struct Throttle {
    /// The filter's name ("throttle#0"), for the log lines.
    name: String,
    group_key: Vec<FieldPath>,
    /// The fields as the user wrote them, for the log lines.
    group_names: Vec<String>,
    limit: Limit,
    excess_tag: Option<Vec<Part>>,
    log: bool,
    /// The buckets by group key (see `group_of`), least recently seen first out.
    groups: Mutex<LruCache<Vec<u8>, Bucket>>,
}

impl Throttle {
    /// Writes the group key of `record` into `key`: per field, 0 when it is
    /// missing, or 1, the text's length (4 bytes) and the text.
    fn group_of(&self, record: &[u8], key: &mut Vec<u8>, json: &mut Vec<u8>) {
        key.clear();
        for path in &self.group_key {
            match path.find(record) {
                None => key.push(0),
                Some((a, b)) => {
                    let text = value_text(&record[a..b], json);
                    key.push(1);
                    key.extend_from_slice(&(text.len() as u32).to_le_bytes());
                    key.extend_from_slice(text);
                }
            }
        }
    }

    /// The group key as the log lines show it: `{level="warn", app=missing}`.
    fn describe(&self, mut key: &[u8]) -> String {
        let mut fields = Vec::new();
        for name in &self.group_names {
            let value = match key.split_first() {
                Some((1, rest)) if rest.len() >= 4 => {
                    let len = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
                    let text = &rest[4..4 + len];
                    key = &rest[4 + len..];
                    format!("{:?}", String::from_utf8_lossy(text))
                }
                _ => {
                    key = key.get(1..).unwrap_or_default();
                    "missing".to_string()
                }
            };
            fields.push(format!("{name}={value}"));
        }
        format!("{{{}}}", fields.join(", "))
    }

    /// Whether the event of group `key` passes at `now`; logs when the
    /// group begins and ends being throttled (see `ThrottleConfig::log`).
    fn passes(
        &self,
        groups: &mut LruCache<Vec<u8>, Bucket>,
        key: &[u8],
        tag: &str,
        now: Instant,
    ) -> bool {
        let bucket = groups.get_or_insert_mut_ref(key, || Bucket::full(&self.limit, now));
        let passes = bucket.take(&self.limit, now);
        if !passes {
            if bucket.over == 0 && self.log {
                let group = self.describe(key);
                let excess = match self.excess_tag {
                    Some(_) => "re-tagged",
                    None => "dropped",
                };
                tracing::warn!(filter = %self.name, tag, %group, limit = %self.limit.text,
                    "throttle: group is over its limit; the excess is {excess}");
            }
            bucket.over += 1;
            bucket.last_over = now;
        } else if bucket.over > 0
            && now.saturating_duration_since(bucket.last_over) >= self.limit.period
        {
            if self.log {
                let group = self.describe(key);
                tracing::info!(filter = %self.name, tag, %group, over = bucket.over,
                    "throttle: group is under its limit again");
            }
            bucket.over = 0;
        }
        passes
    }

    /// The filter at time `now` (the monotonic clock's in `filter`).
    fn filter_at(&self, now: Instant, tag: &str, parts: &[Bytes]) -> Filtered {
        let (mut key, mut json) = (Vec::new(), Vec::new());
        let mut excess = Vec::new();
        let mut over = 0u32;
        // A panic elsewhere cannot leave a bucket half-updated: go on with it.
        let mut groups = self.groups.lock().unwrap_or_else(|e| e.into_inner());
        let batch = nagare_core::record::retain(parts, |record, entry| {
            self.group_of(record, &mut key, &mut json);
            let passes = self.passes(&mut groups, &key, tag, now);
            if !passes {
                over += 1;
                if self.excess_tag.is_some() {
                    excess.extend_from_slice(entry);
                }
            }
            passes
        });
        drop(groups);
        let mut moved = Vec::new();
        if let Some(t) = self.excess_tag.as_ref().filter(|_| over > 0) {
            let mut to = String::new();
            render(t, tag, None, &mut to);
            // A tag that came out empty (`${tag_parts[5]}` of a short tag)
            // routes nowhere: the excess is dropped, as rewrite_tag does.
            if !to.is_empty() {
                moved.push((to, Bytes::from(excess), over));
            }
        }
        Filtered {
            batch,
            moved,
            throttled: u64::from(over),
            ..Filtered::default()
        }
    }
}

impl Filter for Throttle {
    fn filter(&self, tag: &str, parts: &[Bytes], _count: u32) -> Filtered {
        self.filter_at(Instant::now(), tag, parts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nagare_forward::{write_entry, EventTime};
    use rmpv::Value;

    fn build(toml_text: &str) -> Result<Throttle, OptionError> {
        let cfg: ThrottleConfig = toml::from_str(toml_text).unwrap();
        cfg.throttle(&BuildContext::new("throttle#0"))
    }

    fn batch(records: &[(i64, &[(&str, Value)])]) -> Bytes {
        let mut e = Vec::new();
        for (seq, pairs) in records {
            let mut m = vec![(Value::from("seq"), Value::from(*seq))];
            m.extend(pairs.iter().map(|(k, v)| (Value::from(*k), v.clone())));
            let mut r = Vec::new();
            rmpv::encode::write_value(&mut r, &Value::Map(m)).unwrap();
            write_entry(&mut e, EventTime::new(1, 0), &r);
        }
        Bytes::from(e)
    }

    fn seqs(entries: &[u8]) -> Vec<i64> {
        nagare_core::record::entries(entries)
            .map(|(_, r, _)| {
                let v = rmpv::decode::read_value(&mut &r[..]).unwrap();
                v.as_map().unwrap()[0].1.as_i64().unwrap()
            })
            .collect()
    }

    /// The seqs kept (all of them when the batch went on unchanged).
    fn kept(f: &Throttle, now: Instant, b: &Bytes) -> Vec<i64> {
        let out = f.filter_at(now, "t", std::slice::from_ref(b));
        match out.batch {
            None => seqs(b),
            Some((k, n)) => {
                let s = seqs(&k);
                assert_eq!(s.len(), n as usize);
                s
            }
        }
    }

    #[test]
    fn the_bucket_refills_at_the_rate_up_to_the_burst() {
        let limit = Limit {
            per_second: 2.0,
            burst: 3.0,
            text: String::new(),
            period: Duration::from_secs(1),
        };
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut b = Bucket::full(&limit, t0);
        let taken: Vec<bool> = (0..4).map(|_| b.take(&limit, t0)).collect();
        assert_eq!(taken, [true, true, true, false]);
        // Half a second adds one token (2 per second).
        assert!(!b.take(&limit, at(250)));
        assert!(b.take(&limit, at(500)));
        assert!(!b.take(&limit, at(500)));
        // A long quiet time fills the bucket to its burst, no more.
        let taken = (0..4).filter(|_| b.take(&limit, at(60_000))).count();
        assert_eq!(taken, 3);
        // A time before the last (another thread's batch) adds nothing.
        assert!(!b.take(&limit, at(59_000)));
    }

    #[test]
    fn each_group_has_its_own_bucket_and_a_missing_field_is_a_group() {
        let f = build("group_key = [\"app\", \"$.k8s.ns\"]\nrate = 2\nperiod = \"1m\"\n").unwrap();
        let t0 = Instant::now();
        let ns = |n: &str| Value::Map(vec![("ns".into(), n.into())]);
        let b = batch(&[
            (0, &[("app", "web".into()), ("k8s", ns("a"))]),
            (1, &[("app", "web".into()), ("k8s", ns("a"))]),
            (2, &[("app", "web".into()), ("k8s", ns("a"))]),
            (3, &[("app", "web".into()), ("k8s", ns("b"))]),
            (4, &[("app", "db".into()), ("k8s", ns("a"))]),
            (5, &[("k8s", ns("a"))]),
            (6, &[("k8s", ns("a"))]),
            (7, &[("k8s", ns("a"))]),
            (8, &[("app", "".into()), ("k8s", ns("a"))]),
            (9, &[("app", 7.into()), ("k8s", ns("a"))]),
            (10, &[("app", "7".into()), ("k8s", ns("a"))]),
        ]);
        // web/a passes 2 of 3; a missing app is one group (2 of 3), apart
        // from an empty one; 7 and "7" read as the same text.
        assert_eq!(kept(&f, t0, &b), [0, 1, 3, 4, 5, 6, 8, 9, 10]);
        // The groups seen once have a token left.
        let out = f.filter_at(t0, "t", std::slice::from_ref(&b));
        assert_eq!(seqs(&out.batch.unwrap().0), [3, 4, 8]);
        assert_eq!(out.throttled, 8);
        // 31 s later each group has one token again (2 per minute).
        assert_eq!(
            kept(&f, t0 + Duration::from_secs(31), &b),
            [0, 3, 4, 5, 8, 9]
        );
    }

    #[test]
    fn a_group_is_throttled_until_a_whole_period_passes_without_excess() {
        let f = build("rate = 1\nperiod = \"10s\"\n").unwrap();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let over = |f: &Throttle| f.groups.lock().unwrap().peek(&[][..]).unwrap().over;
        let one = batch(&[(0, &[])]);
        let two = batch(&[(0, &[]), (1, &[])]);
        assert_eq!(kept(&f, at(0), &two), [0]);
        assert_eq!(over(&f), 1);
        assert_eq!(kept(&f, at(5), &one), Vec::<i64>::new());
        assert_eq!(over(&f), 2);
        // A token again, but the last excess was 7 s ago: still throttled.
        assert_eq!(kept(&f, at(12), &one), [0]);
        assert_eq!(over(&f), 2);
        assert_eq!(kept(&f, at(13), &one), Vec::<i64>::new());
        // A whole period since the last excess: the next passing event ends it.
        assert_eq!(kept(&f, at(23), &one), [0]);
        assert_eq!(over(&f), 0);
    }

    /// A writer for a test's log lines.
    #[derive(Clone, Default)]
    struct Lines(std::sync::Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn one_line_when_a_group_goes_over_and_one_when_it_is_back() {
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let f = build("group_key = [\"app\"]\nrate = 1\nperiod = \"10s\"\n").unwrap();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let app = [("app", Value::from("web"))];
        let web = |n: i64| (n, &app[..]);
        tracing::subscriber::with_default(subscriber, || {
            // Over at 0 s and 5 s (one line), a pass at 12 s (7 s after the
            // last excess: still throttled), back at 25 s, over again.
            kept(&f, at(0), &batch(&[web(0), web(1), web(2)]));
            kept(&f, at(5), &batch(&[web(3)]));
            kept(&f, at(12), &batch(&[web(4)]));
            kept(&f, at(25), &batch(&[web(5), web(6)]));
        });
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        let logged: Vec<&str> = text.lines().collect();
        assert_eq!(logged.len(), 3, "{text}");
        assert!(
            logged[0].contains("WARN")
                && logged[0].contains("throttle: group is over its limit; the excess is dropped")
                && logged[0].contains(r#"group={app="web"}"#)
                && logged[0].contains("limit=1 events per 10s"),
            "{text}"
        );
        assert!(
            logged[1].contains("INFO")
                && logged[1].contains("group is under its limit again")
                && logged[1].contains("over=3"),
            "{text}"
        );
        assert!(logged[2].contains("group is over its limit"), "{text}");
    }

    #[test]
    fn the_least_recently_seen_group_is_evicted_past_max_groups() {
        let f = build("group_key = [\"g\"]\nrate = 1\nperiod = \"1h\"\nmax_groups = 2\n").unwrap();
        let t0 = Instant::now();
        let ev = |seq: i64, g: &str| batch(&[(seq, &[("g", g.into())])]);
        assert_eq!(kept(&f, t0, &ev(0, "a")), [0]);
        assert_eq!(kept(&f, t0, &ev(1, "b")), [1]);
        assert_eq!(kept(&f, t0, &ev(2, "a")), Vec::<i64>::new(), "a is over");
        // c evicts b (a was seen last): b comes back with a full bucket, a stays empty.
        assert_eq!(kept(&f, t0, &ev(3, "c")), [3]);
        assert_eq!(kept(&f, t0, &ev(4, "b")), [4]);
        assert_eq!(kept(&f, t0, &ev(5, "a")), [5], "b's return evicted a");
        assert_eq!(f.groups.lock().unwrap().len(), 2);
    }

    #[test]
    fn the_excess_is_moved_to_the_excess_tag() {
        let f = build("rate = 1\nexcess_tag = \"${tag}.over.${tag_parts[0]}\"\n").unwrap();
        let t0 = Instant::now();
        let b = batch(&[(0, &[]), (1, &[]), (2, &[])]);
        let out = f.filter_at(t0, "app.web", std::slice::from_ref(&b));
        let (k, n) = out.batch.unwrap();
        assert_eq!((seqs(&k), n), (vec![0], 1));
        assert_eq!(out.moved.len(), 1);
        let (tag, e, n) = &out.moved[0];
        assert_eq!(
            (tag.as_str(), seqs(e), *n),
            ("app.web.over.app", vec![1, 2], 2)
        );
        assert_eq!(out.throttled, 2);
        // An excess tag that comes out empty drops the excess.
        let f2 = build("rate = 1\nexcess_tag = \"${tag_parts[3]}\"\n").unwrap();
        let out = f2.filter_at(t0, "app.web", std::slice::from_ref(&b));
        assert_eq!(out.batch.map(|(_, n)| n), Some(1));
        assert!(out.moved.is_empty());
        assert_eq!(out.throttled, 2);
        // Nothing over: the batch goes on unchanged, nothing moved.
        let one = batch(&[(3, &[])]);
        let out = f.filter_at(t0 + Duration::from_secs(5), "app.web", &[one]);
        assert!(out.batch.is_none() && out.moved.is_empty() && out.throttled == 0);
    }

    #[test]
    fn bad_options_name_their_key() {
        let err = |t: &str| build(t).err().unwrap();
        assert_eq!(err("rate = 0\n").key, "rate");
        assert_eq!(err("rate = 1\nperiod = \"0s\"\n").key, "period");
        assert_eq!(err("rate = 1\nburst = 0\n").key, "burst");
        assert_eq!(err("rate = 1\nmax_groups = 0\n").key, "max_groups");
        let e = err("rate = 1\ngroup_key = [\"a\", \"$.b..c\"]\n");
        assert_eq!(e.key, "group_key[1]");
        assert!(e.message.contains("is not a field"), "{e}");
        let e = err("rate = 1\nexcess_tag = \"${tag}\"\n");
        assert!(e.message.contains("own tag"), "{e}");
        assert!(err("rate = 1\nexcess_tag = \"x.$1\"\n")
            .message
            .contains("no capture"));
        assert!(err("rate = 1\nexcess_tag = \"${host}\"\n")
            .message
            .contains("unknown template variable"));
        assert!(
            toml::from_str::<ThrottleConfig>("period = \"1s\"\n").is_err(),
            "rate is required"
        );
    }
}
