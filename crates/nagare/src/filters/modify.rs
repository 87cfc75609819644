//! `modify`: sets, adds, removes, renames, copies and keeps fields, nested
//! ones included, with values from templates (`${tag}`, `${tag_parts[N]}`,
//! `${hostname}`, `${time}`, `${record.a.b}`), like Fluentd's
//! record_transformer and Fluent Bit's modify.
//!
//! The options become a tree of changes per map level ([`Node`]). A record
//! is rewritten by walking its maps once: pairs no change names are copied
//! as their bytes, a map a change goes into is rewritten the same way, and
//! new pairs are appended. Nothing is decoded but the keys on the way.
//!
//! The common case, changes that only add top-level pairs whose values are
//! the same for a whole batch (fixed values, `${hostname}`, `${tag}`), is
//! cheaper still: a record that has none of those keys is its own bytes
//! under a new map header, with the new pairs (written once per batch)
//! appended.

use bytes::Bytes;
use chrono::format::Item;
use nagare_core::filter::FilterPlugin;
use nagare_core::filter::{Filter, Filtered};
use nagare_core::plugin::{serde_inline_default, BuildContext, OptionError};
use nagare_core::record::{self, value_text, FieldPath, Fields, Span};
use nagare_forward::msgpack::{write_map_len, write_str};
use serde::Deserialize;

#[serde_inline_default]
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModifyConfig {
    /// `[filter.set]`: field = value, set whether or not the record has the
    /// field. A string value is a template (`${tag}`, `${tag_parts[N]}`,
    /// `${hostname}`, `${time}`, `${record.a.b}`); numbers, booleans,
    /// arrays and tables are set as they are.
    #[serde(default)]
    pub set: serde_json::Map<String, serde_json::Value>,
    /// `[filter.add]`: field = value as for `set`, only when the record
    /// does not have the field.
    #[serde(default)]
    pub add: serde_json::Map<String, serde_json::Value>,
    /// Fields to remove.
    #[serde(default)]
    pub remove: Vec<String>,
    /// `[filter.rename]`: field = new field. A record without the field is
    /// left as it is.
    #[serde(default)]
    pub rename: serde_json::Map<String, serde_json::Value>,
    /// `[filter.copy]`: field = field the value is copied to (replacing
    /// what it held). A record without the field is left as it is.
    #[serde(default)]
    pub copy: serde_json::Map<String, serde_json::Value>,
    /// An allow-list: only these fields stay (and those the other changes
    /// write). `$.a.b` keeps `a` with only `b` inside. Empty: every field
    /// stays.
    #[serde(default)]
    pub keep: Vec<String>,
    /// The strftime format of `${time}` (the event's time, UTC).
    #[serde_inline_default("%Y-%m-%dT%H:%M:%S%.9fZ".into())]
    pub time_format: String,
    /// `[[filter.when]]`: conditions that must all hold for the changes to
    /// apply to a record; a record for which one does not goes on as it
    /// came (Fluent Bit's modify `Condition`). Empty: every record changes.
    #[serde(default)]
    pub when: Vec<Condition>,
}

/// One condition of `[[filter.when]]`, on the record as it arrived.
#[serde_inline_default]
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Condition {
    /// The field: `name` (a top-level key) or `$.a.b` (a nested one). Required.
    pub key: String,
    /// A regular expression (Rust regex syntax, unanchored) the field's
    /// text must match (a number or boolean by its text, as JSON writes
    /// it). Absent: the field must be there.
    #[serde(default)]
    pub pattern: Option<String>,
    /// The condition holds when it otherwise would not: the field does not
    /// match (a missing field does not match), or, without `pattern`, is
    /// not there.
    #[serde_inline_default(false)]
    pub invert: bool,
}

impl FilterPlugin for ModifyConfig {
    const TYPE: &'static str = "modify";
    const DOC: &'static str = "Sets, adds, removes, renames, copies and keeps fields (nested ones by `$.a.b`), with values from templates, like Fluentd's record_transformer. Every change reads the record as it arrived.";

    fn build(self, _cx: &mut BuildContext) -> Result<Box<dyn Filter>, OptionError> {
        Ok(Box::new(Modify::new(self)?))
    }
}

/// What a change writes.
enum Value {
    /// A value given in the config, as msgpack.
    Fixed(Vec<u8>),
    /// A template with at least one `${…}` that depends on the event.
    Template(Vec<Part>),
    /// A template that depends only on the tag (`${tag}`, `${tag_parts[N]}`):
    /// rendered once per batch, into `Event::per_tag[i]`.
    PerTag(usize),
    /// The value of `sources[i]` in the record as it arrived (copy, rename,
    /// and a template that is only `${record.…}`): absent when it is.
    Field(usize),
}

