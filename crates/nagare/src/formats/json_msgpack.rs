//! JSON to msgpack, written straight from the JSON bytes: the one
//! converter of the inputs that receive JSON records (`elasticsearch`,
//! `beats`, `http`, through the `json` parser).
//!
//! A hand-written reader walks the text once and writes each value as it
//! goes: no tree of values, no allocation per field, a string without
//! escapes copied in one piece (found eight bytes at a time). Measured
//! (benches/transcode.rs, docs/benchmarks/receivers.md): serde_json's
//! reader driven through serde's visitors (`parsers::json::Emit`) costs
//! 1.5× as much per 100-byte document and 1.17× per 1 KiB one; a
//! serde_json `Value` tree then msgpack (the gelf input's way before) 3.5×
//! and 1.9×.
//!
//! What this reader does not take, it leaves to serde_json's `Value`, which
//! then gives the answer: malformed JSON (so every error is serde_json's,
//! with its line and column), an object with a key twice (the last value
//! at the first place, as a `Value` map keeps it), lone surrogate escapes,
//! numbers out of range, nesting deeper than 100. The output is the same
//! bytes either way; numbers are read as serde_json reads them (unsigned,
//! negative, or f64 with serde_json's own rounding).

use std::fmt;

use nagare_forward::msgpack::{write_map_len, write_str, write_uint};
use serde_json::Value;

/// What to do with the top-level object besides writing it.
#[derive(Clone, Copy, Default)]
pub struct Top<'a> {
    /// A key whose value the caller wants (a time key): its JSON text is
    /// returned.
    pub pick: Option<&'a [u8]>,
    /// Whether the picked pair stays in the record.
    pub keep_picked: bool,
    /// String pairs added at the end of the record (after its own keys).
    pub extra: &'a [(&'a [u8], &'a [u8])],
}

/// The value of the picked key.
#[derive(Debug)]
pub enum Picked<'j> {
    /// Its JSON text, as sent.
    Text(&'j [u8]),
    /// Read by serde_json (a document the fast reader left to it).
    Value(Value),
}

/// Why a document was not written.
#[derive(Debug)]
pub enum JsonError {
    /// Not JSON: serde_json's message (with line and column).
    Syntax(serde_json::Error),
    /// JSON, but not an object.
    NotAnObject,
}

impl JsonError {
    /// Whether it is JSON followed by more (several documents, which some
    /// senders put in one body).
    pub fn is_trailing(&self) -> bool {
        matches!(self, JsonError::Syntax(e) if e.to_string().starts_with("trailing characters"))
    }
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            JsonError::Syntax(e) => write!(f, "bad json: {e}"),
            JsonError::NotAnObject => f.write_str("not a JSON object"),
        }
    }
}

/// Writes the JSON object `json` as a msgpack map at the end of `out`
/// (with `top.extra` appended); returns the picked key's value, if the
/// object has the key. On an error nothing is left in `out`.
pub fn object_to_msgpack<'j>(
    json: &'j [u8],
    top: &Top,
    out: &mut Vec<u8>,
) -> Result<Option<Picked<'j>>, JsonError> {
    let start = out.len();
    let mut r = Reader { b: json, i: 0 };
    match r.top_object(top, out) {
        Ok(picked) => Ok(picked.map(Picked::Text)),
        Err(Decline) => {
            out.truncate(start);
            tree(json, top, out)
        }
    }
}

/// The pairs of a map that object_to_msgpack wrote: each key's text and
/// where its value is in `map` (for inputs that rearrange a record, as
/// the gelf input does).
pub fn pairs(map: &[u8]) -> Vec<(&[u8], std::ops::Range<usize>)> {
    let (n, mut pos) = match map.first() {
        Some(&b @ 0x80..=0x8f) => ((b & 0x0f) as usize, 1),
        Some(0xde) => (be(map, 1, 2), 3),
        Some(0xdf) => (be(map, 1, 4), 5),
        _ => return Vec::new(),
    };
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let (start, len, _) = head(map, pos);
        let Some(key) = map.get(start..start.saturating_add(len)) else {
            break;
        };
        let value = start + len;
        pos = skip(map, value);
        out.push((key, value..pos));
    }
    out
}

/// The big-endian number of `n` bytes at `at` (0 past the end).
fn be(b: &[u8], at: usize, n: usize) -> usize {
    b.get(at..at + n)
        .map_or(0, |b| b.iter().fold(0, |n, &c| n << 8 | c as usize))
}

/// A header of what this module writes at `pos`: where its payload starts,
/// the payload's length, and the values it holds (a map's pairs twice).
fn head(b: &[u8], pos: usize) -> (usize, usize, usize) {
    let Some(&c) = b.get(pos) else {
        return (b.len(), 0, 0);
    };
    match c {
        0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => (pos + 1, 0, 0),
        0x80..=0x8f => (pos + 1, 0, 2 * (c & 0x0f) as usize),
        0x90..=0x9f => (pos + 1, 0, (c & 0x0f) as usize),
        0xa0..=0xbf => (pos + 1, (c & 0x1f) as usize, 0),
        0xcc | 0xd0 => (pos + 1, 1, 0),
        0xcd | 0xd1 => (pos + 1, 2, 0),
        0xce | 0xd2 => (pos + 1, 4, 0),
        0xcf | 0xd3 | 0xcb => (pos + 1, 8, 0),
        0xd9 => (pos + 2, be(b, pos + 1, 1), 0),
        0xda => (pos + 3, be(b, pos + 1, 2), 0),
        0xdb => (pos + 5, be(b, pos + 1, 4), 0),
        0xdc => (pos + 3, 0, be(b, pos + 1, 2)),
        0xdd => (pos + 5, 0, be(b, pos + 1, 4)),
        0xde => (pos + 3, 0, 2 * be(b, pos + 1, 2)),
        0xdf => (pos + 5, 0, 2 * be(b, pos + 1, 4)),
        // Not written here.
        _ => (b.len(), 0, 0),
    }
}

