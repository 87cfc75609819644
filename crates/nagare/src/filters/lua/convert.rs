//! Records between msgpack and the Lua stack, through Lua's C API (mlua's
//! `ffi`), with no intermediate form: mlua's safe handles cost a lock and
//! a registry reference per value, several times the work of the
//! conversion itself.
//!
//! msgpack → Lua: a map or an array is a table (an array from index 1), a
//! str or bin a Lua string (any bytes), an int an integer (a uint above
//! 2^63-1 a float), a float a float, nil the light userdata `flb_null`
//! (Fluent Bit's `enable_flb_null`: a Lua nil would remove the key), an ext
//! value a userdata (metatable `nagare.ext`) that is written back as it was.
//!
//! Lua → msgpack: a table whose keys are exactly 1..n (n > 0) is an array,
//! any other table a map (so `{}` is an empty map, unless the value it
//! replaces was an array); a string the script left as it was is written
//! as it came, another one is a str when it is UTF-8 and a bin otherwise;
//! integers, floats, booleans, nil and `flb_null` as themselves.
//! A map keeps the key order of the value it replaces (the "hint": the
//! original value at the same place): the keys it had come first in their
//! order, new keys follow sorted, so a script that adds a field does not
//! shuffle the record.
//!
//! # Safety
//!
//! Every function here takes a `lua_State` that mlua has locked and runs
//! inside a protected call (`Lua::exec_raw`): the only Lua errors the calls
//! below can raise are memory errors, which end that protected call. The
//! functions keep to Lua's stack discipline: they check the stack before
//! growing it, and a caller resets the top after an `Err`.

use std::ffi::{c_int, CStr};

use mlua::ffi::{self, lua_State};
use nagare_core::record;
use nagare_forward::msgpack::{
    read_array_len, read_str_or_bin, write_array_len, write_map_len, write_str,
};

use super::lazy::{self, Lazy};

/// Deeper values are refused (in both directions): a cycle such as
/// `t.self = t` would otherwise never end.
pub const MAX_DEPTH: usize = 64;

/// The metatable of ext values: a userdata of the ext type byte then the data.
pub const EXT: &CStr = c"nagare.ext";

/// "a table", "an integer": a Lua type name in a sentence.
pub fn a(type_name: &str) -> String {
    let article = if type_name.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    format!("{article} {type_name}")
}

/// The type name of the value at `idx`, with its article.
///
/// # Safety
/// `l` is a valid state and `idx` a valid index.
pub unsafe fn type_of(l: *mut lua_State, idx: c_int) -> String {
    let name = CStr::from_ptr(ffi::lua_typename(l, ffi::lua_type(l, idx)));
    a(&name.to_string_lossy())
}

/// The bytes of the string at `idx`, which must be a string (so that
/// `lua_tolstring` does not convert a number in place). They live as long
/// as the value stays on the stack or in a table.
///
/// # Safety
/// `l` is a valid state and the value at `idx` a string.
pub unsafe fn str_at<'a>(l: *mut lua_State, idx: c_int) -> &'a [u8] {
    let mut len = 0usize;
    let p = ffi::lua_tolstring(l, idx, &mut len);
    std::slice::from_raw_parts(p as *const u8, len)
}

