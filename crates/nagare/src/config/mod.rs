//! The TOML configuration: parsing, validation and error messages that name
//! the file, line and key.
//!
//! Plugin sections are read in two steps: first as plain tables (with their
//! position in the file), then each one into its plugin's own options struct,
//! which denies unknown keys. That keeps one serde struct per plugin, next to
//! the plugin, and still lets every error point at a line.

#[cfg(test)]
mod reference;
pub mod units;

use std::fmt;
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use toml::{Spanned, Table, Value};

use crate::buffer::BufferConfig;
use crate::filters::{FilterSection, FilterSpec};
use crate::inputs::InputSpec;
use crate::outputs::OutputKind;

/// The embedded default configuration used by `nagare run` without `-c`.
pub const DEFAULT_CONFIG: &str = include_str!("default.toml");

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    pub line: usize,
    pub key: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}:{}: {}", self.file, self.line, self.message)
        } else {
            write!(
                f,
                "{}:{}: key `{}`: {}",
                self.file, self.line, self.key, self.message
            )
        }
    }
}

#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct SystemConfig {
    /// Runtime worker threads; 0 or absent = one per core.
    #[serde(default)]
    pub workers: usize,
    /// error, warn, info, debug or trace. The NAGARE_LOG environment variable overrides it.
    #[serde(default)]
    pub log_level: Option<String>,
    /// How long shutdown waits for buffers to drain before giving up (default "60s").
    #[serde(default)]
    pub shutdown_timeout: Option<units::Dur>,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MonitorConfig {
    /// Address of the HTTP monitor, e.g. "127.0.0.1:24220".
    pub bind: String,
}

#[derive(Debug, Clone)]
pub struct Config {
    pub system: SystemConfig,
    pub monitor: Option<MonitorConfig>,
    pub inputs: Vec<InputSection>,
    /// `[[filter]]` sections in file order.
    pub filters: Vec<FilterSection>,
    pub outputs: Vec<OutputSpec>,
}

#[derive(Debug, Clone)]
pub struct InputSection {
    /// e.g. "forward#0": type and position among the inputs.
    pub name: String,
    pub spec: InputSpec,
}

#[derive(Debug, Clone)]
pub struct OutputSpec {
    /// e.g. "file#1": type and position among the outputs.
    pub name: String,
    /// The `match` patterns, separated by spaces.
    pub patterns: String,
    pub kind: OutputKind,
    pub buffer: BufferConfig,
    pub secondary: Option<Box<OutputSpec>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    system: Option<Spanned<Table>>,
    #[serde(default)]
    monitor: Option<Spanned<Table>>,
    #[serde(default)]
    input: Vec<Spanned<Table>>,
    #[serde(default)]
    filter: Vec<Spanned<Table>>,
    #[serde(default)]
    output: Vec<Spanned<Table>>,
}

/// Parsing context: the file's name and text, for locating errors.
struct Ctx<'a> {
    file: &'a str,
    text: &'a str,
    errors: Vec<ConfigError>,
}

impl Ctx<'_> {
    fn line_of(&self, offset: usize) -> usize {
        self.text[..offset.min(self.text.len())]
            .bytes()
            .filter(|&b| b == b'\n')
            .count()
            + 1
    }

    /// The line where `key` is set, searching from `from`; else the line of `from`.
    fn key_line(&self, from: usize, key: &str) -> usize {
        // A nested key ("parser.type"): find its table first, then the key in it.
        if let Some((table, rest)) = key.split_once('.') {
            let at = self.table_offset(from, table).unwrap_or(from);
            return self.key_line(at, rest);
        }
        let mut offset = from.min(self.text.len());
        for line in self.text[offset..].split_inclusive('\n') {
            let t = line.trim_start().trim_start_matches('"');
            if let Some(rest) = t.strip_prefix(key) {
                let rest = rest.trim_start_matches('"').trim_start();
                if rest.starts_with('=') {
                    return self.line_of(offset);
                }
            }
            if let Some(h) = t.strip_prefix('[') {
                // a sub-table header such as [output.buffer]
                if h.trim_start_matches('[').ends_with(&format!("{key}]\n"))
                    || h.trim_end().trim_end_matches(']').ends_with(key)
                {
                    return self.line_of(offset);
                }
            }
            offset += line.len();
        }
        self.line_of(from)
    }

    /// Where the sub-table `name` of the section at `from` starts: its header
    /// (`[input.parser]`) or an inline `parser = {…}`.
    fn table_offset(&self, from: usize, name: &str) -> Option<usize> {
        let mut offset = from.min(self.text.len());
        for line in self.text[offset..].split_inclusive('\n') {
            let t = line.trim();
            let header =
                t.starts_with('[') && t.trim_end_matches(']').ends_with(&format!(".{name}"));
            let inline = t
                .strip_prefix(name)
                .is_some_and(|r| r.trim_start().starts_with('='));
            if header || inline {
                return Some(offset);
            }
            offset += line.len();
        }
        None
    }

    fn error(&mut self, at: usize, key: &str, message: impl Into<String>) {
        let line = if key.is_empty() {
            self.line_of(at)
        } else {
            self.key_line(at, key)
        };
        self.errors.push(ConfigError {
            file: self.file.to_string(),
            line,
            key: key.to_string(),
            message: message.into(),
        });
    }

    /// Deserializes a plain table into a plugin's options struct.
    fn typed<T: DeserializeOwned>(&mut self, table: Table, at: usize, prefix: &str) -> Option<T> {
        match Value::Table(table).try_into::<T>() {
            Ok(v) => Some(v),
            Err(e) => {
                let (key, msg) = explain(&e.to_string());
                let full = if prefix.is_empty() || key.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                let line = if key.is_empty() {
                    self.line_of(at)
                } else {
                    self.key_line(at, &key)
                };
                self.errors.push(ConfigError {
                    file: self.file.to_string(),
                    line,
                    key: full,
                    message: msg,
                });
                None
            }
        }
    }
}

