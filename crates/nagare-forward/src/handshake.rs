//! The forward protocol's authentication handshake (HELO → PING → PONG).
//!
//! Digests follow the spec exactly:
//! - shared key: `hex(sha512(shared_key_salt + hostname + nonce + shared_key))`,
//!   the client using its own hostname in PING, the server its own in PONG;
//! - password: `hex(sha512(auth_salt + username + password))`.
//!
//! Peers pack nonce and salts as str or bin and the nonce is random bytes even
//! when packed as str, so every field is read as raw bytes. Salts and digests
//! are always written as str: Fluent Bit refuses a salt packed as bin.

use rmpv::Value;
use sha2::{Digest, Sha512};

use crate::msgpack::{write_array_len, write_bool, write_map_len, write_str};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    #[error("handshake message is not valid msgpack")]
    Msgpack,
    #[error("expected {0}")]
    Unexpected(&'static str),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Helo {
    pub nonce: Vec<u8>,
    /// Salt for user authentication; empty when the server has no users.
    pub auth: Vec<u8>,
    pub keepalive: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ping {
    pub hostname: Vec<u8>,
    pub shared_key_salt: Vec<u8>,
    pub shared_key_digest: Vec<u8>,
    pub username: Vec<u8>,
    pub password_digest: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pong {
    pub auth_ok: bool,
    pub reason: Vec<u8>,
    pub hostname: Vec<u8>,
    pub shared_key_digest: Vec<u8>,
}

pub fn shared_key_digest(salt: &[u8], hostname: &[u8], nonce: &[u8], key: &[u8]) -> String {
    let mut h = Sha512::new();
    h.update(salt);
    h.update(hostname);
    h.update(nonce);
    h.update(key);
    hex::encode(h.finalize())
}

pub fn password_digest(auth_salt: &[u8], username: &[u8], password: &[u8]) -> String {
    let mut h = Sha512::new();
    h.update(auth_salt);
    h.update(username);
    h.update(password);
    hex::encode(h.finalize())
}

/// Compares two digests in constant time with respect to their content.
pub fn digest_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Helo {
    pub fn encode(&self, out: &mut Vec<u8>) {
        write_array_len(out, 2);
        write_str(out, b"HELO");
        write_map_len(out, 3);
        write_str(out, b"nonce");
        write_str(out, &self.nonce);
        write_str(out, b"auth");
        write_str(out, &self.auth);
        write_str(out, b"keepalive");
        write_bool(out, self.keepalive);
    }

    pub fn decode(buf: &[u8]) -> Result<Self, HandshakeError> {
        let items = message(buf, "HELO")?;
        let opts = items
            .get(1)
            .and_then(Value::as_map)
            .ok_or(HandshakeError::Unexpected("HELO options map"))?;
        let mut helo = Helo {
            nonce: Vec::new(),
            auth: Vec::new(),
            keepalive: true,
        };
        for (k, v) in opts {
            match raw(k).as_deref() {
                Some(b"nonce") => helo.nonce = raw(v).unwrap_or_default(),
                Some(b"auth") => helo.auth = raw(v).unwrap_or_default(),
                Some(b"keepalive") => helo.keepalive = v.as_bool().unwrap_or(true),
                _ => {}
            }
        }
        Ok(helo)
    }
}

impl Ping {
    pub fn encode(&self, out: &mut Vec<u8>) {
        write_array_len(out, 6);
        write_str(out, b"PING");
        write_str(out, &self.hostname);
        write_str(out, &self.shared_key_salt);
        write_str(out, &self.shared_key_digest);
        write_str(out, &self.username);
        write_str(out, &self.password_digest);
    }

    pub fn decode(buf: &[u8]) -> Result<Self, HandshakeError> {
        let items = message(buf, "PING")?;
        if items.len() < 4 {
            return Err(HandshakeError::Unexpected(
                "PING with hostname, salt and digest",
            ));
        }
        let field = |i: usize| items.get(i).and_then(raw).unwrap_or_default();
        Ok(Ping {
            hostname: field(1),
            shared_key_salt: field(2),
            shared_key_digest: field(3),
            username: field(4),
            password_digest: field(5),
        })
    }
}

impl Pong {
    pub fn encode(&self, out: &mut Vec<u8>) {
        write_array_len(out, 5);
        write_str(out, b"PONG");
        write_bool(out, self.auth_ok);
        write_str(out, &self.reason);
        write_str(out, &self.hostname);
        write_str(out, &self.shared_key_digest);
    }

    pub fn decode(buf: &[u8]) -> Result<Self, HandshakeError> {
        let items = message(buf, "PONG")?;
        let field = |i: usize| items.get(i).and_then(raw).unwrap_or_default();
        Ok(Pong {
            auth_ok: items.get(1).and_then(Value::as_bool).unwrap_or(false),
            reason: field(2),
            hostname: field(3),
            shared_key_digest: field(4),
        })
    }
}

/// Reads the ack id from `{"ack": id}`, as raw bytes.
pub fn decode_ack(buf: &[u8]) -> Result<Vec<u8>, HandshakeError> {
    let v = rmpv::decode::read_value(&mut &buf[..]).map_err(|_| HandshakeError::Msgpack)?;
    v.as_map()
        .and_then(|m| {
            m.iter()
                .find(|(k, _)| raw(k).as_deref() == Some(b"ack"))
                .and_then(|(_, v)| raw(v))
        })
        .ok_or(HandshakeError::Unexpected("an ack map"))
}

fn raw(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::String(s) => Some(s.as_bytes().to_vec()),
        Value::Binary(b) => Some(b.clone()),
        _ => None,
    }
}

fn message(buf: &[u8], kind: &'static str) -> Result<Vec<Value>, HandshakeError> {
    let v = rmpv::decode::read_value(&mut &buf[..]).map_err(|_| HandshakeError::Msgpack)?;
    let Value::Array(items) = v else {
        return Err(HandshakeError::Unexpected(kind));
    };
    if items.first().and_then(raw).as_deref() != Some(kind.as_bytes()) {
        return Err(HandshakeError::Unexpected(kind));
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_round_trip_keeps_raw_nonce_bytes() {
        let nonce = vec![0xff, 0x00, 0x80, b'a'];
        let d = shared_key_digest(b"salt", b"client", &nonce, b"secret");
        assert_eq!(d.len(), 128);
        let p = Ping {
            hostname: b"client".to_vec(),
            shared_key_salt: b"salt".to_vec(),
            shared_key_digest: d.into_bytes(),
            username: Vec::new(),
            password_digest: Vec::new(),
        };
        let mut out = Vec::new();
        p.encode(&mut out);
        assert_eq!(Ping::decode(&out).unwrap(), p);

        let h = Helo {
            nonce,
            auth: vec![],
            keepalive: true,
        };
        let mut out = Vec::new();
        h.encode(&mut out);
        assert_eq!(Helo::decode(&out).unwrap(), h);
    }

    #[test]
    fn known_digest() {
        // sha512("") is a fixed, well-known value.
        assert!(shared_key_digest(b"", b"", b"", b"").starts_with("cf83e1357eefb8bd"));
        assert!(digest_eq(b"abc", b"abc"));
        assert!(!digest_eq(b"abc", b"abd"));
    }
}
