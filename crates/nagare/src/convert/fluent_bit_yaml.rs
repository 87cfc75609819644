//! Fluent Bit's YAML config (`env`, `includes`, `service`, `parsers`,
//! `multiline_parsers`, `pipeline: inputs/filters/outputs`), read into the
//! same sections as the classic format: a list value becomes a repeated
//! key, a boolean `on`/`off`, so one mapping serves both.

use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;

use serde_yaml::Value;

use super::fluent_bit::{self, Config, Entry, Section};
use super::fluentd::include_paths;
use super::ConvertError;

pub fn parse_file(path: &Path) -> Result<Config, ConvertError> {
    let mut cfg = Config::default();
    let mut vars = HashMap::new();
    parse_into(path, &mut cfg, &mut vars, 0)?;
    fluent_bit::read_parsers_files(path, &mut cfg, &mut vars)?;
    Ok(cfg)
}

/// Finds the lines of list items: the line holding `name: <value>` at or
/// after `from` (YAML values carry no positions in serde_yaml).
struct Lines<'a> {
    lines: Vec<&'a str>,
    at: usize,
}

impl Lines<'_> {
    fn find(&mut self, needle: &str) -> usize {
        for (i, l) in self.lines.iter().enumerate().skip(self.at) {
            if l.contains(needle) {
                self.at = i + 1;
                return i + 1;
            }
        }
        self.at.max(1)
    }
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(if *b { "on".into() } else { "off".into() }),
        Value::Number(n) => Some(n.to_string()),
        Value::Null => Some(String::new()),
        _ => None,
    }
}

fn parse_into(
    path: &Path,
    cfg: &mut Config,
    vars: &mut HashMap<String, String>,
    depth: usize,
) -> Result<(), ConvertError> {
    let file: Rc<str> = path.display().to_string().into();
    if depth > 16 {
        return Err(ConvertError {
            file: file.to_string(),
            line: 0,
            message: "includes nested more than 16 deep (an include loop?)".into(),
        });
    }
    let text = std::fs::read_to_string(path).map_err(|e| ConvertError {
        file: file.to_string(),
        line: 0,
        message: format!("cannot read the file: {e}"),
    })?;
    let root: Value = serde_yaml::from_str(&text).map_err(|e| ConvertError {
        file: file.to_string(),
        line: e.location().map_or(0, |l| l.line()),
        message: format!("not valid YAML: {e}"),
    })?;
    let Value::Mapping(root) = root else {
        return Err(ConvertError {
            file: file.to_string(),
            line: 1,
            message: "a Fluent Bit YAML config is a mapping (service:, pipeline:, …)".into(),
        });
    };
    let mut lines = Lines {
        lines: text.lines().collect(),
        at: 0,
    };
    if let Some(Value::Mapping(env)) = root.get("env") {
        for (k, v) in env {
            if let (Some(k), Some(v)) = (scalar(k), scalar(v)) {
                vars.insert(k, v);
            }
        }
    }
    if let Some(Value::Sequence(inc)) = root.get("includes") {
        for i in inc {
            if let Some(p) = scalar(i) {
                let line = lines.find(&p);
                for f in include_paths(path, &p, &file, line)? {
                    parse_into(&f, cfg, vars, depth + 1)?;
                }
            }
        }
    }
    for (key, value) in &root {
        let Some(key) = scalar(key) else { continue };
        match key.as_str() {
            "env" | "includes" => {}
            "service" => {
                let line = lines.find("service:");
                let s = section(cfg, "SERVICE", value, &file, line, vars, &mut lines);
                cfg.sections.push(s);
            }
            "parsers" | "multiline_parsers" => {
                let name = if key == "parsers" {
                    "PARSER"
                } else {
                    "MULTILINE_PARSER"
                };
                lines.find(&format!("{key}:"));
                if let Value::Sequence(items) = value {
                    for item in items {
                        let n = item.get("name").and_then(scalar).unwrap_or_default();
                        let line = lines.find(&format!("name: {n}"));
                        let s = section(cfg, name, item, &file, line, vars, &mut lines);
                        cfg.sections.push(s);
                    }
                }
            }
            "pipeline" => {
                lines.find("pipeline:");
                let Value::Mapping(p) = value else { continue };
                for (kind, name) in [
                    ("inputs", "INPUT"),
                    ("filters", "FILTER"),
                    ("outputs", "OUTPUT"),
                ] {
                    if let Some(Value::Sequence(items)) = p.get(kind) {
                        lines.find(&format!("{kind}:"));
                        for item in items {
                            let n = item.get("name").and_then(scalar).unwrap_or_default();
                            let line = lines.find(&format!("name: {n}"));
                            let s = section(cfg, name, item, &file, line, vars, &mut lines);
                            cfg.sections.push(s);
                        }
                    }
                }
            }
            other => {
                let line = lines.find(&format!("{other}:"));
                cfg.sections.push(Section {
                    name: format!("YAML:{other}"),
                    entries: Vec::new(),
                    file: file.clone(),
                    line,
                });
            }
        }
    }
    Ok(())
}

fn section(
    cfg: &mut Config,
    name: &str,
    value: &Value,
    file: &Rc<str>,
    line: usize,
    vars: &HashMap<String, String>,
    _lines: &mut Lines,
) -> Section {
    let mut s = Section {
        name: name.to_string(),
        entries: Vec::new(),
        file: file.clone(),
        line,
    };
    let Value::Mapping(m) = value else { return s };
    for (k, v) in m {
        let Some(k) = scalar(k) else { continue };
        let mut push = |value: String| {
            let value = fluent_bit::substitute(&value, vars, &mut cfg.unknown_vars, file, line);
            s.entries.push(Entry {
                key: k.clone(),
                value,
                file: file.clone(),
                line,
            });
        };
        match v {
            Value::Sequence(items) => {
                for i in items {
                    match i {
                        // multiline_parsers rules: {state, regex, next_state}.
                        Value::Mapping(r) if k == "rules" => {
                            let get = |f: &str| r.get(f).and_then(scalar).unwrap_or_default();
                            push(format!(
                                "\"{}\" \"{}\" \"{}\"",
                                get("state"),
                                get("regex"),
                                get("next_state")
                            ));
                        }
                        other => {
                            if let Some(v) = scalar(other) {
                                push(v);
                            } else {
                                push(String::from("<a nested value>"));
                            }
                        }
                    }
                }
            }
            Value::Mapping(_) => push(String::from("<a nested value>")),
            other => {
                if let Some(v) = scalar(other) {
                    push(v);
                }
            }
        }
    }
    // `rules` in YAML is `rule` in the classic format.
    for e in s.entries.iter_mut() {
        if e.key == "rules" {
            e.key = "rule".into();
        }
    }
    s
}
