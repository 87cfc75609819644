//! The loader: reads the TOML text (with every key's position), expands
//! environment variables, and builds each `[[input]]`, `[[filter]]` and
//! `[[output]]` section through the registration of its `type`, recording
//! what each plugin listens on and writes to for the checks across plugins.
//! Errors and warnings name the file, line and key. Labels, outputs and
//! `[[test]]` tables have files of their own (labels.rs, outputs.rs,
//! test_sections.rs).

use std::ops::Range;

use nagare_core::filter::FilterRegistration;
use nagare_core::output::OutputRegistration;
use nagare_core::pattern::Pattern;
use nagare_core::plugin::{
    self, read, BuildContext, Built, Listen, OptionError, Registration, Section, SectionError,
};
use serde::de::DeserializeOwned;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::labels::LabelUse;
use super::source::{self, join, KeySpans, Lines};
use super::test_spec::Names;
use super::{checks, messages};
use super::{Config, ConfigError, FilterSection, InputSection, MonitorConfig, OutputSection};
use super::{OutputTarget, SystemConfig};
use crate::inputs::InputRegistration;

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

/// Where a listener or a written directory was configured.
pub(super) struct Place {
    /// Byte offset of the key (for the line).
    pub(super) at: usize,
    pub(super) key: String,
    pub(super) plugin: String,
}

pub(super) struct Loader<'a> {
    pub(super) registries: Registries,
    pub(super) file: &'a str,
    pub(super) lines: Lines,
    pub(super) errors: Vec<ConfigError>,
    pub(super) warnings: Vec<ConfigError>,
    /// Key spans of the section being built.
    pub(super) keys: KeySpans,
    pub(super) listens: Vec<(Place, Listen)>,
    pub(super) writes: Vec<(Place, std::path::PathBuf)>,
    /// Every `label` written, for the checks across sections.
    pub(super) labels: Vec<LabelUse>,
    /// (start, kind) of the sections without a label.
    pub(super) unlabelled: Vec<(usize, &'static str)>,
    /// `[system] error_label` and where it was written.
    pub(super) error_label: Option<(String, usize)>,
    /// Set while a filter is built: its failures go to the error label.
    pub(super) failures_routed: bool,
    /// What the output just built sets in its buffer (see ChunkShape).
    pub(super) chunk_shape: nagare_core::plugin::ChunkShape,
}

const TOP_KEYS: [&str; 6] = ["system", "monitor", "input", "filter", "output", "test"];

impl<'a> Loader<'a> {
    pub(super) fn new(registries: Registries, file: &'a str, text: &str) -> Loader<'a> {
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
            chunk_shape: Default::default(),
        }
    }

    pub(super) fn error_at(&mut self, at: usize, key: &str, message: impl Into<String>) {
        self.errors.push(ConfigError {
            file: self.file.to_string(),
            line: self.lines.line(at),
            key: key.to_string(),
            message: message.into(),
        });
    }

    /// Reports a section error; `at` is the section's start, `prefix` its
    /// key path inside the top-level section.
    pub(super) fn section_error(&mut self, at: usize, prefix: &str, e: SectionError) {
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

    pub(super) fn load(&mut self, text: &'a str) -> Option<Config> {
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
    pub(super) fn sections(
        &mut self,
        root: &mut DeTable<'a>,
        what: &str,
    ) -> Vec<Spanned<DeValue<'a>>> {
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
    pub(super) fn registration<'r, B>(
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
    pub(super) fn patterns(
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

    /// Records what building the plugin learned (listeners, written
    /// directories, warnings) with where it was configured.
    fn learned(&mut self, mut cx: BuildContext, at: usize, prefix: &str) {
        self.chunk_shape = std::mem::take(&mut cx.chunk_shape);
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
    pub(super) fn build<B>(
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

    /// The plugin of a section that cannot fan out (an input or a filter).
    pub(super) fn one<B>(&mut self, built: Built<'a, B>, at: usize) -> Option<B> {
        match built {
            Built::One(b) => Some(b),
            Built::Fanout(_) => {
                self.error_at(at, "type", "only an output can fan out to other sections");
                None
            }
        }
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

pub(super) fn into_table(v: Spanned<DeValue<'_>>) -> (DeTable<'_>, Range<usize>) {
    let span = v.span();
    match v.into_inner() {
        DeValue::Table(t) => (t, span),
        _ => (DeTable::default(), span),
    }
}