enum Part {
    Text(Vec<u8>),
    Tag,
    /// `${tag_parts[N]}`: part N of the tag; negative counts from the end.
    TagIndex(i64),
    Time,
    /// `${record.…}`: the text of `sources[i]` ("" when absent).
    Field(usize),
}

enum Op {
    Remove,
    Put {
        value: Value,
        if_absent: bool,
    },
    /// Changes inside the map under this key.
    Into(Node),
}

/// The changes to one map.
#[derive(Default)]
struct Node {
    ops: Vec<(Vec<u8>, Op)>,
    /// Keys that stay besides those `ops` name; `None`: every key.
    keep: Option<Vec<Vec<u8>>>,
}

/// Changes in one map are tracked in a u64 per event.
const MAX_OPS: usize = 64;

struct Modify {
    root: Node,
    /// The fields values are read from (`Event::sources`, the first
    /// `sources` of `fields`), found once per event.
    sources: usize,
    /// The fields found in the walk of each entry: the sources, then, when
    /// `appends`, the root's changed keys.
    fields: Fields,
    /// Every change puts a top-level pair whose value is the same for a
    /// whole batch, and nothing is kept by a list: a record with none of
    /// the changed keys (their indices in `fields`) only gets pairs
    /// appended.
    appends: Option<Vec<usize>>,
    time_format: Vec<Item<'static>>,
    uses_time: bool,
    /// The templates of `Value::PerTag`.
    per_tag: Vec<Vec<Part>>,
    /// `when`: (index in `fields`, pattern, invert).
    when: Vec<(usize, Option<regex::bytes::Regex>, bool)>,
}

impl Modify {
    fn new(cfg: ModifyConfig) -> Result<Modify, OptionError> {
        let time_format = chrono::format::StrftimeItems::new(&cfg.time_format)
            .parse_to_owned()
            .map_err(|e| OptionError::new("time_format", format!("bad strftime format: {e}")))?;
        let mut b = Builder {
            hostname: gethostname::gethostname().to_string_lossy().into_owned(),
            ..Builder::default()
        };
        for (field, v) in &cfg.set {
            let key = format!("set.{field}");
            let value = b.value(&key, v)?;
            b.put(&key, field, value, false)?;
        }
        for (field, v) in &cfg.add {
            let key = format!("add.{field}");
            let value = b.value(&key, v)?;
            b.put(&key, field, value, true)?;
        }
        for field in &cfg.remove {
            b.change("remove", field, Op::Remove)?;
        }
        for (what, map) in [("rename", &cfg.rename), ("copy", &cfg.copy)] {
            for (from, to) in map {
                let key = format!("{what}.{from}");
                let to = to
                    .as_str()
                    .ok_or_else(|| OptionError::new(&key, "expected the name of a field"))?;
                let src = b.source(&key, from)?;
                b.put(&key, to, Value::Field(src), false)?;
                if what == "rename" {
                    b.change(&key, from, Op::Remove)?;
                }
            }
        }
        for field in &cfg.keep {
            let path = FieldPath::parse(field).map_err(|e| OptionError::new("keep", e))?;
            keep(&mut b.root, &path.keys).map_err(|e| OptionError::new("keep", e))?;
        }
        if b.root.ops.is_empty() && b.root.keep.is_none() {
            return Err(OptionError::new("", "a modify filter needs at least one change (set, add, remove, rename, copy or keep)"));
        }
        let mut fields = Fields::default();
        for path in &b.sources {
            fields.add(path);
        }
        let batch_constant = |op: &Op| {
            matches!(
                op,
                Op::Put {
                    value: Value::Fixed(_) | Value::PerTag(_),
                    ..
                }
            )
        };
        let appends = (b.root.keep.is_none()
            && b.root.ops.iter().all(|(_, op)| batch_constant(op)))
        .then(|| {
            let key = |k: &Vec<u8>| FieldPath {
                keys: vec![k.clone()],
            };
            b.root
                .ops
                .iter()
                .map(|(k, _)| fields.add(&key(k)))
                .collect()
        });
        let mut when = Vec::new();
        for (i, c) in cfg.when.iter().enumerate() {
            let key = format!("when[{i}]");
            let path =
                FieldPath::parse(&c.key).map_err(|e| OptionError::new(format!("{key}.key"), e))?;
            let pattern = c
                .pattern
                .as_deref()
                .map(regex::bytes::Regex::new)
                .transpose()
                .map_err(|e| {
                    OptionError::new(format!("{key}.pattern"), format!("bad regex: {e}"))
                })?;
            when.push((fields.add(&path), pattern, c.invert));
        }
        Ok(Modify {
            when,
            uses_time: b.uses_time,
            per_tag: b.per_tag,
            root: b.root,
            sources: b.sources.len(),
            fields,
            appends,
            time_format,
        })
    }
}

