//! Tag templates: `$1`…`$9`, `${tag}`, `${tag_parts[N]}` and text, as
//! rewrite_tag's `tag` and throttle's `excess_tag` write them.

use regex_automata::util::captures::Captures;

/// A piece of a tag template.
pub(crate) enum Part {
    Text(String),
    Capture(usize),
    Tag,
    TagIndex(i64),
}

/// Writes the tag `parts` make into `out`; `caps` are a match's groups in
/// the text searched.
pub(crate) fn render(
    parts: &[Part],
    tag: &str,
    caps: Option<(&Captures, &[u8])>,
    out: &mut String,
) {
    out.clear();
    for p in parts {
        match p {
            Part::Text(t) => out.push_str(t),
            Part::Tag => out.push_str(tag),
            Part::TagIndex(n) => out.push_str(nagare_core::pattern::tag_part(tag, *n)),
            Part::Capture(n) => {
                if let Some((c, text)) = caps {
                    if let Some(span) = c.get_group(*n) {
                        out.push_str(&String::from_utf8_lossy(&text[span.range()]));
                    }
                }
            }
        }
    }
}

/// Reads a tag template: `$1`…`$9`, `${tag}`, `${tag_parts[N]}`, text.
pub(crate) fn tag_template(s: &str) -> Result<Vec<Part>, String> {
    let mut parts = Vec::new();
    let mut text = String::new();
    let mut rest = s;
    while let Some(at) = rest.find('$') {
        text.push_str(&rest[..at]);
        rest = &rest[at..];
        let b = rest.as_bytes();
        let part = if b.get(1).is_some_and(|c| c.is_ascii_digit()) {
            let n = (b[1] - b'0') as usize;
            if n == 0 {
                return Err("$0 is not a capture group (they start at $1)".into());
            }
            rest = &rest[2..];
            Part::Capture(n)
        } else if b.get(1) == Some(&b'{') {
            let Some(end) = rest.find('}') else {
                return Err(format!("{s:?}: `${{` without a closing `}}`"));
            };
            let name = &rest[2..end];
            rest = &rest[end + 1..];
            if name == "tag" {
                Part::Tag
            } else if let Some(n) = name
                .strip_prefix("tag_parts[")
                .and_then(|r| r.strip_suffix(']'))
            {
                Part::TagIndex(
                    n.parse()
                        .map_err(|_| format!("`${{{name}}}`: the index must be an integer"))?,
                )
            } else {
                return Err(format!(
                    "unknown template variable `${{{name}}}` (known: $1…$9, ${{tag}}, ${{tag_parts[N]}})"
                ));
            }
        } else {
            text.push('$');
            rest = &rest[1..];
            continue;
        };
        if !text.is_empty() {
            parts.push(Part::Text(std::mem::take(&mut text)));
        }
        parts.push(part);
    }
    text.push_str(rest);
    if !text.is_empty() {
        parts.push(Part::Text(text));
    }
    Ok(parts)
}
