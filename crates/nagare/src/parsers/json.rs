//! `json`: one JSON object per line, written as msgpack with its keys in
//! order; `time_key` (when set and present) gives the event time.
//!
//! The line is converted by formats::json_msgpack, straight from its bytes
//! (no tree of values). Lines that are not an object, or hold an object
//! with a key twice, get the same answer as through a `serde_json::Value`:
//! an error, or the last value of a repeated key at its first place.

use std::fmt;

use nagare_forward::msgpack::{write_array_len, write_bool, write_map_len, write_str};
use nagare_forward::EventTime;
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::Parser;
use crate::formats::json_msgpack::{object_to_msgpack, Picked, Top};

pub fn parse(
    p: &Parser,
    line: &[u8],
    extra: &[(&[u8], &[u8])],
    out: &mut Vec<u8>,
) -> Result<Option<EventTime>, String> {
    let top = Top {
        pick: p.time_key.as_deref().map(str::as_bytes),
        keep_picked: p.keep_time_key,
        extra,
    };
    match object_to_msgpack(line, &top, out).map_err(|e| e.to_string())? {
        None => Ok(None),
        Some(picked) => {
            let tk = p.time_key.as_deref().unwrap_or_default();
            picked_time(p, tk, &picked).map(Some)
        }
    }
}

/// The event time from time_key's value: a string without escapes is
/// read where it is (the usual `"2026-11-21T10:15:30.123Z"`); anything
/// else through a `Value`.
fn picked_time(p: &Parser, tk: &str, picked: &Picked) -> Result<EventTime, String> {
    match picked {
        Picked::Text(t) => {
            if let [b'"', s @ .., b'"'] = t {
                if !s.contains(&b'\\') {
                    if let Ok(s) = std::str::from_utf8(s) {
                        if let Some(t) = super::parse_time(s, &p.time) {
                            return Ok(t);
                        }
                    }
                }
            }
            let v: Value = serde_json::from_slice(t).unwrap_or(Value::Null);
            event_time(p, tk, &v)
        }
        Picked::Value(v) => event_time(p, tk, v),
    }
}

/// Parses through a `serde_json::Value` (what the transcoder's output is
/// tested against).
#[cfg(test)]
fn parse_tree(
    p: &Parser,
    line: &[u8],
    extra: &[(&[u8], &[u8])],
    out: &mut Vec<u8>,
) -> Result<Option<EventTime>, String> {
    let v: Value = serde_json::from_slice(line).map_err(|e| format!("bad json: {e}"))?;
    let Value::Object(mut map) = v else {
        return Err("not a JSON object".into());
    };
    let mut time = None;
    if let Some(tk) = &p.time_key {
        if let Some(t) = map.get(tk) {
            time = Some(event_time(p, tk, t)?);
            if !p.keep_time_key {
                map.shift_remove(tk);
            }
        }
    }
    write_map_len(out, map.len() + extra.len());
    for (k, v) in &map {
        write_str(out, k.as_bytes());
        nagare_core::json::msgpack_from_json(v, out);
    }
    super::write_extra(extra, out);
    Ok(time)
}

/// The event time in field `tk`.
fn event_time(p: &Parser, tk: &str, t: &Value) -> Result<EventTime, String> {
    let parsed = match t {
        Value::Number(n) => n
            .as_f64()
            .and_then(|f| super::parse_time(&f.to_string(), &super::TimeFmt::Auto)),
        Value::String(s) => super::parse_time(s, &p.time),
        _ => None,
    };
    parsed.ok_or_else(|| format!("time {t} in field {tk:?} does not match the time format"))
}

/// The error of an object with a key twice (the exec filter's answers).
pub(crate) const REPEATED_KEY: &str = "nagare: repeated key";

/// Keeps one byte for the msgpack header of a map or array whose items
/// are written next (their count is known only at the end); returns where.
fn reserve_header(out: &mut Vec<u8>) -> usize {
    out.push(0);
    out.len() - 1
}

