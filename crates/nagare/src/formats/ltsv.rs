//! msgpack → LTSV (labeled tab-separated values), one event per line.

use nagare_core::record;
use nagare_forward::EventTime;

/// Writes `time:…<TAB>tag:…<TAB>key:value…` and a newline. String values are
/// written raw with tabs and newlines escaped; other values as JSON.
pub fn write_event(out: &mut Vec<u8>, tag: &str, time: EventTime, record: &[u8]) {
    out.extend_from_slice(b"time:");
    nagare_core::event::write_rfc3339(out, time);
    out.extend_from_slice(b"\ttag:");
    raw(out, tag.as_bytes());
    if let Some((n, mut p)) = record::map_at(record, 0) {
        for _ in 0..n {
            let Some(pair) = record::pair_at(record, p) else {
                break;
            };
            out.push(b'\t');
            match pair.key {
                Some((s, e)) => raw(out, &record[s..e]),
                None => {
                    nagare_core::json::write_value(out, &record[p..pair.value]);
                }
            }
            out.push(b':');
            match record::str_at(record, pair.value) {
                Some((s, e)) => raw(out, &record[s..e]),
                None => {
                    nagare_core::json::write_value(out, &record[pair.value..pair.end]);
                }
            }
            p = pair.end;
        }
    }
    out.push(b'\n');
}

fn raw(out: &mut Vec<u8>, s: &[u8]) {
    for &b in s {
        match b {
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            _ => out.push(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labeled_line() {
        // {"msg": "a\tb", "n": 7}
        let rec = [
            0x82, 0xa3, b'm', b's', b'g', 0xa3, b'a', b'\t', b'b', 0xa1, b'n', 0x07,
        ];
        let mut out = Vec::new();
        write_event(&mut out, "x.y", EventTime::new(0, 0), &rec);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "time:1970-01-01T00:00:00.000000000Z\ttag:x.y\tmsg:a\\tb\tn:7\n"
        );
    }
}
