//! What goes over the program's pipes: a batch's events and then `null`
//! (the JSON line `null`, or the msgpack nil byte 0xc0); the program
//! answers with its events for the batch and then echoes the `null`.
//! `cat` answers every event unchanged, so it is a valid program in both
//! formats.
//!
//! - json: `{"tag":"app","time":1700000000.000000123,"record":{…}}` per
//!   line. The time is written with all nine digits of its nanoseconds, so
//!   a program that copies the number keeps it exactly. In an answer `tag`
//!   (default: the batch's tag) and `time` (default: now) may be left out.
//! - msgpack: one `[tag, time, record]` array per event, the time as the
//!   event had it (an EventTime ext, or whole seconds).

use std::fmt;

use bytes::Bytes;
use nagare_core::json;
use nagare_core::record;
use nagare_forward::msgpack::{
    expect_str_or_bin, is_map, read_array_len, read_uint, skip_value, write_map_len, write_str,
};
use nagare_forward::{EventTime, ScanError};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::parsers::json::{Emit, REPEATED_KEY};

#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ExecFormat {
    /// One JSON object `{"tag":…,"time":…,"record":{…}}` per line; the line
    /// `null` ends a batch.
    #[default]
    Json,
    /// A stream of msgpack `[tag, time, record]` arrays; nil ends a batch.
    Msgpack,
}

/// The field that marks an event the program failed on.
pub const EXEC_ERROR: &[u8] = b"exec_error";

/// Writes the batch's events for the program, then the end of the batch.
pub fn encode(format: ExecFormat, tag: &str, parts: &[Bytes], out: &mut Vec<u8>) {
    let mut tag_json = Vec::with_capacity(tag.len() + 2);
    json::write_string(&mut tag_json, tag.as_bytes());
    for part in parts {
        for (time, rec, entry) in nagare_core::record::entries(part) {
            match format {
                ExecFormat::Json => {
                    out.extend_from_slice(b"{\"tag\":");
                    out.extend_from_slice(&tag_json);
                    out.extend_from_slice(b",\"time\":");
                    let mut n = itoa::Buffer::new();
                    out.extend_from_slice(n.format(time.secs).as_bytes());
                    let nanos = n.format(1_000_000_000 + time.nanos.min(999_999_999));
                    // "1000000123" → ".000000123"
                    out.push(b'.');
                    out.extend_from_slice(&nanos.as_bytes()[1..]);
                    out.extend_from_slice(b",\"record\":");
                    json::write_value(out, rec);
                    out.extend_from_slice(b"}\n");
                }
                ExecFormat::Msgpack => {
                    out.push(0x93);
                    write_str(out, tag.as_bytes());
                    // The entry is 0x92, the time as it came, the record.
                    out.extend_from_slice(&entry[1..]);
                }
            }
        }
    }
    match format {
        ExecFormat::Json => out.extend_from_slice(b"null\n"),
        ExecFormat::Msgpack => out.push(0xc0),
    }
}

/// Finds the next whole value of an answer in `buf` from `pos`: where it
/// ends and whether it is the end of the batch; `None` when more bytes are
/// needed.
pub fn next_value(
    format: ExecFormat,
    buf: &[u8],
    pos: usize,
) -> Result<Option<(usize, bool)>, String> {
    match format {
        ExecFormat::Json => Ok(memchr::memchr(b'\n', &buf[pos..]).map(|n| {
            let line = &buf[pos..pos + n];
            (pos + n + 1, line.trim_ascii() == b"null")
        })),
        ExecFormat::Msgpack => match skip_value(buf, pos) {
            Ok(end) => Ok(Some((end, buf[pos] == 0xc0))),
            Err(ScanError::Incomplete(_)) => Ok(None),
            Err(e) => Err(format!("its output is not msgpack: {e}")),
        },
    }
}

/// The events of an answer as PackedForward entries, grouped by tag:
/// those of the batch's tag first (maybe none), then one group per other
/// tag in the order they first appear.
#[derive(Debug, Default)]
pub struct Answer {
    pub groups: Vec<(String, Vec<u8>, u32)>,
}

impl Answer {
    fn entries_of(&mut self, tag: &str) -> &mut (String, Vec<u8>, u32) {
        let i = match self.groups.iter().position(|(t, _, _)| t == tag) {
            Some(i) => i,
            None => {
                self.groups.push((tag.to_string(), Vec::new(), 0));
                self.groups.len() - 1
            }
        };
        &mut self.groups[i]
    }