/// Pushes the msgpack value at the start of `buf` onto the stack, and
/// says how many bytes of `buf` it took (so the caller need not walk the
/// value a second time to find its end).
///
/// # Safety
/// See the module's safety section.
pub unsafe fn push(l: *mut lua_State, buf: &[u8]) -> Result<usize, String> {
    let mut reader = Reader { buf, pos: 0 };
    reader.push(l, 0)?;
    Ok(reader.pos)
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.buf.len());
        let end = end.ok_or("a record ends in the middle of a value")?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn be<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.be::<1>()?[0])
    }

    fn u16(&mut self) -> Result<usize, String> {
        Ok(u16::from_be_bytes(self.be()?) as usize)
    }

    fn u32(&mut self) -> Result<usize, String> {
        Ok(u32::from_be_bytes(self.be()?) as usize)
    }

    unsafe fn push(&mut self, l: *mut lua_State, depth: usize) -> Result<(), String> {
        let b = self.u8()?;
        match b {
            0x00..=0x7f => ffi::lua_pushinteger(l, b as i64),
            0xe0..=0xff => ffi::lua_pushinteger(l, b as i8 as i64),
            0xc0 => ffi::lua_pushlightuserdata(l, std::ptr::null_mut()),
            0xc2 => ffi::lua_pushboolean(l, 0),
            0xc3 => ffi::lua_pushboolean(l, 1),
            0xcc => ffi::lua_pushinteger(l, self.u8()? as i64),
            0xcd => ffi::lua_pushinteger(l, self.u16()? as i64),
            0xce => ffi::lua_pushinteger(l, self.u32()? as i64),
            0xcf => {
                let v = u64::from_be_bytes(self.be()?);
                match i64::try_from(v) {
                    Ok(i) => ffi::lua_pushinteger(l, i),
                    Err(_) => ffi::lua_pushnumber(l, v as f64),
                }
            }
            0xd0 => ffi::lua_pushinteger(l, self.u8()? as i8 as i64),
            0xd1 => ffi::lua_pushinteger(l, i16::from_be_bytes(self.be()?) as i64),
            0xd2 => ffi::lua_pushinteger(l, i32::from_be_bytes(self.be()?) as i64),
            0xd3 => ffi::lua_pushinteger(l, i64::from_be_bytes(self.be()?)),
            0xca => ffi::lua_pushnumber(l, f32::from_be_bytes(self.be()?) as f64),
            0xcb => ffi::lua_pushnumber(l, f64::from_be_bytes(self.be()?)),
            0xa0..=0xbf => self.string(l, (b & 0x1f) as usize)?,
            0xd9 | 0xc4 => {
                let n = self.u8()? as usize;
                self.string(l, n)?
            }
            0xda | 0xc5 => {
                let n = self.u16()?;
                self.string(l, n)?
            }
            0xdb | 0xc6 => {
                let n = self.u32()?;
                self.string(l, n)?
            }
            0x90..=0x9f => self.array(l, (b & 0x0f) as usize, depth)?,
            0xdc => {
                let n = self.u16()?;
                self.array(l, n, depth)?
            }
            0xdd => {
                let n = self.u32()?;
                self.array(l, n, depth)?
            }
            0x80..=0x8f => self.map(l, (b & 0x0f) as usize, depth)?,
            0xde => {
                let n = self.u16()?;
                self.map(l, n, depth)?
            }
            0xdf => {
                let n = self.u32()?;
                self.map(l, n, depth)?
            }
            0xd4 => self.ext(l, 1)?,
            0xd5 => self.ext(l, 2)?,
            0xd6 => self.ext(l, 4)?,
            0xd7 => self.ext(l, 8)?,
            0xd8 => self.ext(l, 16)?,
            0xc7 => {
                let n = self.u8()? as usize;
                self.ext(l, n)?
            }
            0xc8 => {
                let n = self.u16()?;
                self.ext(l, n)?
            }
            0xc9 => {
                let n = self.u32()?;
                self.ext(l, n)?
            }
            // 0xc1: never used by msgpack.
            _ => {
                return Err(format!(
                    "a record holds the byte {b:#04x}, which is not msgpack"
                ))
            }
        }
        Ok(())
    }

    unsafe fn string(&mut self, l: *mut lua_State, n: usize) -> Result<(), String> {
        let s = self.take(n)?;
        ffi::lua_pushlstring(l, s.as_ptr().cast(), s.len());
        Ok(())
    }

    unsafe fn ext(&mut self, l: *mut lua_State, n: usize) -> Result<(), String> {
        let kind = self.u8()?;
        let data = self.take(n)?;
        let p = ffi::lua_newuserdatauv(l, n + 1, 0) as *mut u8;
        *p = kind;
        std::ptr::copy_nonoverlapping(data.as_ptr(), p.add(1), n);
        ffi::luaL_setmetatable(l, EXT.as_ptr());
        Ok(())
    }

    unsafe fn array(&mut self, l: *mut lua_State, n: usize, depth: usize) -> Result<(), String> {
        room(l, depth)?;
        // A length is only a claim: the table grows as elements are read.
        ffi::lua_createtable(l, n.min(1024) as c_int, 0);
        for i in 1..=n {
            self.push(l, depth + 1)?;
            ffi::lua_rawseti(l, -2, i as i64);
        }
        Ok(())
    }

    unsafe fn map(&mut self, l: *mut lua_State, n: usize, depth: usize) -> Result<(), String> {
        room(l, depth)?;
        // The record itself gets room for two more fields: a script that
        // adds one then does not make Lua grow the table.
        let extra = if depth == 0 { 2 } else { 0 };
        ffi::lua_createtable(l, 0, (n.min(1024) + extra) as c_int);
        for _ in 0..n {
            // Only a float key can be NaN (the common str key is not looked at).
            let float_key = matches!(self.buf.get(self.pos), Some(0xca | 0xcb));
            self.push(l, depth + 1)?;
            self.push(l, depth + 1)?;
            // A Lua table cannot have a NaN key; such a pair is left out.
            let nan_key = float_key && ffi::lua_tonumberx(l, -2, std::ptr::null_mut()).is_nan();
            if nan_key {
                ffi::lua_settop(l, -3);
            } else {
                ffi::lua_rawset(l, -3);
            }
        }
        Ok(())
    }
}

