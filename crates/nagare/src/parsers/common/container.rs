//! The line formats of container runtimes (parsers `cri` and `docker`, see
//! cri.rs and docker.rs), and the joining of their pieces:
//! a runtime cuts a long line into pieces (16 KiB by default) and marks
//! all but the last (CRI's `P` tag, json-file's `log` without "\n"). A
//! [`Joiner`] is the state of one source (one followed file): per stream
//! (stdout, stderr: their pieces interleave) the line being joined and,
//! with `format_firstline`, the multiline event being gathered from whole
//! lines (Java stack traces), so a join survives any read or batch
//! boundary of the input.
//!
//! Bounded: an event holds at most `max` bytes (the input's
//! `max_line_size`); what a line has beyond is left out and counted in the
//! event's `truncated` field (bytes left out), never dropped silently. A
//! line whose last piece never comes (a runtime killed mid-line, or a
//! stream that ended without a newline) goes out after `flush` without a
//! new piece, or at the end of a rotated file, with `partial = true`.
//!
//! The input saves its position before the first byte a joiner holds
//! (`held_from`), so after a restart the held pieces are read again and
//! nothing is lost. (Lines of the other stream that ended after that byte
//! and went out before the restart are then read again too: the one case
//! where a restart can send an event twice.)

use std::time::{Duration, Instant};

use nagare_forward::msgpack::{write_bool, write_map_len, write_str};
use nagare_forward::EventTime;

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Deserialize;

use crate::parsers::{parse_time, TimeFmt};

/// One line of a CRI log file, cut into its parts.
pub struct CriPiece<'a> {
    pub time: &'a [u8],
    pub stream: &'a [u8],
    /// The whole tag (`F`, `P`, or with more parts after `:`).
    pub tag: &'a [u8],
    /// `P`: the line goes on in the next piece of this stream.
    pub partial: bool,
    pub content: &'a [u8],
}

/// Cuts a CRI line; Err says what is wrong with it.
pub fn split_cri(line: &[u8]) -> Result<CriPiece<'_>, String> {
    let mut parts = line.splitn(4, |&b| b == b' ');
    let (Some(time), Some(stream), Some(tag)) = (parts.next(), parts.next(), parts.next()) else {
        return Err("not a CRI log line (<time> <stream> <P|F> <content>)".into());
    };
    // containerd writes "F " before an empty line; a line cut right
    // after the tag is taken the same way.
    let content = parts.next().unwrap_or(b"");
    let first = tag.split(|&b| b == b':').next().unwrap_or(b"");
    let partial = match first {
        b"P" => true,
        b"F" => false,
        _ => {
            return Err(format!(
                "CRI log tag {:?} is neither P nor F",
                String::from_utf8_lossy(tag)
            ))
        }
    };
    if time.is_empty() || stream.is_empty() {
        return Err("not a CRI log line (<time> <stream> <P|F> <content>)".into());
    }
    Ok(CriPiece {
        time,
        stream,
        tag,
        partial,
        content,
    })
}

/// One object of a json-file log.
#[derive(Deserialize)]
pub struct DockerPiece<'a> {
    #[serde(borrow)]
    log: Cow<'a, str>,
    #[serde(borrow, default)]
    pub stream: Cow<'a, str>,
    #[serde(borrow, default)]
    pub time: Cow<'a, str>,
    #[serde(default)]
    pub attrs: Option<BTreeMap<String, String>>,
}

impl DockerPiece<'_> {
    /// The line goes on in the next object of this stream.
    pub fn partial(&self) -> bool {
        !self.log.ends_with('\n')
    }

    /// The text, without the newline that ends a line.
    pub fn content(&self) -> &[u8] {
        let b = self.log.as_bytes();
        b.strip_suffix(b"\n").unwrap_or(b)
    }
}

/// Reads one json-file line; Err says what is wrong with it.
pub fn split_docker(line: &[u8]) -> Result<DockerPiece<'_>, String> {
    serde_json::from_slice(line).map_err(|e| format!("not a Docker json-file line: {e}"))
}

/// Which runtime's lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Cri,
    Docker,
}

