//! Parsers: turn one line of text into one record (a msgpack map), like
//! Fluentd's parser plugins. Used by the `tail` input (`[input.parser]`).
//!
//! A line that does not parse is kept: its record is
//! `{message_key: line, "parse_error": "<reason>"}` and the caller counts it
//! as an error of the input.

use std::borrow::Cow;
use std::collections::BTreeMap;

use chrono::{DateTime, Datelike, Local, NaiveDateTime, TimeZone};
use nagare_core::units::Dur;
use nagare_forward::msgpack::{write_bool, write_map_len, write_str};
use nagare_forward::EventTime;
use serde::Deserialize;

mod apache2;
mod apache_error;
mod common;
mod cri;
mod csv;
mod docker;
pub mod json;
mod ltsv;
mod multiline;
mod nginx;
mod none;
pub(crate) mod options;
/// The joining of container log lines' pieces (common/container.rs).
pub(crate) use common::container as partial;
mod regex;
mod syslog;
mod tsv;

/// The parser types.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ParserType {
    /// The whole line goes to `message_key`.
    #[default]
    None,
    /// A JSON object per line; keys keep their order.
    Json,
    /// Named captures of `expression` become fields.
    Regex,
    /// Labeled tab-separated values (`label:value<TAB>label:value`).
    Ltsv,
    /// Comma-separated values (with quoting) named by `keys`.
    Csv,
    /// Tab-separated values named by `keys`.
    Tsv,
    /// Apache's combined (or common) access log.
    Apache2,
    /// Apache's error log.
    ApacheError,
    /// nginx's combined access log.
    Nginx,
    /// Syslog lines, RFC 3164 or RFC 5424 (`message_format`).
    Syslog,
    /// Several lines make one event: a line matching `format_firstline`
    /// starts it, the lines up to the next such line continue it.
    Multiline,
    /// Kubernetes' container log files (containerd, CRI-O):
    /// `<time> <stream> <P|F> <line>`; the input joins the `P` pieces.
    Cri,
    /// Docker's json-file logs: `{"log":…,"stream":…,"time":…}`; the input
    /// joins the pieces of a line (a `log` without "\n").
    Docker,
}

/// Which syslog format the `syslog` parser expects.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum SyslogFormat {
    /// BSD syslog: `<pri>Mmm dd hh:mm:ss host ident[pid]: message`.
    Rfc3164,
    /// `<pri>1 2003-10-11T22:14:15.003Z host app procid msgid [sd] message`.
    Rfc5424,
    /// Each line by its look: a version digit after `<pri>` means RFC 5424 (default).
    #[default]
    Auto,
}

/// The type a field is converted to (`types`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum FieldType {
    /// A signed 64-bit integer (nil when the text is not one).
    Integer,
    /// A 64-bit float (nil when the text is not one).
    Float,
    /// true for "true", "yes", "1" (any case); false otherwise.
    Bool,
    /// Kept as text (the default).
    String,
}

/// The options of a parser, flat, as the parser code reads them. Users write
/// one table per type; `options` documents and reads those into this (the
/// fields mean what the options of the same names there say).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ParserConfig {
    pub kind: ParserType,
    pub message_key: String,
    pub expression: Option<String>,
    pub time_key: Option<String>,
    pub time_format: Option<String>,
    pub keep_time_key: bool,
    pub types: BTreeMap<String, FieldType>,
    pub keys: Vec<String>,
    pub delimiter: Option<String>,
    pub label_delimiter: Option<String>,
    pub message_format: SyslogFormat,
    pub format_firstline: Option<String>,
    pub format_continuation: Option<String>,
    pub multiline_flush_interval: Dur,
}

/// The field a parser puts the whole line in ("none"), or keeps a line
/// that does not parse in: "message".
pub const DEFAULT_MESSAGE_KEY: &str = "message";
/// A multiline parser emits the last event of a file after this long without
/// a line: "2s".
pub const DEFAULT_MULTILINE_FLUSH: Dur = Dur::secs(2);

