//! Plugin traits and the registries.
//!
//! An input, filter or output plugin is one options struct (serde +
//! schemars, unknown keys denied, doc comments on the fields) that
//! implements `InputPlugin` (the daemon's inputs/mod.rs: an input's context
//! is the live route table, above this crate), [`FilterPlugin`] or
//! [`OutputPlugin`], and one line in its folder's [`registry!`]
//! (inputs/mod.rs, filters/mod.rs, outputs/mod.rs of the daemon). Everything that needs to know the plugins — the config
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
use std::ops::Range;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use toml::de::DeValue;
use toml::Spanned;

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
    /// Buffer settings an output's own options stand for (the s3 output's
    /// `total_file_size` and `upload_timeout`, Fluent Bit's names): the
    /// loader puts them in the output's `[output.buffer]`.
    pub chunk_shape: ChunkShape,
}

/// Buffer settings an output sets from its own options, each with the
/// option's key (for the errors that name it): one chunk is then one
/// object of the output's size and age.
#[derive(Debug, Default)]
pub struct ChunkShape {
    /// The buffer's `chunk_limit_size`.
    pub chunk_limit_size: Option<(String, crate::units::Size)>,
    /// The buffer's `flush_interval`.
    pub flush_interval: Option<(String, crate::units::Dur)>,
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

/// The options of one plugin section, with where they were written; a
/// registration reads its options struct from it.
pub struct Section<'a> {
    value: Spanned<DeValue<'a>>,
    /// The key path of this section inside its `[[input]]`/`[[output]]`
    /// section ("" at the top, "store[0]" in a copy output).
    prefix: String,
}

/// Why a section could not be built.
#[derive(Debug)]
pub enum SectionError {
    /// serde could not read the options: at `key` (a path inside the
    /// section), `span` when the TOML parser knew the place.
    Invalid {
        key: String,
        span: Option<Range<usize>>,
        message: String,
    },
    /// The plugin refused its options.
    Option(OptionError),
    /// Already reported (an error inside a nested section).
    Reported,
}

impl From<OptionError> for SectionError {
    fn from(e: OptionError) -> Self {
        SectionError::Option(e)
    }
}

/// What a registration built of a section: the plugin, or (a `copy`
/// output) the sections it fans out to, each with its key path, for the
/// config loader to build as sections of the same kind.
pub enum Built<'a, P> {
    One(P),
    Fanout(Vec<(String, Spanned<DeValue<'a>>)>),
}

impl<'a> Section<'a> {
    /// The section `value`, at key path `prefix` inside its top-level section.
    pub fn new(value: Spanned<DeValue<'a>>, prefix: impl Into<String>) -> Section<'a> {
        Section {
            value,
            prefix: prefix.into(),
        }
    }

    /// Reads the options struct `T`; errors keep the key path and place.
    pub fn options<T: DeserializeOwned>(self) -> Result<T, SectionError> {
        read(self.value)
    }

    /// The tables of `key`, an array of tables that must be the section's
    /// only key (a copy output's `store`), each with its key path
    /// ("store[0]", inside this section's prefix).
    pub fn take_tables(
        self,
        key: &str,
    ) -> Result<Vec<(String, Spanned<DeValue<'a>>)>, SectionError> {
        let what = format!("one or more [[output.{key}]] tables");
        let DeValue::Table(mut t) = self.value.into_inner() else {
            return Err(OptionError::new("", "expected a table").into());
        };
        let tables = match t.remove(key).map(Spanned::into_inner) {
            Some(DeValue::Array(a)) if !a.is_empty() => a,
            _ => return Err(OptionError::new(key, format!("expected {what}")).into()),
        };
        if let Some(other) = t.keys().next() {
            let other = other.get_ref().to_string();
            return Err(OptionError::new(
                other.clone(),
                format!("unknown key `{other}`; this output takes only `{key}`"),
            )
            .into());
        }
        Ok(tables
            .into_iter()
            .enumerate()
            .map(|(j, v)| (join(&self.prefix, &format!("{key}[{j}]")), v))
            .collect())
    }
}

/// Reads `T` from a TOML value; errors keep the key path and place.
pub fn read<T: DeserializeOwned>(value: Spanned<DeValue<'_>>) -> Result<T, SectionError> {
    let de = toml::de::ValueDeserializer::from(value);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let key = key_path(e.path());
        let inner = e.into_inner();
        SectionError::Invalid {
            key,
            span: inner.span(),
            message: inner.message().to_string(),
        }
    })
}