/// Past the value at `pos`: one count of the values still to pass, so no
/// depth limit.
fn skip(b: &[u8], mut pos: usize) -> usize {
    let mut left = 1usize;
    while left > 0 && pos < b.len() {
        let (start, len, items) = head(b, pos);
        pos = start.saturating_add(len);
        left = left - 1 + items;
    }
    pos.min(b.len())
}

/// The document through serde_json's `Value`: what the fast reader leaves.
fn tree<'j>(json: &'j [u8], top: &Top, out: &mut Vec<u8>) -> Result<Option<Picked<'j>>, JsonError> {
    let v: Value = serde_json::from_slice(json).map_err(JsonError::Syntax)?;
    let Value::Object(mut map) = v else {
        return Err(JsonError::NotAnObject);
    };
    let mut picked = None;
    if let Some(k) = top.pick {
        let k = std::str::from_utf8(k).unwrap_or_default();
        if top.keep_picked {
            picked = map.get(k).cloned();
        } else {
            picked = map.shift_remove(k);
        }
    }
    write_map_len(out, map.len() + top.extra.len());
    for (k, v) in &map {
        write_str(out, k.as_bytes());
        nagare_core::json::msgpack_from_json(v, out);
    }
    write_extra(top.extra, out);
    Ok(picked.map(Picked::Value))
}

fn write_extra(extra: &[(&[u8], &[u8])], out: &mut Vec<u8>) {
    for (k, v) in extra {
        write_str(out, k);
        write_str(out, v);
    }
}

/// The fast reader stops: serde_json reads the document instead.
struct Decline;

type R<T> = Result<T, Decline>;

/// Deeper than this is left to serde_json (its limit is 128).
const MAX_DEPTH: usize = 100;

/// Powers of ten that an f64 holds exactly (serde_json's table, as far as
/// the fast reader uses it).
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// Bytes of `w` that are zero: the lowest flagged byte is exact.
#[inline]
fn zero_bytes(w: u64) -> u64 {
    w.wrapping_sub(LO) & !w & HI
}

/// Where a string's text stops: `"`, `\` or a control character (the
/// first such byte of the 8 is exact); the high bits tell of non-ASCII.
#[inline]
fn stops(w: u64) -> u64 {
    zero_bytes(w ^ (LO * b'"' as u64))
        | zero_bytes(w ^ (LO * b'\\' as u64))
        | zero_bytes_below_space(w)
}

/// For 16 bytes: a bit for each that stops a string's text (`"`, `\`
/// or a control character), and a bit for each non-ASCII one.
#[cfg(target_arch = "x86_64")]
#[inline]
fn stops16(b: &[u8; 16]) -> (u32, u32) {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of every x86_64 CPU; the load reads the 16
    // bytes of `b` (unaligned load).
    unsafe {
        let v = _mm_loadu_si128(b.as_ptr().cast());
        let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
        let backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
        // Unsigned v <= 0x1f: max(v, 0x1f) is 0x1f.
        let below = _mm_set1_epi8(0x1f);
        let control = _mm_cmpeq_epi8(_mm_max_epu8(v, below), below);
        let stop = _mm_or_si128(_mm_or_si128(quote, backslash), control);
        (_mm_movemask_epi8(stop) as u32, _mm_movemask_epi8(v) as u32)
    }
}

/// Bytes of `w` below 0x20 (control characters); exact for the lowest.
#[inline]
fn zero_bytes_below_space(w: u64) -> u64 {
    w.wrapping_sub(LO * 0x20) & !w & HI
}

/// Objects with more keys than this are left to serde_json (whose map
/// finds a repeated key without comparing every pair).
const MAX_KEYS: usize = 48;

/// Where the object's keys are in `out`, to find a repeated one.
struct Keys {
    /// The first keys, kept inline: most objects have a few, and an
    /// array of all MAX_KEYS made zero for every object was a twentieth
    /// of the beats input's CPU at 100-byte events (perf).
    first: [(u32, u32); FIRST_KEYS],
    /// The keys past FIRST_KEYS (no allocation until there are some).
    more: Vec<(u32, u32)>,
    n: usize,
}

/// Keys kept inline by `Keys`.
const FIRST_KEYS: usize = 8;

impl Keys {
    fn new() -> Keys {
        Keys {
            first: [(0, 0); FIRST_KEYS],
            more: Vec::new(),
            n: 0,
        }
    }

