//! `syslog`: RFC 3164 (BSD) and RFC 5424 lines, as Fluentd's expressions
//! read them (the `<pri>` prefix is optional in both). Fields: `pri`
//! (integer), `host`, `ident`, `pid`, `message`, and for RFC 5424 also
//! `msgid` and `extradata`. RFC 3164 times have no year: the current one is
//! taken (last year's when that would put the line more than a day in the
//! future), local time.
//!
//! The lines are cut by hand (memchr), not by a regex engine: at the
//! syslog input's rates the regex was 40 % of the daemon's CPU. The cutting
//! gives exactly the records Fluentd's expressions (kept below as
//! `RFC3164`/`RFC5424`, and checked against in the tests) would give, down
//! to their corner cases: a line that is not valid UTF-8 does not parse,
//! `.` does not take a newline, and where the expression could match in
//! two ways the one it prefers is taken.

use std::borrow::Cow;

use memchr::memchr;

use super::{Fields, SyslogFormat, TimeFmt, Val};

/// Fluentd's RFC 3164 expression: the definition `rfc3164` implements.
#[cfg(test)]
const RFC3164: &str = r"^(?:<(?<pri>[0-9]{1,3})>)?(?<time>[^ ]* {1,2}[^ ]* [^ ]*) (?<host>[^ ]*) (?<ident>[^ :\[]*)(?:\[(?<pid>[0-9]+)\])?(?:[^:]*:)? *(?<message>.*)$";
/// Fluentd's RFC 5424 expression: the definition `rfc5424` implements.
#[cfg(test)]
const RFC5424: &str = r"^(?:<(?<pri>[0-9]{1,3})>[1-9][0-9]{0,2} )?(?<time>[^ ]+) (?<host>[!-~]{1,255}) (?<ident>[!-~]{1,48}) (?<pid>[!-~]{1,128}) (?<msgid>[!-~]{1,32}) (?<extradata>(?:-|(?:\[(?:[^\]\\]|\\.)*\])+))(?: (?<message>.*))?$";

pub struct Syslog {
    format: SyslogFormat,
    time_format: Option<String>,
}

impl Syslog {
    pub fn new(format: SyslogFormat, time_format: Option<String>) -> anyhow::Result<Syslog> {
        Ok(Syslog {
            format,
            time_format: time_format.map(|f| super::ruby_to_chrono(&f)),
        })
    }

    fn is_5424(line: &[u8]) -> bool {
        let rest = match line.strip_prefix(b"<") {
            Some(r) => {
                let digits = r.iter().take_while(|c| c.is_ascii_digit()).count();
                match r[digits..].strip_prefix(b">") {
                    Some(x) => x,
                    None => return false,
                }
            }
            None => line,
        };
        rest.first().is_some_and(u8::is_ascii_digit)
    }

    pub fn fields<'a>(&'a self, line: &'a [u8]) -> Result<(Fields<'a>, TimeFmt), String> {
        let new = match self.format {
            SyslogFormat::Rfc3164 => false,
            SyslogFormat::Rfc5424 => true,
            SyslogFormat::Auto => Self::is_5424(line),
        };
        let (parts, default) = if new {
            (rfc5424(line), TimeFmt::Auto)
        } else {
            (rfc3164(line), TimeFmt::Syslog3164)
        };
        let parts = parts.ok_or_else(|| {
            format!(
                "the line is not RFC {} syslog",
                if new { 5424 } else { 3164 }
            )
        })?;
        let fmt = match &self.time_format {
            Some(t) => TimeFmt::Format(t.clone()),
            None => default,
        };
        Ok((parts.fields(), fmt))
    }
}

/// What a line holds, as slices of it (None: the part was not there).
#[derive(Debug, Default, PartialEq)]
struct Parts<'a> {
    pri: Option<&'a [u8]>,
    time: &'a [u8],
    host: &'a [u8],
    ident: &'a [u8],
    pid: Option<&'a [u8]>,
    /// RFC 5424 only.
    msgid: Option<&'a [u8]>,
    /// RFC 5424 only.
    extradata: Option<&'a [u8]>,
    message: Option<&'a [u8]>,
}