    fn push(&mut self, tag: &str, time: &[u8], record: &[u8]) {
        let (_, entries, count) = self.entries_of(tag);
        entries.push(0x92);
        entries.extend_from_slice(time);
        entries.extend_from_slice(record);
        *count += 1;
    }
}

/// Reads the program's answer to a batch of `tag` (its values before the
/// end of the batch). The error says what is wrong, for the log and the
/// `exec_error` field.
pub fn decode(format: ExecFormat, tag: &str, answer: &[u8]) -> Result<Answer, String> {
    let mut out = Answer::default();
    out.entries_of(tag);
    match format {
        ExecFormat::Json => {
            let mut record = Vec::new();
            for (n, line) in answer.split(|&b| b == b'\n').enumerate() {
                if !line.trim_ascii().is_empty() {
                    json_event(line, tag, &mut record, &mut out)
                        .map_err(|e| format!("line {} of its answer: {e}", n + 1))?;
                }
            }
        }
        ExecFormat::Msgpack => {
            let mut pos = 0;
            let mut n = 0;
            while pos < answer.len() {
                n += 1;
                pos = msgpack_event(answer, pos, &mut out)
                    .map_err(|e| format!("event {n} of its answer: {e}"))?;
            }
        }
    }
    Ok(out)
}

/// The keys of an answer line; any other is an error.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum Key {
    Tag,
    Time,
    Record,
}

/// An answer line as read: the record is already msgpack (in `Line::record`).
struct LineRead<'de> {
    tag: Option<&'de RawValue>,
    time: Option<&'de RawValue>,
    record: bool,
}

/// Reads an answer line, writing its record as msgpack while serde_json
/// reads it (no tree of values: the parsers' streaming `Emit`).
struct Line<'o> {
    record: &'o mut Vec<u8>,
}

impl<'de> DeserializeSeed<'de> for Line<'_> {
    type Value = LineRead<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<LineRead<'de>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Line<'_> {
    type Value = LineRead<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object {\"tag\":…,\"time\":…,\"record\":{…}}")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LineRead<'de>, A::Error> {
        let mut line = LineRead {
            tag: None,
            time: None,
            record: false,
        };
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Tag if line.tag.is_none() => line.tag = Some(map.next_value()?),
                Key::Time if line.time.is_none() => line.time = Some(map.next_value()?),
                Key::Record if !line.record => {
                    map.next_value_seed(Emit(&mut *self.record))?;
                    line.record = true;
                }
                _ => return Err(de::Error::custom("a key appears twice")),
            }
        }
        Ok(line)
    }
}

fn json_event(
    text: &[u8],
    batch_tag: &str,
    record: &mut Vec<u8>,
    out: &mut Answer,
) -> Result<(), String> {
    record.clear();
    let mut de = serde_json::Deserializer::from_slice(text);
    let line = Line {
        record: &mut *record,
    }
    .deserialize(&mut de)
    .and_then(|line| de.end().map(|()| line))
    .map_err(|e| {
        let e = e.to_string();
        if e.starts_with(REPEATED_KEY) {
            return "the record has a key twice".to_string();
        }
        let text = String::from_utf8_lossy(&text[..text.len().min(80)]).into_owned();
        format!("{e} in {text:?} (expected {{\"tag\":…,\"time\":…,\"record\":{{…}}}})")
    })?;
    if !line.record {
        return Err("no \"record\"".into());
    }
    if !matches!(record.first(), Some(0x80..=0x8f | 0xde | 0xdf)) {
        return Err("\"record\" must be a JSON object".into());
    }
    let owned;
    let tag = match line.tag.map(RawValue::get) {
        None | Some("null") => batch_tag,
        // The common case: the batch's tag, copied back as it was written.
        Some(t)
            if t.len() == batch_tag.len() + 2
                && t.starts_with('"')
                && &t[1..t.len() - 1] == batch_tag
                && !batch_tag.contains('\\') =>
        {
            batch_tag
        }
        Some(t) => {
            owned = serde_json::from_str::<String>(t)
                .map_err(|_| format!("\"tag\" must be a string, found {t}"))?;
            if owned.is_empty() {
                return Err("\"tag\" is empty".into());
            }
            &owned
        }
    };
    let time = match line.time {
        Some(raw) => json_time(raw.get())?,
        None => EventTime::now(),
    };
    out.push(tag, &time.to_bytes(), record);
    Ok(())
}

