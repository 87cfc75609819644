//! `[input.parser]` / `[filter.parser]` as the user writes it: one options
//! struct per parser type, chosen by `type` (an internally tagged enum), so
//! an option another type takes (`keys` on a json parser) is an unknown key
//! on its own line. Each type's struct is turned into the flat
//! [`ParserConfig`] the parser code reads.
//!
//! serde's derive buffers an internally tagged enum before it looks at the
//! tag, which loses where each key was written. The hand-written
//! `Deserialize` below reads `type` first (the config loader moves `type` to
//! the front of every table) and hands the rest of the table straight to the
//! type's struct, so every error keeps its key and line.

use std::collections::BTreeMap;

use nagare_core::units::Dur;
use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::{FieldType, ParserConfig, ParserType, SyslogFormat};

/// Declares a parser type's options struct with the options every parser
/// takes appended (serde's `flatten` would lose line numbers and cannot deny
/// unknown keys).
macro_rules! parser_options {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $field:ident : $ty:ty,)* }) => {
        nagare_core::option_group! {
            [$(#[$m])* $name { $($(#[$fm])* $field: $ty,)* }]
            fields {
                /// The field the whole line goes to with "none", and where a line
                /// that does not parse is kept (next to "parse_error") (default "message").
                #[serde_inline_default(super::DEFAULT_MESSAGE_KEY.into())]
                pub message_key: String,
                /// The field holding the event's time (default "time", as in
                /// Fluentd). Without such a field the event gets the time of
                /// reading; a time that does not match `time_format` makes the
                /// line a parse error.
                #[serde(default)]
                pub time_key: Option<String>,
                /// strftime format of the time field (chrono syntax; Ruby's `%L`
                /// and `%N` are understood). Without one: RFC 3339 or seconds
                /// since the epoch. Times without a zone are local time.
                #[serde(default)]
                pub time_format: Option<String>,
                /// Keep the time field in the record (default false: it becomes the event's time).
                #[serde(default)]
                pub keep_time_key: bool,
                /// Field conversions: `{ code = "integer", ratio = "float", ok = "bool" }`.
                #[serde(default)]
                pub types: BTreeMap<String, FieldType>,
            }
            impl {
                fn into_config(self, kind: ParserType) -> ParserConfig {
                    #[allow(unused_mut)]
                    let mut c = ParserConfig {
                        kind,
                        message_key: self.message_key,
                        time_key: self.time_key,
                        time_format: self.time_format,
                        keep_time_key: self.keep_time_key,
                        types: self.types,
                        ..ParserConfig::default()
                    };
                    $(parser_options!(@set c, self, $field);)*
                    c
                }
            }
        }
    };
    (@set $c:ident, $s:ident, expression) => { $c.expression = $s.expression.into(); };
    (@set $c:ident, $s:ident, keys) => { $c.keys = $s.keys.into(); };
    (@set $c:ident, $s:ident, delimiter) => { $c.delimiter = $s.delimiter.into(); };
    (@set $c:ident, $s:ident, label_delimiter) => { $c.label_delimiter = $s.label_delimiter.into(); };
    (@set $c:ident, $s:ident, message_format) => { $c.message_format = $s.message_format.into(); };
    (@set $c:ident, $s:ident, format_firstline) => { $c.format_firstline = $s.format_firstline.into(); };
    (@set $c:ident, $s:ident, format_continuation) => { $c.format_continuation = $s.format_continuation; };
    (@set $c:ident, $s:ident, partial_flush_interval) => {
        $c.multiline_flush_interval = $s.partial_flush_interval.into();
    };
    (@set $c:ident, $s:ident, multiline_flush_interval) => {
        $c.multiline_flush_interval = $s.multiline_flush_interval.into();
    };
}

parser_options!(
    /// `type = "none"`: the whole line goes to `message_key`.
    NoneOptions {}
);
parser_options!(
    /// `type = "json"`: a JSON object per line; keys keep their order.
    JsonOptions {}
);
parser_options!(
    /// `type = "regex"`: named captures of `expression` become fields.
    RegexOptions {
        /// The regular expression (Rust regex syntax); its named captures
        /// `(?<name>…)` become the fields. Required.
        expression: String,
    }
);
parser_options!(
    /// `type = "ltsv"`: labeled tab-separated values.
    LtsvOptions {
        /// The field separator (default a tab).
        #[serde(default)]
        delimiter: Option<String>,
        /// The separator between label and value (default ":").
        #[serde(default)]
        label_delimiter: Option<String>,
    }
);
parser_options!(
    /// `type = "csv"`: comma-separated values (with quoting) named by `keys`.
    CsvOptions {
        /// The field names, in column order. Required.
        keys: Vec<String>,
        /// The field separator (default ",").
        #[serde(default)]
        delimiter: Option<String>,
    }
);
parser_options!(
    /// `type = "tsv"`: tab-separated values named by `keys`.
    TsvOptions {
        /// The field names, in column order. Required.
        keys: Vec<String>,
        /// The field separator (default a tab).
        #[serde(default)]
        delimiter: Option<String>,
    }
);
parser_options!(
    /// `type = "apache2"`, `"apache_error"` or `"nginx"`: the servers' standard formats.
    WebLogOptions {}
);
parser_options!(
    /// `type = "syslog"`: RFC 3164 or RFC 5424 lines.
    SyslogOptions {
        /// "rfc3164", "rfc5424" or "auto" (default: each line by its look).
        #[serde(default)]
        message_format: SyslogFormat,
    }
);
parser_options!(
    /// `type = "multiline"`: a line matching `format_firstline` starts an
    /// event, the lines up to the next such line continue it.
    MultilineOptions {
        /// A line matching this regular expression starts an event. Required.
        format_firstline: String,
        /// Only a line matching this regular expression continues an
        /// event; any other line that does not start one is an event of its
        /// own (as Fluent Bit's multiline rules do). Without it every line
        /// up to the next first line continues the event (Fluentd's way).
        #[serde(default)]
        format_continuation: Option<String>,
        /// Matched against the joined lines (`.` matches newlines too); its
        /// named captures become the fields. Without it the joined text goes
        /// to `message_key`.
        #[serde(default)]
        expression: Option<String>,
        /// The last event of a file is emitted when no line came for this long (default "2s").
        #[serde_inline_default(super::DEFAULT_MULTILINE_FLUSH)]
        multiline_flush_interval: Dur,
    }
);

parser_options!(
    /// `type = "cri"` (containerd's and CRI-O's files) or `"docker"`
    /// (Docker's json-file): the pieces of a long line are joined into one
    /// event, per stream, bounded by the input's `max_line_size` (the bytes
    /// beyond are counted in the event's `truncated` field). The record:
    /// the line in `message_key`, `stream`; the event time is the line's.
    ContainerOptions {
        /// Multiline after the join: a line matching this regular expression
        /// starts an event, the lines of the same stream up to the next such
        /// line continue it (joined with "\n"), e.g. Java stack traces.
        #[serde(default)]
        format_firstline: Option<String>,
        /// A line whose last piece has not come for this long (or a
        /// multiline event without a new line) goes out as it is; a line
        /// without its last piece is marked `partial = true` (default "5s").
        #[serde_inline_default(super::DEFAULT_PARTIAL_FLUSH)]
        partial_flush_interval: Dur,
    }
);

impl<'de> Deserialize<'de> for ParserConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(ParserVisitor)
    }
}

