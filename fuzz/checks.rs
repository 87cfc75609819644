//! What each fuzz target does with its input, in one place: the targets in
//! fuzz_targets/ call these under libFuzzer (nightly), and
//! crates/nagare/tests/it/fuzz_seeds.rs calls the same functions on every
//! file of seeds/ and seeds-receivers/<target>/ (kept crashes included)
//! with the stable toolchain, so CI keeps them passing without a fuzzer.
//! Each function panics when an invariant breaks (a panic in nagare's own
//! code counts the same): that is what libFuzzer reports as a crash.
//!
//! See docs/fuzzing.md.
#![allow(dead_code)]

use bytes::{Bytes, BytesMut};
use nagare::inputs::common::http_listener::{Body, Decode};
use nagare::inputs::common::sockets::{Feed, Replayed};
use nagare_forward::handshake::{
    decode_ack, decode_reply, ClientHandshake, Helo, Ping, Pong, ServerAuth, User,
};
use nagare_forward::{
    bytes_needed, count_entries, normalize_entries, scan_frame, EventTime, Limits,
};

/// A target: its name, its check, the folder of its seeds (relative to fuzz/).
pub type Target = (&'static str, fn(&[u8]), &'static str);

/// Every target.
pub const TARGETS: &[Target] = &[
    ("frame_decoder", frame_decoder, "seeds"),
    ("es_bulk", es_bulk, "seeds-receivers/es_bulk"),
    ("hec_events", hec_events, "seeds-receivers/hec_events"),
    ("http_body", http_body, "seeds-receivers/http_body"),
    (
        "lumberjack_frames",
        lumberjack_frames,
        "seeds-receivers/lumberjack_frames",
    ),
    ("gelf", gelf, "seeds-receivers/gelf"),
    ("syslog", syslog, "seeds-receivers/syslog"),
];

const NOW: EventTime = EventTime::new(1_800_000_000, 7);

/// Entries as an input hands them to the buffer: `count` entries
/// `[time, record]`, each record a map, nothing after them, and canonical
/// (normalizing them again, as the forward output's peer would, changes
/// nothing).
fn well_formed(entries: &[u8], count: u32) {
    let mut n = 0;
    let mut end = 0;
    for (_, record, whole) in nagare_core::record::entries(entries) {
        assert!(
            matches!(record.first(), Some(0x80..=0x8f | 0xde | 0xdf)),
            "a record is not a map: {record:02x?}"
        );
        n += 1;
        end += whole.len();
    }
    assert_eq!(n, count as usize, "entries counted");
    assert_eq!(end, entries.len(), "bytes after the last entry");
    let (again, m) = normalize_entries(Bytes::copy_from_slice(entries), NOW)
        .expect("an input's entries re-read");
    assert_eq!(m, count);
    assert_eq!(&again[..], entries, "an input's entries are canonical");
}

/// Arbitrary bytes through the forward decoder as a TCP stream would
/// deliver them: fed in pieces, frames cut off as they complete, every
/// complete frame built, until the stream is refused. Also the handshake
/// and ack decoders.
///
/// Invariants checked on every frame that decodes:
/// - the scanned length is within the buffer and the frame limit;
/// - while a frame is incomplete, `bytes_needed` asks for more than the
///   buffer holds;
/// - the entries are canonical: normalizing them again returns the same
///   bytes and count, and `count_entries` agrees.
pub fn frame_decoder(data: &[u8]) {
    let _ = Helo::decode(data);
    let _ = Ping::decode(data);
    let _ = Pong::decode(data);
    let _ = decode_ack(data);
    let _ = decode_reply(data);
    // Both sides of the handshake on hostile messages: a server answering
    // them as a PING, a client reading them as HELO and PONG.
    let users = vec![User {
        username: b"u".to_vec(),
        password: b"p".to_vec(),
    }];
    let answer = ServerAuth::new(b"k", b"srv", users).start().answer(data);
    assert!(Pong::decode(&answer.pong).is_ok());
    let mut client = ClientHandshake::new(b"k", b"cli", b"u", b"p");
    let _ = client.ping(data);
    let _ = client.check_pong(data);

    // First byte: how the stream is split into reads; second: which limits.
    let (ctl, body) = match data {
        [a, b, rest @ ..] => ((*a, *b), rest),
        _ => ((0, 0), data),
    };
    let step = 1 + (ctl.0 as usize % 64) * 16; // 1..=1009 bytes per read
    let limits = if ctl.1 & 1 == 0 {
        // The default frame limit; a smaller inflate limit keeps each run
        // fast (the same code path as the 256 MiB default).
        Limits {
            max_decompressed_size: 4 << 20,
            ..Limits::default()
        }
    } else {
        // Small limits reach the Oversized paths with small inputs.
        Limits {
            max_frame_size: 64 + (ctl.1 as usize) * 8,
            max_decompressed_size: 32 + (ctl.1 as usize) * 16,
        }
    };

    let mut buf = BytesMut::new();
    let mut fed = 0;
    'stream: while fed < body.len() {
        let end = (fed + step).min(body.len());
        buf.extend_from_slice(&body[fed..end]);
        fed = end;
        loop {
            match scan_frame(&buf, &limits) {
                Ok(None) => {
                    // What the reader may reserve: more than it has.
                    let need = bytes_needed(&buf);
                    assert!(need.is_some_and(|n| n > buf.len()), "{need:?}");
                    break;
                }
                Err(_) => break 'stream, // the connection would be closed
                Ok(Some(s)) => {
                    assert!(s.len > 0 && s.len <= buf.len());
                    assert!(s.len <= limits.max_frame_size);
                    let frame = buf.split_to(s.len).freeze();
                    if let Ok(ev) = s.into_frame(frame, &limits, NOW) {
                        check_canonical(&ev.entries, ev.count);
                    }
                }
            }
        }
    }

    // The whole body as one packed payload, too.
    if let Ok((e, n)) = normalize_entries(Bytes::copy_from_slice(body), NOW) {
        check_canonical(&e, n);
    }
}

