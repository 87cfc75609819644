//! The TOML configuration: reading it, building every plugin it names (the
//! one build path of `nagare check` and `nagare run`), and errors that name
//! the file, line and key.
//!
//! The file is read with the position of every key (config/source.rs);
//! each `[[input]]`, `[[filter]]` and `[[output]]` section is handed to the
//! registration of its `type` (plugin.rs), which reads the plugin's options
//! struct and builds the plugin without I/O. Checks across plugins (two
//! listeners on one address, directories that cannot be written) come last
//! (config/checks.rs).

mod checks;

mod messages;
pub use messages::closest;
#[cfg(test)]
mod reference;
mod source;
pub mod test_spec;

use std::fmt;
use std::ops::Range;
use std::path::Path;

use serde::de::DeserializeOwned;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

use nagare_core::filter::{Filter, FilterRegistration};
use nagare_core::output::{Output, OutputRegistration};
use nagare_core::pattern::Pattern;
use nagare_core::plugin::{
    self, read, BuildContext, Built, Listen, OptionError, Registration, Section, SectionError,
};
use std::sync::Arc;

use crate::buffer::{BufferConfig, BufferType};
use crate::inputs::{Input, InputRegistration};
use source::{join, KeySpans, Lines};
use test_spec::{Names, TestCase, TestSpec};

/// The embedded default configuration used by `nagare run` without `-c`.
pub const DEFAULT_CONFIG: &str = include_str!("default.toml");

/// A problem in a config file: where (line 0 when it is about the file as a
/// whole) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    pub line: usize,
    pub key: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.key.is_empty()) {
            (0, _) => write!(f, "{}: {}", self.file, self.message),
            (line, true) => write!(f, "{}:{line}: {}", self.file, self.message),
            (line, false) => write!(
                f,
                "{}:{line}: key `{}`: {}",
                self.file, self.key, self.message
            ),
        }
    }
}

#[derive(Debug, Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct SystemConfig {
    /// Runtime worker threads; 0 or absent = one per core.
    #[serde(default)]
    pub workers: usize,
    /// error, warn, info, debug or trace. The NAGARE_LOG environment variable overrides it.
    #[serde(default)]
    pub log_level: Option<String>,
    /// nagare's own log lines: "text" (default) or "json" (one object per
    /// line with timestamp, level, message and the event's fields).
    #[serde(default)]
    pub log_format: crate::logging::LogFormat,
    /// File that nagare's own log is appended to (default: stderr). SIGUSR1
    /// opens the path again, for logrotate's `postrotate`.
    #[serde(default)]
    pub log_file: Option<String>,
    /// How long shutdown waits for buffers to drain before giving up (default "60s").
    /// Then (or at a second SIGTERM/SIGINT) what is left is kept, not
    /// dropped: file buffers keep their chunks for the next start, memory
    /// buffers hand theirs to the secondary output or to `dead_letter_dir`.
    #[serde(default)]
    pub shutdown_timeout: Option<nagare_core::units::Dur>,
    /// Where memory buffers without a secondary output write the chunks
    /// still undelivered when shutdown gives up, one folder per output, as
    /// files `nagare replay` sends (default: "nagare-dead-letters" in the
    /// system's temporary directory).
    #[serde(default)]
    pub dead_letter_dir: Option<String>,
    /// The label that receives the events a filter failed on (a parser
    /// filter's records that do not parse, a lua filter's `lua_error`
    /// events, an exec filter's batches its program failed on), marked with
    /// the reason, instead of their going on with the others (Fluentd's
    /// `@ERROR`); outputs with `label` = this name get them. Default none:
    /// they go on, marked.
    #[serde(default)]
    pub error_label: Option<String>,
}

#[derive(Debug, Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MonitorConfig {
    /// Address of the HTTP monitor, e.g. "127.0.0.1:24220".
    pub bind: String,
}

/// A checked configuration with every plugin built and ready to start.
pub struct Config {
    pub system: SystemConfig,
    pub monitor: Option<MonitorConfig>,
    pub inputs: Vec<InputSection>,
    /// `[[filter]]` sections in file order.
    pub filters: Vec<FilterSection>,
    pub outputs: Vec<OutputSection>,
    /// Things that work but are probably not meant (`nagare check` and
    /// `nagare run` print them).
    pub warnings: Vec<ConfigError>,
    /// `[[test]]` tables, for `nagare test` (checked, never run by `run`).
    pub tests: Vec<TestCase>,
    /// The section names tests refer to.
    pub names: Names,
}

