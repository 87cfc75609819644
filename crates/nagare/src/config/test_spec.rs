//! Tests written in the config (`[[test]]` tables), run by `nagare test`:
//! input events for a tag (and an input's label), and expectations on what
//! reaches an output or leaves a filter. This file reads and checks the
//! tables (`nagare check` does too); test_tables/run.rs runs them through
//! the real router and filters, with no sockets and no outputs started.

use std::collections::BTreeMap;

use nagare_core::plugin::OptionError;
use nagare_core::record::FieldPath;
use nagare_forward::EventTime;
use regex::Regex;
use serde::Deserialize;
use serde_json::{Map, Value};

/// A `[[test]]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestSpec {
    /// What the test is about; printed with its result.
    pub name: String,
    /// `[[test.input]]`: events sent in, in order.
    pub input: Vec<InputSpec>,
    /// `[[test.expect]]`: what must come out.
    pub expect: Vec<ExpectSpec>,
}

/// `[[test.input]]`: events of one tag.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputSpec {
    /// The events' tag.
    pub tag: String,
    /// The `[[input]]` (by name, e.g. "forward#0") the events come from:
    /// they go to that input's label. Default: unlabelled events.
    #[serde(default)]
    pub input: Option<String>,
    /// The events' time, RFC 3339 (e.g. "2026-01-02T03:04:05Z"); default now.
    #[serde(default)]
    pub time: Option<String>,
    /// The records, as TOML tables.
    #[serde(default)]
    pub records: Vec<Map<String, Value>>,
    /// The records as JSON objects, one per line (after `records`).
    #[serde(default)]
    pub json: Option<String>,
}

/// `[[test.expect]]`: what reaches one output, or leaves one filter.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectSpec {
    /// The output (by name, e.g. "stdout#0", "copy#1.file#0").
    #[serde(default)]
    pub output: Option<String>,
    /// Or the filter (by name, e.g. "grep#0"): the events it passes on.
    #[serde(default)]
    pub filter: Option<String>,
    /// How many events arrive (0: none; the events were dropped or went
    /// elsewhere).
    #[serde(default)]
    pub count: Option<usize>,
    /// The tag every arriving event has.
    #[serde(default)]
    pub tag: Option<String>,
    /// The time (RFC 3339) every arriving event has.
    #[serde(default)]
    pub time: Option<String>,
    /// The field checks apply to this event only (0 is the first to
    /// arrive); default: to every event.
    #[serde(default)]
    pub event: Option<usize>,
    /// field = value the field must equal (`name` or `$.a.b`).
    #[serde(default)]
    pub equals: Map<String, Value>,
    /// field = regular expression the field's text must match.
    #[serde(default)]
    pub matches: BTreeMap<String, String>,
    /// Fields that must be absent.
    #[serde(default)]
    pub absent: Vec<String>,
}

/// A checked test, ready to run.
#[derive(Debug)]
pub struct TestCase {
    pub name: String,
    pub inputs: Vec<TestInput>,
    pub expects: Vec<Expect>,
}

#[derive(Debug)]
pub struct TestInput {
    pub tag: String,
    /// The label of the input named by `input`.
    pub label: Option<String>,
    pub time: Option<EventTime>,
    pub records: Vec<Map<String, Value>>,
}

/// Where an expectation looks.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    Output(String),
    Filter(String),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Output(n) => write!(f, "output \"{n}\""),
            Target::Filter(n) => write!(f, "filter \"{n}\""),
        }
    }
}

#[derive(Debug)]
pub struct Expect {
    pub target: Target,
    pub count: Option<usize>,
    pub tag: Option<String>,
    pub time: Option<EventTime>,
    pub event: Option<usize>,
    pub fields: Vec<FieldCheck>,
}

#[derive(Debug)]
pub struct FieldCheck {
    /// As written (`level`, `$.http.status`).
    pub field: String,
    /// The keys from the top-level map down.
    pub keys: Vec<String>,
    pub check: Check,
}

#[derive(Debug)]
pub enum Check {
    Equals(Value),
    Matches(Regex),
    Absent,
}

/// The names a test may use: inputs with their labels, filters, outputs.
#[derive(Debug, Default)]
pub struct Names {
    pub inputs: Vec<(String, Option<String>)>,
    pub filters: Vec<String>,
    pub outputs: Vec<String>,
    /// Some section did not build (its error is reported): its name is
    /// missing, so names are not checked.
    pub incomplete: bool,
}

impl TestSpec {
    /// Checks the test against the config's `names`; errors name the key
    /// inside the `[[test]]` table.
    pub fn check(self, names: &Names) -> Result<TestCase, OptionError> {
        if self.input.is_empty() {
            return Err(OptionError::new(
                "input",
                "a test needs at least one [[test.input]]",
            ));
        }
        if self.expect.is_empty() {
            return Err(OptionError::new(
                "expect",
                "a test needs at least one [[test.expect]]",
            ));
        }
        let inputs = self
            .input
            .into_iter()
            .enumerate()
            .map(|(i, s)| s.check(&format!("input[{i}]"), names))
            .collect::<Result<_, _>>()?;
        let expects = self
            .expect
            .into_iter()
            .enumerate()
            .map(|(i, s)| s.check(&format!("expect[{i}]"), names))
            .collect::<Result<_, _>>()?;
        Ok(TestCase {
            name: self.name,
            inputs,
            expects,
        })
    }
}