impl Default for ParserConfig {
    fn default() -> Self {
        ParserConfig {
            kind: ParserType::None,
            message_key: DEFAULT_MESSAGE_KEY.into(),
            expression: None,
            time_key: None,
            time_format: None,
            keep_time_key: false,
            types: BTreeMap::new(),
            keys: Vec::new(),
            delimiter: None,
            label_delimiter: None,
            message_format: SyslogFormat::Auto,
            format_firstline: None,
            format_continuation: None,
            multiline_flush_interval: DEFAULT_MULTILINE_FLUSH,
        }
    }
}

/// A field value before it is written.
#[derive(Debug, Clone, PartialEq)]
pub enum Val<'a> {
    Str(Cow<'a, [u8]>),
    Int(i64),
    Float(f64),
    Bool(bool),
    Nil,
}

impl<'a> Val<'a> {
    fn s(b: &'a [u8]) -> Self {
        Val::Str(Cow::Borrowed(b))
    }
}

/// The fields of a flat record, in order.
pub type Fields<'a> = Vec<(Cow<'a, str>, Val<'a>)>;

/// How a time field's text is read.
#[derive(Debug, Clone)]
pub enum TimeFmt {
    /// A strftime format (chrono).
    Format(String),
    /// RFC 3164's `Mmm dd hh:mm:ss` (no year: the current one, or last
    /// year's when that would be in the future).
    Syslog3164,
    /// RFC 3339 or seconds since the epoch (with a fraction).
    Auto,
}

/// What a parse found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parsed {
    /// The event time, when the line had one.
    pub time: Option<EventTime>,
    /// false when the line did not parse (the record holds it and "parse_error").
    pub ok: bool,
}

/// The line-format specific part.
enum Kind {
    None,
    Json,
    Regex(common::Rx),
    Ltsv(ltsv::Ltsv),
    Csv(csv::Csv),
    Tsv(tsv::Tsv),
    Syslog(syslog::Syslog),
    Multiline(multiline::Multiline),
    /// cri and docker: `format_firstline` (multiline after the join) and
    /// the flush interval of a held line.
    Container(
        partial::Format,
        Option<::regex::bytes::Regex>,
        std::time::Duration,
    ),
}

pub struct Parser {
    kind: Kind,
    message_key: String,
    time_key: Option<String>,
    time: TimeFmt,
    keep_time_key: bool,
    types: Vec<(String, FieldType)>,
}

/// `partial_flush_interval`'s default for cri and docker: "5s".
pub const DEFAULT_PARTIAL_FLUSH: Dur = Dur::secs(5);

impl Parser {
    pub fn new(cfg: &ParserConfig) -> anyhow::Result<Parser> {
        let mut types: Vec<(String, FieldType)> =
            cfg.types.iter().map(|(k, v)| (k.clone(), *v)).collect();
        let default_time_key = Some("time");
        let mut default_fmt = None;
        let kind = match cfg.kind {
            ParserType::None => Kind::None,
            ParserType::Json => Kind::Json,
            ParserType::Regex => {
                let Some(e) = &cfg.expression else {
                    anyhow::bail!("parser type \"regex\" needs `expression`");
                };
                Kind::Regex(common::Rx::new(e, false)?)
            }
            ParserType::Multiline => Kind::Multiline(multiline::Multiline::new(cfg)?),
            ParserType::Cri | ParserType::Docker => {
                let firstline = match &cfg.format_firstline {
                    Some(f) => Some(
                        ::regex::bytes::Regex::new(f)
                            .map_err(|e| anyhow::anyhow!("bad format_firstline: {e}"))?,
                    ),
                    None => None,
                };
                let format = if cfg.kind == ParserType::Cri {
                    partial::Format::Cri
                } else {
                    partial::Format::Docker
                };
                Kind::Container(format, firstline, cfg.multiline_flush_interval.0)
            }
            ParserType::Ltsv => Kind::Ltsv(ltsv::Ltsv::new(cfg)?),
            ParserType::Csv => Kind::Csv(csv::Csv::new(cfg)?),
            ParserType::Tsv => Kind::Tsv(tsv::Tsv::new(cfg)?),
            ParserType::Apache2 | ParserType::Nginx => {
                default_fmt = Some(TimeFmt::Format("%d/%b/%Y:%H:%M:%S %z".into()));
                for k in ["code", "size"] {
                    if !cfg.types.contains_key(k) {
                        types.push((k.into(), FieldType::Integer));
                    }
                }
                let e = if cfg.kind == ParserType::Apache2 {
                    apache2::EXPRESSION
                } else {
                    nginx::EXPRESSION
                };
                Kind::Regex(common::Rx::new(e, true)?)
            }
            ParserType::ApacheError => {
                default_fmt = Some(TimeFmt::Format(apache_error::TIME_FORMAT.into()));
                Kind::Regex(common::Rx::new(apache_error::EXPRESSION, false)?)
            }
            ParserType::Syslog => {
                if !cfg.types.contains_key("pri") {
                    types.push(("pri".into(), FieldType::Integer));
                }
                Kind::Syslog(syslog::Syslog::new(
                    cfg.message_format,
                    cfg.time_format.clone(),
                )?)
            }
        };
        if !matches!(cfg.kind, ParserType::Csv | ParserType::Tsv) && !cfg.keys.is_empty() {
            anyhow::bail!("parser option `keys` is only for types \"csv\" and \"tsv\"");
        }
        let time = match &cfg.time_format {
            Some(f) => TimeFmt::Format(ruby_to_chrono(f)),
            None => default_fmt.unwrap_or(TimeFmt::Auto),
        };
        Ok(Parser {
            kind,
            message_key: cfg.message_key.clone(),
            time_key: cfg.time_key.clone().or(default_time_key.map(String::from)),
            time,
            keep_time_key: cfg.keep_time_key,
            types,
        })
    }

