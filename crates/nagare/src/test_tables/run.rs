//! Runs `[[test]]` tables: the config is built as `nagare check` builds it,
//! the real router and filters run over each test's events, and what each
//! output would receive (and what each filter passes on) is captured
//! instead of buffered: no socket is opened and no output is started.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use nagare_core::filter::{Filter, Filtered};
use nagare_core::metrics::Registry;
use nagare_forward::{write_entry, EventTime};
use serde_json::Value;

use crate::buffer::{Buffer, BufferConfig};
use crate::config::test_spec::{Check, Expect, Target, TestCase};
use crate::config::OutputTarget;
use crate::config::{self, Config, ConfigError};
use crate::router::OutputHandle;
use crate::router::{Outputs, Router};

/// An event as it arrived somewhere.
#[derive(Debug, Clone)]
pub struct Event {
    pub tag: String,
    pub time: EventTime,
    pub record: Value,
}

/// The result of one test: its name and, when it failed, why (one text
/// per expectation that failed).
#[derive(Debug)]
pub struct Outcome {
    pub name: String,
    pub failures: Vec<String>,
}

/// Loads `config_path` and the tests in it and in `test_files`, and runs
/// them all. Config errors (in any of the files) are returned as `check`
/// reports them.
pub fn run_files(
    config_path: &Path,
    test_files: &[std::path::PathBuf],
) -> Result<Vec<Outcome>, Vec<ConfigError>> {
    let cfg = config::load(config_path)?;
    let mut tests = cfg.tests;
    let mut errors = Vec::new();
    for f in test_files {
        match config::load_tests(f, &cfg.names) {
            Ok(t) => tests.extend(t),
            Err(e) => errors.extend(e),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let mut outcomes = Vec::new();
    for test in &tests {
        // A pipeline of its own per test: filters with state (counters,
        // rate limits) start afresh.
        let cfg = config::load(config_path)?;
        outcomes.push(Outcome {
            name: test.name.clone(),
            failures: run_one(cfg, test),
        });
    }
    Ok(outcomes)
}

/// Where events arrived: by output or filter.
type Captured = Arc<Mutex<HashMap<Target, Vec<Event>>>>;

/// A filter that records what the filter it wraps passes on.
struct Recorder {
    inner: Box<dyn Filter>,
    target: Target,
    log: Captured,
}

impl Filter for Recorder {
    fn filter(&self, tag: &str, parts: &[Bytes], count: u32) -> Filtered {
        let out = self.inner.filter(tag, parts, count);
        let mut seen = Vec::new();
        let tag = out.tag.as_deref().unwrap_or(tag);
        match &out.batch {
            Some((entries, _)) => decode(tag, entries, &mut seen),
            None => parts.iter().for_each(|p| decode(tag, p, &mut seen)),
        }
        for (t, entries, _) in &out.moved {
            decode(t, entries, &mut seen);
        }
        let mut log = self.log.lock().expect("capture");
        log.entry(self.target.clone()).or_default().extend(seen);
        out
    }
}

fn decode(tag: &str, entries: &[u8], out: &mut Vec<Event>) {
    for (time, record, _) in nagare_core::record::entries(entries) {
        let mut json = Vec::new();
        nagare_core::json::write_value(&mut json, record);
        out.push(Event {
            tag: tag.to_string(),
            time,
            record: serde_json::from_slice(&json).unwrap_or(Value::Null),
        });
    }
}

/// Runs one test on a freshly built config; returns its failures.
fn run_one(cfg: Config, test: &TestCase) -> Vec<String> {
    let log: Captured = Arc::default();
    let reg = Registry::default();
    // Outputs become handles that are never started: the test looks at
    // which ones a batch goes to.
    let mut names: Vec<(OutputHandle, String)> = Vec::new();
    let mut rules = Vec::new();
    for section in cfg.outputs {
        let stores = match section.target {
            OutputTarget::One(o) => vec![(section.name, o)],
            OutputTarget::Copy(stores) => stores
                .into_iter()
                .filter_map(|s| match s.target {
                    OutputTarget::One(o) => Some((s.name, o)),
                    OutputTarget::Copy(_) => None,
                })
                .collect(),
        };
        let handles: Vec<OutputHandle> = stores
            .into_iter()
            .map(|(name, o)| {
                let stats = reg.register("output", &name, "test");
                let h = Buffer::new(&name, BufferConfig::default(), stats, o, None, None);
                names.push((h.clone(), name));
                h
            })
            .collect();
        rules.push((section.label, section.patterns, Outputs::from(handles)));
    }
    let mut filter_sections = cfg.filters;
    let labels: Vec<Option<String>> = filter_sections.iter().map(|f| f.label.clone()).collect();
    for f in &mut filter_sections {
        let inner = std::mem::replace(&mut f.filter, Box::new(Passthrough));
        f.filter = Box::new(Recorder {
            inner,
            target: Target::Filter(f.name.clone()),
            log: log.clone(),
        });
    }
    let stages = crate::topology::stages(filter_sections, &reg);
    let router = Router::with_labels(
        rules,
        labels.into_iter().zip(stages).collect(),
        cfg.system.error_label.as_deref(),
    );
    let name_of = |h: &OutputHandle| {
        names
            .iter()
            .find(|(n, _)| Arc::ptr_eq(n, h))
            .map(|(_, name)| name.clone())
            .unwrap_or_default()
    };
    for input in &test.inputs {
        let view = router.in_label(input.label.as_deref());
        let time = input.time.unwrap_or_else(EventTime::now);
        let mut entries = Vec::new();
        for r in &input.records {
            let mut rec = Vec::new();
            nagare_core::json::msgpack_from_json(&Value::Object(r.clone()), &mut rec);
            write_entry(&mut entries, time, &rec);
        }
        let parts = [Bytes::from(entries)];
        let count = input.records.len() as u32;
        let route = view.route(&input.tag);
        let batches: Vec<(String, Outputs, Vec<Bytes>)> =
            match view.filter(&route, &input.tag, &parts, count) {
                None => vec![(input.tag.clone(), route.outputs.clone(), parts.to_vec())],
                Some(bs) => bs
                    .into_iter()
                    .filter(|b| b.count > 0)
                    .map(|b| (b.tag, b.route.outputs.clone(), b.parts))
                    .collect(),
            };
        let mut log = log.lock().expect("capture");
        for (tag, outputs, parts) in batches {
            for h in outputs.iter() {
                let events = log.entry(Target::Output(name_of(h))).or_default();
                for p in &parts {
                    decode(&tag, p, events);
                }
            }
        }
    }
    let log = log.lock().expect("capture");
    test.expects
        .iter()
        .enumerate()
        .filter_map(|(i, e)| {
            let events = log.get(&e.target).map_or(&[][..], Vec::as_slice);
            evaluate(e, events).map(|why| format!("expect[{i}] ({}): {why}", e.target))
        })
        .collect()
}

/// Stands in for a filter while it is moved into its recorder.
struct Passthrough;

impl Filter for Passthrough {
    fn filter(&self, _: &str, _: &[Bytes], _: u32) -> Filtered {
        Filtered::default()
    }
}

/// Why `events` do not meet `e`, or None when they do.
fn evaluate(e: &Expect, events: &[Event]) -> Option<String> {
    let mut why = Vec::new();
    if let Some(n) = e.count {
        if events.len() != n {
            why.push(format!("expected {n} events, got {}", events.len()));
            if n == 0 {
                for ev in events {
                    why.push(format!("  + {}", show(ev)));
                }
            }
        }
    }
    let checks_any = e.tag.is_some() || e.time.is_some() || !e.fields.is_empty();
    let chosen: Vec<(usize, &Event)> = match e.event {
        Some(i) => match events.get(i) {
            Some(ev) => vec![(i, ev)],
            None => {
                why.push(format!("no event {i}: {} events arrived", events.len()));
                Vec::new()
            }
        },
        None => events.iter().enumerate().collect(),
    };
    if checks_any && e.event.is_none() && events.is_empty() && e.count.is_none() {
        why.push("no event arrived".into());
    }
    for (i, ev) in chosen {
        let mut wrong = Vec::new();
        if let Some(t) = &e.tag {
            if &ev.tag != t {
                wrong.push(format!("tag: expected \"{t}\", got \"{}\"", ev.tag));
            }
        }
        if let Some(t) = e.time {
            if ev.time != t {
                wrong.push(format!(
                    "time: expected {}, got {}",
                    rfc3339(t),
                    rfc3339(ev.time)
                ));
            }
        }
        let mut expected = ev.record.clone();
        for f in &e.fields {
            let got = lookup(&ev.record, &f.keys);
            match (&f.check, got) {
                (Check::Equals(want), Some(v)) if v == want => {}
                (Check::Equals(want), got) => {
                    wrong.push(format!(
                        "field `{}`: expected {want}, got {}",
                        f.field,
                        got.map_or("nothing (absent)".to_string(), Value::to_string)
                    ));
                    set(&mut expected, &f.keys, Some(want.clone()));
                }
                (Check::Matches(re), Some(v)) if re.is_match(&text(v)) => {}
                (Check::Matches(re), got) => wrong.push(format!(
                    "field `{}`: expected to match /{}/, got {}",
                    f.field,
                    re.as_str(),
                    got.map_or("nothing (absent)".to_string(), Value::to_string)
                )),
                (Check::Absent, None) => {}
                (Check::Absent, Some(v)) => {
                    wrong.push(format!("field `{}`: expected absent, got {v}", f.field));
                    set(&mut expected, &f.keys, None);
                }
            }
        }
        if !wrong.is_empty() {
            let mut s = format!("event {i} of {} (tag \"{}\"):", events.len(), ev.tag);
            for w in wrong {
                s.push_str(&format!("\n      {w}"));
            }
            s.push_str(&format!(
                "\n    - expected: {expected}\n    + actual:   {}",
                ev.record
            ));
            why.push(s);
        }
    }
    (!why.is_empty()).then(|| why.join("\n    "))
}

/// An event as one JSON line, as the stdout output writes it.
fn show(ev: &Event) -> String {
    let mut rec = Vec::new();
    nagare_core::json::msgpack_from_json(&ev.record, &mut rec);
    let mut out = Vec::new();
    nagare_core::json::write_event(&mut out, &ev.tag, ev.time, &rec);
    String::from_utf8_lossy(&out).trim_end().to_string()
}

fn rfc3339(t: EventTime) -> String {
    let mut out = Vec::new();
    nagare_core::event::write_rfc3339(&mut out, t);
    String::from_utf8_lossy(&out).into_owned()
}

/// A value as a regex sees it: a string as itself, others as JSON text.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        v => v.to_string(),
    }
}

