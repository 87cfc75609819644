//! The config file as the TOML parser read it, with the position of every
//! key and value: environment variables are expanded in string values only,
//! `type` is moved to the front of every table (so a plugin's options are
//! chosen before they are read), and a key path maps to its line.

use std::ops::Range;

use toml::de::{DeTable, DeValue};
use toml::Spanned;

/// Line numbers of byte offsets in the text.
pub struct Lines {
    starts: Vec<usize>,
}

impl Lines {
    pub fn new(text: &str) -> Lines {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Lines { starts }
    }

    /// The 1-based line of a byte offset.
    pub fn line(&self, offset: usize) -> usize {
        self.starts.partition_point(|&s| s <= offset).max(1)
    }
}

/// Where each key of a table (and of the tables and arrays inside it) was
/// written: "parser.expression", "server[1].address" → the key's span.
#[derive(Debug, Default)]
pub struct KeySpans {
    spans: Vec<(String, Range<usize>)>,
}

impl KeySpans {
    pub fn of(table: &DeTable<'_>) -> KeySpans {
        let mut k = KeySpans::default();
        k.walk_table("", table);
        k
    }

    fn walk_table(&mut self, prefix: &str, table: &DeTable<'_>) {
        for (key, value) in table.iter() {
            let path = join(prefix, key.get_ref());
            self.spans.push((path.clone(), key.span()));
            self.walk_value(&path, value.get_ref());
        }
    }

    fn walk_value(&mut self, path: &str, value: &DeValue<'_>) {
        match value {
            DeValue::Table(t) => self.walk_table(path, t),
            DeValue::Array(a) => {
                for (i, v) in a.iter().enumerate() {
                    let p = format!("{path}[{i}]");
                    self.spans.push((p.clone(), v.span()));
                    self.walk_value(&p, v.get_ref());
                }
            }
            _ => {}
        }
    }

    /// The span of `path` if it was written itself.
    pub fn exact(&self, path: &str) -> Option<Range<usize>> {
        self.spans
            .iter()
            .find(|(k, _)| k == path)
            .map(|(_, s)| s.clone())
    }

    /// The span of `path`, or of its closest enclosing key that was written.
    pub fn find(&self, path: &str) -> Option<Range<usize>> {
        let mut p = path;
        loop {
            if let Some((_, s)) = self.spans.iter().find(|(k, _)| k == p) {
                return Some(s.clone());
            }
            let cut = p.rfind(['.', '['])?;
            p = &p[..cut];
        }
    }
}

pub use nagare_core::plugin::join;

/// An environment variable a string value names but the environment lacks.
pub struct UnsetVar {
    pub name: String,
    pub span: Range<usize>,
}

/// Expands `${NAME}` and `${NAME:-default}` in every string value (not in
/// comments or keys). Only upper-case names are variables: `${tag}` and
/// other lower-case placeholders belong to plugins.
pub fn expand_env(value: &mut Spanned<DeValue<'_>>, unset: &mut Vec<UnsetVar>) {
    let span = value.span();
    match value.get_mut() {
        DeValue::String(s) if s.contains("${") => match expand(s) {
            Ok(Some(new)) => *s = new.into(),
            Ok(None) => {}
            Err(name) => unset.push(UnsetVar { name, span }),
        },
        DeValue::Table(t) => {
            for (_, v) in t.iter_mut() {
                expand_env(v, unset);
            }
        }
        DeValue::Array(a) => {
            for v in a.iter_mut() {
                expand_env(v, unset);
            }
        }
        _ => {}
    }
}

/// The expanded text (None when nothing was a variable), or the name of an
/// unset variable without a default.
fn expand(s: &str) -> Result<Option<String>, String> {
    // Compiled once, not once per string value that holds "${".
    static VARIABLE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"\$\{([A-Z_][A-Z0-9_]*)(?::-([^}]*))?\}").expect("static regex")
    });
    let re = &*VARIABLE;
    if !re.is_match(s) {
        return Ok(None);
    }
    let mut out = String::with_capacity(s.len());
    let mut last = 0;
    for c in re.captures_iter(s) {
        let m = c.get(0).expect("match");
        let name = &c[1];
        let val = match (std::env::var(name), c.get(2)) {
            (Ok(v), _) => v,
            (Err(_), Some(default)) => default.as_str().to_string(),
            (Err(_), None) => return Err(name.to_string()),
        };
        out.push_str(&s[last..m.start()]);
        out.push_str(&val);
        last = m.end();
    }
    out.push_str(&s[last..]);
    Ok(Some(out))
}

/// Moves `type` to the front of every table, recursively.
pub fn type_first(value: &mut DeValue<'_>) {
    match value {
        DeValue::Table(t) => {
            if t.keys().next().is_some_and(|k| k.get_ref() != "type") {
                if let Some((k, v)) = t.remove_entry("type") {
                    let rest = std::mem::take(t);
                    t.insert(k, v);
                    for (k, v) in rest {
                        t.insert(k, v);
                    }
                }
            }
            for (_, v) in t.iter_mut() {
                type_first(v.get_mut());
            }
        }
        DeValue::Array(a) => {
            for v in a.iter_mut() {
                type_first(v.get_mut());
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_offsets() {
        let l = Lines::new("a\nbb\n\nc");
        assert_eq!(
            [l.line(0), l.line(2), l.line(4), l.line(5), l.line(6)],
            [1, 2, 2, 3, 4]
        );
    }

    #[test]
    fn env_expansion() {
        std::env::set_var("NAGARE_SOURCE_TEST", "x");
        std::env::remove_var("NAGARE_SOURCE_UNSET");
        assert_eq!(expand("a${NAGARE_SOURCE_TEST}b").unwrap().unwrap(), "axb");
        assert_eq!(expand("${NAGARE_SOURCE_UNSET:-d}").unwrap().unwrap(), "d");
        assert_eq!(expand("${NAGARE_SOURCE_UNSET:-}").unwrap().unwrap(), "");
        assert_eq!(
            expand("${NAGARE_SOURCE_UNSET}").unwrap_err(),
            "NAGARE_SOURCE_UNSET"
        );
        assert_eq!(expand("${tag}/%Y").unwrap(), None);
    }
}