    /// True for type "none" (the caller may take its own fast path).
    pub fn is_none(&self) -> bool {
        matches!(self.kind, Kind::None)
    }

    /// For "multiline": the first-line expression and the flush interval.
    pub fn multiline(&self) -> Option<(&::regex::bytes::Regex, std::time::Duration)> {
        match &self.kind {
            Kind::Multiline(m) => Some((&m.firstline, m.flush)),
            _ => None,
        }
    }

    /// For "multiline" with `format_continuation`: the lines that may continue an event.
    pub fn multiline_continuation(&self) -> Option<&::regex::bytes::Regex> {
        match &self.kind {
            Kind::Multiline(m) => m.continuation.as_ref(),
            _ => None,
        }
    }

    /// For "cri" and "docker": the state of one source (a followed file)
    /// that joins the pieces of its lines, bounded by `max` bytes an event.
    pub fn joiner(&self, max: usize) -> Option<partial::Joiner> {
        let Kind::Container(format, firstline, flush) = &self.kind else {
            return None;
        };
        let keep = self.keep_time_key.then(|| self.time_key.clone()).flatten();
        Some(partial::Joiner::new(
            *format,
            &self.message_key,
            keep,
            max,
            *flush,
            firstline.clone(),
        ))
    }

    pub fn message_key(&self) -> &str {
        &self.message_key
    }

    /// Appends one msgpack map (the record of `line`) to `out`; returns the
    /// event time when the line had one.
    #[allow(dead_code)]
    pub fn parse(&self, line: &[u8], out: &mut Vec<u8>) -> Option<EventTime> {
        self.parse_with(line, &[], out).time
    }