/// Writes the header kept at `at` for `n` items: a fixmap or fixarray (up
/// to 15 items, most objects) fills its byte; a longer header moves the
/// items once. (Moving every record for its header cost a tenth of the
/// http input's CPU at 1 KiB events.)
fn write_header(out: &mut Vec<u8>, at: usize, n: usize, map: bool) {
    if n < 16 {
        out[at] = if map { 0x80 } else { 0x90 } | n as u8;
        return;
    }
    let mut header = Vec::with_capacity(5);
    if map {
        write_map_len(&mut header, n);
    } else {
        write_array_len(&mut header, n);
    }
    out.splice(at..at + 1, header);
}

/// Writes an object's pairs (without the map header); returns how many.
fn write_pairs<'de, A: MapAccess<'de>>(out: &mut Vec<u8>, mut map: A) -> Result<usize, A::Error> {
    let mut keys = Keys::default();
    let mut n = 0;
    while let Some(key) = map.next_key_seed(KeyInto(&mut *out))? {
        if !keys.note(out, key) {
            return Err(serde::de::Error::custom(REPEATED_KEY));
        }
        map.next_value_seed(Emit(&mut *out))?;
        n += 1;
    }
    Ok(n)
}

/// Writes a key as a msgpack string; its text is at `out[start..end]`.
struct KeyInto<'a>(&'a mut Vec<u8>);

impl<'de> DeserializeSeed<'de> for KeyInto<'_> {
    type Value = (usize, usize);
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(usize, usize), D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyInto<'_> {
    type Value = (usize, usize);
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }
    fn visit_str<E>(self, v: &str) -> Result<(usize, usize), E> {
        write_str(self.0, v.as_bytes());
        Ok((self.0.len() - v.len(), self.0.len()))
    }
}

/// Where the keys of one object are in `out`, to find a repeated one; the
/// first 16 without an allocation.
#[derive(Default)]
struct Keys {
    few: [(usize, usize); 16],
    n: usize,
    more: Vec<(usize, usize)>,
}

impl Keys {
    /// Notes the key at `out[key.0..key.1]`; false when the object had it
    /// already. Keys of an object stay where they are while it is written:
    /// only the items after a nested value's start move for its header.
    fn note(&mut self, out: &[u8], key: (usize, usize)) -> bool {
        let text = &out[key.0..key.1];
        let seen = self.few[..self.n.min(16)].iter().chain(&self.more);
        if seen.into_iter().any(|&(a, b)| &out[a..b] == text) {
            return false;
        }
        if self.n < 16 {
            self.few[self.n] = key;
        } else {
            self.more.push(key);
        }
        self.n += 1;
        true
    }
}

/// Writes any JSON value as msgpack (as `msgpack_from_json` does for a
/// tree) while serde_json reads it; fails with `REPEATED_KEY` on an object
/// with a key twice (the exec filter reads its answers' records with it).
pub struct Emit<'a>(pub &'a mut Vec<u8>);

