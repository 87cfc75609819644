//! `cri`: the log files of Kubernetes' container runtimes (containerd and
//! CRI-O, the kubelet's "CRI logging format"): one line per write, as
//!
//! ```text
//! <time> <stream> <tag> <content>
//! 2026-11-28T11:00:00.123456789Z stdout F hello
//! 2026-11-28T11:00:00.123456789+01:00 stderr P first 16 KiB of a longer line
//! ```
//!
//! containerd formats the time with Go's RFC3339Nano (its zone, trailing
//! zeros of the fraction cut), CRI-O's conmon as `%Y-%m-%dT%H:%M:%S.%09ld`
//! and `±hh:mm`; both are RFC 3339. The stream is `stdout` or `stderr`. The
//! tag's first part (the CRI API allows more, after `:`) is `P` for a piece
//! of a longer line (containerd cuts at `max_container_log_line_size`,
//! 16 KiB by default; conmon at its read buffer) or a line without a newline
//! at the stream's end, `F` for the last piece (or the whole line). The
//! pieces of one line are joined by the input (common/container.rs); a line alone
//! (the parser filter) keeps its `logtag`.

use std::borrow::Cow;

use super::common::container::split_cri as split;
use super::{Fields, Val};

/// The fields of one line on its own (the parser filter): time, stream,
/// logtag and the content in `message_key`.
pub fn fields<'a>(line: &'a [u8], message_key: &'a str) -> Result<Fields<'a>, String> {
    let p = split(line)?;
    Ok(vec![
        (Cow::Borrowed("time"), Val::s(p.time)),
        (Cow::Borrowed("stream"), Val::s(p.stream)),
        (Cow::Borrowed("logtag"), Val::s(p.tag)),
        (Cow::Borrowed(message_key), Val::s(p.content)),
    ])
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::*;

    #[test]
    fn containerd_and_crio_lines() {
        let p = split(b"2026-11-28T11:00:00.1234Z stdout F hello world").unwrap();
        assert_eq!(
            (p.time, p.stream, p.tag, p.partial, p.content),
            (
                &b"2026-11-28T11:00:00.1234Z"[..],
                &b"stdout"[..],
                &b"F"[..],
                false,
                &b"hello world"[..]
            )
        );
        let p = split(b"2026-11-28T12:00:00.000000000+01:00 stderr P  two  spaces").unwrap();
        assert!(p.partial);
        assert_eq!(p.content, b" two  spaces");
        // An empty line, with and without the space after the tag.
        assert_eq!(
            split(b"2026-11-28T11:00:00Z stdout F ").unwrap().content,
            b""
        );
        assert_eq!(
            split(b"2026-11-28T11:00:00Z stdout F").unwrap().content,
            b""
        );
        assert!(split(b"2026-11-28T11:00:00Z stdout F:x y").is_ok());
        assert!(split(b"2026-11-28T11:00:00Z stdout X y").is_err());
        assert!(split(b"just text").is_err());
    }

    #[test]
    fn a_line_alone_keeps_its_tag() {
        let p = parser("type = \"cri\"\nkeep_time_key = true");
        let (v, t, ok) = run(&p, "2026-11-28T11:00:00.5Z stderr P part");
        assert!(ok);
        assert_eq!(t, Some(utc("2026-11-28T11:00:00.5Z")));
        assert_eq!(keys(&v), ["time", "stream", "logtag", "message"]);
        assert_eq!((s(&v, "stream"), s(&v, "logtag")), ("stderr", "P"));
        assert_eq!(s(&v, "message"), "part");
        let (v, _, ok) = run(&p, "garbage");
        assert!(!ok);
        assert_eq!(s(&v, "message"), "garbage");
    }
}