    /// Notes the key at `out[key.0..key.1]`; declines when the object had
    /// it already, or has too many keys.
    #[inline]
    fn note(&mut self, out: &[u8], key: (usize, usize)) -> R<()> {
        let text = &out[key.0..key.1];
        if self.n == MAX_KEYS {
            return Err(Decline);
        }
        let seen = &self.first[..self.n.min(FIRST_KEYS)];
        for &(a, b) in seen.iter().chain(&self.more) {
            if &out[a as usize..b as usize] == text {
                return Err(Decline);
            }
        }
        // Positions in one converted document: under 4 GiB (frames and
        // bodies are limited far below it); a larger one declines.
        let at = (
            u32::try_from(key.0).map_err(|_| Decline)?,
            u32::try_from(key.1).map_err(|_| Decline)?,
        );
        match self.first.get_mut(self.n) {
            Some(slot) => *slot = at,
            None => self.more.push(at),
        }
        self.n += 1;
        Ok(())
    }
}

/// Keeps one byte for the header of a map or array whose item count is
/// known at its end; returns where.
#[inline]
fn reserve_header(out: &mut Vec<u8>) -> usize {
    out.push(0);
    out.len() - 1
}

/// Fills the header kept at `at`: a fixmap or fixarray (up to 15 items,
/// most objects) in its byte; a longer one moves the items once.
#[inline]
fn write_header(out: &mut Vec<u8>, at: usize, n: usize, map: bool) {
    if n < 16 {
        out[at] = if map { 0x80 } else { 0x90 } | n as u8;
        return;
    }
    // map 16 / array 16 or 32, big-endian count (the fix codes are taken).
    let (code, long) = match (map, n <= 0xffff) {
        (true, true) => (0xde, false),
        (true, false) => (0xdf, true),
        (false, true) => (0xdc, false),
        (false, false) => (0xdd, true),
    };
    let mut header = [code, 0, 0, 0, 0];
    let h = if long {
        header[1..5].copy_from_slice(&(n as u32).to_be_bytes());
        5
    } else {
        header[1..3].copy_from_slice(&(n as u16).to_be_bytes());
        3
    };
    out.splice(at..at + 1, header[..h].iter().copied());
}

struct Reader<'j> {
    b: &'j [u8],
    i: usize,
}