/// Reads a JSON time: seconds since the epoch, `1700000000` or
/// `1700000000.123456789` (read digit by digit, so nanoseconds stay exact),
/// another number form as a float; `null` is now.
pub fn json_time(text: &str) -> Result<EventTime, String> {
    let t = text.trim();
    let bad =
        || format!("\"time\" must be seconds since the epoch such as 1700000000.5, found {t}");
    if t == "null" {
        return Ok(EventTime::now());
    }
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (whole, frac) = t.split_once('.').unwrap_or((t, ""));
    if digits(whole) && (frac.is_empty() || digits(frac)) && !t.ends_with('.') {
        let secs = whole.parse::<u32>().map_err(|_| bad())?;
        let mut nanos = 0u32;
        for i in 0..9 {
            nanos = nanos * 10 + frac.as_bytes().get(i).map_or(0, |b| u32::from(b - b'0'));
        }
        return Ok(EventTime::new(secs, nanos));
    }
    match t.parse::<f64>() {
        Ok(x) if (0.0..4_294_967_296.0).contains(&x) => {
            let secs = x.trunc();
            let nanos = ((x - secs) * 1e9).round().min(999_999_999.0);
            Ok(EventTime::new(secs as u32, nanos as u32))
        }
        _ => Err(bad()),
    }
}

/// Reads the `[tag, time, record]` at `pos`; returns where it ends.
fn msgpack_event(buf: &[u8], pos: usize, out: &mut Answer) -> Result<usize, String> {
    let scan = |e: ScanError| e.to_string();
    let (n, p) = read_array_len(buf, pos).map_err(|_| "expected an array [tag, time, record]")?;
    if n != 3 {
        return Err(format!(
            "expected an array [tag, time, record], found an array of {n}"
        ));
    }
    let (a, b) = expect_str_or_bin(buf, p, "tag").map_err(scan)?;
    let tag = std::str::from_utf8(&buf[a..b]).map_err(|_| "the tag is not UTF-8")?;
    if tag.is_empty() {
        return Err("the tag is empty".into());
    }
    let time_end = skip_value(buf, b).map_err(scan)?;
    let time = &buf[b..time_end];
    let canonical;
    let time = match time.first() {
        // An EventTime as it is.
        Some(0xd7) if time.get(1) == Some(&0) => time,
        Some(0xca | 0xcb) => {
            let x = rmpv::decode::read_value(&mut &time[..]).map_err(|e| e.to_string())?;
            canonical = json_time(&x.as_f64().unwrap_or(-1.0).to_string())?.to_bytes();
            &canonical[..]
        }
        _ => match read_uint(buf, b) {
            Ok(Some((secs, _))) if secs <= u64::from(u32::MAX) => time,
            _ => return Err("the time must be an EventTime or whole seconds".into()),
        },
    };
    if !is_map(buf, time_end).map_err(scan)? {
        return Err("the record must be a map".into());
    }
    let end = skip_value(buf, time_end).map_err(scan)?;
    out.push(tag, time, &buf[time_end..end]);
    Ok(end)
}

/// Writes the batch's entries unchanged but for an `exec_error` field in
/// each record holding `reason` (replacing one it may have had).
pub fn mark(parts: &[Bytes], reason: &str, out: &mut Vec<u8>) {
    for part in parts {
        let mut start = 0;
        for (rec, end) in record::entry_bounds(part) {
            out.extend_from_slice(&part[start..rec]);
            mark_record(&part[rec..end], reason.as_bytes(), out);
            start = end;
        }
    }
}

