//! The forward protocol's authentication handshake (HELO → PING → PONG).
//!
//! Both sides live here as plain state without I/O, so every caller (the
//! daemon's forward input and output, `nagare cat`, `nagare replay`, the SDK)
//! runs the same protocol code and only moves bytes:
//! - a server makes a [`ServerHandshake`] per connection from its
//!   [`ServerAuth`], sends [`ServerHandshake::helo`] and answers the PING it
//!   reads with [`ServerHandshake::answer`];
//! - a client feeds the HELO it reads to [`ClientHandshake::ping`], sends the
//!   PING it gets back, and checks the PONG with [`ClientHandshake::check_pong`].
//!
//! Digests follow the spec exactly:
//! - shared key: `hex(sha512(shared_key_salt + hostname + nonce + shared_key))`,
//!   the client using its own hostname in PING, the server its own in PONG;
//! - password: `hex(sha512(auth_salt + username + password))`.
//!
//! Wire types. Peers pack nonce and salts as str or bin, and the nonce is
//! random bytes even when packed as str, so every field is read as raw bytes:
//! - Fluentd's in_forward sends nonce and auth salt as bin (16 random bytes);
//!   Fluent Bit's sends both as str holding 16 random bytes, and no
//!   `keepalive`. nagare sends the nonce as str holding ASCII hex (a client
//!   that decodes str as UTF-8 text then hashes the bytes we sent), the auth
//!   salt as bin as Fluentd does (Node's fluent-logger answers with user
//!   credentials only to a bin salt), and `""` when there are no users, as
//!   the spec says.
//! - PING and PONG fields are str: Fluent Bit's server refuses a PING field
//!   packed as bin.

use rmpv::Value;
use sha2::{Digest, Sha512};

use crate::msgpack::{write_array_len, write_bin_header, write_bool, write_map_len, write_str};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    #[error("handshake message is not valid msgpack")]
    Msgpack,
    #[error("expected {0}")]
    Unexpected(&'static str),
    /// The server answered PONG false; its reason.
    #[error("the server refused the handshake: {0}")]
    Refused(String),
    /// The server accepted, but its digest shows it does not know our key.
    #[error("the server's PONG digest does not match the shared key")]
    ServerDigest,
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

/// 16 random bytes as 32 lowercase hex characters: nonces and salts.
fn random_hex() -> Vec<u8> {
    hex::encode(rand::random::<[u8; 16]>()).into_bytes()
}

impl Helo {
    /// `["HELO", {"nonce": str, "auth": bin (or "" without users), "keepalive": bool}]`
    /// (see the module comment for why these types).
    pub fn encode(&self, out: &mut Vec<u8>) {
        write_array_len(out, 2);
        write_str(out, b"HELO");
        write_map_len(out, 3);
        write_str(out, b"nonce");
        write_str(out, &self.nonce);
        write_str(out, b"auth");
        if self.auth.is_empty() {
            write_str(out, b"");
        } else {
            write_bin_header(out, self.auth.len());
            out.extend_from_slice(&self.auth);
        }
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

/// A user a server accepts in the handshake's user authentication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub username: Vec<u8>,
    pub password: Vec<u8>,
}

/// A server's handshake settings, made once per listener.
#[derive(Debug, Clone)]
pub struct ServerAuth {
    shared_key: Vec<u8>,
    hostname: Vec<u8>,
    users: Vec<User>,
}

impl ServerAuth {
    /// `hostname` is the one the server names in PONG; with `users`, a client
    /// must also give one of these usernames and its password.
    pub fn new(shared_key: &[u8], hostname: &[u8], users: Vec<User>) -> Self {
        ServerAuth {
            shared_key: shared_key.to_vec(),
            hostname: hostname.to_vec(),
            users,
        }
    }

    /// The handshake of one new connection, with a fresh nonce (and a fresh
    /// auth salt when users are required).
    pub fn start(&self) -> ServerHandshake<'_> {
        ServerHandshake {
            auth: self,
            nonce: random_hex(),
            auth_salt: if self.users.is_empty() {
                Vec::new()
            } else {
                random_hex()
            },
        }
    }
}

/// The server side of one connection's handshake.
#[derive(Debug)]
pub struct ServerHandshake<'a> {
    auth: &'a ServerAuth,
    nonce: Vec<u8>,
    auth_salt: Vec<u8>,
}