impl<'j> Reader<'j> {
    #[inline]
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    #[inline]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    #[inline]
    fn eat(&mut self, c: u8) -> R<()> {
        self.ws();
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            Err(Decline)
        }
    }

    /// The items of an object or array up to `close` (its opening bracket
    /// read): `item` reads one and says whether it counts in the header;
    /// then a comma, or `close` to end. Returns the count.
    #[inline]
    fn items(
        &mut self,
        close: u8,
        out: &mut Vec<u8>,
        mut item: impl FnMut(&mut Self, &mut Vec<u8>) -> R<bool>,
    ) -> R<usize> {
        let mut n = 0;
        self.ws();
        if self.peek() == Some(close) {
            self.i += 1;
            return Ok(0);
        }
        loop {
            n += usize::from(item(self, out)?);
            self.ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(c) if c == close => {
                    self.i += 1;
                    return Ok(n);
                }
                _ => return Err(Decline),
            }
            self.ws();
        }
    }

    /// The top-level object.
    fn top_object(&mut self, top: &Top, out: &mut Vec<u8>) -> R<Option<&'j [u8]>> {
        self.eat(b'{')?;
        let at = reserve_header(out);
        let mut keys = Keys::new();
        let mut picked = None;
        let n = self.items(b'}', out, |r, out| {
            r.eat(b'"')?;
            let pair_start = out.len();
            let key = r.string(out)?;
            r.eat(b':')?;
            r.ws();
            let value_start = r.i;
            if top.pick.is_none_or(|p| p != &out[key.0..key.1]) {
                keys.note(out, key)?;
                r.value(out, 1)?;
                return Ok(true);
            }
            if picked.is_some() {
                return Err(Decline);
            }
            // Not noted in `keys` when taken out: a repeat is caught by
            // `picked`.
            if top.keep_picked {
                keys.note(out, key)?;
            }
            r.value(out, 1)?;
            if !top.keep_picked {
                // Read (to check it), then taken out.
                out.truncate(pair_start);
            }
            let b = r.b;
            picked = Some(&b[value_start..r.i]);
            Ok(top.keep_picked)
        })?;
        self.ws();
        if self.i != self.b.len() {
            return Err(Decline);
        }
        write_extra(top.extra, out);
        write_header(out, at, n + top.extra.len(), true);
        Ok(picked)
    }

    /// Any value, at `depth` (whitespace before it already skipped).
    fn value(&mut self, out: &mut Vec<u8>, depth: usize) -> R<()> {
        match self.peek() {
            Some(b'"') => {
                self.i += 1;
                self.string(out)?;
            }
            Some(b'{') => {
                if depth >= MAX_DEPTH {
                    return Err(Decline);
                }
                self.i += 1;
                let at = reserve_header(out);
                let mut keys = Keys::new();
                let n = self.items(b'}', out, |r, out| {
                    r.eat(b'"')?;
                    let key = r.string(out)?;
                    keys.note(out, key)?;
                    r.eat(b':')?;
                    r.ws();
                    r.value(out, depth + 1)?;
                    Ok(true)
                })?;
                write_header(out, at, n, true);
            }
            Some(b'[') => {
                if depth >= MAX_DEPTH {
                    return Err(Decline);
                }
                self.i += 1;
                let at = reserve_header(out);
                let n = self.items(b']', out, |r, out| {
                    r.value(out, depth + 1)?;
                    Ok(true)
                })?;
                write_header(out, at, n, false);
            }
            Some(b't') => self.word(b"true", 0xc3, out)?,
            Some(b'f') => self.word(b"false", 0xc2, out)?,
            Some(b'n') => self.word(b"null", 0xc0, out)?,
            Some(b'-' | b'0'..=b'9') => self.number(out)?,
            _ => return Err(Decline),
        }
        Ok(())
    }

    #[inline]
    fn word(&mut self, w: &[u8], code: u8, out: &mut Vec<u8>) -> R<()> {
        if self.b[self.i..].starts_with(w) {
            self.i += w.len();
            out.push(code);
            Ok(())
        } else {
            Err(Decline)
        }
    }

    /// A number: unsigned and negative integers as the smallest msgpack
    /// integer, the rest as f64, as serde_json reads them.
    fn number(&mut self, out: &mut Vec<u8>) -> R<()> {
        let start = self.i;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.i += 1;
        }
        let int_start = self.i;
        let mut sig: u64 = 0;
        let mut digits = 0;
        while let Some(c @ b'0'..=b'9') = self.peek() {
            // Up to 19 digits fit a u64; more go to serde_json below.
            sig = sig.wrapping_mul(10).wrapping_add((c - b'0') as u64);
            digits += 1;
            self.i += 1;
        }
        if digits == 0 || (self.b[int_start] == b'0' && digits > 1) {
            return Err(Decline);
        }
        let mut exp: i32 = 0;
        let mut float = false;
        if self.peek() == Some(b'.') {
            float = true;
            self.i += 1;
            let frac_start = self.i;
            while let Some(c @ b'0'..=b'9') = self.peek() {
                sig = sig.wrapping_mul(10).wrapping_add((c - b'0') as u64);
                digits += 1;
                self.i += 1;
            }
            if self.i == frac_start {
                return Err(Decline);
            }
            exp = -((self.i - frac_start) as i32);
        }
        if let Some(b'e' | b'E') = self.peek() {
            float = true;
            self.i += 1;
            let minus = match self.peek() {
                Some(b'-') => {
                    self.i += 1;
                    true
                }
                Some(b'+') => {
                    self.i += 1;
                    false
                }
                _ => false,
            };
            let exp_start = self.i;
            let mut e: i32 = 0;
            while let Some(c @ b'0'..=b'9') = self.peek() {
                e = e.saturating_mul(10).saturating_add((c - b'0') as i32);
                self.i += 1;
            }
            if self.i == exp_start {
                return Err(Decline);
            }
            exp = if minus {
                exp.saturating_sub(e)
            } else {
                exp.saturating_add(e)
            };
        }
        if digits > 19 {
            // Perhaps too long for a u64: then serde_json reads it as an
            // f64 its own way.
            let text = std::str::from_utf8(&self.b[int_start..self.i]).map_err(|_| Decline)?;
            match text.parse::<u64>() {
                Ok(v) if !float => sig = v,
                _ => return self.number_by_serde(start, out),
            }
        }
        if !float {
            if !negative {
                write_uint(out, sig);
            } else if sig == 0 || sig > 1 << 63 {
                // serde_json: `-0` and below i64::MIN are f64.
                write_f64(out, -(sig as f64));
            } else {
                write_neg(out, (sig as i64).wrapping_neg());
            }
            return Ok(());
        }
        let k = exp.unsigned_abs() as usize;
        if k >= POW10.len() {
            return self.number_by_serde(start, out);
        }
        // serde_json's arithmetic (without its float_roundtrip feature):
        // the significand as f64, times or divided by the power of ten.
        let mut f = sig as f64;
        if exp >= 0 {
            f *= POW10[k];
        } else {
            f /= POW10[k];
        }
        write_f64(out, if negative { -f } else { f });
        Ok(())
    }

    fn number_by_serde(&mut self, start: usize, out: &mut Vec<u8>) -> R<()> {
        let f: f64 = serde_json::from_slice(&self.b[start..self.i]).map_err(|_| Decline)?;
        write_f64(out, f);
        Ok(())
    }

    /// A string after its opening quote, written as a msgpack str; returns
    /// where its text is in `out`.
    fn string(&mut self, out: &mut Vec<u8>) -> R<(usize, usize)> {
        let start = self.i;
        let (end, ascii) = self.scan(start);
        match self.b.get(end) {
            Some(b'"') => {
                let text = &self.b[start..end];
                if !ascii && std::str::from_utf8(text).is_err() {
                    return Err(Decline);
                }
                write_str(out, text);
                self.i = end + 1;
                Ok((out.len() - text.len(), out.len()))
            }
            Some(b'\\') => self.escaped(start, end, ascii, out),
            _ => Err(Decline),
        }
    }

    /// Where the string's text from `from` stops (`"`, `\`, a control
    /// character or the end), and whether all before it is ASCII.
    #[inline]
    fn scan(&self, from: usize) -> (usize, bool) {
        let b = self.b;
        let mut i = from;
        let mut high = 0u64;
        #[cfg(target_arch = "x86_64")]
        {
            // 16 bytes a step while they last (a message is mostly long
            // strings: this loop was half of the beats input's string
            // reading with 8-byte words alone).
            let mut high16 = 0u32;
            while let Some(block) = b.get(i..i + 16).and_then(|s| <&[u8; 16]>::try_from(s).ok()) {
                let (stop, hi) = stops16(block);
                if stop != 0 {
                    let at = stop.trailing_zeros();
                    let before = hi & ((1u32 << at) - 1);
                    return (i + at as usize, high16 | before == 0);
                }
                high16 |= hi;
                i += 16;
            }
            if high16 != 0 {
                high = HI;
            }
        }
        while i + 8 <= b.len() {
            let w = u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
            let hit = stops(w);
            if hit != 0 {
                let at = (hit.trailing_zeros() / 8) as usize;
                // Non-ASCII bytes before the stop.
                let before = if at == 0 {
                    0
                } else {
                    w & (u64::MAX >> (64 - 8 * at))
                };
                return (i + at, (high | before) & HI == 0);
            }
            high |= w;
            i += 8;
        }
        let mut ascii = high & HI == 0;
        while i < b.len() {
            let c = b[i];
            if c == b'"' || c == b'\\' || c < 0x20 {
                break;
            }
            ascii &= c < 0x80;
            i += 1;
        }
        (i, ascii)
    }

    /// A string with escapes: its text decoded into `out`, then its header
    /// put before it.
    fn escaped(
        &mut self,
        start: usize,
        mut end: usize,
        mut ascii: bool,
        out: &mut Vec<u8>,
    ) -> R<(usize, usize)> {
        let text_at = out.len();
        let mut from = start;
        loop {
            let piece = &self.b[from..end];
            if !ascii && std::str::from_utf8(piece).is_err() {
                return Err(Decline);
            }
            out.extend_from_slice(piece);
            match self.b.get(end) {
                Some(b'"') => break,
                Some(b'\\') => {}
                _ => return Err(Decline),
            }
            let c = *self.b.get(end + 1).ok_or(Decline)?;
            from = end + 2;
            match c {
                b'"' => out.push(b'"'),
                b'\\' => out.push(b'\\'),
                b'/' => out.push(b'/'),
                b'b' => out.push(8),
                b'f' => out.push(12),
                b'n' => out.push(b'\n'),
                b'r' => out.push(b'\r'),
                b't' => out.push(b'\t'),
                b'u' => {
                    let hi = self.hex4(end + 2)?;
                    from = end + 6;
                    let ch = match hi {
                        0xd800..=0xdbff => {
                            // A surrogate pair; anything else is serde_json's.
                            if self.b.get(from..from + 2) != Some(b"\\u") {
                                return Err(Decline);
                            }
                            let lo = self.hex4(from + 2)?;
                            if !(0xdc00..=0xdfff).contains(&lo) {
                                return Err(Decline);
                            }
                            from += 6;
                            0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00)
                        }
                        0xdc00..=0xdfff => return Err(Decline),
                        c => c,
                    };
                    let ch = char::from_u32(ch).ok_or(Decline)?;
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                }
                _ => return Err(Decline),
            }
            (end, ascii) = self.scan(from);
        }
        self.i = end + 1;
        // The header before the text: its size is known only now.
        let n = out.len() - text_at;
        let (header, h) = str_header(n);
        out.splice(text_at..text_at, header[..h].iter().copied());
        Ok((text_at + h, text_at + h + n))
    }

    fn hex4(&self, at: usize) -> R<u32> {
        let h = self.b.get(at..at + 4).ok_or(Decline)?;
        let mut v = 0u32;
        for &c in h {
            let d = match c {
                b'0'..=b'9' => c - b'0',
                b'a'..=b'f' => c - b'a' + 10,
                b'A'..=b'F' => c - b'A' + 10,
                _ => return Err(Decline),
            };
            v = v << 4 | d as u32;
        }
        Ok(v)
    }
}