/// What `feed` and `flush` wrote: events, and lines that did not parse
/// (kept as events with `parse_error`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Wrote {
    pub events: u32,
    pub errors: u32,
    /// Events that lost bytes to `max`.
    pub truncated: u32,
}

/// The per-source state; see the module comment.
pub struct Joiner {
    format: Format,
    message_key: String,
    /// `time_key` when `keep_time_key`: the first piece's time text is kept there.
    keep_time: Option<String>,
    max: usize,
    flush: Duration,
    firstline: Option<regex::bytes::Regex>,
    streams: Vec<Held>,
}

/// What one stream holds.
struct Held {
    stream: Vec<u8>,
    /// The line being joined (its last piece not seen yet).
    line: Option<Part>,
    /// With `format_firstline`: the whole lines gathered into one event.
    event: Option<Part>,
    /// When a piece last came.
    at: Instant,
}

/// An event (or line) being gathered.
struct Part {
    text: Vec<u8>,
    /// Of its first piece.
    time: Option<EventTime>,
    time_text: Vec<u8>,
    /// json-file's `attrs` of its first piece, as msgpack pairs, and their count.
    attrs: Option<(Vec<u8>, usize)>,
    /// File offset of its first byte.
    from: u64,
    /// Bytes left out beyond `max`.
    dropped: u64,
}

impl Part {
    fn push(&mut self, bytes: &[u8], max: usize) {
        let room = max.saturating_sub(self.text.len());
        let take = room.min(bytes.len());
        self.text.extend_from_slice(&bytes[..take]);
        self.dropped += (bytes.len() - take) as u64;
    }
}

/// One piece, cut from its line.
struct Piece<'a> {
    time_text: &'a [u8],
    stream: &'a [u8],
    partial: bool,
    content: &'a [u8],
    attrs: Option<(Vec<u8>, usize)>,
}

/// Where a record goes and what every record of the source carries.
pub struct Sink<'a> {
    pub out: &'a mut Vec<u8>,
    /// The time of events whose line has none that parses.
    pub now: EventTime,
    /// msgpack key/value pairs appended to every record, and their count.
    pub extra: &'a [u8],
    pub extra_n: usize,
}

impl Joiner {
    pub fn new(
        format: Format,
        message_key: &str,
        keep_time: Option<String>,
        max: usize,
        flush: Duration,
        firstline: Option<regex::bytes::Regex>,
    ) -> Joiner {
        Joiner {
            format,
            message_key: message_key.to_string(),
            keep_time,
            max: max.max(1),
            flush,
            firstline,
            streams: Vec::with_capacity(2),
        }
    }

    /// The file offset of the first byte held (the position to save), if any.
    pub fn held_from(&self) -> Option<u64> {
        self.streams
            .iter()
            .flat_map(|h| [&h.event, &h.line])
            .filter_map(|p| p.as_ref().map(|p| p.from))
            .min()
    }

    /// Nothing held.
    pub fn is_empty(&self) -> bool {
        self.held_from().is_none()
    }

    /// Forgets what is held (the file was truncated).
    pub fn clear(&mut self) {
        self.streams.clear();
    }

    /// Hands what this source holds to `next` (the file that took its path
    /// at a rotation; its bytes from file offset `at` on are not read yet),
    /// stream by stream, where `next` holds nothing of that stream.
    pub fn carry_into(&mut self, next: &mut Joiner, at: u64) {
        for h in &mut self.streams {
            if h.line.is_none() && h.event.is_none() {
                continue;
            }
            let i = match next.streams.iter().position(|n| n.stream == h.stream) {
                Some(i) => i,
                None => {
                    next.streams.push(Held {
                        stream: h.stream.clone(),
                        line: None,
                        event: None,
                        at: h.at,
                    });
                    next.streams.len() - 1
                }
            };
            let n = &mut next.streams[i];
            if n.line.is_some() || n.event.is_some() {
                continue;
            }
            n.line = h.line.take().map(|p| Part { from: at, ..p });
            n.event = h.event.take().map(|p| Part { from: at, ..p });
            n.at = h.at;
        }
    }

