//! What both peers' mappings share: the notes being collected, and the
//! conversions of values (regular expressions, sizes, durations, booleans,
//! record accessors, match patterns) from the peers' spellings to nagare's.

use std::collections::HashSet;

use super::emit::Table;
use super::{Note, NoteKind};

/// The notes of one conversion.
#[derive(Default)]
pub struct Notes {
    pub list: Vec<Note>,
}

impl Notes {
    pub fn approx(
        &mut self,
        file: &str,
        line: usize,
        what: impl Into<String>,
        why: impl Into<String>,
    ) {
        self.push(NoteKind::Approximate, file, line, what.into(), why.into());
    }

    pub fn unmapped(
        &mut self,
        file: &str,
        line: usize,
        what: impl Into<String>,
        why: impl Into<String>,
    ) {
        self.push(NoteKind::Unmapped, file, line, what.into(), why.into());
    }

    fn push(&mut self, kind: NoteKind, file: &str, line: usize, what: String, why: String) {
        self.list.push(Note {
            kind,
            file: file.to_string(),
            line,
            what,
            why,
        });
    }

    /// Puts an unmapped note above `table` as a comment too.
    pub fn unmapped_on(
        &mut self,
        table: &mut Table,
        file: &str,
        line: usize,
        what: impl Into<String>,
        why: impl Into<String>,
    ) {
        let (what, why) = (what.into(), why.into());
        table
            .comments
            .push(format!("not converted: {file}:{line}: {what}: {why}"));
        self.unmapped(file, line, what, why);
    }
}

/// A peer's regular expression as nagare's (Rust regex syntax): `/…/flags`
/// unwrapped (Ruby's and Onigmo's `m` is `s` here: `.` matches newlines;
/// `i` and `x` as they are), `\h` as a hex class, `\Z` as `\z`. Err with the
/// reason when the result is not a valid expression (look-around, back
/// references, possessive quantifiers).
pub fn regex(peer: &str) -> Result<String, String> {
    let t = peer.trim();
    let (body, flags) = if t.len() >= 2 && t.starts_with('/') {
        match t.rfind('/') {
            Some(end) if end > 0 => (&t[1..end], &t[end + 1..]),
            _ => (t, ""),
        }
    } else {
        (t, "")
    };
    let mut f = String::new();
    for c in flags.chars() {
        match c {
            'i' => f.push('i'),
            'm' => f.push('s'),
            'x' => f.push('x'),
            other => {
                return Err(format!(
                    "regular expression flag `{other}` has no equivalent"
                ))
            }
        }
    }
    let mut out = String::new();
    if !f.is_empty() {
        out.push_str(&format!("(?{f})"));
    }
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('h') => out.push_str("[0-9a-fA-F]"),
                Some('H') => out.push_str("[^0-9a-fA-F]"),
                Some('Z') => out.push_str(r"\n?\z"),
                Some('/') => out.push('/'),
                Some(o) => {
                    out.push('\\');
                    out.push(o);
                }
                None => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    match regex::Regex::new(&out) {
        Ok(_) => Ok(out),
        Err(e) => Err(format!(
            "the expression is not valid in nagare's regex syntax (no look-around or back references): {}",
            e.to_string().lines().last().unwrap_or("")
        )),
    }
}

/// A size: Fluentd's and Fluent Bit's `k`/`m`/`g` suffixes are powers of
/// 1024 (`8m`, `8M`, `8MB` are 8 MiB in both); a plain number is bytes.
pub fn size(peer: &str) -> Option<String> {
    let t = peer.trim();
    let digits = t
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .count();
    let (num, unit) = t.split_at(digits);
    if num.is_empty() {
        return None;
    }
    let unit = unit.trim().to_ascii_lowercase();
    let unit = unit.trim_end_matches('b').trim_end_matches('i');
    let suffix = match unit {
        "" => return num.parse::<u64>().ok().map(|n| n.to_string()),
        "k" => "KiB",
        "m" => "MiB",
        "g" => "GiB",
        "t" => "TiB",
        _ => return None,
    };
    if num.contains('.') {
        let f: f64 = num.parse().ok()?;
        let bytes = f * match suffix {
            "KiB" => 1024.0,
            "MiB" => 1048576.0,
            "GiB" => 1073741824.0,
            _ => 1099511627776.0,
        };
        return Some(format!("{}", bytes as u64));
    }
    Some(format!("{num}{suffix}"))
}

/// A duration: `10s`, `5m`, `1h`, `1d`, or a number of seconds (Fluentd's
/// time type and Fluent Bit's intervals).
pub fn duration(peer: &str) -> Option<String> {
    let t = peer.trim();
    if t.is_empty() {
        return None;
    }
    let digits = t
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .count();
    let (num, unit) = t.split_at(digits);
    if num.is_empty() {
        return None;
    }
    let unit = unit.trim();
    let ms = |secs: f64| -> String {
        let ms = (secs * 1000.0).round() as u64;
        if ms.is_multiple_of(1000) {
            format!("{}s", ms / 1000)
        } else {
            format!("{ms}ms")
        }
    };
    let n: f64 = num.parse().ok()?;
    Some(match unit {
        "" | "s" => ms(n),
        "ms" => format!("{}ms", n as u64),
        "m" => ms(n * 60.0),
        "h" => ms(n * 3600.0),
        "d" => ms(n * 86400.0),
        _ => return None,
    })
}