/// How a server answers a client's PING.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PingAnswer {
    /// The PONG to send, whether the client is accepted or not.
    pub pong: Vec<u8>,
    /// The hostname the client named in its PING (empty if it sent no PING).
    pub client_hostname: Vec<u8>,
    /// Why the client is refused (also the PONG's reason); `None` = accepted.
    /// A refused connection is closed once the PONG is sent.
    pub refused: Option<&'static str>,
}

impl ServerHandshake<'_> {
    /// The HELO that opens the handshake.
    pub fn helo(&self) -> Vec<u8> {
        let mut out = Vec::new();
        Helo {
            nonce: self.nonce.clone(),
            auth: self.auth_salt.clone(),
            keepalive: true,
        }
        .encode(&mut out);
        out
    }

    /// Checks the client's answer to the HELO (one whole msgpack message).
    pub fn answer(&self, msg: &[u8]) -> PingAnswer {
        let Ok(ping) = Ping::decode(msg) else {
            // Fluentd answers anything else with a refusal too.
            return self.refuse(Vec::new(), "invalid PING message");
        };
        let key = &self.auth.shared_key;
        let want = shared_key_digest(&ping.shared_key_salt, &ping.hostname, &self.nonce, key);
        if !digest_eq(want.as_bytes(), &ping.shared_key_digest) {
            return self.refuse(ping.hostname, "shared key mismatch");
        }
        if !self.auth.users.is_empty() && !self.user_matches(&ping) {
            return self.refuse(ping.hostname, "username/password mismatch");
        }
        let pong = Pong {
            auth_ok: true,
            reason: Vec::new(),
            hostname: self.auth.hostname.clone(),
            shared_key_digest: shared_key_digest(
                &ping.shared_key_salt,
                &self.auth.hostname,
                &self.nonce,
                key,
            )
            .into_bytes(),
        };
        PingAnswer {
            pong: encoded(|out| pong.encode(out)),
            client_hostname: ping.hostname,
            refused: None,
        }
    }

    fn user_matches(&self, ping: &Ping) -> bool {
        self.auth.users.iter().any(|u| {
            u.username == ping.username
                && digest_eq(
                    password_digest(&self.auth_salt, &u.username, &u.password).as_bytes(),
                    &ping.password_digest,
                )
        })
    }

    /// A refused client learns nothing about the key: no hostname and no
    /// digest, as Fluentd does.
    fn refuse(&self, client_hostname: Vec<u8>, reason: &'static str) -> PingAnswer {
        let pong = Pong {
            auth_ok: false,
            reason: reason.as_bytes().to_vec(),
            hostname: Vec::new(),
            shared_key_digest: Vec::new(),
        };
        PingAnswer {
            pong: encoded(|out| pong.encode(out)),
            client_hostname,
            refused: Some(reason),
        }
    }
}

/// The client side of one connection's handshake.
#[derive(Debug, Clone)]
pub struct ClientHandshake {
    shared_key: Vec<u8>,
    hostname: Vec<u8>,
    username: Vec<u8>,
    password: Vec<u8>,
    salt: Vec<u8>,
    /// The server's nonce, once its HELO was read.
    nonce: Vec<u8>,
}

impl ClientHandshake {
    /// `hostname` is the one named in PING; `username` and `password` are sent
    /// (as a digest) only when the server's HELO asks for user authentication.
    pub fn new(shared_key: &[u8], hostname: &[u8], username: &[u8], password: &[u8]) -> Self {
        ClientHandshake {
            shared_key: shared_key.to_vec(),
            hostname: hostname.to_vec(),
            username: username.to_vec(),
            password: password.to_vec(),
            salt: random_hex(),
            nonce: Vec::new(),
        }
    }

