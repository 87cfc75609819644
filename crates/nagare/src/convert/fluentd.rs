//! Fluentd's config syntax (v1): `<directive arg>` … `</directive>`,
//! `key value` parameters (double-quoted values with escapes and `#{…}`
//! Ruby, single-quoted ones, JSON arrays and hashes over several lines), `#`
//! comment lines and `@include` of files and globs, read into a tree whose
//! every node keeps its file and line.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use super::ConvertError;

/// A `key value` parameter.
#[derive(Debug, Clone)]
pub struct Param {
    pub key: String,
    pub value: String,
    pub file: Rc<str>,
    pub line: usize,
}

/// `<name arg>` with its parameters and the directives inside it.
#[derive(Debug, Clone)]
pub struct Directive {
    pub name: String,
    pub arg: String,
    pub params: Vec<Param>,
    pub children: Vec<Directive>,
    pub file: Rc<str>,
    pub line: usize,
}

impl Directive {
    pub fn param(&self, key: &str) -> Option<&Param> {
        self.params.iter().find(|p| p.key == key)
    }

    pub fn value(&self, key: &str) -> Option<&str> {
        self.param(key).map(|p| p.value.as_str())
    }

    /// `@type` (or the v0 `type`).
    pub fn plugin_type(&self) -> &str {
        self.value("@type").or(self.value("type")).unwrap_or("")
    }
}

/// Reads a config file and its includes; the root directive holds the
/// top-level ones.
pub fn parse_file(path: &Path) -> Result<Directive, ConvertError> {
    let mut root = Directive {
        name: String::new(),
        arg: String::new(),
        params: Vec::new(),
        children: Vec::new(),
        file: path.display().to_string().into(),
        line: 0,
    };
    let mut stack = Vec::new();
    parse_into(path, &mut root, &mut stack, 0)?;
    Ok(root)
}

fn read(path: &Path, from: Option<(&str, usize)>) -> Result<String, ConvertError> {
    std::fs::read_to_string(path).map_err(|e| {
        let (file, line) = from.unwrap_or(("", 0));
        ConvertError {
            file: if file.is_empty() {
                path.display().to_string()
            } else {
                file.to_string()
            },
            line,
            message: format!("cannot read {}: {e}", path.display()),
        }
    })
}

/// The files an `@include` names: a glob (sorted, as Fluentd sorts them) or
/// one path, relative to the including file's folder.
pub fn include_paths(
    base: &Path,
    pattern: &str,
    file: &str,
    line: usize,
) -> Result<Vec<PathBuf>, ConvertError> {
    let dir = base.parent().unwrap_or(Path::new("."));
    let full = if Path::new(pattern).is_absolute() {
        PathBuf::from(pattern)
    } else {
        dir.join(pattern)
    };
    let err = |message: String| ConvertError {
        file: file.to_string(),
        line,
        message,
    };
    if pattern.starts_with("http://") || pattern.starts_with("https://") {
        return Err(err(format!("@include of a URL ({pattern}) is not read")));
    }
    let text = full.display().to_string();
    if text.contains(['*', '?', '[']) {
        let mut found: Vec<PathBuf> = glob::glob(&text)
            .map_err(|e| err(format!("bad include pattern {pattern}: {e}")))?
            .filter_map(Result::ok)
            .collect();
        found.sort();
        Ok(found)
    } else {
        Ok(vec![full])
    }
}

