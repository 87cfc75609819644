//! `regex`: the named captures of `expression` become the record's fields
//! (captures that took no part in the match are left out). Also the engine
//! of `apache2`, `apache_error` and `nginx`.

use std::borrow::Cow;

use super::{Fields, Val};

pub struct Rx {
    re: regex::bytes::Regex,
    names: Vec<(usize, String)>,
    /// A field that is exactly "-" becomes nil (apache2, nginx).
    dash_nil: bool,
}

impl Rx {
    pub fn new(expression: &str, dash_nil: bool) -> anyhow::Result<Rx> {
        let re = regex::bytes::Regex::new(expression)
            .map_err(|e| anyhow::anyhow!("bad parser expression: {e}"))?;
        let names: Vec<(usize, String)> = re
            .capture_names()
            .enumerate()
            .filter_map(|(i, n)| n.map(|n| (i, n.to_string())))
            .collect();
        if names.is_empty() {
            anyhow::bail!("parser expression has no named captures (?<name>…)");
        }
        Ok(Rx {
            re,
            names,
            dash_nil,
        })
    }

    pub fn fields<'a>(&'a self, line: &'a [u8]) -> Result<Fields<'a>, String> {
        let caps = self
            .re
            .captures(line)
            .ok_or_else(|| "the line does not match the expression".to_string())?;
        let mut f = Fields::with_capacity(self.names.len());
        for (i, name) in &self.names {
            if let Some(m) = caps.get(*i) {
                let v = if self.dash_nil && m.as_bytes() == b"-" {
                    Val::Nil
                } else {
                    Val::s(m.as_bytes())
                };
                f.push((Cow::Borrowed(name.as_str()), v));
            }
        }
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;

    #[test]
    fn named_captures_time_and_types() {
        let p = parser(
            r#"type = "regex"
expression = '^(?<time>\S+ \S+) \[(?<level>\w+)\] (?<user>\w+) took (?<ms>\d+)ms(?: (?<note>.*))?$'
time_format = "%Y-%m-%d %H:%M:%S%.f%z"
types = { ms = "integer" }"#,
        );
        let (v, t, ok) = run(&p, "2026-11-22 10:00:01.250+0000 [INFO] alice took 17ms");
        assert!(ok);
        assert_eq!(t, Some(utc("2026-11-22T10:00:01.25Z")));
        assert_eq!(keys(&v), ["level", "user", "ms"]);
        assert_eq!(get(&v, "ms").unwrap().as_i64(), Some(17));
        let (v, _, ok) = run(&p, "something else");
        assert!(!ok);
        assert_eq!(s(&v, "message"), "something else");
        assert!(s(&v, "parse_error").contains("does not match"));
    }

    #[test]
    fn a_bad_time_is_a_parse_error() {
        let p = parser(
            r#"type = "regex"
expression = '^(?<time>\S+) (?<msg>.*)$'
time_format = "%Y-%m-%dT%H:%M:%S"
keep_time_key = true"#,
        );
        let (v, t, ok) = run(&p, "2026-11-22T00:00:00 ok");
        assert!(ok && t.is_some());
        assert_eq!(s(&v, "time"), "2026-11-22T00:00:00");
        let (v, t, ok) = run(&p, "yesterday hi");
        assert!(!ok && t.is_none());
        assert!(s(&v, "parse_error").contains("time"));
    }
}
