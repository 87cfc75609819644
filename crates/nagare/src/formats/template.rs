//! Text templates of output options (Loki labels, Splunk's index, source,
//! sourcetype and host): literal text with `${tag}`, `${tag_parts[N]}`,
//! `${hostname}` and `${record.a.b}` (a record field, nested keys after
//! dots), the placeholders of the `modify` filter. A field is written as
//! `value_text` reads it: a string as its text, nil as "", anything else
//! as JSON; a missing field as "".

use nagare_core::record::{value_text, FieldPath};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Tag,
    TagIndex(usize),
    Hostname,
    Field(FieldPath),
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

impl Template {
    /// Reads a template; the error names what is wrong in the user's terms.
    pub fn parse(s: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut rest = s;
        while let Some(at) = rest.find("${") {
            if at > 0 {
                parts.push(Part::Text(rest[..at].to_string()));
            }
            let inner = &rest[at + 2..];
            let end = inner
                .find('}')
                .ok_or_else(|| format!("{s:?}: `${{` without a closing `}}`"))?;
            let name = &inner[..end];
            parts.push(match name {
                "tag" => Part::Tag,
                "hostname" => Part::Hostname,
                _ => {
                    if let Some(n) = name
                        .strip_prefix("tag_parts[")
                        .and_then(|n| n.strip_suffix(']'))
                    {
                        Part::TagIndex(n.parse().map_err(|_| {
                            format!("{s:?}: `${{{name}}}`: write tag_parts[N] with a number N")
                        })?)
                    } else if let Some(path) = name.strip_prefix("record.") {
                        Part::Field(
                            FieldPath::parse(&format!("$.{path}"))
                                .map_err(|e| format!("{s:?}: {e}"))?,
                        )
                    } else {
                        return Err(format!(
                            "{s:?}: `${{{name}}}` is not a placeholder: write ${{tag}}, ${{tag_parts[N]}}, ${{hostname}} or ${{record.FIELD}}"
                        ));
                    }
                }
            });
            rest = &inner[end + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_string()));
        }
        // The host name is read once: it does not change under a running daemon.
        let host = gethostname::gethostname().to_string_lossy().into_owned();
        for p in &mut parts {
            if *p == Part::Hostname {
                *p = Part::Text(host.clone());
            }
        }
        Ok(Template { parts })
    }

    /// Whether the template reads record fields (so its text may differ
    /// between the events of one chunk).
    pub fn reads_record(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, Part::Field(_)))
    }

    /// The top-level record keys the template reads.
    pub fn top_level_keys(&self) -> impl Iterator<Item = &[u8]> {
        self.parts.iter().filter_map(|p| match p {
            Part::Field(f) => Some(f.keys[0].as_slice()),
            _ => None,
        })
    }

    /// Appends the template's text for an event of `tag` with `record`.
    pub fn render(&self, tag: &str, record: &[u8], scratch: &mut Vec<u8>, out: &mut Vec<u8>) {
        for p in &self.parts {
            match p {
                Part::Text(t) => out.extend_from_slice(t.as_bytes()),
                Part::Tag => out.extend_from_slice(tag.as_bytes()),
                Part::TagIndex(n) => {
                    if let Some(t) = tag.split('.').nth(*n) {
                        out.extend_from_slice(t.as_bytes())
                    }
                }
                Part::Hostname => {}
                Part::Field(f) => {
                    if let Some((a, b)) = f.find(record) {
                        out.extend_from_slice(value_text(&record[a..b], scratch));
                    }
                }
            }
        }
    }

    /// The text as a String (invalid UTF-8 replaced).
    pub fn render_string(&self, tag: &str, record: &[u8]) -> String {
        let (mut scratch, mut out) = (Vec::new(), Vec::new());
        self.render(tag, record, &mut scratch, &mut out);
        match String::from_utf8(out) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(v: serde_json::Value) -> Vec<u8> {
        let mut out = Vec::new();
        nagare_core::json::msgpack_from_json(&v, &mut out);
        out
    }

    #[test]
    fn templates_render_tag_parts_and_fields() {
        let r = rec(serde_json::json!({"level": "warn", "n": 5, "k": {"a": "x"}, "z": null}));
        let t = Template::parse("${tag}/${tag_parts[1]}-${record.level}:${record.n}:${record.k.a}${record.z}${record.none}").unwrap();
        assert_eq!(t.render_string("app.web", &r), "app.web/web-warn:5:x");
        assert!(t.reads_record());
        assert_eq!(
            t.top_level_keys().collect::<Vec<_>>(),
            vec![&b"level"[..], b"n", b"k", b"z", b"none"]
        );
        let fixed = Template::parse("prod").unwrap();
        assert!(!fixed.reads_record());
        assert_eq!(fixed.render_string("x", &r), "prod");
        assert!(Template::parse("${nope}")
            .unwrap_err()
            .contains("not a placeholder"));
        assert!(Template::parse("${tag").unwrap_err().contains("closing"));
    }
}
