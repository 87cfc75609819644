//! The option tables of docs/configuration.md, generated from the plugins'
//! options structs (their doc comments, types and defaults), so code and docs
//! cannot drift: a test fails when the file differs from what this renders.

use nagare_core::plugin::{type_list, Registration};
use schemars::JsonSchema;
use serde_json::Value;

use crate::buffer::BufferConfig;
use crate::config::{MonitorConfig, SystemConfig};
use crate::parsers::options as parser;
use crate::{filters, inputs, outputs};

pub const BEGIN: &str =
    "<!-- BEGIN GENERATED: option tables (cargo test regenerates with NAGARE_UPDATE_DOCS=1) -->";
pub const END: &str = "<!-- END GENERATED -->";

/// Keys every parser type takes; documented once.
const PARSER_COMMON: [&str; 5] = [
    "message_key",
    "time_key",
    "time_format",
    "keep_time_key",
    "types",
];

/// (heading, intro, table), in the order of the reference.
fn sections() -> Vec<(String, String, String)> {
    let mut s: Vec<(String, String, String)> = vec![
        (
            "`[system]`".into(),
            "Process-wide settings.".into(),
            table::<SystemConfig>(&[]),
        ),
        (
            "`[monitor]`".into(),
            "The HTTP monitor (off when the section is absent).".into(),
            table::<MonitorConfig>(&[]),
        ),
    ];
    s.push((
        "`[[input]]` (every type)".into(),
        "Keys every input takes besides its own.".into(),
        rows(&[
            ("type", "string", "required", &format!("The input type: {}.", type_list(inputs::REGISTRY))),
            ("label", "string", "none", "The input's events go only to the filters and outputs with this `label` (Fluentd's `@label`); without it, only to those without a label. See [Labels](#labels)."),
        ]),
    ));
    plugin_sections(&mut s, "input", inputs::REGISTRY);
    s.extend(parser_sections());
    s.push((
        "`[[filter]]` (every type)".into(),
        "Keys every filter takes besides its own.".into(),
        rows(&[
            ("type", "string", "required", &format!("The filter type: {}.", type_list(filters::REGISTRY))),
            ("match", "string", "`\"**\"`", "Tag patterns separated by spaces, as for outputs. Filters apply in file order, each to the events whose tag it matches."),
            ("label", "string", "none", "The filter sees only the events of inputs with this `label` (or, for the `[system] error_label`, the events filters failed on); without it, only unlabelled events."),
        ]),
    ));
    plugin_sections(&mut s, "filter", filters::REGISTRY);
    s.push((
        "`[[output]]` (every type)".into(),
        "Keys every output takes besides its own.".into(),
        rows(&[
            ("type", "string", "required", &format!("The output type: {}.", type_list(outputs::REGISTRY))),
            ("match", "string", "required", "Tag patterns separated by spaces: `*` one part, `**` any parts (also none), `{a,b}` either. The first output that matches an event's tag gets it."),
            ("label", "string", "none", "The output gets only the events of inputs with this `label` (or, for the `[system] error_label`, the events filters failed on); without it, only unlabelled events."),
            ("buffer", "table", "memory buffer", "`[output.buffer]`, see below."),
            ("secondary", "table", "none", "`[output.secondary]`: an output (with `type` and its options, no `match`) that receives chunks whose retries ran out, and at once those the output refused for good (a permanent error)."),
        ]),
    ));
    s.push((
        "`[output.buffer]`".into(),
        "The buffer in front of an output.".into(),
        table::<BufferConfig>(&[]),
    ));
    plugin_sections(&mut s, "output", outputs::REGISTRY);
    s
}

/// One section per registered plugin, then one per table of options inside
/// it (`[[input.users]]`, `[[output.server]]`); parser tables are documented
/// once, under `[input.parser]`.
fn plugin_sections<B>(
    out: &mut Vec<(String, String, String)>,
    kind: &str,
    registry: &[Registration<B>],
) {
    for r in registry {
        let schema = (r.schema)();
        let root = schema.as_value();
        out.push((
            format!("`[[{kind}]]` `type = \"{}\"`", r.type_name),
            r.doc.to_string(),
            table_of(root, &["parser"]),
        ));
        let defs = root.get("$defs").cloned().unwrap_or(Value::Null);
        for (name, p) in root
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            if name == "parser" {
                continue;
            }
            let p = resolve(p, &defs);
            let (item, brackets) = match p.get("items") {
                Some(i) => (resolve(i, &defs), ("[[", "]]")),
                None => (p.clone(), ("[", "]")),
            };
            if item.get("properties").is_none() {
                continue;
            }
            let heading = format!("`{}{kind}.{name}{}`", brackets.0, brackets.1);
            if out.iter().any(|(h, _, _)| *h == heading) {
                continue;
            }
            let doc = item
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or("")
                .replace('\n', " ");
            let mut sub = item.clone();
            if let (Some(o), Value::Object(_)) = (sub.as_object_mut(), &defs) {
                o.insert("$defs".into(), defs.clone());
            }
            out.push((heading, doc, table_of(&sub, &[])));
        }
    }
}

