//! The part of Apache Thrift that Scribe speaks: the framed transport (a
//! 4-byte big-endian length before each message) and the binary protocol,
//! for the one call `ResultCode Log(1: list<LogEntry> messages)` with
//! `struct LogEntry { 1: string category, 2: string message }` and
//! `enum ResultCode { OK = 0, TRY_LATER = 1 }`.
//!
//! Hand-written rather than Apache's `thrift` crate: that crate's transports
//! are blocking (std::io), and one call of one service is a few hundred lines
//! of codec that works on the bytes of a whole frame, without copies.
//! No tokio here: the scribe input and output do the I/O.

/// Thrift's wire types (binary protocol).
const T_STOP: u8 = 0;
const T_BOOL: u8 = 2;
const T_BYTE: u8 = 3;
const T_DOUBLE: u8 = 4;
const T_I16: u8 = 6;
const T_I32: u8 = 8;
const T_I64: u8 = 10;
const T_STRING: u8 = 11;
const T_STRUCT: u8 = 12;
const T_MAP: u8 = 13;
const T_SET: u8 = 14;
const T_LIST: u8 = 15;

/// Message types.
pub const CALL: u8 = 1;
pub const REPLY: u8 = 2;
pub const EXCEPTION: u8 = 3;

/// Strict binary protocol: version 1 in the high bytes of the first word.
const VERSION_1: u32 = 0x8001_0000;
const VERSION_MASK: u32 = 0xffff_0000;

/// TApplicationException types.
pub const UNKNOWN_METHOD: i32 = 1;

/// Nesting limit when skipping fields nobody asked for.
const MAX_DEPTH: usize = 32;

/// Scribe's answer to a Log call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultCode {
    Ok = 0,
    /// The server cannot take the messages now; the client sends them again later.
    TryLater = 1,
}

/// Bytes that are not what the protocol allows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed Thrift message: {0}")]
pub struct WireError(pub String);

fn bad<T>(what: impl Into<String>) -> Result<T, WireError> {
    Err(WireError(what.into()))
}

/// The length of the frame at the start of `buf` (without its 4-byte
/// header), when the header is there.
pub fn frame_len(buf: &[u8]) -> Option<Result<usize, WireError>> {
    let head: [u8; 4] = buf.get(..4)?.try_into().ok()?;
    let n = i32::from_be_bytes(head);
    Some(if n <= 0 {
        bad(format!("frame length {n}"))
    } else {
        Ok(n as usize)
    })
}

/// A call as it arrived: its method name, message type, sequence id and the
/// bytes of its argument struct.
#[derive(Debug)]
pub struct Message<'a> {
    pub name: &'a [u8],
    pub kind: u8,
    pub seqid: i32,
    pub body: &'a [u8],
}

/// Reads the message header at the start of one frame's payload (strict
/// and old non-strict headers both).
pub fn decode_message(frame: &[u8]) -> Result<Message<'_>, WireError> {
    let mut r = Reader::new(frame);
    let first = r.i32()? as u32;
    let (name, kind) = if first & 0x8000_0000 != 0 {
        if first & VERSION_MASK != VERSION_1 {
            return bad(format!("unknown protocol version {first:#x}"));
        }
        (r.bytes()?, (first & 0xff) as u8)
    } else {
        let name = r.take(first as usize)?;
        (name, r.u8()?)
    };
    let seqid = r.i32()?;
    Ok(Message {
        name,
        kind,
        seqid,
        body: &frame[r.pos..],
    })
}

/// Calls `entry(category, message)` for each LogEntry of a Log call's
/// arguments, in order; returns how many there were. Unknown fields are
/// skipped; a missing category or message is an empty one.
pub fn log_entries<'a>(
    args: &'a [u8],
    mut entry: impl FnMut(&'a [u8], &'a [u8]),
) -> Result<usize, WireError> {
    let mut r = Reader::new(args);
    let mut count = 0;
    loop {
        let t = r.u8()?;
        if t == T_STOP {
            return Ok(count);
        }
        let id = r.i16()?;
        if id != 1 || t != T_LIST {
            r.skip(t, 0)?;
            continue;
        }
        let elem = r.u8()?;
        let n = r.len()?;
        if elem != T_STRUCT {
            return bad(format!(
                "Log messages: a list of type {elem}, not of LogEntry structs"
            ));
        }
        for _ in 0..n {
            if let Some((category, message)) = r.plain_log_entry() {
                entry(category, message);
                continue;
            }
            let (mut category, mut message): (&[u8], &[u8]) = (b"", b"");
            loop {
                let t = r.u8()?;
                if t == T_STOP {
                    break;
                }
                match (r.i16()?, t) {
                    (1, T_STRING) => category = r.bytes()?,
                    (2, T_STRING) => message = r.bytes()?,
                    _ => r.skip(t, 1)?,
                }
            }
            entry(category, message);
        }
        count += n;
    }
}