    /// Feeds one line (without its newline) that starts at file offset `at`.
    pub fn feed(&mut self, line: &[u8], at: u64, sink: &mut Sink<'_>) -> Wrote {
        let mut w = Wrote::default();
        // json-file's strings may hold escapes: its piece owns its text.
        let docker_piece;
        let piece = match self.format {
            Format::Cri => split_cri(line).map(|p| Piece {
                time_text: p.time,
                stream: p.stream,
                partial: p.partial,
                content: p.content,
                attrs: None,
            }),
            Format::Docker => match split_docker(line) {
                Ok(p) => {
                    docker_piece = p;
                    let d = &docker_piece;
                    Ok(Piece {
                        time_text: d.time.as_bytes(),
                        stream: d.stream.as_bytes(),
                        partial: d.partial(),
                        content: d.content(),
                        attrs: d.attrs.as_ref().map(|a| {
                            let mut b = Vec::new();
                            for (k, v) in a {
                                write_str(&mut b, k.as_bytes());
                                write_str(&mut b, v.as_bytes());
                            }
                            (b, a.len())
                        }),
                    })
                }
                Err(e) => Err(e),
            },
        };
        let piece = match piece {
            Ok(p) => p,
            Err(reason) => {
                self.write_error(line, &reason, sink);
                w.events += 1;
                w.errors += 1;
                return w;
            }
        };
        let i = match self.streams.iter().position(|h| h.stream == piece.stream) {
            Some(i) => i,
            None => {
                self.streams.push(Held {
                    stream: piece.stream.to_vec(),
                    line: None,
                    event: None,
                    at: Instant::now(),
                });
                self.streams.len() - 1
            }
        };
        self.streams[i].at = Instant::now();
        // The common case: a whole line, nothing held, no multiline: out
        // at once, without a copy.
        if !piece.partial && self.streams[i].line.is_none() && self.firstline.is_none() {
            let time = parse_time_bytes(piece.time_text);
            let text = &piece.content[..piece.content.len().min(self.max)];
            let dropped = (piece.content.len() - text.len()) as u64;
            self.write(
                text,
                time,
                piece.time_text,
                piece.attrs.as_ref(),
                piece.stream,
                false,
                dropped,
                sink,
            );
            w.events += 1;
            w.truncated += (dropped > 0) as u32;
            return w;
        }
        let max = self.max;
        let keep_time = self.keep_time.is_some();
        let held = &mut self.streams[i];
        let part = held.line.get_or_insert_with(|| Part {
            // Room for a few pieces: a line cut once is cut again, most
            // likely (a runtime cuts at a fixed size).
            text: Vec::with_capacity((piece.content.len() * 3).min(max)),
            time: parse_time_bytes(piece.time_text),
            // Only `keep_time_key` writes the text.
            time_text: if keep_time {
                piece.time_text.to_vec()
            } else {
                Vec::new()
            },
            attrs: piece.attrs,
            from: at,
            dropped: 0,
        });
        part.push(piece.content, max);
        if piece.partial {
            return w;
        }
        let line = held.line.take().expect("set above");
        self.line_done(i, line, sink, &mut w);
        w
    }

    /// A whole line of stream `i`: out, or into the multiline event.
    fn line_done(&mut self, i: usize, line: Part, sink: &mut Sink<'_>, w: &mut Wrote) {
        let Some(first) = &self.firstline else {
            self.write_part(i, &line, false, sink, w);
            return;
        };
        let max = self.max;
        let starts = first.is_match(&line.text);
        let held = &mut self.streams[i];
        match &mut held.event {
            // A continuation that fits: gathered.
            Some(ev) if !starts && ev.text.len() + 1 + line.text.len() <= max => {
                ev.text.push(b'\n');
                ev.text.extend_from_slice(&line.text);
                ev.dropped += line.dropped;
            }
            _ => {
                if let Some(ev) = held.event.take() {
                    self.write_part(i, &ev, false, sink, w);
                }
                self.streams[i].event = Some(line);
            }
        }
    }

