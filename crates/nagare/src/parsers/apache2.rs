//! `apache2`: Apache's combined (and common) access log, with Fluentd's
//! expression. `code` and `size` are integers; a field that is "-" is nil.

pub const EXPRESSION: &str = r#"^(?<host>[^ ]*) [^ ]* (?<user>[^ ]*) \[(?<time>[^\]]*)\] "(?<method>\S+)(?: +(?<path>(?:[^"]|\\.)*?)(?: +\S*)?)?" (?<code>[^ ]*) (?<size>[^ ]*)(?: "(?<referer>(?:[^"]|\\.)*)" "(?<agent>(?:[^"]|\\.)*)")?$"#;

#[cfg(test)]
mod tests {
    use super::super::testutil::*;

    #[test]
    fn sample_lines() {
        let p = parser("type = \"apache2\"");
        let text = sample("apache2_access.log");
        let lines: Vec<&str> = text.lines().collect();
        let (v, t, ok) = run(&p, lines[0]);
        assert!(ok, "{v}");
        assert_eq!(t, Some(utc("2000-10-10T13:55:36-07:00")));
        assert_eq!(
            keys(&v),
            ["host", "user", "method", "path", "code", "size", "referer", "agent"]
        );
        assert_eq!(s(&v, "host"), "127.0.0.1");
        assert_eq!(s(&v, "user"), "frank");
        assert_eq!(s(&v, "method"), "GET");
        assert_eq!(s(&v, "path"), "/apache_pb.gif");
        assert_eq!(get(&v, "code").unwrap().as_i64(), Some(200));
        assert_eq!(get(&v, "size").unwrap().as_i64(), Some(2326));
        assert_eq!(s(&v, "referer"), "http://www.example.com/start.html");
        assert!(s(&v, "agent").starts_with("Mozilla/4.08"));
        // Common log format (no referer/agent), "-" user and size.
        let (v, _, ok) = run(&p, lines[1]);
        assert!(ok, "{v}");
        assert!(get(&v, "user").unwrap().is_nil());
        assert!(get(&v, "size").unwrap().is_nil());
        assert_eq!(get(&v, "code").unwrap().as_i64(), Some(304));
        assert!(get(&v, "referer").is_none());
        for l in &lines[2..] {
            let (v, _, ok) = run(&p, l);
            assert!(ok, "{l}: {v}");
        }
        let (v, _, ok) = run(&p, "not an access log line");
        assert!(!ok);
        assert_eq!(s(&v, "message"), "not an access log line");
    }
}