#[derive(Default)]
struct Builder {
    root: Node,
    sources: Vec<FieldPath>,
    hostname: String,
    uses_time: bool,
    per_tag: Vec<Vec<Part>>,
}

impl Builder {
    fn source(&mut self, key: &str, field: &str) -> Result<usize, OptionError> {
        let path = FieldPath::parse(field).map_err(|e| OptionError::new(key, e))?;
        Ok(self.source_path(path))
    }

    fn source_path(&mut self, path: FieldPath) -> usize {
        match self.sources.iter().position(|p| *p == path) {
            Some(i) => i,
            None => {
                self.sources.push(path);
                self.sources.len() - 1
            }
        }
    }

    fn put(
        &mut self,
        key: &str,
        field: &str,
        value: Value,
        if_absent: bool,
    ) -> Result<(), OptionError> {
        self.change(key, field, Op::Put { value, if_absent })
    }

    /// Adds a change of `field`; two changes of one field (or of a field
    /// and a field inside it) are refused.
    fn change(&mut self, key: &str, field: &str, op: Op) -> Result<(), OptionError> {
        let path = FieldPath::parse(field).map_err(|e| OptionError::new(key, e))?;
        let (last, parents) = path.keys.split_last().expect("a path has a key");
        let mut node = &mut self.root;
        for k in parents {
            node = child(node, k).map_err(|e| OptionError::new(key, format!("{field:?}: {e}")))?;
        }
        if node.ops.iter().any(|(k, _)| k == last) {
            return Err(OptionError::new(
                key,
                format!(
                    "{field:?} is already changed by another option (each field may change once)"
                ),
            ));
        }
        if node.ops.len() == MAX_OPS {
            return Err(OptionError::new(
                key,
                format!("more than {MAX_OPS} changes in one map"),
            ));
        }
        node.ops.push((last.clone(), op));
        Ok(())
    }

    /// Reads a config value: strings may be templates.
    fn value(&mut self, key: &str, v: &serde_json::Value) -> Result<Value, OptionError> {
        let Some(s) = v.as_str() else {
            let mut out = Vec::new();
            nagare_core::json::msgpack_from_json(v, &mut out);
            return Ok(Value::Fixed(out));
        };
        let parts = self.template(s).map_err(|e| OptionError::new(key, e))?;
        Ok(match parts.as_slice() {
            [] => Value::Fixed(str_value(b"")),
            [Part::Text(t)] => Value::Fixed(str_value(t)),
            // A value that is one field keeps the field's type.
            [Part::Field(i)] => Value::Field(*i),
            _ if parts
                .iter()
                .all(|p| matches!(p, Part::Text(_) | Part::Tag | Part::TagIndex(_))) =>
            {
                self.per_tag.push(parts);
                Value::PerTag(self.per_tag.len() - 1)
            }
            _ => Value::Template(parts),
        })
    }

    fn template(&mut self, s: &str) -> Result<Vec<Part>, String> {
        let mut parts = Vec::new();
        let mut rest = s;
        let mut text = String::new();
        while let Some(at) = rest.find("${") {
            text.push_str(&rest[..at]);
            let Some(end) = rest[at..].find('}') else {
                return Err(format!("{s:?}: `${{` without a closing `}}`"));
            };
            let name = &rest[at + 2..at + end];
            rest = &rest[at + end + 1..];
            let part = match name {
                "tag" => Part::Tag,
                "hostname" => {
                    text.push_str(&self.hostname);
                    continue;
                }
                "time" => {
                    self.uses_time = true;
                    Part::Time
                }
                _ => {
                    if let Some(n) = name
                        .strip_prefix("tag_parts[")
                        .and_then(|r| r.strip_suffix(']'))
                    {
                        let n = n
                            .parse()
                            .map_err(|_| format!("`${{{name}}}`: the index must be an integer"))?;
                        Part::TagIndex(n)
                    } else if let Some(field) = name.strip_prefix("record.") {
                        let path = FieldPath::parse(&format!("$.{field}"))?;
                        Part::Field(self.source_path(path))
                    } else {
                        return Err(format!(
                            "unknown template variable `${{{name}}}` (known: ${{tag}}, ${{tag_parts[N]}}, ${{hostname}}, ${{time}}, ${{record.a.b}}; environment variables are upper case)"
                        ));
                    }
                }
            };
            if !text.is_empty() {
                parts.push(Part::Text(std::mem::take(&mut text).into_bytes()));
            }
            parts.push(part);
        }
        text.push_str(rest);
        if !text.is_empty() {
            parts.push(Part::Text(text.into_bytes()));
        }
        Ok(parts)
    }
}

