//! Helpers shared by the integration tests: hand-built msgpack pieces, so the
//! tests control every byte the decoder sees.
#![allow(dead_code)]

use bytes::Bytes;
use nagare_forward::msgpack::{write_array_len, write_bin_header, write_map_len, write_str};
use nagare_forward::{scan_frame, DecodeError, EventFrame, EventTime, Limits};
use rmpv::Value;

/// The time the tests pass as "now" (replaces 0 and nil times).
pub const NOW: EventTime = EventTime::new(1_800_000_000, 42);

pub fn s(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    write_str(&mut out, b);
    out
}

pub fn bin(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    write_bin_header(&mut out, b.len());
    out.extend_from_slice(b);
    out
}

pub fn arr(n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    write_array_len(&mut out, n);
    out
}

pub fn map(n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    write_map_len(&mut out, n);
    out
}

/// EventTime as fixext8 (the canonical form).
pub fn et(secs: u32, nanos: u32) -> Vec<u8> {
    EventTime::new(secs, nanos).to_bytes().to_vec()
}

/// EventTime as ext8 with an 8-byte payload (some clients send this form).
pub fn et_ext8(secs: u32, nanos: u32) -> Vec<u8> {
    let mut v = vec![0xc7, 0x08, 0x00];
    v.extend_from_slice(&secs.to_be_bytes());
    v.extend_from_slice(&nanos.to_be_bytes());
    v
}

pub fn f64_time(t: f64) -> Vec<u8> {
    let mut v = vec![0xcb];
    v.extend_from_slice(&t.to_be_bytes());
    v
}

/// Encodes a msgpack value with rmpv.
pub fn enc(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, v).unwrap();
    out
}

/// `{"message": msg, "seq": seq}`
pub fn rec(msg: &str, seq: i64) -> Vec<u8> {
    enc(&Value::Map(vec![
        (Value::from("message"), Value::from(msg)),
        (Value::from("seq"), Value::from(seq)),
    ]))
}

/// `[time, record]` with the given raw time bytes.
pub fn entry(time: &[u8], record: &[u8]) -> Vec<u8> {
    cat(&[&[0x92], time, record])
}

pub fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// An option map from raw (key, value) msgpack pieces.
pub fn opts(pairs: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut out = map(pairs.len());
    for (k, v) in pairs {
        write_str(&mut out, k.as_bytes());
        out.extend_from_slice(v);
    }
    out
}

pub fn uint(v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    nagare_forward::msgpack::write_uint(&mut out, v);
    out
}

pub fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

pub fn zstd(data: &[u8]) -> Vec<u8> {
    zstd::bulk::compress(data, 3).unwrap()
}

/// Scans and builds one frame that must fill `buf` exactly.
pub fn decode_with(buf: &[u8], lim: &Limits) -> Result<EventFrame, DecodeError> {
    let s = scan_frame(buf, lim)?.expect("frame is complete");
    assert_eq!(s.len, buf.len(), "frame length");
    s.into_frame(Bytes::copy_from_slice(buf), lim, NOW)
}

pub fn decode(buf: &[u8]) -> Result<EventFrame, DecodeError> {
    decode_with(buf, &Limits::default())
}

/// Splits a canonical entries payload into (time, record) values.
pub fn entries(payload: &[u8]) -> Vec<(Value, Value)> {
    let mut rd = payload;
    let mut out = Vec::new();
    while !rd.is_empty() {
        let v = rmpv::decode::read_value(&mut rd).unwrap();
        let Value::Array(mut a) = v else {
            panic!("entry is not an array: {v:?}")
        };
        assert_eq!(a.len(), 2, "entry is [time, record]");
        let r = a.pop().unwrap();
        let t = a.pop().unwrap();
        out.push((t, r));
    }
    out
}

/// The EventTime that a canonical fixext8 time value holds.
pub fn as_event_time(v: &Value) -> EventTime {
    match v {
        Value::Ext(0, p) if p.len() == 8 => EventTime::from_payload(p),
        other => panic!("not an EventTime: {other:?}"),
    }
}