/// A boolean as the peers write it: true/false, on/off, yes/no, 1/0.
pub fn boolean(peer: &str) -> Option<bool> {
    match peer.trim().to_ascii_lowercase().as_str() {
        "true" | "on" | "yes" | "1" => Some(true),
        "false" | "off" | "no" | "0" => Some(false),
        _ => None,
    }
}

/// A record accessor (`$.a.b`, `$['a']['b']`, `$a['b']` of Fluent Bit,
/// `$.a[0]`) as nagare's field path (`name` or `$.a.b`); None for what
/// nagare's paths cannot say (array indexes).
pub fn field(peer: &str) -> Option<String> {
    let t = peer.trim();
    if !t.starts_with('$') {
        return Some(t.to_string());
    }
    // Split into parts: names after dots, and bracketed quoted names.
    let mut parts: Vec<String> = Vec::new();
    let body = t.trim_start_matches('$');
    let mut cur = String::new();
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '.' => {
                if !cur.is_empty() {
                    parts.push(std::mem::take(&mut cur));
                }
            }
            '[' => {
                if !cur.is_empty() {
                    parts.push(std::mem::take(&mut cur));
                }
                let q = chars.next()?;
                if q != '\'' && q != '"' {
                    return None; // an array index
                }
                let mut name = String::new();
                for c in chars.by_ref() {
                    if c == q {
                        break;
                    }
                    name.push(c);
                }
                if chars.next() != Some(']') {
                    return None;
                }
                parts.push(name);
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        parts.push(cur);
    }
    match parts.len() {
        0 => None,
        1 if !parts[0].contains('.') => Some(parts.remove(0)),
        _ if parts.iter().any(|p| p.contains('.')) => None,
        _ => Some(format!("$.{}", parts.join("."))),
    }
}

/// Fluent Bit's tag patterns as nagare's: a whole `*` part matches any
/// number of parts there (`app.*` matches `app.a.b`), so it is `**`.
/// Returns the pattern and whether it is only close (a `*` inside a part).
pub fn fluent_bit_match(peer: &str) -> (String, bool) {
    let mut approx = false;
    let parts: Vec<String> = peer
        .split('.')
        .map(|p| {
            if p == "*" {
                "**".to_string()
            } else {
                if p.contains('*') {
                    approx = true;
                }
                p.to_string()
            }
        })
        .collect();
    (parts.join("."), approx)
}

/// A peer's time format for nagare: None for an ISO 8601 format ending in
/// `%z` (Ruby's and Fluent Bit's `%z` also read `Z` and `+01:00`; nagare
/// reads RFC 3339 times, whatever their offset's spelling, without a format).
pub fn time_format(peer: &str) -> Option<String> {
    static ISO: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"^%Y-%m-%dT%H:%M:%S(\.%[LN3-9]N?|\.%L|\.%N|\.%[0-9]*N|%\.[0-9]*f)?%:?z$")
            .expect("static regex")
    });
    if ISO.is_match(peer.trim()) {
        None
    } else {
        Some(peer.to_string())
    }
}

/// Keys (lower-cased) that were used; the rest of a section are reported.
#[derive(Default)]
pub struct Used(HashSet<String>);

impl Used {
    pub fn mark(&mut self, key: &str) {
        self.0.insert(key.to_ascii_lowercase());
    }

    pub fn has(&self, key: &str) -> bool {
        self.0.contains(&key.to_ascii_lowercase())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regexes_sizes_durations_fields() {
        assert_eq!(regex("/^(error|fatal)$/i").unwrap(), "(?i)^(error|fatal)$");
        assert_eq!(regex(r"/^a.b\h/m").unwrap(), "(?s)^a.b[0-9a-fA-F]");
        assert_eq!(regex(r"^\/(healthz)$").unwrap(), "^/(healthz)$");
        assert!(regex("(?<=a)b").is_err());
        assert_eq!(size("8m").as_deref(), Some("8MiB"));
        assert_eq!(size("10MB").as_deref(), Some("10MiB"));
        assert_eq!(size("512").as_deref(), Some("512"));
        assert_eq!(duration("1s").as_deref(), Some("1s"));
        assert_eq!(duration("10").as_deref(), Some("10s"));
        assert_eq!(duration("0.5").as_deref(), Some("500ms"));
        assert_eq!(duration("1d").as_deref(), Some("86400s"));
        assert_eq!(field("$.http.status").as_deref(), Some("$.http.status"));
        assert_eq!(field("$http['status']").as_deref(), Some("$.http.status"));
        assert_eq!(field("$level").as_deref(), Some("level"));
        assert_eq!(field("$['a']['b']").as_deref(), Some("$.a.b"));
        assert_eq!(field("$.a[0]"), None);
        assert_eq!(time_format("%Y-%m-%dT%H:%M:%S.%N%z"), None);
        assert_eq!(time_format("%Y-%m-%dT%H:%M:%S.%L%z"), None);
        assert_eq!(
            time_format("%d/%b/%Y:%H:%M:%S %z").as_deref(),
            Some("%d/%b/%Y:%H:%M:%S %z")
        );
        assert_eq!(fluent_bit_match("app.*"), ("app.**".to_string(), false));
        assert_eq!(fluent_bit_match("kube.a*"), ("kube.a*".to_string(), true));
    }
}