/// `name` must be one of `known`; else an error at `key` listing them.
fn known_name(
    key: &str,
    what: &str,
    name: &str,
    known: &[&str],
    names: &Names,
) -> Result<(), OptionError> {
    if names.incomplete || known.contains(&name) {
        return Ok(());
    }
    let hint = super::closest(name, known.iter().copied())
        .map_or_else(String::new, |k| format!(" Did you mean \"{k}\"?"));
    Err(OptionError::new(
        key,
        format!(
            "no {what} is named \"{name}\".{hint} Names are type#position: {}",
            if known.is_empty() {
                "(none)".to_string()
            } else {
                known.join(", ")
            }
        ),
    ))
}

/// An RFC 3339 time as an event time.
fn time(key: &str, t: &str) -> Result<EventTime, OptionError> {
    let dt = chrono::DateTime::parse_from_rfc3339(t).map_err(|e| {
        OptionError::new(
            key,
            format!("expected an RFC 3339 time such as \"2026-01-02T03:04:05Z\": {e}"),
        )
    })?;
    let secs = u32::try_from(dt.timestamp())
        .map_err(|_| OptionError::new(key, "the time must be between 1970 and 2106"))?;
    Ok(EventTime::new(secs, dt.timestamp_subsec_nanos()))
}

impl InputSpec {
    fn check(self, key: &str, names: &Names) -> Result<TestInput, OptionError> {
        let at = |k: &str| format!("{key}.{k}");
        let label = match &self.input {
            Some(name) => {
                let known: Vec<&str> = names.inputs.iter().map(|(n, _)| n.as_str()).collect();
                known_name(&at("input"), "[[input]]", name, &known, names)?;
                names
                    .inputs
                    .iter()
                    .find(|(n, _)| n == name)
                    .and_then(|(_, l)| l.clone())
            }
            None => None,
        };
        let time = self
            .time
            .as_deref()
            .map(|t| time(&at("time"), t))
            .transpose()?;
        let mut records = self.records;
        if let Some(json) = &self.json {
            for (n, line) in json
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
            {
                match serde_json::from_str::<Value>(line) {
                    Ok(Value::Object(m)) => records.push(m),
                    Ok(_) => {
                        return Err(OptionError::new(
                            at("json"),
                            format!("line {} of the text: expected a JSON object", n + 1),
                        ))
                    }
                    Err(e) => {
                        return Err(OptionError::new(
                            at("json"),
                            format!("line {} of the text: not JSON: {e}", n + 1),
                        ))
                    }
                }
            }
        }
        if records.is_empty() {
            return Err(OptionError::new(
                key,
                "no events: give `records` (TOML tables) or `json` (JSON objects, one per line)",
            ));
        }
        Ok(TestInput {
            tag: self.tag,
            label,
            time,
            records,
        })
    }
}

impl ExpectSpec {
    pub(crate) fn check(self, key: &str, names: &Names) -> Result<Expect, OptionError> {
        let at = |k: &str| format!("{key}.{k}");
        let target =
            match (self.output, self.filter) {
                (Some(o), None) => {
                    let known: Vec<&str> = names.outputs.iter().map(String::as_str).collect();
                    known_name(&at("output"), "[[output]]", &o, &known, names)?;
                    Target::Output(o)
                }
                (None, Some(f)) => {
                    let known: Vec<&str> = names.filters.iter().map(String::as_str).collect();
                    known_name(&at("filter"), "[[filter]]", &f, &known, names)?;
                    Target::Filter(f)
                }
                _ => return Err(OptionError::new(
                    key,
                    "an expectation names either `output` or `filter` (e.g. output = \"stdout#0\")",
                )),
            };
        let path = |k: &str, field: &str| -> Result<Vec<String>, OptionError> {
            let p = FieldPath::parse(field).map_err(|e| OptionError::new(at(k), e))?;
            Ok(p.keys
                .iter()
                .map(|k| String::from_utf8_lossy(k).into_owned())
                .collect())
        };
        let mut fields = Vec::new();
        for (field, v) in self.equals {
            let keys = path(&format!("equals.{field}"), &field)?;
            fields.push(FieldCheck {
                field,
                keys,
                check: Check::Equals(v),
            });
        }
        for (field, re) in self.matches {
            let k = format!("matches.{field}");
            let keys = path(&k, &field)?;
            let re = Regex::new(&re)
                .map_err(|e| OptionError::new(at(&k), format!("not a regular expression: {e}")))?;
            fields.push(FieldCheck {
                field,
                keys,
                check: Check::Matches(re),
            });
        }
        for field in self.absent {
            let keys = path("absent", &field)?;
            fields.push(FieldCheck {
                field,
                keys,
                check: Check::Absent,
            });
        }
        let time = self
            .time
            .as_deref()
            .map(|t| time(&at("time"), t))
            .transpose()?;
        if self.count == Some(0) && (!fields.is_empty() || self.tag.is_some() || time.is_some()) {
            return Err(OptionError::new(
                at("count"),
                "count = 0 expects no event: field and tag checks would have nothing to check",
            ));
        }
        Ok(Expect {
            target,
            count: self.count,
            tag: self.tag,
            time,
            event: self.event,
            fields,
        })
    }
}
