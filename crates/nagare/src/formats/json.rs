//! msgpack ↔ JSON: msgpack → JSON written straight into a byte buffer, and
//! parsed JSON values → msgpack (for `nagare cat` and the json parser).

use nagare_forward::msgpack::MAX_DEPTH;
use nagare_forward::EventTime;

/// Writes `{"time":"…","tag":"…","record":{…}}` and a newline.
pub fn write_event(out: &mut Vec<u8>, tag: &str, time: EventTime, record: &[u8]) {
    out.extend_from_slice(b"{\"time\":\"");
    super::write_rfc3339(out, time);
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
            // ext: an EventTime becomes fractional seconds, others null.
            let end = nagare_forward::msgpack::skip_value(buf, pos).ok()?;
            if b == 0xd7 && buf.get(pos + 1) == Some(&0) {
                let t = EventTime::from_payload(&buf[pos + 2..pos + 10]);
                write_float(out, t.secs as f64 + t.nanos as f64 / 1e9);
            } else {
                out.extend_from_slice(b"null");
            }
            Some(end)
        }
    }
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
    match std::str::from_utf8(s) {
        Ok(t) => escape(out, t),
        Err(_) => escape(out, &String::from_utf8_lossy(s)),
    }
    out.push(b'"');
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
                }
            }
        }
    }

    #[test]
    fn control_characters_are_escaped_as_u_sequences() {
        let mut out = Vec::new();
        escape(&mut out, "a\u{1}b\u{1f}\"");
        assert_eq!(String::from_utf8(out).unwrap(), r#"a\u0001b\u001f\""#);
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