/// Checks the depth, and that the stack has room for a table, a key and a value.
unsafe fn room(l: *mut lua_State, depth: usize) -> Result<(), String> {
    if depth >= MAX_DEPTH {
        return Err(format!(
            "a value is nested deeper than {MAX_DEPTH} levels (a table that contains itself?)"
        ));
    }
    if ffi::lua_checkstack(l, 4) == 0 {
        return Err("the Lua stack is full".into());
    }
    Ok(())
}

/// Where the pairs of a map being written are, to put them in order.
#[derive(Clone, Copy)]
struct Span {
    /// The key's place among the hint's keys (old keys), or `None`.
    old: Option<usize>,
    /// The key's text in `out` (new str keys sort by it), or for a new key
    /// that is not a string, its msgpack (those sort first, by it).
    key: (usize, usize),
    /// The key is a string.
    text: bool,
    start: usize,
    end: usize,
}

/// A str or bin key of the map a table replaces (its hint): where the
/// key's text, its pair and its value are in the hint.
#[derive(Clone, Copy)]
struct OldKey {
    text: (usize, usize),
    pair: usize,
    value: usize,
}

/// Writes Lua values as msgpack; its buffers are reused from value to value.
pub struct Writer {
    spans: Vec<Span>,
    /// The keys of each hint map being written, nested maps' above their
    /// parent's (read once per map, not once per key).
    old_keys: Vec<OldKey>,
    tmp: Vec<u8>,
    /// With `lazy_record`: the event being filtered, whose proxy is
    /// written by `lazy_map`.
    lazy: Option<*mut Lazy>,
    /// The bytes of a Lua string known to be UTF-8 (the event's tag): a
    /// value that is this string is written as a str without a check.
    pub known_utf8: *const u8,
}

impl Default for Writer {
    fn default() -> Writer {
        Writer {
            spans: Vec::new(),
            old_keys: Vec::new(),
            tmp: Vec::new(),
            lazy: None,
            known_utf8: std::ptr::null(),
        }
    }
}

impl Writer {
    /// A writer; `lazy` is the current event with `lazy_record`.
    pub fn new(lazy: Option<*mut Lazy>) -> Writer {
        Writer {
            lazy,
            ..Writer::default()
        }
    }