    /// Like `parse`, with `extra` fields appended to the record, and whether
    /// the line parsed.
    pub fn parse_with(&self, line: &[u8], extra: &[(&[u8], &[u8])], out: &mut Vec<u8>) -> Parsed {
        let result = match &self.kind {
            Kind::None => {
                none::write(&self.message_key, line, extra, out);
                return Parsed {
                    time: None,
                    ok: true,
                };
            }
            Kind::Json => {
                let start = out.len();
                match json::parse(self, line, extra, out) {
                    Ok(t) => return Parsed { time: t, ok: true },
                    Err(e) => {
                        out.truncate(start);
                        Err(e)
                    }
                }
            }
            Kind::Regex(rx) => rx.fields(line).map(FieldsAndTime::from),
            Kind::Multiline(m) => match m.fields(line) {
                Some(r) => r.map(FieldsAndTime::from),
                None => {
                    none::write(&self.message_key, line, extra, out);
                    return Parsed {
                        time: None,
                        ok: true,
                    };
                }
            },
            Kind::Container(partial::Format::Cri, ..) => {
                cri::fields(line, &self.message_key).map(FieldsAndTime::from)
            }
            Kind::Container(partial::Format::Docker, ..) => {
                docker::fields(line, &self.message_key).map(FieldsAndTime::from)
            }
            Kind::Ltsv(p) => p.fields(line).map(FieldsAndTime::from),
            Kind::Csv(p) => p.fields(line).map(FieldsAndTime::from),
            Kind::Tsv(p) => p.fields(line).map(FieldsAndTime::from),
            // The syslog parser decides the time format per line.
            Kind::Syslog(p) => p.fields(line).map(|(f, fmt)| FieldsAndTime(f, Some(fmt))),
        };
        let (fields, fmt) = match result {
            Ok(FieldsAndTime(f, fmt)) => (f, fmt),
            Err(reason) => {
                self.write_error(line, &reason, extra, out);
                return Parsed {
                    time: None,
                    ok: false,
                };
            }
        };
        match self.finish(fields, fmt.as_ref().unwrap_or(&self.time), extra, out) {
            Ok(time) => Parsed { time, ok: true },
            Err(reason) => {
                self.write_error(line, &reason, extra, out);
                Parsed {
                    time: None,
                    ok: false,
                }
            }
        }
    }

    fn write_error(&self, line: &[u8], reason: &str, extra: &[(&[u8], &[u8])], out: &mut Vec<u8>) {
        write_map_len(out, 2 + extra.len());
        write_str(out, self.message_key.as_bytes());
        write_str(out, line);
        write_str(out, b"parse_error");
        write_str(out, reason.as_bytes());
        write_extra(extra, out);
    }

    /// Applies `types` and `time_key` and writes the map.
    fn finish(
        &self,
        mut fields: Fields<'_>,
        fmt: &TimeFmt,
        extra: &[(&[u8], &[u8])],
        out: &mut Vec<u8>,
    ) -> Result<Option<EventTime>, String> {
        let mut time = None;
        if let Some(tk) = &self.time_key {
            if let Some(i) = fields.iter().position(|(k, _)| k == tk) {
                if let Val::Str(s) = &fields[i].1 {
                    let text = String::from_utf8_lossy(s);
                    time = Some(parse_time(&text, fmt).ok_or_else(|| {
                        format!("time {text:?} in field {tk:?} does not match the time format")
                    })?);
                }
                if !self.keep_time_key {
                    fields.remove(i);
                }
            }
        }
        for (k, t) in &self.types {
            if let Some((_, v)) = fields.iter_mut().find(|(fk, _)| fk == k) {
                *v = convert(std::mem::replace(v, Val::Nil), *t);
            }
        }
        write_map_len(out, fields.len() + extra.len());
        for (k, v) in &fields {
            write_str(out, k.as_bytes());
            write_val(v, out);
        }
        write_extra(extra, out);
        Ok(time)
    }
}

/// Fields and, when the parser chose one for this line, the time format.
pub struct FieldsAndTime<'a>(Fields<'a>, Option<TimeFmt>);

impl<'a> From<Fields<'a>> for FieldsAndTime<'a> {
    fn from(f: Fields<'a>) -> Self {
        FieldsAndTime(f, None)
    }
}

fn write_extra(extra: &[(&[u8], &[u8])], out: &mut Vec<u8>) {
    for (k, v) in extra {
        write_str(out, k);
        write_str(out, v);
    }
}

pub fn write_val(v: &Val<'_>, out: &mut Vec<u8>) {
    match v {
        Val::Str(s) => write_str(out, s),
        Val::Int(i) => {
            let _ = rmp::encode::write_sint(out, *i);
        }
        Val::Float(f) => {
            let _ = rmp::encode::write_f64(out, *f);
        }
        Val::Bool(b) => write_bool(out, *b),
        Val::Nil => out.push(0xc0),
    }
}

