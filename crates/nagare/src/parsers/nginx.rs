//! `nginx`: nginx's combined access log, with Fluentd's expression (an
//! optional `$http_x_forwarded_for` at the end). `code` and `size` are
//! integers; a field that is "-" is nil.

pub const EXPRESSION: &str = r#"^(?<remote>[^ ]*) (?<host>[^ ]*) (?<user>[^ ]*) \[(?<time>[^\]]*)\] "(?<method>\S+)(?: +(?<path>[^"]*?)(?: +\S*)?)?" (?<code>[^ ]*) (?<size>[^ ]*)(?: "(?<referer>[^"]*)" "(?<agent>[^"]*)"(?:\s+(?<http_x_forwarded_for>[^ ]+))?)?$"#;

#[cfg(test)]
mod tests {
    use super::super::testutil::*;

    #[test]
    fn sample_lines() {
        let p = parser("type = \"nginx\"");
        let text = sample("nginx_access.log");
        let lines: Vec<&str> = text.lines().collect();
        let (v, t, ok) = run(&p, lines[0]);
        assert!(ok, "{v}");
        assert_eq!(t, Some(utc("2026-11-21T06:25:24Z")));
        assert_eq!(
            keys(&v),
            ["remote", "host", "user", "method", "path", "code", "size", "referer", "agent"]
        );
        assert_eq!(s(&v, "remote"), "93.180.71.3");
        assert!(get(&v, "host").unwrap().is_nil());
        assert_eq!(s(&v, "method"), "GET");
        assert_eq!(s(&v, "path"), "/downloads/product_1");
        assert_eq!(get(&v, "code").unwrap().as_i64(), Some(304));
        assert_eq!(get(&v, "size").unwrap().as_i64(), Some(0));
        assert!(get(&v, "referer").unwrap().is_nil());
        assert_eq!(
            s(&v, "agent"),
            "Debian APT-HTTP/1.3 (0.8.16~exp12ubuntu10.21)"
        );
        // With X-Forwarded-For.
        let (v, _, ok) = run(&p, lines[1]);
        assert!(ok, "{v}");
        assert_eq!(s(&v, "http_x_forwarded_for"), "203.0.113.9");
        assert_eq!(get(&v, "code").unwrap().as_i64(), Some(200));
        for l in &lines[2..] {
            let (v, _, ok) = run(&p, l);
            assert!(ok, "{l}: {v}");
        }
    }
}
