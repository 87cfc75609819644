//! Records between msgpack and Lua values, read and written directly (no
//! intermediate form such as serde_json or rmpv values).
//!
//! msgpack → Lua: a map or an array is a table (an array from index 1), a
//! str or bin a Lua string (any bytes), an int an integer (a uint above
//! 2^63-1 a float), a float a float, nil the light userdata `flb_null`
//! (Fluent Bit's `enable_flb_null`: a Lua nil would remove the key), an ext
//! value a userdata that is written back as it was.
//!
//! Lua → msgpack: a table whose keys are exactly 1..n (n > 0) is an array,
//! any other table a map (so `{}` is an empty map, unless the value it
//! replaces was an array); a string is a str when it is UTF-8 and a bin
//! otherwise; integers, floats, booleans, nil and `flb_null` as themselves.
//! A map keeps the key order of the value it replaces (the "hint": the
//! original value at the same place): the keys it had come first in their
//! order, new keys follow sorted, so a script that adds a field does not
//! shuffle the record.

use mlua::{Lua, Table, Value};
use nagare_forward::msgpack::{read_array_len, write_array_len, write_map_len, write_str};

use crate::filters::record;

/// Deeper values are refused (in both directions): a cycle such as
/// `t.self = t` would otherwise never end.
pub const MAX_DEPTH: usize = 64;

/// An ext value (type, data), handed to scripts as an opaque userdata so
/// that it is written back unchanged.
pub struct Ext {
    pub kind: i8,
    pub data: Vec<u8>,
}

/// The msgpack value at the start of `buf` as a Lua value.
pub fn to_lua(lua: &Lua, buf: &[u8]) -> mlua::Result<Value> {
    let mut r = Reader { buf, pos: 0 };
    r.value(lua, 0)
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

fn truncated() -> mlua::Error {
    mlua::Error::runtime("a record ends in the middle of a value")
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> mlua::Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.buf.len());
        let end = end.ok_or_else(truncated)?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn be<const N: usize>(&mut self) -> mlua::Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u8(&mut self) -> mlua::Result<u8> {
        Ok(self.be::<1>()?[0])
    }

    fn u16(&mut self) -> mlua::Result<usize> {
        Ok(u16::from_be_bytes(self.be()?) as usize)
    }

    fn u32(&mut self) -> mlua::Result<usize> {
        Ok(u32::from_be_bytes(self.be()?) as usize)
    }

    fn value(&mut self, lua: &Lua, depth: usize) -> mlua::Result<Value> {
        let b = self.u8()?;
        let int = |i: i64| Ok(Value::Integer(i));
        match b {
            0x00..=0x7f => int(b as i64),
            0xe0..=0xff => int(b as i8 as i64),
            0xc0 => Ok(Value::NULL),
            0xc2 => Ok(Value::Boolean(false)),
            0xc3 => Ok(Value::Boolean(true)),
            0xcc => int(self.u8()? as i64),
            0xcd => int(self.u16()? as i64),
            0xce => int(self.u32()? as i64),
            0xcf => {
                let v = u64::from_be_bytes(self.be()?);
                Ok(i64::try_from(v).map_or(Value::Number(v as f64), Value::Integer))
            }
            0xd0 => int(self.u8()? as i8 as i64),
            0xd1 => int(i16::from_be_bytes(self.be()?) as i64),
            0xd2 => int(i32::from_be_bytes(self.be()?) as i64),
            0xd3 => int(i64::from_be_bytes(self.be()?)),
            0xca => Ok(Value::Number(f32::from_be_bytes(self.be()?) as f64)),
            0xcb => Ok(Value::Number(f64::from_be_bytes(self.be()?))),
            0xa0..=0xbf => self.string(lua, (b & 0x1f) as usize),
            0xd9 | 0xc4 => {
                let n = self.u8()? as usize;
                self.string(lua, n)
            }
            0xda | 0xc5 => {
                let n = self.u16()?;
                self.string(lua, n)
            }
            0xdb | 0xc6 => {
                let n = self.u32()?;
                self.string(lua, n)
            }
            0x90..=0x9f => self.array(lua, (b & 0x0f) as usize, depth),
            0xdc => {
                let n = self.u16()?;
                self.array(lua, n, depth)
            }
            0xdd => {
                let n = self.u32()?;
                self.array(lua, n, depth)
            }
            0x80..=0x8f => self.map(lua, (b & 0x0f) as usize, depth),
            0xde => {
                let n = self.u16()?;
                self.map(lua, n, depth)
            }
            0xdf => {
                let n = self.u32()?;
                self.map(lua, n, depth)
            }
            0xd4 => self.ext(lua, 1),
            0xd5 => self.ext(lua, 2),
            0xd6 => self.ext(lua, 4),
            0xd7 => self.ext(lua, 8),
            0xd8 => self.ext(lua, 16),
            0xc7 => {
                let n = self.u8()? as usize;
                self.ext(lua, n)
            }
            0xc8 => {
                let n = self.u16()?;
                self.ext(lua, n)
            }
            0xc9 => {
                let n = self.u32()?;
                self.ext(lua, n)
            }
            // 0xc1: never used by msgpack.
            _ => Err(mlua::Error::runtime(format!(
                "a record holds the byte {b:#04x}, which is not msgpack"
            ))),
        }
    }

    fn string(&mut self, lua: &Lua, n: usize) -> mlua::Result<Value> {
        Ok(Value::String(lua.create_string(self.take(n)?)?))
    }

    fn ext(&mut self, lua: &Lua, n: usize) -> mlua::Result<Value> {
        let kind = self.u8()? as i8;
        let data = self.take(n)?.to_vec();
        Ok(Value::UserData(lua.create_any_userdata(Ext { kind, data })?))
    }

    fn array(&mut self, lua: &Lua, n: usize, depth: usize) -> mlua::Result<Value> {
        let depth = deeper(depth)?;
        // A length is only a claim: the table grows as elements are read.
        let t = lua.create_table_with_capacity(n.min(1024), 0)?;
        for i in 1..=n {
            t.raw_set(i, self.value(lua, depth)?)?;
        }
        Ok(Value::Table(t))
    }

    fn map(&mut self, lua: &Lua, n: usize, depth: usize) -> mlua::Result<Value> {
        let depth = deeper(depth)?;
        let t = lua.create_table_with_capacity(0, n.min(1024))?;
        for _ in 0..n {
            let k = self.value(lua, depth)?;
            let v = self.value(lua, depth)?;
            // A Lua table cannot have a NaN key; such a pair is left out.
            if !matches!(k, Value::Number(f) if f.is_nan()) {
                t.raw_set(k, v)?;
            }
        }
        Ok(Value::Table(t))
    }
}

