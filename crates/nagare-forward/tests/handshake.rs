//! HELO / PING / PONG encoding, decoding and digests.

mod common;

use common::*;
use nagare_forward::handshake::{
    decode_ack, digest_eq, password_digest, shared_key_digest, HandshakeError, Helo, Ping, Pong,
};

/// sha512("abc"), FIPS 180-2 appendix C.
const SHA512_ABC: &str = "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a\
                          2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f";

#[test]
fn digests_are_sha512_hex_of_the_concatenation() {
    // salt + hostname + nonce + key, whatever the split.
    assert_eq!(shared_key_digest(b"a", b"b", b"c", b""), SHA512_ABC);
    assert_eq!(shared_key_digest(b"", b"ab", b"", b"c"), SHA512_ABC);
    assert_eq!(shared_key_digest(b"abc", b"", b"", b""), SHA512_ABC);
    // auth_salt + username + password
    assert_eq!(password_digest(b"a", b"b", b"c"), SHA512_ABC);
    assert_eq!(password_digest(b"", b"", b"abc"), SHA512_ABC);
    // Order matters.
    assert_ne!(shared_key_digest(b"c", b"b", b"a", b""), SHA512_ABC);
    // Lowercase hex, 128 characters.
    let d = shared_key_digest(b"salt", b"host", &[0xff, 0x00], b"key");
    assert_eq!(d.len(), 128);
    assert!(d
        .bytes()
        .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
}

#[test]
fn digest_eq_compares_whole_values() {
    assert!(digest_eq(b"", b""));
    assert!(digest_eq(SHA512_ABC.as_bytes(), SHA512_ABC.as_bytes()));
    assert!(!digest_eq(b"abc", b"ab"));
    assert!(!digest_eq(b"abc", b"abd"));
    assert!(!digest_eq(b"xbc", b"abc"));
}

#[test]
fn helo_round_trip_with_non_utf8_nonce() {
    for h in [
        Helo {
            nonce: vec![0xff, 0xfe, 0x00, 0x80, 0xc3, 0x28],
            auth: vec![],
            keepalive: true,
        },
        Helo {
            nonce: b"plain".to_vec(),
            auth: vec![0x00, 0xff, 0x10],
            keepalive: false,
        },
    ] {
        let mut out = Vec::new();
        h.encode(&mut out);
        // ["HELO", {"nonce": str, "auth": str, "keepalive": bool}]
        let want = cat(&[
            &arr(2),
            &s(b"HELO"),
            &map(3),
            &s(b"nonce"),
            &s(&h.nonce),
            &s(b"auth"),
            &s(&h.auth),
            &s(b"keepalive"),
            &[if h.keepalive { 0xc3 } else { 0xc2 }],
        ]);
        assert_eq!(out, want);
        assert_eq!(Helo::decode(&out).unwrap(), h);
    }
}

#[test]
fn helo_with_bin_fields_as_fluentd_sends() {
    let nonce = [0x8f, 0x00, 0xff, 0x41];
    let msg = cat(&[
        &arr(2),
        &s(b"HELO"),
        &map(3),
        &s(b"nonce"),
        &bin(&nonce),
        &s(b"auth"),
        &bin(b""),
        &s(b"keepalive"),
        &[0xc2],
    ]);
    let h = Helo::decode(&msg).unwrap();
    assert_eq!(h.nonce, nonce);
    assert!(h.auth.is_empty());
    assert!(!h.keepalive);

    // keepalive absent means true.
    let msg = cat(&[&arr(2), &bin(b"HELO"), &map(1), &s(b"nonce"), &bin(&nonce)]);
    let h = Helo::decode(&msg).unwrap();
    assert_eq!(h.nonce, nonce);
    assert!(h.keepalive);
}

#[test]
fn ping_encodes_every_field_as_str() {
    let nonce = [0xff, 0x00, 0x41];
    let digest = shared_key_digest(b"salt", b"client", &nonce, b"key");
    let pw = password_digest(b"asalt", b"alice", b"pw");
    let p = Ping {
        hostname: b"client".to_vec(),
        shared_key_salt: b"salt".to_vec(),
        shared_key_digest: digest.clone().into_bytes(),
        username: b"alice".to_vec(),
        password_digest: pw.clone().into_bytes(),
    };
    let mut out = Vec::new();
    p.encode(&mut out);
    let want = cat(&[
        &arr(6),
        &s(b"PING"),
        &s(b"client"),
        &s(b"salt"),
        &s(digest.as_bytes()),
        &s(b"alice"),
        &s(pw.as_bytes()),
    ]);
    assert_eq!(out, want);
    assert_eq!(Ping::decode(&out).unwrap(), p);

    // Fields packed as bin decode the same.
    let b = cat(&[
        &arr(6),
        &s(b"PING"),
        &bin(b"client"),
        &bin(b"salt"),
        &bin(digest.as_bytes()),
        &bin(b"alice"),
        &bin(pw.as_bytes()),
    ]);
    assert_eq!(Ping::decode(&b).unwrap(), p);

    // Without user fields (4 elements) they are empty.
    let short = cat(&[
        &arr(4),
        &s(b"PING"),
        &s(b"client"),
        &s(b"salt"),
        &s(digest.as_bytes()),
    ]);
    let d = Ping::decode(&short).unwrap();
    assert!(d.username.is_empty() && d.password_digest.is_empty());
    assert_eq!(d.shared_key_digest, digest.as_bytes());
}

#[test]
fn pong_round_trip_and_bin_fields() {
    let p = Pong {
        auth_ok: true,
        reason: Vec::new(),
        hostname: "serveur-é".as_bytes().to_vec(),
        shared_key_digest: shared_key_digest(b"s", "serveur-é".as_bytes(), &[0x80], b"k")
            .into_bytes(),
    };
    let mut out = Vec::new();
    p.encode(&mut out);
    let want = cat(&[
        &arr(5),
        &s(b"PONG"),
        &[0xc3],
        &s(b""),
        &s(&p.hostname),
        &s(&p.shared_key_digest),
    ]);
    assert_eq!(out, want);
    assert_eq!(Pong::decode(&out).unwrap(), p);

    let refused = cat(&[
        &arr(5),
        &s(b"PONG"),
        &[0xc2],
        &bin(b"shared key mismatch"),
        &bin(b"srv"),
        &bin(b""),
    ]);
    let d = Pong::decode(&refused).unwrap();
    assert!(!d.auth_ok);
    assert_eq!(d.reason, b"shared key mismatch");
    assert_eq!(d.hostname, b"srv");
}

#[test]
fn wrong_or_broken_messages_are_errors() {
    let helo = cat(&[&arr(2), &s(b"HELO"), &map(0)]);
    assert_eq!(Ping::decode(&helo), Err(HandshakeError::Unexpected("PING")));
    assert_eq!(Pong::decode(&helo), Err(HandshakeError::Unexpected("PONG")));
    assert!(Helo::decode(&helo).is_ok());
    // HELO without an option map
    assert!(Helo::decode(&cat(&[&arr(1), &s(b"HELO")])).is_err());
    // PING with too few fields
    assert!(Ping::decode(&cat(&[&arr(2), &s(b"PING"), &s(b"h")])).is_err());
    // Not an array, empty, truncated, garbage.
    assert!(Helo::decode(&s(b"HELO")).is_err());
    assert_eq!(Helo::decode(&[]), Err(HandshakeError::Msgpack));
    assert_eq!(Pong::decode(&helo[..3]), Err(HandshakeError::Msgpack));
    assert!(Ping::decode(&[0xc1]).is_err());
}

#[test]
fn ack_decoding() {
    for id in [s(b"abc\n"), bin(&[0xff, 0x00])] {
        let ack = cat(&[&map(1), &s(b"ack"), &id]);
        let got = decode_ack(&ack).unwrap();
        assert_eq!(&got[..], &id[id.len() - got.len()..]);
    }
    assert!(decode_ack(&cat(&[&map(1), &s(b"nack"), &s(b"x")])).is_err());
    assert!(decode_ack(&[0x92]).is_err());
}