    /// Writes the value at `idx` (an absolute index) to `out`. `hint` is
    /// the msgpack value it replaces (from its first byte on), if any.
    ///
    /// # Safety
    /// See the module's safety section.
    pub unsafe fn write(
        &mut self,
        l: *mut lua_State,
        idx: c_int,
        out: &mut Vec<u8>,
        hint: Option<&[u8]>,
    ) -> Result<(), String> {
        self.start();
        self.value(l, idx, out, hint, 0)
    }

    /// Before a record: an error may have left spans and keys behind.
    fn start(&mut self) {
        self.spans.clear();
        self.old_keys.clear();
    }

    unsafe fn value(
        &mut self,
        l: *mut lua_State,
        idx: c_int,
        out: &mut Vec<u8>,
        hint: Option<&[u8]>,
        depth: usize,
    ) -> Result<(), String> {
        // Writing to a Vec cannot fail: rmp's io errors are ignored below.
        match ffi::lua_type(l, idx) {
            ffi::LUA_TNIL => out.push(0xc0),
            ffi::LUA_TBOOLEAN => out.push(if ffi::lua_toboolean(l, idx) != 0 {
                0xc3
            } else {
                0xc2
            }),
            ffi::LUA_TLIGHTUSERDATA if ffi::lua_touserdata(l, idx).is_null() => out.push(0xc0),
            ffi::LUA_TNUMBER => {
                if ffi::lua_isinteger(l, idx) != 0 {
                    let _ = rmp::encode::write_sint(
                        out,
                        ffi::lua_tointegerx(l, idx, std::ptr::null_mut()),
                    );
                } else {
                    let _ = rmp::encode::write_f64(
                        out,
                        ffi::lua_tonumberx(l, idx, std::ptr::null_mut()),
                    );
                }
            }
            ffi::LUA_TSTRING => {
                let s = str_at(l, idx);
                // A string the script did not change goes back as it came
                // (a bin stays a bin; no UTF-8 check).
                let same = hint.and_then(|h| match read_str_or_bin(h, 0) {
                    Ok(Some((a, b))) if h[a..b] == *s => Some(&h[..b]),
                    _ => None,
                });
                match same {
                    Some(old) => out.extend_from_slice(old),
                    None => self.new_string(out, s),
                }
            }
            ffi::LUA_TTABLE => {
                room(l, depth)?;
                if let Some(lz) = self
                    .lazy
                    .map(|p| &mut *p)
                    .filter(|lz| lazy::is_current(l, idx, lz))
                {
                    // The record returned (or one of a split): its
                    // untouched pairs are copied. Deeper, it is an
                    // ordinary table once every field is in it.
                    if depth == 0 {
                        return self.lazy_map(l, idx, out, lz);
                    }
                    lazy::materialize(l, idx, lz)?;
                }
                self.table(l, idx, out, hint, depth + 1)?;
            }
            ffi::LUA_TUSERDATA if !ffi::luaL_testudata(l, idx, EXT.as_ptr()).is_null() => {
                let p = ffi::lua_touserdata(l, idx) as *const u8;
                let len = ffi::lua_rawlen(l, idx);
                let all = std::slice::from_raw_parts(p, len);
                if let Some((kind, data)) = all.split_first() {
                    let _ = rmp::encode::write_ext_meta(out, data.len() as u32, *kind as i8);
                    out.extend_from_slice(data);
                }
            }
            _ => {
                return Err(format!(
                "{} cannot be a field's value (only tables, strings, numbers, booleans and nil)",
                type_of(l, idx)
            ))
            }
        }
        Ok(())
    }

    /// Writes a string that is not the one it replaces: a str when it is
    /// UTF-8, a bin otherwise.
    fn new_string(&self, out: &mut Vec<u8>, s: &[u8]) {
        if s.as_ptr() == self.known_utf8 || std::str::from_utf8(s).is_ok() {
            write_str(out, s);
        } else {
            let _ = rmp::encode::write_bin(out, s);
        }
    }

