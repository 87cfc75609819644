//! The one walker over events: the PackedForward entries of a batch
//! (`[time, record]`) and the fields of their records (msgpack maps), read
//! in place, without decoding the values it passes over. Inputs' batches,
//! filters, outputs and formats all walk with it:
//!
//! - entries: [`entries`] (time, record, entry), [`entry_bounds`] (where
//!   each record starts and ends), [`entries_with_field`] (each record with
//!   one top-level field, in the same walk), [`retain`] and [`retain_with`]
//!   (the entries a filter keeps, with the fields it reads: [`Fields`]);
//! - fields: [`field`] (a top-level str or bin value), [`field_text`]
//!   (any top-level value as text), [`FieldPath`] and
//!   [`find_key`] (a field by path), [`value_text`];
//! - the steps: [`skip`], [`str_at`], [`map_at`], [`pair_at`], [`entry_at`].
//!
//! Path syntax (Fluentd's record_accessor): `name` is the top-level key
//! `name` as written, dots included; `$.a.b` is the key `b` inside the map
//! under the top-level key `a`.

use bytes::Bytes;
use nagare_forward::msgpack::{read_map_len, read_str_or_bin, skip_value};
use nagare_forward::EventTime;

// The walks below run for every event a field filter sees: the common
// scalar and string forms are read here, inline; the rest (nested maps
// and arrays, ext, long strings) by the general msgpack scanner.

/// Where the value at `pos` ends.
#[inline]
pub fn skip(buf: &[u8], pos: usize) -> Option<usize> {
    let b = *buf.get(pos)?;
    let end = match b {
        0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => pos + 1,
        0xa0..=0xbf => pos + 1 + (b & 0x1f) as usize,
        0xcc | 0xd0 => pos + 2,
        0xcd | 0xd1 => pos + 3,
        0xca | 0xce | 0xd2 => pos + 5,
        0xcb | 0xcf | 0xd3 => pos + 9,
        // fixext 8: an EventTime.
        0xd7 => pos + 10,
        0xc4 | 0xd9 => pos + 2 + *buf.get(pos + 1)? as usize,
        _ => return skip_value(buf, pos).ok(),
    };
    (end <= buf.len()).then_some(end)
}

/// The text (start, end) of a str or bin at `pos` (a key, or a value read
/// as text), or `None` for another type.
#[inline]
pub fn str_at(buf: &[u8], pos: usize) -> Option<(usize, usize)> {
    let (start, len) = match *buf.get(pos)? {
        b @ 0xa0..=0xbf => (pos + 1, (b & 0x1f) as usize),
        0xc4 | 0xd9 => (pos + 2, *buf.get(pos + 1)? as usize),
        _ => return read_str_or_bin(buf, pos).ok().flatten(),
    };
    (start + len <= buf.len()).then_some((start, start + len))
}

/// The number of pairs and the first key's position of the map at `pos`.
#[inline]
pub fn map_at(buf: &[u8], pos: usize) -> Option<(usize, usize)> {
    match *buf.get(pos)? {
        b @ 0x80..=0x8f => Some(((b & 0x0f) as usize, pos + 1)),
        _ => read_map_len(buf, pos).ok(),
    }
}

/// One pair of a map: its key's text when it is a str or bin, where its
/// value starts and ends.
#[derive(Debug, Clone, Copy)]
pub struct PairAt {
    pub key: Option<(usize, usize)>,
    pub value: usize,
    pub end: usize,
}

/// The pair at `pos` of a map.
#[inline]
pub fn pair_at(buf: &[u8], pos: usize) -> Option<PairAt> {
    let key = str_at(buf, pos);
    let value = match key {
        Some((_, e)) => e,
        None => skip(buf, pos)?,
    };
    Some(PairAt {
        key,
        value,
        end: skip(buf, value)?,
    })
}

/// The `[time, record]` entry at `pos` of `part`: where its record starts
/// and where the entry ends; `None` at the end of the part. Entries were
/// checked on the way in: a malformed one would be a bug, and `None`
/// (ending the walk) is the safe answer.
#[inline]
pub fn entry_at(part: &[u8], pos: usize) -> Option<(usize, usize)> {
    if pos >= part.len() {
        return None;
    }
    // 0x92, time, record.
    let record = skip(part, pos + 1)?;
    let end = match map_at(part, record) {
        Some((n, mut p)) => {
            for _ in 0..n {
                p = pair_at(part, p)?.end;
            }
            p
        }
        None => skip(part, record)?,
    };
    Some((record, end))
}

