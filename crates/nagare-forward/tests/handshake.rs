//! HELO / PING / PONG encoding, decoding and digests.

mod common;

use common::*;
use nagare_forward::handshake::{
    decode_ack, decode_reply, digest_eq, password_digest, shared_key_digest, ClientHandshake,
    HandshakeError, Helo, Ping, Pong, Reply, ServerAuth, User,
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
        // ["HELO", {"nonce": str, "auth": bin, or "" without users, "keepalive": bool}]
        let auth = if h.auth.is_empty() {
            s(b"")
        } else {
            bin(&h.auth)
        };
        let want = cat(&[
            &arr(2),
            &s(b"HELO"),
            &map(3),
            &s(b"nonce"),
            &s(&h.nonce),
            &s(b"auth"),
            &auth,
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

// ---------------------------------------------------------------------------
// Byte vectors as Fluentd and Fluent Bit write them, and both sides of the
// handshake run against them.
//
// Fluentd (lib/fluent/plugin/in_forward.rb, out_forward/handshake_protocol.rb):
// the server's nonce and auth salt are `SecureRandom.random_bytes(16)`, binary
// strings that msgpack-ruby packs as bin; the client's salt is
// `SecureRandom.hex(16)` (32 ASCII characters, str); a refused PONG is
// `['PONG', false, reason, '', '']`. Fluent Bit (plugins/in_forward/fw_prot.c,
// plugins/out_forward/forward.c): the server packs 16 random bytes as str for
// nonce and auth and sends no keepalive; the client's salt is 16 random bytes
// packed as str.

const NONCE: [u8; 16] = [
    0x8f, 0x00, 0xff, 0x41, 0xc3, 0x28, 0x80, 0x7f, 0x01, 0xfe, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60,
];
const AUTH_SALT: [u8; 16] = [
    0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6, 0x07, 0x18, 0x29, 0x3a, 0x4b, 0x5c, 0x6d, 0x7e, 0x8f, 0x90,
];

fn fluentd_helo() -> Vec<u8> {
    cat(&[
        &arr(2),
        &s(b"HELO"),
        &map(3),
        &s(b"nonce"),
        &bin(&NONCE),
        &s(b"auth"),
        &bin(&AUTH_SALT),
        &s(b"keepalive"),
        &[0xc3],
    ])
}

fn fluent_bit_helo() -> Vec<u8> {
    cat(&[
        &arr(2),
        &s(b"HELO"),
        &map(2),
        &s(b"nonce"),
        &s(&NONCE),
        &s(b"auth"),
        &s(&AUTH_SALT),
    ])
}

#[test]
fn fluentd_and_fluent_bit_helo_bytes_decode() {
    let f = fluentd_helo();
    // The exact leading bytes: fixarray(2), fixstr "HELO", fixmap(3),
    // "nonce", bin8 of 16.
    assert_eq!(&f[..13], b"\x92\xa4HELO\x83\xa5nonce");
    assert_eq!(&f[13..15], &[0xc4, 0x10]);
    for (name, bytes) in [("fluentd", f), ("fluent bit", fluent_bit_helo())] {
        let h = Helo::decode(&bytes).unwrap();
        assert_eq!(h.nonce, NONCE, "{name}");
        assert_eq!(h.auth, AUTH_SALT, "{name}");
        assert!(h.keepalive, "{name}");
    }
}

#[test]
fn client_answers_fluentd_and_fluent_bit_helo() {
    let salt = b"0123456789abcdef0123456789abcdef";
    for (name, helo) in [
        ("fluentd", fluentd_helo()),
        ("fluent bit", fluent_bit_helo()),
    ] {
        let mut c = ClientHandshake::new(b"k3y", b"app-01", b"alice", b"pw").with_salt(salt);
        let ping = c.ping(&helo).unwrap();
        // Every PING field is str: Fluent Bit's server refuses bin.
        let key_digest = shared_key_digest(salt, b"app-01", &NONCE, b"k3y");
        let pw_digest = password_digest(&AUTH_SALT, b"alice", b"pw");
        let want = cat(&[
            &arr(6),
            &s(b"PING"),
            &s(b"app-01"),
            &s(salt),
            &s(key_digest.as_bytes()),
            &s(b"alice"),
            &s(pw_digest.as_bytes()),
        ]);
        assert_eq!(ping, want, "{name}");
        // The digest starts with str8 of 128 characters, as Fluentd's is.
        assert_eq!(&ping[47..49], &[0xd9, 0x80], "{name}");

        // The server's PONG as Fluentd and Fluent Bit write it.
        let server_digest = shared_key_digest(salt, b"collector", &NONCE, b"k3y");
        let pong = cat(&[
            &arr(5),
            &s(b"PONG"),
            &[0xc3],
            &s(b""),
            &s(b"collector"),
            &s(server_digest.as_bytes()),
        ]);
        assert_eq!(c.check_pong(&pong), Ok(()), "{name}");
    }
}

#[test]
fn client_reports_a_refusal_and_a_server_without_the_key() {
    let mut c = ClientHandshake::new(b"k3y", b"app-01", b"", b"");
    c.ping(&fluentd_helo()).unwrap();
    let refused = cat(&[
        &arr(5),
        &s(b"PONG"),
        &[0xc2],
        &s(b"shared_key mismatch"),
        &s(b""),
        &s(b""),
    ]);
    let e = c.check_pong(&refused).unwrap_err();
    assert_eq!(e, HandshakeError::Refused("shared_key mismatch".into()));
    assert_eq!(
        e.to_string(),
        "the server refused the handshake: shared_key mismatch"
    );
    // Accepted, but with a digest made from another key.
    let other = shared_key_digest(b"whatever", b"collector", &NONCE, b"other key");
    let impostor = cat(&[
        &arr(5),
        &s(b"PONG"),
        &[0xc3],
        &s(b""),
        &s(b"collector"),
        &s(other.as_bytes()),
    ]);
    assert_eq!(c.check_pong(&impostor), Err(HandshakeError::ServerDigest));
    // Not a PONG at all.
    assert_eq!(
        c.check_pong(&fluentd_helo()),
        Err(HandshakeError::Unexpected("PONG"))
    );
}

#[test]
fn client_sends_no_user_digest_without_an_auth_salt() {
    let helo = cat(&[
        &arr(2),
        &s(b"HELO"),
        &map(3),
        &s(b"nonce"),
        &bin(&NONCE),
        &s(b"auth"),
        &s(b""),
        &s(b"keepalive"),
        &[0xc3],
    ]);
    let mut c = ClientHandshake::new(b"k", b"h", b"alice", b"pw");
    let ping = Ping::decode(&c.ping(&helo).unwrap()).unwrap();
    assert_eq!(ping.username, b"alice");
    assert!(ping.password_digest.is_empty());
    // The random salt is ASCII hex, as Fluentd's client makes it.
    assert_eq!(ping.shared_key_salt.len(), 32);
    assert!(ping.shared_key_salt.iter().all(u8::is_ascii_hexdigit));
}

/// Runs the server side on its own HELO and a PING made by hand.
fn server_answer(
    auth: &ServerAuth,
    ping: impl Fn(&Helo) -> Vec<u8>,
) -> (Helo, Pong, Option<&'static str>) {
    let hs = auth.start();
    let helo_bytes = hs.helo();
    let helo = Helo::decode(&helo_bytes).unwrap();
    let answer = hs.answer(&ping(&helo));
    let pong = Pong::decode(&answer.pong).unwrap();
    (helo, pong, answer.refused)
}

#[test]
fn server_helo_bytes() {
    let no_users = ServerAuth::new(b"k", b"srv", vec![]);
    let hs = no_users.start();
    let helo = hs.helo();
    // ["HELO", {"nonce": str of 32 hex characters, "auth": "", "keepalive": true}]
    assert_eq!(&helo[..13], b"\x92\xa4HELO\x83\xa5nonce");
    assert_eq!(helo[13..15], [0xd9, 32]);
    let nonce = &helo[15..47];
    assert!(nonce.iter().all(u8::is_ascii_hexdigit));
    assert_eq!(&helo[47..], b"\xa4auth\xa0\xa9keepalive\xc3");
    // A fresh nonce per connection.
    assert_ne!(Helo::decode(&no_users.start().helo()).unwrap().nonce, nonce);

    let users = ServerAuth::new(b"k", b"srv", vec![user("alice", "pw")]);
    let helo = users.start().helo();
    // The auth salt is bin, as Fluentd sends it.
    assert_eq!(&helo[47..54], b"\xa4auth\xc4\x20");
    assert!(helo[54..86].iter().all(u8::is_ascii_hexdigit));
    assert_eq!(&helo[86..], b"\xa9keepalive\xc3");
}

fn user(name: &str, pass: &str) -> User {
    User {
        username: name.as_bytes().to_vec(),
        password: pass.as_bytes().to_vec(),
    }
}

#[test]
fn server_accepts_fluentd_and_fluent_bit_pings() {
    let auth = ServerAuth::new(b"k3y", b"collector", vec![]);
    // Fluentd's salt: 32 hex characters; Fluent Bit's: 16 raw bytes as str.
    let salts: [&[u8]; 2] = [b"0123456789abcdef0123456789abcdef", &AUTH_SALT];
    for salt in salts {
        let (helo, pong, refused) = server_answer(&auth, |helo| {
            let d = shared_key_digest(salt, b"app-01", &helo.nonce, b"k3y");
            cat(&[
                &arr(6),
                &s(b"PING"),
                &s(b"app-01"),
                &s(salt),
                &s(d.as_bytes()),
                &s(b""),
                &s(b""),
            ])
        });
        assert_eq!(refused, None);
        assert!(pong.auth_ok);
        assert_eq!(pong.hostname, b"collector");
        let want = shared_key_digest(salt, b"collector", &helo.nonce, b"k3y");
        assert_eq!(pong.shared_key_digest, want.into_bytes());
    }
}

#[test]
fn server_refuses_wrong_keys_users_and_garbage() {
    let auth = ServerAuth::new(
        b"k3y",
        b"collector",
        vec![user("alice", "pw"), user("bob", "b")],
    );
    let ping = |key: &'static [u8], name: &'static [u8], pass: &'static [u8]| {
        move |helo: &Helo| {
            let mut c = ClientHandshake::new(key, b"app", name, pass);
            c.ping(&{
                let mut out = Vec::new();
                helo.encode(&mut out);
                out
            })
            .unwrap()
        }
    };
    let (_, pong, refused) = server_answer(&auth, ping(b"k3y", b"bob", b"b"));
    assert_eq!(refused, None);
    assert!(pong.auth_ok);

    for (p, reason) in [
        (ping(b"wrong", b"bob", b"b"), "shared key mismatch"),
        (ping(b"k3y", b"bob", b"pw"), "username/password mismatch"),
        (ping(b"k3y", b"mallory", b"b"), "username/password mismatch"),
        (ping(b"k3y", b"", b""), "username/password mismatch"),
    ] {
        let (_, pong, refused) = server_answer(&auth, p);
        assert_eq!(refused, Some(reason));
        // ['PONG', false, reason, '', '']: a refused client learns no digest.
        assert!(!pong.auth_ok);
        assert_eq!(pong.reason, reason.as_bytes());
        assert!(pong.hostname.is_empty() && pong.shared_key_digest.is_empty());
    }

    // A forward frame where the PING should be (a client without the key).
    let hs = auth.start();
    let frame = cat(&[&arr(3), &s(b"app.log"), &bin(b""), &map(0)]);
    let a = hs.answer(&frame);
    assert_eq!(a.refused, Some("invalid PING message"));
    assert!(a.client_hostname.is_empty());
    assert!(!Pong::decode(&a.pong).unwrap().auth_ok);
}

#[test]
fn replies_a_client_reads() {
    assert_eq!(
        decode_reply(&cat(&[&map(1), &s(b"ack"), &bin(&[0xff, 0x01])])),
        Ok(Reply::Ack(vec![0xff, 0x01]))
    );
    assert!(matches!(
        decode_reply(&fluentd_helo()),
        Ok(Reply::Helo(h)) if h.nonce == NONCE
    ));
    assert!(matches!(
        decode_reply(&cat(&[&arr(5), &s(b"PONG"), &[0xc2], &s(b"no"), &s(b""), &s(b"")])),
        Ok(Reply::Pong(p)) if !p.auth_ok && p.reason == b"no"
    ));
    assert_eq!(
        decode_reply(&cat(&[&map(1), &s(b"nack"), &s(b"x")])),
        Ok(Reply::Other)
    );
    assert_eq!(decode_reply(&s(b"hello")), Ok(Reply::Other));
    assert_eq!(decode_reply(&[0x92]), Err(HandshakeError::Msgpack));
}
