//! Cutting a byte stream into messages: lines ended by a delimiter, and for
//! syslog also RFC 6587 octet counting (`<length> <message>`), recognised
//! per message by the digit it starts with (as rsyslog's imtcp does).
//!
//! Every message is at most `max` bytes: a longer one is cut to its first
//! `max` bytes (reported as `truncated`) and the rest of it, up to its
//! delimiter or the end of its frame, is skipped, so one oversized message
//! costs bounded memory and the connection goes on.

use bytes::{Buf, BytesMut};

/// How a stream is cut into messages.
#[derive(Debug, Clone)]
pub(crate) enum Framing {
    /// Lines ended by `delimiter`.
    Lines { delimiter: Vec<u8> },
    /// Syslog over a stream: octet counting when a message starts with a
    /// digit and a length, else newline-ended; a trailing "\r" is dropped.
    Syslog,
}

/// One message cut off the stream.
pub(crate) struct Message<'a> {
    pub bytes: &'a [u8],
    /// The message was longer than `max`; `bytes` holds its first `max` bytes.
    pub truncated: Option<usize>,
}

/// The state of one stream's cutting.
pub(crate) struct Framer {
    framing: Framing,
    /// What ends a line.
    delimiter: Vec<u8>,
    max: usize,
    /// Bytes of an oversized octet-counted frame still to skip.
    skip_frame: usize,
    /// Inside an oversized line whose rest is skipped up to its delimiter.
    skip_line: bool,
}

/// Longest `<length>` of an octet-counted frame ("4294967295" is 10 digits).
const MAX_LENGTH_DIGITS: usize = 10;

impl Framer {
    pub(crate) fn new(framing: Framing, max: usize) -> Framer {
        let delimiter = match &framing {
            Framing::Lines { delimiter } => delimiter.clone(),
            Framing::Syslog => b"\n".to_vec(),
        };
        Framer {
            framing,
            delimiter,
            max: max.max(1),
            skip_frame: 0,
            skip_line: false,
        }
    }

    /// Inside an octet-counted frame (so the stream must not end here).
    pub(crate) fn inside_frame(&self) -> bool {
        self.skip_frame > 0
    }

    /// Cuts every complete message off the front of `buf`, calling `emit`
    /// with each; what remains is the start of the next message.
    pub(crate) fn split(&mut self, buf: &mut BytesMut, emit: &mut dyn FnMut(Message<'_>)) {
        loop {
            if self.skip_frame > 0 {
                let n = self.skip_frame.min(buf.len());
                buf.advance(n);
                self.skip_frame -= n;
                if self.skip_frame > 0 {
                    return;
                }
                continue;
            }
            if buf.is_empty() {
                return;
            }
            if matches!(self.framing, Framing::Syslog) && !self.skip_line {
                match octet_count(buf) {
                    Counted::Frame { header, len } => {
                        let keep = len.min(self.max);
                        if buf.len() < header + keep {
                            return;
                        }
                        let msg = &buf[header..header + keep];
                        emit(Message {
                            bytes: trim_cr(msg),
                            truncated: (len > keep).then_some(len),
                        });
                        buf.advance(header + keep);
                        self.skip_frame = len - keep;
                        continue;
                    }
                    Counted::NeedMore => return,
                    Counted::No => {}
                }
            }
            if !self.split_line(buf, emit) {
                return;
            }
        }
    }

    /// Cuts one delimited line; false when `buf` holds no complete one.
    fn split_line(&mut self, buf: &mut BytesMut, emit: &mut dyn FnMut(Message<'_>)) -> bool {
        let delim = &self.delimiter;
        let found = match delim[..] {
            [byte] => memchr::memchr(byte, buf),
            _ => memchr::memmem::find(buf, delim),
        };
        let delim_len = delim.len();
        if self.skip_line {
            match found {
                Some(i) => {
                    buf.advance(i + delim_len);
                    self.skip_line = false;
                    return true;
                }
                None => {
                    // Keep what could be the start of a delimiter.
                    let keep = (delim_len - 1).min(buf.len());
                    buf.advance(buf.len() - keep);
                    return false;
                }
            }
        }
        match found {
            Some(i) => {
                let line = &buf[..i];
                let keep = i.min(self.max);
                emit(Message {
                    bytes: self.trim(&line[..keep]),
                    truncated: (i > keep).then_some(i),
                });
                buf.advance(i + delim_len);
                true
            }
            None if buf.len() > self.max => {
                emit(Message {
                    bytes: self.trim(&buf[..self.max]),
                    truncated: Some(buf.len()),
                });
                let keep = (delim_len - 1).min(buf.len() - self.max);
                buf.advance(buf.len() - keep);
                self.skip_line = true;
                false
            }
            None => false,
        }
    }

    fn trim<'a>(&self, line: &'a [u8]) -> &'a [u8] {
        match self.framing {
            Framing::Syslog => trim_cr(line),
            Framing::Lines { .. } => line,
        }
    }