fn mark_record(rec: &[u8], reason: &[u8], out: &mut Vec<u8>) {
    let Some((n, first)) = record::map_at(rec, 0) else {
        // Inputs only pass maps on; should one not be, it goes on as it was.
        out.extend_from_slice(rec);
        return;
    };
    let is_mark = |p: &record::PairAt| p.key.is_some_and(|(a, b)| &rec[a..b] == EXEC_ERROR);
    let mut pairs = Vec::with_capacity(n);
    let mut p = first;
    for _ in 0..n {
        let Some(pair) = record::pair_at(rec, p) else {
            out.extend_from_slice(rec);
            return;
        };
        pairs.push((p, pair));
        p = pair.end;
    }
    let kept = pairs.iter().filter(|(_, pair)| !is_mark(pair)).count();
    write_map_len(out, kept + 1);
    for (start, pair) in &pairs {
        if !is_mark(pair) {
            out.extend_from_slice(&rec[*start..pair.end]);
        }
    }
    write_str(out, EXEC_ERROR);
    write_str(out, reason);
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

    fn batch(times: &[EventTime], recs: &[Value]) -> Bytes {
        let mut b = Vec::new();
        for (t, r) in times.iter().zip(recs) {
            nagare_forward::write_entry(&mut b, *t, &enc(r));
        }
        Bytes::from(b)
    }

    fn rec(k: &str, v: Value) -> Value {
        Value::Map(vec![(k.into(), v)])
    }

    /// What `cat` answers is the input without its end of batch.
    fn cat(input: &[u8], format: ExecFormat) -> &[u8] {
        let end = match format {
            ExecFormat::Json => input.len() - 5,
            ExecFormat::Msgpack => input.len() - 1,
        };
        &input[..end]
    }

    #[test]
    fn a_batch_goes_through_cat_unchanged_in_both_formats() {
        let times = [
            EventTime::new(1_700_000_000, 123),
            EventTime::new(5, 999_999_999),
        ];
        let recs = [rec("a", "x\n\"y".into()), rec("n", Value::from(-7))];
        let b = batch(&times, &recs);
        for format in [ExecFormat::Json, ExecFormat::Msgpack] {
            let mut input = Vec::new();
            encode(format, "app.x", std::slice::from_ref(&b), &mut input);
            let answer = decode(format, "app.x", cat(&input, format)).unwrap();
            assert_eq!(answer.groups.len(), 1, "{format:?}");
            let (tag, entries, n) = &answer.groups[0];
            assert_eq!((tag.as_str(), *n), ("app.x", 2));
            assert_eq!(entries[..], b[..], "{format:?}");
        }
        let mut input = Vec::new();
        encode(ExecFormat::Json, "app.x", &[b], &mut input);
        assert_eq!(
            String::from_utf8(input).unwrap(),
            "{\"tag\":\"app.x\",\"time\":1700000000.000000123,\"record\":{\"a\":\"x\\n\\\"y\"}}\n\
             {\"tag\":\"app.x\",\"time\":5.999999999,\"record\":{\"n\":-7}}\nnull\n"
        );
    }

    #[test]
    fn answers_split_by_tag_with_defaults_and_times_read_exactly() {
        let answer = b"{\"record\":{\"a\":1}}\n\n\
            {\"tag\":\"other\",\"time\":12.5,\"record\":{}}\n\
            {\"tag\":\"t\",\"time\":3,\"record\":{\"b\":[true,null]}}\n";
        let got = decode(ExecFormat::Json, "t", answer).unwrap();
        let tags: Vec<(&str, u32)> = got
            .groups
            .iter()
            .map(|(t, _, n)| (t.as_str(), *n))
            .collect();
        assert_eq!(tags, [("t", 2), ("other", 1)]);
        let mut want_other = Vec::new();
        nagare_forward::write_entry(&mut want_other, EventTime::new(12, 500_000_000), &[0x80]);
        assert_eq!(got.groups[1].1, want_other);
        for (text, secs, nanos) in [
            ("1700000000.000000001", 1_700_000_000, 1),
            ("7", 7, 0),
            ("7.1234567891", 7, 123_456_789),
            ("1.5e3", 1500, 0),
        ] {
            assert_eq!(json_time(text), Ok(EventTime::new(secs, nanos)), "{text}");
        }
        for bad in ["-1", "\"now\"", "1e20", "."] {
            assert!(json_time(bad).is_err(), "{bad}");
        }
        assert!(decode(ExecFormat::Json, "t", b"[]\n")
            .unwrap_err()
            .contains("line 1"));
        assert!(
            decode(ExecFormat::Json, "t", b"{\"record\":{}}\n{\"record\":1}\n")
                .unwrap_err()
                .contains("line 2 of its answer: \"record\" must be a JSON object")
        );
        assert!(decode(ExecFormat::Json, "t", b"{\"recod\":{}}\n")
            .unwrap_err()
            .contains("unknown field `recod`"));
        for (bad, why) in [
            (
                &b"{\"record\":{\"a\":1,\"a\":2}}"[..],
                "the record has a key twice",
            ),
            (b"{\"record\":{},\"record\":{}}", "a key appears twice"),
            (b"{\"tag\":\"t\"}", "no \"record\""),
            (
                b"{\"tag\":7,\"record\":{}}",
                "\"tag\" must be a string, found 7",
            ),
            (b"{\"record\":{}} {}", "trailing characters"),
        ] {
            let err = decode(ExecFormat::Json, "t", bad).unwrap_err();
            assert!(err.contains(why), "{err}");
        }
        // A tag written with escapes is still the batch's tag.
        let got = decode(
            ExecFormat::Json,
            "a.b",
            b"{\"tag\":\"a\\u002eb\",\"record\":{}}",
        )
        .unwrap();
        assert_eq!(got.groups.len(), 1);
        assert_eq!(got.groups[0].2, 1);
    }

    #[test]
    fn msgpack_answers_are_checked() {
        let ok = enc(&Value::Array(vec![
            "u".into(),
            Value::from(9),
            rec("k", 1.into()),
        ]));
        let got = decode(ExecFormat::Msgpack, "t", &ok).unwrap();
        assert_eq!(got.groups[0].2, 0, "none of the batch's tag");
        assert_eq!(got.groups[1].0, "u");
        let float = enc(&Value::Array(vec![
            "t".into(),
            Value::F64(2.25),
            rec("k", 1.into()),
        ]));
        let got = decode(ExecFormat::Msgpack, "t", &float).unwrap();
        assert_eq!(
            &got.groups[0].1[1..11],
            &EventTime::new(2, 250_000_000).to_bytes()
        );
        for (bad, why) in [
            (Value::Array(vec!["t".into(), 1.into()]), "array of 2"),
            (
                Value::Array(vec!["t".into(), 1.into(), 2.into()]),
                "must be a map",
            ),
            (
                Value::Array(vec!["t".into(), "x".into(), rec("k", 1.into())]),
                "time",
            ),
            (
                Value::Array(vec!["".into(), 1.into(), rec("k", 1.into())]),
                "tag is empty",
            ),
            (Value::from(3), "expected an array"),
        ] {
            let err = decode(ExecFormat::Msgpack, "t", &enc(&bad)).unwrap_err();
            assert!(
                err.contains(why) && err.starts_with("event 1"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn framing_finds_the_end_of_a_batch() {
        let j = ExecFormat::Json;
        assert_eq!(next_value(j, b"{\"rec", 0), Ok(None));
        assert_eq!(next_value(j, b"{}\n null \n", 0), Ok(Some((3, false))));
        assert_eq!(next_value(j, b"{}\n null \n", 3), Ok(Some((10, true))));
        let m = ExecFormat::Msgpack;
        assert_eq!(next_value(m, &[0x92, 0x01], 0), Ok(None));
        assert_eq!(next_value(m, &[0x91, 0x01, 0xc0], 0), Ok(Some((2, false))));
        assert_eq!(next_value(m, &[0x91, 0x01, 0xc0], 2), Ok(Some((3, true))));
        assert!(next_value(m, &[0xc1], 0).is_err());
    }

    #[test]
    fn marking_adds_or_replaces_exec_error() {
        let t = EventTime::new(1, 2);
        let recs = [
            rec("a", 1.into()),
            Value::Map(vec![
                ("exec_error".into(), "old".into()),
                ("b".into(), 2.into()),
            ]),
        ];
        let mut out = Vec::new();
        mark(&[batch(&[t, t], &recs)], "it hung", &mut out);
        let got: Vec<Value> = nagare_core::record::entries(&out)
            .map(|(time, r, _)| {
                assert_eq!(time, t);
                rmpv::decode::read_value(&mut &r[..]).unwrap()
            })
            .collect();
        assert_eq!(
            got,
            [
                Value::Map(vec![
                    ("a".into(), 1.into()),
                    ("exec_error".into(), "it hung".into())
                ]),
                Value::Map(vec![
                    ("b".into(), 2.into()),
                    ("exec_error".into(), "it hung".into())
                ]),
            ]
        );
    }
}
