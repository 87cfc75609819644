//! What the queue outputs (redis, kafka) write for an event: Logstash's JSON
//! layout, the msgpack entry, or one field's value (`QueueFormat`).

use nagare_core::event::write_rfc3339;
use nagare_core::json;
use nagare_core::record;
use nagare_forward::EventTime;
use serde::Deserialize;

/// How each event is written.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum QueueFormat {
    /// Logstash's layout: `{"@timestamp":"<RFC 3339, UTC>", <the record's fields>}`.
    #[default]
    Json,
    /// The msgpack entry `[time, record]` (time as forward EventTime).
    Msgpack,
    /// One field of the record (`message_key`), as it is.
    SingleValue,
}

/// Writes one event in Logstash's JSON layout: `@timestamp` first (RFC
/// 3339, UTC, milliseconds when the time has no finer part, else
/// nanoseconds), then the record's fields as they are (a `tags` field, when
/// the record has one, is one of them), and `tag_field` when given.
pub fn write_logstash_json(
    out: &mut Vec<u8>,
    time: EventTime,
    record: &[u8],
    tag_field: Option<(&str, &str)>,
) {
    write_json_with_time(out, Some("@timestamp"), time, record, tag_field)
}

/// Writes one event as [`write_logstash_json`] does, the time in
/// `time_field` (RFC 3339) or nowhere (None: the record's fields alone,
/// then `tag_field`).
pub fn write_json_with_time(
    out: &mut Vec<u8>,
    time_field: Option<&str>,
    time: EventTime,
    record: &[u8],
    tag_field: Option<(&str, &str)>,
) {
    let start = out.len();
    out.push(b'{');
    if let Some(k) = time_field {
        json::write_string(out, k.as_bytes());
        out.extend_from_slice(b":\"");
        write_timestamp(out, time);
        out.push(b'"');
    }
    // A comma before each field but the object's first.
    let sep = |out: &mut Vec<u8>| {
        if out.len() > start + 1 {
            out.push(b',');
        }
    };
    // Records are maps (checked on the way in); anything else is kept whole.
    let Some((n, mut p)) = record::map_at(record, 0) else {
        sep(out);
        out.extend_from_slice(b"\"message\":");
        json::write_value(out, record);
        return out.push(b'}');
    };
    for _ in 0..n {
        let Some(pair) = record::pair_at(record, p) else {
            break;
        };
        let (kend, vend) = (pair.value, pair.end);
        let key = pair.key.map(|(s, e)| &record[s..e]);
        // The event's time is written above; a field of the same name would
        // make a second key.
        let skip = key.is_some_and(|k| {
            time_field.is_some_and(|t| t.as_bytes() == k)
                || tag_field.is_some_and(|(t, _)| t.as_bytes() == k)
        });
        if !skip {
            sep(out);
            match key {
                Some(k) => json::write_string(out, k),
                None => {
                    // JSON keys are strings: quote the key's JSON text.
                    let mut k = Vec::new();
                    json::write_value(&mut k, &record[p..kend]);
                    json::write_string(out, &k);
                }
            }
            out.push(b':');
            json::write_value(out, &record[kend..vend]);
        }
        p = vend;
    }
    if let Some((k, tag)) = tag_field {
        sep(out);
        json::write_string(out, k.as_bytes());
        out.push(b':');
        json::write_string(out, tag.as_bytes());
    }
    out.push(b'}');
}

/// RFC 3339 in UTC; milliseconds unless the time has a finer part.
fn write_timestamp(out: &mut Vec<u8>, time: EventTime) {
    write_rfc3339(out, time);
    if time.nanos.is_multiple_of(1_000_000) {
        // "…:SS.mmm000000Z" → "…:SS.mmmZ"
        let z = out.len() - 1;
        out.drain(z - 6..z);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Vec<u8> {
        let v = rmpv::Value::Map(vec![
            ("message".into(), "hi \"there\"".into()),
            ("tags".into(), rmpv::Value::Array(vec!["a".into()])),
            ("@timestamp".into(), "stale".into()),
            ("n".into(), 3.into()),
        ]);
        let mut b = Vec::new();
        rmpv::encode::write_value(&mut b, &v).unwrap();
        b
    }

    #[test]
    fn logstash_layout() {
        let mut out = Vec::new();
        write_logstash_json(
            &mut out,
            EventTime::new(1_700_000_000, 123_000_000),
            &record(),
            None,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"@timestamp":"2023-11-14T22:13:20.123Z","message":"hi \"there\"","tags":["a"],"n":3}"#
        );
        let mut out = Vec::new();
        write_logstash_json(
            &mut out,
            EventTime::new(1_700_000_000, 5),
            &[0x80],
            Some(("tag", "app.web")),
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"@timestamp":"2023-11-14T22:13:20.000000005Z","tag":"app.web"}"#
        );
    }
}
