//! msgpack → LTSV (labeled tab-separated values), one event per line.

use nagare_forward::msgpack::{read_map_len, read_str_or_bin, skip_value};
use nagare_forward::EventTime;

/// Writes `time:…<TAB>tag:…<TAB>key:value…` and a newline. String values are
/// written raw with tabs and newlines escaped; other values as JSON.
pub fn write_event(out: &mut Vec<u8>, tag: &str, time: EventTime, record: &[u8]) {
    out.extend_from_slice(b"time:");
    nagare_core::event::write_rfc3339(out, time);
    out.extend_from_slice(b"\ttag:");
    raw(out, tag.as_bytes());
    if let Ok((n, mut p)) = read_map_len(record, 0) {
        for _ in 0..n {
            out.push(b'\t');
            p = match read_str_or_bin(record, p) {
                Ok(Some((s, e))) => {
                    raw(out, &record[s..e]);
                    e
                }
                _ => p + nagare_core::json::write_value(out, &record[p..]),
            };
            out.push(b':');
            p = match read_str_or_bin(record, p) {
                Ok(Some((s, e))) => {
                    raw(out, &record[s..e]);
                    e
                }
                _ => {
                    let end = skip_value(record, p).unwrap_or(record.len());
                    nagare_core::json::write_value(out, &record[p..end]);
                    end
                }
            };
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