impl<'a> Parts<'a> {
    /// The fields in the order of the expressions' captures.
    fn fields(self) -> Fields<'a> {
        let mut f = Fields::with_capacity(8);
        let mut put = |k: &'static str, v: Option<&'a [u8]>| {
            if let Some(v) = v {
                f.push((Cow::Borrowed(k), Val::s(v)));
            }
        };
        put("pri", self.pri);
        // RFC 5424's NILVALUE time: the time of reading.
        put("time", Some(self.time).filter(|t| *t != b"-"));
        put("host", Some(self.host));
        put("ident", Some(self.ident));
        put("pid", self.pid);
        put("msgid", self.msgid);
        put("extradata", self.extradata);
        put("message", self.message);
        f
    }
}

/// `<` 1–3 digits `>` at the start: the digits and where the rest starts.
fn pri_prefix(line: &[u8]) -> Option<(&[u8], usize)> {
    let rest = line.strip_prefix(b"<")?;
    let digits = rest
        .iter()
        .take(4)
        .take_while(|c| c.is_ascii_digit())
        .count();
    ((1..=3).contains(&digits) && rest.get(digits) == Some(&b'>'))
        .then(|| (&rest[..digits], digits + 2))
}

/// The index of the first space at or after `from`.
fn space(line: &[u8], from: usize) -> Option<usize> {
    memchr(b' ', &line[from..]).map(|i| from + i)
}

fn no_newline(b: &[u8]) -> bool {
    memchr(b'\n', b).is_none()
}

/// RFC 3164, as `RFC3164` matches it.
fn rfc3164(line: &[u8]) -> Option<Parts<'_>> {
    // Every class of the expression takes whole UTF-8 characters only.
    std::str::from_utf8(line).ok()?;
    // Taking the PRI or not leaves the rest the same (the time's first
    // word ends at the first space either way), so it is taken.
    let (pri, start) = match pri_prefix(line) {
        Some((p, at)) => (Some(p), at),
        None => (None, 0),
    };
    let sp1 = space(line, start)?;
    // ` {1,2}` after the time's first word: two spaces preferred, one if
    // the rest fails with two.
    if line.get(sp1 + 1) == Some(&b' ') {
        if let Some(p) = rfc3164_after_day(line, pri, start, sp1 + 2) {
            return Some(p);
        }
    }
    rfc3164_after_day(line, pri, start, sp1 + 1)
}

/// The rest of RFC 3164 from the time's second word, at `t2`.
fn rfc3164_after_day<'a>(
    line: &'a [u8],
    pri: Option<&'a [u8]>,
    start: usize,
    t2: usize,
) -> Option<Parts<'a>> {
    // `[^ ]*` followed by a space ends at the next space.
    let sp2 = space(line, t2)?;
    let sp3 = space(line, sp2 + 1)?;
    let host = sp3 + 1;
    let sp4 = space(line, host)?;
    let ident = sp4 + 1;
    let ident_end = line[ident..]
        .iter()
        .position(|c| matches!(c, b' ' | b':' | b'['))
        .map_or(line.len(), |i| ident + i);
    // `(?:\[(?<pid>[0-9]+)\])?`
    let (pid, after) = match line.get(ident_end) {
        Some(b'[') => {
            let d = line[ident_end + 1..]
                .iter()
                .take_while(|c| c.is_ascii_digit())
                .count();
            if d > 0 && line.get(ident_end + 1 + d) == Some(&b']') {
                (
                    Some(&line[ident_end + 1..ident_end + 1 + d]),
                    ident_end + d + 2,
                )
            } else {
                (None, ident_end)
            }
        }
        _ => (None, ident_end),
    };
    // `(?:[^:]*:)?` reaches the first colon, if any; `.*$` takes no newline.
    // (A shorter ident or no pid only moves newlines into the message.)
    let message = match memchr(b':', &line[after..]) {
        Some(c) if no_newline(&line[after + c + 1..]) => after + c + 1,
        _ if no_newline(&line[after..]) => after,
        _ => return None,
    };
    let spaces = line[message..].iter().take_while(|c| **c == b' ').count();
    Some(Parts {
        pri,
        time: &line[start..sp3],
        host: &line[host..sp4],
        ident: &line[ident..ident_end],
        pid,
        message: Some(&line[message + spaces..]),
        ..Parts::default()
    })
}

