//! What a reload compares: each section of the config file as canonical
//! text (keys sorted, so reordering keys or reformatting changes nothing),
//! keyed by the section's name (type and position: "forward#0",
//! "copy#1.file#0"), the name the daemon gives the plugin in logs and
//! metrics. Also the file's hash and the redacted copy `/api/config` shows.
//!
//! The text is compared as written: a `${VAR}` counts as its text, so a
//! section whose only change is in the environment is kept running.

use std::collections::HashMap;
use std::fmt::Write;

/// An output section (or a copy's store) as a reload compares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputText {
    /// The options of the output and its secondary: everything but
    /// `buffer`, `match` and `label` (the routes are rebuilt anyway).
    pub plugin: String,
    /// The `[output.buffer]` table.
    pub buffer: String,
}

/// The sections of one config file.
#[derive(Debug, Default)]
pub struct Sections {
    pub inputs: HashMap<String, String>,
    pub filters: HashMap<String, String>,
    /// Every output that has a buffer: top-level ones and copies' stores.
    pub outputs: HashMap<String, OutputText>,
    /// `[monitor]` as written (a reload cannot move the monitor).
    pub monitor: String,
}

impl Sections {
    /// Reads the sections of a config file that `config::parse` accepted.
    pub fn of(text: &str) -> Sections {
        let Ok(root) = text.parse::<toml::Table>() else {
            return Sections::default();
        };
        let mut s = Sections {
            monitor: root.get("monitor").map(canonical).unwrap_or_default(),
            ..Sections::default()
        };
        for (i, t) in tables(&root, "input").enumerate() {
            s.inputs.insert(name("", t, i), canonical_table(t));
        }
        for (i, t) in tables(&root, "filter").enumerate() {
            s.filters.insert(name("", t, i), canonical_table(t));
        }
        for (i, t) in tables(&root, "output").enumerate() {
            let top = name("", t, i);
            match t.get("store").and_then(toml::Value::as_array) {
                Some(stores) if type_of(t) == crate::outputs::copy::REGISTRATION.type_name => {
                    let prefix = format!("{top}.");
                    for (j, st) in stores.iter().filter_map(toml::Value::as_table).enumerate() {
                        s.outputs.insert(name(&prefix, st, j), output_text(st));
                    }
                }
                _ => {
                    s.outputs.insert(top, output_text(t));
                }
            }
        }
        s
    }
}

fn tables<'a>(root: &'a toml::Table, key: &str) -> impl Iterator<Item = &'a toml::Table> {
    root.get(key)
        .and_then(toml::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(toml::Value::as_table)
}

fn type_of(t: &toml::Table) -> &str {
    t.get("type").and_then(toml::Value::as_str).unwrap_or("")
}

/// The name the config loader gives the section: "{prefix}{type}#{index}".
fn name(prefix: &str, t: &toml::Table, index: usize) -> String {
    format!("{prefix}{}#{index}", type_of(t))
}

fn output_text(t: &toml::Table) -> OutputText {
    let mut plugin = t.clone();
    for k in ["buffer", "match", "label"] {
        plugin.remove(k);
    }
    OutputText {
        plugin: canonical_table(&plugin),
        buffer: t.get("buffer").map(canonical).unwrap_or_default(),
    }
}

fn canonical_table(t: &toml::Table) -> String {
    let mut out = String::new();
    write_table(&mut out, t);
    out
}

fn canonical(v: &toml::Value) -> String {
    let mut out = String::new();
    write_value(&mut out, v);
    out
}

fn write_table(out: &mut String, t: &toml::Table) {
    let mut keys: Vec<&String> = t.keys().collect();
    keys.sort();
    out.push('{');
    for k in keys {
        let _ = write!(out, "{k:?}=");
        write_value(out, &t[k.as_str()]);
        out.push(',');
    }
    out.push('}');
}

fn write_value(out: &mut String, v: &toml::Value) {
    match v {
        toml::Value::Table(t) => write_table(out, t),
        toml::Value::Array(a) => {
            out.push('[');
            for x in a {
                write_value(out, x);
                out.push(',');
            }
            out.push(']');
        }
        other => {
            let _ = write!(out, "{other}");
        }
    }
}

/// The hash `/api/config`, the metric and the reload log line show: XXH3-64
/// of the file's bytes, in hex.
pub fn hash(text: &str) -> String {
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(text.as_bytes()))
}

