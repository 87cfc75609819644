//! The shared test vectors (sdk/vectors/vectors.json): the logger's encoder
//! produces exactly the vector bytes, and the vectors decode back.

use bytes::Bytes;
use nagare_forward::msgpack::{write_array_len, write_map_len, write_str};
use nagare_forward::{
    encode_message, encode_packed_forward, scan_frame, Compression, EventTime, Limits, Mode,
};
use serde_json::Value;

fn vectors() -> Value {
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/../vectors/vectors.json");
    serde_json::from_str(&std::fs::read_to_string(p).expect("vectors.json")).unwrap()
}

fn h(v: &Value) -> Vec<u8> {
    hex::decode(v.as_str().unwrap()).unwrap()
}

fn time_of(e: &Value) -> EventTime {
    EventTime::new(
        e["sec"].as_u64().unwrap() as u32,
        e["nsec"].as_u64().unwrap() as u32,
    )
}

#[test]
fn event_times() {
    let v = vectors();
    let list = v["event_time"].as_array().unwrap();
    assert!(!list.is_empty());
    for t in list {
        assert_eq!(time_of(t).to_bytes().to_vec(), h(&t["hex"]), "{t}");
        let mut out = Vec::new();
        let empty = serde_json::Map::new();
        nagare_logger::encode_entry(&mut out, time_of(t), &empty).unwrap();
        assert_eq!(&out[1..11], &h(&t["hex"])[..]);
    }
}

#[test]
fn frames_encode_exactly_and_decode_back() {
    let v = vectors();
    let frames = v["frames"].as_array().unwrap();
    assert!(frames.len() >= 30);
    let lim = Limits::default();
    for f in frames {
        let name = f["name"].as_str().unwrap();
        let tag = f["tag"].as_str().unwrap();
        let mode = f["mode"].as_str().unwrap();
        let chunk = f["options"].get("chunk").map(|c| c.as_str().unwrap());
        let list = f["entries"].as_array().unwrap();
        // Records encode as the logger's emit encodes them.
        let mut entries = Vec::new();
        for e in list {
            nagare_logger::encode_entry(&mut entries, time_of(e), &e["record"]).unwrap();
        }
        assert_eq!(entries, h(&f["entries_hex"]), "{name}: entries");
        let n = list.len() as u32;
        let want = h(&f["hex"]);
        let mine = match mode {
            "packed" => nagare_logger::encode_packed_frame(tag, &entries, n, chunk),
            "compressed" => {
                let mut o = Vec::new();
                encode_packed_forward(
                    &mut o,
                    tag,
                    &entries,
                    n,
                    chunk.map(str::as_bytes),
                    Compression::Gzip,
                )
                .unwrap();
                o
            }
            "forward" => {
                // The vectors' Forward frames carry no "size" (nagare-forward's
                // encode_forward adds one), so they are built here.
                let mut o = Vec::new();
                write_array_len(&mut o, if chunk.is_some() { 3 } else { 2 });
                write_str(&mut o, tag.as_bytes());
                write_array_len(&mut o, list.len());
                o.extend_from_slice(&entries);
                if let Some(c) = chunk {
                    write_map_len(&mut o, 1);
                    write_str(&mut o, b"chunk");
                    write_str(&mut o, c.as_bytes());
                }
                o
            }
            "message" => {
                let mut rec = Vec::new();
                nagare_logger::encode_entry(&mut rec, time_of(&list[0]), &list[0]["record"])
                    .unwrap();
                let mut o = Vec::new();
                encode_message(
                    &mut o,
                    tag,
                    time_of(&list[0]),
                    &rec[11..],
                    chunk.map(str::as_bytes),
                );
                o
            }
            m => panic!("{name}: unknown mode {m}"),
        };
        if mode != "compressed" {
            assert_eq!(
                hex::encode(&mine),
                hex::encode(&want),
                "{name}: frame bytes"
            );
        }
        // Decode the vector's frame (gunzip for compressed) and ours.
        for (which, bytes) in [("vector", &want), ("ours", &mine)] {
            let s = scan_frame(bytes, &lim).unwrap().expect("complete frame");
            assert_eq!(s.len, bytes.len(), "{name} {which}");
            let fr = s
                .into_frame(Bytes::copy_from_slice(bytes), &lim, EventTime::now())
                .unwrap();
            assert_eq!(fr.tag, tag, "{name} {which}");
            assert_eq!(
                hex::encode(&fr.entries),
                f["entries_hex"].as_str().unwrap(),
                "{name} {which}"
            );
            assert_eq!(fr.count, n);
            let got_chunk = fr.chunk.map(|c| {
                rmpv::decode::read_value(&mut &c[..])
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_string()
            });
            assert_eq!(got_chunk.as_deref(), chunk, "{name} {which}");
            if which == "vector" {
                let want_mode = match mode {
                    "message" => Mode::Message,
                    "forward" => Mode::Forward,
                    "packed" => Mode::PackedForward,
                    _ => Mode::CompressedPackedForward,
                };
                assert_eq!(fr.mode, want_mode, "{name}");
            }
            // The records decode to the vector's JSON.
            let mut rd = &fr.entries[..];
            for e in list {
                let val = rmpv::decode::read_value(&mut rd).unwrap();
                let rec = &val.as_array().unwrap()[1];
                assert_eq!(to_json(rec), e["record"], "{name} {which}");
            }
        }
    }
}

fn to_json(v: &rmpv::Value) -> Value {
    use rmpv::Value as M;
    match v {
        M::Nil => Value::Null,
        M::Boolean(b) => Value::Bool(*b),
        M::Integer(i) => i
            .as_u64()
            .map(Value::from)
            .unwrap_or_else(|| Value::from(i.as_i64().unwrap())),
        M::F64(f) => Value::from(*f),
        M::F32(f) => Value::from(*f as f64),
        M::String(s) => Value::from(s.as_str().unwrap()),
        M::Array(a) => Value::Array(a.iter().map(to_json).collect()),
        M::Map(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.as_str().unwrap().to_string(), to_json(v)))
                .collect(),
        ),
        other => panic!("unexpected value {other:?}"),
    }
}
