//! Minimal msgpack scanning and writing.
//!
//! The forward codec never builds a tree of values: it walks the bytes to find
//! value boundaries and checks types, so records pass through untouched. These
//! helpers are that walk. Every reader returns [`Scan::Incomplete`] when the
//! buffer ends inside a value, so a stream decoder can wait for more bytes.

use crate::ScanError;

/// Deepest nesting accepted inside a record; deeper input is rejected rather
/// than risking unbounded recursion on hostile data.
pub const MAX_DEPTH: usize = 64;

/// Outcome of reading one item at a position.
pub type Scan<T> = Result<T, ScanError>;

#[inline]
fn need(buf: &[u8], pos: usize, n: usize) -> Scan<()> {
    if buf.len() < pos + n {
        Err(ScanError::Incomplete(pos + n))
    } else {
        Ok(())
    }
}

#[inline]
fn be16(buf: &[u8], pos: usize) -> usize {
    u16::from_be_bytes([buf[pos], buf[pos + 1]]) as usize
}

#[inline]
fn be32(buf: &[u8], pos: usize) -> usize {
    u32::from_be_bytes([buf[pos], buf[pos + 1], buf[pos + 2], buf[pos + 3]]) as usize
}

/// Returns the position just past the value that starts at `pos`.
///
/// Iterative: one loop over value headers with a counter of values still to
/// skip per open container, instead of one call per nested value.
pub fn skip_value(buf: &[u8], pos: usize) -> Scan<usize> {
    // Most values are scalars or strings: they need no container stack.
    let (mut pos, payload, children) = header(buf, pos)?;
    need(buf, pos, payload)?;
    pos += payload;
    // So are the values of a flat container (a record of scalars and
    // strings: most records). The stack below is set up only at the first
    // nested container; zeroing it for every record was a measurable part
    // of walking a chunk.
    let mut left = children;
    while left > 0 {
        let (next, payload, nested) = header(buf, pos)?;
        if nested > 0 {
            // A flat container one level down (the record of an entry
            // `[time, record]`) needs no stack either: only deeper nesting
            // goes to the stack, walked again from this container.
            match skip_flat(buf, next, nested)? {
                Some(end) => pos = end,
                None => return skip_nested(buf, pos, left),
            }
        } else {
            need(buf, next, payload)?;
            pos = next + payload;
        }
        left -= 1;
    }
    Ok(pos)
}

/// The end of the `n` values from `pos` on when none of them is a
/// container; `None` at the first container.
#[inline]
fn skip_flat(buf: &[u8], mut pos: usize, n: usize) -> Scan<Option<usize>> {
    for _ in 0..n {
        let (next, payload, nested) = header(buf, pos)?;
        if nested > 0 {
            return Ok(None);
        }
        need(buf, next, payload)?;
        pos = next + payload;
    }
    Ok(Some(pos))
}

/// The rest of a container from `pos` on, where `left` of its values
/// remain and the first of them is itself a container.
fn skip_nested(buf: &[u8], mut pos: usize, left: usize) -> Scan<usize> {
    // remaining[d]: values still to skip in the container open at depth d;
    // `depth` is the nesting of the next value to read (1 for the first
    // child of the outer container).
    let mut remaining = [0usize; MAX_DEPTH + 1];
    let mut depth = 1usize;
    remaining[1] = left;
    loop {
        let (next, payload, children) = header(buf, pos)?;
        pos = next;
        need(buf, pos, payload)?;
        pos += payload;
        remaining[depth] -= 1;
        if children > 0 {
            depth += 1;
            if depth > MAX_DEPTH {
                return Err(ScanError::Invalid("msgpack nesting too deep"));
            }
            remaining[depth] = children;
        } else {
            // Close every container whose last value this was.
            while remaining[depth] == 0 {
                depth -= 1;
                if depth == 0 {
                    return Ok(pos);
                }
            }
        }
    }
}

