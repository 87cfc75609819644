//! `syslog`: RFC 3164 (BSD) and RFC 5424 lines, with Fluentd's expressions
//! (the `<pri>` prefix is optional in both). Fields: `pri` (integer), `host`,
//! `ident`, `pid`, `message`, and for RFC 5424 also `msgid` and `extradata`.
//! RFC 3164 times have no year: the current one is taken (last year's when
//! that would put the line more than a day in the future), local time.

use std::borrow::Cow;

use super::regex::Rx;
use super::{Fields, SyslogFormat, TimeFmt};

const RFC3164: &str = r"^(?:<(?<pri>[0-9]{1,3})>)?(?<time>[^ ]* {1,2}[^ ]* [^ ]*) (?<host>[^ ]*) (?<ident>[^ :\[]*)(?:\[(?<pid>[0-9]+)\])?(?:[^:]*:)? *(?<message>.*)$";
const RFC5424: &str = r"^(?:<(?<pri>[0-9]{1,3})>[1-9][0-9]{0,2} )?(?<time>[^ ]+) (?<host>[!-~]{1,255}) (?<ident>[!-~]{1,48}) (?<pid>[!-~]{1,128}) (?<msgid>[!-~]{1,32}) (?<extradata>(?:-|(?:\[(?:[^\]\\]|\\.)*\])+))(?: (?<message>.*))?$";

pub struct Syslog {
    format: SyslogFormat,
    rfc3164: Rx,
    rfc5424: Rx,
    time_format: Option<String>,
}

impl Syslog {
    pub fn new(format: SyslogFormat, time_format: Option<String>) -> anyhow::Result<Syslog> {
        Ok(Syslog {
            format,
            rfc3164: Rx::new(RFC3164, false)?,
            rfc5424: Rx::new(RFC5424, false)?,
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
        let rfc5424 = match self.format {
            SyslogFormat::Rfc3164 => false,
            SyslogFormat::Rfc5424 => true,
            SyslogFormat::Auto => Self::is_5424(line),
        };
        let (rx, default) = if rfc5424 {
            (&self.rfc5424, TimeFmt::Auto)
        } else {
            (&self.rfc3164, TimeFmt::Syslog3164)
        };
        let mut f = rx.fields(line).map_err(|_| {
            format!(
                "the line is not RFC {} syslog",
                if rfc5424 { 5424 } else { 3164 }
            )
        })?;
        // RFC 5424's NILVALUE time: the time of reading.
        f.retain(|(k, v)| !(k == "time" && *v == super::Val::Str(Cow::Borrowed(b"-"))));
        let fmt = match &self.time_format {
            Some(t) => TimeFmt::Format(t.clone()),
            None => default,
        };
        Ok((f, fmt))
    }
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
}
