//! Field paths and field values in msgpack records, shared by the filters
//! that read fields (grep, modify): a field is found by walking the
//! record's maps, without decoding the values it passes over.
//!
//! Path syntax (Fluentd's record_accessor): `name` is the top-level key
//! `name` as written, dots included; `$.a.b` is the key `b` inside the map
//! under the top-level key `a`.

use nagare_forward::msgpack::{read_map_len, read_str_or_bin, skip_value};

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
        let mut span = (0, record.len());
        for key in &self.keys {
            span = find_key(record, span.0, key)?;
        }
        Some(span)
    }
}

/// The value (start, end) of the string key `key` in the map at `pos` of
/// `buf`; `None` when there is no such key or the value at `pos` is not a map.
pub fn find_key(buf: &[u8], pos: usize, key: &[u8]) -> Option<(usize, usize)> {
    let (n, mut p) = read_map_len(buf, pos).ok()?;
    for _ in 0..n {
        let vstart = match read_str_or_bin(buf, p).ok()? {
            Some((a, b)) => {
                if &buf[a..b] == key {
                    return Some((b, skip_value(buf, b).ok()?));
                }
                b
            }
            None => skip_value(buf, p).ok()?,
        };
        p = skip_value(buf, vstart).ok()?;
    }
    None
}

/// The text of a msgpack value, as a string match or a template sees it:
/// a str or bin as its bytes, nil as "" (Fluentd's `nil.to_s`), anything
/// else as JSON (`42`, `true`, `[1,"a"]`). Text that is not a str or bin is
/// written to `scratch`.
pub fn value_text<'a>(value: &'a [u8], scratch: &'a mut Vec<u8>) -> &'a [u8] {
    if let Ok(Some((a, b))) = read_str_or_bin(value, 0) {
        return &value[a..b];
    }
    if value.first() == Some(&0xc0) {
        return b"";
    }
    scratch.clear();
    crate::formats::json::write_value(scratch, value);
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
}