/// The node of the map under `key` in `node`, made when missing.
fn child<'n>(node: &'n mut Node, key: &[u8]) -> Result<&'n mut Node, String> {
    let i = match node.ops.iter().position(|(k, _)| k == key) {
        Some(i) => i,
        None => {
            node.ops.push((key.to_vec(), Op::Into(Node::default())));
            node.ops.len() - 1
        }
    };
    match &mut node.ops[i].1 {
        Op::Into(n) => Ok(n),
        _ => Err(format!(
            "`{}` is changed whole by another option",
            String::from_utf8_lossy(key)
        )),
    }
}

fn keep(node: &mut Node, keys: &[Vec<u8>]) -> Result<(), String> {
    let (first, rest) = keys.split_first().expect("a path has a key");
    node.keep.get_or_insert_with(Vec::new).push(first.clone());
    if !rest.is_empty() {
        keep(child(node, first)?, rest)?;
    }
    Ok(())
}

fn str_value(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    write_str(&mut out, s);
    out
}

/// What one event's rewrite reads.
struct Event<'a> {
    record: &'a [u8],
    tag: &'a str,
    /// The formatted `${time}`, when a template uses it.
    time: &'a [u8],
    /// The value span of each source in `record`.
    sources: &'a [Span],
    /// The batch's rendering of each `Value::PerTag` template, as msgpack.
    per_tag: &'a [Vec<u8>],
}

/// What happens to one pair of a map being rewritten.
#[derive(Clone, Copy)]
enum Action {
    Copy,
    Skip,
    /// Key as it is, new value from op `i`.
    Put(usize),
    /// Key as it is, the map rewritten by the node of op `i`.
    Into(usize),
}

#[derive(Clone, Copy)]
struct Planned {
    start: usize,
    value: usize,
    end: usize,
    action: Action,
}

/// Buffers reused for every event.
#[derive(Default)]
struct Scratch {
    pairs: Vec<Planned>,
    text: Vec<u8>,
    json: Vec<u8>,
}

impl Node {
    /// Writes the map at `pos` of `ev.record` (an empty map when `None`)
    /// with this node's changes; returns where that map ends (`pos` when
    /// `None`), or `None` when it is cut short.
    fn write(
        &self,
        ev: &Event,
        pos: Option<usize>,
        out: &mut Vec<u8>,
        s: &mut Scratch,
    ) -> Option<usize> {
        let rec = ev.record;
        let base = s.pairs.len();
        let mut seen = 0u64;
        let mut count = 0usize;
        let mut map_end = pos.unwrap_or(0);
        if let Some(pos) = pos {
            let (n, mut p) = record::map_at(rec, pos)?;
            for _ in 0..n {
                let pair = record::pair_at(rec, p)?;
                let (value, end) = (pair.value, pair.end);
                let key = pair.key.map(|(a, b)| &rec[a..b]);
                let op = key.and_then(|k| self.ops.iter().position(|(ok, _)| ok == k));
                let action = match op {
                    Some(i) => {
                        seen |= 1 << i;
                        match &self.ops[i].1 {
                            Op::Remove => Action::Skip,
                            Op::Put {
                                if_absent: true, ..
                            } => Action::Copy,
                            Op::Put { value, .. } if present(value, ev) => Action::Put(i),
                            Op::Put { .. } => Action::Copy,
                            Op::Into(_) if rec.get(value).is_some_and(|b| is_map(*b)) => {
                                Action::Into(i)
                            }
                            Op::Into(_) => Action::Copy,
                        }
                    }
                    None => match (&self.keep, key) {
                        (Some(keep), Some(k)) if !keep.iter().any(|x| x == k) => Action::Skip,
                        (Some(_), None) => Action::Skip,
                        _ => Action::Copy,
                    },
                };
                count += usize::from(!matches!(action, Action::Skip));
                // Pairs copied as they are, one after the other, are one
                // copy (often the whole map).
                match s.pairs[base..].last_mut() {
                    Some(last)
                        if matches!((last.action, action), (Action::Copy, Action::Copy))
                            && last.end == p =>
                    {
                        last.end = end
                    }
                    _ => s.pairs.push(Planned {
                        start: p,
                        value,
                        end,
                        action,
                    }),
                }
                p = end;
            }
            map_end = p;
        }
        let added = |i: usize| seen & (1 << i) == 0;
        for (i, (_, op)) in self.ops.iter().enumerate() {
            count += usize::from(added(i) && creates(op, ev));
        }
        write_map_len(out, count);
        for j in base..s.pairs.len() {
            let p = s.pairs[j];
            match p.action {
                Action::Skip => {}
                Action::Copy => out.extend_from_slice(&rec[p.start..p.end]),
                Action::Put(i) => {
                    out.extend_from_slice(&rec[p.start..p.value]);
                    if let Op::Put { value, .. } = &self.ops[i].1 {
                        write_value(value, ev, out, s);
                    }
                }
                Action::Into(i) => {
                    out.extend_from_slice(&rec[p.start..p.value]);
                    if let Op::Into(node) = &self.ops[i].1 {
                        node.write(ev, Some(p.value), out, s)?;
                    }
                }
            }
        }
        s.pairs.truncate(base);
        for (i, (key, op)) in self.ops.iter().enumerate() {
            if !added(i) || !creates(op, ev) {
                continue;
            }
            write_str(out, key);
            match op {
                Op::Put { value, .. } => write_value(value, ev, out, s),
                Op::Into(node) => {
                    node.write(ev, None, out, s);
                }
                Op::Remove => {}
            }
        }
        Some(map_end)
    }
}