/// The header of the value at `pos`: (position after the header, bytes of
/// payload that follow, number of nested values).
// Always inlined: called for every value, and as a call its three-part
// result went through memory.
#[inline(always)]
fn header(buf: &[u8], mut pos: usize) -> Scan<(usize, usize, usize)> {
    need(buf, pos, 1)?;
    let b = buf[pos];
    pos += 1;
    let (payload, children) = match b {
        0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => (0, 0),
        0x80..=0x8f => (0, 2 * (b & 0x0f) as usize),
        0x90..=0x9f => (0, (b & 0x0f) as usize),
        0xa0..=0xbf => ((b & 0x1f) as usize, 0),
        0xc1 => return Err(ScanError::Invalid("reserved msgpack byte 0xc1")),
        0xc4 | 0xd9 => {
            need(buf, pos, 1)?;
            pos += 1;
            (buf[pos - 1] as usize, 0)
        }
        0xc5 | 0xda => {
            need(buf, pos, 2)?;
            pos += 2;
            (be16(buf, pos - 2), 0)
        }
        0xc6 | 0xdb => {
            need(buf, pos, 4)?;
            pos += 4;
            (be32(buf, pos - 4), 0)
        }
        0xc7 => {
            need(buf, pos, 2)?;
            pos += 2;
            (buf[pos - 2] as usize, 0)
        }
        0xc8 => {
            need(buf, pos, 3)?;
            pos += 3;
            (be16(buf, pos - 3), 0)
        }
        0xc9 => {
            need(buf, pos, 5)?;
            pos += 5;
            (be32(buf, pos - 5), 0)
        }
        0xca => (4, 0),
        0xcb => (8, 0),
        0xcc | 0xd0 => (1, 0),
        0xcd | 0xd1 => (2, 0),
        0xce | 0xd2 => (4, 0),
        0xcf | 0xd3 => (8, 0),
        0xd4 => (2, 0),
        0xd5 => (3, 0),
        0xd6 => (5, 0),
        0xd7 => (9, 0),
        0xd8 => (17, 0),
        0xdc => {
            need(buf, pos, 2)?;
            pos += 2;
            (0, be16(buf, pos - 2))
        }
        0xdd => {
            need(buf, pos, 4)?;
            pos += 4;
            (0, be32(buf, pos - 4))
        }
        0xde => {
            need(buf, pos, 2)?;
            pos += 2;
            (0, 2 * be16(buf, pos - 2))
        }
        0xdf => {
            need(buf, pos, 4)?;
            pos += 4;
            (0, 2 * be32(buf, pos - 4))
        }
    };
    Ok((pos, payload, children))
}

/// Reads an array header; returns (length, position of the first element).
pub fn read_array_len(buf: &[u8], pos: usize) -> Scan<(usize, usize)> {
    need(buf, pos, 1)?;
    match buf[pos] {
        b @ 0x90..=0x9f => Ok(((b & 0x0f) as usize, pos + 1)),
        0xdc => {
            need(buf, pos, 3)?;
            Ok((be16(buf, pos + 1), pos + 3))
        }
        0xdd => {
            need(buf, pos, 5)?;
            Ok((be32(buf, pos + 1), pos + 5))
        }
        _ => Err(ScanError::Invalid("expected an array")),
    }
}

/// Reads a map header; returns (number of pairs, position of the first key).
pub fn read_map_len(buf: &[u8], pos: usize) -> Scan<(usize, usize)> {
    need(buf, pos, 1)?;
    match buf[pos] {
        b @ 0x80..=0x8f => Ok(((b & 0x0f) as usize, pos + 1)),
        0xde => {
            need(buf, pos, 3)?;
            Ok((be16(buf, pos + 1), pos + 3))
        }
        0xdf => {
            need(buf, pos, 5)?;
            Ok((be32(buf, pos + 1), pos + 5))
        }
        _ => Err(ScanError::Invalid("expected a map")),
    }
}