/// A cursor over a frame's bytes.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        match self.buf.get(self.pos..self.pos.saturating_add(n)) {
            Some(s) => {
                self.pos += n;
                Ok(s)
            }
            None => bad(format!(
                "{n} bytes wanted at offset {} of a {}-byte frame",
                self.pos,
                self.buf.len()
            )),
        }
    }

    /// A LogEntry as every Scribe client writes it: the category (field 1),
    /// the message (field 2), the stop byte. Reads it in one go, or reads
    /// nothing (None) when the bytes are laid out otherwise, for the
    /// field-by-field loop. A call's entries are mostly this: it is the
    /// per-message part of the decoding.
    #[inline]
    fn plain_log_entry(&mut self) -> Option<(&'a [u8], &'a [u8])> {
        let rest = &self.buf[self.pos..];
        let (category, after) = plain_string_field(rest, 1)?;
        let (message, after) =
            plain_string_field(&rest[after..], 2).map(|(m, e)| (m, after + e))?;
        if *rest.get(after)? != T_STOP {
            return None;
        }
        self.pos += after + 1;
        Some((category, message))
    }

    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }

    fn i16(&mut self) -> Result<i16, WireError> {
        Ok(i16::from_be_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }

    fn i32(&mut self) -> Result<i32, WireError> {
        Ok(i32::from_be_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    /// A collection's size: never negative, and at most one element per
    /// byte left (so a lying header cannot make anyone loop or allocate).
    fn len(&mut self) -> Result<usize, WireError> {
        let n = self.i32()?;
        if n < 0 || n as usize > self.buf.len() - self.pos {
            return bad(format!("collection size {n} at offset {}", self.pos - 4));
        }
        Ok(n as usize)
    }

    fn bytes(&mut self) -> Result<&'a [u8], WireError> {
        let n = self.i32()?;
        if n < 0 {
            return bad(format!("string length {n}"));
        }
        self.take(n as usize)
    }

    /// Skips one value of type `t`.
    fn skip(&mut self, t: u8, depth: usize) -> Result<(), WireError> {
        if depth > MAX_DEPTH {
            return bad("values nested too deep");
        }
        match t {
            T_BOOL | T_BYTE => self.take(1).map(drop),
            T_I16 => self.take(2).map(drop),
            T_I32 => self.take(4).map(drop),
            T_DOUBLE | T_I64 => self.take(8).map(drop),
            T_STRING => self.bytes().map(drop),
            T_STRUCT => loop {
                let ft = self.u8()?;
                if ft == T_STOP {
                    return Ok(());
                }
                self.i16()?;
                self.skip(ft, depth + 1)?;
            },
            T_MAP => {
                let (k, v) = (self.u8()?, self.u8()?);
                for _ in 0..self.len()? {
                    self.skip(k, depth + 1)?;
                    self.skip(v, depth + 1)?;
                }
                Ok(())
            }
            T_SET | T_LIST => {
                let e = self.u8()?;
                for _ in 0..self.len()? {
                    self.skip(e, depth + 1)?;
                }
                Ok(())
            }
            _ => bad(format!("unknown field type {t} at offset {}", self.pos)),
        }
    }
}

/// The string field `id` at the start of `buf` (type, id, length, bytes):
/// its bytes and where it ends; None when `buf` does not start with it whole.
#[inline]
fn plain_string_field(buf: &[u8], id: u8) -> Option<(&[u8], usize)> {
    let head: &[u8; 7] = buf.get(..7)?.try_into().ok()?;
    if head[..3] != [T_STRING, 0, id] {
        return None;
    }
    let n = i32::from_be_bytes([head[3], head[4], head[5], head[6]]);
    let end = 7usize.checked_add(usize::try_from(n).ok()?)?;
    Some((buf.get(7..end)?, end))
}

fn put_i32(out: &mut Vec<u8>, v: i32) {
    out.extend_from_slice(&v.to_be_bytes());
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_i32(out, b.len() as i32);
    out.extend_from_slice(b);
}

fn put_field(out: &mut Vec<u8>, t: u8, id: i16) {
    out.push(t);
    out.extend_from_slice(&id.to_be_bytes());
}

/// Starts a framed message (strict header); `end_frame` writes its length.
fn begin(out: &mut Vec<u8>, name: &[u8], kind: u8, seqid: i32) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    put_i32(out, (VERSION_1 | kind as u32) as i32);
    put_bytes(out, name);
    put_i32(out, seqid);
    at
}