/// Keys whose values are secrets (by the end of the key's name).
const SECRET_KEYS: [&str; 5] = ["password", "shared_key", "secret", "token", "passphrase"];

const REDACTED: &str = "<redacted>";

/// The config as JSON with secrets replaced: values of keys named like
/// passwords or keys, and the password in a URL (`redis://user:pw@host`).
pub fn redacted(text: &str) -> serde_json::Value {
    match text.parse::<toml::Table>() {
        Ok(t) => redact(&toml::Value::Table(t), false),
        Err(_) => serde_json::Value::Null,
    }
}

fn redact(v: &toml::Value, secret: bool) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        toml::Value::Table(t) => J::Object(
            t.iter()
                .map(|(k, v)| {
                    let k_lower = k.to_ascii_lowercase();
                    let secret = SECRET_KEYS.iter().any(|s| k_lower.ends_with(s));
                    (k.clone(), redact(v, secret))
                })
                .collect(),
        ),
        toml::Value::Array(a) => J::Array(a.iter().map(|x| redact(x, secret)).collect()),
        _ if secret => J::String(REDACTED.into()),
        toml::Value::String(s) => J::String(redact_url(s)),
        toml::Value::Integer(i) => J::from(*i),
        toml::Value::Float(f) => J::from(*f),
        toml::Value::Boolean(b) => J::Bool(*b),
        toml::Value::Datetime(d) => J::String(d.to_string()),
    }
}

/// "scheme://user:password@host…" → "scheme://user:<redacted>@host…".
fn redact_url(s: &str) -> String {
    let Some(scheme_end) = s.find("://") else {
        return s.to_string();
    };
    let rest = &s[scheme_end + 3..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return s.to_string();
    };
    let Some(colon) = rest[..at].find(':') else {
        return s.to_string();
    };
    format!(
        "{}{}{REDACTED}{}",
        &s[..scheme_end + 3],
        &rest[..=colon],
        &rest[at..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
[[input]]
type = "forward"
bind = "127.0.0.1:1"
shared_key = "s3cret"

[[filter]]
type = "grep"
match = "**"

[[output]]
type = "copy"
match = "**"
[[output.store]]
type = "stdout"
[[output.store]]
type = "file"
path = "/tmp/x"
[output.store.buffer]
type = "file"
path = "/tmp/b"

[[output]]
type = "redis"
match = "r.**"
address = "redis://app:pw@127.0.0.1:6379/0"
"#;

    #[test]
    fn sections_are_named_as_the_loader_names_them_and_compared_canonically() {
        let s = Sections::of(BASE);
        assert!(s.inputs.contains_key("forward#0"));
        assert!(s.filters.contains_key("grep#0"));
        let names: std::collections::BTreeSet<&str> =
            s.outputs.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            ["copy#0.file#1", "copy#0.stdout#0", "redis#1"].into()
        );
        // Key order and layout do not matter; a value does.
        let reordered = BASE.replace(
            "type = \"forward\"\nbind = \"127.0.0.1:1\"",
            "bind = \"127.0.0.1:1\"\ntype   =   \"forward\"",
        );
        assert_eq!(Sections::of(&reordered).inputs, s.inputs);
        let other = BASE.replace("127.0.0.1:1", "127.0.0.1:2");
        assert_ne!(Sections::of(&other).inputs, s.inputs);
        // An output's route is not its plugin or buffer.
        let rerouted = BASE.replace("match = \"r.**\"", "match = \"q.**\"");
        assert_eq!(Sections::of(&rerouted).outputs, s.outputs);
        let rebuffered = BASE.replace("path = \"/tmp/b\"", "path = \"/tmp/c\"");
        let r = Sections::of(&rebuffered);
        assert_eq!(
            r.outputs["copy#0.file#1"].plugin,
            s.outputs["copy#0.file#1"].plugin
        );
        assert_ne!(
            r.outputs["copy#0.file#1"].buffer,
            s.outputs["copy#0.file#1"].buffer
        );
    }

    #[test]
    fn secrets_are_redacted() {
        let v = redacted(BASE);
        assert_eq!(v["input"][0]["shared_key"], REDACTED);
        assert_eq!(v["input"][0]["bind"], "127.0.0.1:1");
        assert_eq!(
            v["output"][1]["address"],
            format!("redis://app:{REDACTED}@127.0.0.1:6379/0")
        );
        assert_eq!(redact_url("http://host/a:b@c"), "http://host/a:b@c");
        assert_ne!(hash(BASE), hash(&BASE.replace("pw", "pv")));
    }
}