pub struct InputSection {
    /// e.g. "forward#0": type and position among the inputs.
    pub name: String,
    /// `label`: the filters and outputs that see this input's events.
    pub label: Option<String>,
    pub type_name: &'static str,
    pub input: Box<dyn Input>,
}

pub struct FilterSection {
    /// e.g. "parser#0": type and position among the filters.
    pub name: String,
    pub type_name: &'static str,
    pub label: Option<String>,
    pub patterns: Vec<Pattern>,
    pub filter: Box<dyn Filter>,
}

pub struct OutputSection {
    /// e.g. "file#1", "copy#0.stdout#1", "file#1.secondary".
    pub name: String,
    pub type_name: &'static str,
    /// `label` of a top-level `[[output]]`: it gets only that label's events.
    pub label: Option<String>,
    pub patterns: Vec<Pattern>,
    pub buffer: BufferConfig,
    pub target: OutputTarget,
    pub secondary: Option<Box<OutputSection>>,
}

/// What an output section sends its events to: one output, or (a `copy`
/// output) several output sections that each get every event.
pub enum OutputTarget {
    One(Arc<dyn Output>),
    Copy(Vec<OutputSection>),
}

/// The registries a config is loaded with.
#[derive(Clone, Copy)]
pub struct Registries {
    pub inputs: &'static [InputRegistration],
    pub filters: &'static [FilterRegistration],
    pub outputs: &'static [OutputRegistration],
}

impl Registries {
    /// The plugins built into this binary.
    pub fn builtin() -> Registries {
        Registries {
            inputs: crate::inputs::REGISTRY,
            filters: crate::filters::REGISTRY,
            outputs: crate::outputs::REGISTRY,
        }
    }
}

/// Reads and builds a config file.
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

/// Reads the `[[test]]` tables of a test file (a file of tests only, beside
/// the config); `names` are the config's sections.
pub fn load_tests(path: &Path, names: &Names) -> Result<Vec<TestCase>, Vec<ConfigError>> {
    let file = path.display().to_string();
    let error = |line, message: String| ConfigError {
        file: file.clone(),
        line,
        key: String::new(),
        message,
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| vec![error(0, format!("cannot read the file: {e}"))])?;
    let mut loader = Loader::new(Registries::builtin(), &file, &text);
    let mut table = match DeTable::parse(&text) {
        Ok(r) => r.into_inner(),
        Err(e) => {
            let line = loader.lines.line(e.span().map_or(0, |s| s.start));
            return Err(vec![error(
                line,
                format!("not valid TOML: {}", e.message().trim()),
            )]);
        }
    };
    for key in table.keys() {
        if key.get_ref() != "test" {
            loader.error_at(
                key.span().start,
                key.get_ref(),
                "a test file holds only [[test]] tables (the config is given with -c)",
            );
        }
    }
    let tests = loader.tests(&mut table, names);
    if loader.errors.is_empty() {
        Ok(tests)
    } else {
        Err(loader.errors)
    }
}

/// Reads and builds config text; `file` names it in errors.
pub fn parse(text: &str, file: &str) -> Result<Config, Vec<ConfigError>> {
    parse_with(text, file, Registries::builtin())
}

/// `parse` with other plugins than the built-in ones (tests).
pub fn parse_with(
    text: &str,
    file: &str,
    registries: Registries,
) -> Result<Config, Vec<ConfigError>> {
    let mut loader = Loader::new(registries, file, text);
    let config = loader.load(text);
    match config {
        Some(c) if loader.errors.is_empty() => Ok(c),
        _ => Err(loader.errors),
    }
}

/// Where a listener or a written directory was configured.
struct Place {
    /// Byte offset of the key (for the line).
    at: usize,
    key: String,
    plugin: String,
}

struct Loader<'a> {
    registries: Registries,
    file: &'a str,
    lines: Lines,
    errors: Vec<ConfigError>,
    warnings: Vec<ConfigError>,
    /// Key spans of the section being built.
    keys: KeySpans,
    listens: Vec<(Place, Listen)>,
    writes: Vec<(Place, std::path::PathBuf)>,
    /// Every `label` written, for the checks across sections.
    labels: Vec<LabelUse>,
    /// (start, kind) of the sections without a label.
    unlabelled: Vec<(usize, &'static str)>,
    /// `[system] error_label` and where it was written.
    error_label: Option<(String, usize)>,
    /// Set while a filter is built: its failures go to the error label.
    failures_routed: bool,
}

