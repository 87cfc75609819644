//! The TOML configuration: reading it, building every plugin it names (the
//! one build path of `nagare check` and `nagare run`), and errors that name
//! the file, line and key.
//!
//! The file is read with the position of every key (source.rs); the loader
//! (loader.rs) hands each `[[input]]`, `[[filter]]` and `[[output]]` section
//! to the registration of its `type` (nagare-core's plugin.rs), which reads
//! the plugin's options struct and builds the plugin without I/O. What a
//! loaded config is: model.rs. Each job of the loader has its file: labels
//! (labels.rs), outputs with their buffer, copy stores and secondary
//! (outputs.rs), `[[test]]` tables (test_sections.rs), and the checks across
//! plugins that come last (two listeners on one address, directories that
//! cannot be written: checks.rs). messages.rs words serde's errors for
//! people.

mod checks;
mod labels;
mod loader;
mod messages;
mod model;
mod outputs;
#[cfg(test)]
mod reference;
mod source;
mod test_sections;
pub mod test_spec;

use std::fmt;
use std::path::Path;

pub use loader::Registries;
pub use messages::closest;
pub use model::{
    Config, FilterSection, InputSection, MonitorConfig, OutputSection, OutputTarget, SystemConfig,
};
pub use test_sections::load_tests;

use loader::Loader;

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

/// A config file's TOML text: the file itself, or, for a Fluentd or Fluent
/// Bit config, the TOML `nagare convert` makes of it (converted in memory)
/// with the conversion's notes. `name` is what errors call the text.
pub struct Source {
    pub text: String,
    pub name: String,
    pub notes: Vec<crate::convert::Note>,
}

/// Reads a config file, converting a peer's config (docs/migration.md).
pub fn read_source(path: &Path) -> Result<Source, Vec<ConfigError>> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| {
        vec![ConfigError {
            file: name.clone(),
            line: 0,
            key: String::new(),
            message: format!("cannot read the file: {e}"),
        }]
    })?;
    let Some(dialect) = crate::convert::detect(path, &text) else {
        return Ok(Source {
            text,
            name,
            notes: Vec::new(),
        });
    };
    match crate::convert::convert_file(path, dialect) {
        Ok(c) => Ok(Source {
            text: c.toml,
            // Lines of errors are lines of the converted text.
            name: format!("{name} (converted from {dialect}; see it with `nagare convert {name}`)"),
            notes: c.notes,
        }),
        Err(e) => Err(vec![ConfigError {
            file: e.file,
            line: e.line,
            key: String::new(),
            message: format!("{} (read as a {dialect} config)", e.message),
        }]),
    }
}

/// Reads and builds a config file (a peer's config is converted first; the
/// conversion's notes come first among the warnings).
pub fn load(path: &Path) -> Result<Config, Vec<ConfigError>> {
    let source = read_source(path)?;
    let mut config = parse(&source.text, &source.name)?;
    let notes = source.notes.iter().map(|n| ConfigError {
        file: n.file.clone(),
        line: n.line,
        key: String::new(),
        message: format!("{}: {}: {}", note_kind(n), n.what, n.why),
    });
    let mut warnings: Vec<ConfigError> = notes.collect();
    warnings.append(&mut config.warnings);
    config.warnings = warnings;
    Ok(config)
}

fn note_kind(n: &crate::convert::Note) -> &'static str {
    match n.kind {
        crate::convert::NoteKind::Approximate => "approximated",
        crate::convert::NoteKind::Unmapped => "not converted",
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

#[cfg(test)]
mod contributing_example;
#[cfg(test)]
mod tests;
