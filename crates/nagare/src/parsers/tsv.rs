//! `tsv`: tab-separated values (no quoting) named by `keys`.

use std::borrow::Cow;

use super::common::{split, zip};
use super::{Fields, ParserConfig, Val};

pub struct Tsv {
    keys: Vec<String>,
    delimiter: Vec<u8>,
}

impl Tsv {
    pub fn new(cfg: &ParserConfig) -> anyhow::Result<Tsv> {
        if cfg.keys.is_empty() {
            anyhow::bail!("parser type \"tsv\" needs `keys`");
        }
        let delimiter = cfg.delimiter.as_deref().unwrap_or("\t").as_bytes().to_vec();
        if delimiter.is_empty() {
            anyhow::bail!("tsv parser: `delimiter` must not be empty");
        }
        Ok(Tsv {
            keys: cfg.keys.clone(),
            delimiter,
        })
    }

    pub fn fields<'a>(&'a self, line: &'a [u8]) -> Result<Fields<'a>, String> {
        let values: Vec<&[u8]> = split(line, &self.delimiter).collect();
        zip(
            &self.keys,
            values
                .into_iter()
                .map(|v| Val::Str(Cow::Borrowed(v)))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;

    #[test]
    fn sample_lines() {
        let p = parser(
            "type = \"tsv\"\nkeys = [\"time\", \"host\", \"level\", \"msg\"]\ntime_key = \"time\"",
        );
        let text = sample("events.tsv");
        let lines: Vec<&str> = text.lines().collect();
        let (v, t, ok) = run(&p, lines[0]);
        assert!(ok, "{v}");
        assert_eq!(t, Some(utc("2026-11-21T08:00:00Z")));
        assert_eq!(keys(&v), ["host", "level", "msg"]);
        assert_eq!(s(&v, "msg"), "service started, pid 4242");
        // Fewer columns: the missing ones are nil.
        let (v, _, ok) = run(&p, lines[1]);
        assert!(ok);
        assert!(get(&v, "msg").unwrap().is_nil());
        // More columns than keys: kept as a parse error.
        let (v, _, ok) = run(&p, lines[2]);
        assert!(!ok);
        assert!(s(&v, "parse_error").contains("5 values for 4 keys"));
    }
}