/// A `label` key of a section.
struct LabelUse {
    name: String,
    /// Byte offset of the value (for the line).
    at: usize,
    /// "input", "filter" or "output".
    kind: &'static str,
}

const TOP_KEYS: [&str; 6] = ["system", "monitor", "input", "filter", "output", "test"];

impl<'a> Loader<'a> {
    fn new(registries: Registries, file: &'a str, text: &str) -> Loader<'a> {
        Loader {
            registries,
            file,
            lines: Lines::new(text),
            errors: Vec::new(),
            warnings: Vec::new(),
            keys: KeySpans::default(),
            listens: Vec::new(),
            writes: Vec::new(),
            labels: Vec::new(),
            unlabelled: Vec::new(),
            error_label: None,
            failures_routed: false,
        }
    }

    /// Reads and checks the `[[test]]` tables of `root` against `names`.
    fn tests(&mut self, root: &mut DeTable<'a>, names: &Names) -> Vec<TestCase> {
        let mut tests = Vec::new();
        for v in self.sections(root, "test") {
            let at = v.span().start;
            if let DeValue::Table(t) = v.get_ref() {
                self.keys = KeySpans::of(t);
            }
            let checked = read::<TestSpec>(v).and_then(|s| Ok(s.check(names)?));
            match checked {
                Ok(t) => tests.push(t),
                Err(e) => {
                    let before = self.errors.len();
                    self.section_error(at, "", e);
                    for e in &mut self.errors[before..] {
                        e.key = join("test", &e.key);
                    }
                }
            }
        }
        tests
    }

    fn error_at(&mut self, at: usize, key: &str, message: impl Into<String>) {
        self.errors.push(ConfigError {
            file: self.file.to_string(),
            line: self.lines.line(at),
            key: key.to_string(),
            message: message.into(),
        });
    }

    /// Reports a section error; `at` is the section's start, `prefix` its
    /// key path inside the top-level section.
    fn section_error(&mut self, at: usize, prefix: &str, e: SectionError) {
        match e {
            SectionError::Invalid { key, span, message } => {
                let key = join(prefix, &key);
                // A missing key is reported at its table, named as it
                // should have been written.
                let missing = message
                    .strip_prefix("missing field `")
                    .and_then(|r| r.split('`').next());
                let pos = match missing {
                    Some(_) if key.is_empty() => at,
                    Some(_) => self.keys.find(&key).map_or(at, |s| s.start),
                    None => self
                        .keys
                        .find(&key)
                        .map(|s| s.start)
                        .or(span.map(|s| s.start))
                        .unwrap_or(at),
                };
                let key = match missing {
                    Some(m) => join(&key, m),
                    None => key,
                };
                let key = if key == "." { String::new() } else { key };
                self.error_at(pos, &key, messages::explain(&message));
            }
            SectionError::Option(OptionError { key, message }) => {
                let key = join(prefix, &key);
                let pos = self.keys.find(&key).map_or(at, |s| s.start);
                self.error_at(pos, &key, message);
            }
            SectionError::Reported => {}
        }
    }

    fn load(&mut self, text: &'a str) -> Option<Config> {
        let root = match DeTable::parse(text) {
            Ok(r) => r,
            Err(e) => {
                let at = e.span().map_or(0, |s| s.start);
                self.error_at(at, "", format!("not valid TOML: {}", e.message().trim()));
                return None;
            }
        };
        let mut root = Spanned::new(root.span(), DeValue::Table(root.into_inner()));
        let mut unset = Vec::new();
        source::expand_env(&mut root, &mut unset);
        for u in unset {
            self.error_at(
                u.span.start,
                "",
                format!(
                    "environment variable {} is not set (write ${{{}:-default}} to give a default)",
                    u.name, u.name
                ),
            );
        }
        source::type_first(root.get_mut());
        let DeValue::Table(mut root) = root.into_inner() else {
            return None;
        };
        for key in root.keys() {
            let k = key.get_ref();
            if !TOP_KEYS.contains(&k.as_ref()) {
                let hint = messages::did_you_mean(k, TOP_KEYS);
                self.error_at(
                    key.span().start,
                    k,
                    format!("unknown section `{k}`.{hint} Known: [system], [monitor], [[input]], [[filter]], [[output]], [[test]]"),
                );
            }
        }
        let system = match root.remove("system") {
            Some(v) => self.plain::<SystemConfig>(v, "system").unwrap_or_default(),
            None => SystemConfig::default(),
        };
        if let Some(e) = &system.error_label {
            let at = self.keys.find("error_label").map_or(0, |s| s.start);
            self.error_label = Some((e.clone(), at));
        }
        let monitor = root
            .remove("monitor")
            .and_then(|v| self.plain::<MonitorConfig>(v, "monitor"));
        if let (Some(m), Some(at)) = (&monitor, self.keys.find("bind")) {
            self.listen_monitor(&m.bind, at.start);
        }
        let inputs = self.sections(&mut root, "input");
        let inputs: Vec<InputSection> = inputs
            .into_iter()
            .enumerate()
            .filter_map(|(i, v)| self.input(v, i))
            .collect();
        let filters = self.sections(&mut root, "filter");
        let filters: Vec<FilterSection> = filters
            .into_iter()
            .enumerate()
            .filter_map(|(i, v)| self.filter(v, i))
            .collect();
        let outputs = self.sections(&mut root, "output");
        let outputs: Vec<OutputSection> = outputs
            .into_iter()
            .enumerate()
            .filter_map(|(i, v)| self.output(v, "", "", i, true))
            .collect();
        if inputs.is_empty() && self.errors.is_empty() {
            self.error_at(0, "", "no [[input]] section: nothing would be received");
        }
        if outputs.is_empty() && self.errors.is_empty() {
            self.warnings.push(ConfigError {
                file: self.file.to_string(),
                line: 0,
                key: String::new(),
                message: "no [[output]] section: every event received is dropped".into(),
            });
        }
        self.check_labels();
        self.cross_checks();
        let names = Names {
            inputs: inputs
                .iter()
                .map(|i| (i.name.clone(), i.label.clone()))
                .collect(),
            filters: filters.iter().map(|f| f.name.clone()).collect(),
            outputs: outputs
                .iter()
                .flat_map(|o| match &o.target {
                    OutputTarget::Copy(stores) => stores.iter().map(|s| s.name.clone()).collect(),
                    OutputTarget::One(_) => vec![o.name.clone()],
                })
                .collect(),
            incomplete: !self.errors.is_empty(),
        };
        let tests = self.tests(&mut root, &names);
        Some(Config {
            system,
            monitor,
            inputs,
            filters,
            outputs,
            warnings: std::mem::take(&mut self.warnings),
            tests,
            names,
        })
    }

    /// A plain table (`[system]`, `[monitor]`, `[output.buffer]`) read into `T`.
    fn plain<T: DeserializeOwned>(&mut self, v: Spanned<DeValue<'a>>, what: &str) -> Option<T> {
        let at = v.span().start;
        let DeValue::Table(t) = v.get_ref() else {
            self.error_at(at, what, format!("expected a table [{what}]"));
            return None;
        };
        self.keys = KeySpans::of(t);
        match read(v) {
            Ok(c) => Some(c),
            Err(e) => {
                let before = self.errors.len();
                self.section_error(at, "", e);
                for e in &mut self.errors[before..] {
                    e.key = join(what, &e.key);
                }
                None
            }
        }
    }

    /// The `[[input]]` (etc.) array of tables.
    fn sections(&mut self, root: &mut DeTable<'a>, what: &str) -> Vec<Spanned<DeValue<'a>>> {
        let Some(v) = root.remove(what) else {
            return Vec::new();
        };
        let at = v.span().start;
        match v.into_inner() {
            DeValue::Array(a) if a.iter().all(|s| s.get_ref().is_table()) => {
                a.into_iter().collect()
            }
            _ => {
                self.error_at(
                    at,
                    what,
                    format!("expected [[{what}]] sections (an array of tables, with two brackets)"),
                );
                Vec::new()
            }
        }
    }

    /// Takes the section's `type` and finds its registration.
    fn registration<'r, B>(
        &mut self,
        table: &mut DeTable<'a>,
        at: usize,
        prefix: &str,
        what: &str,
        registry: &'r [Registration<B>],
    ) -> Option<&'r Registration<B>> {
        let key = join(prefix, "type");
        match table.remove("type") {
            Some(v) => {
                let pos = v.span().start;
                match v.get_ref().as_str() {
                    Some(ty) => {
                        let found = plugin::find(registry, ty);
                        if found.is_none() {
                            let hint = messages::closest(ty, registry.iter().map(|r| r.type_name))
                                .map_or_else(String::new, |k| format!(" Did you mean \"{k}\"?"));
                            self.error_at(
                                pos,
                                &key,
                                format!(
                                    "unknown {what} type \"{ty}\".{hint} Known types: {}",
                                    plugin::type_list(registry)
                                ),
                            );
                        }
                        found
                    }
                    None => {
                        self.error_at(
                            pos,
                            &key,
                            format!("expected a string such as \"{}\"", registry[0].type_name),
                        );
                        None
                    }
                }
            }
            None => {
                self.error_at(
                    at,
                    prefix,
                    format!(
                        "[[{what}]] needs a `type`: one of {}",
                        plugin::type_list(registry)
                    ),
                );
                None
            }
        }
    }