/// The PackedForward entries of a batch part: (record start, entry end)
/// of each `[time, record]` (entry start is the previous end).
pub fn entry_bounds(part: &[u8]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut pos = 0;
    std::iter::from_fn(move || {
        let (record, end) = entry_at(part, pos)?;
        pos = end;
        Some((record, end))
    })
}

/// Iterates the entries of a batch part: yields (time, record, whole entry).
pub struct Entries<'a> {
    part: &'a [u8],
    pos: usize,
}

/// The entries of a batch part (see [`Entries`]).
pub fn entries(part: &[u8]) -> Entries<'_> {
    Entries { part, pos: 0 }
}

impl<'a> Iterator for Entries<'a> {
    type Item = (EventTime, &'a [u8], &'a [u8]);

    /// (time, record, whole entry)
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let start = self.pos;
        let (record, end) = entry_at(self.part, start)?;
        self.pos = end;
        let time = entry_time(&self.part[start..record]);
        Some((time, &self.part[record..end], &self.part[start..end]))
    }
}

/// Iterates the entries of a batch part, finding in each record the value
/// of the top-level key `key` (as [`field`] does) in the same walk: yields (record,
/// that value). For outputs that send one field of each record (the scribe
/// output's messages): `entries` and then `field` walked every record twice,
/// a fifth of a Scribe relay's CPU at 100 B.
pub fn entries_with_field<'a>(
    buf: &'a [u8],
    key: &'a [u8],
) -> impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)> {
    let mut key_head = Vec::with_capacity(key.len() + 5);
    nagare_forward::msgpack::write_str(&mut key_head, key);
    let mut pos = 0;
    std::iter::from_fn(move || {
        let (record, end, value) = match one_key_entry(buf, pos, &key_head) {
            Some((record, end, value)) => (record, end, Some(value)),
            // Entries were checked on the way in; a failure here means a
            // bug, and ending the iteration is the safe answer.
            None => entry_with_field(buf, pos, key)?,
        };
        pos = end;
        Some((&buf[record..end], value))
    })
}

/// The entry at `pos` when it is `[EventTime, {key: str or bin}]` with the
/// key written as `key_head` (a str of the shortest header, as every input
/// writes it): the record the scribe, tail and other line inputs make of a
/// line. Read at fixed offsets; None when the entry is anything else (the
/// general walk, `entry_with_field`, then reads it). Returns where the
/// record starts, where the entry ends, and the value.
#[inline]
fn one_key_entry<'a>(
    buf: &'a [u8],
    pos: usize,
    key_head: &[u8],
) -> Option<(usize, usize, &'a [u8])> {
    // `0x92`, then an EventTime: fixext 8 (0xd7, its type, 8 bytes).
    let record = pos + 11;
    // A map of one entry (0x81), whose key is `key_head`.
    if buf.get(pos + 1) != Some(&0xd7) || buf.get(record) != Some(&0x81) {
        return None;
    }
    let value = record + 1 + key_head.len();
    if buf.get(record + 1..value)? != key_head {
        return None;
    }
    let (a, b) = read_str_or_bin(buf, value).ok()??;
    Some((record, b, &buf[a..b]))
}

/// The entry at `pos`: where its record starts, where the entry ends, and
/// the record's `key` value (the first pair of that key, when its value is
/// a str or bin).
fn entry_with_field<'a>(
    buf: &'a [u8],
    pos: usize,
    key: &[u8],
) -> Option<(usize, usize, Option<&'a [u8]>)> {
    let record = skip(buf, pos + 1)?;
    let Some((n, mut p)) = map_at(buf, record) else {
        return Some((record, skip(buf, record)?, None));
    };
    let (mut value, mut seen) = (None, false);
    for _ in 0..n {
        let pair = pair_at(buf, p)?;
        // The first `key` only, as `field`.
        if !seen && pair.key.is_some_and(|(a, b)| &buf[a..b] == key) {
            seen = true;
            value = str_at(buf, pair.value).map(|(a, b)| &buf[a..b]);
        }
        p = pair.end;
    }
    Some((record, p, value))
}

/// The value of the top-level key `key` of a record (its first pair) when
/// it is a str or bin: its bytes.
pub fn field<'a>(record: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    let (value, _) = find_key(record, 0, key)?;
    str_at(record, value).map(|(a, b)| &record[a..b])
}

