//! Frame decoding in two steps.
//!
//! [`scan_frame`] finds where a frame ends in a stream buffer and where its
//! parts are, without copying; the caller then cuts the frame off its buffer
//! (zero-copy `Bytes`) and calls [`Scanned::into_frame`], which checks the
//! entries and yields the packed payload.

use std::io::Read;

use bytes::Bytes;

use crate::event_time::EventTime;
use crate::msgpack::{
    expect_str_or_bin, is_map, read_array_len, read_map_len, read_str_or_bin, read_uint, skip_value,
};
use crate::ScanError;

/// Bounds that protect the decoder from hostile or broken peers.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest frame accepted on the wire.
    pub max_frame_size: usize,
    /// Largest payload a compressed frame may expand to.
    pub max_decompressed_size: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_frame_size: 32 << 20,
            max_decompressed_size: 256 << 20,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("frame larger than the limit of {limit} bytes")]
    Oversized { limit: usize },
    #[error("malformed frame: {0}")]
    Malformed(&'static str),
    #[error("unsupported compression {0:?}")]
    UnknownCompression(String),
    #[error("decompression failed: {0}")]
    Decompress(String),
}

impl From<ScanError> for DecodeError {
    fn from(e: ScanError) -> Self {
        match e {
            // An inner value that runs past a complete outer frame is malformed.
            ScanError::Incomplete(_) => DecodeError::Malformed("value runs past its container"),
            ScanError::Invalid(m) => DecodeError::Malformed(m),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Message,
    Forward,
    PackedForward,
    CompressedPackedForward,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::None => "text",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
        }
    }
}

type Span = (usize, usize);

#[derive(Debug, Clone)]
enum Body {
    Message { time: Span, record: Span },
    Forward { entries: Span },
    Packed { payload: Span },
}

/// Where the parts of one complete frame are in the buffer it was scanned in.
#[derive(Debug, Clone)]
pub struct Scanned {
    /// Total frame length in bytes.
    pub len: usize,
    tag: Span,
    body: Body,
    chunk: Option<Span>,
    compression: Compression,
    size: Option<u64>,
    signal: Option<u64>,
}

/// One decoded frame: a tag and its events as a PackedForward payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventFrame {
    pub tag: String,
    /// Concatenated canonical msgpack `[time, record]` entries.
    pub entries: Bytes,
    pub count: u32,
    /// The `chunk` option's value as raw msgpack bytes (header included), so an
    /// ack can echo it byte for byte.
    pub chunk: Option<Bytes>,
    pub mode: Mode,
    /// The `size` option, when the sender gave one.
    pub size: Option<u64>,
    /// Fluent Bit's `fluent_signal` option (0 logs, 1 metrics, 2 traces).
    pub signal: Option<u64>,
}

fn incomplete_or(e: ScanError, limits: &Limits) -> Result<Option<Scanned>, DecodeError> {
    match e {
        ScanError::Incomplete(n) if n > limits.max_frame_size => Err(DecodeError::Oversized {
            limit: limits.max_frame_size,
        }),
        ScanError::Incomplete(_) => Ok(None),
        ScanError::Invalid(m) => Err(DecodeError::Malformed(m)),
    }
}

/// Looks for one complete frame at the start of `buf`.
///
/// `Ok(None)`: more bytes are needed. `Err`: the stream is broken and the
/// connection should be closed.
pub fn scan_frame(buf: &[u8], limits: &Limits) -> Result<Option<Scanned>, DecodeError> {
    scan_frame_resumed(buf, limits, &mut ScanProgress::default())
}

/// How far the scan of an incomplete frame got, kept by a stream reader
/// between reads of that frame (`scan_frame_resumed`). Without it a frame
/// that arrives in many reads is scanned from its start on every read: a
/// Forward-mode frame of some MB took quadratic time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanProgress {
    /// The least total length the frame can have (0: not known yet); no
    /// scan is worth making before the buffer holds this many bytes.
    pub need: usize,
    /// Forward mode: the entries before `entries_end` were complete ...
    entries_end: usize,
    /// ... and there were this many.
    entries_done: usize,
}

/// `scan_frame` for a buffer that only grew since the last call with the
/// same `progress` (the frame at its start is the same): it goes on where
/// that scan stopped. Reset `progress` (`Default`) once a frame is cut off.
pub fn scan_frame_resumed(
    buf: &[u8],
    limits: &Limits,
    progress: &mut ScanProgress,
) -> Result<Option<Scanned>, DecodeError> {
    if buf.len() < progress.need {
        return Ok(None);
    }
    let scanned = scan_inner(buf, progress);
    if scanned.is_ok() {
        // The next frame's scan starts afresh.
        *progress = ScanProgress::default();
    }
    match scanned {
        Ok(s) if s.len > limits.max_frame_size => Err(DecodeError::Oversized {
            limit: limits.max_frame_size,
        }),
        Ok(s) => Ok(Some(s)),
        Err(e) => {
            if let ScanError::Incomplete(n) = e {
                progress.need = n;
            }
            let r = incomplete_or(e, limits);
            if matches!(r, Ok(None)) && buf.len() > limits.max_frame_size {
                return Err(DecodeError::Oversized {
                    limit: limits.max_frame_size,
                });
            }
            r
        }
    }
}