/// Pulls the offending key out of a serde/toml message and tidies the text.
fn explain(msg: &str) -> (String, String) {
    let msg = msg.trim().replace('\n', " ");
    let key = if let Some(i) = msg.find("unknown field `") {
        let rest = &msg[i + 15..];
        rest[..rest.find('`').unwrap_or(0)].to_string()
    } else if let Some(i) = msg.find("missing field `") {
        let rest = &msg[i + 15..];
        rest[..rest.find('`').unwrap_or(0)].to_string()
    } else if let Some(i) = msg.rfind(" in `") {
        let rest = &msg[i + 5..];
        rest[..rest.find('`').unwrap_or(0)].to_string()
    } else if let Some(i) = msg.find("for key `") {
        let rest = &msg[i + 9..];
        rest[..rest.find('`').unwrap_or(0)].to_string()
    } else {
        String::new()
    };
    (key, msg)
}

/// Reads and checks a config file.
pub fn load(path: &Path) -> Result<Config, Vec<ConfigError>> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| {
        vec![ConfigError {
            file: name.clone(),
            line: 0,
            key: String::new(),
            message: format!("cannot read the file: {e}"),
        }]
    })?;
    parse(&text, &name)
}

/// Parses and checks config text; `file` names it in errors.
pub fn parse(text: &str, file: &str) -> Result<Config, Vec<ConfigError>> {
    let mut ctx = Ctx {
        file,
        text,
        errors: Vec::new(),
    };
    let expanded = match expand_env(text) {
        Ok(t) => t,
        Err((at, name)) => {
            ctx.error(at, "", format!("environment variable {name} is not set"));
            return Err(ctx.errors);
        }
    };
    let raw: RawConfig = match toml::from_str(&expanded) {
        Ok(r) => r,
        Err(e) => {
            let at = e.span().map(|s| s.start).unwrap_or(0);
            let (key, msg) = explain(e.message());
            ctx.error(at, &key, msg);
            return Err(ctx.errors);
        }
    };
    let system = match raw.system {
        Some(s) => {
            let at = s.span().start;
            ctx.typed(s.into_inner(), at, "system").unwrap_or_default()
        }
        None => SystemConfig::default(),
    };
    let monitor = raw.monitor.and_then(|s| {
        let at = s.span().start;
        ctx.typed::<MonitorConfig>(s.into_inner(), at, "monitor")
    });
    let mut inputs = Vec::new();
    for (i, sec) in raw.input.into_iter().enumerate() {
        let at = sec.span().start;
        let mut table = sec.into_inner();
        let Some(ty) = take_type(&mut ctx, &mut table, at, "input") else {
            continue;
        };
        let spec = match ty.as_str() {
            "forward" => ctx.typed(table, at, "").map(InputSpec::Forward),
            "tail" => ctx
                .typed::<crate::inputs::tail::TailConfig>(table, at, "")
                .filter(|t| check_parser(&mut ctx, at, t.parser.as_deref()))
                .map(InputSpec::Tail),
            "directory" => ctx
                .typed::<crate::inputs::directory::DirectoryConfig>(table, at, "")
                .filter(|d| check_parser(&mut ctx, at, d.parser.as_deref()))
                .map(InputSpec::Directory),
            "fuse" => ctx
                .typed::<crate::inputs::fuse::FuseConfig>(table, at, "")
                .filter(|f| check_parser(&mut ctx, at, f.parser.as_deref()))
                .filter(|f| check_fuse_parser(&mut ctx, at, f))
                .map(InputSpec::Fuse),
            other => {
                ctx.error(
                    at,
                    "type",
                    format!(
                        "unknown input type {other:?}; expected one of: forward, tail, directory, fuse"
                    ),
                );
                None
            }
        };
        if let Some(spec) = spec {
            inputs.push(InputSection {
                name: format!("{ty}#{i}"),
                spec,
            });
        }
    }
    let mut filters = Vec::new();
    for (i, sec) in raw.filter.into_iter().enumerate() {
        let at = sec.span().start;
        if let Some(f) = filter_section(&mut ctx, sec.into_inner(), at, i) {
            filters.push(f);
        }
    }
    let mut outputs = Vec::new();
    for (i, sec) in raw.output.into_iter().enumerate() {
        let at = sec.span().start;
        if let Some(o) = output_spec(&mut ctx, sec.into_inner(), at, i, true) {
            outputs.push(o);
        }
    }
    if inputs.is_empty() && ctx.errors.is_empty() {
        ctx.error(0, "", "no [[input]] section: nothing would be received");
    }
    if ctx.errors.is_empty() {
        Ok(Config {
            system,
            monitor,
            inputs,
            filters,
            outputs,
        })
    } else {
        Err(ctx.errors)
    }
}