/// A top-level field's value as text: a string or binary as it is, any
/// other value (a number, a boolean, a map, an array) as its JSON text; nil
/// or no such field: None. Outputs read the fields they are told to with
/// this, so an integer pid or severity reads as "1234" or "5", as Fluent
/// Bit's outputs print them.
pub fn field_text<'a>(record: &'a [u8], key: &[u8]) -> Option<std::borrow::Cow<'a, [u8]>> {
    let (value, _) = find_key(record, 0, key)?;
    if let Some((a, b)) = str_at(record, value) {
        return Some(std::borrow::Cow::Borrowed(&record[a..b]));
    }
    let v = record.get(value..)?;
    if v.first() == Some(&0xc0) {
        return None;
    }
    let mut text = Vec::new();
    crate::json::write_value(&mut text, v);
    Some(std::borrow::Cow::Owned(text))
}

/// The time in an entry's head (0x92 and the time): an EventTime, or whole
/// seconds (the forward protocol allows both).
pub fn entry_time(head: &[u8]) -> EventTime {
    match head.get(1..) {
        Some([0xd7, 0x00, payload @ ..]) if payload.len() == 8 => EventTime::from_payload(payload),
        Some(t) => nagare_forward::msgpack::read_uint(t, 0)
            .ok()
            .flatten()
            .map_or(EventTime::new(0, 0), |(s, _)| EventTime::new(s as u32, 0)),
        None => EventTime::new(0, 0),
    }
}

/// The entries of a batch for which `keep(record, entry)` is true, as a
/// new batch and its count; `None` when every entry is kept (the batch goes
/// on as it came, uncopied). The new batch is made at the first entry not
/// kept, with every entry before it, then entry by entry.
pub fn retain(parts: &[Bytes], mut keep: impl FnMut(&[u8], &[u8]) -> bool) -> Option<(Bytes, u32)> {
    retain_with(parts, &Fields::default(), |record, entry, _| {
        keep(record, entry)
    })
}

/// `retain` for a filter that reads `fields`: `keep(record, entry, spans)`
/// also gets where each field is in the record (`Fields::entry`), found
/// in the same walk that finds the entry's end.
pub fn retain_with(
    parts: &[Bytes],
    fields: &Fields,
    mut keep: impl FnMut(&[u8], &[u8], &[Span]) -> bool,
) -> Option<(Bytes, u32)> {
    let mut out: Option<Vec<u8>> = None;
    let mut kept = 0u32;
    let mut spans = vec![None; fields.len()];
    for (i, part) in parts.iter().enumerate() {
        let mut offset = 0;
        while let Some((r, end)) = fields.entry(part, offset, &mut spans) {
            let entry = &part[offset..end];
            if keep(&part[r..end], entry, &spans) {
                kept += 1;
                if let Some(o) = &mut out {
                    o.extend_from_slice(entry);
                }
            } else if out.is_none() {
                let mut o = Vec::with_capacity(parts.iter().map(|p| p.len()).sum());
                parts[..i].iter().for_each(|p| o.extend_from_slice(p));
                o.extend_from_slice(&part[..offset]);
                out = Some(o);
            }
            offset = end;
        }
    }
    out.map(|o| (Bytes::from(o), kept))
}

/// Where a field's value is in a record (start, end), or `None` when the
/// record does not have the field.
pub type Span = Option<(usize, usize)>;

/// The fields a filter reads, found in one walk of each record's top-level
/// map: the walk that finds where the entry ends (see `entries`) also
/// notes the values of the keys it passes, so finding a field costs no
/// second walk.
#[derive(Debug, Default)]
pub struct Fields {
    paths: Vec<FieldPath>,
}

impl Fields {
    /// The index of `path` among the fields, added when new.
    pub fn add(&mut self, path: &FieldPath) -> usize {
        self.paths
            .iter()
            .position(|p| p == path)
            .unwrap_or_else(|| {
                self.paths.push(path.clone());
                self.paths.len() - 1
            })
    }