fn end_frame(out: &mut [u8], at: usize) {
    let n = (out.len() - at - 4) as i32;
    out[at..at + 4].copy_from_slice(&n.to_be_bytes());
}

/// Appends the framed reply to Log call `seqid`.
pub fn encode_log_reply(out: &mut Vec<u8>, seqid: i32, code: ResultCode) {
    let at = begin(out, b"Log", REPLY, seqid);
    put_field(out, T_I32, 0);
    put_i32(out, code as i32);
    out.push(T_STOP);
    end_frame(out, at);
}

/// Appends a framed TApplicationException answering call `name`/`seqid`.
pub fn encode_exception(out: &mut Vec<u8>, name: &[u8], seqid: i32, kind: i32, message: &str) {
    let at = begin(out, name, EXCEPTION, seqid);
    put_field(out, T_STRING, 1);
    put_bytes(out, message.as_bytes());
    put_field(out, T_I32, 2);
    put_i32(out, kind);
    out.push(T_STOP);
    end_frame(out, at);
}

/// Writes one framed Log call: `begin`, then `entry` for each entry, then
/// `finish` with the number of entries written.
pub struct LogCall {
    at: usize,
    /// Where the list's size goes.
    size_at: usize,
}

impl LogCall {
    pub fn begin(out: &mut Vec<u8>, seqid: i32) -> LogCall {
        let at = begin(out, b"Log", CALL, seqid);
        put_field(out, T_LIST, 1);
        out.push(T_STRUCT);
        let size_at = out.len();
        put_i32(out, 0);
        LogCall { at, size_at }
    }

    /// One LogEntry; `write` appends the message bytes to the buffer it is given.
    pub fn entry(out: &mut Vec<u8>, category: &[u8], write: impl FnOnce(&mut Vec<u8>)) {
        put_field(out, T_STRING, 1);
        put_bytes(out, category);
        put_field(out, T_STRING, 2);
        let len_at = out.len();
        put_i32(out, 0);
        write(out);
        let n = (out.len() - len_at - 4) as i32;
        out[len_at..len_at + 4].copy_from_slice(&n.to_be_bytes());
        out.push(T_STOP);
    }

    pub fn finish(self, out: &mut Vec<u8>, count: usize) {
        out[self.size_at..self.size_at + 4].copy_from_slice(&(count as i32).to_be_bytes());
        out.push(T_STOP);
        end_frame(out, self.at);
    }
}