fn deeper(depth: usize) -> mlua::Result<usize> {
    if depth >= MAX_DEPTH {
        return Err(mlua::Error::runtime(format!(
            "a record is nested deeper than {MAX_DEPTH} levels"
        )));
    }
    Ok(depth + 1)
}

/// Why a Lua value could not be written as msgpack.
pub type WriteError = String;

/// Writes `v` as msgpack to `out`. `hint` is the msgpack value `v`
/// replaces (from its first byte on), when there is one: it gives maps
/// their key order and an empty table its kind.
pub fn write(out: &mut Vec<u8>, v: &Value, hint: Option<&[u8]>) -> Result<(), WriteError> {
    write_value(out, v, hint, 0)
}

fn write_value(
    out: &mut Vec<u8>,
    v: &Value,
    hint: Option<&[u8]>,
    depth: usize,
) -> Result<(), WriteError> {
    // Writing to a Vec cannot fail: rmp's io errors are ignored below.
    match v {
        Value::Nil => out.push(0xc0),
        Value::LightUserData(p) if p.0.is_null() => out.push(0xc0),
        Value::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Value::Integer(i) => {
            let _ = rmp::encode::write_sint(out, *i);
        }
        Value::Number(f) => {
            let _ = rmp::encode::write_f64(out, *f);
        }
        Value::String(s) => {
            let bytes = s.as_bytes();
            if std::str::from_utf8(&bytes).is_ok() {
                write_str(out, &bytes);
            } else {
                let _ = rmp::encode::write_bin(out, &bytes);
            }
        }
        Value::Table(t) => {
            if depth >= MAX_DEPTH {
                return Err(format!(
                    "a table is nested deeper than {MAX_DEPTH} levels (does it contain itself?)"
                ));
            }
            write_table(out, t, hint, depth + 1)?;
        }
        Value::UserData(u) if u.is::<Ext>() => {
            let ext = u.borrow::<Ext>().map_err(|e| e.to_string())?;
            let _ = rmp::encode::write_ext_meta(out, ext.data.len() as u32, ext.kind);
            out.extend_from_slice(&ext.data);
        }
        other => {
            return Err(format!(
                "{} cannot be a field's value (only tables, strings, numbers, booleans and nil)",
                a(other.type_name())
            ))
        }
    }
    Ok(())
}