    unsafe fn table(
        &mut self,
        l: *mut lua_State,
        idx: c_int,
        out: &mut Vec<u8>,
        hint: Option<&[u8]>,
        depth: usize,
    ) -> Result<(), String> {
        // Only a table with an array part can be a sequence: the other
        // tables are walked once, as maps.
        let seq = match ffi::lua_rawlen(l, idx) {
            0 => None,
            _ => shape(l, idx).1,
        };
        let Some(n) = seq else {
            return self.map(l, idx, out, hint, depth);
        };
        write_array_len(out, n);
        let mut hints = hint.and_then(array_elements);
        for i in 1..=n {
            ffi::lua_rawgeti(l, idx, i as i64);
            let h = hints.as_mut().and_then(|it| it.next());
            self.value(l, ffi::lua_gettop(l), out, h, depth)?;
            ffi::lua_settop(l, -2);
        }
        Ok(())
    }

    /// Writes the record at `idx`, a table whose `lua_rawlen` is 0 (so a
    /// map), as `write` would, without asking its type and length again.
    ///
    /// # Safety
    /// See the module's safety section.
    pub unsafe fn write_map(
        &mut self,
        l: *mut lua_State,
        idx: c_int,
        out: &mut Vec<u8>,
        hint: Option<&[u8]>,
    ) -> Result<(), String> {
        self.start();
        room(l, 0)?;
        self.map(l, idx, out, hint, 1)
    }

    /// Writes the table at `idx` as a map.
    unsafe fn map(
        &mut self,
        l: *mut lua_State,
        idx: c_int,
        out: &mut Vec<u8>,
        hint: Option<&[u8]>,
        depth: usize,
    ) -> Result<(), String> {
        // The map's length is known at the end: one byte (a fixmap) is
        // kept for it, and grown when the map has 16 pairs or more.
        let header = out.len();
        out.push(0x80);
        let first = out.len();
        let base = self.spans.len();
        let keys_base = self.old_keys.len();
        let h = hint.unwrap_or_default();
        if let Some((n, mut p)) = record::map_at(h, 0) {
            for _ in 0..n {
                let Some(pair) = record::pair_at(h, p) else {
                    break;
                };
                if let Some(text) = pair.key {
                    self.old_keys.push(OldKey {
                        text,
                        pair: p,
                        value: pair.value,
                    });
                }
                p = pair.end;
            }
        }
        let written = self.pairs(l, idx, out, h, keys_base, depth);
        self.old_keys.truncate(keys_base);
        written?;
        let pairs = self.spans.len() - base;
        self.order(out, first, base);
        // `{}` where the record had an array: still an (empty) array.
        let array = pairs == 0 && hint.is_some_and(|h| array_elements(h).is_some());
        finish_map(out, header, first, pairs, array);
        Ok(())
    }

    /// Writes the current event's proxy (`lazy_record`) as its record:
    /// the pairs the script never touched as they came, in their places,
    /// then what the proxy holds, as `table` writes a map.
    unsafe fn lazy_map(
        &mut self,
        l: *mut lua_State,
        idx: c_int,
        out: &mut Vec<u8>,
        lz: &mut Lazy,
    ) -> Result<(), String> {
        let h = lz.record();
        let header = out.len();
        loop {
            out.truncate(header);
            out.push(0x80);
            let first = out.len();
            let base = self.spans.len();
            let keys_base = self.old_keys.len();
            for (j, k) in lz.keys.iter().enumerate() {
                self.old_keys.push(OldKey {
                    text: k.text,
                    pair: k.pair,
                    value: k.value,
                });
                if !lz.touched[j] {
                    let start = out.len();
                    out.extend_from_slice(&h[k.pair..k.end]);
                    self.spans.push(Span {
                        old: Some(j),
                        key: (0, 0),
                        text: true,
                        start,
                        end: out.len(),
                    });
                }
            }
            let copied = self.spans.len();
            let written = self.pairs(l, idx, out, h, keys_base, 1);
            self.old_keys.truncate(keys_base);
            written?;
            // A field set with `rawset` bypassed `__newindex`: its pair was
            // copied as well. Count it touched and write the map again.
            let mut again = false;
            for s in &self.spans[copied..] {
                if let Some(j) = s.old.filter(|&j| !lz.touched[j]) {
                    lz.touched[j] = true;
                    again = true;
                }
            }
            if again {
                self.spans.truncate(base);
                continue;
            }
            let pairs = self.spans.len() - base;
            self.order(out, first, base);
            finish_map(out, header, first, pairs, false);
            return Ok(());
        }
    }