fn convert(v: Val<'_>, t: FieldType) -> Val<'_> {
    let Val::Str(s) = &v else {
        return v;
    };
    let text = std::str::from_utf8(s).unwrap_or("").trim();
    match t {
        FieldType::String => v,
        FieldType::Integer => text.parse().map(Val::Int).unwrap_or(Val::Nil),
        FieldType::Float => text.parse().map(Val::Float).unwrap_or(Val::Nil),
        FieldType::Bool => Val::Bool(matches!(
            text.to_ascii_lowercase().as_str(),
            "true" | "yes" | "1"
        )),
    }
}

/// Ruby's `%L` (milliseconds) and `%N` (nanoseconds) in chrono's words.
fn ruby_to_chrono(f: &str) -> String {
    f.replace("%L", "%3f").replace("%N", "%9f")
}

fn event_time<Tz: TimeZone>(t: DateTime<Tz>) -> Option<EventTime> {
    let secs = t.timestamp();
    if !(0..=u32::MAX as i64).contains(&secs) {
        return None;
    }
    Some(EventTime::new(secs as u32, t.timestamp_subsec_nanos()))
}

fn local(n: NaiveDateTime) -> Option<EventTime> {
    event_time(Local.from_local_datetime(&n).earliest()?)
}

/// Reads a time field.
pub fn parse_time(s: &str, fmt: &TimeFmt) -> Option<EventTime> {
    let s = s.trim();
    match fmt {
        TimeFmt::Format(f) => {
            if let Ok(t) = DateTime::parse_from_str(s, f) {
                return event_time(t);
            }
            local(NaiveDateTime::parse_from_str(s, f).ok()?)
        }
        TimeFmt::Syslog3164 => syslog3164_time(s),
        TimeFmt::Auto => {
            if let Ok(t) = DateTime::parse_from_rfc3339(s) {
                return event_time(t);
            }
            let f: f64 = s.parse().ok()?;
            if !(0.0..u32::MAX as f64).contains(&f) {
                return None;
            }
            let secs = f.trunc();
            Some(EventTime::new(
                secs as u32,
                ((f - secs) * 1e9).round().min(999_999_999.0) as u32,
            ))
        }
    }
}

/// An RFC 3164 time, the last one read on this thread remembered for the
/// rest of the second: a stream of syslog lines holds one time for a
/// second at a time, and reading it (the year from the clock, chrono's
/// format, the local offset) cost more than cutting the whole line. Within
/// the second the result cannot change but for the year's choice at its
/// one-day edge.
fn syslog3164_time(s: &str) -> Option<EventTime> {
    use std::cell::RefCell;
    thread_local! {
        static LAST: RefCell<(String, u64, Option<EventTime>)> =
            const { RefCell::new((String::new(), u64::MAX, None)) };
    }
    let second = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        if last.1 == second && last.0 == s {
            return last.2;
        }
        let t = syslog3164_uncached(s);
        last.0.clear();
        last.0.push_str(s);
        last.1 = second;
        last.2 = t;
        t
    })
}

fn syslog3164_uncached(s: &str) -> Option<EventTime> {
    let now = Local::now();
    let year = now.year();
    let t =
        local(NaiveDateTime::parse_from_str(&format!("{year} {s}"), "%Y %b %d %H:%M:%S").ok()?)?;
    // A December line read in January is from last year.
    if t.secs as i64 > now.timestamp() + 86_400 {
        return local(
            NaiveDateTime::parse_from_str(&format!("{} {s}", year - 1), "%Y %b %d %H:%M:%S")
                .ok()?,
        );
    }
    Some(t)
}

/// A regex error is several lines (the pattern, a caret, the reason): one
/// line for a config error.
fn one_line(message: &str) -> String {
    let lines: Vec<&str> = message.lines().collect();
    match lines.as_slice() {
        [first, pattern, .., last] => format!(
            "{}: {} in {:?}",
            first.trim_end_matches(':'),
            last.trim().trim_start_matches("error: "),
            pattern.trim()
        ),
        _ => message.to_string(),
    }
}