/// If the value at `pos` is a str or bin, returns (payload start, payload end).
/// Returns `Ok(None)` for any other type.
pub fn read_str_or_bin(buf: &[u8], pos: usize) -> Scan<Option<(usize, usize)>> {
    need(buf, pos, 1)?;
    let (len, start) = match buf[pos] {
        b @ 0xa0..=0xbf => ((b & 0x1f) as usize, pos + 1),
        0xc4 | 0xd9 => {
            need(buf, pos, 2)?;
            (buf[pos + 1] as usize, pos + 2)
        }
        0xc5 | 0xda => {
            need(buf, pos, 3)?;
            (be16(buf, pos + 1), pos + 3)
        }
        0xc6 | 0xdb => {
            need(buf, pos, 5)?;
            (be32(buf, pos + 1), pos + 5)
        }
        _ => return Ok(None),
    };
    need(buf, start, len)?;
    Ok(Some((start, start + len)))
}

/// Reads a str or bin and fails on any other type.
pub fn expect_str_or_bin(buf: &[u8], pos: usize, what: &'static str) -> Scan<(usize, usize)> {
    read_str_or_bin(buf, pos)?.ok_or(ScanError::Invalid(what))
}

/// Reads a non-negative integer; `Ok(None)` when the value is not an integer.
pub fn read_uint(buf: &[u8], pos: usize) -> Scan<Option<(u64, usize)>> {
    need(buf, pos, 1)?;
    let b = buf[pos];
    let (v, n): (u64, usize) = match b {
        0x00..=0x7f => (b as u64, 1),
        0xcc | 0xd0 => {
            need(buf, pos, 2)?;
            (buf[pos + 1] as u64, 2)
        }
        0xcd | 0xd1 => {
            need(buf, pos, 3)?;
            (be16(buf, pos + 1) as u64, 3)
        }
        0xce | 0xd2 => {
            need(buf, pos, 5)?;
            (be32(buf, pos + 1) as u64, 5)
        }
        0xcf | 0xd3 => {
            need(buf, pos, 9)?;
            let mut a = [0u8; 8];
            a.copy_from_slice(&buf[pos + 1..pos + 9]);
            (u64::from_be_bytes(a), 9)
        }
        _ => return Ok(None),
    };
    // Signed forms with the sign bit set are negative: not a uint.
    let negative = match b {
        0xd0 => buf[pos + 1] & 0x80 != 0,
        0xd1 => buf[pos + 1] & 0x80 != 0,
        0xd2 => buf[pos + 1] & 0x80 != 0,
        0xd3 => buf[pos + 1] & 0x80 != 0,
        _ => false,
    };
    if negative {
        return Ok(None);
    }
    Ok(Some((v, pos + n)))
}

/// True when the value at `pos` is a map (the header byte alone decides).
#[inline]
pub fn is_map(buf: &[u8], pos: usize) -> Scan<bool> {
    need(buf, pos, 1)?;
    Ok(matches!(buf[pos], 0x80..=0x8f | 0xde | 0xdf))
}

// ---- writing ----