    pub fn len(&self) -> usize {
        self.paths.len()
    }

    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// Walks the `[time, record]` entry at `pos` of `part` (checked on the
    /// way in): returns where its record starts and where it ends (`None`
    /// at the end of the part), and sets `spans[i]` to where field `i` is
    /// in the record (relative to the record's start), as
    /// `FieldPath::find` would find it (the first pair of a key).
    #[inline]
    pub fn entry(&self, part: &[u8], pos: usize, spans: &mut [Span]) -> Option<(usize, usize)> {
        if pos >= part.len() {
            return None;
        }
        let record = skip(part, pos + 1)?;
        // Not `fill(None)`: that copies a whole 24-byte None from the stack,
        // a store-forwarding stall measured at ~40 % of this walk.
        for span in spans.iter_mut() {
            *span = None;
        }
        let Some((n, mut p)) = map_at(part, record) else {
            return Some((record, skip(part, record)?));
        };
        for _ in 0..n {
            let pair = pair_at(part, p)?;
            if let Some((a, b)) = pair.key {
                let key = &part[a..b];
                for (path, span) in self.paths.iter().zip(spans.iter_mut()) {
                    if span.is_some() || !same_key(&path.keys[0], key) {
                        continue;
                    }
                    *span = match &path.keys[1..] {
                        [] => Some((pair.value - record, pair.end - record)),
                        inner => find_in(&part[record..pair.end], pair.value - record, inner),
                    };
                }
            }
            p = pair.end;
        }
        Some((record, p))
    }
}

/// `a == b` for keys, compared inline: as a call to memcmp, the compare of
/// short keys (a few bytes) was ~9 % of a grep filter's time.
#[inline]
fn same_key(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// A field of a record: the keys from the top-level map down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldPath {
    pub keys: Vec<Vec<u8>>,
}

impl FieldPath {
    /// Reads `name` or `$.a.b`; the error says what is wrong in the user's terms.
    pub fn parse(s: &str) -> Result<FieldPath, String> {
        let keys: Vec<Vec<u8>> = match s.strip_prefix("$.") {
            Some(rest) => rest.split('.').map(|k| k.as_bytes().to_vec()).collect(),
            None if s == "$" || s.starts_with("$[") => {
                return Err(format!(
                "{s:?}: write a nested field as `$.a.b` (`$` alone and `$[…]` are not supported)"
            ))
            }
            None => vec![s.as_bytes().to_vec()],
        };
        if keys.iter().any(|k| k.is_empty()) {
            return Err(format!(
                "{s:?} is not a field: write `name` for a top-level key or `$.a.b` for a nested one"
            ));
        }
        Ok(FieldPath { keys })
    }

    /// Where the field's value is in `record` (start, end), if it has one.
    pub fn find(&self, record: &[u8]) -> Option<(usize, usize)> {
        find_in(record, 0, &self.keys)
    }
}

/// Where the value under `keys` (from the map at `pos` down) is in `buf`.
fn find_in(buf: &[u8], pos: usize, keys: &[Vec<u8>]) -> Option<(usize, usize)> {
    let mut span = (pos, buf.len());
    for key in keys {
        span = find_key(buf, span.0, key)?;
    }
    Some(span)
}

/// The value (start, end) of the string key `key` in the map at `pos` of
/// `buf`; `None` when there is no such key or the value at `pos` is not a map.
pub fn find_key(buf: &[u8], pos: usize, key: &[u8]) -> Option<(usize, usize)> {
    let (n, mut p) = map_at(buf, pos)?;
    for _ in 0..n {
        let pair = pair_at(buf, p)?;
        if pair.key.is_some_and(|(a, b)| &buf[a..b] == key) {
            return Some((pair.value, pair.end));
        }
        p = pair.end;
    }
    None
}