/// Builds the parser of an `[input.parser]` / `[filter.parser]` table
/// (`key` names that table), as a check: the error names the option at fault.
pub fn check_options(
    key: &str,
    cfg: &ParserConfig,
) -> Result<(), nagare_core::plugin::OptionError> {
    Parser::new(cfg).map(|_| ()).map_err(|e| {
        let message = one_line(&format!("{e:#}"));
        let option = match cfg.kind {
            ParserType::Regex => "expression",
            ParserType::Multiline | ParserType::Cri | ParserType::Docker
                if message.contains("format_firstline") =>
            {
                "format_firstline"
            }
            ParserType::Multiline => "expression",
            _ => "",
        };
        let key = if option.is_empty() {
            key.to_string()
        } else {
            format!("{key}.{option}")
        };
        nagare_core::plugin::OptionError::new(key, message)
    })
}

#[cfg(test)]
pub(crate) mod testutil {
    use super::*;

    pub fn sample(name: &str) -> String {
        let p = format!(
            "{}/tests/samples/parsers/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
    }

    /// Parses a line; returns the decoded record, the time and whether it parsed.
    pub fn run(p: &Parser, line: &str) -> (rmpv::Value, Option<EventTime>, bool) {
        let mut out = Vec::new();
        let r = p.parse_with(line.as_bytes(), &[], &mut out);
        let mut rd = &out[..];
        let v = rmpv::decode::read_value(&mut rd).expect("one msgpack value");
        assert!(rd.is_empty(), "exactly one value written");
        assert!(v.is_map());
        (v, r.time, r.ok)
    }

    pub fn get<'a>(v: &'a rmpv::Value, k: &str) -> Option<&'a rmpv::Value> {
        v.as_map()?
            .iter()
            .find(|(kk, _)| kk.as_str() == Some(k))
            .map(|(_, v)| v)
    }

    pub fn s<'a>(v: &'a rmpv::Value, k: &str) -> &'a str {
        get(v, k)
            .and_then(|x| x.as_str())
            .unwrap_or_else(|| panic!("string field {k} in {v}"))
    }

    pub fn keys(v: &rmpv::Value) -> Vec<String> {
        v.as_map()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str().unwrap().to_string())
            .collect()
    }

    pub fn parser(toml_text: &str) -> Parser {
        let cfg: ParserConfig = toml::from_str(toml_text).unwrap();
        Parser::new(&cfg).unwrap()
    }

    pub fn utc(s: &str) -> EventTime {
        event_time(DateTime::parse_from_rfc3339(s).unwrap()).unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::*;
    use super::*;

    #[test]
    fn types_convert_fields() {
        let p = parser(
            r#"type = "regex"
expression = '^(?<a>\S+) (?<b>\S+) (?<c>\S+) (?<d>\S+)$'
types = { a = "integer", b = "float", c = "bool", d = "integer" }"#,
        );
        let (v, t, ok) = run(&p, "42 2.5 yes x");
        assert!(ok && t.is_none());
        assert_eq!(get(&v, "a").unwrap().as_i64(), Some(42));
        assert_eq!(get(&v, "b").unwrap().as_f64(), Some(2.5));
        assert_eq!(get(&v, "c").unwrap().as_bool(), Some(true));
        assert!(get(&v, "d").unwrap().is_nil());
    }

    #[test]
    fn auto_times() {
        assert_eq!(
            parse_time("2026-11-22T01:02:03.5Z", &TimeFmt::Auto),
            Some(EventTime::new(1_795_309_323, 500_000_000))
        );
        assert_eq!(
            parse_time("1700000000.25", &TimeFmt::Auto),
            Some(EventTime::new(1_700_000_000, 250_000_000))
        );
        assert_eq!(parse_time("nope", &TimeFmt::Auto), None);
    }

    #[test]
    fn unknown_types_and_options_are_rejected() {
        assert!(toml::from_str::<ParserConfig>("type = \"bogus\"").is_err());
        assert!(toml::from_str::<ParserConfig>("type = \"none\"\nfoo = 1").is_err());
        assert!(toml::from_str::<ParserConfig>("type = \"regex\"").is_err());
        assert!(toml::from_str::<ParserConfig>("type = \"csv\"").is_err());
        assert!(toml::from_str::<ParserConfig>("type = \"json\"\nkeys = [\"a\"]").is_err());
        let cfg: ParserConfig = toml::from_str("type = \"regex\"\nexpression = \"(\"").unwrap();
        assert!(Parser::new(&cfg).is_err());
    }
}