    /// Sends what waited `flush` without a new piece (every stream's with
    /// `all`: the end of a rotated file). A line whose last piece never
    /// came is marked `partial = true`.
    pub fn flush(&mut self, all: bool, sink: &mut Sink<'_>) -> Wrote {
        let mut w = Wrote::default();
        // What is due, in file order (the streams' events interleave).
        let mut due: Vec<(u64, usize, bool)> = Vec::new();
        for (i, h) in self.streams.iter().enumerate() {
            if !all && h.at.elapsed() < self.flush {
                continue;
            }
            if let Some(ev) = &h.event {
                due.push((ev.from, i, false));
            }
            if let Some(line) = &h.line {
                due.push((line.from, i, true));
            }
        }
        due.sort_unstable();
        for (_, i, open_line) in due {
            let part = if open_line {
                self.streams[i].line.take()
            } else {
                self.streams[i].event.take()
            };
            if let Some(p) = part {
                self.write_part(i, &p, open_line, sink, &mut w);
            }
        }
        w
    }

    fn write_part(&self, i: usize, p: &Part, partial: bool, sink: &mut Sink<'_>, w: &mut Wrote) {
        self.write(
            &p.text,
            p.time,
            &p.time_text,
            p.attrs.as_ref(),
            &self.streams[i].stream,
            partial,
            p.dropped,
            sink,
        );
        w.events += 1;
        w.truncated += (p.dropped > 0) as u32;
    }

    /// Appends one entry `[time, record]`.
    #[allow(clippy::too_many_arguments)]
    fn write(
        &self,
        text: &[u8],
        time: Option<EventTime>,
        time_text: &[u8],
        attrs: Option<&(Vec<u8>, usize)>,
        stream: &[u8],
        partial: bool,
        dropped: u64,
        sink: &mut Sink<'_>,
    ) {
        let out = &mut *sink.out;
        out.push(0x92);
        out.extend_from_slice(&time.unwrap_or(sink.now).to_bytes());
        let n = 2
            + self.keep_time.is_some() as usize
            + attrs.is_some() as usize
            + partial as usize
            + (dropped > 0) as usize
            + sink.extra_n;
        write_map_len(out, n);
        write_str(out, self.message_key.as_bytes());
        write_str(out, text);
        write_str(out, b"stream");
        write_str(out, stream);
        if let Some(k) = &self.keep_time {
            write_str(out, k.as_bytes());
            write_str(out, time_text);
        }
        if let Some((a, n)) = attrs {
            write_str(out, b"attrs");
            write_map_len(out, *n);
            out.extend_from_slice(a);
        }
        if partial {
            write_str(out, b"partial");
            write_bool(out, true);
        }
        if dropped > 0 {
            write_str(out, b"truncated");
            let _ = rmp::encode::write_uint(out, dropped);
        }
        out.extend_from_slice(sink.extra);
    }

    fn write_error(&self, line: &[u8], reason: &str, sink: &mut Sink<'_>) {
        let out = &mut *sink.out;
        out.push(0x92);
        out.extend_from_slice(&sink.now.to_bytes());
        write_map_len(out, 2 + sink.extra_n);
        write_str(out, self.message_key.as_bytes());
        write_str(out, line);
        write_str(out, b"parse_error");
        write_str(out, reason.as_bytes());
        out.extend_from_slice(sink.extra);
    }
}

/// The time of a piece: RFC 3339 as the runtimes write it, read by hand
/// with the seconds of the last date and time remembered (the lines of a
/// stream share them for a second at a time, so chrono's parse runs once
/// a second, not once a line); anything else through `parse_time`.
fn parse_time_bytes(t: &[u8]) -> Option<EventTime> {
    fast_rfc3339(t).or_else(|| parse_time(std::str::from_utf8(t).ok()?, &TimeFmt::Auto))
}

