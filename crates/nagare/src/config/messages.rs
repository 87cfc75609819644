//! serde's error messages in the user's terms: "unknown field" becomes an
//! unknown key with the closest known one, Rust type names become what to
//! write with an example.

/// The closest of `known` to `word`, when it is close enough to be a typo.
pub fn closest<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    known
        .into_iter()
        .map(|k| (strsim::jaro_winkler(word, k), k))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

/// " Did you mean `x`?" or "".
pub fn did_you_mean<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    closest(word, known).map_or_else(String::new, |k| format!(" Did you mean `{k}`?"))
}

/// The names between backquotes after `after` in a serde message.
fn quoted_list(msg: &str, after: &str) -> Vec<String> {
    let Some(i) = msg.find(after) else {
        return Vec::new();
    };
    msg[i + after.len()..]
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

fn first_quoted(msg: &str) -> Option<&str> {
    msg.split('`').nth(1)
}

/// A serde/TOML message about the value or key at `key` in user's terms.
pub fn explain(message: &str) -> String {
    let msg = message.trim().replace('\n', " ");
    if let Some(rest) = msg.strip_prefix("unknown field `") {
        let key = rest.split('`').next().unwrap_or("");
        let known = quoted_list(&msg, "expected");
        if msg.contains("there are no fields") {
            return format!("unknown key `{key}`: this section takes no options of its own");
        }
        let hint = did_you_mean(key, known.iter().map(String::as_str));
        return format!(
            "unknown key `{key}`.{hint} Known keys: {}",
            known.join(", ")
        );
    }
    if let Some(rest) = msg.strip_prefix("missing field `") {
        let key = rest.split('`').next().unwrap_or("");
        return format!("`{key}` is required");
    }
    if msg.starts_with("unknown variant `") {
        let value = first_quoted(&msg).unwrap_or("");
        let known = quoted_list(&msg, "expected");
        let hint = closest(value, known.iter().map(String::as_str))
            .map_or_else(String::new, |k| format!(" Did you mean \"{k}\"?"));
        let list: Vec<String> = known.iter().map(|k| format!("\"{k}\"")).collect();
        return format!(
            "unknown value \"{value}\".{hint} Expected one of: {}",
            list.join(", ")
        );
    }
    if let Some(rest) = msg.strip_prefix("invalid type: ") {
        if let Some((found, expected)) = rest.split_once(", expected ") {
            return format!("expected {}, found {}", expected_in_words(expected), found);
        }
    }
    if let Some(rest) = msg.strip_prefix("invalid value: ") {
        if let Some((found, expected)) = rest.split_once(", expected ") {
            return format!("expected {}, found {}", expected_in_words(expected), found);
        }
    }
    msg
}

/// serde's "expected u32" as what to write.
fn expected_in_words(expected: &str) -> String {
    let e = expected.trim();
    match e {
        "u8" | "u16" | "u32" | "u64" | "usize" => "a whole number such as 2 (no quotes)".into(),
        "i8" | "i16" | "i32" | "i64" | "isize" => "a whole number such as 2 (no quotes)".into(),
        "f32" | "f64" => "a number such as 0.5 (no quotes)".into(),
        "a boolean" => "true or false (no quotes)".into(),
        "a string" => "a string in quotes".into(),
        "a sequence" => "a list such as [\"a\", \"b\"]".into(),
        "a map" => "a table".into(),
        _ if e.starts_with("struct ") => "a table".into(),
        _ if e.starts_with("a string") || e.starts_with("a ") || e.starts_with("an ") => {
            e.to_string()
        }
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_in_users_terms() {
        let m = explain(
            "unknown field `flush_intervl`, expected one of `type`, `path`, `flush_interval`",
        );
        assert!(
            m.starts_with("unknown key `flush_intervl`. Did you mean `flush_interval`?"),
            "{m}"
        );
        assert_eq!(
            explain("invalid type: string \"2\", expected u32"),
            "expected a whole number such as 2 (no quotes), found string \"2\""
        );
        assert_eq!(explain("missing field `path`"), "`path` is required");
        let m = explain("unknown variant `jsn`, expected one of `none`, `json`");
        assert!(m.contains("Did you mean \"json\"?"), "{m}");
    }
}
