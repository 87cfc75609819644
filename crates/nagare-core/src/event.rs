//! The RFC 3339 text of an event time. Entries and records are walked by
//! [`crate::record`].

use nagare_forward::EventTime;

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
}
