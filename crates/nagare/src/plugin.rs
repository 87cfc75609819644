//! Plugin traits and the registries.
//!
//! An input, filter or output plugin is one options struct (serde +
//! schemars, unknown keys denied, doc comments on the fields) that
//! implements [`InputPlugin`], [`FilterPlugin`] or [`OutputPlugin`], and one
//! line in its folder's `registry!` (inputs/mod.rs, filters/mod.rs,
//! outputs/mod.rs). Everything that needs to know the plugins — the config
//! loader, the list of known types in its errors, the generated reference in
//! docs/configuration.md, `nagare check` and the daemon — walks those
//! registries; nothing else names a plugin's type.
//!
//! Building a plugin checks its options and prepares it without I/O that
//! changes anything (no socket bound, no file opened for writing, no mount):
//! `nagare check` builds every plugin and stops there, `nagare run` builds
//! the same way and then starts what it built. What a plugin will listen on
//! and write to is told to the [`BuildContext`], so the loader can find two
//! listeners on one address or a directory that cannot be written before
//! anything starts.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::{Section, SectionError};
use crate::filters::Filter;
use crate::outputs::{Output, OutputTarget};
use crate::router::LiveRouter;
use crate::stats::PluginStats;

/// A problem with a plugin's options: the key (a path inside the section
/// such as "parser.expression"; empty for the section as a whole) and what
/// is wrong, in the user's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionError {
    pub key: String,
    pub message: String,
}

impl OptionError {
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> OptionError {
        OptionError {
            key: key.into(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for OptionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.key.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "`{}`: {}", self.key, self.message)
        }
    }
}

/// Something a plugin will listen on once started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    Tcp(SocketAddr),
    Udp(SocketAddr),
    Unix(PathBuf),
}

/// What building one plugin learned, for the checks across plugins.
#[derive(Debug, Default)]
pub struct BuildContext {
    /// The plugin's name in logs and metrics, e.g. "forward#0".
    pub name: String,
    /// (key, address) of every listener.
    pub listens: Vec<(String, Listen)>,
    /// (key, directory) of every directory the plugin will create files in;
    /// it must exist or be creatable, and be writable.
    pub writes: Vec<(String, PathBuf)>,
    /// (key, message) of things that work but are probably not meant.
    pub warnings: Vec<(String, String)>,
    /// A filter: events it fails on go to the error label (`[system]
    /// error_label` is set, and the filter is not in that label), so it
    /// returns them in `Filtered::failed` instead of keeping them marked.
    pub failures_routed: bool,
}

impl BuildContext {
    pub fn new(name: impl Into<String>) -> BuildContext {
        BuildContext {
            name: name.into(),
            ..BuildContext::default()
        }
    }

    pub fn listen(&mut self, key: &str, at: Listen) {
        self.listens.push((key.to_string(), at));
    }

    /// The plugin creates or writes files in `dir`.
    pub fn writes_in(&mut self, key: &str, dir: impl Into<PathBuf>) {
        self.writes.push((key.to_string(), dir.into()));
    }

    /// The plugin writes the file `path` (so its folder must be writable).
    pub fn writes_file(&mut self, key: &str, path: &str) {
        let dir = std::path::Path::new(path)
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), PathBuf::from);
        self.writes_in(key, dir);
    }

    pub fn warn(&mut self, key: &str, message: impl Into<String>) {
        self.warnings.push((key.to_string(), message.into()));
    }
}

/// What a started input gets.
pub struct InputContext {
    pub name: String,
    pub router: LiveRouter,
    pub stats: Arc<PluginStats>,
    /// Chunk ids already stored in file buffers, for a dedup window.
    pub stored_ids: Arc<Vec<Bytes>>,
    /// Turns true when the daemon stops.
    pub shutdown: watch::Receiver<bool>,
}

/// A built input, ready to start.
#[async_trait]
pub trait Input: Send {
    /// Opens what the input needs and spawns its tasks; the input stops when
    /// `shutdown` turns true and every returned task has ended.
    async fn start(self: Box<Self>, cx: InputContext) -> anyhow::Result<Vec<JoinHandle<()>>>;
}

