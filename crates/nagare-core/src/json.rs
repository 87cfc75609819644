//! msgpack ↔ JSON: msgpack → JSON written straight into a byte buffer, and
//! parsed JSON values → msgpack (for `nagare cat` and the json parser).

use nagare_forward::msgpack::MAX_DEPTH;
use nagare_forward::EventTime;

/// Writes `{"time":"…","tag":"…","record":{…}}` and a newline.
pub fn write_event(out: &mut Vec<u8>, tag: &str, time: EventTime, record: &[u8]) {
    out.extend_from_slice(b"{\"time\":\"");
    crate::event::write_rfc3339(out, time);
    out.extend_from_slice(b"\",\"tag\":");
    write_string(out, tag.as_bytes());
    out.extend_from_slice(b",\"record\":");
    write_value(out, record);
    out.extend_from_slice(b"}\n");
}

/// Writes the msgpack value at the start of `buf` as JSON; returns the bytes
/// consumed. Input was checked on the way in; anything odd becomes `null`.
pub fn write_value(out: &mut Vec<u8>, buf: &[u8]) -> usize {
    value(out, buf, 0, 0).unwrap_or_else(|| {
        out.extend_from_slice(b"null");
        buf.len()
    })
}

fn be(buf: &[u8], pos: usize, n: usize) -> Option<u64> {
    let s = buf.get(pos..pos + n)?;
    Some(s.iter().fold(0u64, |a, &b| (a << 8) | b as u64))
}

fn value(out: &mut Vec<u8>, buf: &[u8], pos: usize, depth: usize) -> Option<usize> {
    if depth > MAX_DEPTH {
        return None;
    }
    let b = *buf.get(pos)?;
    let mut itoa = itoa::Buffer::new();
    match b {
        0x00..=0x7f => {
            out.extend_from_slice(itoa.format(b).as_bytes());
            Some(pos + 1)
        }
        0xe0..=0xff => {
            out.extend_from_slice(itoa.format(b as i8).as_bytes());
            Some(pos + 1)
        }
        0xc0 => {
            out.extend_from_slice(b"null");
            Some(pos + 1)
        }
        0xc2 => {
            out.extend_from_slice(b"false");
            Some(pos + 1)
        }
        0xc3 => {
            out.extend_from_slice(b"true");
            Some(pos + 1)
        }
        0xcc..=0xcf => {
            let n = 1 << (b - 0xcc);
            let v = be(buf, pos + 1, n)?;
            out.extend_from_slice(itoa.format(v).as_bytes());
            Some(pos + 1 + n)
        }
        0xd0..=0xd3 => {
            let n = 1 << (b - 0xd0);
            let raw = be(buf, pos + 1, n)?;
            let shift = 64 - 8 * n as u32;
            let v = ((raw << shift) as i64) >> shift;
            out.extend_from_slice(itoa.format(v).as_bytes());
            Some(pos + 1 + n)
        }
        0xca => {
            let v = f32::from_bits(be(buf, pos + 1, 4)? as u32) as f64;
            write_float(out, v);
            Some(pos + 5)
        }
        0xcb => {
            let v = f64::from_bits(be(buf, pos + 1, 8)?);
            write_float(out, v);
            Some(pos + 9)
        }
        0xa0..=0xbf | 0xd9..=0xdb | 0xc4..=0xc6 => {
            let (s, e) = nagare_forward::msgpack::read_str_or_bin(buf, pos).ok()??;
            write_string(out, &buf[s..e]);
            Some(e)
        }
        0x90..=0x9f | 0xdc | 0xdd => {
            let (n, mut p) = nagare_forward::msgpack::read_array_len(buf, pos).ok()?;
            out.push(b'[');
            for i in 0..n {
                if i > 0 {
                    out.push(b',');
                }
                p = value(out, buf, p, depth + 1)?;
            }
            out.push(b']');
            Some(p)
        }
        0x80..=0x8f | 0xde | 0xdf => {
            let (n, mut p) = nagare_forward::msgpack::read_map_len(buf, pos).ok()?;
            out.push(b'{');
            for i in 0..n {
                if i > 0 {
                    out.push(b',');
                }
                match nagare_forward::msgpack::read_str_or_bin(buf, p).ok()? {
                    Some((s, e)) => {
                        write_string(out, &buf[s..e]);
                        p = e;
                    }
                    None => {
                        // JSON keys are strings: quote the key's JSON text.
                        let mut k = Vec::new();
                        p = value(&mut k, buf, p, depth + 1)?;
                        write_string(out, &k);
                    }
                }
                out.push(b':');
                p = value(out, buf, p, depth + 1)?;
            }
            out.push(b'}');
            Some(p)
        }
        _ => {
            let end = nagare_forward::msgpack::skip_value(buf, pos).ok()?;
            write_ext(out, buf, pos, end);
            Some(end)
        }
    }
}