/// Replaces `${NAME}` by the environment variable NAME, for names in upper
/// case (`${tag}` and other lower-case placeholders belong to plugins).
/// Returns the offset and name of the first unset variable as an error.
fn expand_env(text: &str) -> Result<String, (usize, String)> {
    let re = regex::Regex::new(r"\$\{([A-Z_][A-Z0-9_]*)\}").expect("static regex");
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for c in re.captures_iter(text) {
        let m = c.get(0).expect("match");
        let name = &c[1];
        let val = std::env::var(name).map_err(|_| (m.start(), name.to_string()))?;
        out.push_str(&text[last..m.start()]);
        out.push_str(&val);
        last = m.end();
    }
    out.push_str(&text[last..]);
    Ok(out)
}

/// Builds an input's parser once, so `nagare check` reports bad regexes and
/// missing keys, not only `nagare run`.
fn check_parser(ctx: &mut Ctx, at: usize, parser: Option<&crate::parsers::ParserConfig>) -> bool {
    match crate::parsers::Parser::new(&parser.cloned().unwrap_or_default()) {
        Ok(_) => true,
        Err(e) => {
            ctx.error(at, "parser", format!("{e:#}"));
            false
        }
    }
}

/// A `[[filter]]` section: `type`, `match` (default "**") and the type's options.
fn filter_section(
    ctx: &mut Ctx,
    mut table: Table,
    at: usize,
    index: usize,
) -> Option<FilterSection> {
    let ty = take_type(ctx, &mut table, at, "filter")?;
    let patterns = take_match(ctx, &mut table, at)?.unwrap_or_else(|| "**".to_string());
    if let Err(e) = crate::router::Pattern::parse_list(&patterns) {
        ctx.error(at, "match", e);
        return None;
    }
    let spec = match ty.as_str() {
        "parser" => {
            let c: crate::filters::parser::ParserFilterConfig = ctx.typed(table, at, "")?;
            if c.parser.kind == crate::parsers::ParserType::Multiline {
                ctx.error(
                    at,
                    "parser.type",
                    "a parser filter parses one field of one event; \"multiline\" joins lines and only works in a tail or directory input",
                );
                return None;
            }
            if c.key_name.is_empty() {
                ctx.error(at, "key_name", "must name the field to parse");
                return None;
            }
            if !check_parser(ctx, at, Some(&c.parser)) {
                return None;
            }
            FilterSpec::Parser(c)
        }
        other => {
            ctx.error(
                at,
                "type",
                format!("unknown filter type {other:?}; expected one of: parser"),
            );
            return None;
        }
    };
    Some(FilterSection {
        name: format!("{ty}#{index}"),
        patterns,
        spec,
    })
}

/// The fuse input has no multi-line gathering (its lines come per writer).
fn check_fuse_parser(ctx: &mut Ctx, at: usize, f: &crate::inputs::fuse::FuseConfig) -> bool {
    let multiline = f
        .parser
        .as_deref()
        .and_then(|p| crate::parsers::Parser::new(p).ok())
        .is_some_and(|p| p.multiline().is_some());
    if multiline {
        ctx.error(
            at,
            "parser",
            "type \"multiline\" is not supported by the fuse input; use a tail or directory input for multi-line events",
        );
    }
    !multiline
}

