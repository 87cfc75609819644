//! Events as they travel: walking PackedForward entries (`[time, record]`)
//! and reading a record's top-level fields without decoding it, and the
//! RFC 3339 text of an event time.

use nagare_forward::msgpack::{read_map_len, read_str_or_bin, skip_value};
use nagare_forward::EventTime;

/// Iterates canonical entries: yields (time, record bytes).
pub struct Entries<'a> {
    buf: &'a [u8],
    pos: usize,
}

pub fn entries(buf: &[u8]) -> Entries<'_> {
    Entries { buf, pos: 0 }
}

impl<'a> Iterator for Entries<'a> {
    type Item = (EventTime, &'a [u8], &'a [u8]);

    /// (time, record, whole entry)
    fn next(&mut self) -> Option<Self::Item> {
        let b = self.buf;
        if self.pos >= b.len() {
            return None;
        }
        let start = self.pos;
        // Entries were checked on the way in; a failure here means a bug, and
        // ending the iteration is the safe answer.
        let tpos = start + 1;
        let tend = skip_value(b, tpos).ok()?;
        let rend = skip_value(b, tend).ok()?;
        self.pos = rend;
        let time = if b[tpos] == 0xd7 {
            EventTime::from_payload(&b[tpos + 2..tpos + 10])
        } else {
            let secs = nagare_forward::msgpack::read_uint(b, tpos)
                .ok()
                .flatten()
                .map_or(0, |(v, _)| v as u32);
            EventTime::new(secs, 0)
        };
        Some((time, &b[tend..rend], &b[start..rend]))
    }
}

/// Iterates canonical entries, finding in each record the value of the
/// top-level key `key` (as `field` does) in the same walk: yields (record,
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
            None => entry_with_field(buf, pos, key).ok()?,
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
/// the record's `key` value.
fn entry_with_field<'a>(
    buf: &'a [u8],
    pos: usize,
    key: &[u8],
) -> nagare_forward::msgpack::Scan<(usize, usize, Option<&'a [u8]>)> {
    let tpos = pos + 1;
    // An EventTime (fixext 8) is most times; anything else is skipped.
    let record = match buf.get(tpos) {
        Some(0xd7) if tpos + 10 <= buf.len() => tpos + 10,
        _ => skip_value(buf, tpos)?,
    };
    let Ok((n, mut p)) = read_map_len(buf, record) else {
        return Ok((record, skip_value(buf, record)?, None));
    };
    let (mut value, mut seen) = (None, false);
    for _ in 0..n {
        let k = read_str_or_bin(buf, p)?;
        p = match k {
            // The first `key` only, as `field`.
            Some((s, e)) if !seen && &buf[s..e] == key => {
                seen = true;
                match read_str_or_bin(buf, e)? {
                    Some((a, b)) => {
                        value = Some(&buf[a..b]);
                        b
                    }
                    None => skip_value(buf, e)?,
                }
            }
            Some((_, e)) => skip_value(buf, e)?,
            None => skip_value(buf, skip_value(buf, p)?)?,
        };
    }
    Ok((record, p, value))
}

/// Finds the value of a top-level string key in a msgpack map record and
/// returns its raw bytes when it is a str or bin.
pub fn field<'a>(record: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    let (n, mut p) = read_map_len(record, 0).ok()?;
    for _ in 0..n {
        let k = read_str_or_bin(record, p).ok()?;
        let vstart = match k {
            Some((s, e)) => {
                if &record[s..e] == key {
                    return read_str_or_bin(record, e)
                        .ok()
                        .flatten()
                        .map(|(a, b)| &record[a..b]);
                }
                e
            }
            None => skip_value(record, p).ok()?,
        };
        p = skip_value(record, vstart).ok()?;
    }
    None
}

/// RFC 3339 UTC time with nanoseconds, e.g. 2026-11-22T00:18:54.123456789Z.
///
/// The file, stdout and redis outputs write it for every event, and the
/// events of a chunk mostly share their second: the date and time of the
/// last second are kept per thread, so most calls write two copies and
/// nine digits (chrono's calendar and `write!` took a tenth of a syslog →
/// file relay's CPU at 100 B).
pub fn write_rfc3339(out: &mut Vec<u8>, t: EventTime) {
    use std::cell::Cell;
    thread_local! {
        /// (seconds, "YYYY-MM-DDTHH:MM:SS.") of the last call on this thread.
        static LAST: Cell<(u32, [u8; 20])> = const { Cell::new((u32::MAX, [0; 20])) };
    }
    let nanos = t.nanos.min(999_999_999);
    let (secs, mut head) = LAST.get();
    if secs != t.secs {
        head = second_text(t.secs);
        LAST.set((t.secs, head));
    }
    out.extend_from_slice(&head);
    let mut digits = [b'0'; 10];
    let mut n = nanos;
    for d in digits[..9].iter_mut().rev() {
        *d = b'0' + (n % 10) as u8;
        n /= 10;
    }
    digits[9] = b'Z';
    out.extend_from_slice(&digits);
}

/// "YYYY-MM-DDTHH:MM:SS." of a Unix second.
fn second_text(secs: u32) -> [u8; 20] {
    use chrono::{DateTime, Datelike, Timelike};
    use std::io::Write;
    let dt = DateTime::from_timestamp(secs as i64, 0).unwrap_or_default();
    let mut head = [0u8; 20];
    let _ = write!(
        &mut head[..],
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.",
        dt.year(),
        dt.month(),
        dt.day(),
        dt.hour(),
        dt.minute(),
        dt.second()
    );
    head
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_matches_chrono_across_seconds() {
        let times = [
            (0, 0),
            (1_700_000_000, 5),
            (1_700_000_000, 999_999_999),
            (1_700_000_001, 123_456_789),
            (1_700_000_000, 0),
            (u32::MAX, 1_500_000_000),
            (951_782_400, 7), // 2000-02-29
        ];
        for (secs, nanos) in times {
            let mut out = Vec::new();
            write_rfc3339(&mut out, EventTime::new(secs, nanos));
            let dt = chrono::DateTime::from_timestamp(secs as i64, nanos.min(999_999_999)).unwrap();
            let want = dt.format("%Y-%m-%dT%H:%M:%S%.9fZ").to_string();
            assert_eq!(String::from_utf8(out).unwrap(), want, "{secs}.{nanos}");
        }
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
