//! The TOML the converter writes: tables of keys and values, each line able
//! to carry a comment (an approximation says why on its own line), written
//! out by hand so that comments and key order stay as the mapping made them.

use std::fmt::Write;

/// A TOML value.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    Str(String),
    Int(i64),
    Bool(bool),
    Arr(Vec<Val>),
}

impl Val {
    pub fn s(s: impl Into<String>) -> Val {
        Val::Str(s.into())
    }

    fn write(&self, out: &mut String) {
        match self {
            Val::Str(s) => out.push_str(&quote(s)),
            Val::Int(i) => {
                let _ = write!(out, "{i}");
            }
            Val::Bool(b) => {
                let _ = write!(out, "{b}");
            }
            Val::Arr(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    v.write(out);
                }
                out.push(']');
            }
        }
    }
}

/// A TOML string: a literal string ('…') when the text allows one, so
/// regular expressions stay readable; else a basic string with escapes.
pub fn quote(s: &str) -> String {
    if !s.contains('\'') && !s.chars().any(|c| c.is_control()) {
        format!("'{s}'")
    } else {
        toml::Value::String(s.to_string()).to_string()
    }
}

/// A key: bare when it can be, else quoted.
pub fn key(k: &str) -> String {
    if !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        k.to_string()
    } else {
        toml::Value::String(k.to_string()).to_string()
    }
}

#[derive(Debug, Clone)]
pub struct Entry {
    pub key: String,
    pub val: Val,
    pub comment: Option<String>,
}

/// A table (`[name]`) or an element of an array of tables (`[[name]]`),
/// with the tables inside it.
#[derive(Debug, Clone)]
pub struct Table {
    pub name: String,
    pub array: bool,
    /// Comment lines written above the header.
    pub comments: Vec<String>,
    pub entries: Vec<Entry>,
    pub children: Vec<Table>,
}

impl Table {
    pub fn new(name: &str, array: bool) -> Table {
        Table {
            name: name.to_string(),
            array,
            comments: Vec::new(),
            entries: Vec::new(),
            children: Vec::new(),
        }
    }

    /// Sets `key` (replacing an earlier value of it).
    pub fn set(&mut self, key: &str, val: Val) {
        self.set_commented(key, val, None);
    }

    /// Sets `key` with a comment at the end of its line.
    pub fn set_commented(&mut self, key: &str, val: Val, comment: Option<String>) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.key == key) {
            e.val = val;
            if comment.is_some() {
                e.comment = comment;
            }
            return;
        }
        self.entries.push(Entry {
            key: key.to_string(),
            val,
            comment,
        });
    }

    pub fn get(&self, key: &str) -> Option<&Val> {
        self.entries.iter().find(|e| e.key == key).map(|e| &e.val)
    }

    /// The child table `name` (not an array), made when missing.
    pub fn child(&mut self, name: &str) -> &mut Table {
        let i = match self
            .children
            .iter()
            .position(|c| c.name == name && !c.array)
        {
            Some(i) => i,
            None => {
                self.children.push(Table::new(name, false));
                self.children.len() - 1
            }
        };
        &mut self.children[i]
    }

    pub fn has_child(&self, name: &str) -> bool {
        self.children.iter().any(|c| c.name == name)
    }

    fn write(&self, prefix: &str, out: &mut String) {
        for c in &self.comments {
            for line in c.lines() {
                let _ = writeln!(out, "# {line}");
            }
        }
        let path = format!("{prefix}{}", self.name);
        if self.array {
            let _ = writeln!(out, "[[{path}]]");
        } else {
            let _ = writeln!(out, "[{path}]");
        }
        for e in &self.entries {
            out.push_str(&key(&e.key));
            out.push_str(" = ");
            e.val.write(out);
            if let Some(c) = &e.comment {
                out.push_str("  # ");
                out.push_str(&c.replace('\n', " "));
            }
            out.push('\n');
        }
        for c in &self.children {
            c.write(&format!("{path}."), out);
        }
    }
}

/// The whole file: comment lines at the top, then the tables in order.
#[derive(Debug, Default)]
pub struct Doc {
    pub header: Vec<String>,
    pub tables: Vec<Table>,
    /// Comment lines at the end (the notes of things left out).
    pub footer: Vec<String>,
}

impl Doc {
    pub fn render(&self) -> String {
        let mut out = String::new();
        for h in &self.header {
            let _ = writeln!(out, "# {h}");
        }
        for t in &self.tables {
            out.push('\n');
            t.write("", &mut out);
        }
        if !self.footer.is_empty() {
            out.push('\n');
            for f in &self.footer {
                let _ = writeln!(out, "# {f}");
            }
        }
        out
    }
}
