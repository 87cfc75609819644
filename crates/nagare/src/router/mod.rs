//! Tag routing: Fluentd's match patterns and a per-tag route cache.
//!
//! Patterns: `*` matches one tag part, `**` zero or more parts (`a.**` matches
//! `a` and `a.b.c`), `{x,y}` either alternative; a `match` string holds
//! several patterns separated by spaces. An event goes to the first output
//! whose pattern matches (a `copy` output fans out inside itself).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use regex::Regex;

use crate::outputs::OutputHandle;

#[derive(Debug, Clone)]
pub struct Pattern {
    re: Regex,
}

impl Pattern {
    pub fn parse(p: &str) -> Result<Pattern, String> {
        let mut re = String::from("^");
        let chars: Vec<char> = p.chars().collect();
        let mut i = 0;
        let mut depth = 0usize;
        while i < chars.len() {
            let c = chars[i];
            match c {
                '*' if chars.get(i + 1) == Some(&'*') => {
                    let dot_after = chars.get(i + 2) == Some(&'.');
                    let dot_before = re.ends_with("\\.");
                    if dot_before && !dot_after {
                        // "a.**": the dot and the rest are optional
                        re.truncate(re.len() - 2);
                        re.push_str("(?:\\..*)?");
                        i += 2;
                    } else if dot_after {
                        // "**.b": any prefix ending in a dot, or none
                        re.push_str("(?:.*\\.)?");
                        i += 3;
                    } else {
                        re.push_str(".*");
                        i += 2;
                    }
                    continue;
                }
                '*' => re.push_str("[^.]*"),
                '{' => {
                    depth += 1;
                    re.push_str("(?:");
                }
                '}' if depth > 0 => {
                    depth -= 1;
                    re.push(')');
                }
                ',' if depth > 0 => re.push('|'),
                c => re.push_str(&regex::escape(&c.to_string())),
            }
            i += 1;
        }
        if depth != 0 {
            return Err(format!("unbalanced braces in tag pattern {p:?}"));
        }
        re.push('$');
        Regex::new(&re)
            .map(|re| Pattern { re })
            .map_err(|e| format!("bad tag pattern {p:?}: {e}"))
    }

    /// Parses a space-separated list of patterns.
    pub fn parse_list(s: &str) -> Result<Vec<Pattern>, String> {
        let v: Result<Vec<_>, _> = s.split_whitespace().map(Pattern::parse).collect();
        let v = v?;
        if v.is_empty() {
            return Err("empty match".into());
        }
        Ok(v)
    }

    pub fn matches(&self, tag: &str) -> bool {
        self.re.is_match(tag)
    }
}

/// Where a tag's events go: the outputs to append to (more than one for copy).
pub type Route = Arc<[OutputHandle]>;

pub struct Router {
    rules: Vec<(Vec<Pattern>, Route)>,
    cache: RwLock<HashMap<Arc<str>, Route>>,
    unmatched: Route,
}

/// Bound on distinct cached tags, so a peer inventing tags cannot grow memory.
const CACHE_LIMIT: usize = 65_536;

impl Router {
    pub fn new(rules: Vec<(Vec<Pattern>, Route)>) -> Router {
        Router {
            rules,
            cache: RwLock::new(HashMap::new()),
            unmatched: Arc::from(Vec::new()),
        }
    }

    /// The route for `tag`: cached after the first lookup.
    pub fn route(&self, tag: &str) -> Route {
        if let Some(r) = self.cache.read().expect("route cache").get(tag) {
            return r.clone();
        }
        let route = self
            .rules
            .iter()
            .find(|(ps, _)| ps.iter().any(|p| p.matches(tag)))
            .map(|(_, r)| r.clone())
            .unwrap_or_else(|| self.unmatched.clone());
        let mut cache = self.cache.write().expect("route cache");
        if cache.len() >= CACHE_LIMIT {
            cache.clear();
        }
        cache.insert(Arc::from(tag), route.clone());
        route
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, tag: &str) -> bool {
        Pattern::parse_list(p)
            .unwrap()
            .iter()
            .any(|x| x.matches(tag))
    }

    #[test]
    fn fluentd_patterns() {
        assert!(m("a.*", "a.b"));
        assert!(!m("a.*", "a.b.c"));
        assert!(!m("a.*", "a"));
        assert!(m("a.**", "a"));
        assert!(m("a.**", "a.b.c"));
        assert!(!m("a.**", "ab"));
        assert!(m("**", "anything.at.all"));
        assert!(m("**.z", "z"));
        assert!(m("**.z", "x.y.z"));
        assert!(!m("**.z", "xz"));
        assert!(m("a.**.z", "a.z"));
        assert!(m("a.**.z", "a.b.c.z"));
        assert!(m("{web,db}.log", "db.log"));
        assert!(!m("{web,db}.log", "app.log"));
        assert!(m("x.* y.**", "y.q.r"));
        assert!(m("a.{b,c.*}", "a.c.d"));
        assert!(Pattern::parse("a.{b").is_err());
    }
}