/// Writes the ext value at `buf[pos..end]`: EventTime (type 0) as fractional
/// seconds, the msgpack timestamp (type -1) as an RFC 3339 string, any other
/// type as `{"ext":type,"base64":"…"}` so no data turns into `null`.
fn write_ext(out: &mut Vec<u8>, buf: &[u8], pos: usize, end: usize) {
    let Some((ty, data)) = ext_parts(&buf[pos..end]) else {
        out.extend_from_slice(b"null");
        return;
    };
    if ty == 0 && data.len() == 8 {
        let t = EventTime::from_payload(data);
        write_float(out, t.secs as f64 + t.nanos as f64 / 1e9);
        return;
    }
    if ty == -1 {
        if let Some(t) = msgpack_timestamp(data) {
            out.push(b'"');
            out.extend_from_slice(
                t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
                    .as_bytes(),
            );
            out.push(b'"');
            return;
        }
    }
    use base64::Engine as _;
    out.extend_from_slice(b"{\"ext\":");
    out.extend_from_slice(itoa::Buffer::new().format(ty).as_bytes());
    out.extend_from_slice(b",\"base64\":\"");
    out.extend_from_slice(
        base64::engine::general_purpose::STANDARD
            .encode(data)
            .as_bytes(),
    );
    out.extend_from_slice(b"\"}");
}

/// The type and data of one msgpack ext value (fixext 1–16, ext 8/16/32).
fn ext_parts(v: &[u8]) -> Option<(i8, &[u8])> {
    let (ty_at, len) = match *v.first()? {
        b @ 0xd4..=0xd8 => (1, 1usize << (b - 0xd4)),
        0xc7 => (2, be(v, 1, 1)? as usize),
        0xc8 => (3, be(v, 1, 2)? as usize),
        0xc9 => (5, be(v, 1, 4)? as usize),
        _ => return None,
    };
    let ty = *v.get(ty_at)? as i8;
    Some((ty, v.get(ty_at + 1..ty_at + 1 + len)?))
}

/// The msgpack timestamp extension's 32-, 64- and 96-bit forms.
fn msgpack_timestamp(d: &[u8]) -> Option<chrono::DateTime<chrono::Utc>> {
    let (secs, nanos) = match d.len() {
        4 => (be(d, 0, 4)? as i64, 0),
        8 => {
            let v = be(d, 0, 8)?;
            ((v & 0x3_ffff_ffff) as i64, (v >> 34) as u32)
        }
        12 => (be(d, 4, 8)? as i64, be(d, 0, 4)? as u32),
        _ => return None,
    };
    if nanos > 999_999_999 {
        return None;
    }
    chrono::DateTime::from_timestamp(secs, nanos)
}

fn write_float(out: &mut Vec<u8>, v: f64) {
    if v.is_finite() {
        let mut r = ryu::Buffer::new();
        out.extend_from_slice(r.format_finite(v).as_bytes());
    } else {
        out.extend_from_slice(b"null");
    }
}

