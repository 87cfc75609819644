//! `apache_error`: Apache's error log (2.2 and 2.4 forms), with Fluentd's
//! expression: `level` (2.4: `module:level`), `pid`, `client`, `message`.

pub const EXPRESSION: &str = r"^\[[^ ]* (?<time>[^\]]*)\] \[(?<level>[^\]]*)\](?: \[pid (?<pid>[^\]]*)\])?(?: \[client (?<client>[^\]]*)\])? (?<message>.*)$";

/// `Oct 11 14:32:52 2000` or, with Apache 2.4, `Oct 11 14:32:52.123456 2000`
/// (the weekday is left out by the expression); local time.
pub const TIME_FORMAT: &str = "%b %d %H:%M:%S%.f %Y";

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use chrono::TimeZone;

    fn local(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> u32 {
        chrono::Local
            .with_ymd_and_hms(y, mo, d, h, mi, s)
            .unwrap()
            .timestamp() as u32
    }

    #[test]
    fn sample_lines() {
        let p = parser("type = \"apache_error\"");
        let text = sample("apache_error.log");
        let lines: Vec<&str> = text.lines().collect();
        let (v, t, ok) = run(&p, lines[0]);
        assert!(ok, "{v}");
        assert_eq!(t.map(|t| t.secs), Some(local(2000, 10, 11, 14, 32, 52)));
        assert_eq!(keys(&v), ["level", "client", "message"]);
        assert_eq!(s(&v, "level"), "error");
        assert_eq!(s(&v, "client"), "127.0.0.1");
        assert_eq!(
            s(&v, "message"),
            "client denied by server configuration: /export/home/live/ap/htdocs/test"
        );
        // Apache 2.4: module:level, pid, microseconds.
        let (v, t, ok) = run(&p, lines[1]);
        assert!(ok, "{v}");
        let t = t.unwrap();
        assert_eq!(t.secs, local(2026, 11, 21, 9, 12, 3));
        assert_eq!(t.nanos, 123_456_000);
        assert_eq!(s(&v, "level"), "core:error");
        assert_eq!(s(&v, "pid"), "4242:tid 140234");
        assert_eq!(s(&v, "client"), "192.0.2.10:51234");
        for l in &lines[2..] {
            let (v, _, ok) = run(&p, l);
            assert!(ok, "{l}: {v}");
        }
    }
}