/// RFC 5424, as `RFC5424` matches it.
fn rfc5424(line: &[u8]) -> Option<Parts<'_>> {
    std::str::from_utf8(line).ok()?;
    // `(?:<pri>VERSION )?`: taken when there, skipped if the rest then fails
    // (the words then shift by one).
    if let Some((pri, at)) = pri_prefix(line) {
        let v = &line[at..];
        let digits = v.iter().take(4).take_while(|c| c.is_ascii_digit()).count();
        if (1..=3).contains(&digits) && v[0] != b'0' && v.get(digits) == Some(&b' ') {
            if let Some(p) = rfc5424_from(line, Some(pri), at + digits + 1) {
                return Some(p);
            }
        }
    }
    rfc5424_from(line, None, 0)
}

/// A word of `[!-~]{1,max}` at `at` followed by a space: the word and
/// where the next one starts.
fn word(line: &[u8], at: usize, max: usize) -> Option<(&[u8], usize)> {
    let len = line[at..].iter().position(|c| !(b'!'..=b'~').contains(c))?;
    (line[at + len] == b' ' && (1..=max).contains(&len))
        .then(|| (&line[at..at + len], at + len + 1))
}

/// The rest of RFC 5424 from the time, at `start`.
fn rfc5424_from<'a>(line: &'a [u8], pri: Option<&'a [u8]>, start: usize) -> Option<Parts<'a>> {
    let time_end = space(line, start)?;
    if time_end == start {
        return None;
    }
    let (host, at) = word(line, time_end + 1, 255)?;
    let (ident, at) = word(line, at, 48)?;
    let (pid, at) = word(line, at, 128)?;
    let (msgid, at) = word(line, at, 32)?;
    let sd_end = match line.get(at)? {
        b'-' => at + 1,
        b'[' => structured_data(line, at)?,
        _ => return None,
    };
    // `(?: (?<message>.*))?$`
    let message = match &line[sd_end..] {
        [] => None,
        [b' ', m @ ..] if no_newline(m) => Some(m),
        _ => return None,
    };
    Some(Parts {
        pri,
        time: &line[start..time_end],
        host,
        ident,
        pid: Some(pid),
        msgid: Some(msgid),
        extradata: Some(&line[at..sd_end]),
        message,
    })
}