fn is_map(b: u8) -> bool {
    matches!(b, 0x80..=0x8f | 0xde | 0xdf)
}

fn present(value: &Value, ev: &Event) -> bool {
    match value {
        Value::Field(i) => ev.sources[*i].is_some(),
        _ => true,
    }
}

/// The change writes a pair where the record had none.
fn creates(op: &Op, ev: &Event) -> bool {
    match op {
        Op::Remove => false,
        Op::Put { value, .. } => present(value, ev),
        Op::Into(node) => node.ops.iter().any(|(_, op)| creates(op, ev)),
    }
}

fn write_value(value: &Value, ev: &Event, out: &mut Vec<u8>, s: &mut Scratch) {
    match value {
        Value::Fixed(v) => out.extend_from_slice(v),
        Value::PerTag(i) => out.extend_from_slice(&ev.per_tag[*i]),
        Value::Field(i) => {
            if let Some((a, b)) = ev.sources[*i] {
                out.extend_from_slice(&ev.record[a..b]);
            }
        }
        Value::Template(parts) => {
            s.text.clear();
            for part in parts {
                match part {
                    Part::Field(i) => {
                        if let Some((a, b)) = ev.sources[*i] {
                            let text = value_text(&ev.record[a..b], &mut s.json);
                            s.text.extend_from_slice(text);
                        }
                    }
                    Part::Time => s.text.extend_from_slice(ev.time),
                    tag_or_text => s.text.extend_from_slice(tag_text(tag_or_text, ev.tag)),
                }
            }
            write_str(out, &s.text);
        }
    }
}

/// The text of a template part that depends on nothing but the tag.
fn tag_text<'a>(part: &'a Part, tag: &'a str) -> &'a [u8] {
    match part {
        Part::Text(t) => t,
        Part::Tag => tag.as_bytes(),
        Part::TagIndex(n) => nagare_core::pattern::tag_part(tag, *n).as_bytes(),
        Part::Time | Part::Field(_) => b"",
    }
}

impl Modify {
    /// Whether every `when` condition holds for `record`, whose fields are at `spans`.
    fn applies(&self, record: &[u8], spans: &[Span], json: &mut Vec<u8>) -> bool {
        self.when.iter().all(|(i, pattern, invert)| {
            let holds = match (spans[*i], pattern) {
                (None, _) => false,
                (Some(_), None) => true,
                (Some((a, b)), Some(re)) => re.is_match(value_text(&record[a..b], json)),
            };
            holds != *invert
        })
    }
}

