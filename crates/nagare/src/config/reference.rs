//! The option tables of docs/configuration.md, generated from the plugins'
//! options structs (their doc comments, types and defaults), so code and docs
//! cannot drift: a test fails when the file differs from what this renders.

use schemars::JsonSchema;
use serde_json::Value;

use crate::buffer::BufferConfig;
use crate::config::{MonitorConfig, SystemConfig};
use crate::filters::parser::ParserFilterConfig;
use crate::inputs::forward::{ForwardInputConfig, UserConfig};
use crate::inputs::tail::TailConfig;
use crate::outputs::file::FileConfig;
use crate::outputs::forward::{ForwardOutputConfig, ServerConfig};
use crate::outputs::null::NullConfig;
use crate::outputs::stdout::StdoutConfig;
use crate::parsers::ParserConfig;

pub const BEGIN: &str =
    "<!-- BEGIN GENERATED: option tables (cargo test regenerates with NAGARE_UPDATE_DOCS=1) -->";
pub const END: &str = "<!-- END GENERATED -->";

/// (heading, intro, table)
fn sections() -> Vec<(&'static str, &'static str, String)> {
    vec![
        ("`[system]`", "Process-wide settings.", table::<SystemConfig>(&[])),
        ("`[monitor]`", "The HTTP monitor (off when the section is absent).", table::<MonitorConfig>(&[])),
        (
            "`[[input]]` `type = \"forward\"`",
            "Receives Fluentd's forward protocol v1 over TCP (with UDP heartbeat answers) or a UNIX socket.",
            table::<ForwardInputConfig>(&[]),
        ),
        ("`[[input.users]]`", "Users allowed by a forward input with `shared_key`.", table::<UserConfig>(&[])),
        (
            "`[[input]]` `type = \"tail\"`",
            "Follows files and turns each line into an event: `{\"message\": \"<line>\"}` with the default parser `none`, or the record its `[input.parser]` makes; rotation (rename and copytruncate), truncation and deletion are detected; positions survive restarts. New files and lines are found at once through inotify (`watch`), the two intervals are the fallback (see [The tail and directory inputs](#the-tail-and-directory-inputs)).",
            table::<TailConfig>(&["parser"]),
        ),
        (
            "`[[input]]` `type = \"directory\"`",
            "A drop box: every file created in the folder tree, or appended to, is shipped line by line from its start, tagged by its relative path; `remove_after` removes shipped files.",
            table::<crate::inputs::directory::DirectoryConfig>(&["parser"]),
        ),
        (
            "`[[input]]` `type = \"fuse\"`",
            "Mounts a folder through FUSE: every line applications write into files there is an event (nothing is stored on disk), tagged by the file's path relative to the mountpoint; each writing process has its own partial line, so concurrent appenders never interleave inside a line.",
            table::<crate::inputs::fuse::FuseConfig>(&["parser"]),
        ),
        ("`[input.parser]`", "The parser of a tail, directory or fuse input (and, as `[filter.parser]`, of a parser filter).", table::<ParserConfig>(&[])),
        (
            "`[[filter]]` (every type)",
            "Keys every filter takes besides its own.",
            common_filter_table(),
        ),
        (
            "`[[filter]]` `type = \"parser\"`",
            "Parses one string field of each record with a parser, like Fluentd's filter_parser; `[filter.parser]` takes the options of `[input.parser]` (any type but `multiline`). A record whose field is missing, not a string or does not parse is kept as it was with a `parse_error` field.",
            table::<ParserFilterConfig>(&["parser"]),
        ),
        (
            "`[[output]]` (every type)",
            "Keys every output takes besides its own.",
            common_output_table(),
        ),
        ("`[output.buffer]`", "The buffer in front of an output.", table::<BufferConfig>(&[])),
        ("`[[output]]` `type = \"stdout\"`", "Prints events to standard output.", table::<StdoutConfig>(&[])),
        ("`[[output]]` `type = \"null\"`", "Counts events and discards them.", table::<NullConfig>(&[])),
        ("`[[output]]` `type = \"file\"`", "Writes events to files.", table::<FileConfig>(&[])),
        (
            "`[[output]]` `type = \"forward\"`",
            "Sends events to forward servers (Fluentd, Fluent Bit, nagare).",
            table::<ForwardOutputConfig>(&["server"]),
        ),
        ("`[[output.server]]`", "One server of a forward output.", table::<ServerConfig>(&[])),
    ]
}

fn common_filter_table() -> String {
    let rows = [
        ("type", "string", "required", "The filter type: `parser`."),
        ("match", "string", "`\"**\"`", "Tag patterns separated by spaces, as for outputs. Filters apply in file order, each to the events whose tag it matches."),
    ];
    let mut s = header();
    for (k, t, d, doc) in rows {
        s.push_str(&format!("| `{k}` | {t} | {d} | {doc} |\n"));
    }
    s
}

fn common_output_table() -> String {
    let rows = [
        ("type", "string", "required", "The output type: `stdout`, `null`, `file`, `forward` or `copy`."),
        ("match", "string", "required", "Tag patterns separated by spaces: `*` one part, `**` any parts (also none), `{a,b}` either. The first output that matches an event's tag gets it."),
        ("buffer", "table", "memory buffer", "`[output.buffer]`, see below."),
        ("secondary", "table", "none", "`[output.secondary]`: an output (with `type` and its options, no `match`) that receives chunks whose retries ran out."),
        ("store", "array of tables", "—", "`copy` only: `[[output.store]]` outputs that each receive every event (each with its own buffer; no `match`)."),
    ];
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
    let schema = schemars::schema_for!(T);
    let root = schema.as_value();
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
    for (name, p) in props {
        if skip.contains(&name.as_str()) {
            continue;
        }
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