fn take_type(ctx: &mut Ctx, table: &mut Table, at: usize, what: &str) -> Option<String> {
    match table.remove("type") {
        Some(Value::String(s)) => Some(s),
        Some(_) => {
            ctx.error(at, "type", "expected a string");
            None
        }
        None => {
            ctx.error(at, "", format!("[[{what}]] needs a `type`"));
            None
        }
    }
}

/// The section's `match`: `Some(None)` when absent, `None` (reported) when
/// not a non-empty string.
fn take_match(ctx: &mut Ctx, table: &mut Table, at: usize) -> Option<Option<String>> {
    match table.remove("match") {
        Some(Value::String(s)) if !s.trim().is_empty() => Some(Some(s)),
        Some(_) => {
            ctx.error(
                at,
                "match",
                "expected a string of tag patterns, e.g. \"app.** web.*\"",
            );
            None
        }
        None => Some(None),
    }
}

fn output_spec(
    ctx: &mut Ctx,
    mut table: Table,
    at: usize,
    index: usize,
    needs_match: bool,
) -> Option<OutputSpec> {
    let ty = take_type(ctx, &mut table, at, "output")?;
    let patterns = match take_match(ctx, &mut table, at)? {
        Some(s) => s,
        None if needs_match => {
            ctx.error(at, "", format!("[[output]] of type {ty:?} needs `match`"));
            return None;
        }
        None => "**".to_string(),
    };
    if let Err(e) = crate::router::Pattern::parse_list(&patterns) {
        ctx.error(at, "match", e);
    }
    let buffer = match table.remove("buffer") {
        Some(Value::Table(t)) => ctx.typed(t, at, "buffer")?,
        Some(_) => {
            ctx.error(at, "buffer", "expected a table [output.buffer]");
            return None;
        }
        None => BufferConfig::default(),
    };
    let secondary = match table.remove("secondary") {
        Some(Value::Table(t)) => Some(Box::new(output_spec(ctx, t, at, index, false)?)),
        Some(_) => {
            ctx.error(at, "secondary", "expected a table [output.secondary]");
            return None;
        }
        None => None,
    };
    let kind = match ty.as_str() {
        "stdout" => OutputKind::Stdout(ctx.typed(table, at, "")?),
        "null" => OutputKind::Null(ctx.typed(table, at, "")?),
        "file" => OutputKind::File(ctx.typed(table, at, "")?),
        "forward" => OutputKind::Forward(ctx.typed(table, at, "")?),
        "copy" => {
            let stores = match table.remove("store") {
                Some(Value::Array(a)) if !a.is_empty() => a,
                _ => {
                    ctx.error(
                        at,
                        "store",
                        "a copy output needs one or more [[output.store]] tables",
                    );
                    return None;
                }
            };
            if let Some(k) = table.keys().next() {
                ctx.error(at, k, "unknown key for a copy output; expected `store`");
                return None;
            }
            let mut subs = Vec::new();
            for (j, s) in stores.into_iter().enumerate() {
                let Value::Table(t) = s else {
                    ctx.error(at, "store", "expected tables [[output.store]]");
                    return None;
                };
                let mut sub = output_spec(ctx, t, at, j, false)?;
                sub.name = format!("copy#{index}.{}", sub.name);
                subs.push(sub);
            }
            OutputKind::Copy(subs)
        }
        other => {
            ctx.error(
                at,
                "type",
                format!(
                    "unknown output type {other:?}; expected one of: stdout, null, file, forward, copy"
                ),
            );
            return None;
        }
    };
    if let OutputKind::Forward(f) = &kind {
        if f.server.is_empty() {
            ctx.error(
                at,
                "server",
                "a forward output needs at least one [[output.server]]",
            );
            return None;
        }
    }
    Some(OutputSpec {
        name: format!("{ty}#{index}"),
        patterns,
        kind,
        buffer,
        secondary,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_config_parses() {
        let c = parse(DEFAULT_CONFIG, "default").unwrap();
        assert_eq!(c.inputs.len(), 1);
        assert_eq!(c.outputs.len(), 1);
        assert_eq!(c.monitor.unwrap().bind, "127.0.0.1:24220");
    }

    #[test]
    fn every_example_config_is_valid() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");
        let mut n = 0;
        for e in std::fs::read_dir(dir).expect("examples/") {
            let p = e.expect("entry").path();
            if p.extension().is_some_and(|x| x == "toml") {
                load(&p).unwrap_or_else(|e| panic!("{}: {e:?}", p.display()));
                n += 1;
            }
        }
        assert!(n >= 4, "expected the example configs, found {n}");
    }

    #[test]
    fn errors_name_file_line_and_key() {
        let text = "[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:1\"\nbnd = 3\n";
        let e = parse(text, "x.toml").unwrap_err();
        assert_eq!(e[0].file, "x.toml");
        assert_eq!(e[0].line, 4);
        assert_eq!(e[0].key, "bnd");

        let text = "[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:1\"\n\n[[output]]\ntype = \"stdout\"\nmatch = \"**\"\n[output.buffer]\nflush_interval = \"soon\"\n";
        let e = parse(text, "y.toml").unwrap_err();
        assert_eq!(e[0].line, 9, "{e:?}");
        assert!(e[0].key.ends_with("flush_interval"), "{e:?}");
        assert!(e[0].message.contains("duration"), "{e:?}");

        let text = "[[input]]\ntype = \"forward\"\nbind = \"${NAGARE_TEST_UNSET_VAR}\"\n";
        let e = parse(text, "v.toml").unwrap_err();
        assert_eq!(e[0].line, 3, "{e:?}");
        assert!(e[0].message.contains("NAGARE_TEST_UNSET_VAR"), "{e:?}");

        let text = "[[input]]\ntype = \"tail\"\npath = \"/x\"\ntag = \"t\"\n[input.parser]\ntype = \"nope\"\n";
        let e = parse(text, "p.toml").unwrap_err();
        assert_eq!((e[0].line, e[0].key.as_str()), (6, "parser.type"), "{e:?}");

        let text = "[[input]]\ntype = \"tail\"\npath = \"/x\"\ntag = \"t\"\n[input.parser]\ntype = \"regex\"\nexpression = \"(unclosed\"\n";
        let e = parse(text, "r.toml").unwrap_err();
        assert_eq!(e[0].line, 5, "{e:?}");

        let text = "[[input]]\ntype = \"nope\"\n";
        let e = parse(text, "z.toml").unwrap_err();
        assert_eq!((e[0].line, e[0].key.as_str()), (2, "type"));
    }

    #[test]
    fn filter_sections() {
        let input = "[[input]]\ntype = \"forward\"\nbind = \"127.0.0.1:1\"\n";
        let ok = format!("{input}[[filter]]\ntype = \"parser\"\nkey_name = \"log\"\n[filter.parser]\ntype = \"json\"\n[[filter]]\ntype = \"parser\"\nmatch = \"a.* b\"\nkey_name = \"m\"\n[filter.parser]\ntype = \"apache2\"\n");
        let c = parse(&ok, "f.toml").unwrap();
        assert_eq!(c.filters.len(), 2);
        assert_eq!(
            (c.filters[0].name.as_str(), c.filters[0].patterns.as_str()),
            ("parser#0", "**")
        );
        assert_eq!(
            (c.filters[1].name.as_str(), c.filters[1].patterns.as_str()),
            ("parser#1", "a.* b")
        );
        let cases = [
            // (section after the input, line, key)
            ("[[filter]]\ntype = \"nope\"\n", 5, "type"),
            ("[[filter]]\ntype = \"parser\"\n[filter.parser]\ntype = \"json\"\n", 4, "key_name"),
            ("[[filter]]\ntype = \"parser\"\nkey_name = \"m\"\nkey_nam = 1\n[filter.parser]\n", 7, "key_nam"),
            ("[[filter]]\ntype = \"parser\"\nkey_name = \"m\"\n", 4, "parser"),
            ("[[filter]]\ntype = \"parser\"\nmatch = \"a.{b\"\nkey_name = \"m\"\n[filter.parser]\n", 6, "match"),
            ("[[filter]]\ntype = \"parser\"\nkey_name = \"m\"\n[filter.parser]\ntype = \"bogus\"\n", 8, "parser.type"),
            ("[[filter]]\ntype = \"parser\"\nkey_name = \"m\"\n[filter.parser]\ntype = \"multiline\"\nformat_firstline = \"^x\"\n", 8, "parser.type"),
            ("[[filter]]\ntype = \"parser\"\nkey_name = \"m\"\n[filter.parser]\ntype = \"regex\"\nexpression = \"(x\"\n", 7, "parser"),
        ];
        for (section, line, key) in cases {
            let e = parse(&format!("{input}{section}"), "f.toml").unwrap_err();
            assert_eq!(
                (e[0].line, e[0].key.as_str()),
                (line, key),
                "{section}: {e:?}"
            );
        }
    }
}