/// The parser types with their doc comments, read from `ParserType`'s
/// schema, so the names users write are written once (the enum's variants).
fn parser_types() -> Vec<(crate::parsers::ParserType, String, String)> {
    let schema = schemars::schema_for!(crate::parsers::ParserType);
    let variants = schema
        .as_value()
        .get("oneOf")
        .and_then(Value::as_array)
        .expect("ParserType's schema lists its variants");
    variants
        .iter()
        .map(|v| {
            let name = v["const"].as_str().expect("a variant's name").to_string();
            let doc = v["description"].as_str().unwrap_or("").replace('\n', " ");
            let kind = serde_json::from_value(Value::String(name.clone())).expect("a variant");
            (kind, name, doc)
        })
        .collect()
}

/// The options table of a parser type with options of its own.
fn parser_options(kind: crate::parsers::ParserType, skip: &[&str]) -> Option<String> {
    use crate::parsers::ParserType as P;
    Some(match kind {
        P::Regex => table::<parser::RegexOptions>(skip),
        P::Ltsv => table::<parser::LtsvOptions>(skip),
        P::Csv => table::<parser::CsvOptions>(skip),
        P::Tsv => table::<parser::TsvOptions>(skip),
        P::Syslog => table::<parser::SyslogOptions>(skip),
        P::Multiline => table::<parser::MultilineOptions>(skip),
        P::Cri | P::Docker => table::<parser::ContainerOptions>(skip),
        P::None | P::Json | P::Apache2 | P::ApacheError | P::Nginx => return None,
    })
}

fn parser_sections() -> Vec<(String, String, String)> {
    let skip = &PARSER_COMMON;
    let types = parser_types();
    let quoted = |names: &[&String]| {
        let q: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
        match q.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => q.join(""),
        }
    };
    let all: Vec<&String> = types.iter().map(|(_, n, _)| n).collect();
    let mut out = vec![(
        "`[input.parser]`".into(),
        "The parser of a tail, directory or fuse input (and, as `[filter.parser]`, of a parser filter): `type` and the options of that type below, plus these, which every type takes.".into(),
        {
            let doc = format!("The parser type: {}.", quoted(&all));
            let mut s = rows(&[("type", "string", "`\"none\"`", &doc)]);
            let common = table::<parser::NoneOptions>(&[]);
            s.push_str(common.lines().skip(2).map(|l| format!("{l}\n")).collect::<String>().as_str());
            s
        },
    )];
    let mut plain = Vec::new();
    for (kind, name, doc) in &types {
        match parser_options(*kind, skip) {
            Some(t) => out.push((
                format!("`[input.parser]` `type = \"{name}\"`"),
                doc.clone(),
                t,
            )),
            None => plain.push((name, doc)),
        }
    }
    let names: Vec<String> = plain
        .iter()
        .enumerate()
        .map(|(i, (n, _))| match i {
            0 => format!("`type = \"{n}\"`"),
            _ => format!("`\"{n}\"`"),
        })
        .collect();
    let docs: Vec<String> = plain.iter().map(|(n, d)| format!("\"{n}\": {d}")).collect();
    out.push((
        format!("`[input.parser]` {}", names.join(", ")),
        format!(
            "{} These take only the options every type takes.",
            docs.join(" ")
        ),
        table::<parser::JsonOptions>(skip),
    ));
    out
}

fn rows(rows: &[(&str, &str, &str, &str)]) -> String {
    let mut s = header();
    for (k, t, d, doc) in rows {
        s.push_str(&format!("| `{k}` | {t} | {d} | {doc} |\n"));
    }
    s
}

fn header() -> String {
    "| option | type | default | description |\n| --- | --- | --- | --- |\n".into()
}

fn table<T: JsonSchema>(skip: &[&str]) -> String {
    table_of(schemars::schema_for!(T).as_value(), skip)
}