/// An input type: its options struct.
pub trait InputPlugin: DeserializeOwned + JsonSchema + 'static {
    /// The `type` of its `[[input]]` sections.
    const TYPE: &'static str;
    /// One paragraph for the configuration reference.
    const DOC: &'static str;
    /// Checks the options and prepares the input; no I/O that changes anything.
    fn build(self, cx: &mut BuildContext) -> Result<Box<dyn Input>, OptionError>;
}

/// A filter type: its options struct.
pub trait FilterPlugin: DeserializeOwned + JsonSchema + 'static {
    const TYPE: &'static str;
    const DOC: &'static str;
    fn build(self, cx: &mut BuildContext) -> Result<Box<dyn Filter>, OptionError>;
}

/// An output type: its options struct.
pub trait OutputPlugin: DeserializeOwned + JsonSchema + 'static {
    const TYPE: &'static str;
    const DOC: &'static str;
    /// The output, built without I/O; its connections and files open on the
    /// first write (or in `Output::start`).
    fn build(self, cx: &mut BuildContext) -> Result<Arc<dyn Output>, OptionError>;
}

/// One plugin type in a registry: how to document it and how to build it.
pub struct Registration<B> {
    pub type_name: &'static str,
    pub doc: &'static str,
    pub schema: fn() -> schemars::Schema,
    pub build: fn(Section<'_, '_>, &mut BuildContext) -> Result<B, SectionError>,
}

pub type InputRegistration = Registration<Box<dyn Input>>;
pub type FilterRegistration = Registration<Box<dyn Filter>>;
pub type OutputRegistration = Registration<OutputTarget>;

fn schema<T: JsonSchema>() -> schemars::Schema {
    schemars::schema_for!(T)
}

const fn registration<T: JsonSchema, B>(
    type_name: &'static str,
    doc: &'static str,
    build: fn(Section<'_, '_>, &mut BuildContext) -> Result<B, SectionError>,
) -> Registration<B> {
    Registration {
        type_name,
        doc,
        schema: schema::<T>,
        build,
    }
}

pub const fn input<T: InputPlugin>() -> InputRegistration {
    fn build<T: InputPlugin>(
        s: Section,
        cx: &mut BuildContext,
    ) -> Result<Box<dyn Input>, SectionError> {
        Ok(s.options::<T>()?.build(cx)?)
    }
    registration::<T, _>(T::TYPE, T::DOC, build::<T>)
}

pub const fn filter<T: FilterPlugin>() -> FilterRegistration {
    fn build<T: FilterPlugin>(
        s: Section,
        cx: &mut BuildContext,
    ) -> Result<Box<dyn Filter>, SectionError> {
        Ok(s.options::<T>()?.build(cx)?)
    }
    registration::<T, _>(T::TYPE, T::DOC, build::<T>)
}

pub const fn output<T: OutputPlugin>() -> OutputRegistration {
    fn build<T: OutputPlugin>(
        s: Section,
        cx: &mut BuildContext,
    ) -> Result<OutputTarget, SectionError> {
        Ok(OutputTarget::One(s.options::<T>()?.build(cx)?))
    }
    registration::<T, _>(T::TYPE, T::DOC, build::<T>)
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

/// Declares a folder's plugin modules and its registry, one line per plugin:
/// `module => registration,` (the registration names the options struct).
macro_rules! registry {
    ($kind:ty; $($module:ident => $registration:expr,)*) => {
        $(pub mod $module;)*

        /// Every plugin type of this folder.
        pub static REGISTRY: &[$kind] = &[$($registration,)*];
    };
}
pub(crate) use registry;

/// The registration of `type_name` in `registry`.
pub fn find<'r, B>(
    registry: &'r [Registration<B>],
    type_name: &str,
) -> Option<&'r Registration<B>> {
    registry.iter().find(|r| r.type_name == type_name)
}

/// "a, b or c" of the registry's type names, for error messages.
pub fn type_list<B>(registry: &[Registration<B>]) -> String {
    let names: Vec<String> = registry
        .iter()
        .map(|r| format!("\"{}\"", r.type_name))
        .collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        Some((last, _)) => last.clone(),
        None => String::new(),
    }
}