/// For a buffer that holds the start of a frame, the least total length the
/// frame can have (exact up to the option map for PackedForward), so a reader
/// can make room for it at once instead of growing step by step.
pub fn bytes_needed(buf: &[u8]) -> Option<usize> {
    match scan_inner(buf, &mut ScanProgress::default()) {
        Err(ScanError::Incomplete(n)) => Some(n),
        _ => None,
    }
}

fn scan_inner(buf: &[u8], progress: &mut ScanProgress) -> Result<Scanned, ScanError> {
    let (n, mut pos) = read_array_len(buf, 0)?;
    if !(2..=4).contains(&n) {
        return Err(ScanError::Invalid("a frame is an array of 2 to 4 elements"));
    }
    let tag = expect_str_or_bin(buf, pos, "the tag must be a string")?;
    pos = tag.1;
    if pos >= buf.len() {
        return Err(ScanError::Incomplete(pos + 1));
    }
    let second = buf[pos];
    let (body, mut used) = match second {
        // array: Forward mode
        0x90..=0x9f | 0xdc | 0xdd => {
            let (count, first) = read_array_len(buf, pos)?;
            // Entry by entry, from where the last scan of this frame
            // stopped.
            let (mut end, mut done) = if progress.entries_end > first {
                (progress.entries_end, progress.entries_done)
            } else {
                (first, 0)
            };
            while done < count {
                match skip_value(buf, end) {
                    Ok(next) => (end, done) = (next, done + 1),
                    Err(e) => {
                        (progress.entries_end, progress.entries_done) = (end, done);
                        return Err(e);
                    }
                }
            }
            (
                Body::Forward {
                    entries: (first, end),
                },
                2,
            )
        }
        // str or bin: PackedForward
        0xa0..=0xbf | 0xc4..=0xc6 | 0xd9..=0xdb => {
            let payload = expect_str_or_bin(buf, pos, "entries")?;
            (Body::Packed { payload }, 2)
        }
        // anything else is a time: Message mode
        _ => {
            if n < 3 {
                return Err(ScanError::Invalid("a message frame needs time and record"));
            }
            let tend = skip_value(buf, pos)?;
            let rend = skip_value(buf, tend)?;
            (
                Body::Message {
                    time: (pos, tend),
                    record: (tend, rend),
                },
                3,
            )
        }
    };
    pos = match body {
        Body::Forward { entries } => entries.1,
        Body::Packed { payload } => payload.1,
        Body::Message { record, .. } => record.1,
    };
    let mut s = Scanned {
        len: 0,
        tag,
        body,
        chunk: None,
        compression: Compression::None,
        size: None,
        signal: None,
    };
    if used < n {
        pos = scan_options(buf, pos, &mut s)?;
        used += 1;
    }
    if used != n {
        return Err(ScanError::Invalid("unexpected extra element in frame"));
    }
    s.len = pos;
    Ok(s)
}

fn scan_options(buf: &[u8], pos: usize, s: &mut Scanned) -> Result<usize, ScanError> {
    if pos < buf.len() && buf[pos] == 0xc0 {
        return Ok(pos + 1); // nil options
    }
    let (pairs, mut p) = read_map_len(buf, pos).map_err(|e| match e {
        ScanError::Invalid(_) => ScanError::Invalid("the option must be a map"),
        e => e,
    })?;
    for _ in 0..pairs {
        let key = read_str_or_bin(buf, p)?;
        let vstart = key.map_or_else(|| skip_value(buf, p), |k| Ok(k.1))?;
        let vend = skip_value(buf, vstart)?;
        if let Some((ks, ke)) = key {
            match &buf[ks..ke] {
                b"chunk" => {
                    read_str_or_bin(buf, vstart)?
                        .ok_or(ScanError::Invalid("the chunk option must be a string"))?;
                    s.chunk = Some((vstart, vend));
                }
                b"size" => {
                    s.size = read_uint(buf, vstart)?.map(|(v, _)| v);
                }
                b"fluent_signal" => {
                    s.signal = read_uint(buf, vstart)?.map(|(v, _)| v);
                }
                b"compressed" => {
                    let (cs, ce) = read_str_or_bin(buf, vstart)?
                        .ok_or(ScanError::Invalid("the compressed option must be a string"))?;
                    s.compression = match &buf[cs..ce] {
                        b"gzip" => Compression::Gzip,
                        b"zstd" => Compression::Zstd,
                        b"text" | b"" => Compression::None,
                        _ => return Err(ScanError::Invalid("unsupported compression")),
                    };
                }
                _ => {}
            }
        }
        p = vend;
    }
    Ok(p)
}