/// SD-ELEMENTs from `at` (a `[`): `(?:\[(?:[^\]\\]|\\.)*\])+`; where they
/// end. Inside an element `\` escapes any character but a newline; the
/// first unescaped `]` ends it.
fn structured_data(line: &[u8], mut at: usize) -> Option<usize> {
    while line.get(at) == Some(&b'[') {
        at += 1;
        loop {
            at += memchr::memchr2(b']', b'\\', &line[at..])?;
            if line[at] == b']' {
                at += 1;
                break;
            }
            match line.get(at + 1) {
                Some(c) if *c != b'\n' => at += 2,
                _ => return None,
            }
        }
    }
    Some(at)
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use chrono::{Datelike, TimeZone};

    #[test]
    fn rfc3164_sample_lines() {
        let p = parser("type = \"syslog\"\nmessage_format = \"rfc3164\"");
        let text = sample("syslog_rfc3164.log");
        let lines: Vec<&str> = text.lines().collect();
        let (v, t, ok) = run(&p, lines[0]);
        assert!(ok, "{v}");
        assert_eq!(keys(&v), ["host", "ident", "pid", "message"]);
        assert_eq!(s(&v, "host"), "web01");
        assert_eq!(s(&v, "ident"), "sshd");
        assert_eq!(s(&v, "pid"), "2412");
        assert_eq!(
            s(&v, "message"),
            "Accepted publickey for deploy from 192.0.2.4 port 52144 ssh2"
        );
        let t = t.unwrap();
        let now = chrono::Local::now();
        let mut want = chrono::Local
            .with_ymd_and_hms(now.year(), 3, 7, 9, 5, 11)
            .unwrap();
        if want > now + chrono::Duration::days(1) {
            want = chrono::Local
                .with_ymd_and_hms(now.year() - 1, 3, 7, 9, 5, 11)
                .unwrap();
        }
        assert_eq!(t.secs as i64, want.timestamp());
        // With a priority; single-digit day padded with a space.
        let (v, t, ok) = run(&p, lines[1]);
        assert!(ok, "{v}");
        assert!(t.is_some());
        assert_eq!(get(&v, "pri").unwrap().as_i64(), Some(34));
        assert_eq!(s(&v, "ident"), "su");
        assert!(get(&v, "pid").is_none());
        assert_eq!(
            s(&v, "message"),
            "'su root' failed for lonvick on /dev/pts/8"
        );
        for l in &lines[2..] {
            let (v, _, ok) = run(&p, l);
            assert!(ok, "{l}: {v}");
        }
    }

    #[test]
    fn rfc5424_sample_lines() {
        for format in ["rfc5424", "auto"] {
            let p = parser(&format!("type = \"syslog\"\nmessage_format = \"{format}\""));
            let text = sample("syslog_rfc5424.log");
            let lines: Vec<&str> = text.lines().collect();
            let (v, t, ok) = run(&p, lines[0]);
            assert!(ok, "{v}");
            assert_eq!(t, Some(utc("2003-10-11T22:14:15.003Z")));
            assert_eq!(
                keys(&v),
                [
                    "pri",
                    "host",
                    "ident",
                    "pid",
                    "msgid",
                    "extradata",
                    "message"
                ]
            );
            assert_eq!(get(&v, "pri").unwrap().as_i64(), Some(34));
            assert_eq!(s(&v, "host"), "mymachine.example.com");
            assert_eq!(s(&v, "ident"), "su");
            assert_eq!(s(&v, "pid"), "-");
            assert_eq!(s(&v, "msgid"), "ID47");
            assert_eq!(s(&v, "extradata"), "-");
            assert_eq!(
                s(&v, "message"),
                "'su root' failed for lonvick on /dev/pts/8"
            );
            // Structured data, and an offset time.
            let (v, t, ok) = run(&p, lines[1]);
            assert!(ok, "{v}");
            assert_eq!(t, Some(utc("2003-08-24T05:14:15.000003-07:00")));
            assert_eq!(
                s(&v, "extradata"),
                r#"[exampleSDID@32473 iut="3" eventSource="Application" eventID="1011"]"#
            );
            assert_eq!(s(&v, "message"), "An application event log entry...");
            for l in &lines[2..] {
                let (v, _, ok) = run(&p, l);
                assert!(ok, "{l}: {v}");
            }
        }
        // auto reads 3164 lines too.
        let p = parser("type = \"syslog\"");
        let (v, _, ok) = run(&p, "<13>Feb  5 17:32:18 10.0.0.99 myproc[10]: hello");
        assert!(ok, "{v}");
        assert_eq!(s(&v, "ident"), "myproc");
        let (v, _, ok) = run(&p, "<13>1 garbage");
        assert!(!ok);
        assert!(s(&v, "parse_error").contains("5424"));
    }

    // The cutting against the expressions it replaces.

    use super::{rfc3164, rfc5424, Parts, RFC3164, RFC5424};
    use proptest::prelude::*;

    /// What the expression captures, as `Parts`.
    fn by_regex<'a>(rx: &str, line: &'a [u8]) -> Option<Parts<'a>> {
        static COMPILED: std::sync::OnceLock<[regex::bytes::Regex; 2]> = std::sync::OnceLock::new();
        let [r3164, r5424] = COMPILED
            .get_or_init(|| [RFC3164, RFC5424].map(|r| regex::bytes::Regex::new(r).unwrap()));
        let re = if rx == RFC3164 { r3164 } else { r5424 };
        let c = re.captures(line)?;
        let g = |k: &str| c.name(k).map(|m| m.as_bytes());
        Some(Parts {
            pri: g("pri"),
            time: g("time").unwrap(),
            host: g("host").unwrap(),
            ident: g("ident").unwrap(),
            pid: g("pid"),
            msgid: g("msgid"),
            extradata: g("extradata"),
            message: g("message"),
        })
    }

    fn same(line: &[u8]) {
        assert_eq!(
            rfc3164(line),
            by_regex(RFC3164, line),
            "3164: {:?}",
            String::from_utf8_lossy(line)
        );
        assert_eq!(
            rfc5424(line),
            by_regex(RFC5424, line),
            "5424: {:?}",
            String::from_utf8_lossy(line)
        );
    }

    fn text(p: Option<Parts<'_>>) -> Vec<(&'static str, String)> {
        let p = p.expect("parses");
        let f = |v: Option<&[u8]>| v.map(|b| String::from_utf8_lossy(b).into_owned());
        [
            ("pri", f(p.pri)),
            ("time", f(Some(p.time))),
            ("host", f(Some(p.host))),
            ("ident", f(Some(p.ident))),
            ("pid", f(p.pid)),
            ("msgid", f(p.msgid)),
            ("extradata", f(p.extradata)),
            ("message", f(p.message)),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .collect()
    }

    #[test]
    fn rfc3164_missing_fields_and_odd_words() {
        let l = b"Oct 11 22:14:15 host app";
        assert_eq!(
            text(rfc3164(l)),
            [
                ("time", "Oct 11 22:14:15"),
                ("host", "host"),
                ("ident", "app"),
                ("message", "")
            ]
            .map(|(k, v)| (k, v.to_string()))
        );
        // No ident: the message follows the host's space.
        let got = text(rfc3164(b"<13>Oct 11 22:14:15 host : just this"));
        assert!(got.contains(&("ident", String::new())), "{got:?}");
        assert!(got.contains(&("message", "just this".into())), "{got:?}");
        // A pid that is not a number stays in the ident's tail.
        let got = text(rfc3164(b"Oct 11 22:14:15 host app[x1]: m"));
        assert!(got.iter().all(|(k, _)| *k != "pid"), "{got:?}");
        assert!(got.contains(&("message", "m".into())), "{got:?}");
        // Too few words; a single space before the day.
        assert_eq!(rfc3164(b"Oct 11 22:14:15 host"), None);
        assert_eq!(rfc3164(b""), None);
        let got = text(rfc3164(b"Oct  5 22:14:15 h a: m"));
        assert!(got.contains(&("time", "Oct  5 22:14:15".into())), "{got:?}");
        for l in [
            &b"Oct 11 22:14:15 host app"[..],
            b"<13>Oct 11 22:14:15 host : just this",
            b"Oct 11 22:14:15 host app[x1]: m",
            b"Oct  5 22:14:15 h a: m",
            b"Oct   5 22:14:15 h a: m",
            b"Oct  5 22:14:15 h",
        ] {
            same(l);
        }
    }

    #[test]
    fn bad_pri_and_newlines() {
        for l in [
            &b"<1234>Oct 11 22:14:15 host app: m"[..],
            b"<>Oct 11 22:14:15 host app: m",
            b"<13Oct 11 22:14:15 host app: m",
            b"<x>Oct 11 22:14:15 host app: m",
            b"<13>1234 2003-10-11T22:14:15Z h a p m - x",
            b"<13>0 2003-10-11T22:14:15Z h a p m - x",
            b"Oct 11 22:14:15 host app: two\nlines",
            b"Oct 11 22:14:15 host app\nx: after the newline",
            b"<13>1 2003-10-11T22:14:15Z h a p m - two\nlines",
        ] {
            same(l);
        }
        // The PRI is read only as 1 to 3 digits; otherwise it is part of the time.
        let got = text(rfc3164(b"<1234>Oct 11 22:14:15 host app: m"));
        assert!(got.iter().all(|(k, _)| *k != "pri"), "{got:?}");
        // `.` takes no newline: the message must not hold one, unless a
        // colon can take the text up to it.
        assert_eq!(rfc3164(b"Oct 11 22:14:15 host app: two\nlines"), None);
        let got = text(rfc3164(b"Oct 11 22:14:15 host app\nx: after"));
        assert!(got.contains(&("ident", "app\nx".into())), "{got:?}");
        assert_eq!(
            rfc5424(b"<13>1 2003-10-11T22:14:15Z h a p m - two\nlines"),
            None
        );
    }

    #[test]
    fn rfc5424_nilvalues_structured_data_bom_and_truncation() {
        let got = text(rfc5424(b"<13>1 - - - - - -"));
        assert_eq!(
            got,
            [
                ("pri", "13"),
                ("time", "-"),
                ("host", "-"),
                ("ident", "-"),
                ("pid", "-"),
                ("msgid", "-"),
                ("extradata", "-")
            ]
            .map(|(k, v)| (k, v.to_string()))
        );
        // The NILVALUE time is left out of the fields (the time of reading is taken).
        let f = rfc5424(b"- h a p m -").unwrap().fields();
        assert!(f.iter().all(|(k, _)| k != "time"));
        // Escaped `]`, `"` and `\` inside a parameter value; two elements.
        let sd = r#"[a@1 x="q\]\"\\" y="[ok\]"][b@2 z="w"]"#;
        let line = format!("<13>1 2003-10-11T22:14:15Z h a p m {sd} body");
        let got = text(rfc5424(line.as_bytes()));
        assert!(got.contains(&("extradata", sd.to_string())), "{got:?}");
        assert!(got.contains(&("message", "body".into())), "{got:?}");
        same(line.as_bytes());
        // A BOM before the message is the message's.
        let line = "<13>1 2003-10-11T22:14:15Z h a p m - \u{feff}héllo";
        let got = text(rfc5424(line.as_bytes()));
        assert!(
            got.contains(&("message", "\u{feff}héllo".into())),
            "{got:?}"
        );
        // An empty message after the space; none at all.
        let got = text(rfc5424(b"<13>1 t h a p m - "));
        assert!(got.contains(&("message", String::new())), "{got:?}");
        let got = text(rfc5424(b"<13>1 t h a p m -"));
        assert!(got.iter().all(|(k, _)| *k != "message"), "{got:?}");
        // Cut anywhere (as a message past max_message_size is), it parses
        // exactly when the expression matches it.
        let full = format!("<13>1 2003-10-11T22:14:15Z host app 12 ID {sd} body");
        for n in 0..=full.len() {
            same(&full.as_bytes()[..n]);
        }
        let full = "<34>Oct 11 22:14:15 mymachine su[12]: 'su root' failed";
        for n in 0..=full.len() {
            same(&full.as_bytes()[..n]);
        }
        // Unterminated or badly escaped structured data; words too long.
        for l in [
            &b"<13>1 t h a p m [a x=\"1\""[..],
            b"<13>1 t h a p m [a x=\"1\\\n\"] m",
            b"<13>1 t h a p m [a][b",
            b"<13>1 t h a p m [a]x",
            b"<13>1 t h a p m -x",
        ] {
            assert_eq!(rfc5424(l), None, "{}", String::from_utf8_lossy(l));
            same(l);
        }
        let long = |n| "x".repeat(n);
        for (h, a, p, m) in [
            (256, 1, 1, 1),
            (1, 49, 1, 1),
            (1, 1, 129, 1),
            (1, 1, 1, 33),
            (255, 48, 128, 32),
        ] {
            let l = format!(
                "<13>1 t {} {} {} {} - m",
                long(h),
                long(a),
                long(p),
                long(m)
            );
            same(l.as_bytes());
        }
    }

    #[test]
    fn invalid_utf8_does_not_parse() {
        // As with the expressions, whose classes take whole characters.
        let l = b"<13>Oct 11 22:14:15 host app: caf\xe9";
        assert_eq!(rfc3164(l), None);
        same(l);
        let l = b"<13>1 t h a p m - caf\xe9";
        assert_eq!(rfc5424(l), None);
        same(l);
    }

    /// Lines made of the pieces syslog lines are made of.
    fn syslogish() -> impl Strategy<Value = Vec<u8>> {
        const PIECES: &[&[u8]] = &[
            b"<13>",
            b"<1>",
            b"<191>",
            b"<1234>",
            b"<",
            b">",
            b"1 ",
            b"0 ",
            b"12 ",
            b" ",
            b"  ",
            b"-",
            b"[",
            b"]",
            b"\\",
            b"\"",
            b":",
            b"\n",
            b"\r",
            b"a",
            b"x=\"1\"",
            b"\xc3\xa9",
            b"\xef\xbb\xbf",
            b"\xff",
            b"Oct",
            b"11",
            b"22:14:15",
            b"2003-10-11T22:14:15Z",
            b"host",
            b"app[12]",
            b"[34]",
            b"ID47",
            b"[a@1 k=\"v\"]",
        ];
        proptest::collection::vec(0..PIECES.len(), 0..24).prop_map(|ix| {
            ix.into_iter()
                .flat_map(|i| PIECES[i].iter().copied())
                .collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        #[test]
        fn same_as_the_expressions(line in syslogish()) {
            same(&line);
        }

        #[test]
        fn any_bytes_never_panic_and_match_the_expressions(line in proptest::collection::vec(any::<u8>(), 0..120)) {
            same(&line);
            let p = parser("type = \"syslog\"");
            let mut out = Vec::new();
            p.parse_with(&line, &[], &mut out);
        }
    }
}