/// The answer to a Log call, from one frame's payload: its sequence id and
/// result code. An exception or an answer without a result is an error
/// carrying what the server said.
pub fn decode_log_reply(frame: &[u8]) -> Result<(i32, ResultCode), WireError> {
    let m = decode_message(frame)?;
    let mut r = Reader::new(m.body);
    let mut code = None;
    let mut text: &[u8] = b"";
    loop {
        let t = r.u8()?;
        if t == T_STOP {
            break;
        }
        match (r.i16()?, t, m.kind) {
            (0, T_I32, REPLY) => code = Some(r.i32()?),
            (1, T_STRING, EXCEPTION) => text = r.bytes()?,
            _ => r.skip(t, 1)?,
        }
    }
    match (m.kind, code) {
        (EXCEPTION, _) => bad(format!(
            "the server answered an exception: {}",
            String::from_utf8_lossy(text)
        )),
        (REPLY, Some(0)) => Ok((m.seqid, ResultCode::Ok)),
        (REPLY, Some(1)) => Ok((m.seqid, ResultCode::TryLater)),
        (REPLY, Some(c)) => bad(format!("unknown result code {c}")),
        (REPLY, None) => bad("a reply without a result"),
        (k, _) => bad(format!("message type {k} where a reply was expected")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(framed: &[u8]) -> &[u8] {
        let n = frame_len(framed).unwrap().unwrap();
        assert_eq!(n, framed.len() - 4);
        &framed[4..]
    }

    #[test]
    fn log_call_round_trip() {
        let mut out = Vec::new();
        let call = LogCall::begin(&mut out, 7);
        LogCall::entry(&mut out, b"app", |o| o.extend_from_slice(b"hello"));
        LogCall::entry(&mut out, b"db", |o| o.extend_from_slice(b""));
        call.finish(&mut out, 2);
        let m = decode_message(payload(&out)).unwrap();
        assert_eq!((m.name, m.kind, m.seqid), (&b"Log"[..], CALL, 7));
        let mut got = Vec::new();
        let n = log_entries(m.body, |c, msg| got.push((c.to_vec(), msg.to_vec()))).unwrap();
        assert_eq!(n, 2);
        assert_eq!(
            got,
            vec![
                (b"app".to_vec(), b"hello".to_vec()),
                (b"db".to_vec(), b"".to_vec())
            ]
        );
    }

    #[test]
    fn entries_laid_out_otherwise_decode_as_the_plain_ones() {
        // The message before the category, an unknown field first, no
        // category, and the plain layout last: the fast path takes only
        // the last, the loop the others, one after the other.
        let mut body = Vec::new();
        put_field(&mut body, T_LIST, 1);
        body.push(T_STRUCT);
        put_i32(&mut body, 4);
        put_field(&mut body, T_STRING, 2);
        put_bytes(&mut body, b"m1");
        put_field(&mut body, T_STRING, 1);
        put_bytes(&mut body, b"c1");
        body.push(T_STOP);
        put_field(&mut body, T_I32, 3);
        put_i32(&mut body, 5);
        put_field(&mut body, T_STRING, 1);
        put_bytes(&mut body, b"c2");
        put_field(&mut body, T_STRING, 2);
        put_bytes(&mut body, b"m2");
        body.push(T_STOP);
        put_field(&mut body, T_STRING, 2);
        put_bytes(&mut body, b"m3");
        body.push(T_STOP);
        put_field(&mut body, T_STRING, 1);
        put_bytes(&mut body, b"c4");
        put_field(&mut body, T_STRING, 2);
        put_bytes(&mut body, b"m4");
        body.push(T_STOP);
        body.push(T_STOP);
        let mut got = Vec::new();
        let n = log_entries(&body, |c, m| got.push((c.to_vec(), m.to_vec()))).unwrap();
        assert_eq!(n, 4);
        let want: Vec<(Vec<u8>, Vec<u8>)> = [("c1", "m1"), ("c2", "m2"), ("", "m3"), ("c4", "m4")]
            .iter()
            .map(|(c, m)| (c.as_bytes().to_vec(), m.as_bytes().to_vec()))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn replies_round_trip() {
        for code in [ResultCode::Ok, ResultCode::TryLater] {
            let mut out = Vec::new();
            encode_log_reply(&mut out, 42, code);
            assert_eq!(decode_log_reply(payload(&out)), Ok((42, code)));
        }
        let mut out = Vec::new();
        encode_exception(&mut out, b"Log", 3, UNKNOWN_METHOD, "nope");
        let e = decode_log_reply(payload(&out)).unwrap_err();
        assert!(e.0.contains("nope"), "{e}");
    }

    #[test]
    fn non_strict_header() {
        // Old clients: name length, name, type byte, seqid.
        let mut f = Vec::new();
        put_i32(&mut f, 3);
        f.extend_from_slice(b"Log");
        f.push(CALL);
        put_i32(&mut f, 9);
        f.push(T_STOP);
        let m = decode_message(&f).unwrap();
        assert_eq!((m.name, m.kind, m.seqid), (&b"Log"[..], CALL, 9));
        assert_eq!(log_entries(m.body, |_, _| {}).unwrap(), 0);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let mut out = Vec::new();
        let call = LogCall::begin(&mut out, 1);
        for _ in 0..3 {
            LogCall::entry(&mut out, b"c", |o| o.extend_from_slice(b"m"));
        }
        call.finish(&mut out, 3);
        let whole = out[4..].to_vec();
        // Every truncation and every single-byte change decodes or fails cleanly.
        for cut in 0..whole.len() {
            if let Ok(m) = decode_message(&whole[..cut]) {
                assert!(log_entries(m.body, |_, _| {}).is_err());
            }
        }
        for i in 0..whole.len() {
            for b in [0x00, 0x7f, 0x80, 0xff] {
                let mut f = whole.clone();
                f[i] = b;
                if let Ok(m) = decode_message(&f) {
                    let _ = log_entries(m.body, |_, _| {});
                }
            }
        }
        assert!(frame_len(&[0xff, 0xff, 0xff, 0xff]).unwrap().is_err());
        assert!(frame_len(&[0, 0]).is_none());
    }
}
