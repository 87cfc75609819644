//! `ltsv`: labeled tab-separated values, `label:value<TAB>label:value`.

use std::borrow::Cow;

use super::common::{find, split};
use super::{Fields, ParserConfig, Val};

pub struct Ltsv {
    delimiter: Vec<u8>,
    label: Vec<u8>,
}

impl Ltsv {
    pub fn new(cfg: &ParserConfig) -> anyhow::Result<Ltsv> {
        let delimiter = cfg.delimiter.as_deref().unwrap_or("\t").as_bytes().to_vec();
        let label = cfg
            .label_delimiter
            .as_deref()
            .unwrap_or(":")
            .as_bytes()
            .to_vec();
        if delimiter.is_empty() || label.is_empty() {
            anyhow::bail!("ltsv parser: `delimiter` and `label_delimiter` must not be empty");
        }
        Ok(Ltsv { delimiter, label })
    }

    pub fn fields<'a>(&'a self, line: &'a [u8]) -> Result<Fields<'a>, String> {
        let mut f = Fields::new();
        if line.is_empty() {
            return Err("empty line".into());
        }
        for item in split(line, &self.delimiter) {
            let Some(i) = find(item, &self.label) else {
                return Err(format!(
                    "field {:?} has no label",
                    String::from_utf8_lossy(item)
                ));
            };
            let key = String::from_utf8_lossy(&item[..i]);
            f.push((key, Val::Str(Cow::Borrowed(&item[i + self.label.len()..]))));
        }
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;

    #[test]
    fn sample_lines() {
        let p = parser("type = \"ltsv\"\ntime_key = \"time\"\ntime_format = \"%d/%b/%Y:%H:%M:%S %z\"\ntypes = { status = \"integer\", size = \"integer\", reqtime = \"float\" }");
        let text = sample("access.ltsv");
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines.len() >= 3);
        let (v, t, ok) = run(&p, lines[0]);
        assert!(ok, "{v}");
        assert_eq!(t, Some(utc("2026-11-20T13:55:36+09:00")));
        assert_eq!(
            keys(&v),
            ["host", "ident", "user", "req", "status", "size", "referer", "ua", "reqtime"]
        );
        assert_eq!(s(&v, "host"), "127.0.0.1");
        assert_eq!(s(&v, "req"), "GET /index.html HTTP/1.1");
        assert_eq!(get(&v, "status").unwrap().as_i64(), Some(200));
        assert_eq!(get(&v, "size").unwrap().as_i64(), Some(777));
        assert_eq!(get(&v, "reqtime").unwrap().as_f64(), Some(0.012));
        assert_eq!(s(&v, "ua"), "Mozilla/5.0 (X11; Linux x86_64)");
        for l in &lines[1..lines.len() - 1] {
            assert!(run(&p, l).2, "{l}");
        }
        // The last sample line lacks a label.
        let (v, _, ok) = run(&p, lines[lines.len() - 1]);
        assert!(!ok);
        assert_eq!(s(&v, "message"), lines[lines.len() - 1]);
        assert!(s(&v, "parse_error").contains("no label"));
    }
}
