//! What parsers share, so that no parser imports another: the named-capture
//! engine (`Rx`), naming values by keys (`zip`, csv's and tsv's), and
//! splitting at a delimiter (`find`, `split`, ltsv's and tsv's); the line
//! formats of container runtimes and the joining of their pieces
//! (container.rs: `cri` and `docker`).

pub mod container;

use std::borrow::Cow;

use super::{Fields, Val};

/// A regular expression whose named captures are a line's fields: the
/// engine of `regex`, `multiline`, `apache2`, `apache_error` and `nginx`.
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

/// Names values by keys: a missing value is nil, more values than keys is an error.
pub fn zip<'a>(keys: &'a [String], values: Vec<Val<'a>>) -> Result<Fields<'a>, String> {
    if values.len() > keys.len() {
        return Err(format!("{} values for {} keys", values.len(), keys.len()));
    }
    let mut values = values.into_iter();
    Ok(keys
        .iter()
        .map(|k| (Cow::Borrowed(k.as_str()), values.next().unwrap_or(Val::Nil)))
        .collect())
}

/// Where `needle` first occurs in `hay`.
pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(hay, needle)
}

/// The pieces of `s` between the `sep`s (an empty `s` is one empty piece).
pub fn split<'a>(mut s: &'a [u8], sep: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
    let mut done = false;
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        match find(s, sep) {
            Some(i) => {
                let item = &s[..i];
                s = &s[i + sep.len()..];
                Some(item)
            }
            None => {
                done = true;
                Some(s)
            }
        }
    })
}