fn table_of(root: &Value, skip: &[&str]) -> String {
    let defs = root.get("$defs").cloned().unwrap_or(Value::Null);
    let required: Vec<&str> = root
        .get("required")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut s = header();
    let Some(props) = root.get("properties").and_then(Value::as_object) else {
        s.push_str("| — | | | no options |\n");
        return s;
    };
    let mut n = 0;
    for (name, p) in props {
        if skip.contains(&name.as_str()) {
            continue;
        }
        n += 1;
        let p = resolve(p, &defs);
        let desc = p
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or("")
            .replace('\n', " ");
        let default = match p.get("default") {
            Some(Value::Null) | None if required.contains(&name.as_str()) => "required".to_string(),
            Some(Value::Null) | None => "none".to_string(),
            Some(v) if v.as_array().is_some_and(|a| a.is_empty()) => "none".to_string(),
            Some(v) => format!("`{}`", v),
        };
        s.push_str(&format!(
            "| `{name}` | {} | {default} | {desc} |\n",
            type_of(&p, &defs)
        ));
    }
    if n == 0 {
        s.push_str("| — | | | only the options every type takes |\n");
    }
    s
}

/// Follows a `$ref` (possibly wrapped in allOf/anyOf with null) to its definition,
/// keeping the field's own description and default.
fn resolve(p: &Value, defs: &Value) -> Value {
    let mut out = p.clone();
    let target = p
        .get("$ref")
        .or_else(|| {
            p.get("anyOf")
                .or_else(|| p.get("allOf"))
                .and_then(Value::as_array)
                .and_then(|a| a.iter().find_map(|x| x.get("$ref")))
        })
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/$defs/"))
        .and_then(|n| defs.get(n));
    if let (Some(t), Some(o)) = (target, out.as_object_mut()) {
        for (k, v) in t.as_object().into_iter().flatten() {
            if k != "description" || !o.contains_key("description") {
                o.entry(k.clone()).or_insert(v.clone());
            }
        }
    }
    out
}

fn type_of(p: &Value, defs: &Value) -> String {
    if let Some(vals) = enum_values(p) {
        return vals.join(" \\| ");
    }
    if let Some(f) = p.get("format").and_then(Value::as_str) {
        if f == "duration" || f == "size" {
            return f.to_string();
        }
    }
    match p.get("type") {
        Some(Value::String(t)) => match t.as_str() {
            "array" => {
                let item = p.get("items").map(|i| resolve(i, defs));
                match item
                    .as_ref()
                    .and_then(|i| i.get("type"))
                    .and_then(Value::as_str)
                {
                    Some("object") => "array of tables".into(),
                    Some(x) => format!("array of {x}"),
                    None => "array".into(),
                }
            }
            "integer" => "integer".into(),
            "object" => "table".into(),
            t => t.into(),
        },
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != "null")
            .map(|t| if t == "object" { "table" } else { t })
            .collect::<Vec<_>>()
            .join(" or "),
        _ => {
            if let Some(a) = p.get("anyOf").and_then(Value::as_array) {
                for x in a {
                    let r = resolve(x, defs);
                    if r.get("type") != Some(&Value::String("null".into())) {
                        return type_of(&r, defs);
                    }
                }
            }
            "value".into()
        }
    }
}

fn enum_values(p: &Value) -> Option<Vec<String>> {
    if let Some(e) = p.get("enum").and_then(Value::as_array) {
        return Some(
            e.iter()
                .filter(|v| !v.is_null())
                .map(|v| format!("`{v}`"))
                .collect(),
        );
    }
    let alts = p.get("oneOf").and_then(Value::as_array)?;
    let mut out = Vec::new();
    for a in alts {
        if let Some(c) = a.get("const") {
            out.push(format!("`{c}`"));
        } else if let Some(e) = a.get("enum").and_then(Value::as_array) {
            out.extend(e.iter().map(|v| format!("`{v}`")));
        } else {
            return None;
        }
    }
    Some(out)
}

/// The generated part of docs/configuration.md.
pub fn render() -> String {
    let mut s = String::new();
    s.push_str(BEGIN);
    s.push('\n');
    for (h, intro, t) in sections() {
        let intro = if intro.is_empty() {
            "—".to_string()
        } else {
            intro
        };
        s.push_str(&format!("\n### {h}\n\n{intro}\n\n{t}"));
    }
    s.push('\n');
    s.push_str(END);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_reference_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/configuration.md");
        let doc = std::fs::read_to_string(path).expect("docs/configuration.md");
        let (Some(a), Some(b)) = (doc.find(BEGIN), doc.find(END)) else {
            panic!("docs/configuration.md lacks the generated-section markers");
        };
        let current = &doc[a..b + END.len()];
        let want = render();
        if current != want {
            if std::env::var_os("NAGARE_UPDATE_DOCS").is_some() {
                let new = format!("{}{}{}", &doc[..a], want, &doc[b + END.len()..]);
                std::fs::write(path, new).expect("write docs");
            } else {
                panic!("docs/configuration.md is out of date with the options structs; run NAGARE_UPDATE_DOCS=1 cargo test -p nagare configuration_reference");
            }
        }
    }
}