    /// At the end of the stream: the last message when it had no delimiter
    /// (a sender that closes after its last line), unless inside a frame.
    pub(crate) fn finish(&mut self, buf: &mut BytesMut, emit: &mut dyn FnMut(Message<'_>)) {
        if !self.skip_line && self.skip_frame == 0 && !buf.is_empty() {
            if matches!(self.framing, Framing::Syslog) {
                if let Counted::Frame { .. } | Counted::NeedMore = octet_count(buf) {
                    // A cut octet-counted frame: its length says it is incomplete.
                    return;
                }
            }
            emit(Message {
                bytes: self.trim(buf),
                truncated: None,
            });
            buf.clear();
        }
    }
}

fn trim_cr(msg: &[u8]) -> &[u8] {
    let mut m = msg;
    while let [rest @ .., b'\r' | b'\n' | 0] = m {
        m = rest;
    }
    m
}

enum Counted {
    /// `<len> ` header of `header` bytes, then `len` bytes of message.
    Frame { header: usize, len: usize },
    /// Digits so far, and no space yet.
    NeedMore,
    /// Not an octet-counted frame.
    No,
}

fn octet_count(buf: &[u8]) -> Counted {
    if !buf.first().is_some_and(|c| (b'1'..=b'9').contains(c)) {
        return Counted::No;
    }
    let digits = buf.iter().take_while(|c| c.is_ascii_digit()).count();
    if digits > MAX_LENGTH_DIGITS {
        return Counted::No;
    }
    match buf.get(digits) {
        None => Counted::NeedMore,
        Some(b' ') => match std::str::from_utf8(&buf[..digits])
            .ok()
            .and_then(|s| s.parse::<u32>().ok())
        {
            Some(len) => Counted::Frame {
                header: digits + 1,
                len: len as usize,
            },
            None => Counted::No,
        },
        Some(_) => Counted::No,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(framing: Framing, max: usize, parts: &[&[u8]]) -> Vec<(String, Option<usize>)> {
        let mut f = Framer::new(framing, max);
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        let mut emit =
            |m: Message<'_>| got.push((String::from_utf8_lossy(m.bytes).into_owned(), m.truncated));
        for p in parts {
            buf.extend_from_slice(p);
            f.split(&mut buf, &mut emit);
        }
        f.finish(&mut buf, &mut emit);
        got
    }

    fn lines() -> Framing {
        Framing::Lines {
            delimiter: b"\n".to_vec(),
        }
    }

    #[test]
    fn lines_across_reads_and_a_last_line_without_delimiter() {
        let got = cut(lines(), 100, &[b"a\nb", b"c\n\nd"]);
        let want = [("a", None), ("bc", None), ("", None), ("d", None)];
        assert_eq!(got, want.map(|(s, t)| (s.to_string(), t)));
    }

    #[test]
    fn a_long_delimiter_split_between_reads() {
        let f = Framing::Lines {
            delimiter: b"\r\n".to_vec(),
        };
        let got = cut(f, 100, &[b"one\r", b"\ntwo\r\n"]);
        assert_eq!(got, [("one".into(), None), ("two".into(), None)]);
    }

    #[test]
    fn an_oversized_line_is_cut_and_its_rest_skipped() {
        let got = cut(lines(), 4, &[b"abcdefgh", b"ij\nok\n"]);
        assert_eq!(got, [("abcd".into(), Some(8)), ("ok".into(), None)]);
        let got = cut(lines(), 4, &[b"abcdefgh\nok\n"]);
        assert_eq!(got, [("abcd".into(), Some(8)), ("ok".into(), None)]);
    }

    #[test]
    fn syslog_octet_counting_and_newlines_mixed() {
        let got = cut(
            Framing::Syslog,
            100,
            &[b"5 hel", b"lo<13>plain\r\n12 with\nnewline", b"3 end"],
        );
        let want = ["hello", "<13>plain", "with\nnewline", "end"];
        assert_eq!(
            got,
            want.map(|s| (s.to_string(), None)).to_vec(),
            "frames are cut by their length, lines by newline"
        );
    }

    #[test]
    fn syslog_oversized_frame_and_cut_frame() {
        let got = cut(Framing::Syslog, 3, &[b"6 abcdef4 wxyz"]);
        assert_eq!(got, [("abc".into(), Some(6)), ("wxy".into(), Some(4))]);
        // The stream ends inside a frame: nothing is made of its start.
        let mut f = Framer::new(Framing::Syslog, 100);
        let mut buf = BytesMut::from(&b"10 abc"[..]);
        let mut n = 0;
        f.split(&mut buf, &mut |_| n += 1);
        f.finish(&mut buf, &mut |_| n += 1);
        assert_eq!((n, buf.len()), (0, 6));
        // Digits not followed by a space are an ordinary line.
        let got = cut(Framing::Syslog, 100, &[b"12abc\n"]);
        assert_eq!(got, [("12abc".into(), None)]);
    }
}
