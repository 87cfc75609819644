//! `csv`: comma-separated values with RFC 4180 quoting, named by `keys`.

use std::borrow::Cow;

use super::common::zip;
use super::{Fields, ParserConfig, Val};

pub struct Csv {
    keys: Vec<String>,
    delimiter: u8,
}

impl Csv {
    pub fn new(cfg: &ParserConfig) -> anyhow::Result<Csv> {
        if cfg.keys.is_empty() {
            anyhow::bail!("parser type \"csv\" needs `keys`");
        }
        let d = cfg.delimiter.as_deref().unwrap_or(",");
        let [delimiter] = d.as_bytes() else {
            anyhow::bail!("csv parser: `delimiter` must be one byte, not {d:?}");
        };
        Ok(Csv {
            keys: cfg.keys.clone(),
            delimiter: *delimiter,
        })
    }

    pub fn fields<'a>(&'a self, line: &'a [u8]) -> Result<Fields<'a>, String> {
        let mut rd = ::csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .delimiter(self.delimiter)
            .from_reader(line);
        let mut rec = ::csv::ByteRecord::new();
        match rd.read_byte_record(&mut rec) {
            Ok(true) => {}
            Ok(false) => return Err("empty line".into()),
            Err(e) => return Err(format!("bad csv: {e}")),
        }
        let values = rec
            .iter()
            .map(|v| Val::Str(Cow::Owned(v.to_vec())))
            .collect();
        zip(&self.keys, values)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;

    #[test]
    fn sample_lines() {
        let p = parser(
            "type = \"csv\"\nkeys = [\"time\", \"user\", \"action\", \"amount\", \"note\"]\ntime_key = \"time\"\ntime_format = \"%Y-%m-%d %H:%M:%S%z\"\ntypes = { amount = \"float\" }",
        );
        let text = sample("orders.csv");
        let lines: Vec<&str> = text.lines().collect();
        let (v, t, ok) = run(&p, lines[0]);
        assert!(ok, "{v}");
        assert_eq!(t, Some(utc("2026-11-21T09:30:00Z")));
        assert_eq!(keys(&v), ["user", "action", "amount", "note"]);
        assert_eq!(s(&v, "user"), "alice");
        assert_eq!(get(&v, "amount").unwrap().as_f64(), Some(19.99));
        assert_eq!(s(&v, "note"), "first order");
        // Quoted fields hold commas and doubled quotes.
        let (v, _, ok) = run(&p, lines[1]);
        assert!(ok);
        assert_eq!(s(&v, "note"), "gift, wrapped \"nicely\"");
        // An empty amount becomes nil (not a float).
        let (v, _, ok) = run(&p, lines[2]);
        assert!(ok);
        assert!(get(&v, "amount").unwrap().is_nil());
        assert_eq!(s(&v, "note"), "");
    }
}
