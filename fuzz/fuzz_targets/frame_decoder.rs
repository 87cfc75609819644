//! Arbitrary bytes through the forward decoder as a TCP stream would deliver
//! them: fed in pieces, frames cut off as they complete, every complete frame
//! built, until the stream is refused. Also the handshake and ack decoders.
//!
//! Invariants checked on every frame that decodes:
//! - the scanned length is within the buffer and the frame limit;
//! - while a frame is incomplete, `bytes_needed` asks for more than the
//!   buffer holds;
//! - the entries are canonical: normalizing them again returns the same
//!   bytes and count, and `count_entries` agrees.
#![no_main]

use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use nagare_forward::handshake::{
    decode_ack, decode_reply, ClientHandshake, Helo, Ping, Pong, ServerAuth, User,
};
use nagare_forward::{
    bytes_needed, count_entries, normalize_entries, scan_frame, EventTime, Limits,
};

const NOW: EventTime = EventTime::new(1_800_000_000, 7);

fuzz_target!(|data: &[u8]| {
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
});

fn check_canonical(entries: &Bytes, count: u32) {
    let (again, n) = normalize_entries(entries.clone(), NOW).expect("canonical entries re-read");
    assert_eq!(n, count);
    assert_eq!(&again[..], &entries[..]);
    assert_eq!(count_entries(entries).expect("entries count"), count);
}