/// A str header for `n` bytes, as write_str_header writes it.
fn str_header(n: usize) -> ([u8; 5], usize) {
    let mut h = [0u8; 5];
    if n < 32 {
        h[0] = 0xa0 | n as u8;
        (h, 1)
    } else if n <= 0xff {
        h[0] = 0xd9;
        h[1] = n as u8;
        (h, 2)
    } else if n <= 0xffff {
        h[0] = 0xda;
        h[1..3].copy_from_slice(&(n as u16).to_be_bytes());
        (h, 3)
    } else {
        h[0] = 0xdb;
        h[1..5].copy_from_slice(&(n as u32).to_be_bytes());
        (h, 5)
    }
}

#[inline]
fn write_f64(out: &mut Vec<u8>, f: f64) {
    out.push(0xcb);
    out.extend_from_slice(&f.to_be_bytes());
}

/// A negative integer, as rmp's `write_sint` writes it.
#[inline]
fn write_neg(out: &mut Vec<u8>, v: i64) {
    if v >= -32 {
        out.push(v as u8);
    } else if v >= -128 {
        out.push(0xd0);
        out.push(v as u8);
    } else if v >= -32768 {
        out.push(0xd1);
        out.extend_from_slice(&(v as i16).to_be_bytes());
    } else if v >= -2147483648 {
        out.push(0xd2);
        out.extend_from_slice(&(v as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&v.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The fast reader alone: None when it declines.
    fn fast(json: &[u8], top: &Top) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
        let mut out = vec![7];
        let mut r = Reader { b: json, i: 0 };
        let picked = r.top_object(top, &mut out).ok()?;
        Some((out, picked.map(<[u8]>::to_vec)))
    }

    /// What serde_json's `Value` gives: the reference.
    fn reference(json: &[u8], top: &Top) -> Result<(Vec<u8>, Option<Value>), String> {
        let mut out = vec![7];
        match tree(json, top, &mut out) {
            Ok(p) => Ok((
                out,
                p.map(|p| match p {
                    Picked::Value(v) => v,
                    Picked::Text(_) => unreachable!(),
                }),
            )),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The transcoder gives what the reference gives, bytes and picked
    /// value; returns whether the fast reader took it.
    fn agrees(json: &[u8], top: &Top) -> bool {
        let want = reference(json, top);
        let mut out = vec![7];
        let got = object_to_msgpack(json, top, &mut out);
        match (&want, got) {
            (Ok((bytes, pick)), Ok(p)) => {
                assert_eq!(&out, bytes, "{}", String::from_utf8_lossy(json));
                let p = p.map(|p| match p {
                    Picked::Text(t) => serde_json::from_slice::<Value>(t).unwrap(),
                    Picked::Value(v) => v,
                });
                assert_eq!(&p, pick, "{}", String::from_utf8_lossy(json));
            }
            (Err(w), Err(g)) => {
                assert_eq!(w, &g.to_string());
                assert_eq!(out, [7], "nothing written on an error");
            }
            (w, g) => panic!("{}: {w:?} / {g:?}", String::from_utf8_lossy(json)),
        }
        let taken = fast(json, top);
        if let (Some((bytes, _)), Ok((want, _))) = (&taken, &want) {
            assert_eq!(bytes, want, "{}", String::from_utf8_lossy(json));
        }
        if want.is_err() {
            assert!(taken.is_none(), "{}", String::from_utf8_lossy(json));
        }
        taken.is_some()
    }

    const TOPS: [Top<'static>; 4] = [
        Top {
            pick: None,
            keep_picked: false,
            extra: &[],
        },
        Top {
            pick: Some(b"ts"),
            keep_picked: true,
            extra: &[],
        },
        Top {
            pick: Some(b"ts"),
            keep_picked: false,
            extra: &[(b"host", b"h1"), (b"path", b"/x")],
        },
        Top {
            pick: Some(b"t\xc3\xa9"),
            keep_picked: false,
            extra: &[],
        },
    ];

    fn all_agree(json: &str) -> bool {
        TOPS.iter()
            .map(|t| agrees(json.as_bytes(), t))
            .fold(true, |a, b| a & b)
    }

    #[test]
    fn usual_documents_are_read_by_the_fast_reader() {
        let docs = [
            r#"{}"#,
            " {\"a\":1}\r\n",
            r#"{"seq":12,"message":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}"#,
            r#"{"@timestamp":"2026-11-21T10:15:30.123Z","@metadata":{"beat":"filebeat","type":"_doc","version":"8.17.0"},"message":"GET /index.html 200","log":{"offset":1234,"file":{"path":"/var/log/x.log"}},"input":{"type":"log"},"ecs":{"version":"8.0.0"},"host":{"name":"web-1"},"agent":{"type":"filebeat","version":"8.17.0","ephemeral_id":"a","id":"b","name":"web-1"}}"#,
            r#"{"ts":"2026-11-21T10:15:30Z","m":"x","tags":["a","b"],"n":null,"t":true,"f":false}"#,
            r#"{ "a" : [ 1 , 2 , { } , [ ] ] , "b" : { "c" : "d" } }"#,
        ];
        for d in docs {
            assert!(all_agree(d), "{d}");
        }
    }

    #[test]
    fn stops_and_non_ascii_at_every_offset() {
        // The 16- and 8-byte scans and the byte loop after them: an
        // escape, a control character, a non-ASCII character, a byte that
        // is not UTF-8 or a quote at each place of strings of many lengths.
        for len in 1..40 {
            for at in 0..len {
                for insert in [&b"\\n"[..], b"\x01", "\u{e9}".as_bytes(), b"\xff", b"\""] {
                    let mut text = vec![b'a'; len];
                    text.splice(at..at + 1, insert.iter().copied());
                    let mut json = b"{\"k\":\"".to_vec();
                    json.extend_from_slice(&text);
                    json.extend_from_slice(b"\",\"z\":\"0123456789abcdefghij\"}");
                    let fast = agrees(&json, &Top::default());
                    // Escapes and UTF-8 are the fast reader's own.
                    let own = insert == b"\\n" || insert == "\u{e9}".as_bytes();
                    assert_eq!(fast, own, "{}", String::from_utf8_lossy(&json));
                }
            }
        }
    }

    #[test]
    fn unicode_and_escapes() {
        for d in [
            r#"{"s":"x\n\u00e9\"q\\/\/\b\f\r\t","e":"","u":"ü日本𝄞"}"#,
            r#"{"k\u0041y":1,"kAy2":2}"#,
            // A surrogate pair: one character of four bytes.
            r#"{"clef":"\ud834\udd1e","mixed":"a\uD834\uDD1Eb\u20ACc"}"#,
            r#"{"t\u00e9":"1","x":"é"}"#,
            // Escapes around a long run of text (the 8-byte scan).
            r#"{"m":"0123456789abcdef\t0123456789abcdef\"0123456789abcdef日本語テキスト\u0000end"}"#,
        ] {
            assert!(all_agree(d), "{d}");
        }
        // Escapes decode to the same text as serde_json's.
        let mut out = Vec::new();
        object_to_msgpack(
            br#"{"s":"\u00e9\ud834\udd1e\n"}"#,
            &Top::default(),
            &mut out,
        )
        .unwrap();
        assert_eq!(out, b"\x81\xa1s\xa7\xc3\xa9\xf0\x9d\x84\x9e\n");
        // Lone surrogates, bad escapes, raw control characters and bad
        // UTF-8 are serde_json's to refuse (or take), as before.
        for d in [
            r#"{"s":"\ud834"}"#,
            r#"{"s":"\ud834x"}"#,
            r#"{"s":"\udd1e"}"#,
            r#"{"s":"\ud834\u0041"}"#,
            r#"{"s":"\x"}"#,
            r#"{"s":"\u00g0"}"#,
            "{\"s\":\"a\tb\"}",
            "{\"s\":\"a\u{1}b\"}",
        ] {
            assert!(!all_agree(d), "{d}");
        }
        for bad in [
            &b"{\"s\":\"\xff\"}"[..],
            b"{\"s\":\"\xc3\"}",
            b"{\"\xe6\x97\":1}",
        ] {
            assert!(!agrees(bad, &Top::default()));
        }
    }

    #[test]
    fn numbers_as_serde_json_reads_them() {
        let taken = [
            "0",
            "1",
            "-1",
            "127",
            "128",
            "-32",
            "-33",
            "-128",
            "-129",
            "255",
            "256",
            "65535",
            "65536",
            "-32768",
            "-32769",
            "4294967295",
            "4294967296",
            "-2147483648",
            "-2147483649",
            "9223372036854775807",
            "-9223372036854775808",
            "-9223372036854775809",
            "18446744073709551615",
            "-18446744073709551615",
            "9999999999999999999",
            "-0",
            "0.0",
            "-0.0",
            "1.5",
            "-1.5",
            "0.1",
            "1e3",
            "1E+3",
            "1e-3",
            "2.5e-7",
            "123.456",
            "1.7976931348623157e10",
            "3.141592653589793",
            "0.30000000000000004",
            "1e22",
            "1e-22",
            "12345678901234567.25",
        ];
        for n in taken {
            let d = format!(r#"{{"n":{n},"a":[{n}]}}"#);
            assert!(all_agree(&d), "{d}");
        }
        // Big integers, long fractions and large exponents: serde_json reads
        // the number, still without a tree.
        for n in [
            "18446744073709551616",
            "-18446744073709551616",
            "123456789012345678901234567890",
            "1e300",
            "-1e-300",
            "1.00000000000000000000001",
            "4.9e-324",
            "1e400",
            "0e99999999999",
        ] {
            let d = format!(r#"{{"n":{n}}}"#);
            all_agree(&d);
        }
        // Not numbers: serde_json's errors.
        for n in [
            "01", "-", "1.", ".5", "1e", "1e+", "+1", "-a", "1.e3", "0x10", "NaN",
        ] {
            let d = format!(r#"{{"n":{n}}}"#);
            assert!(!all_agree(&d), "{d}");
        }
    }

    #[test]
    fn nesting_and_sizes() {
        let deep = |n: usize| format!("{{\"a\":{}1{}}}", "[".repeat(n), "]".repeat(n));
        assert!(all_agree(&deep(10)));
        assert!(all_agree(&deep(98)));
        // Deeper than the fast reader goes: serde_json's (its limit, 128).
        assert!(!all_agree(&deep(100)));
        assert!(!all_agree(&deep(200)));
        // 16 and more items: the long headers.
        let obj = |n: usize| {
            let pairs: Vec<String> = (0..n).map(|i| format!("\"k{i}\":{i}")).collect();
            format!("{{{}}}", pairs.join(","))
        };
        for n in [15, 16, 17, 40, 48] {
            assert!(all_agree(&obj(n)), "{n}");
        }
        // Objects of many keys are serde_json's (no quadratic search).
        assert!(!all_agree(&obj(49)));
        assert!(!all_agree(&obj(70000)));
        for n in [15, 16, 17, 70000] {
            let arr: Vec<String> = (0..n).map(|i| i.to_string()).collect();
            assert!(all_agree(&format!("{{\"a\":[{}]}}", arr.join(","))), "{n}");
        }
        for n in [31, 32, 255, 256, 65535, 65536] {
            let s = "x".repeat(n);
            assert!(
                all_agree(&format!("{{\"s\":\"{s}\",\"e\":\"{s}\\n\"}}")),
                "{n}"
            );
        }
    }

    #[test]
    fn repeated_keys_keep_the_last_value_at_the_first_place() {
        let many: Vec<String> = (0..40).map(|i| format!("\"k{i}\":{i}")).collect();
        let late_repeat = format!("{{{},\"k3\":\"again\"}}", many.join(","));
        // A repeat of a key past those Keys keeps inline.
        let repeat_past_inline = format!("{{{},\"k30\":\"again\"}}", many.join(","));
        for d in [
            r#"{"a":1,"b":2,"a":3}"#,
            r#"{"o":{"x":1,"x":2}}"#,
            r#"{"ts":1,"m":"x","ts":"2026-11-21T10:15:30Z"}"#,
            r#"{"k\u0041":1,"kA":2}"#,
            late_repeat.as_str(),
            repeat_past_inline.as_str(),
        ] {
            // Left to serde_json, whose map keeps the last value.
            assert!(!all_agree(d), "{d}");
        }
        let mut out = Vec::new();
        object_to_msgpack(br#"{"a":1,"b":2,"a":3}"#, &Top::default(), &mut out).unwrap();
        assert_eq!(out, b"\x82\xa1a\x03\xa1b\x02");
    }

    #[test]
    fn picked_and_extra() {
        let top = TOPS[2];
        let mut out = Vec::new();
        let p = object_to_msgpack(br#"{"m":"x","ts":"2026","z":[1]}"#, &top, &mut out).unwrap();
        assert!(matches!(p, Some(Picked::Text(b"\"2026\""))));
        assert_eq!(
            out,
            b"\x84\xa1m\xa1x\xa1z\x91\x01\xa4host\xa2h1\xa4path\xa2/x"
        );
        // Kept.
        out.clear();
        let p = object_to_msgpack(br#"{"ts" : 12.5 }"#, &TOPS[1], &mut out).unwrap();
        assert!(matches!(p, Some(Picked::Text(b"12.5"))));
        assert_eq!(out[..5], *b"\x81\xa2ts\xcb");
        out.clear();
        assert!(object_to_msgpack(br#"{"m":1}"#, &top, &mut out)
            .unwrap()
            .is_none());
    }

    #[test]
    fn invalid_json_is_serde_jsons_error_with_line_and_column() {
        let mut out = vec![1, 2];
        for (doc, want) in [
            (
                &b"{\"a\":1,}"[..],
                "bad json: trailing comma at line 1 column 8",
            ),
            (
                b"{\"a\":",
                "bad json: EOF while parsing a value at line 1 column 5",
            ),
            (
                b"{\"a\":1} x",
                "bad json: trailing characters at line 1 column 9",
            ),
            (b"{\n\"a\" 1}", "bad json: expected `:` at line 2 column 5"),
            (b"nope", "bad json: expected ident at line 1 column 2"),
            (
                b"",
                "bad json: EOF while parsing a value at line 1 column 0",
            ),
            (b"[1,2]", "not a JSON object"),
            (b"\"s\"", "not a JSON object"),
        ] {
            let e = object_to_msgpack(doc, &Top::default(), &mut out).unwrap_err();
            assert_eq!(e.to_string(), want);
            assert_eq!(out, [1, 2], "nothing written");
        }
        let e = object_to_msgpack(b"{} {}", &Top::default(), &mut out).unwrap_err();
        assert!(e.is_trailing());
    }

    #[test]
    fn mutated_documents_agree() {
        let good = r#"{"a":[1,-2,3.5,{"b":"c\u00e9\n"}],"ts":"2026","x":null,"y":true,"z":"日本"}"#;
        let bytes = good.as_bytes();
        let alphabet = b"{}[]\":,\\u0e.-+ 1aZ\xc3\xff\t\n";
        for i in 0..bytes.len() {
            let cut = &bytes[..i];
            for t in &TOPS {
                agrees(cut, t);
            }
            for &c in alphabet {
                let mut m = bytes.to_vec();
                m[i] = c;
                for t in &TOPS {
                    agrees(&m, t);
                }
                let mut m = bytes.to_vec();
                m.insert(i, c);
                agrees(&m, &TOPS[2]);
            }
        }
    }

    #[test]
    fn pairs_find_each_value() {
        let long = "y".repeat(70000);
        let deep = format!("{}1{}", "[".repeat(90), "]".repeat(90));
        let many: Vec<String> = (0..20).map(|i| i.to_string()).collect();
        let doc = format!(
            r#"{{"a":1,"b":{{"c":[1,-300,2.5,null,true,"s"]}},"long":"{long}","deep":{deep},"arr":[{}],"z":-9223372036854775808}}"#,
            many.join(",")
        );
        let mut out = Vec::new();
        object_to_msgpack(doc.as_bytes(), &Top::default(), &mut out).unwrap();
        let v: serde_json::Map<String, Value> = serde_json::from_str(&doc).unwrap();
        let got = pairs(&out);
        assert_eq!(got.len(), v.len());
        for ((k, r), (wk, wv)) in got.iter().zip(&v) {
            assert_eq!(*k, wk.as_bytes());
            let mut want = Vec::new();
            nagare_core::json::msgpack_from_json(wv, &mut want);
            assert_eq!(&out[r.clone()], &want[..], "{wk}");
        }
        assert_eq!(got.last().unwrap().1.end, out.len());
        // Not a map, or cut: no pairs, no panic.
        assert!(pairs(b"\x91\x01").is_empty());
        for cut in 0..out.len().min(200) {
            let _ = pairs(&out[..cut]);
        }
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<u64>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            "\\PC{0,12}".prop_map(Value::from),
            any::<String>().prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 48, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
                prop::collection::vec(("[a-z\u{e9}]{0,4}|ts", inner), 0..8)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn random_documents_agree(
            v in prop::collection::vec(("[a-z\u{e9}]{0,4}|ts", json_value()), 0..10),
            pretty in any::<bool>(),
        ) {
            let obj = Value::Object(v.into_iter().collect());
            let text = if pretty {
                serde_json::to_string_pretty(&obj).unwrap()
            } else {
                serde_json::to_string(&obj).unwrap()
            };
            // serde_json writes floats in their shortest form, which it
            // may read back its own way; the bytes agree either way.
            for t in &TOPS {
                prop_assert!(agrees(text.as_bytes(), t));
            }
        }
    }
}