    /// Takes `match` (tag patterns); None when absent, Err when reported.
    fn patterns(
        &mut self,
        table: &mut DeTable<'a>,
        prefix: &str,
    ) -> Result<Option<Vec<Pattern>>, ()> {
        let key = join(prefix, "match");
        let Some(v) = table.remove("match") else {
            return Ok(None);
        };
        let pos = v.span().start;
        match v.get_ref().as_str().filter(|s| !s.trim().is_empty()) {
            Some(s) => match Pattern::parse_list(s) {
                Ok(p) => Ok(Some(p)),
                Err(e) => {
                    self.error_at(pos, &key, e);
                    Err(())
                }
            },
            None => {
                self.error_at(
                    pos,
                    &key,
                    "expected a string of tag patterns separated by spaces, e.g. \"app.** web.*\"",
                );
                Err(())
            }
        }
    }

    /// Takes `label` (a section's label; `kind` is "input", "filter" or
    /// "output"); None when absent, Err when reported.
    fn label(
        &mut self,
        table: &mut DeTable<'a>,
        kind: &'static str,
        section: usize,
    ) -> Result<Option<String>, ()> {
        let Some(v) = table.remove("label") else {
            self.unlabelled.push((section, kind));
            return Ok(None);
        };
        let at = v.span().start;
        match v.get_ref().as_str().filter(|s| !s.trim().is_empty()) {
            Some(name) => {
                self.labels.push(LabelUse {
                    name: name.to_string(),
                    at,
                    kind,
                });
                Ok(Some(name.to_string()))
            }
            None => {
                self.error_at(at, "label", "expected a label name, e.g. label = \"audit\"");
                Err(())
            }
        }
    }