impl Scanned {
    /// Fluent Bit's `fluent_signal` option (0 logs, 1 metrics, 2 traces), so a
    /// caller can set non-log payloads apart before decoding entries.
    pub fn signal(&self) -> Option<u64> {
        self.signal
    }

    /// Builds the frame from the bytes that were scanned (cut to `self.len`).
    /// `now` replaces a time of 0 or nil, as Fluentd does.
    pub fn into_frame(
        self,
        frame: Bytes,
        limits: &Limits,
        now: EventTime,
    ) -> Result<EventFrame, DecodeError> {
        let tag = std::str::from_utf8(&frame[self.tag.0..self.tag.1])
            .map_err(|_| DecodeError::Malformed("the tag is not UTF-8"))?
            .to_owned();
        let chunk = self.chunk.map(|(a, b)| frame.slice(a..b));
        let (mode, entries, count) = match self.body {
            Body::Message { time, record } => {
                if !is_map(&frame, record.0)? {
                    return Err(DecodeError::Malformed("the record must be a map"));
                }
                let mut out = Vec::with_capacity(1 + 10 + record.1 - record.0);
                out.push(0x92);
                write_time(&frame[time.0..time.1], now, &mut out)?;
                out.extend_from_slice(&frame[record.0..record.1]);
                (Mode::Message, Bytes::from(out), 1)
            }
            Body::Forward { entries } => {
                let (e, n) = normalize_entries(frame.slice(entries.0..entries.1), now)?;
                (Mode::Forward, e, n)
            }
            Body::Packed { payload } => {
                let raw = frame.slice(payload.0..payload.1);
                let (mode, data) = match self.compression {
                    Compression::None => (Mode::PackedForward, raw),
                    c => (
                        Mode::CompressedPackedForward,
                        decompress(&raw, c, limits.max_decompressed_size)?,
                    ),
                };
                let (e, n) = normalize_entries(data, now)?;
                (mode, e, n)
            }
        };
        Ok(EventFrame {
            tag,
            entries,
            count,
            chunk,
            mode,
            size: self.size,
            signal: self.signal,
        })
    }
}

fn decompress(data: &[u8], c: Compression, limit: usize) -> Result<Bytes, DecodeError> {
    let mut out = Vec::with_capacity((data.len() * 4).min(limit));
    // Read one byte past the limit to tell "exactly at" from "over".
    let res = match c {
        // Fluentd concatenates one gzip member per event stream: read them all.
        Compression::Gzip => flate2::read::MultiGzDecoder::new(data)
            .take(limit as u64 + 1)
            .read_to_end(&mut out),
        Compression::Zstd => zstd::stream::read::Decoder::new(data)
            .and_then(|d| d.take(limit as u64 + 1).read_to_end(&mut out)),
        Compression::None => unreachable!("only called for compressed payloads"),
    };
    res.map_err(|e| DecodeError::Decompress(e.to_string()))?;
    if out.len() > limit {
        return Err(DecodeError::Oversized { limit });
    }
    Ok(Bytes::from(out))
}

/// Writes a canonical time (uint seconds or fixext8 EventTime) for the time
/// value `t`, converting the other forms peers send.
fn write_time(t: &[u8], now: EventTime, out: &mut Vec<u8>) -> Result<(), DecodeError> {
    match time_form(t)? {
        TimeForm::Canonical => out.extend_from_slice(t),
        TimeForm::Event(et) => out.extend_from_slice(&et.to_bytes()),
        TimeForm::Now => out.extend_from_slice(&now.to_bytes()),
    }
    Ok(())
}

enum TimeForm {
    Canonical,
    Event(EventTime),
    Now,
}

fn time_form(t: &[u8]) -> Result<TimeForm, DecodeError> {
    match t[0] {
        0x00 | 0xc0 => Ok(TimeForm::Now),
        0xd7 if t[1] == 0 => Ok(TimeForm::Canonical),
        0xc7 if t.len() == 11 && t[1] == 8 && t[2] == 0 => {
            Ok(TimeForm::Event(EventTime::from_payload(&t[3..11])))
        }
        0xca | 0xcb => {
            let f = if t[0] == 0xca {
                f32::from_be_bytes([t[1], t[2], t[3], t[4]]) as f64
            } else {
                let mut a = [0u8; 8];
                a.copy_from_slice(&t[1..9]);
                f64::from_be_bytes(a)
            };
            if !(0.0..4_294_967_296.0).contains(&f) {
                return Err(DecodeError::Malformed("time out of range"));
            }
            let secs = f.trunc();
            Ok(TimeForm::Event(EventTime::new(
                secs as u32,
                ((f - secs) * 1e9) as u32,
            )))
        }
        _ => match read_uint(t, 0)? {
            Some((0, _)) => Ok(TimeForm::Now),
            Some(_) => Ok(TimeForm::Canonical),
            None => Err(DecodeError::Malformed(
                "time must be an integer or an EventTime",
            )),
        },
    }
}

