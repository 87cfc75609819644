//! Field paths and field values in msgpack records, shared by the filters
//! that read fields (grep, modify, throttle, sample): a field is found by
//! walking the record's maps, without decoding the values it passes over.
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
fn str_at(buf: &[u8], pos: usize) -> Option<(usize, usize)> {
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

/// The PackedForward entries of a batch part: (record start, entry end)
/// of each `[time, record]` (entry start is the previous end).
pub fn entries(part: &[u8]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut pos = 0;
    std::iter::from_fn(move || {
        if pos >= part.len() {
            return None;
        }
        // Entries were checked on the way in: 0x92, time, record.
        let record = skip(part, pos + 1)?;
        pos = match map_at(part, record) {
            Some((n, mut p)) => {
                for _ in 0..n {
                    p = pair_at(part, p)?.end;
                }
                p
            }
            None => skip(part, record)?,
        };
        let p = pos;
        Some((record, p))
    })
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
        assert_eq!(walked, entries(&part).collect::<Vec<_>>());
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
        let fast: Vec<(usize, usize)> = entries(&part).collect();
        let mut general = Vec::new();
        let mut at = 0;
        for (_, record, entry) in crate::event::entries(&part) {
            at += entry.len();
            general.push((at - record.len(), at));
        }
        assert_eq!(fast, general);
        for (i, (r, end)) in fast.iter().take(values.len()).enumerate() {
            let rec = &part[*r..*end];
            let (a, b) = FieldPath::parse("last").unwrap().find(rec).unwrap();
            assert_eq!(
                rmpv::decode::read_value(&mut &rec[a..b]).unwrap(),
                Value::from(i)
            );
        }
    }
}