fn check_canonical(entries: &Bytes, count: u32) {
    let (again, n) = normalize_entries(entries.clone(), NOW).expect("canonical entries re-read");
    assert_eq!(n, count);
    assert_eq!(&again[..], &entries[..]);
    assert_eq!(count_entries(entries).expect("entries count"), count);
}

/// The `elasticsearch` input's `_bulk` decoder: arbitrary bodies, cut into
/// pieces as hyper hands them over (the first byte picks the piece size).
/// Asserts: a body taken gives well-formed entries, as many as the
/// answer's items that succeeded, and an answer that is JSON.
pub fn es_bulk(data: &[u8]) {
    use nagare::inputs::elasticsearch::{ElasticsearchInputConfig, EsDecode};
    let Some((&size, rest)) = data.split_first() else {
        return;
    };
    let cfg: ElasticsearchInputConfig =
        toml::from_str("bind = \"127.0.0.1:0\"\nindex_key = \"i\"").unwrap();
    let d = EsDecode::new(&cfg).unwrap();
    let mut body = Body::default();
    for piece in rest.chunks(size as usize + 1) {
        body.push(Bytes::copy_from_slice(piece));
    }
    if let Ok((events, answer)) = d.bulk(Some("idx".into()), &body) {
        let answer: serde_json::Value =
            serde_json::from_slice(&answer).expect("the answer is JSON");
        let ok = answer["items"]
            .as_array()
            .expect("items")
            .iter()
            .filter(|i| {
                i.as_object()
                    .expect("an item is an object")
                    .values()
                    .any(|v| v["status"] == 201)
            })
            .count();
        let mut n = 0;
        for e in &events {
            well_formed(&e.entries, e.count);
            n += e.count as usize;
        }
        assert_eq!(n, ok, "entries and items answered 201");
    }
}

/// The `splunk_hec` input's decoders: an arbitrary body as an
/// `/services/collector/event` body (concatenated JSON objects) and as a
/// `/raw` body. Asserts: what is taken is well-formed entries of the count
/// given.
pub fn hec_events(data: &[u8]) {
    use nagare::inputs::splunk_hec::{HecDecode, SplunkHecInputConfig};
    let cfg: SplunkHecInputConfig = toml::from_str("bind = \"127.0.0.1:0\"").unwrap();
    let d = HecDecode::new(&cfg).unwrap();
    for e in [d.events(data), d.raw(Some("host=h&source=s"), data)]
        .into_iter()
        .flatten()
    {
        assert!(e.count > 0);
        well_formed(&e.entries, e.count);
    }
}

const HTTP_TYPES: [&str; 5] = [
    "application/json",
    "application/x-ndjson",
    "application/msgpack",
    "application/x-www-form-urlencoded",
    "text/plain",
];

/// The `http` input's body decoder: arbitrary bodies as JSON, NDJSON,
/// msgpack (Fluent Bit's out_http chunks, Fluentd's runs of maps) and form
/// requests (the first byte picks the Content-Type, the second the size of
/// the pieces the body arrives in). Asserts: a body taken gives
/// well-formed entries of the count given, under a tag.
pub fn http_body(data: &[u8]) {
    use nagare::inputs::http::{HttpDecode, HttpInputConfig};
    let [kind, size, rest @ ..] = data else {
        return;
    };
    let cfg: HttpInputConfig =
        toml::from_str("bind = \"127.0.0.1:0\"\ntag = \"t\"\ntag_key = \"tag\"").unwrap();
    let d = HttpDecode::new(&cfg).unwrap();
    let ctype = HTTP_TYPES[*kind as usize % HTTP_TYPES.len()];
    let (head, ()) = hyper::Request::post("/fuzz?time=1700000000")
        .header("content-type", ctype)
        .body(())
        .unwrap()
        .into_parts();
    let mut body = Body::default();
    for piece in rest.chunks(*size as usize + 1) {
        body.push(Bytes::copy_from_slice(piece));
    }
    if let Ok(batches) = d.decode(&head, body) {
        for e in &batches {
            assert!(!e.tag.is_empty());
            well_formed(&e.entries, e.count);
        }
    }
}