    /// Labels must connect: every label an input sets has an output, and
    /// every label of a filter or output is set by an input (or is the
    /// error label); the error label has an output.
    fn check_labels(&mut self) {
        let error = self.error_label.as_ref().map(|(e, _)| e.clone());
        let has = |l: &Self, kind: &str, name: &str| {
            l.labels.iter().any(|u| u.kind == kind && u.name == name)
        };
        let mut found = Vec::new();
        for u in &self.labels {
            match u.kind {
                "input" if !has(self, "output", &u.name) => found.push((
                    u.at,
                    "label",
                    format!(
                        "no [[output]] has label = \"{}\": this input's events would be discarded",
                        u.name
                    ),
                )),
                "filter" | "output"
                    if !has(self, "input", &u.name) && error.as_ref() != Some(&u.name) =>
                {
                    let known = self
                        .labels
                        .iter()
                        .filter(|k| k.kind == "input")
                        .map(|k| k.name.as_str())
                        .chain(error.as_deref());
                    let hint = messages::closest(&u.name, known)
                        .map_or_else(String::new, |k| format!(" Did you mean \"{k}\"?"));
                    found.push((
                        u.at,
                        "label",
                        format!(
                            "no [[input]] has label = \"{}\" (nor is it [system] error_label): this {} would get no events.{hint}",
                            u.name, u.kind
                        ),
                    ));
                }
                _ => {}
            }
        }
        if let Some((e, at)) = &self.error_label {
            if !has(self, "output", e) {
                found.push((
                    *at,
                    "system.error_label",
                    format!("no [[output]] has label = \"{e}\": the events filters fail on would be discarded"),
                ));
            }
        }
        for (at, key, message) in found {
            self.error_at(at, key, message);
        }
        // Every input has a label: sections without one get nothing.
        let inputs_all_labelled = self.labels.iter().any(|u| u.kind == "input")
            && !self.unlabelled.iter().any(|(_, kind)| *kind == "input");
        if inputs_all_labelled {
            for (at, kind) in self.unlabelled.clone() {
                self.warnings.push(ConfigError {
                    file: self.file.to_string(),
                    line: self.lines.line(at),
                    key: String::new(),
                    message: format!(
                        "every [[input]] has a label: this [[{kind}]] without one gets no events"
                    ),
                });
            }
        }
    }