    /// Writes the pairs of the map at `idx`, each with a span; `h` is the
    /// map it replaces (empty when none), whose keys are in `old_keys`
    /// from `keys_base` on.
    unsafe fn pairs(
        &mut self,
        l: *mut lua_State,
        idx: c_int,
        out: &mut Vec<u8>,
        h: &[u8],
        keys_base: usize,
        depth: usize,
    ) -> Result<(), String> {
        // Each pair lands in the same two slots above the top.
        let top = ffi::lua_gettop(l);
        let (k, v) = (top + 1, top + 2);
        ffi::lua_pushnil(l);
        while ffi::lua_next(l, idx) != 0 {
            let mut span = Span {
                old: None,
                key: (0, 0),
                text: true,
                start: out.len(),
                end: 0,
            };
            let mut child_hint = None;
            match ffi::lua_type(l, k) {
                ffi::LUA_TSTRING => {
                    let key = str_at(l, k);
                    let old = self.old_keys[keys_base..]
                        .iter()
                        .position(|o| h[o.text.0..o.text.1] == *key);
                    match old {
                        // A key the record had is written as it came.
                        Some(j) => {
                            let o = self.old_keys[keys_base + j];
                            out.extend_from_slice(&h[o.pair..o.value]);
                            span.old = Some(j);
                            child_hint = Some(&h[o.value..]);
                        }
                        None => {
                            self.new_string(out, key);
                            span.key = (out.len() - key.len(), out.len());
                        }
                    }
                }
                ffi::LUA_TNUMBER | ffi::LUA_TBOOLEAN | ffi::LUA_TLIGHTUSERDATA => {
                    self.value(l, k, out, None, depth)?;
                    span.key = (span.start, out.len());
                    span.text = false;
                }
                _ => {
                    return Err(format!(
                        "{} cannot be a key (only strings, numbers and booleans)",
                        type_of(l, k)
                    ))
                }
            }
            self.value(l, v, out, child_hint, depth)?;
            span.end = out.len();
            self.spans.push(span);
            ffi::lua_settop(l, -2);
        }
        Ok(())
    }

    /// Puts the pairs written from `first` on (spans from `base` on) in
    /// order: old keys by their old place, then new ones by their text.
    fn order(&mut self, out: &mut Vec<u8>, first: usize, base: usize) {
        let spans = &mut self.spans[base..];
        // Keys are unique, so no two spans are equal.
        let cmp = |a: &Span, b: &Span| {
            let place = |s: &Span| s.old.unwrap_or(usize::MAX);
            place(a)
                .cmp(&place(b))
                .then(a.text.cmp(&b.text))
                .then_with(|| out[a.key.0..a.key.1].cmp(&out[b.key.0..b.key.1]))
        };
        if !spans.is_sorted_by(|a, b| cmp(a, b).is_le()) {
            spans.sort_unstable_by(cmp);
            self.tmp.clear();
            self.tmp.extend_from_slice(&out[first..]);
            out.truncate(first);
            for s in spans.iter() {
                out.extend_from_slice(&self.tmp[s.start - first..s.end - first]);
            }
        }
        self.spans.truncate(base);
    }
}

/// Puts the header of a map of `pairs` pairs (or an empty array) in the
/// byte kept for it at `header`; the pairs start at `first`.
fn finish_map(out: &mut Vec<u8>, header: usize, first: usize, pairs: usize, array: bool) {
    if array {
        out[header] = 0x90;
    } else if pairs < 16 {
        out[header] = 0x80 | pairs as u8;
    } else {
        let mut len = Vec::with_capacity(5);
        write_map_len(&mut len, pairs);
        out.splice(header..first, len);
    }
}

