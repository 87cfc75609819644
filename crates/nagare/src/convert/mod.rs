//! `nagare convert`: reads a Fluentd config, a Fluent Bit classic config or
//! a Fluent Bit YAML config and writes the nagare TOML that runs the same
//! pipeline, with a note for every approximation and for everything that has
//! no equivalent (docs/migration.md).
//!
//! It produces TOML text only: it knows nagare's plugins by the names and
//! options of docs/configuration.md, never by importing them, so it sits on
//! the lowest layer and the config loader (above) can run a peer's file
//! directly (`nagare run -c fluent.conf`); `nagare check` then validates what
//! it wrote like any other file.
//!
//! Each dialect is read into a small tree first (fluentd.rs: directives and
//! parameters; fluent_bit.rs and fluent_bit_yaml.rs: sections of key/value
//! entries, the YAML read into the same sections), every node keeping its
//! file and line; then the mapping tables (fluentd_map.rs, fluent_bit_map.rs:
//! one entry per peer plugin type) build the TOML tables of emit.rs.

mod common;
mod emit;
mod fluent_bit;
mod fluent_bit_map;
mod fluent_bit_yaml;
mod fluentd;
mod fluentd_map;

use std::fmt;
use std::path::Path;

/// `nagare convert` exit status: the TOML is complete (approximations, if
/// any, are marked on their lines).
pub const EXIT_COMPLETE: u8 = 0;
/// `nagare convert` exit status: the TOML was written, but something of the
/// peer config has no equivalent and was left out (each listed as a note).
pub const EXIT_NOTES: u8 = 3;
/// `nagare convert` exit status: the peer config could not be read (a
/// syntax error, a missing include); nothing was written.
pub const EXIT_PARSE: u8 = 2;

/// The config languages `nagare convert` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Fluentd,
    FluentBit,
    FluentBitYaml,
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dialect::Fluentd => "Fluentd",
            Dialect::FluentBit => "Fluent Bit (classic)",
            Dialect::FluentBitYaml => "Fluent Bit (YAML)",
        })
    }
}

/// Which peer wrote `text` (named `path`), or None for nagare's own TOML.
/// A `.toml` file is always nagare's; `.yaml`/`.yml` is Fluent Bit's YAML;
/// anything else is told by its first directive or section.
pub fn detect(path: &Path, text: &str) -> Option<Dialect> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    match ext.as_str() {
        "toml" => return None,
        "yaml" | "yml" => return Some(Dialect::FluentBitYaml),
        _ => {}
    }
    for line in text.lines() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let lower = t.to_ascii_lowercase();
        if t.starts_with('<') || lower.starts_with("@include ") {
            // `@include` is Fluentd's; Fluent Bit writes `@INCLUDE`.
            return if t.starts_with("@INCLUDE") {
                Some(Dialect::FluentBit)
            } else {
                Some(Dialect::Fluentd)
            };
        }
        if t.starts_with("@SET ") || t.starts_with("@INCLUDE ") {
            return Some(Dialect::FluentBit);
        }
        if t.starts_with('[') && !t.starts_with("[[") {
            let name = t.trim_start_matches('[').trim_end_matches(']').trim();
            let upper = name.to_ascii_uppercase();
            if name == upper
                && matches!(
                    upper.as_str(),
                    "SERVICE"
                        | "INPUT"
                        | "FILTER"
                        | "OUTPUT"
                        | "PARSER"
                        | "MULTILINE_PARSER"
                        | "PLUGINS"
                        | "UPSTREAM"
                        | "NODE"
                        | "STREAM_TASK"
                )
            {
                return Some(Dialect::FluentBit);
            }
            return None;
        }
        if ["service:", "pipeline:", "env:", "includes:", "parsers:"]
            .iter()
            .any(|k| t.starts_with(k))
        {
            return Some(Dialect::FluentBitYaml);
        }
        return None;
    }
    None
}

/// What kind of note.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoteKind {
    /// Mapped, but nagare behaves differently in a way the note says.
    Approximate,
    /// Left out: nagare has no equivalent.
    Unmapped,
}

/// One thing the conversion could not carry over exactly: where it was
/// written, what it is and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    pub kind: NoteKind,
    pub file: String,
    pub line: usize,
    pub what: String,
    pub why: String,
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            NoteKind::Approximate => "approximated",
            NoteKind::Unmapped => "not converted",
        };
        write!(
            f,
            "{}:{}: {kind}: {}: {}",
            self.file, self.line, self.what, self.why
        )
    }
}

/// A config that could not be read at all: file, line and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvertError {
    pub file: String,
    pub line: usize,
    pub message: String,
}

impl fmt::Display for ConvertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(f, "{}:{}: {}", self.file, self.line, self.message)
        }
    }
}

impl std::error::Error for ConvertError {}

/// The result of a conversion: the TOML text and the notes (also written
/// into the text as comments).
#[derive(Debug, Clone)]
pub struct Converted {
    pub dialect: Dialect,
    pub toml: String,
    pub notes: Vec<Note>,
}

impl Converted {
    /// Whether something was left out (exit status [`EXIT_NOTES`]).
    pub fn incomplete(&self) -> bool {
        self.notes.iter().any(|n| n.kind == NoteKind::Unmapped)
    }

    /// The exit status of `nagare convert` for this result.
    pub fn exit_code(&self) -> u8 {
        if self.incomplete() {
            EXIT_NOTES
        } else {
            EXIT_COMPLETE
        }
    }
}

/// Converts the peer config at `path` (relative includes, parser files and
/// scripts resolve next to it, as the peers resolve them).
pub fn convert_file(path: &Path, dialect: Dialect) -> Result<Converted, ConvertError> {
    let (toml, notes) = match dialect {
        Dialect::Fluentd => {
            let tree = fluentd::parse_file(path)?;
            fluentd_map::convert(&tree, path)
        }
        Dialect::FluentBit => {
            let cfg = fluent_bit::parse_file(path)?;
            fluent_bit_map::convert(&cfg, path, dialect)
        }
        Dialect::FluentBitYaml => {
            let cfg = fluent_bit_yaml::parse_file(path)?;
            fluent_bit_map::convert(&cfg, path, dialect)
        }
    };
    Ok(Converted {
        dialect,
        toml,
        notes,
    })
}

/// Reads `path` and converts it when a peer wrote it: None for nagare's own
/// TOML (the caller reads it as usual).
pub fn convert_if_peer(path: &Path) -> Option<Result<Converted, ConvertError>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(_) => return None, // the caller reports the read error itself
    };
    let dialect = detect(path, &text)?;
    Some(convert_file(path, dialect))
}

#[cfg(test)]
mod tests;
