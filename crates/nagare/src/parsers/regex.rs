//! `regex`: the named captures of `expression` become the record's fields
//! (captures that took no part in the match are left out). Its engine,
//! `common::Rx`, is also that of `multiline`, `apache2`, `apache_error` and
//! `nginx`.

#[cfg(test)]
mod tests {
    use super::super::testutil::*;

    #[test]
    fn named_captures_time_and_types() {
        let p = parser(
            r#"type = "regex"
expression = '^(?<time>\S+ \S+) \[(?<level>\w+)\] (?<user>\w+) took (?<ms>\d+)ms(?: (?<note>.*))?$'
time_format = "%Y-%m-%d %H:%M:%S%.f%z"
types = { ms = "integer" }"#,
        );
        let (v, t, ok) = run(&p, "2026-11-22 10:00:01.250+0000 [INFO] alice took 17ms");
        assert!(ok);
        assert_eq!(t, Some(utc("2026-11-22T10:00:01.25Z")));
        assert_eq!(keys(&v), ["level", "user", "ms"]);
        assert_eq!(get(&v, "ms").unwrap().as_i64(), Some(17));
        let (v, _, ok) = run(&p, "something else");
        assert!(!ok);
        assert_eq!(s(&v, "message"), "something else");
        assert!(s(&v, "parse_error").contains("does not match"));
    }

    #[test]
    fn a_bad_time_is_a_parse_error() {
        let p = parser(
            r#"type = "regex"
expression = '^(?<time>\S+) (?<msg>.*)$'
time_format = "%Y-%m-%dT%H:%M:%S"
keep_time_key = true"#,
        );
        let (v, t, ok) = run(&p, "2026-11-22T00:00:00 ok");
        assert!(ok && t.is_some());
        assert_eq!(s(&v, "time"), "2026-11-22T00:00:00");
        let (v, t, ok) = run(&p, "yesterday hi");
        assert!(!ok && t.is_none());
        assert!(s(&v, "parse_error").contains("time"));
    }
}
