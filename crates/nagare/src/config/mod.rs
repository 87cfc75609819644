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
