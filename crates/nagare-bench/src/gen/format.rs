//! Line layouts: how the fields of one line are put together.

use anyhow::{bail, Result};

use super::fields::{json_escape, FieldGen, FieldSpec, Rng};

/// The output form of a line.
#[derive(Debug, Clone)]
pub enum Layout {
    /// `label:value` pairs joined by the delimiter (LTSV with a tab).
    Labeled(Vec<u8>),
    /// Values only, joined by the delimiter.
    Delimited(Vec<u8>),
    /// One JSON object per line.
    Json,
    /// A template with `{name}` placeholders.
    Template(Vec<Part>),
    /// The same text on every line.
    Message(Vec<u8>),
    /// Lines of a file, replayed in rotation.
    Input(Vec<Vec<u8>>),
}

#[derive(Debug, Clone)]
pub enum Part {
    Lit(Vec<u8>),
    Field(usize),
}

/// Parses `"{time} [{level}] {msg}"`; `{{` and `}}` are literal braces.
pub fn parse_template(t: &str, fields: &[FieldGen]) -> Result<Vec<Part>> {
    let mut parts = Vec::new();
    let mut lit = Vec::new();
    let b = t.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'{' if b.get(i + 1) == Some(&b'{') => {
                lit.push(b'{');
                i += 2;
            }
            b'}' if b.get(i + 1) == Some(&b'}') => {
                lit.push(b'}');
                i += 2;
            }
            b'{' => {
                let Some(end) = t[i + 1..].find('}') else {
                    bail!("template {t:?}: unclosed {{");
                };
                let name = &t[i + 1..i + 1 + end];
                let Some(k) = fields.iter().position(|f| f.name == name) else {
                    bail!("template {t:?}: no field named {name:?}");
                };
                if !lit.is_empty() {
                    parts.push(Part::Lit(std::mem::take(&mut lit)));
                }
                parts.push(Part::Field(k));
                i += end + 2;
            }
            b'}' => bail!("template {t:?}: lone }} (write }}}} for a brace)"),
            c => {
                lit.push(c);
                i += 1;
            }
        }
    }
    if !lit.is_empty() {
        parts.push(Part::Lit(lit));
    }
    Ok(parts)
}

/// Generates lines; one per worker (it owns its RNG and caches).
#[derive(Debug, Clone)]
pub struct LineGen {
    pub fields: Vec<FieldGen>,
    pub layout: Layout,
    /// Precomputed `label:` / `"key":` prefixes, one per field.
    heads: Vec<Vec<u8>>,
    pub rng: Rng,
}

impl LineGen {
    pub fn new(
        specs: &[FieldSpec],
        layout_of: impl FnOnce(&[FieldGen]) -> Result<Layout>,
    ) -> Result<LineGen> {
        let fields = specs
            .iter()
            .map(FieldGen::compile)
            .collect::<Result<Vec<_>>>()?;
        let layout = layout_of(&fields)?;
        let heads = fields
            .iter()
            .enumerate()
            .map(|(i, f)| match &layout {
                Layout::Labeled(d) => {
                    let mut h = if i > 0 { d.clone() } else { Vec::new() };
                    h.extend_from_slice(f.name.as_bytes());
                    h.push(b':');
                    h
                }
                Layout::Delimited(d) => {
                    if i > 0 {
                        d.clone()
                    } else {
                        Vec::new()
                    }
                }
                Layout::Json => {
                    let mut h = if i > 0 {
                        b",\"".to_vec()
                    } else {
                        b"{\"".to_vec()
                    };
                    json_escape(f.name.as_bytes(), &mut h);
                    h.extend_from_slice(b"\":");
                    h
                }
                _ => Vec::new(),
            })
            .collect();
        Ok(LineGen {
            fields,
            layout,
            heads,
            rng: Rng::from_entropy(),
        })
    }

    /// A generator that writes `msg` on every line.
    pub fn message(msg: &[u8]) -> LineGen {
        LineGen {
            fields: Vec::new(),
            layout: Layout::Message(msg.to_vec()),
            heads: Vec::new(),
            rng: Rng::from_entropy(),
        }
    }

    /// True when every line is the same bytes.
    pub fn fixed(&self) -> Option<&[u8]> {
        match &self.layout {
            Layout::Message(m) => Some(m),
            _ => None,
        }
    }

    /// Whether lines are JSON objects already.
    pub fn is_json(&self) -> bool {
        matches!(self.layout, Layout::Json)
    }

    /// Appends line number `idx` (no newline) at time `now` (ns since the epoch).
    #[inline]
    pub fn write_line(&mut self, idx: u64, now: i64, out: &mut Vec<u8>) {
        match &self.layout {
            Layout::Message(m) => out.extend_from_slice(m),
            Layout::Input(lines) => {
                out.extend_from_slice(&lines[(idx % lines.len() as u64) as usize])
            }
            Layout::Labeled(_) | Layout::Delimited(_) => {
                for (f, h) in self.fields.iter_mut().zip(&self.heads) {
                    out.extend_from_slice(h);
                    f.write(idx, now, &mut self.rng, false, out);
                }
            }
            Layout::Json => {
                if self.fields.is_empty() {
                    out.extend_from_slice(b"{}");
                    return;
                }
                for (f, h) in self.fields.iter_mut().zip(&self.heads) {
                    out.extend_from_slice(h);
                    f.write(idx, now, &mut self.rng, true, out);
                }
                out.push(b'}');
            }
            Layout::Template(parts) => {
                for p in parts {
                    match p {
                        Part::Lit(l) => out.extend_from_slice(l),
                        Part::Field(k) => {
                            self.fields[*k].write(idx, now, &mut self.rng, false, out)
                        }
                    }
                }
            }
        }
    }

    /// Appends line `idx` as a JSON object: JSON layouts as they are, any
    /// other line as `{"message": "<line>"}`. `scratch` is reused.
    pub fn write_json_line(
        &mut self,
        idx: u64,
        now: i64,
        scratch: &mut Vec<u8>,
        out: &mut Vec<u8>,
    ) {
        if self.is_json() {
            self.write_line(idx, now, out);
        } else {
            scratch.clear();
            self.write_line(idx, now, scratch);
            out.extend_from_slice(b"{\"message\":\"");
            json_escape(scratch, out);
            out.extend_from_slice(b"\"}");
        }
    }
}