impl Filter for Modify {
    fn filter(&self, tag: &str, parts: &[Bytes], _count: u32) -> Filtered {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let mut out = Vec::with_capacity(len + len / 2 + 64);
        let mut s = Scratch::default();
        let mut spans = vec![None; self.fields.len()];
        let mut time = Vec::new();
        let per_tag: Vec<Vec<u8>> = self
            .per_tag
            .iter()
            .map(|parts| {
                let text: Vec<u8> = parts
                    .iter()
                    .flat_map(|p| tag_text(p, tag))
                    .copied()
                    .collect();
                let mut v = Vec::new();
                write_str(&mut v, &text);
                v
            })
            .collect();
        // With `appends`: the pairs every record without the changed keys gets.
        let mut appended = Vec::new();
        if self.appends.is_some() {
            for (key, op) in &self.root.ops {
                write_str(&mut appended, key);
                match op {
                    Op::Put {
                        value: Value::Fixed(v),
                        ..
                    } => appended.extend_from_slice(v),
                    Op::Put {
                        value: Value::PerTag(i),
                        ..
                    } => appended.extend_from_slice(&per_tag[*i]),
                    _ => unreachable!("appends holds only batch-constant values"),
                }
            }
        }
        let mut count = 0u32;
        for part in parts {
            let mut start = 0;
            while let Some((r, end)) = self.fields.entry(part, start, &mut spans) {
                count += 1;
                // 0x92 and the time, as they are.
                let head = &part[start..r];
                out.extend_from_slice(head);
                start = end;
                let record = &part[r..end];
                let Some((pairs, first)) = record::map_at(record, 0) else {
                    // Inputs only pass maps on; should one not be, it goes on as it was.
                    out.extend_from_slice(record);
                    continue;
                };
                if !self.applies(record, &spans, &mut s.json) {
                    out.extend_from_slice(record);
                    continue;
                }
                if let Some(keys) = &self.appends {
                    if keys.iter().all(|&k| spans[k].is_none()) {
                        write_map_len(&mut out, pairs + self.root.ops.len());
                        out.extend_from_slice(&record[first..]);
                        out.extend_from_slice(&appended);
                        continue;
                    }
                }
                if self.uses_time {
                    let t = record::entry_time(head);
                    time.clear();
                    let dt =
                        chrono::DateTime::from_timestamp(t.secs as i64, t.nanos.min(999_999_999))
                            .unwrap_or_default();
                    use std::io::Write;
                    let _ = write!(time, "{}", dt.format_with_items(self.time_format.iter()));
                }
                let ev = Event {
                    record,
                    tag,
                    time: &time,
                    sources: &spans[..self.sources],
                    per_tag: &per_tag,
                };
                s.pairs.clear();
                // The walk above found the record whole: its rewrite does not run short.
                self.root.write(&ev, Some(0), &mut out, &mut s);
            }
        }
        Filtered {
            batch: Some((Bytes::from(out), count)),
            ..Filtered::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nagare_forward::{write_entry, EventTime};
    use rmpv::Value as V;

    fn modify(toml_text: &str) -> Modify {
        Modify::new(toml::from_str(toml_text).unwrap()).unwrap()
    }

    fn build_err(toml_text: &str) -> OptionError {
        Modify::new(toml::from_str(toml_text).unwrap())
            .err()
            .unwrap()
    }

    fn m(pairs: &[(&str, V)]) -> V {
        V::Map(
            pairs
                .iter()
                .map(|(k, v)| (V::from(*k), v.clone()))
                .collect(),
        )
    }

    fn run(f: &Modify, tag: &str, record: &V) -> V {
        let mut bytes = Vec::new();
        rmpv::encode::write_value(&mut bytes, record).unwrap();
        let mut e = Vec::new();
        write_entry(&mut e, EventTime::new(1_795_309_323, 5), &bytes);
        let out = f.filter(tag, &[Bytes::from(e)], 1);
        let (b, n) = out.batch.unwrap();
        assert_eq!(n, 1);
        let (t, r, _) = nagare_core::record::entries(&b).next().unwrap();
        assert_eq!(t, EventTime::new(1_795_309_323, 5));
        rmpv::decode::read_value(&mut &r[..]).unwrap()
    }

    #[test]
    fn when_conditions_choose_the_records_that_change() {
        // Fluent Bit's `Condition Key_value_matches status ^5[0-9][0-9]$`
        // with `Condition Key_does_not_exist alert`.
        let f = modify(
            r#"
add = { alert = "true" }
[[when]]
key = "status"
pattern = "^5[0-9][0-9]$"
[[when]]
key = "$.alert"
invert = true
"#,
        );
        let with = |status: V| m(&[("status", status)]);
        let alerted = |status: V| m(&[("status", status), ("alert", "true".into())]);
        assert_eq!(run(&f, "t", &with("502".into())), alerted("502".into()));
        // A number matches by its text.
        assert_eq!(run(&f, "t", &with(503.into())), alerted(503.into()));
        assert_eq!(run(&f, "t", &with("200".into())), with("200".into()));
        assert_eq!(run(&f, "t", &m(&[])), m(&[]));
        let had = m(&[("status", "500".into()), ("alert", "no".into())]);
        assert_eq!(run(&f, "t", &had), had);
        // Inverted with a pattern: a missing field does not match, so it holds.
        let f = modify(
            "set = { ok = 1 }\n[[when]]\nkey = \"level\"\npattern = \"^debug$\"\ninvert = true\n",
        );
        assert_eq!(run(&f, "t", &m(&[])), m(&[("ok", 1.into())]));
        let debug = m(&[("level", "debug".into())]);
        assert_eq!(run(&f, "t", &debug), debug);
        let e = build_err("set = { a = 1 }\n[[when]]\nkey = \"a\"\npattern = \"(\"\n");
        assert!(e.to_string().contains("when[0].pattern"), "{e}");
    }

    #[test]
    fn set_add_remove_rename_copy_at_the_top_level() {
        let f = modify(
            r#"
remove = ["password"]
[set]
env = "prod"
n = 3
level = "${record.lvl}"
[add]
host = "default"
region = "eu"
[rename]
msg = "message"
[copy]
user = "owner"
"#,
        );
        let got = run(
            &f,
            "app.api",
            &m(&[
                ("msg", "hi".into()),
                ("password", "x".into()),
                ("host", "h1".into()),
                ("lvl", 4.into()),
                ("user", "ann".into()),
                ("n", "old".into()),
            ]),
        );
        assert_eq!(
            got,
            m(&[
                ("host", "h1".into()),
                ("lvl", 4.into()),
                ("user", "ann".into()),
                ("n", 3.into()),
                ("env", "prod".into()),
                ("level", 4.into()),
                ("region", "eu".into()),
                ("message", "hi".into()),
                ("owner", "ann".into()),
            ])
        );
        // Missing sources: rename, copy and a value that is one field set nothing.
        let got = run(&f, "t", &m(&[("x", 1.into())]));
        assert_eq!(
            got,
            m(&[
                ("x", 1.into()),
                ("env", "prod".into()),
                ("n", 3.into()),
                ("host", "default".into()),
                ("region", "eu".into()),
            ])
        );
    }

    #[test]
    fn nested_paths_and_keep() {
        let f = modify(
            r#"
remove = ["$.http.headers.cookie"]
keep = ["seq", "$.http.code", "$.http.headers"]
[set]
"$.k8s.cluster" = "c1"
"$.http.route" = "${record.http.path}"
"#,
        );
        let rec = m(&[
            ("seq", 1.into()),
            ("drop", "me".into()),
            (
                "http",
                m(&[
                    ("path", "/a".into()),
                    ("code", 200.into()),
                    ("headers", m(&[("cookie", "c".into()), ("ua", "x".into())])),
                ]),
            ),
        ]);
        assert_eq!(
            run(&f, "t", &rec),
            m(&[
                ("seq", 1.into()),
                (
                    "http",
                    m(&[
                        ("code", 200.into()),
                        ("headers", m(&[("ua", "x".into())])),
                        ("route", "/a".into()),
                    ])
                ),
                ("k8s", m(&[("cluster", "c1".into())])),
            ])
        );
        // A nested change through a value that is not a map leaves it.
        let rec = m(&[("seq", 2.into()), ("http", "plain".into())]);
        assert_eq!(
            run(&f, "t", &rec),
            m(&[
                ("seq", 2.into()),
                ("http", "plain".into()),
                ("k8s", m(&[("cluster", "c1".into())])),
            ])
        );
    }

    #[test]
    fn templates() {
        let f = modify(
            r#"
time_format = "%Y-%m-%d %H:%M:%S"
[set]
t = "${tag}"
p = "${tag_parts[1]}/${tag_parts[-1]}/${tag_parts[9]}"
h = "on ${hostname}"
at = "${time}"
txt = "n=${record.n} m=${record.x.y} s=${record.s}"
"#,
        );
        let host = gethostname::gethostname().to_string_lossy().into_owned();
        let got = run(
            &f,
            "app.web.api",
            &m(&[("n", 5.into()), ("s", "str".into())]),
        );
        assert_eq!(
            got,
            m(&[
                ("n", 5.into()),
                ("s", "str".into()),
                ("t", "app.web.api".into()),
                ("p", "web/api/".into()),
                ("h", format!("on {host}").into()),
                ("at", "2026-11-22 01:02:03".into()),
                ("txt", "n=5 m= s=str".into()),
            ])
        );
        let f = modify("[set]\nat = \"${time}\"\n");
        assert_eq!(
            run(&f, "t", &m(&[])),
            m(&[("at", "2026-11-22T01:02:03.000000005Z".into())])
        );
    }

    #[test]
    fn pairs_appended_to_records_without_the_changed_keys() {
        let f = modify("[set]\nhost = \"h1\"\nsource = \"${tag}\"\n[add]\nenv = 7\n");
        assert!(f.appends.is_some(), "these changes only append pairs");
        let added = [
            ("host", V::from("h1")),
            ("source", "app.web".into()),
            ("env", 7.into()),
        ];
        let with = |pairs: &[(&str, V)]| {
            let mut all = pairs.to_vec();
            all.extend(added.iter().cloned());
            m(&all)
        };
        // No changed key: the pairs are appended; a map of 15 pairs grows
        // past what a fixmap header holds.
        let fifteen: Vec<(String, V)> = (0..15).map(|i| (format!("k{i}"), V::from(i))).collect();
        let fifteen: Vec<(&str, V)> = fifteen
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        let nested = [
            ("a", m(&[("host", "inner".into())])),
            ("b", V::Array(vec![1.into()])),
        ];
        for rec in [&[][..], &fifteen, &nested] {
            assert_eq!(run(&f, "app.web", &m(rec)), with(rec));
        }
        // A changed key in the record: set replaces it in place, add keeps it.
        assert_eq!(
            run(
                &f,
                "app.web",
                &m(&[
                    ("env", "dev".into()),
                    ("host", "old".into()),
                    ("x", 1.into())
                ])
            ),
            m(&[
                ("env", "dev".into()),
                ("host", "h1".into()),
                ("x", 1.into()),
                ("source", "app.web".into()),
            ])
        );
        // A record that is not a map goes on as it was; one batch of both
        // kinds, in two parts, keeps its order.
        let mut a = Vec::new();
        let mut b = Vec::new();
        let records = [
            m(&[("s", 1.into())]),
            "not a map".into(),
            m(&[("host", "x".into())]),
        ];
        for (i, r) in records.iter().enumerate() {
            let mut bytes = Vec::new();
            rmpv::encode::write_value(&mut bytes, r).unwrap();
            write_entry(
                if i == 0 { &mut a } else { &mut b },
                EventTime::new(1, 0),
                &bytes,
            );
        }
        let (out, n) = f
            .filter("app.web", &[Bytes::from(a), Bytes::from(b)], 3)
            .batch
            .unwrap();
        assert_eq!(n, 3);
        let got: Vec<V> = nagare_core::record::entries(&out)
            .map(|(_, r, _)| rmpv::decode::read_value(&mut &r[..]).unwrap())
            .collect();
        let want = [
            with(&[("s", 1.into())]),
            "not a map".into(),
            m(&[
                ("host", "h1".into()),
                ("source", "app.web".into()),
                ("env", 7.into()),
            ]),
        ];
        assert_eq!(got, want);
        // A template reading the record or the time, or a keep list, takes
        // the general rewrite.
        for other in [
            "[set]\nt = \"${time}\"\n",
            "[set]\nc = \"${record.s}\"\n",
            "remove = [\"s\"]\n",
            "keep = [\"s\"]\n[set]\na = 1\n",
        ] {
            assert!(modify(other).appends.is_none(), "{other}");
        }
    }

    #[test]
    fn bad_options_name_their_key() {
        let e = build_err("[set]\na = \"${tags}\"\n");
        assert_eq!(e.key, "set.a");
        assert!(
            e.message.contains("unknown template variable `${tags}`"),
            "{e}"
        );
        let e = build_err("[set]\na = \"${tag_parts[x]}\"\n");
        assert_eq!(e.key, "set.a");
        let e = build_err("[set]\na = \"${tag\"\n");
        assert!(e.message.contains("closing"), "{e}");
        let e = build_err("remove = [\"a\"]\n[set]\na = 1\n");
        assert_eq!(e.key, "remove");
        assert!(e.message.contains("already changed"), "{e}");
        let e = build_err("[set]\na = 1\n\"$.a.b\" = 2\n");
        assert_eq!(e.key, "set.$.a.b");
        let e = build_err("[rename]\na = 1\n");
        assert_eq!(e.key, "rename.a");
        let e = build_err("keep = [\"$.\"]\n");
        assert_eq!(e.key, "keep");
        let e = build_err("time_format = \"%Q\"\n[set]\na = 1\n");
        assert_eq!(e.key, "time_format");
        assert!(build_err("").message.contains("at least one change"));
    }
}