fn lookup<'a>(record: &'a Value, keys: &[String]) -> Option<&'a Value> {
    keys.iter().try_fold(record, |v, k| v.as_object()?.get(k))
}

/// Sets (or, with None, removes) the field at `keys`, making the maps on
/// the way: the expected event shown next to the actual one.
fn set(record: &mut Value, keys: &[String], value: Option<Value>) {
    let Some((last, path)) = keys.split_last() else {
        return;
    };
    let mut v = record;
    for k in path {
        let Some(m) = v.as_object_mut() else { return };
        v = m
            .entry(k.clone())
            .or_insert_with(|| Value::Object(Default::default()));
    }
    if let Some(m) = v.as_object_mut() {
        match value {
            Some(x) => {
                m.insert(last.clone(), x);
            }
            None => {
                m.shift_remove(last);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::test_spec::{ExpectSpec, Names};

    fn expect(toml_text: &str) -> Expect {
        let spec: ExpectSpec = toml::from_str(toml_text).unwrap();
        let names = Names {
            outputs: vec!["stdout#0".into()],
            ..Names::default()
        };
        spec.check("expect[0]", &names).unwrap()
    }

    fn event(record: Value) -> Event {
        Event {
            tag: "t".into(),
            time: EventTime::new(1, 0),
            record,
        }
    }

    #[test]
    fn nested_fields_numbers_and_absence_are_checked() {
        let ev = event(serde_json::json!({"http": {"status": 503, "path": "/a"}, "n": 1}));
        let ok = expect(
            "output = \"stdout#0\"\nequals = { \"$.http.status\" = 503 }\nmatches = { \"$.http.status\" = \"^5\\\\d\\\\d$\" }\nabsent = [\"$.http.secret\", \"secret\"]\n",
        );
        assert_eq!(evaluate(&ok, std::slice::from_ref(&ev)), None);
        let bad = expect(
            "output = \"stdout#0\"\nequals = { \"$.http.status\" = \"503\" }\nabsent = [\"$.http.path\"]\n",
        );
        let why = evaluate(&bad, std::slice::from_ref(&ev)).unwrap();
        assert!(
            why.contains("field `$.http.status`: expected \"503\", got 503"),
            "{why}"
        );
        assert!(
            why.contains("field `$.http.path`: expected absent, got \"/a\""),
            "{why}"
        );
        assert!(
            why.contains(r#"- expected: {"http":{"status":"503"},"n":1}"#),
            "{why}"
        );
        // Checks with no event to check fail; count = 0 with one event fails.
        assert_eq!(evaluate(&ok, &[]).as_deref(), Some("no event arrived"));
        let none = expect("output = \"stdout#0\"\ncount = 0\n");
        assert!(evaluate(&none, &[ev])
            .unwrap()
            .starts_with("expected 0 events, got 1"));
    }

    /// An example config with `[[test]]` tables passes them, as `nagare
    /// test` runs them (config's `every_example_config_is_valid` loads
    /// every example).
    #[test]
    fn every_example_configs_tests_pass() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");
        let mut n = 0;
        for e in std::fs::read_dir(dir).expect("examples/") {
            let p = e.expect("entry").path();
            if p.extension().is_some_and(|x| x == "toml") {
                let c = config::load(&p).unwrap_or_else(|e| panic!("{}: {e:?}", p.display()));
                if c.tests.is_empty() {
                    continue;
                }
                let outcomes =
                    run_files(&p, &[]).unwrap_or_else(|e| panic!("{}: {e:?}", p.display()));
                for o in outcomes {
                    assert!(
                        o.failures.is_empty(),
                        "{}: test {:?}: {:?}",
                        p.display(),
                        o.name,
                        o.failures
                    );
                }
                n += 1;
            }
        }
        assert!(n >= 1, "expected an example config with tests, found {n}");
    }
}