/// The elements of `t` when it is a sequence: keys exactly 1..n, n > 0.
pub fn sequence(t: &Table) -> Result<Option<Vec<Value>>, WriteError> {
    let n = t.raw_len();
    if n == 0 {
        return Ok(None);
    }
    let mut items: Vec<Option<Value>> = vec![None; n];
    let mut pairs = 0usize;
    let mut extra = false;
    t.for_each(|k: Value, v: Value| {
        pairs += 1;
        match k {
            Value::Integer(i) if i >= 1 && i as usize <= n => items[i as usize - 1] = Some(v),
            _ => extra = true,
        }
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    if extra || pairs != n {
        return Ok(None);
    }
    Ok(Some(items.into_iter().flatten().collect()))
}

fn write_table(
    out: &mut Vec<u8>,
    t: &Table,
    hint: Option<&[u8]>,
    depth: usize,
) -> Result<(), WriteError> {
    if let Some(items) = sequence(t)? {
        write_array_len(out, items.len());
        let mut hints = hint.and_then(array_elements);
        for v in &items {
            let h = hints.as_mut().and_then(|it| it.next());
            write_value(out, v, h, depth)?;
        }
        return Ok(());
    }
    let mut pairs: Vec<(Value, Value)> = Vec::new();
    t.for_each(|k: Value, v: Value| {
        pairs.push((k, v));
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    if pairs.is_empty() && hint.is_some_and(|h| array_elements(h).is_some()) {
        // `{}` where the record had an array: still an (empty) array.
        write_array_len(out, 0);
        return Ok(());
    }
    // The keys of the value replaced, in order: (key text, where its value is).
    let old: Vec<(&[u8], usize)> = hint.map(map_keys).unwrap_or_default();
    let rank = |k: &Value| match k {
        Value::String(s) => {
            let s = s.as_bytes();
            old.iter().position(|(o, _)| *o == &s[..])
        }
        _ => None,
    };
    let mut order: Vec<(Option<usize>, usize)> =
        pairs.iter().enumerate().map(|(i, (k, _))| (rank(k), i)).collect();
    // Old keys by their old position first, then new ones by their text.
    order.sort_by(|a, b| match (a.0, b.0) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => key_text(&pairs[a.1].0).cmp(&key_text(&pairs[b.1].0)),
    });
    write_map_len(out, pairs.len());
    for (old_at, i) in order {
        let (k, v) = &pairs[i];
        match k {
            Value::String(_) | Value::Integer(_) | Value::Number(_) | Value::Boolean(_) => {
                write_value(out, k, None, depth)?
            }
            other => {
                return Err(format!(
                    "{} cannot be a key (only strings, numbers and booleans)",
                    a(other.type_name())
                ))
            }
        }
        let h = old_at.and_then(|j| hint.map(|h| &h[old[j].1..]));
        write_value(out, v, h, depth)?;
    }
    Ok(())
}

/// "a table", "an integer": a Lua type name in a sentence.
pub fn a(type_name: &str) -> String {
    let article = if type_name.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" };
    format!("{article} {type_name}")
}

/// The text new keys are sorted by.
fn key_text(k: &Value) -> Vec<u8> {
    match k {
        Value::String(s) => s.as_bytes().to_vec(),
        other => format!("{other:?}").into_bytes(),
    }
}

/// The str/bin keys of the map at the start of `hint` and where each
/// value starts; empty when it is not a map.
fn map_keys(hint: &[u8]) -> Vec<(&[u8], usize)> {
    let mut keys = Vec::new();
    let Some((n, mut p)) = record::map_at(hint, 0) else {
        return keys;
    };
    for _ in 0..n {
        let Some(pair) = record::pair_at(hint, p) else {
            break;
        };
        if let Some((a, b)) = pair.key {
            keys.push((&hint[a..b], pair.value));
        }
        p = pair.end;
    }
    keys
}

/// The elements of the array at the start of `hint`, each from its first
/// byte on; `None` when it is not an array.
fn array_elements(hint: &[u8]) -> Option<impl Iterator<Item = &[u8]>> {
    let (n, mut p) = read_array_len(hint, 0).ok()?;
    Some((0..n).map_while(move |_| {
        let at = p;
        p = record::skip(hint, at)?;
        Some(&hint[at..])
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmpv::Value as V;

    fn enc(v: &V) -> Vec<u8> {
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, v).unwrap();
        out
    }

    fn round_trip(lua: &Lua, v: &V) -> V {
        let bytes = enc(v);
        let l = to_lua(lua, &bytes).unwrap();
        let mut out = Vec::new();
        write(&mut out, &l, Some(&bytes)).unwrap();
        rmpv::decode::read_value(&mut &out[..]).unwrap()
    }

    #[test]
    fn records_survive_the_round_trip_with_their_key_order() {
        let lua = Lua::new();
        let v = V::Map(vec![
            ("z".into(), 1.into()),
            ("a".into(), V::from(-5)),
            ("big".into(), V::from(u64::MAX - 1)),
            ("f".into(), V::F64(1.5)),
            ("t".into(), true.into()),
            ("nil".into(), V::Nil),
            ("s".into(), "héllo".into()),
            ("raw".into(), V::Binary(vec![0xff, 0, 1])),
            ("arr".into(), V::Array(vec![1.into(), V::Nil, "x".into()])),
            ("empty_arr".into(), V::Array(vec![])),
            ("empty_map".into(), V::Map(vec![])),
            (
                "nested".into(),
                V::Map(vec![("y".into(), 2.into()), ("b".into(), 3.into())]),
            ),
            ("ext".into(), V::Ext(5, vec![1, 2, 3])),
            (7.into(), "int key".into()),
        ]);
        let got = round_trip(&lua, &v);
        let V::Map(pairs) = got else { panic!() };
        let keys: Vec<String> = pairs.iter().map(|(k, _)| k.to_string()).collect();
        // The int key is not a str: it goes with the new keys, at the end.
        assert_eq!(
            keys,
            [
                "\"z\"", "\"a\"", "\"big\"", "\"f\"", "\"t\"", "\"nil\"", "\"s\"", "\"raw\"",
                "\"arr\"", "\"empty_arr\"", "\"empty_map\"", "\"nested\"", "\"ext\"", "7"
            ]
        );
        let get = |k: &str| pairs.iter().find(|(x, _)| x.as_str() == Some(k)).unwrap().1.clone();
        assert_eq!(get("a"), V::from(-5));
        // Beyond i64: a float (Lua's integers are 64-bit signed).
        assert_eq!(get("big"), V::F64((u64::MAX - 1) as f64));
        assert_eq!(get("f"), V::F64(1.5));
        assert_eq!(get("nil"), V::Nil);
        assert_eq!(get("s"), V::from("héllo"));
        assert_eq!(get("raw"), V::Binary(vec![0xff, 0, 1]));
        assert_eq!(get("arr"), V::Array(vec![1.into(), V::Nil, "x".into()]));
        assert_eq!(get("empty_arr"), V::Array(vec![]));
        assert_eq!(get("empty_map"), V::Map(vec![]));
        assert_eq!(
            get("nested"),
            V::Map(vec![("y".into(), 2.into()), ("b".into(), 3.into())])
        );
        assert_eq!(get("ext"), V::Ext(5, vec![1, 2, 3]));
    }

    #[test]
    fn new_keys_follow_the_old_ones_sorted() {
        let lua = Lua::new();
        let old = enc(&V::Map(vec![("m".into(), 1.into()), ("c".into(), 2.into())]));
        let t: Table = lua
            .load(r#"return { c = 2, m = 1, zz = true, aa = { 1, 2 }, n = 1.25, e = {} }"#)
            .eval()
            .unwrap();
        let mut out = Vec::new();
        write(&mut out, &Value::Table(t), Some(&old)).unwrap();
        let got = rmpv::decode::read_value(&mut &out[..]).unwrap();
        assert_eq!(
            got,
            V::Map(vec![
                ("m".into(), 1.into()),
                ("c".into(), 2.into()),
                ("aa".into(), V::Array(vec![1.into(), 2.into()])),
                ("e".into(), V::Map(vec![])),
                ("n".into(), V::F64(1.25)),
                ("zz".into(), true.into()),
            ])
        );
    }

    #[test]
    fn values_that_are_not_data_are_refused() {
        let lua = Lua::new();
        for (code, want) in [
            ("local t = {} t.self = t return t", "nested deeper than 64"),
            ("return { f = print }", "a function cannot be a field's value"),
            ("return { [{}] = 1 }", "a table cannot be a key"),
        ] {
            let v: Value = lua.load(code).eval().unwrap();
            let err = write(&mut Vec::new(), &v, None).unwrap_err();
            assert!(err.contains(want), "{code}: {err}");
        }
        let mut deep = Vec::new();
        for _ in 0..100 {
            deep.push(0x91);
        }
        deep.push(0x01);
        let err = to_lua(&lua, &deep).unwrap_err().to_string();
        assert!(err.contains("deeper than 64"), "{err}");
        assert!(to_lua(&lua, &[0xc1]).is_err());
        assert!(to_lua(&lua, &[0xa5, b'a']).is_err(), "truncated");
    }
}
