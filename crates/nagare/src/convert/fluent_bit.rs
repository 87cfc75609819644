//! Fluent Bit's classic config: `[SECTION]` headers, indented `Key Value`
//! entries (a key may repeat: `Rename`, `Rule`, `Add`), `#` comments,
//! `@INCLUDE` of files and globs, `@SET name=value` and `${name}` (from
//! `@SET`, else the environment), and the `Parsers_File` of `[SERVICE]`
//! read for its `[PARSER]` and `[MULTILINE_PARSER]` sections.

use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;

use super::fluentd::include_paths;
use super::ConvertError;

/// One `Key Value` entry.
#[derive(Debug, Clone)]
pub struct Entry {
    pub key: String,
    pub value: String,
    pub file: Rc<str>,
    pub line: usize,
}

/// A section: its name upper-cased (`INPUT`, `PARSER`, …) and entries in order.
#[derive(Debug, Clone)]
pub struct Section {
    pub name: String,
    pub entries: Vec<Entry>,
    pub file: Rc<str>,
    pub line: usize,
}

impl Section {
    /// The first value of `key` (keys compare without case, as Fluent Bit's).
    pub fn get(&self, key: &str) -> Option<&Entry> {
        self.entries
            .iter()
            .find(|e| e.key.eq_ignore_ascii_case(key))
    }

    pub fn value(&self, key: &str) -> Option<&str> {
        self.get(key).map(|e| e.value.as_str())
    }

    /// Every value of a repeated key, in order.
    pub fn all<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a Entry> + 'a {
        self.entries
            .iter()
            .filter(move |e| e.key.eq_ignore_ascii_case(key))
    }
}

/// A whole config: the sections of every file, in order, and the variables.
#[derive(Debug, Default)]
pub struct Config {
    pub sections: Vec<Section>,
    /// `${name}` references left for the environment at run time, or
    /// ones that no `@SET` and no upper-case name can give: (file, line, name).
    pub unknown_vars: Vec<(String, usize, String)>,
}

pub fn parse_file(path: &Path) -> Result<Config, ConvertError> {
    let mut cfg = Config::default();
    let mut vars = HashMap::new();
    parse_into(path, &mut cfg, &mut vars, 0)?;
    read_parsers_files(path, &mut cfg, &mut vars)?;
    Ok(cfg)
}

/// Reads the `Parsers_File`s named in `[SERVICE]` (relative to `path`'s folder).
pub fn read_parsers_files(
    path: &Path,
    cfg: &mut Config,
    vars: &mut HashMap<String, String>,
) -> Result<(), ConvertError> {
    let files: Vec<(String, Rc<str>, usize)> = cfg
        .sections
        .iter()
        .filter(|s| s.name == "SERVICE")
        .flat_map(|s| {
            s.all("parsers_file")
                .map(|e| (e.value.clone(), e.file.clone(), e.line))
        })
        .collect();
    for (f, file, line) in files {
        for p in include_paths(path, &f, &file, line)? {
            parse_into(&p, cfg, vars, 1)?;
        }
    }
    Ok(())
}

fn parse_into(
    path: &Path,
    cfg: &mut Config,
    vars: &mut HashMap<String, String>,
    depth: usize,
) -> Result<(), ConvertError> {
    let file: Rc<str> = path.display().to_string().into();
    if depth > 16 {
        return Err(ConvertError {
            file: file.to_string(),
            line: 0,
            message: "@INCLUDE nested more than 16 deep (an include loop?)".into(),
        });
    }
    let text = std::fs::read_to_string(path).map_err(|e| ConvertError {
        file: file.to_string(),
        line: 0,
        message: format!("cannot read the file: {e}"),
    })?;
    for (i, raw) in text.lines().enumerate() {
        let lineno = i + 1;
        let t = raw.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let err = |message: String| ConvertError {
            file: file.to_string(),
            line: lineno,
            message,
        };
        if let Some(rest) = t.strip_prefix("@INCLUDE") {
            for p in include_paths(path, rest.trim(), &file, lineno)? {
                if !p.exists() {
                    return Err(err(format!(
                        "@INCLUDE {}: {} does not exist",
                        rest.trim(),
                        p.display()
                    )));
                }
                parse_into(&p, cfg, vars, depth + 1)?;
            }
            continue;
        }
        if let Some(rest) = t.strip_prefix("@SET") {
            let Some((k, v)) = rest.trim().split_once('=') else {
                return Err(err(format!("`{t}`: @SET takes name=value")));
            };
            vars.insert(k.trim().to_string(), v.trim().to_string());
            continue;
        }
        if t.starts_with('[') {
            let Some(end) = t.find(']') else {
                return Err(err(format!("`{t}`: a section header must end with ]")));
            };
            cfg.sections.push(Section {
                name: t[1..end].trim().to_ascii_uppercase(),
                entries: Vec::new(),
                file: file.clone(),
                line: lineno,
            });
            continue;
        }
        let Some(section) = cfg.sections.last_mut() else {
            return Err(err(format!("`{t}`: an entry before any [SECTION]")));
        };
        let (k, v) = match t.split_once(char::is_whitespace) {
            Some((k, v)) => (k, v.trim()),
            None => (t, ""),
        };
        let value = substitute(v, vars, &mut cfg.unknown_vars, &file, lineno);
        section.entries.push(Entry {
            key: k.to_string(),
            value,
            file: file.clone(),
            line: lineno,
        });
    }
    Ok(())
}

/// `${name}`: the `@SET` value; an upper-case name not set is left for
/// nagare to read from the environment when it loads the config (nagare's
/// `${NAME}`); other names are recorded as unknown.
pub fn substitute(
    v: &str,
    vars: &HashMap<String, String>,
    unknown: &mut Vec<(String, usize, String)>,
    file: &str,
    line: usize,
) -> String {
    if !v.contains("${") {
        return v.to_string();
    }
    let mut out = String::new();
    let mut rest = v;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return out;
        };
        let name = &after[..end];
        if let Some(val) = vars.get(name) {
            out.push_str(val);
        } else {
            // Left as ${NAME}: nagare reads it from the environment at load.
            out.push_str(&format!("${{{name}}}"));
            if name.chars().any(|c| c.is_ascii_lowercase()) {
                unknown.push((file.to_string(), line, name.to_string()));
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}