#[inline]
pub fn write_array_len(out: &mut Vec<u8>, n: usize) {
    if n < 16 {
        out.push(0x90 | n as u8);
    } else if n <= u16::MAX as usize {
        out.push(0xdc);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xdd);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

#[inline]
pub fn write_map_len(out: &mut Vec<u8>, n: usize) {
    if n < 16 {
        out.push(0x80 | n as u8);
    } else if n <= u16::MAX as usize {
        out.push(0xde);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xdf);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

#[inline]
pub fn write_str(out: &mut Vec<u8>, s: &[u8]) {
    write_str_header(out, s.len());
    out.extend_from_slice(s);
}

/// Writes only a str header for `n` bytes of text (the caller appends them,
/// in as many pieces as it likes).
#[inline]
pub fn write_str_header(out: &mut Vec<u8>, n: usize) {
    if n < 32 {
        out.push(0xa0 | n as u8);
    } else if n <= u8::MAX as usize {
        out.push(0xd9);
        out.push(n as u8);
    } else if n <= u16::MAX as usize {
        out.push(0xda);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

/// Writes only a bin header for a payload of `n` bytes (the caller appends it).
#[inline]
pub fn write_bin_header(out: &mut Vec<u8>, n: usize) {
    if n <= u8::MAX as usize {
        out.push(0xc4);
        out.push(n as u8);
    } else if n <= u16::MAX as usize {
        out.push(0xc5);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xc6);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

#[inline]
pub fn write_uint(out: &mut Vec<u8>, v: u64) {
    if v < 128 {
        out.push(v as u8);
    } else if v <= u8::MAX as u64 {
        out.push(0xcc);
        out.push(v as u8);
    } else if v <= u16::MAX as u64 {
        out.push(0xcd);
        out.extend_from_slice(&(v as u16).to_be_bytes());
    } else if v <= u32::MAX as u64 {
        out.push(0xce);
        out.extend_from_slice(&(v as u32).to_be_bytes());
    } else {
        out.push(0xcf);
        out.extend_from_slice(&v.to_be_bytes());
    }
}

#[inline]
pub fn write_bool(out: &mut Vec<u8>, v: bool) {
    out.push(if v { 0xc3 } else { 0xc2 });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The former recursive scanner, kept as the reference that the
    /// iterative `skip_value` must agree with.
    fn skip_depth(buf: &[u8], mut pos: usize, depth: usize) -> Scan<usize> {
        if depth > MAX_DEPTH {
            return Err(ScanError::Invalid("msgpack nesting too deep"));
        }
        need(buf, pos, 1)?;
        let b = buf[pos];
        pos += 1;
        // (bytes of payload to skip, number of nested values to skip)
        let (payload, children) = match b {
            0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => (0, 0),
            0x80..=0x8f => (0, 2 * (b & 0x0f) as usize),
            0x90..=0x9f => (0, (b & 0x0f) as usize),
            0xa0..=0xbf => ((b & 0x1f) as usize, 0),
            0xc1 => return Err(ScanError::Invalid("reserved msgpack byte 0xc1")),
            0xc4 | 0xd9 => {
                need(buf, pos, 1)?;
                pos += 1;
                (buf[pos - 1] as usize, 0)
            }
            0xc5 | 0xda => {
                need(buf, pos, 2)?;
                pos += 2;
                (be16(buf, pos - 2), 0)
            }
            0xc6 | 0xdb => {
                need(buf, pos, 4)?;
                pos += 4;
                (be32(buf, pos - 4), 0)
            }
            0xc7 => {
                need(buf, pos, 2)?;
                pos += 2;
                (buf[pos - 2] as usize, 0)
            }
            0xc8 => {
                need(buf, pos, 3)?;
                pos += 3;
                (be16(buf, pos - 3), 0)
            }
            0xc9 => {
                need(buf, pos, 5)?;
                pos += 5;
                (be32(buf, pos - 5), 0)
            }
            0xca => (4, 0),
            0xcb => (8, 0),
            0xcc | 0xd0 => (1, 0),
            0xcd | 0xd1 => (2, 0),
            0xce | 0xd2 => (4, 0),
            0xcf | 0xd3 => (8, 0),
            0xd4 => (2, 0),
            0xd5 => (3, 0),
            0xd6 => (5, 0),
            0xd7 => (9, 0),
            0xd8 => (17, 0),
            0xdc => {
                need(buf, pos, 2)?;
                pos += 2;
                (0, be16(buf, pos - 2))
            }
            0xdd => {
                need(buf, pos, 4)?;
                pos += 4;
                (0, be32(buf, pos - 4))
            }
            0xde => {
                need(buf, pos, 2)?;
                pos += 2;
                (0, 2 * be16(buf, pos - 2))
            }
            0xdf => {
                need(buf, pos, 4)?;
                pos += 4;
                (0, 2 * be32(buf, pos - 4))
            }
        };
        need(buf, pos, payload)?;
        pos += payload;
        for _ in 0..children {
            pos = skip_depth(buf, pos, depth + 1)?;
        }
        Ok(pos)
    }

    #[test]
    fn iterative_skip_agrees_with_recursive_reference() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        // Biased bytes: mostly small headers and containers, so that the
        // random buffers nest and end in every possible place.
        let pick = [
            0x00u8, 0x01, 0x7f, 0x80, 0x81, 0x82, 0x8f, 0x90, 0x91, 0x92, 0x9f, 0xa0, 0xa1, 0xa3,
            0xc0, 0xc1, 0xc2, 0xc4, 0xc7, 0xca, 0xcb, 0xcc, 0xd4, 0xd7, 0xd9, 0xdc, 0xdd, 0xde,
            0xdf, 0xe0, 0xff,
        ];
        for _ in 0..60_000 {
            let n = rng.gen_range(0..48);
            let buf: Vec<u8> = (0..n)
                .map(|_| {
                    if rng.gen_bool(0.7) {
                        pick[rng.gen_range(0..pick.len())]
                    } else {
                        rng.gen()
                    }
                })
                .collect();
            let start = if n > 0 { rng.gen_range(0..n) } else { 0 };
            assert_eq!(
                skip_value(&buf, start),
                skip_depth(&buf, start, 0),
                "{buf:02x?} at {start}"
            );
        }
        for d in [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, MAX_DEPTH + 2] {
            for tail in [&[][..], &[0x01], &[0x90], &[0x80]] {
                let mut v = vec![0x91u8; d];
                v.extend_from_slice(tail);
                assert_eq!(
                    skip_value(&v, 0),
                    skip_depth(&v, 0, 0),
                    "depth {d} {tail:?}"
                );
                let mut m = [0x81u8, 0xa0].repeat(d);
                m.extend_from_slice(tail);
                assert_eq!(skip_value(&m, 0), skip_depth(&m, 0, 0), "map depth {d}");
            }
        }
    }

    #[test]
    fn skips_nested_values() {
        // {"a": [1, "xy", {"b": nil}], "c": 1.5}
        let v = [
            0x82, 0xa1, b'a', 0x93, 0x01, 0xa2, b'x', b'y', 0x81, 0xa1, b'b', 0xc0, 0xa1, b'c',
            0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(skip_value(&v, 0), Ok(v.len()));
        // An entry [time, record]: a flat record one level down, then one
        // with a container inside it (the stack takes over from there).
        let mut entry = vec![0x92, 0xd7, 0x00, 1, 2, 3, 4, 5, 6, 7, 8];
        entry.extend_from_slice(&[
            0x82, 0xa1, b's', 0xce, 0, 0, 0, 9, 0xa1, b'm', 0xa2, b'h', b'i',
        ]);
        let mut nested = entry[..11].to_vec();
        nested.extend_from_slice(&v);
        for e in [&entry, &nested] {
            assert_eq!(skip_value(e, 0), Ok(e.len()));
            for cut in 0..e.len() {
                assert_eq!(
                    skip_value(&e[..cut], 0),
                    skip_depth(&e[..cut], 0, 0),
                    "cut {cut}"
                );
            }
        }
        for cut in 0..v.len() {
            assert!(matches!(
                skip_value(&v[..cut], 0),
                Err(ScanError::Incomplete(_))
            ));
        }
    }

    #[test]
    fn rejects_reserved_byte_and_deep_nesting() {
        assert!(matches!(skip_value(&[0xc1], 0), Err(ScanError::Invalid(_))));
        let deep = vec![0x91u8; MAX_DEPTH + 2];
        assert!(matches!(skip_value(&deep, 0), Err(ScanError::Invalid(_))));
    }

    #[test]
    fn uint_forms() {
        for v in [
            0u64,
            1,
            127,
            128,
            255,
            256,
            65535,
            65536,
            u32::MAX as u64,
            u64::MAX,
        ] {
            let mut out = Vec::new();
            write_uint(&mut out, v);
            assert_eq!(read_uint(&out, 0).unwrap(), Some((v, out.len())));
        }
        assert_eq!(read_uint(&[0xd0, 0xff], 0).unwrap(), None);
        assert_eq!(read_uint(&[0xd0, 0x05], 0).unwrap(), Some((5, 2)));
    }
}