/// The number of pairs of the table at `idx`, and its length when it is a
/// sequence (keys exactly 1..n, n > 0).
///
/// # Safety
/// See the module's safety section; the value at `idx` is a table.
pub unsafe fn shape(l: *mut lua_State, idx: c_int) -> (usize, Option<usize>) {
    let n = ffi::lua_rawlen(l, idx);
    let mut pairs = 0usize;
    let mut seq = n > 0;
    ffi::lua_pushnil(l);
    while ffi::lua_next(l, idx) != 0 {
        pairs += 1;
        if seq {
            let i = ffi::lua_tointegerx(l, -2, std::ptr::null_mut());
            seq = ffi::lua_type(l, -2) == ffi::LUA_TNUMBER
                && ffi::lua_isinteger(l, -2) != 0
                && i >= 1
                && i as usize <= n;
        }
        ffi::lua_settop(l, -2);
    }
    (pairs, (seq && pairs == n).then_some(n))
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
    use mlua::Lua;
    use rmpv::Value as V;

    fn enc(v: &V) -> Vec<u8> {
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, v).unwrap();
        out
    }

    fn lua() -> Lua {
        let lua = Lua::new();
        unsafe {
            lua.exec_raw::<()>((), |l| {
                ffi::luaL_newmetatable(l, EXT.as_ptr());
                ffi::lua_settop(l, 0);
            })
            .unwrap();
        }
        lua
    }

    /// Runs `code` (a chunk) on the value pushed from `input`, and writes
    /// what it returns with `input` as the hint.
    fn through(lua: &Lua, code: &str, input: &V) -> Result<V, String> {
        let f: mlua::Function = lua.load(code).eval().unwrap();
        let bytes = enc(input);
        let mut out = Vec::new();
        let mut result = Ok(());
        unsafe {
            lua.exec_raw::<()>(f, |l| {
                result = push(l, &bytes).and_then(|_| {
                    assert_eq!(ffi::lua_pcall(l, 1, 1, 0), ffi::LUA_OK);
                    Writer::default().write(l, ffi::lua_gettop(l), &mut out, Some(&bytes))
                });
                ffi::lua_settop(l, 0);
            })
            .unwrap();
        }
        result.map(|()| rmpv::decode::read_value(&mut &out[..]).unwrap())
    }

    #[test]
    fn records_survive_the_round_trip_with_their_key_order() {
        let lua = lua();
        let v = V::Map(vec![
            ("z".into(), 1.into()),
            ("a".into(), V::from(-5)),
            ("big".into(), V::from(u64::MAX - 1)),
            ("f".into(), V::F64(1.5)),
            ("t".into(), true.into()),
            ("nil".into(), V::Nil),
            ("s".into(), "héllo".into()),
            ("raw".into(), V::Binary(vec![0xff, 0, 1])),
            ("text_bin".into(), V::Binary(b"abc".to_vec())),
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
        let got = through(&lua, "return function(r) return r end", &v).unwrap();
        let V::Map(pairs) = got else { panic!() };
        let keys: Vec<String> = pairs.iter().map(|(k, _)| k.to_string()).collect();
        // The int key is not a str: it goes with the new keys, at the end.
        assert_eq!(
            keys,
            [
                "\"z\"",
                "\"a\"",
                "\"big\"",
                "\"f\"",
                "\"t\"",
                "\"nil\"",
                "\"s\"",
                "\"raw\"",
                "\"text_bin\"",
                "\"arr\"",
                "\"empty_arr\"",
                "\"empty_map\"",
                "\"nested\"",
                "\"ext\"",
                "7"
            ]
        );
        let get = |k: &str| {
            pairs
                .iter()
                .find(|(x, _)| x.as_str() == Some(k))
                .unwrap()
                .1
                .clone()
        };
        assert_eq!(get("a"), V::from(-5));
        // Beyond i64: a float (Lua's integers are 64-bit signed).
        assert_eq!(get("big"), V::F64((u64::MAX - 1) as f64));
        assert_eq!(get("f"), V::F64(1.5));
        assert_eq!(get("nil"), V::Nil);
        assert_eq!(get("s"), V::from("héllo"));
        assert_eq!(get("raw"), V::Binary(vec![0xff, 0, 1]));
        // Unchanged, a bin stays a bin even when its bytes are UTF-8.
        assert_eq!(get("text_bin"), V::Binary(b"abc".to_vec()));
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
    fn a_map_of_16_pairs_or_more_gets_a_longer_header() {
        let lua = lua();
        for n in [15usize, 16, 300] {
            let v = V::Map((0..n).map(|i| (format!("k{i}").into(), i.into())).collect());
            let mut want = v.clone();
            if let V::Map(m) = &mut want {
                m.push(("zz".into(), true.into()));
            }
            let got = through(&lua, "return function(r) r.zz = true return r end", &v);
            assert_eq!(got.unwrap(), want, "{n} pairs");
        }
    }

    #[test]
    fn values_read_in_lua_as_documented() {
        let lua = lua();
        lua.globals()
            .raw_set("flb_null", mlua::Value::NULL)
            .unwrap();
        let v = V::Map(vec![
            ("i".into(), 3.into()),
            ("f".into(), V::F64(2.5)),
            ("n".into(), V::Nil),
            ("a".into(), V::Array(vec!["x".into(), "y".into()])),
        ]);
        let code = r#"return function(r)
            return { math.type(r.i), math.type(r.f), r.n == flb_null, #r.a, r.a[2], r.missing == nil }
        end"#;
        assert_eq!(
            through(&lua, code, &v).unwrap(),
            V::Array(vec![
                "integer".into(),
                "float".into(),
                true.into(),
                2.into(),
                "y".into(),
                true.into()
            ])
        );
    }

    #[test]
    fn a_changed_string_is_a_str_when_it_is_utf8() {
        let lua = lua();
        let v = V::Map(vec![
            ("b".into(), V::Binary(b"abc".to_vec())),
            ("x".into(), V::Binary(b"abc".to_vec())),
        ]);
        let code = r#"return function(r) r.b = r.b .. "d" r.x = r.x .. "\255" return r end"#;
        assert_eq!(
            through(&lua, code, &v).unwrap(),
            V::Map(vec![
                ("b".into(), "abcd".into()),
                ("x".into(), V::Binary(b"abc\xff".to_vec())),
            ])
        );
    }

    #[test]
    fn new_keys_follow_the_old_ones_sorted() {
        let lua = lua();
        let old = V::Map(vec![("m".into(), 1.into()), ("c".into(), 2.into())]);
        let code = r#"return function(r)
            return { c = 2, m = 1, zz = true, aa = { 1, 2 }, n = 1.25, e = {} }
        end"#;
        assert_eq!(
            through(&lua, code, &old).unwrap(),
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
        let lua = lua();
        let empty = V::Map(vec![]);
        for (code, want) in [
            ("local t = {} t.self = t return t", "nested deeper than 64"),
            (
                "return { f = print }",
                "a function cannot be a field's value",
            ),
            ("return { [{}] = 1 }", "a table cannot be a key"),
        ] {
            let code = format!("return function() {code} end");
            let err = through(&lua, &code, &empty).unwrap_err();
            assert!(err.contains(want), "{code}: {err}");
        }
        let mut deep = vec![0x91; 100];
        deep.push(0x01);
        let push_err = |bytes: &[u8]| {
            let mut r = Ok(());
            unsafe {
                lua.exec_raw::<()>((), |l| {
                    r = push(l, bytes).map(|_| ());
                    ffi::lua_settop(l, 0);
                })
                .unwrap();
            }
            r.unwrap_err()
        };
        assert!(push_err(&deep).contains("deeper than 64"));
        assert!(push_err(&[0xc1]).contains("not msgpack"));
        assert!(push_err(&[0xa5, b'a']).contains("middle of a value"));
    }
}