    /// Uses this shared-key salt instead of a random one (test vectors).
    pub fn with_salt(mut self, salt: &[u8]) -> Self {
        self.salt = salt.to_vec();
        self
    }

    /// Reads the server's HELO and returns the PING to send.
    pub fn ping(&mut self, helo: &[u8]) -> Result<Vec<u8>, HandshakeError> {
        let helo = Helo::decode(helo)?;
        let ping = self.ping_for(&helo);
        self.nonce = helo.nonce;
        Ok(encoded(|out| ping.encode(out)))
    }

    /// The PING answering `helo`.
    pub fn ping_for(&self, helo: &Helo) -> Ping {
        let shared_key_digest =
            shared_key_digest(&self.salt, &self.hostname, &helo.nonce, &self.shared_key);
        let password_digest = if helo.auth.is_empty() {
            Vec::new()
        } else {
            password_digest(&helo.auth, &self.username, &self.password).into_bytes()
        };
        Ping {
            hostname: self.hostname.clone(),
            shared_key_salt: self.salt.clone(),
            shared_key_digest: shared_key_digest.into_bytes(),
            username: self.username.clone(),
            password_digest,
        }
    }

    /// Checks the server's PONG: it accepted us, and its digest proves it
    /// knows the shared key.
    pub fn check_pong(&self, pong: &[u8]) -> Result<(), HandshakeError> {
        let pong = Pong::decode(pong)?;
        if !pong.auth_ok {
            return Err(HandshakeError::Refused(
                String::from_utf8_lossy(&pong.reason).into_owned(),
            ));
        }
        let want = shared_key_digest(&self.salt, &pong.hostname, &self.nonce, &self.shared_key);
        if !digest_eq(want.as_bytes(), &pong.shared_key_digest) {
            return Err(HandshakeError::ServerDigest);
        }
        Ok(())
    }
}

/// Reads the ack id from `{"ack": id}`, as raw bytes.
pub fn decode_ack(buf: &[u8]) -> Result<Vec<u8>, HandshakeError> {
    match decode_reply(buf)? {
        Reply::Ack(id) => Ok(id),
        _ => Err(HandshakeError::Unexpected("an ack map")),
    }
}

/// A message a server sends a client outside its handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `{"ack": id}`
    Ack(Vec<u8>),
    /// The server wants a handshake the client did not start.
    Helo(Helo),
    Pong(Pong),
    /// Valid msgpack, but none of the above.
    Other,
}

/// Tells what a server sent: an ack, a HELO, a PONG, or something else.
pub fn decode_reply(buf: &[u8]) -> Result<Reply, HandshakeError> {
    let v = rmpv::decode::read_value(&mut &buf[..]).map_err(|_| HandshakeError::Msgpack)?;
    if let Some(map) = v.as_map() {
        let ack = map.iter().find(|(k, _)| raw(k).as_deref() == Some(b"ack"));
        return Ok(ack
            .and_then(|(_, id)| raw(id))
            .map_or(Reply::Other, Reply::Ack));
    }
    let kind = v.as_array().and_then(|items| items.first()).and_then(raw);
    Ok(match kind.as_deref() {
        Some(b"HELO") => Helo::decode(buf).map_or(Reply::Other, Reply::Helo),
        Some(b"PONG") => Pong::decode(buf).map_or(Reply::Other, Reply::Pong),
        _ => Reply::Other,
    })
}

fn encoded(write: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut out = Vec::new();
    write(&mut out);
    out
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
    fn known_digest() {
        // sha512("") is a fixed, well-known value.
        assert!(shared_key_digest(b"", b"", b"", b"").starts_with("cf83e1357eefb8bd"));
        assert!(digest_eq(b"abc", b"abc"));
        assert!(!digest_eq(b"abc", b"abd"));
    }

    #[test]
    fn random_salts_are_ascii_hex_and_differ() {
        let (a, b) = (random_hex(), random_hex());
        assert_eq!(a.len(), 32);
        assert!(a.iter().all(u8::is_ascii_hexdigit));
        assert_ne!(a, b);
    }
}
