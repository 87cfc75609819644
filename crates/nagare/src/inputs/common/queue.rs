//! What the queue inputs (redis, kafka) share: the formats of the elements
//! they read, turning an element into an entry, and the backoff between
//! reconnects.

use std::time::Duration;

use nagare_forward::msgpack::{read_array_len, skip_value, write_map_len, write_str};
use nagare_forward::EventTime;
use serde::Deserialize;

use super::lines::encode_line;
use crate::parsers::Parser;

/// How an element becomes an event.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum InputFormat {
    /// A JSON object; its `@timestamp` (Logstash) is the event time.
    #[default]
    Json,
    /// A msgpack map, or a `[time, record]` entry (the `redis` output's msgpack).
    Msgpack,
    /// Text, through `[input.parser]` (default type "none": `{"message": "<text>"}`).
    #[serde(alias = "raw")]
    Text,
}

/// Appends the entry `[time, record]` of one queue element read in `format`
/// (shared with the kafka input); `now` is the time of an element without
/// its own. False when it did not parse (the record then holds it and a
/// `parse_error`).
pub(crate) fn decode_element(
    format: InputFormat,
    parser: &Parser,
    v: &[u8],
    now: EventTime,
    out: &mut Vec<u8>,
) -> bool {
    if format != InputFormat::Msgpack {
        return encode_line(out, now, v, parser, None);
    }
    match msgpack_event(v) {
        Some(MsgpackEvent::Entry) => out.extend_from_slice(v),
        Some(MsgpackEvent::Record) => {
            out.push(0x92);
            out.extend_from_slice(&now.to_bytes());
            out.extend_from_slice(v);
        }
        None => {
            out.push(0x92);
            out.extend_from_slice(&now.to_bytes());
            write_map_len(out, 2);
            write_str(out, parser.message_key().as_bytes());
            write_str(out, &String::from_utf8_lossy(v).into_owned().into_bytes());
            write_str(out, b"parse_error");
            write_str(out, b"not a msgpack map or [time, map] entry");
            return false;
        }
    }
    true
}

/// A string field of the record of entry `[time, record]`.
pub(crate) fn record_field<'a>(entry: &'a [u8], key: &str) -> Option<&'a str> {
    let rec = nagare_core::record::skip(entry, 1)?;
    nagare_core::record::field(&entry[rec..], key.as_bytes())
        .and_then(|v| std::str::from_utf8(v).ok())
}

enum MsgpackEvent {
    /// `[time, map]` with an EventTime or integer time.
    Entry,
    /// A map alone.
    Record,
}

/// What a msgpack element is, when it is one whole value that makes an event.
/// One walk of the element: the map (alone, or the entry's record) is the
/// last value, so it must end where the element ends.
fn msgpack_event(v: &[u8]) -> Option<MsgpackEvent> {
    let is_map = |p| nagare_forward::msgpack::is_map(v, p).ok();
    let whole_from = |p| (skip_value(v, p).ok()? == v.len()).then_some(());
    if is_map(0)? {
        whole_from(0)?;
        return Some(MsgpackEvent::Record);
    }
    let (2, p) = read_array_len(v, 0).ok()? else {
        return None;
    };
    let time_ok = v.get(p) == Some(&0xd7) && v.get(p + 1) == Some(&0x00)
        || nagare_forward::msgpack::read_uint(v, p).ok()?.is_some();
    let rec = skip_value(v, p).ok()?;
    (time_ok && is_map(rec)?).then_some(())?;
    whole_from(rec)?;
    Some(MsgpackEvent::Entry)
}

/// Backoff between reconnects of an input: doubles from 100 ms to 5 s.
pub struct Backoff(Duration);

impl Default for Backoff {
    fn default() -> Self {
        Backoff(Duration::from_millis(100))
    }
}

impl Backoff {
    /// The next wait, with up to a quarter of jitter so consumers spread out.
    pub fn next_wait(&mut self) -> Duration {
        let d = self.0;
        self.0 = (self.0 * 2).min(Duration::from_secs(5));
        d + d.mul_f64(rand::random::<f64>() / 4.0)
    }

    pub fn reset(&mut self) {
        self.0 = Duration::from_millis(100);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn msgpack_elements() {
        let mut entry = vec![0x92];
        entry.extend_from_slice(&EventTime::new(5, 6).to_bytes());
        entry.push(0x80);
        assert!(matches!(msgpack_event(&entry), Some(MsgpackEvent::Entry)));
        assert!(matches!(msgpack_event(&[0x80]), Some(MsgpackEvent::Record)));
        assert!(matches!(
            msgpack_event(&[0x92, 0x05, 0x80]),
            Some(MsgpackEvent::Entry)
        ));
        assert!(msgpack_event(b"{\"a\":1}").is_none());
        assert!(msgpack_event(&[0x80, 0x80]).is_none());
        assert!(msgpack_event(&[0x92, 0x05, 0x01]).is_none());
        // Trailing bytes, a third item, a cut record: not one whole event.
        assert!(msgpack_event(&[0x92, 0x05, 0x80, 0x01]).is_none());
        assert!(msgpack_event(&[0x93, 0x05, 0x80, 0x80]).is_none());
        assert!(msgpack_event(&[0x92, 0x05, 0x81, 0xa1]).is_none());
        assert!(matches!(
            msgpack_event(&[0x92, 0x05, 0x81, 0xa1, b'a', 0x91, 0x01]),
            Some(MsgpackEvent::Entry)
        ));
    }
}