/// Checks a run of `[time, record]` entries and returns it in canonical form
/// with its count. Canonical input (the common case) is returned as is,
/// without copying; otherwise the entries are rewritten once: ext8
/// EventTimes, float or zero times, and Fluent Bit's `[[time, metadata],
/// record]` form become `[time, record]`.
pub fn normalize_entries(data: Bytes, now: EventTime) -> Result<(Bytes, u32), DecodeError> {
    let buf = &data[..];
    let mut pos = 0;
    let mut count: u32 = 0;
    let mut rewritten: Option<Vec<u8>> = None;
    while pos < buf.len() {
        let start = pos;
        let (n, mut p) = read_array_len(buf, pos)?;
        if n != 2 {
            return Err(DecodeError::Malformed("an entry is [time, record]"));
        }
        let tstart = p;
        // `get`: a lone array header at the end of the payload has no time.
        let (time_span, fb_form) = if matches!(buf.get(p), Some(0x90..=0x9f | 0xdc | 0xdd)) {
            // Fluent Bit 2.x: [[EventTime, {metadata}], record]
            let (m, inner) = read_array_len(buf, p)?;
            if m != 2 {
                return Err(DecodeError::Malformed(
                    "an entry header is [time, metadata]",
                ));
            }
            let tend = skip_value(buf, inner)?;
            if !is_map(buf, tend)? {
                return Err(DecodeError::Malformed("entry metadata must be a map"));
            }
            p = skip_value(buf, tend)?;
            ((inner, tend), true)
        } else if buf.len() >= p + 10 && buf[p] == 0xd7 && buf[p + 1] == 0x00 {
            // The common case, a fixext8 EventTime: no need to walk it.
            p += 10;
            ((tstart, p), false)
        } else {
            p = skip_value(buf, p)?;
            ((tstart, p), false)
        };
        if !is_map(buf, p)? {
            return Err(DecodeError::Malformed("the record must be a map"));
        }
        let rstart = p;
        pos = skip_value(buf, p)?;
        let time = &buf[time_span.0..time_span.1];
        let form = time_form(time)?;
        let canonical = !fb_form && matches!(form, TimeForm::Canonical);
        match (&mut rewritten, canonical) {
            (None, true) => {}
            (None, false) => {
                let mut v = Vec::with_capacity(buf.len());
                v.extend_from_slice(&buf[..start]);
                push_entry(&mut v, time, form, now, &buf[rstart..pos]);
                rewritten = Some(v);
            }
            (Some(v), _) => push_entry(v, time, form, now, &buf[rstart..pos]),
        }
        count = count
            .checked_add(1)
            .ok_or(DecodeError::Malformed("too many entries"))?;
    }
    Ok((rewritten.map(Bytes::from).unwrap_or(data), count))
}

fn push_entry(out: &mut Vec<u8>, time: &[u8], form: TimeForm, now: EventTime, record: &[u8]) {
    out.push(0x92);
    match form {
        TimeForm::Canonical => out.extend_from_slice(time),
        TimeForm::Event(et) => out.extend_from_slice(&et.to_bytes()),
        TimeForm::Now => out.extend_from_slice(&now.to_bytes()),
    }
    out.extend_from_slice(record);
}

/// Counts the entries of a canonical payload (used when reading back buffers).
pub fn count_entries(buf: &[u8]) -> Result<u32, DecodeError> {
    let mut pos = 0;
    let mut n = 0u32;
    while pos < buf.len() {
        pos = skip_value(buf, pos)?;
        n += 1;
    }
    Ok(n)
}

/// Decodes every complete frame in `buf` (a convenience for tests and tools).
pub fn decode_all(buf: &[u8], limits: &Limits) -> Result<Vec<EventFrame>, DecodeError> {
    let mut out = Vec::new();
    let mut b = Bytes::copy_from_slice(buf);
    while !b.is_empty() {
        let s = scan_frame(&b, limits)?.ok_or(DecodeError::Malformed("truncated frame"))?;
        let frame = b.split_to(s.len);
        out.push(s.into_frame(frame, limits, EventTime::now())?);
    }
    Ok(out)
}
