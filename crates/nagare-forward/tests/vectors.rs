//! The Rust encoder and decoder against every shared test vector
//! (sdk/vectors/vectors.json; its format is in sdk/vectors/README.md).

mod common;

use bytes::Bytes;
use common::*;
use nagare_forward::handshake::{
    digest_eq, password_digest, shared_key_digest, ClientHandshake, HandshakeError, Helo, Ping,
    Pong,
};
use nagare_forward::{
    encode_forward, encode_message, encode_packed_forward, scan_frame, Compression, EventTime,
    Limits, Mode,
};
use serde_json::Value as Json;

fn vectors() -> Json {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../sdk/vectors/vectors.json"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

fn hx(v: &Json) -> Vec<u8> {
    hex::decode(v.as_str().expect("hex string")).unwrap()
}

fn u32_of(v: &Json) -> u32 {
    u32::try_from(v.as_u64().expect("integer")).unwrap()
}

/// A msgpack value as the JSON the vectors write it in.
fn to_json(v: &rmpv::Value) -> Json {
    use rmpv::Value as V;
    match v {
        V::Nil => Json::Null,
        V::Boolean(b) => Json::Bool(*b),
        V::Integer(i) => {
            if let Some(u) = i.as_u64() {
                Json::from(u)
            } else {
                Json::from(i.as_i64().unwrap())
            }
        }
        V::F64(f) => Json::from(*f),
        V::F32(f) => Json::from(*f as f64),
        V::String(s) => Json::String(s.as_str().expect("UTF-8 string").to_owned()),
        V::Array(a) => Json::Array(a.iter().map(to_json).collect()),
        V::Map(m) => Json::Object(
            m.iter()
                .map(|(k, v)| (k.as_str().expect("string key").to_owned(), to_json(v)))
                .collect(),
        ),
        other => panic!("the vectors hold no {other:?}"),
    }
}

/// JSON equality where floats may differ by the last bit of parsing.
fn json_eq(a: &Json, b: &Json) -> bool {
    match (a, b) {
        (Json::Number(x), Json::Number(y)) if x.is_f64() || y.is_f64() => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            x == y || ((x - y).abs() <= f64::EPSILON * x.abs().max(y.abs()) * 2.0)
        }
        (Json::Array(x), Json::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Json::Object(x), Json::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

#[test]
fn event_time_vectors() {
    let v = vectors();
    let list = v["event_time"].as_array().unwrap();
    assert!(!list.is_empty());
    for t in list {
        let et = EventTime::new(u32_of(&t["sec"]), u32_of(&t["nsec"]));
        let want = hx(&t["hex"]);
        assert_eq!(&et.to_bytes()[..], &want[..]);
        assert_eq!(EventTime::from_payload(&want[2..]), et);
    }
}

struct Vector {
    name: String,
    mode: String,
    tag: String,
    times: Vec<EventTime>,
    records: Vec<Json>,
    /// The chunk option's raw msgpack value (a str holding the id text).
    chunk: Option<Vec<u8>>,
    hex: Vec<u8>,
    entries_hex: Vec<u8>,
}

fn frame_vectors() -> Vec<Vector> {
    let v = vectors();
    v["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let entries = f["entries"].as_array().unwrap();
            let o = f["options"].as_object().unwrap();
            assert!(o.keys().all(|k| k == "chunk"), "unknown option in {f}");
            Vector {
                name: f["name"].as_str().unwrap().to_owned(),
                mode: f["mode"].as_str().unwrap().to_owned(),
                tag: f["tag"].as_str().unwrap().to_owned(),
                times: entries
                    .iter()
                    .map(|e| EventTime::new(u32_of(&e["sec"]), u32_of(&e["nsec"])))
                    .collect(),
                records: entries.iter().map(|e| e["record"].clone()).collect(),
                chunk: o.get("chunk").map(|c| s(c.as_str().unwrap().as_bytes())),
                hex: hx(&f["hex"]),
                entries_hex: hx(&f["entries_hex"]),
            }
        })
        .collect()
}

/// The record bytes of each entry of a canonical payload.
fn record_bytes(payload: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < payload.len() {
        let end = nagare_forward::msgpack::skip_value(payload, pos).unwrap();
        assert_eq!(payload[pos], 0x92);
        assert_eq!(payload[pos + 1], 0xd7, "EventTime as fixext8");
        out.push(payload[pos + 11..end].to_vec());
        pos = end;
    }
    out
}

#[test]
fn decoder_reads_every_frame_vector() {
    let lim = Limits {
        max_frame_size: 1 << 20,
        max_decompressed_size: 1 << 20,
    };
    let all = frame_vectors();
    assert!(all.len() >= 30, "{} frame vectors", all.len());
    for v in &all {
        let ctx = &v.name;
        let sc = scan_frame(&v.hex, &lim).unwrap().expect(ctx);
        assert_eq!(sc.len, v.hex.len(), "{ctx}");
        let ev = sc
            .into_frame(Bytes::from(v.hex.clone()), &lim, NOW)
            .unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(ev.tag, v.tag, "{ctx}");
        let want_mode = match v.mode.as_str() {
            "message" => Mode::Message,
            "forward" => Mode::Forward,
            "packed" => Mode::PackedForward,
            "compressed" => Mode::CompressedPackedForward,
            m => panic!("{ctx}: unknown mode {m}"),
        };
        assert_eq!(ev.mode, want_mode, "{ctx}");
        assert_eq!(ev.count as usize, v.times.len(), "{ctx}");
        assert_eq!(&ev.entries[..], &v.entries_hex[..], "{ctx}");
        assert_eq!(ev.chunk.as_deref(), v.chunk.as_deref(), "{ctx}");
        if matches!(
            want_mode,
            Mode::PackedForward | Mode::CompressedPackedForward
        ) {
            assert_eq!(ev.size, Some(v.times.len() as u64), "{ctx}");
        }
        // Each entry holds the vector's time and record.
        let got = entries(&ev.entries);
        assert_eq!(got.len(), v.times.len(), "{ctx}");
        for (i, (t, r)) in got.iter().enumerate() {
            assert_eq!(as_event_time(t), v.times[i], "{ctx} entry {i}");
            assert!(
                json_eq(&to_json(r), &v.records[i]),
                "{ctx} entry {i}: {} != {}",
                to_json(r),
                v.records[i]
            );
        }
        // Every prefix is incomplete.
        for cut in [0, 1, v.hex.len() / 2, v.hex.len() - 1] {
            assert!(
                scan_frame(&v.hex[..cut], &lim).unwrap().is_none(),
                "{ctx} cut {cut}"
            );
        }
    }
}

#[test]
fn encoder_writes_every_frame_vector() {
    let lim = Limits {
        max_frame_size: 1 << 20,
        max_decompressed_size: 1 << 20,
    };
    for v in frame_vectors() {
        let ctx = &v.name;
        let n = v.times.len() as u32;
        let chunk_id = v.chunk.as_ref().map(|c| {
            // The id text without its str header.
            let (a, b) = nagare_forward::msgpack::read_str_or_bin(c, 0)
                .unwrap()
                .unwrap();
            c[a..b].to_vec()
        });
        // The encoder writes entries from times and records.
        let mut entries = Vec::new();
        for (t, r) in v.times.iter().zip(record_bytes(&v.entries_hex)) {
            nagare_forward::write_entry(&mut entries, *t, &r);
        }
        assert_eq!(entries, v.entries_hex, "{ctx}: entries");

        let mut out = Vec::new();
        match v.mode.as_str() {
            "message" => {
                assert_eq!(n, 1, "{ctx}");
                let r = &record_bytes(&v.entries_hex)[0];
                encode_message(&mut out, &v.tag, v.times[0], r, chunk_id.as_deref());
                assert_eq!(out, v.hex, "{ctx}");
            }
            "packed" => {
                encode_packed_forward(
                    &mut out,
                    &v.tag,
                    &entries,
                    n,
                    chunk_id.as_deref(),
                    Compression::None,
                )
                .unwrap();
                assert_eq!(out, v.hex, "{ctx}");
            }
            "forward" => {
                // encode_forward always adds the "size" option (as the
                // packed modes do), which the vectors' Forward frames leave
                // out: the bytes are the vector's with {"size": n} merged in.
                encode_forward(&mut out, &v.tag, &entries, n, chunk_id.as_deref());
                let mut want = arr(3);
                let mut rest = v.hex.clone();
                let body_end = {
                    let (_, p) = nagare_forward::msgpack::read_array_len(&rest, 0).unwrap();
                    let p = nagare_forward::msgpack::skip_value(&rest, p).unwrap();
                    nagare_forward::msgpack::skip_value(&rest, p).unwrap()
                };
                let tail = rest.split_off(body_end);
                want.extend_from_slice(&rest[1..]);
                let mut o = vec![("size", uint(n as u64))];
                if let Some(c) = &v.chunk {
                    o.push(("chunk", c.clone()));
                }
                want.extend_from_slice(&opts(&o));
                let want_tail = match &v.chunk {
                    None => Vec::new(),
                    Some(c) => opts(&[("chunk", c.clone())]),
                };
                assert_eq!(tail, want_tail, "{ctx}: vector options");
                assert_eq!(out, want, "{ctx}");
            }
            "compressed" => {
                // gzip bytes differ between implementations: compare what
                // the frames decode to.
                encode_packed_forward(
                    &mut out,
                    &v.tag,
                    &entries,
                    n,
                    chunk_id.as_deref(),
                    Compression::Gzip,
                )
                .unwrap();
                for (who, bytes) in [("ours", &out), ("vector", &v.hex)] {
                    let ev = decode_with(bytes, &lim).unwrap();
                    assert_eq!(ev.mode, Mode::CompressedPackedForward, "{ctx} {who}");
                    assert_eq!(ev.tag, v.tag, "{ctx} {who}");
                    assert_eq!(&ev.entries[..], &v.entries_hex[..], "{ctx} {who}");
                    assert_eq!(ev.chunk.as_deref(), v.chunk.as_deref(), "{ctx} {who}");
                    assert_eq!(ev.size, Some(n as u64), "{ctx} {who}");
                }
                // Everything up to the payload is the same bytes.
                let head = cat(&[&arr(3), &s(v.tag.as_bytes())]);
                assert!(out.starts_with(&head) && v.hex.starts_with(&head), "{ctx}");
                // And so is the option map after it.
                let mut o = vec![("size", uint(n as u64))];
                if let Some(c) = &v.chunk {
                    o.push(("chunk", c.clone()));
                }
                o.push(("compressed", s(b"gzip")));
                let tail = opts(&o);
                assert!(out.ends_with(&tail) && v.hex.ends_with(&tail), "{ctx}");
            }
            m => panic!("{ctx}: unknown mode {m}"),
        }
    }
}

#[test]
fn handshake_vectors() {
    let v = vectors();
    let list = v["handshake"].as_array().unwrap();
    assert!(!list.is_empty());
    for (i, h) in list.iter().enumerate() {
        let st = |k: &str| h[k].as_str().unwrap().as_bytes().to_vec();
        let key = st("shared_key");
        let salt = hx(&h["shared_key_salt_hex"]);
        let client = st("client_hostname");
        let server = st("server_hostname");
        let nonce = hx(&h["nonce_hex"]);
        let auth = hx(&h["auth_salt_hex"]);
        let user = st("username");
        let pass = st("password");

        let ping_d = shared_key_digest(&salt, &client, &nonce, &key);
        assert_eq!(ping_d.as_bytes(), st("ping_digest"), "vector {i}");
        let pong_d = shared_key_digest(&salt, &server, &nonce, &key);
        assert_eq!(pong_d.as_bytes(), st("pong_digest"), "vector {i}");
        let pw_d = if auth.is_empty() {
            String::new()
        } else {
            password_digest(&auth, &user, &pass)
        };
        assert_eq!(pw_d.as_bytes(), st("password_digest"), "vector {i}");

        let helo = Helo::decode(&hx(&h["helo_hex"])).unwrap();
        assert_eq!(helo.nonce, nonce, "vector {i}");
        assert_eq!(helo.auth, auth, "vector {i}");
        assert!(helo.keepalive, "vector {i}");

        let ping = Ping {
            hostname: client.clone(),
            shared_key_salt: salt.clone(),
            shared_key_digest: ping_d.into_bytes(),
            username: user.clone(),
            password_digest: pw_d.into_bytes(),
        };
        let mut out = Vec::new();
        ping.encode(&mut out);
        assert_eq!(out, hx(&h["ping_hex"]), "vector {i}");
        assert_eq!(Ping::decode(&out).unwrap(), ping, "vector {i}");

        let pong_hex = hx(&h["pong_hex"]);
        let pong = Pong::decode(&pong_hex).unwrap();
        assert!(pong.auth_ok, "vector {i}");
        assert_eq!(pong.hostname, server, "vector {i}");
        let expect = shared_key_digest(&salt, &pong.hostname, &nonce, &key);
        assert!(
            digest_eq(&pong.shared_key_digest, expect.as_bytes()),
            "vector {i}"
        );
        let mut out = Vec::new();
        pong.encode(&mut out);
        assert_eq!(out, pong_hex, "vector {i}");

        // A changed digest byte is refused.
        let mut bad = pong_hex.clone();
        let last = bad.len() - 1;
        bad[last] = if bad[last] == b'0' { b'1' } else { b'0' };
        let pong = Pong::decode(&bad).unwrap();
        assert!(
            !digest_eq(&pong.shared_key_digest, expect.as_bytes()),
            "vector {i}"
        );

        // The client state machine: the vector's HELO in, its PING out, its
        // PONG accepted, the changed one refused.
        let mut client = ClientHandshake::new(&key, &client, &user, &pass).with_salt(&salt);
        let ping = client.ping(&hx(&h["helo_hex"])).unwrap();
        assert_eq!(ping, hx(&h["ping_hex"]), "vector {i}");
        assert_eq!(client.check_pong(&pong_hex), Ok(()), "vector {i}");
        assert_eq!(
            client.check_pong(&bad),
            Err(HandshakeError::ServerDigest),
            "vector {i}"
        );
    }
}
