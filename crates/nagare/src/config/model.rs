//! What a loaded config is: the `[system]` and `[monitor]` tables, and the
//! input, filter and output sections with their plugins built and ready to
//! start.

use std::sync::Arc;

use nagare_core::filter::Filter;
use nagare_core::output::Output;
use nagare_core::pattern::Pattern;

use super::test_spec::{Names, TestCase};
use super::ConfigError;
use crate::buffer::BufferConfig;
use crate::inputs::Input;

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
    /// their output gave up on (retries ran out, a permanent error, events
    /// the destination refused) and those still undelivered when shutdown
    /// gives up, one folder per output, as files `nagare replay` sends
    /// (default: "nagare-dead-letters" in the system's temporary directory).
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