/// serde_path_to_error's path as "a.b[0].c" ("" for the section itself).
fn key_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut s = String::new();
    for seg in path.iter() {
        match seg {
            Segment::Seq { index } => s.push_str(&format!("[{index}]")),
            Segment::Map { key } => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(key);
            }
            Segment::Enum { .. } | Segment::Unknown => {}
        }
    }
    s
}

/// "a.b" of a key path and a key inside it ("b" when the path is empty).
pub fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

/// Option defaults written as literals next to their fields:
///
/// ```ignore
/// #[serde_inline_default]
/// #[derive(Deserialize, Serialize, JsonSchema)]
/// #[serde(deny_unknown_fields)]
/// pub struct Options {
///     /// ... (default "5s").
///     #[serde_inline_default(Dur::secs(5))]
///     pub timeout: Dur,
/// }
/// ```
///
/// The attribute goes above the derives: it turns each field's default into
/// the `#[serde(default = "...")]` function serde calls and schemars shows
/// in the generated reference. A default several plugins share is a named
/// `const` in the module they share, written in the attribute by name.
pub use serde_inline_default::serde_inline_default;

/// Declares a plugin's options struct with a group of options that several
/// plugins share (a protocol's connection options, an HTTP listener's, the
/// options every parser takes) appended to its own, and the methods that
/// read the group. The group is written once, in a macro of its own module
/// that calls this one; a plugin then writes only its own fields:
///
/// ```ignore
/// // proto/redis/conn.rs
/// macro_rules! redis_options {
///     ($($plugin:tt)*) => {
///         nagare_core::option_group! {
///             [$($plugin)*]
///             fields { /// The server (default "127.0.0.1:6379").
///                      #[serde_inline_default("127.0.0.1:6379".into())]
///                      pub address: String, }
///             impl { fn connection(&self) -> Connection<'_> { /* ... */ } }
///         }
///     };
/// }
/// // outputs/redis.rs
/// redis_options!(
///     /// The `redis` output.
///     RedisOutputConfig {
///         /// The list, channel or stream. Required.
///         key: String,
///     }
/// );
/// ```
///
/// One flat struct, not serde's `flatten`: `flatten` loses the line of an
/// error and cannot deny unknown keys, and every options struct denies them.
#[macro_export]
macro_rules! option_group {
    (
        [$(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $field:ident : $ty:ty,)* }]
        fields { $($group:tt)* }
        impl { $($methods:tt)* }
    ) => {
        #[$crate::plugin::serde_inline_default]
        $(#[$m])*
        #[derive(Debug, Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            $($(#[$fm])* pub $field: $ty,)*
            $($group)*
        }

        impl $name {
            $($methods)*
        }
    };
}

/// One plugin type in a registry: how to document it and how to build it.
pub struct Registration<B> {
    pub type_name: &'static str,
    pub doc: &'static str,
    pub schema: fn() -> schemars::Schema,
    pub build: for<'a> fn(Section<'a>, &mut BuildContext) -> Result<Built<'a, B>, SectionError>,
}

fn schema<T: JsonSchema>() -> schemars::Schema {
    schemars::schema_for!(T)
}

/// The registration of a plugin type whose options struct is `T`.
pub const fn registration<T: JsonSchema, B>(
    type_name: &'static str,
    doc: &'static str,
    build: for<'a> fn(Section<'a>, &mut BuildContext) -> Result<Built<'a, B>, SectionError>,
) -> Registration<B> {
    Registration {
        type_name,
        doc,
        schema: schema::<T>,
        build,
    }
}

/// Declares a folder's plugin modules and its registry, one line per plugin:
/// `module => registration,` (the registration names the options struct).
#[macro_export]
macro_rules! registry {
    ($kind:ty; $($module:ident => $registration:expr,)*) => {
        $(pub mod $module;)*

        /// Every plugin type of this folder.
        pub static REGISTRY: &[$kind] = &[$($registration,)*];
    };
}

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