    /// Records what building the plugin learned (listeners, written
    /// directories, warnings) with where it was configured.
    fn learned(&mut self, cx: BuildContext, at: usize, prefix: &str) {
        let place = |l: &Self, key: &str| {
            let key = join(prefix, key);
            Place {
                at: l.keys.find(&key).map_or(at, |s| s.start),
                key,
                plugin: cx.name.clone(),
            }
        };
        for (key, what) in &cx.listens {
            let p = place(self, key);
            self.listens.push((p, what.clone()));
        }
        for (key, dir) in &cx.writes {
            let p = place(self, key);
            self.writes.push((p, dir.clone()));
        }
        for (key, message) in &cx.warnings {
            let p = place(self, key);
            self.warnings.push(ConfigError {
                file: self.file.to_string(),
                line: self.lines.line(p.at),
                key: p.key,
                message: message.clone(),
            });
        }
    }

    /// Builds one plugin section through its registration; errors are
    /// reported (after `hint` rewrote them), what it learned is recorded.
    fn build<B>(
        &mut self,
        reg: &Registration<B>,
        table: DeTable<'a>,
        span: Range<usize>,
        name: &str,
        prefix: &str,
        hint: fn(SectionError, &str) -> SectionError,
    ) -> Option<Built<'a, B>> {
        let at = span.start;
        let mut cx = BuildContext::new(name);
        cx.failures_routed = self.failures_routed;
        let section = Section::new(Spanned::new(span, DeValue::Table(table)), prefix);
        match (reg.build)(section, &mut cx) {
            Ok(built) => {
                self.learned(cx, at, prefix);
                Some(built)
            }
            Err(e) => {
                self.section_error(at, prefix, hint(e, prefix));
                None
            }
        }
    }

    fn input(&mut self, v: Spanned<DeValue<'a>>, index: usize) -> Option<InputSection> {
        let at = v.span().start;
        let (mut table, span) = into_table(v);
        self.keys = KeySpans::of(&table);
        let reg = self.registration(&mut table, at, "", "input", self.registries.inputs)?;
        let label = self.label(&mut table, "input", at).ok()?;
        let name = format!("{}#{index}", reg.type_name);
        let built = self.build(reg, table, span, &name, "", |e, _| e)?;
        let input = self.one(built, at)?;
        Some(InputSection {
            name,
            label,
            type_name: reg.type_name,
            input,
        })
    }

    fn filter(&mut self, v: Spanned<DeValue<'a>>, index: usize) -> Option<FilterSection> {
        let at = v.span().start;
        let (mut table, span) = into_table(v);
        self.keys = KeySpans::of(&table);
        let reg = self.registration(&mut table, at, "", "filter", self.registries.filters)?;
        let patterns = self.patterns(&mut table, "").ok()?;
        let patterns =
            patterns.unwrap_or_else(|| Pattern::parse_list("**").expect("static pattern"));
        let label = self.label(&mut table, "filter", at).ok()?;
        let name = format!("{}#{index}", reg.type_name);
        // A filter in the error label keeps its failures: sending them to
        // its own label again could loop.
        self.failures_routed = self
            .error_label
            .as_ref()
            .is_some_and(|(e, _)| label.as_ref() != Some(e));
        let filter = self
            .build(reg, table, span, &name, "", |e, _| e)
            .and_then(|b| self.one(b, at));
        self.failures_routed = false;
        Some(FilterSection {
            name,
            type_name: reg.type_name,
            label,
            patterns,
            filter: filter?,
        })
    }

    /// An `[[output]]`, an `[output.secondary]` or a copy's `[[output.store]]`:
    /// `prefix` is its key path in the top-level section, `name_prefix` goes
    /// before its name.
    fn output(
        &mut self,
        v: Spanned<DeValue<'a>>,
        prefix: &str,
        name_prefix: &str,
        index: usize,
        top: bool,
    ) -> Option<OutputSection> {
        let at = v.span().start;
        let (mut table, span) = into_table(v);
        if top {
            self.keys = KeySpans::of(&table);
        }
        let reg = self.registration(&mut table, at, prefix, "output", self.registries.outputs)?;
        let patterns = match self.patterns(&mut table, prefix).ok()? {
            Some(p) if top => p,
            None if top => {
                self.error_at(
                    at,
                    prefix,
                    format!(
                        "[[output]] of type \"{}\" needs `match`, e.g. match = \"app.**\"",
                        reg.type_name
                    ),
                );
                return None;
            }
            Some(_) => {
                let key = join(prefix, "match");
                let pos = self.keys.find(&key).map_or(at, |s| s.start);
                self.error_at(pos, &key, "only a top-level [[output]] takes `match`; this one receives what its parent gets");
                return None;
            }
            None => Vec::new(),
        };
        let label = if top {
            self.label(&mut table, "output", at).ok()?
        } else if table.contains_key("label") {
            let key = join(prefix, "label");
            let pos = self.keys.find(&key).map_or(at, |s| s.start);
            self.error_at(
                pos,
                &key,
                "only a top-level [[output]] takes `label`; this one receives what its parent gets",
            );
            return None;
        } else {
            None
        };
        let name = format!("{name_prefix}{}#{index}", reg.type_name);
        let buffer = match table.remove("buffer") {
            Some(b) => {
                let bprefix = join(prefix, "buffer");
                match read::<BufferConfig>(b) {
                    Ok(b) => b,
                    Err(e) => {
                        self.section_error(at, &bprefix, e);
                        return None;
                    }
                }
            }
            None => BufferConfig::default(),
        };
        let mut ok = self.check_buffer(&buffer, at, prefix, &name);
        let secondary = match table.remove("secondary") {
            Some(s) => {
                let sprefix = join(prefix, "secondary");
                match self.output_secondary(s, &sprefix, &name) {
                    Some(s) => Some(Box::new(s)),
                    None => {
                        ok = false;
                        None
                    }
                }
            }
            None => None,
        };
        let target = match self.build(reg, table, span, &name, prefix, buffer_key_hint)? {
            Built::One(o) => OutputTarget::One(o),
            Built::Fanout(stores) => OutputTarget::Copy(self.stores(stores, &name)?),
        };
        ok.then(|| OutputSection {
            name,
            type_name: reg.type_name,
            label,
            patterns,
            buffer,
            target,
            secondary,
        })
    }

    /// The plugin of a section that cannot fan out (an input or a filter).
    fn one<B>(&mut self, built: Built<'a, B>, at: usize) -> Option<B> {
        match built {
            Built::One(b) => Some(b),
            Built::Fanout(_) => {
                self.error_at(at, "type", "only an output can fan out to other sections");
                None
            }
        }
    }

    /// A copy output's stores (`prefix`, table), each built as an output
    /// section without `match`; none may be a copy itself.
    fn stores(
        &mut self,
        stores: Vec<(String, Spanned<DeValue<'a>>)>,
        parent: &str,
    ) -> Option<Vec<OutputSection>> {
        let mut outs = Vec::new();
        let mut failed = false;
        for (j, (prefix, table)) in stores.into_iter().enumerate() {
            let at = table.span().start;
            match self.output(table, &prefix, &format!("{parent}."), j, false) {
                Some(o) if matches!(o.target, OutputTarget::Copy(_)) => {
                    let key = prefix.rsplit_once('[').map_or(prefix.as_str(), |(k, _)| k);
                    let pos = self.keys.find(key).map_or(at, |s| s.start);
                    self.error_at(pos, key, "a copy output cannot hold another copy");
                    failed = true;
                }
                Some(o) => outs.push(o),
                None => failed = true,
            }
        }
        (!failed).then_some(outs)
    }

    fn output_secondary(
        &mut self,
        v: Spanned<DeValue<'a>>,
        prefix: &str,
        parent: &str,
    ) -> Option<OutputSection> {
        let mut s = self.output(v, prefix, "", 0, false)?;
        if matches!(s.target, OutputTarget::Copy(_)) {
            let pos = self.keys.find(prefix).map_or(0, |s| s.start);
            self.error_at(pos, prefix, "a secondary output cannot be a fan-out (copy)");
            return None;
        }
        s.name = format!("{parent}.secondary");
        Some(s)
    }

    fn check_buffer(&mut self, b: &BufferConfig, at: usize, prefix: &str, name: &str) -> bool {
        let key = join(prefix, "buffer");
        let pos = self.keys.find(&key).map_or(at, |s| s.start);
        match (b.kind, &b.path) {
            (BufferType::File, None) => {
                self.error_at(
                    pos,
                    &join(&key, "path"),
                    "a file buffer needs `path`, the directory of its chunk files, e.g. path = \"/var/lib/nagare/buffer/app\"",
                );
                return false;
            }
            (BufferType::File, Some(p)) => {
                let ppos = self.keys.find(&join(&key, "path")).map_or(pos, |s| s.start);
                self.writes.push((
                    Place {
                        at: ppos,
                        key: join(&key, "path"),
                        plugin: name.to_string(),
                    },
                    p.into(),
                ));
            }
            (BufferType::Memory, Some(_)) => {
                self.warnings.push(ConfigError {
                    file: self.file.to_string(),
                    line: self.lines.line(pos),
                    key: join(&key, "path"),
                    message: "`path` is ignored by a memory buffer (set type = \"file\" to keep chunks on disk)".into(),
                });
            }
            (BufferType::Memory, None) => {}
        }
        let mut ok = true;
        let mut bad = |l: &mut Self, k: &str, m: &str| {
            let k = join(&key, k);
            let p = l.keys.find(&k).map_or(pos, |s| s.start);
            l.error_at(p, &k, m);
            ok = false;
        };
        if b.chunk_limit_size.0 == 0 {
            bad(
                self,
                "chunk_limit_size",
                "must be more than 0, e.g. \"2MiB\"",
            );
        }
        if b.total_limit_size.0 < b.chunk_limit_size.0 {
            bad(
                self,
                "total_limit_size",
                "must be at least chunk_limit_size (one chunk must fit)",
            );
        }
        if b.flush_thread_count == 0 {
            bad(self, "flush_thread_count", "must be at least 1");
        }
        ok
    }

    fn listen_monitor(&mut self, bind: &str, at: usize) {
        match nagare_core::address::resolve(bind) {
            Ok(addr) => self.listens.push((
                Place {
                    at,
                    key: "monitor.bind".into(),
                    plugin: "monitor".into(),
                },
                Listen::Tcp(addr),
            )),
            Err(e) => self.error_at(at, "monitor.bind", e),
        }
    }

    fn cross_checks(&mut self) {
        let mut found = Vec::new();
        checks::listeners(&self.listens, &mut found);
        checks::writable(&self.writes, &mut found);
        for (at, key, message) in found {
            self.error_at(at, &key, message);
        }
    }
}

