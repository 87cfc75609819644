//! `multiline`: several lines make one event, like Fluentd's multiline
//! parser. A line matching `format_firstline` starts an event; the lines
//! that follow (up to the next first line) continue it. The tail input joins
//! them with "\n" and hands the joined text here: with `expression` (matched
//! with `.` also matching newlines) its named captures are the fields,
//! without one the whole text goes to `message_key`. The last event of a
//! file is emitted after `multiline_flush_interval` without a new line.
//! Lines before a file's first first-line are an event of their own.
//! With `format_continuation`, only the lines it matches continue an
//! event, and any other line is an event of its own (Fluent Bit's rules).

use std::time::Duration;

use super::common::Rx;
use super::{Fields, ParserConfig};

pub struct Multiline {
    pub firstline: regex::bytes::Regex,
    pub continuation: Option<regex::bytes::Regex>,
    pub flush: Duration,
    inner: Option<Rx>,
}

impl Multiline {
    pub fn new(cfg: &ParserConfig) -> anyhow::Result<Multiline> {
        let Some(first) = &cfg.format_firstline else {
            anyhow::bail!("parser type \"multiline\" needs `format_firstline`");
        };
        let firstline = regex::bytes::Regex::new(first)
            .map_err(|e| anyhow::anyhow!("bad format_firstline: {e}"))?;
        let continuation = cfg
            .format_continuation
            .as_deref()
            .map(regex::bytes::Regex::new)
            .transpose()
            .map_err(|e| anyhow::anyhow!("bad format_continuation: {e}"))?;
        let inner = match &cfg.expression {
            Some(e) => Some(Rx::new(&format!("(?s){e}"), false)?),
            None => None,
        };
        Ok(Multiline {
            firstline,
            continuation,
            flush: cfg.multiline_flush_interval.0,
            inner,
        })
    }

    /// The fields of a joined event, or None for "the text in message_key".
    pub fn fields<'a>(&'a self, text: &'a [u8]) -> Option<Result<Fields<'a>, String>> {
        self.inner.as_ref().map(|rx| rx.fields(text))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;

    #[test]
    fn an_expression_parses_the_joined_event() {
        let p = parser(
            r#"type = "multiline"
format_firstline = '^\d{4}-\d{2}-\d{2} '
expression = '^(?<time>\S+ \S+) (?<level>[A-Z]+) (?<message>.*)$'
time_format = "%Y-%m-%d %H:%M:%S%.f"
"#,
        );
        let (v, t, ok) = run(
            &p,
            "2026-11-21 10:00:00.000 ERROR boom\n  at a.b(C.java:1)\n  at d.e(F.java:2)",
        );
        assert!(ok && t.is_some(), "{v}");
        assert_eq!(s(&v, "level"), "ERROR");
        assert_eq!(
            s(&v, "message"),
            "boom\n  at a.b(C.java:1)\n  at d.e(F.java:2)"
        );
        let p = parser("type = \"multiline\"\nformat_firstline = '^\\S'");
        let (v, _, ok) = run(&p, "a\n b");
        assert!(ok);
        assert_eq!(s(&v, "message"), "a\n b");
    }
}