/// The text of a msgpack value, as a string match or a template sees it:
/// a str or bin as its bytes, nil as "" (Fluentd's `nil.to_s`), anything
/// else as JSON (`42`, `true`, `[1,"a"]`). Text that is not a str or bin is
/// written to `scratch`.
#[inline]
pub fn value_text<'a>(value: &'a [u8], scratch: &'a mut Vec<u8>) -> &'a [u8] {
    if let Some((a, b)) = str_at(value, 0) {
        return &value[a..b];
    }
    if value.first() == Some(&0xc0) {
        return b"";
    }
    scratch.clear();
    crate::json::write_value(scratch, value);
    scratch
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmpv::Value;

    fn enc(v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, v).unwrap();
        out
    }

    #[test]
    fn field_text_reads_any_value_as_text() {
        let rec = enc(&Value::Map(vec![
            ("user".into(), "alice".into()),
            ("n".into(), 42.into()),
            ("tags".into(), Value::Array(vec!["a".into()])),
            ("none".into(), Value::Nil),
        ]));
        let text = |k: &str| field_text(&rec, k.as_bytes()).map(|v| v.into_owned());
        assert_eq!(text("user").as_deref(), Some(&b"alice"[..]));
        assert_eq!(text("n").as_deref(), Some(&b"42"[..]));
        assert_eq!(text("tags").as_deref(), Some(&br#"["a"]"#[..]));
        assert_eq!(text("none"), None);
        assert_eq!(text("missing"), None);
        assert_eq!(field_text(&[0xc1], b"user"), None, "not a map");
    }

    #[test]
    fn paths_find_top_level_and_nested_fields() {
        let rec = enc(&Value::Map(vec![
            ("a.b".into(), "dotted".into()),
            (
                "a".into(),
                Value::Map(vec![(1.into(), 2.into()), ("b".into(), 7.into())]),
            ),
            ("s".into(), "x".into()),
        ]));
        let get = |p: &str| {
            FieldPath::parse(p)
                .unwrap()
                .find(&rec)
                .map(|(a, b)| rmpv::decode::read_value(&mut &rec[a..b]).unwrap())
        };
        assert_eq!(get("a.b"), Some("dotted".into()));
        assert_eq!(get("$.a.b"), Some(7.into()));
        assert_eq!(get("$.a.c"), None);
        assert_eq!(get("$.s.x"), None, "a string has no fields");
        assert_eq!(get("zz"), None);
        for bad in ["", "$", "$.", "$.a..b", "$['a']"] {
            assert!(FieldPath::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn fields_are_found_in_the_walk_as_find_finds_them() {
        let paths = ["a", "$.a.b", "$.n.x.y", "dup", "zz", "$.s.x"];
        let mut fields = Fields::default();
        let ids: Vec<usize> = paths
            .iter()
            .map(|p| fields.add(&FieldPath::parse(p).unwrap()))
            .collect();
        assert_eq!(
            fields.add(&FieldPath::parse("dup").unwrap()),
            ids[3],
            "a path is added once"
        );
        let records = [
            Value::Map(vec![
                ("dup".into(), 1.into()),
                ("a".into(), Value::Map(vec![("b".into(), "x".into())])),
                ("dup".into(), 2.into()),
                (7.into(), "int key".into()),
                (
                    "n".into(),
                    Value::Map(vec![(
                        "x".into(),
                        Value::Map(vec![("y".into(), true.into())]),
                    )]),
                ),
                ("s".into(), "not a map".into()),
            ]),
            Value::Map(vec![]),
            "not a map".into(),
        ];
        let mut part = Vec::new();
        for r in &records {
            nagare_forward::write_entry(&mut part, nagare_forward::EventTime::new(1, 2), &enc(r));
        }
        let mut spans = vec![None; fields.len()];
        let mut pos = 0;
        let mut walked = Vec::new();
        while let Some((r, end)) = fields.entry(&part, pos, &mut spans) {
            let record = &part[r..end];
            for (p, id) in paths.iter().zip(&ids) {
                assert_eq!(
                    spans[*id],
                    FieldPath::parse(p).unwrap().find(record),
                    "{p} in {record:02x?}"
                );
            }
            walked.push((r, end));
            pos = end;
        }
        assert_eq!(walked, entry_bounds(&part).collect::<Vec<_>>());
        assert!(
            spans[ids[0]].is_none(),
            "the last record (not a map) has no fields"
        );
    }

    #[test]
    fn values_read_as_text() {
        let mut s = Vec::new();
        for (v, want) in [
            (Value::from("abc"), "abc"),
            (Value::Binary(b"raw".to_vec()), "raw"),
            (Value::Nil, ""),
            (Value::from(-42), "-42"),
            (Value::from(true), "true"),
            (Value::Array(vec![1.into(), "a".into()]), "[1,\"a\"]"),
        ] {
            assert_eq!(value_text(&enc(&v), &mut s), want.as_bytes());
        }
    }

    #[test]
    fn entries_are_walked_as_the_general_scanner_walks_them() {
        let values = [
            Value::from(200u8),
            Value::from(300u16),
            Value::from(70_000u32),
            Value::from(1u64 << 40),
            Value::from(-3i64),
            Value::from(-100i64),
            Value::from(-1000i64),
            Value::from(-100_000i64),
            Value::from(-(1i64 << 40)),
            Value::F32(1.5),
            Value::F64(-2.25),
            Value::Nil,
            Value::Boolean(true),
            Value::Binary(vec![0; 300]),
            Value::Binary(vec![1, 2]),
            Value::from("y".repeat(40)),
            Value::from("z".repeat(300)),
            Value::Ext(5, vec![1, 2, 3, 4]),
            Value::Ext(0, vec![0; 8]),
            Value::Array(vec![1.into(), "a".into()]),
            Value::Map(vec![("k".into(), Value::Array(vec![]))]),
        ];
        let mut part = Vec::new();
        for (i, v) in values.iter().enumerate() {
            let rec = Value::Map(vec![
                (format!("k{i}").into(), v.clone()),
                (7.into(), v.clone()),
                ("last".into(), i.into()),
            ]);
            nagare_forward::write_entry(
                &mut part,
                nagare_forward::EventTime::new(1, 2),
                &enc(&rec),
            );
        }
        // A record that is not a map is stepped over too.
        nagare_forward::write_entry(
            &mut part,
            nagare_forward::EventTime::new(1, 2),
            &enc(&"s".into()),
        );
        let fast: Vec<(usize, usize)> = entry_bounds(&part).collect();
        // The general msgpack scanner's walk: skip the time, then the record.
        let mut general = Vec::new();
        let mut at = 0;
        while at < part.len() {
            let record = skip_value(&part, at + 1).unwrap();
            let end = skip_value(&part, record).unwrap();
            general.push((record, end));
            at = end;
        }
        assert_eq!(fast, general);
        // `entries` walks the same entries, with their times.
        let mut at = 0;
        for ((time, record, entry), (r, end)) in entries(&part).zip(&fast) {
            assert_eq!(time, nagare_forward::EventTime::new(1, 2));
            assert_eq!((record, entry), (&part[*r..*end], &part[at..*end]));
            at = *end;
        }
        assert_eq!(entries(&part).count(), fast.len());
        for (i, (r, end)) in fast.iter().take(values.len()).enumerate() {
            let rec = &part[*r..*end];
            let (a, b) = FieldPath::parse("last").unwrap().find(rec).unwrap();
            assert_eq!(
                rmpv::decode::read_value(&mut &rec[a..b]).unwrap(),
                Value::from(i)
            );
        }
    }

    /// The walk and `field` as they were written on the general msgpack
    /// scanner (event.rs before the walkers were one): the reference the
    /// one walker must agree with.
    fn general<'a>(buf: &'a [u8], key: &[u8]) -> Vec<(&'a [u8], Option<&'a [u8]>)> {
        fn field<'a>(record: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
            let (n, mut p) = read_map_len(record, 0).ok()?;
            for _ in 0..n {
                let vstart = match read_str_or_bin(record, p).ok()? {
                    Some((s, e)) if &record[s..e] == key => {
                        return read_str_or_bin(record, e)
                            .ok()
                            .flatten()
                            .map(|(a, b)| &record[a..b]);
                    }
                    Some((_, e)) => e,
                    None => skip_value(record, p).ok()?,
                };
                p = skip_value(record, vstart).ok()?;
            }
            None
        }
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < buf.len() {
            let Ok(tend) = skip_value(buf, pos + 1) else {
                break;
            };
            let Ok(rend) = skip_value(buf, tend) else {
                break;
            };
            out.push((&buf[tend..rend], field(&buf[tend..rend], key)));
            pos = rend;
        }
        out
    }

    #[test]
    fn entries_with_field_agrees_with_entries_and_field() {
        use rmpv::Value;
        let s = |t: &str| Value::from(t);
        let records = [
            Value::Map(vec![(s("message"), s("hello"))]),
            Value::Map(vec![
                (s("a"), Value::from(1)),
                (s("message"), Value::Binary(b"bin".to_vec())),
            ]),
            // Nested values before the key, a non-str key, the key twice.
            Value::Map(vec![
                (s("n"), Value::Map(vec![(s("message"), s("inner"))])),
                (Value::from(7), Value::Array(vec![Value::Nil, s("x")])),
                (s("message"), s("first")),
                (s("message"), s("second")),
            ]),
            // The key with a value that is not a string: none, as `field`.
            Value::Map(vec![
                (s("message"), Value::from(3)),
                (s("message"), s("later")),
            ]),
            Value::Map(vec![(s("other"), s("x"))]),
            Value::Map(vec![]),
            Value::from(42),
        ];
        let mut buf = Vec::new();
        for (i, r) in records.iter().enumerate() {
            buf.push(0x92);
            // An EventTime, and plain seconds.
            if i % 2 == 0 {
                buf.extend_from_slice(&EventTime::new(1_700_000_000, 5).to_bytes());
            } else {
                rmpv::encode::write_value(&mut buf, &Value::from(1_700_000_000u32)).unwrap();
            }
            rmpv::encode::write_value(&mut buf, r).unwrap();
        }
        let want: Vec<_> = entries(&buf)
            .map(|(_, r, _)| (r, field(r, b"message")))
            .collect();
        let got: Vec<_> = entries_with_field(&buf, b"message").collect();
        assert_eq!(got.len(), records.len());
        assert_eq!(got, want);
        assert_eq!(got, general(&buf, b"message"));
        assert_eq!(got[0].1, Some(&b"hello"[..]));
        assert_eq!(got[2].1, Some(&b"first"[..]));
        assert_eq!(got[3].1, None);
        // A cut entry ends the walk, as `entries`.
        assert_eq!(
            entries_with_field(&buf[..buf.len() - 1], b"message").count(),
            records.len() - 1
        );
    }

    #[test]
    fn one_key_entries_are_read_at_fixed_offsets_and_others_walked() {
        use rmpv::Value;
        let s = |t: &str| Value::from(t);
        let time = EventTime::new(1_700_000_000, 5).to_bytes();
        let entry = |time: &[u8], record: &[u8]| [&[0x92][..], time, record].concat();
        let record = |v: &Value| {
            let mut b = Vec::new();
            rmpv::encode::write_value(&mut b, v).unwrap();
            b
        };
        let one = |k: Value, v: Value| record(&Value::Map(vec![(k, v)]));
        let long = "x".repeat(300);
        let mut seconds = Vec::new();
        rmpv::encode::write_value(&mut seconds, &Value::from(1_700_000_000u32)).unwrap();
        // (entry, read at fixed offsets)
        let cases = [
            (entry(&time, &one(s("message"), s("hello"))), true),
            (entry(&time, &one(s("message"), s(""))), true),
            (entry(&time, &one(s("message"), s(&long))), true),
            (
                entry(&time, &one(s("message"), Value::Binary(b"bin".to_vec()))),
                true,
            ),
            // Not a string: no value, from the walk.
            (entry(&time, &one(s("message"), Value::from(3))), false),
            (entry(&time, &one(s("massage"), s("other key"))), false),
            (entry(&time, &one(s("messages"), s("longer key"))), false),
            (
                entry(
                    &time,
                    &one(Value::Binary(b"message".to_vec()), s("bin key")),
                ),
                false,
            ),
            // The key's str with a longer header than it needs (str 8).
            (
                entry(
                    &time,
                    &[&[0x81, 0xd9, 7][..], b"message", &[0xa1, b'y']].concat(),
                ),
                false,
            ),
            (entry(&seconds, &one(s("message"), s("seconds"))), false),
            (
                entry(
                    &time,
                    &record(&Value::Map(vec![(s("message"), s("a")), (s("b"), s("c"))])),
                ),
                false,
            ),
            (entry(&time, &record(&Value::Map(vec![]))), false),
        ];
        let mut key_head = Vec::new();
        nagare_forward::msgpack::write_str(&mut key_head, b"message");
        let mut buf = Vec::new();
        for (e, fast) in &cases {
            buf.extend_from_slice(e);
            let at = buf.len() - e.len();
            assert_eq!(
                one_key_entry(&buf, at, &key_head).is_some(),
                *fast,
                "{e:02x?}"
            );
        }
        let want: Vec<_> = entries(&buf)
            .map(|(_, r, _)| (r, field(r, b"message")))
            .collect();
        let got: Vec<_> = entries_with_field(&buf, b"message").collect();
        assert_eq!(got.len(), cases.len());
        assert_eq!(got, want);
        assert_eq!(got, general(&buf, b"message"));
        assert_eq!(got[0].1, Some(&b"hello"[..]));
        assert_eq!(got[2].1, Some(long.as_bytes()));
        assert_eq!(got[4].1, None);
        assert_eq!(got[8].1, Some(&b"y"[..]));
        // A one-key entry cut short is not read past the end: the walk ends.
        let first = &cases[0].0;
        for cut in 0..first.len() {
            assert_eq!(one_key_entry(&first[..cut], 0, &key_head), None);
            assert_eq!(entries_with_field(&first[..cut], b"message").count(), 0);
        }
    }
}