fn parse_into(
    path: &Path,
    root: &mut Directive,
    stack: &mut Vec<Directive>,
    depth: usize,
) -> Result<(), ConvertError> {
    let file: Rc<str> = path.display().to_string().into();
    if depth > 16 {
        return Err(ConvertError {
            file: file.to_string(),
            line: 0,
            message: "@include nested more than 16 deep (an include loop?)".into(),
        });
    }
    let text = read(path, None)?;
    let lines: Vec<&str> = text.lines().collect();
    let base_depth = stack.len();
    let mut i = 0;
    while i < lines.len() {
        let lineno = i + 1;
        let t = lines[i].trim();
        i += 1;
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let err = |message: String| ConvertError {
            file: file.to_string(),
            line: lineno,
            message,
        };
        if let Some(rest) = t.strip_prefix("</") {
            let name = rest.trim_end_matches('>').trim();
            if stack.len() <= base_depth {
                return Err(err(format!("</{name}> without an open <{name}>")));
            }
            let d = stack.pop().expect("checked");
            if d.name != name {
                return Err(err(format!(
                    "</{name}> closes <{}> opened at line {}",
                    d.name, d.line
                )));
            }
            match stack.last_mut() {
                Some(parent) => parent.children.push(d),
                None => root.children.push(d),
            }
            continue;
        }
        if let Some(rest) = t.strip_prefix('<') {
            let Some(end) = rest.find('>') else {
                return Err(err(format!("`{t}`: a directive must end with >")));
            };
            let inner = rest[..end].trim();
            let (name, arg) = match inner.split_once(char::is_whitespace) {
                Some((n, a)) => (n.to_string(), a.trim().to_string()),
                None => (inner.to_string(), String::new()),
            };
            if name.is_empty() {
                return Err(err("an empty directive <>".into()));
            }
            stack.push(Directive {
                name,
                arg,
                params: Vec::new(),
                children: Vec::new(),
                file: file.clone(),
                line: lineno,
            });
            continue;
        }
        let (key, rest) = match t.split_once(char::is_whitespace) {
            Some((k, r)) => (k.to_string(), r.trim_start().to_string()),
            None => (t.to_string(), String::new()),
        };
        if key == "@include" || key == "include" {
            let pattern = unquote_simple(&rest);
            // An include inside a directive adds to that directive: the
            // included file's lines go onto the same stack (base_depth keeps
            // it from closing what the including file opened).
            for p in include_paths(path, &pattern, &file, lineno)? {
                if !p.exists() {
                    return Err(err(format!(
                        "@include {pattern}: {} does not exist",
                        p.display()
                    )));
                }
                parse_into(&p, root, stack, depth + 1)?;
            }
            continue;
        }
        // The value: quoted strings and JSON may go on over several lines.
        let mut value = rest;
        let first = value.chars().next();
        let value = match first {
            Some('"') => {
                while !closed_double(&value) {
                    if i >= lines.len() {
                        return Err(err(format!("`{key}`: a \" string is not closed")));
                    }
                    value.push('\n');
                    value.push_str(lines[i]);
                    i += 1;
                }
                unescape_double(&value)
            }
            Some('\'') => {
                while value[1..].find('\'').is_none() {
                    if i >= lines.len() {
                        return Err(err(format!("`{key}`: a ' string is not closed")));
                    }
                    value.push('\n');
                    value.push_str(lines[i]);
                    i += 1;
                }
                let end = 1 + value[1..].find('\'').expect("found");
                value[1..end].replace("\\'", "'")
            }
            Some('[') | Some('{') => {
                while !balanced(&value) && i < lines.len() && !lines[i].trim().starts_with('<') {
                    value.push('\n');
                    value.push_str(lines[i].trim());
                    i += 1;
                }
                value
            }
            _ => strip_inline_comment(&value),
        };
        let p = Param {
            key,
            value,
            file: file.clone(),
            line: lineno,
        };
        match stack.last_mut() {
            Some(d) => d.params.push(p),
            None => root.params.push(p),
        }
    }
    if stack.len() > base_depth {
        let d = stack.last().expect("checked");
        return Err(ConvertError {
            file: file.to_string(),
            line: d.line,
            message: format!("<{} {}> is not closed", d.name, d.arg),
        });
    }
    Ok(())
}

/// ` # comment` after an unquoted value is a comment (as Fluentd reads it).
fn strip_inline_comment(v: &str) -> String {
    match v.find(" #") {
        Some(i) if !v[i..].starts_with(" #{") => v[..i].trim_end().to_string(),
        _ => v.trim_end().to_string(),
    }
}

fn unquote_simple(v: &str) -> String {
    let v = v.trim();
    if v.len() >= 2
        && (v.starts_with('"') && v.ends_with('"') || v.starts_with('\'') && v.ends_with('\''))
    {
        v[1..v.len() - 1].to_string()
    } else {
        v.to_string()
    }
}

fn closed_double(v: &str) -> bool {
    let mut esc = false;
    let mut depth = 0usize; // inside #{…}
    let b = v.as_bytes();
    let mut i = 1;
    while i < b.len() {
        let c = b[i];
        if esc {
            esc = false;
        } else if c == b'\\' {
            esc = true;
        } else if depth == 0 && c == b'#' && b.get(i + 1) == Some(&b'{') {
            depth = 1;
            i += 1;
        } else if depth > 0 && c == b'{' {
            depth += 1;
        } else if depth > 0 && c == b'}' {
            depth -= 1;
        } else if depth == 0 && c == b'"' {
            return true;
        }
        i += 1;
    }
    false
}

/// The text of a "…" value, escapes read; `#{…}` Ruby is kept as written
/// (the mapping reads it: common::ruby_embedded).
fn unescape_double(v: &str) -> String {
    let mut out = String::new();
    let mut chars = v[1..].chars().peekable();
    let mut depth = 0usize;
    while let Some(c) = chars.next() {
        if depth > 0 {
            if c == '{' {
                depth += 1;
            } else if c == '}' {
                depth -= 1;
            }
            out.push(c);
            continue;
        }
        match c {
            '\\' => match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('r') => out.push('\r'),
                Some('0') => out.push('\0'),
                Some(o) => out.push(o),
                None => {}
            },
            '#' if chars.peek() == Some(&'{') => {
                out.push('#');
                out.push(chars.next().expect("peeked"));
                depth = 1;
            }
            '"' => break,
            c => out.push(c),
        }
    }
    out
}

fn balanced(v: &str) -> bool {
    let mut depth = 0i32;
    let mut in_str = false;
    let mut esc = false;
    for c in v.chars() {
        if in_str {
            if esc {
                esc = false;
            } else if c == '\\' {
                esc = true;
            } else if c == '"' {
                in_str = false;
            }
            continue;
        }
        match c {
            '"' => in_str = true,
            '[' | '{' => depth += 1,
            ']' | '}' => depth -= 1,
            _ => {}
        }
    }
    depth <= 0
}
