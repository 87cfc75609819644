//! Fluentd's tag match patterns: `*` matches one tag part, `**` zero or
//! more parts (`a.**` matches `a` and `a.b.c`), `{x,y}` either
//! alternative; a `match` string holds several patterns separated by spaces.

use regex::Regex;

/// One tag pattern.
#[derive(Debug, Clone)]
pub struct Pattern {
    re: Regex,
}

impl Pattern {
    pub fn parse(p: &str) -> Result<Pattern, String> {
        // (?s): `**` matches any character, newlines included (a tail tag
        // made from a file name may hold one).
        let mut re = String::from("(?s)^");
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

/// Part `n` of the dotted tag (negative: from the end); "" past either end.
pub fn tag_part(tag: &str, n: i64) -> &str {
    let count = tag.split('.').count() as i64;
    let i = if n < 0 { count + n } else { n };
    if i < 0 {
        return "";
    }
    tag.split('.').nth(i as usize).unwrap_or("")
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
        // Tags from file names with a tab or a newline in them.
        assert!(m("app.**", "app.logs.tab\tand\nnewline.log"));
        assert!(m("app.*.log", "app.new\nline.log"));
    }
}