fn fast_rfc3339(t: &[u8]) -> Option<EventTime> {
    use std::cell::Cell;
    thread_local! {
        static LAST: Cell<([u8; 19], i64, u32)> = const { Cell::new(([0; 19], 0, 0)) };
    }
    if t.len() < 20
        || t[4] != b'-'
        || t[7] != b'-'
        || !matches!(t[10], b'T' | b't')
        || t[13] != b':'
        || t[16] != b':'
    {
        return None;
    }
    let mut rest = &t[19..];
    let mut nanos = 0u32;
    if let Some(frac) = rest.strip_prefix(b".") {
        let n = frac.iter().take_while(|b| b.is_ascii_digit()).count();
        if n == 0 {
            return None;
        }
        for (i, d) in frac[..n].iter().enumerate().take(9) {
            nanos += (d - b'0') as u32 * 10u32.pow(8 - i as u32);
        }
        rest = &frac[n..];
    }
    let offset: i64 = match rest {
        b"Z" | b"z" => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let digits = [*h1, *h2, *m1, *m2];
            if !digits.iter().all(u8::is_ascii_digit) {
                return None;
            }
            let h = ((h1 - b'0') * 10 + (h2 - b'0')) as i64;
            let m = ((m1 - b'0') * 10 + (m2 - b'0')) as i64;
            let o = h * 3600 + m * 60;
            if *sign == b'-' {
                -o
            } else {
                o
            }
        }
        _ => return None,
    };
    let head: [u8; 19] = t[..19].try_into().ok()?;
    let (last_head, last_offset, last_secs) = LAST.get();
    let secs = if last_head == head && last_offset == offset && last_secs != 0 {
        last_secs
    } else {
        let text = std::str::from_utf8(&head).ok()?;
        let naive = chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S").ok()?;
        let secs = naive.and_utc().timestamp() - offset;
        let secs = u32::try_from(secs).ok()?;
        LAST.set((head, offset, secs));
        secs
    };
    Some(EventTime::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct T {
        j: Joiner,
        out: Vec<u8>,
        at: u64,
    }

    impl T {
        fn new(format: Format, max: usize, firstline: Option<&str>) -> T {
            T {
                j: Joiner::new(
                    format,
                    "message",
                    None,
                    max,
                    Duration::from_secs(3600),
                    firstline.map(|f| regex::bytes::Regex::new(f).unwrap()),
                ),
                out: Vec::new(),
                at: 0,
            }
        }
        fn feed(&mut self, line: &str) -> Wrote {
            let mut sink = Sink {
                out: &mut self.out,
                now: EventTime::new(1, 0),
                extra: &[],
                extra_n: 0,
            };
            let w = self.j.feed(line.as_bytes(), self.at, &mut sink);
            self.at += line.len() as u64 + 1;
            w
        }
        fn flush(&mut self) -> Wrote {
            let mut sink = Sink {
                out: &mut self.out,
                now: EventTime::new(1, 0),
                extra: &[],
                extra_n: 0,
            };
            self.j.flush(true, &mut sink)
        }
        fn records(&self) -> Vec<(EventTime, rmpv::Value)> {
            let mut rd = &self.out[..];
            let mut v = Vec::new();
            while !rd.is_empty() {
                let e = rmpv::decode::read_value(&mut rd).unwrap();
                let a = e.as_array().unwrap();
                let rmpv::Value::Ext(0, b) = &a[0] else {
                    panic!("{e}")
                };
                let t = EventTime::new(
                    u32::from_be_bytes(b[..4].try_into().unwrap()),
                    u32::from_be_bytes(b[4..].try_into().unwrap()),
                );
                v.push((t, a[1].clone()));
            }
            v
        }
    }

    fn get<'a>(v: &'a rmpv::Value, k: &str) -> Option<&'a rmpv::Value> {
        v.as_map()?
            .iter()
            .find(|(kk, _)| kk.as_str() == Some(k))
            .map(|(_, v)| v)
    }

    #[test]
    fn cri_pieces_join_per_stream() {
        let mut t = T::new(Format::Cri, 1 << 20, None);
        assert_eq!(t.feed("2026-11-28T11:00:00.1Z stdout P aa").events, 0);
        assert_eq!(t.j.held_from(), Some(0));
        assert_eq!(t.feed("2026-11-28T11:00:00.2Z stderr F err").events, 1);
        assert_eq!(t.feed("2026-11-28T11:00:00.3Z stdout P bb").events, 0);
        assert_eq!(t.feed("2026-11-28T11:00:00.4Z stdout F cc").events, 1);
        assert!(t.j.is_empty());
        let r = t.records();
        assert_eq!(r.len(), 2);
        assert_eq!(get(&r[0].1, "message").unwrap().as_str(), Some("err"));
        assert_eq!(get(&r[0].1, "stream").unwrap().as_str(), Some("stderr"));
        assert_eq!(get(&r[1].1, "message").unwrap().as_str(), Some("aabbcc"));
        assert_eq!(get(&r[1].1, "stream").unwrap().as_str(), Some("stdout"));
        // The first piece's time.
        assert_eq!(
            r[1].0,
            crate::parsers::testutil::utc("2026-11-28T11:00:00.1Z")
        );
    }

    #[test]
    fn runtime_times_read_by_hand_as_chrono_reads_them() {
        for t in [
            "2026-11-28T11:00:00Z",
            "2026-11-28T11:00:00.5Z",
            "2026-11-28T11:00:00.123456789Z",
            "2026-11-28T11:00:00.000000001+01:00",
            "2026-11-28T11:00:00.25-05:30",
            "2026-11-28T11:00:01.1234567891Z",
        ] {
            assert_eq!(
                fast_rfc3339(t.as_bytes()),
                parse_time(t, &TimeFmt::Auto),
                "{t}"
            );
        }
        assert_eq!(fast_rfc3339(b"2026-11-28 11:00:00Z"), None);
        assert_eq!(fast_rfc3339(b"2026-11-28T11:00:00.Z"), None);
        assert_eq!(fast_rfc3339(b"2026-11-28T11:00:00+0100"), None);
        assert!(parse_time_bytes(b"2026-11-28T11:00:00+0100").is_none());
    }

    #[test]
    fn bounded_and_marked() {
        let mut t = T::new(Format::Cri, 5, None);
        t.feed("2026-11-28T11:00:00Z stdout P abc");
        t.feed("2026-11-28T11:00:00Z stdout P def");
        let w = t.feed("2026-11-28T11:00:00Z stdout F gh");
        assert_eq!((w.events, w.truncated), (1, 1));
        t.feed("2026-11-28T11:00:00Z stdout F 123456789");
        t.feed("2026-11-28T11:00:00Z stdout P left");
        assert_eq!(t.flush().events, 1);
        let r = t.records();
        assert_eq!(get(&r[0].1, "message").unwrap().as_str(), Some("abcde"));
        assert_eq!(get(&r[0].1, "truncated").unwrap().as_u64(), Some(3));
        assert_eq!(get(&r[1].1, "message").unwrap().as_str(), Some("12345"));
        assert_eq!(get(&r[1].1, "truncated").unwrap().as_u64(), Some(4));
        assert_eq!(get(&r[2].1, "message").unwrap().as_str(), Some("left"));
        assert_eq!(get(&r[2].1, "partial").unwrap().as_bool(), Some(true));
    }

    #[test]
    fn docker_pieces_and_multiline_after_the_join() {
        let mut t = T::new(Format::Docker, 1 << 20, Some(r"^\d{4}-"));
        let line = |log: &str, stream: &str| {
            serde_json::json!({"log": log, "stream": stream, "time": "2026-11-28T11:00:00.5Z"})
                .to_string()
        };
        t.feed(&line("2026-11-28 ERROR boom: ", "stderr"));
        t.feed(&line("long\n", "stderr"));
        t.feed(&line("out\n", "stdout"));
        t.feed(&line("\tat a.B(C.java:1)\n", "stderr"));
        t.feed(&line("2026-11-28 INFO next\n", "stderr"));
        assert_eq!(t.records().len(), 1);
        t.flush();
        let r = t.records();
        let msgs: Vec<_> = r
            .iter()
            .map(|(_, v)| get(v, "message").unwrap().as_str().unwrap().to_string())
            .collect();
        assert_eq!(
            msgs,
            [
                "2026-11-28 ERROR boom: long\n\tat a.B(C.java:1)",
                "out",
                "2026-11-28 INFO next"
            ]
        );
        let w = t.feed("{not json");
        assert_eq!((w.events, w.errors), (1, 1));
    }
}