/// Writes a JSON string; invalid UTF-8 is replaced with U+FFFD.
pub fn write_string(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'"');
    if plain_ascii(s) {
        // Most keys and values: valid UTF-8 with nothing to escape, found
        // in one pass (a UTF-8 check and then the escape scan took a fifth
        // of a syslog → file relay's CPU at 100 B).
        out.extend_from_slice(s);
    } else {
        match std::str::from_utf8(s) {
            Ok(t) => escape(out, t),
            Err(_) => escape(out, &String::from_utf8_lossy(s)),
        }
    }
    out.push(b'"');
}

/// Whether `s` is ASCII with no byte a JSON string must escape.
#[inline]
fn plain_ascii(s: &[u8]) -> bool {
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut words = s.chunks_exact(8);
    for w in &mut words {
        let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        if w & HIGH != 0 || needs_escape(w) {
            return false;
        }
    }
    words
        .remainder()
        .iter()
        .all(|&b| (0x20..0x80).contains(&b) && b != b'"' && b != b'\\')
}

/// Whether any of the 8 bytes of `w` must be escaped in a JSON string: a
/// control character (< 0x20), `"` or `\`. A word at a time, since most
/// text has none and this runs for every string an output or a filter
/// writes as JSON.
#[inline]
fn needs_escape(w: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let has_zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    // Bytes below 0x20 (the high-bit test keeps bytes >= 0x80 out).
    let control = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
    control | has_zero(w ^ (ONES * b'"' as u64)) | has_zero(w ^ (ONES * b'\\' as u64)) != 0
}