struct ParserVisitor;

impl<'de> Visitor<'de> for ParserVisitor {
    type Value = ParserConfig;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a parser table such as { type = \"json\" }")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ParserConfig, A::Error> {
        let first: Option<String> = map.next_key()?;
        let (kind, pending) = match first {
            Some(k) if k == "type" => (map.next_value::<ParserType>()?, None),
            other => (ParserType::None, other),
        };
        let rest = || de::value::MapAccessDeserializer::new(Rest { map, pending });
        Ok(match kind {
            ParserType::None => NoneOptions::deserialize(rest())?.into_config(kind),
            ParserType::Json => JsonOptions::deserialize(rest())?.into_config(kind),
            ParserType::Regex => RegexOptions::deserialize(rest())?.into_config(kind),
            ParserType::Ltsv => LtsvOptions::deserialize(rest())?.into_config(kind),
            ParserType::Csv => CsvOptions::deserialize(rest())?.into_config(kind),
            ParserType::Tsv => TsvOptions::deserialize(rest())?.into_config(kind),
            ParserType::Apache2 | ParserType::ApacheError | ParserType::Nginx => {
                WebLogOptions::deserialize(rest())?.into_config(kind)
            }
            ParserType::Syslog => SyslogOptions::deserialize(rest())?.into_config(kind),
            ParserType::Multiline => MultilineOptions::deserialize(rest())?.into_config(kind),
            ParserType::Cri | ParserType::Docker => {
                ContainerOptions::deserialize(rest())?.into_config(kind)
            }
        })
    }
}

/// The parser table after `type`: the key read while looking for `type`
/// (when the table has none), then the table's own entries, each with its
/// position.
struct Rest<A> {
    map: A,
    pending: Option<String>,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Rest<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        match self.pending.take() {
            Some(k) => seed.deserialize(k.into_deserializer()).map(Some),
            None => self.map.next_key_seed(seed),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(seed)
    }
}

/// The documented shape: one options table per type.
#[derive(schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
#[allow(dead_code)]
pub enum ParserOptions {
    None(NoneOptions),
    Json(JsonOptions),
    Regex(RegexOptions),
    Ltsv(LtsvOptions),
    Csv(CsvOptions),
    Tsv(TsvOptions),
    Apache2(WebLogOptions),
    ApacheError(WebLogOptions),
    Nginx(WebLogOptions),
    Syslog(SyslogOptions),
    Multiline(MultilineOptions),
    Cri(ContainerOptions),
    Docker(ContainerOptions),
}

impl schemars::JsonSchema for ParserConfig {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ParserConfig".into()
    }
    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        ParserOptions::json_schema(g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ParserConfig, String> {
        let d = toml::de::Deserializer::parse(text).map_err(|e| e.to_string())?;
        serde_path_to_error::deserialize(d)
            .map_err(|e| format!("{}: {}", e.path(), e.inner().message()))
    }

    #[test]
    fn each_type_takes_only_its_options() {
        let c = parse("type = \"csv\"\nkeys = [\"a\", \"b\"]\ndelimiter = \";\"").unwrap();
        assert_eq!((c.kind, c.keys.len()), (ParserType::Csv, 2));
        assert_eq!(c.delimiter.as_deref(), Some(";"));
        let e = parse("type = \"json\"\nkeys = [\"a\"]").unwrap_err();
        assert!(e.starts_with("keys: unknown field `keys`"), "{e}");
        let e = parse("type = \"regex\"").unwrap_err();
        assert!(e.contains("missing field `expression`"), "{e}");
        let c = parse("message_key = \"m\"").unwrap();
        assert_eq!((c.kind, c.message_key.as_str()), (ParserType::None, "m"));
        let e = parse("type = \"bogus\"").unwrap_err();
        assert!(e.contains("unknown variant `bogus`"), "{e}");
        let c = parse("type = \"multiline\"\nformat_firstline = \"^x\"\ntime_key = \"t\"").unwrap();
        assert_eq!(c.format_firstline.as_deref(), Some("^x"));
        assert_eq!(c.time_key.as_deref(), Some("t"));
    }
}