/// The `beats` input's Lumberjack v2 frame reader: arbitrary bytes as a
/// connection's frames (window sizes, JSON and key/value data frames,
/// compressed frames), with a small max_frame_size so the limits are
/// reached. Asserts: every window made ready holds well-formed entries of
/// its count.
pub fn lumberjack_frames(data: &[u8]) {
    use nagare::inputs::beats::{BeatsInputConfig, Decoder, Window};
    let cfg: BeatsInputConfig = toml::from_str("max_frame_size = \"64KiB\"").unwrap();
    let d = Decoder::new(&cfg).unwrap();
    let (mut w, mut ready) = (Window::default(), Vec::new());
    let _ = d.frames(data, &mut w, &mut ready, 0);
    for r in &ready {
        well_formed(&r.entries, r.count);
    }
}

/// Splits `data` into datagrams, each written as a 2-byte big-endian
/// length and its bytes (the last one cut short where `data` ends).
fn datagrams(mut data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while let [a, b, rest @ ..] = data {
        let n = (usize::from(*a) << 8 | usize::from(*b)).min(rest.len());
        out.push(&rest[..n]);
        data = &rest[n..];
    }
    out
}

/// What a socket input's server made of a feed: every batch well formed
/// and under a tag.
fn check_replayed(r: &Replayed) {
    for (tag, entries, count) in &r.batches {
        assert!(!tag.is_empty());
        assert!(*count > 0);
        well_formed(entries, *count);
    }
}

/// The `gelf` input: the first byte picks UDP (datagrams, 2-byte length
/// before each: plain, gzip, zlib or chunked GELF, joined across
/// datagrams) or TCP (NUL-ended messages read in pieces of 1 to 128
/// bytes), and a small max_message_size (1 KiB) so the limits are reached.
/// Asserts: every batch holds well-formed entries of its count, tagged.
pub fn gelf(data: &[u8]) {
    use nagare::inputs::gelf::GelfInputConfig;
    let Some((&ctl, rest)) = data.split_first() else {
        return;
    };
    let tcp = ctl & 0x80 != 0;
    let cfg: GelfInputConfig = toml::from_str(&format!(
        "bind = \"127.0.0.1:0\"\ntag = \"g\"\nmax_message_size = \"1KiB\"\nprotocol = \"{}\"\nsource_address_key = \"from\"",
        if tcp { "tcp" } else { "udp" }
    ))
    .unwrap();
    let feed = if tcp {
        Feed::Stream {
            data: rest,
            read_size: 1 + (ctl & 0x7f) as usize,
        }
    } else {
        Feed::Datagrams(datagrams(rest))
    };
    check_replayed(&cfg.replay(feed));
}

/// The `syslog` input: the first byte picks UDP (datagrams, 2-byte length
/// before each) or TCP (octet counting or newline-ended messages read in
/// pieces of 1 to 64 bytes), and the message format (auto, rfc3164,
/// rfc5424); max_message_size is 256 bytes so cutting is reached. Asserts:
/// every batch holds well-formed entries of its count, tagged; every
/// message gives an event (one not parsed is kept with `parse_error`).
pub fn syslog(data: &[u8]) {
    use nagare::inputs::syslog::SyslogInputConfig;
    let Some((&ctl, rest)) = data.split_first() else {
        return;
    };
    let tcp = ctl & 0x80 != 0;
    let format = ["auto", "rfc3164", "rfc5424", "auto"][(ctl >> 5 & 3) as usize];
    let cfg: SyslogInputConfig = toml::from_str(&format!(
        "bind = \"127.0.0.1:0\"\ntag = \"s\"\nmax_message_size = 256\nprotocol = \"{}\"\nmessage_format = \"{format}\"\nfacility_key = \"f\"\nseverity_key = \"v\"\nsource_address_key = \"from\"",
        if tcp { "tcp" } else { "udp" }
    ))
    .unwrap();
    let feed = if tcp {
        Feed::Stream {
            data: rest,
            read_size: 1 + (ctl & 0x1f) as usize * 2,
        }
    } else {
        Feed::Datagrams(datagrams(rest))
    };
    check_replayed(&cfg.replay(feed).expect("the syslog decoder builds"));
}