fn escape(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    // Skip the words with nothing to escape; the loop below finds the byte.
    let mut clean = 0;
    while let Some(w) = bytes.get(clean..clean + 8) {
        if needs_escape(u64::from_le_bytes(w.try_into().expect("8 bytes"))) {
            break;
        }
        clean += 8;
    }
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate().skip(clean) {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x00..=0x1f => {
                out.extend_from_slice(&bytes[start..i]);
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(&[
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX[(b >> 4) as usize],
                    HEX[(b & 0xf) as usize],
                ]);
                start = i + 1;
                continue;
            }
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        out.extend_from_slice(esc);
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
}

/// Writes a parsed JSON value as msgpack, keeping key order; integers stay
/// integers in their smallest form.
pub fn msgpack_from_json(v: &serde_json::Value, out: &mut Vec<u8>) {
    use nagare_forward::msgpack::{write_array_len, write_bool, write_map_len, write_str};
    use serde_json::Value;
    match v {
        Value::Null => out.push(0xc0),
        Value::Bool(b) => write_bool(out, *b),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                let _ = rmp::encode::write_uint(out, u);
            } else if let Some(i) = n.as_i64() {
                let _ = rmp::encode::write_sint(out, i);
            } else {
                let _ = rmp::encode::write_f64(out, n.as_f64().unwrap_or(f64::NAN));
            }
        }
        Value::String(s) => write_str(out, s.as_bytes()),
        Value::Array(a) => {
            write_array_len(out, a.len());
            for x in a {
                msgpack_from_json(x, out);
            }
        }
        Value::Object(m) => {
            write_map_len(out, m.len());
            for (k, x) in m {
                write_str(out, k.as_bytes());
                msgpack_from_json(x, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_nested_values() {
        // {"a": [1, -2, "x\n"], "b": {"c": nil, "d": true}, "e": 1.5}
        let rec = [
            0x83, 0xa1, b'a', 0x93, 0x01, 0xfe, 0xa2, b'x', b'\n', 0xa1, b'b', 0x82, 0xa1, b'c',
            0xc0, 0xa1, b'd', 0xc3, 0xa1, b'e', 0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0,
        ];
        let mut out = Vec::new();
        assert_eq!(write_value(&mut out, &rec), rec.len());
        let s = String::from_utf8(out).unwrap();
        assert_eq!(s, r#"{"a":[1,-2,"x\n"],"b":{"c":null,"d":true},"e":1.5}"#);
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v["e"], 1.5);
    }

    #[test]
    fn strings_with_and_without_escapes_at_every_position() {
        for len in 0..20 {
            for at in 0..len {
                for special in ['"', '\\', '\n', '\u{1}', '\u{1f}', 'é', '\u{7f}', ' '] {
                    let mut s: Vec<char> = "abcdefghijklmnopqrst"[..len].chars().collect();
                    s[at] = special;
                    let s: String = s.into_iter().collect();
                    let mut out = Vec::new();
                    escape(&mut out, &s);
                    let back: String =
                        serde_json::from_slice(&[b"\"", &out[..], b"\""].concat()).unwrap();
                    assert_eq!(back, s);
                    let plain = !matches!(special, '"' | '\\' | '\n' | '\u{1}' | '\u{1f}');
                    assert_eq!(
                        out == s.as_bytes(),
                        plain,
                        "{s:?} → {:?}",
                        String::from_utf8_lossy(&out)
                    );
                    // write_string (its ASCII fast path or not) writes the same.
                    let mut quoted = Vec::new();
                    write_string(&mut quoted, s.as_bytes());
                    assert_eq!(quoted, [b"\"", &out[..], b"\""].concat(), "{s:?}");
                }
            }
        }
    }

    #[test]
    fn invalid_utf8_becomes_replacement_characters() {
        let mut out = Vec::new();
        write_string(&mut out, b"abcdefgh\xffij\"");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "\"abcdefgh\u{fffd}ij\\\"\""
        );
    }

    #[test]
    fn control_characters_are_escaped_as_u_sequences() {
        let mut out = Vec::new();
        escape(&mut out, "a\u{1}b\u{1f}\"");
        assert_eq!(String::from_utf8(out).unwrap(), r#"a\u0001b\u001f\""#);
    }

    fn json_of(v: &[u8]) -> String {
        let mut out = Vec::new();
        assert_eq!(write_value(&mut out, v), v.len());
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn msgpack_timestamps_become_rfc3339_strings() {
        // timestamp 32: 2023-11-14T22:13:20Z
        assert_eq!(
            json_of(&[0xd6, 0xff, 0x65, 0x53, 0xf1, 0x00]),
            r#""2023-11-14T22:13:20Z""#
        );
        // timestamp 64: nanoseconds 5 in the top 30 bits, seconds 1 below
        let v64 = (5u64 << 34) | 1;
        let mut b = vec![0xd7, 0xff];
        b.extend_from_slice(&v64.to_be_bytes());
        assert_eq!(json_of(&b), r#""1970-01-01T00:00:01.000000005Z""#);
        // timestamp 96: before 1970, milliseconds
        let mut b = vec![0xc7, 12, 0xff];
        b.extend_from_slice(&500_000_000u32.to_be_bytes());
        b.extend_from_slice(&(-1i64).to_be_bytes());
        assert_eq!(json_of(&b), r#""1969-12-31T23:59:59.500Z""#);
    }

    #[test]
    fn other_ext_types_keep_their_type_and_bytes() {
        assert_eq!(
            json_of(&[0xd5, 0x07, 0x01, 0x02]),
            r#"{"ext":7,"base64":"AQI="}"#
        );
        // a timestamp with nanoseconds out of range is not a time: kept as bytes
        let mut b = vec![0xc7, 12, 0xff];
        b.extend_from_slice(&2_000_000_000u32.to_be_bytes());
        b.extend_from_slice(&0i64.to_be_bytes());
        assert_eq!(json_of(&b), r#"{"ext":-1,"base64":"dzWUAAAAAAAAAAAA"}"#);
        // EventTime stays fractional seconds
        assert_eq!(json_of(&[0xd7, 0, 0, 0, 0, 1, 0x1d, 0xcd, 0x65, 0]), "1.5");
    }

    #[test]
    fn event_line() {
        let mut out = Vec::new();
        write_event(&mut out, "t", EventTime::new(0, 5), &[0x80]);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"time\":\"1970-01-01T00:00:00.000000005Z\",\"tag\":\"t\",\"record\":{}}\n"
        );
    }
}
