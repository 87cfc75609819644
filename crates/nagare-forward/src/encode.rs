//! Frame encoding.

use std::io::Write;

use crate::decode::Compression;
use crate::event_time::EventTime;
use crate::msgpack::{write_array_len, write_bin_header, write_map_len, write_str, write_uint};

#[inline]
pub fn write_event_time(out: &mut Vec<u8>, t: EventTime) {
    out.extend_from_slice(&t.to_bytes());
}

/// Appends one `[EventTime, record]` entry; `record` is an encoded msgpack map.
#[inline]
pub fn write_entry(out: &mut Vec<u8>, t: EventTime, record: &[u8]) {
    out.push(0x92);
    write_event_time(out, t);
    out.extend_from_slice(record);
}

/// Options written after the events, in the order "size", "chunk", "compressed".
fn write_options(out: &mut Vec<u8>, size: Option<u32>, chunk: Option<&[u8]>, c: Compression) {
    let n = size.is_some() as usize + chunk.is_some() as usize + (c != Compression::None) as usize;
    write_map_len(out, n);
    if let Some(s) = size {
        write_str(out, b"size");
        write_uint(out, s as u64);
    }
    if let Some(id) = chunk {
        write_str(out, b"chunk");
        write_str(out, id);
    }
    if c != Compression::None {
        write_str(out, b"compressed");
        write_str(out, c.as_str().as_bytes());
    }
}

/// Writes a PackedForward frame `[tag, bin(entries), {size, chunk?, compressed?}]`.
/// With `Compression::Gzip` or `Zstd` the entries are compressed first.
pub fn encode_packed_forward(
    out: &mut Vec<u8>,
    tag: &str,
    entries: &[u8],
    count: u32,
    chunk: Option<&[u8]>,
    compression: Compression,
) -> std::io::Result<()> {
    write_array_len(out, 3);
    write_str(out, tag.as_bytes());
    match compression {
        Compression::None => {
            write_bin_header(out, entries.len());
            out.extend_from_slice(entries);
        }
        Compression::Gzip => {
            let mut enc = flate2::write::GzEncoder::new(
                Vec::with_capacity(entries.len() / 4),
                flate2::Compression::fast(),
            );
            enc.write_all(entries)?;
            let z = enc.finish()?;
            write_bin_header(out, z.len());
            out.extend_from_slice(&z);
        }
        Compression::Zstd => {
            let z = zstd::bulk::compress(entries, 1)?;
            write_bin_header(out, z.len());
            out.extend_from_slice(&z);
        }
    }
    write_options(out, Some(count), chunk, compression);
    Ok(())
}

/// Writes a Message frame `[tag, time, record, {chunk}?]`.
pub fn encode_message(
    out: &mut Vec<u8>,
    tag: &str,
    t: EventTime,
    record: &[u8],
    chunk: Option<&[u8]>,
) {
    write_array_len(out, if chunk.is_some() { 4 } else { 3 });
    write_str(out, tag.as_bytes());
    write_event_time(out, t);
    out.extend_from_slice(record);
    if let Some(id) = chunk {
        write_options(out, None, Some(id), Compression::None);
    }
}

/// Writes a Forward frame `[tag, [entries…], {size, chunk?}]` from a canonical
/// entries payload holding `count` entries.
pub fn encode_forward(
    out: &mut Vec<u8>,
    tag: &str,
    entries: &[u8],
    count: u32,
    chunk: Option<&[u8]>,
) {
    write_array_len(out, 3);
    write_str(out, tag.as_bytes());
    write_array_len(out, count as usize);
    out.extend_from_slice(entries);
    write_options(out, Some(count), chunk, Compression::None);
}

/// Writes the ack `{"ack": <chunk>}`, where `raw_chunk` is the chunk option's
/// msgpack value exactly as received, so the id is echoed byte for byte.
pub fn encode_ack(out: &mut Vec<u8>, raw_chunk: &[u8]) {
    out.push(0x81);
    write_str(out, b"ack");
    out.extend_from_slice(raw_chunk);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::{decode_all, Limits, Mode};

    fn record(seq: u8) -> Vec<u8> {
        // {"seq": seq, "message": "hi"}
        let mut r = vec![0x82, 0xa3, b's', b'e', b'q', seq & 0x7f];
        r.extend_from_slice(&[
            0xa7, b'm', b'e', b's', b's', b'a', b'g', b'e', 0xa2, b'h', b'i',
        ]);
        r
    }

    fn entries(n: u8) -> Vec<u8> {
        let mut e = Vec::new();
        for i in 0..n {
            write_entry(&mut e, EventTime::new(1_700_000_000, i as u32), &record(i));
        }
        e
    }

    #[test]
    fn every_mode_round_trips() {
        let e = entries(3);
        let lim = Limits::default();
        for c in [Compression::None, Compression::Gzip, Compression::Zstd] {
            let mut f = Vec::new();
            encode_packed_forward(&mut f, "a.b", &e, 3, Some(b"id1"), c).unwrap();
            let d = decode_all(&f, &lim).unwrap();
            assert_eq!(d.len(), 1);
            assert_eq!(d[0].tag, "a.b");
            assert_eq!(&d[0].entries[..], &e[..]);
            assert_eq!(d[0].count, 3);
            assert_eq!(d[0].chunk.as_deref(), Some(&[0xa3, b'i', b'd', b'1'][..]));
            let want = if c == Compression::None {
                Mode::PackedForward
            } else {
                Mode::CompressedPackedForward
            };
            assert_eq!(d[0].mode, want);
        }
        let mut f = Vec::new();
        encode_forward(&mut f, "x", &e, 3, None);
        let d = decode_all(&f, &lim).unwrap();
        assert_eq!(
            (&d[0].entries[..], d[0].count, d[0].mode),
            (&e[..], 3, Mode::Forward)
        );

        let mut f = Vec::new();
        encode_message(&mut f, "m", EventTime::new(5, 6), &record(1), Some(b"c"));
        let d = decode_all(&f, &lim).unwrap();
        let mut one = Vec::new();
        write_entry(&mut one, EventTime::new(5, 6), &record(1));
        assert_eq!(&d[0].entries[..], &one[..]);
        assert_eq!(d[0].mode, Mode::Message);
    }

    #[test]
    fn ack_echoes_chunk_bytes() {
        let mut out = Vec::new();
        encode_ack(&mut out, &[0xa2, b'x', b'\n']);
        assert_eq!(out, vec![0x81, 0xa3, b'a', b'c', b'k', 0xa2, b'x', b'\n']);
    }
}