impl<'de> DeserializeSeed<'de> for Emit<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Emit<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        self.0.push(0xc0);
        Ok(())
    }
    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        write_bool(self.0, v);
        Ok(())
    }
    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        let _ = rmp::encode::write_uint(self.0, v);
        Ok(())
    }
    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        let _ = rmp::encode::write_sint(self.0, v);
        Ok(())
    }
    fn visit_f64<E>(self, v: f64) -> Result<(), E> {
        let _ = rmp::encode::write_f64(self.0, v);
        Ok(())
    }
    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        write_str(self.0, v.as_bytes());
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let at = reserve_header(self.0);
        let mut n = 0;
        while seq.next_element_seed(Emit(&mut *self.0))?.is_some() {
            n += 1;
        }
        write_header(self.0, at, n, false);
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        let at = reserve_header(self.0);
        let n = write_pairs(self.0, map)?;
        write_header(self.0, at, n, true);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;

    #[test]
    fn the_streaming_path_writes_what_the_tree_path_writes() {
        let big_obj: String = format!(
            "{{{}}}",
            (0..40)
                .map(|i| format!("\"k{i}\":{i}"))
                .collect::<Vec<_>>()
                .join(",")
        );
        // A key repeated after the first 16 (the ones kept without allocating).
        let big_obj_repeat = big_obj.replace("\"k39\"", "\"k3\"");
        let big_arr = format!(
            "{{\"a\":[{}]}}",
            (0..300)
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
        let lines = [
            r#"{}"#,
            r#"  {"a":1}  "#,
            r#"{"s":"x\n\u00e9\"q","e":"","u":"ü日本"}"#,
            r#"{"n":[0,1,-1,127,128,-33,255,65536,-2147483649,18446744073709551615,1.5,-0.0,1e300,123456789012345678901234567890]}"#,
            r#"{"t":true,"f":false,"z":null,"o":{"p":{"q":[[],{},[{"r":1}]]}}}"#,
            r#"{"k\u0041y":1,"kAy2":2}"#,
            r#"{"a":1,"b":2,"a":3}"#,
            r#"{"o":{"x":1,"x":2}}"#,
            r#"{"ts":"2026-11-21T10:15:30.123Z","m":"x"}"#,
            r#"{"m":"x","ts":1795252531.25}"#,
            r#"{"ts":"not a time","m":"x"}"#,
            r#"{"ts":[1],"m":"x"}"#,
            r#"{"a":1,}"#,
            r#"{"a":1} x"#,
            r#"{"a":"#,
            r#"[1,2]"#,
            r#""s""#,
            r#"nope"#,
            "",
            big_obj.as_str(),
            big_arr.as_str(),
            big_obj_repeat.as_str(),
            r#"{"ts":1795252531,"m":"x","ts":"2026-11-21T10:15:30Z"}"#,
        ];
        let extra: &[(&[u8], &[u8])] = &[(b"host", b"h1"), (b"path", b"/x")];
        for cfg in [
            "type = \"json\"",
            "type = \"json\"\ntime_key = \"ts\"",
            "type = \"json\"\ntime_key = \"ts\"\nkeep_time_key = true",
        ] {
            let p = parser(cfg);
            for line in lines {
                for ex in [&[][..], extra] {
                    let (mut a, mut b) = (vec![7u8], vec![7u8]);
                    let streamed = super::parse(&p, line.as_bytes(), ex, &mut a);
                    let tree = super::parse_tree(&p, line.as_bytes(), ex, &mut b);
                    assert_eq!(
                        streamed.is_ok(),
                        tree.is_ok(),
                        "{cfg} {line}: {streamed:?} {tree:?}"
                    );
                    match (streamed, tree) {
                        (Ok(x), Ok(y)) => {
                            assert_eq!(x, y, "{cfg} {line}");
                            assert_eq!(a, b, "{cfg} {line}");
                        }
                        (Err(x), Err(y)) => {
                            // Same kind of error; positions may be reported differently.
                            assert_eq!(x.split(':').next(), y.split(':').next(), "{cfg} {line}");
                        }
                        _ => unreachable!(),
                    }
                }
            }
        }
    }

    #[test]
    fn sample_lines() {
        let p = parser("type = \"json\"\ntime_key = \"ts\"");
        let text = sample("app.jsonl");
        let lines: Vec<&str> = text.lines().collect();
        let (v, t, ok) = run(&p, lines[0]);
        assert!(ok, "{v}");
        assert_eq!(t, Some(utc("2026-11-21T10:15:30.123Z")));
        assert_eq!(
            keys(&v),
            ["level", "msg", "user", "latency_ms", "ok", "tags", "ctx"]
        );
        assert_eq!(s(&v, "level"), "info");
        assert_eq!(get(&v, "latency_ms").unwrap().as_f64(), Some(12.5));
        assert_eq!(get(&v, "ok").unwrap().as_bool(), Some(true));
        assert_eq!(get(&v, "tags").unwrap().as_array().unwrap().len(), 2);
        let ctx = get(&v, "ctx").unwrap();
        assert_eq!(get(ctx, "request_id").unwrap().as_str(), Some("r-17"));
        assert_eq!(get(ctx, "attempt").unwrap().as_i64(), Some(2));
        assert!(get(&v, "user").unwrap().is_nil());
        // A numeric time.
        let (_, t, ok) = run(&p, lines[1]);
        assert!(ok);
        assert_eq!(t.map(|t| t.secs), Some(1_795_252_531));
        // The malformed line is kept with the reason.
        let (v, t, ok) = run(&p, lines[2]);
        assert!(!ok && t.is_none());
        assert_eq!(s(&v, "message"), lines[2]);
        assert!(s(&v, "parse_error").starts_with("bad json"));
        // Not an object.
        let (v, _, ok) = run(&p, "[1,2]");
        assert!(!ok);
        assert_eq!(s(&v, "parse_error"), "not a JSON object");
    }
}