/// A buffer option written among an output's own options (Fluentd users
/// write flush_interval there) is pointed to `[output.buffer]`.
fn buffer_key_hint(e: SectionError, prefix: &str) -> SectionError {
    let SectionError::Invalid { key, span, message } = e else {
        return e;
    };
    let unknown = message
        .strip_prefix("unknown field `")
        .and_then(|r| r.split('`').next())
        .map(str::to_string);
    let schema = schemars::schema_for!(BufferConfig);
    let is_buffer_key = unknown.as_deref().is_some_and(|k| {
        schema
            .as_value()
            .get("properties")
            .and_then(|p| p.get(k))
            .is_some()
    });
    match unknown {
        Some(k) if is_buffer_key => SectionError::Invalid {
            key,
            span,
            message: format!(
                "`{k}` is a buffer option: put it under [{}.buffer]",
                if prefix.is_empty() {
                    "output".to_string()
                } else {
                    format!("output.{prefix}")
                }
            ),
        },
        _ => SectionError::Invalid { key, span, message },
    }
}

fn into_table(v: Spanned<DeValue<'_>>) -> (DeTable<'_>, Range<usize>) {
    let span = v.span();
    match v.into_inner() {
        DeValue::Table(t) => (t, span),
        _ => (DeTable::default(), span),
    }
}

#[cfg(test)]
mod contributing_example;
#[cfg(test)]
mod tests;
