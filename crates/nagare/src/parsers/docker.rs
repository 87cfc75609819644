//! `docker`: the lines of Docker's `json-file` log driver
//! (`/var/lib/docker/containers/<id>/<id>-json.log`), one JSON object per
//! write:
//!
//! ```text
//! {"log":"hello\n","stream":"stdout","time":"2026-11-28T11:00:00.123456789Z"}
//! ```
//!
//! `log` ends with "\n" when it ends a line; without it, it is a piece of
//! a longer line (Docker cuts lines at 16 KiB) that the next object of the
//! same stream goes on with (moby's jsonfilelog adds the newline only to a
//! message without partial metadata or to the last piece). `attrs` (the
//! `labels`/`env` log options) is kept as a map. The pieces of one line are
//! joined by the input (common/container.rs); the record has the line without its
//! newline in `message_key`, and `stream`.

use super::common::container::split_docker as split;
use super::{Fields, Val};
use std::borrow::Cow;

/// The fields of one line on its own (the parser filter): the text in
/// `message_key` (its newline kept off), stream, time.
pub fn fields<'a>(line: &'a [u8], message_key: &'a str) -> Result<Fields<'a>, String> {
    let p = split(line)?;
    let mut f: Fields<'a> = vec![
        (
            Cow::Borrowed(message_key),
            Val::Str(Cow::Owned(p.content().to_vec())),
        ),
        (
            Cow::Borrowed("stream"),
            Val::Str(Cow::Owned(p.stream.as_bytes().to_vec())),
        ),
        (
            Cow::Borrowed("time"),
            Val::Str(Cow::Owned(p.time.as_bytes().to_vec())),
        ),
    ];
    if p.partial() {
        f.push((Cow::Borrowed("partial"), Val::Bool(true)));
    }
    for (k, v) in p.attrs.into_iter().flatten() {
        f.push((Cow::Owned(k), Val::Str(Cow::Owned(v.into_bytes()))));
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::*;

    #[test]
    fn json_file_objects() {
        let p = split(br#"{"log":"a \"q\"\n","stream":"stderr","time":"2026-11-28T11:00:00.5Z"}"#)
            .unwrap();
        assert!(!p.partial());
        assert_eq!((p.content(), &*p.stream), (&b"a \"q\""[..], "stderr"));
        let p =
            split(br#"{"log":"piece","stream":"stdout","time":"t","attrs":{"k":"v"}}"#).unwrap();
        assert!(p.partial());
        assert_eq!(p.attrs.unwrap()["k"], "v");
        assert!(split(b"{\"stream\":\"stdout\"}").is_err());
        assert!(split(b"text").is_err());
    }

    #[test]
    fn a_line_alone() {
        let p = parser("type = \"docker\"\nmessage_key = \"log\"");
        let (v, t, ok) = run(
            &p,
            r#"{"log":"hi\n","stream":"stdout","time":"2026-11-28T11:00:00.25Z"}"#,
        );
        assert!(ok);
        assert_eq!(t, Some(utc("2026-11-28T11:00:00.25Z")));
        assert_eq!(keys(&v), ["log", "stream"]);
        assert_eq!(s(&v, "log"), "hi");
    }
}
