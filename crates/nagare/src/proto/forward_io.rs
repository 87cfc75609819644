//! The forward protocol's control messages on a tokio stream, shared by
//! everything in nagare that speaks forward (the forward input and output,
//! `nagare cat`, `nagare replay`): reading whole msgpack messages, running
//! either side of the handshake, waiting for acks, and telling why a server
//! did not take what was sent. The protocol itself (message formats, digests,
//! what to accept) is `nagare_forward::handshake`; this module only moves its
//! bytes and says what went wrong in the user's terms.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use nagare_forward::handshake::{
    decode_reply, ClientHandshake, HandshakeError, Reply, ServerHandshake,
};
use nagare_forward::msgpack::skip_value;
use nagare_forward::ScanError;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::{timeout, timeout_at, Instant};

/// Largest handshake message or ack accepted.
pub const MAX_MESSAGE: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("the connection was closed")]
    Closed,
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("not msgpack: {0}")]
    Invalid(&'static str),
    #[error("a message larger than {MAX_MESSAGE} bytes")]
    TooLarge,
}

/// Reads one whole msgpack message; bytes after it stay in `buf` (the input
/// reads frames from the same buffer after the handshake).
pub async fn read_message<S: AsyncRead + Unpin>(
    s: &mut S,
    buf: &mut BytesMut,
) -> Result<Bytes, ReadError> {
    loop {
        match skip_value(buf, 0) {
            Ok(end) => return Ok(buf.split_to(end).freeze()),
            Err(ScanError::Invalid(m)) => return Err(ReadError::Invalid(m)),
            Err(ScanError::Incomplete(_)) => {}
        }
        if buf.len() > MAX_MESSAGE {
            return Err(ReadError::TooLarge);
        }
        buf.reserve(4096);
        if s.read_buf(buf).await? == 0 {
            return Err(ReadError::Closed);
        }
    }
}

/// The server side: HELO out, PING in (within `wait`), PONG out. The error
/// is a reason for the log line; a refused client has been sent its PONG.
pub async fn serve_handshake<S>(
    s: &mut S,
    buf: &mut BytesMut,
    hs: &ServerHandshake<'_>,
    wait: Duration,
) -> Result<(), String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    s.write_all(&hs.helo())
        .await
        .map_err(|e| format!("writing HELO: {e}"))?;
    let ping = timeout(wait, read_message(s, buf))
        .await
        .map_err(|_| format!("no PING within {} after HELO", secs(wait)))?
        .map_err(|e| format!("handshake: {e}"))?;
    let answer = hs.answer(&ping);
    s.write_all(&answer.pong)
        .await
        .map_err(|e| format!("writing PONG: {e}"))?;
    match answer.refused {
        None => Ok(()),
        Some(reason) => Err(format!(
            "handshake failed: {reason} (client hostname {:?})",
            String::from_utf8_lossy(&answer.client_hostname)
        )),
    }
}

/// Why a client's events were not taken, as the user should read it.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// We have a shared key; the server never started the handshake.
    #[error("the server sent no HELO within {}: it may not require a shared key", secs(*.0))]
    NoHelo(Duration),
    /// The server sent a HELO where we expected an ack or nothing.
    #[error("the server requires a shared-key handshake")]
    HandshakeRequired,
    /// Refused (PONG false, with the server's reason), or a bad PONG.
    #[error("{0}")]
    Handshake(#[from] HandshakeError),
    #[error("the server closed the connection during the handshake")]
    ClosedInHandshake,
    #[error("no PONG from the server within {}", secs(*.0))]
    NoPong(Duration),
    #[error("the server closed the connection without acknowledging chunk {0}")]
    ClosedBeforeAck(String),
    #[error("no ack for chunk {id} within {}", secs(*wait))]
    NoAck { id: String, wait: Duration },
    #[error("the server acknowledged chunk {got} instead of {want}")]
    WrongAck { got: String, want: String },
    #[error("the server answered chunk {0} with something that is not an ack")]
    NotAnAck(String),
    #[error("{0}")]
    Io(String),
}

impl ClientError {
    /// The message, with how to fix a missing shared key in the caller's
    /// terms (`--shared-key`, `shared_key`).
    pub fn explain(&self, key_option: &str) -> String {
        match self {
            ClientError::HandshakeRequired => format!("{self}; pass {key_option}"),
            e => e.to_string(),
        }
    }
}

/// The client side: HELO in, PING out, PONG in and checked. Each read waits
/// at most `wait`.
pub async fn client_handshake<S>(
    s: &mut S,
    buf: &mut BytesMut,
    mut hs: ClientHandshake,
    wait: Duration,
) -> Result<(), ClientError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let helo = timeout(wait, read_message(s, buf))
        .await
        .map_err(|_| ClientError::NoHelo(wait))?
        .map_err(in_handshake)?;
    let ping = hs.ping(&helo)?;
    s.write_all(&ping)
        .await
        .map_err(|e| ClientError::Io(format!("sending PING: {e}")))?;
    let pong = timeout(wait, read_message(s, buf))
        .await
        .map_err(|_| ClientError::NoPong(wait))?
        .map_err(in_handshake)?;
    Ok(hs.check_pong(&pong)?)
}

fn in_handshake(e: ReadError) -> ClientError {
    match e {
        ReadError::Closed => ClientError::ClosedInHandshake,
        e => ClientError::Io(format!("handshake: {e}")),
    }
}

/// Waits for the ack of chunk `id` (at most `wait`).
pub async fn wait_ack<S: AsyncRead + Unpin>(
    s: &mut S,
    buf: &mut BytesMut,
    id: &[u8],
    wait: Duration,
) -> Result<(), ClientError> {
    let name = || String::from_utf8_lossy(id).into_owned();
    let msg = match timeout(wait, read_message(s, buf)).await {
        Err(_) => return Err(ClientError::NoAck { id: name(), wait }),
        Ok(Err(ReadError::Closed)) => return Err(ClientError::ClosedBeforeAck(name())),
        Ok(Err(e)) => {
            return Err(ClientError::Io(format!(
                "reading the ack for chunk {}: {e}",
                name()
            )))
        }
        Ok(Ok(msg)) => msg,
    };
    match decode_reply(&msg) {
        Ok(Reply::Ack(got)) if got == id => Ok(()),
        Ok(Reply::Ack(got)) => Err(ClientError::WrongAck {
            got: String::from_utf8_lossy(&got).into_owned(),
            want: name(),
        }),
        Ok(other) => Err(objection(other).unwrap_or_else(|| ClientError::NotAnAck(name()))),
        Err(_) => Err(ClientError::NotAnAck(name())),
    }
}

/// A server's message that says it is not taking our events.
fn objection(reply: Reply) -> Option<ClientError> {
    match reply {
        Reply::Helo(_) => Some(ClientError::HandshakeRequired),
        Reply::Pong(p) if !p.auth_ok => Some(ClientError::Handshake(HandshakeError::Refused(
            String::from_utf8_lossy(&p.reason).into_owned(),
        ))),
        _ => None,
    }
}

/// Ends a session without acks: closes our side, then reads until the server
/// closes its side (at most `wait`). A server that wanted a handshake has
/// sent its HELO by then, and that is the error; a server that keeps the
/// connection open and says nothing has raised no objection.
pub async fn finish<S>(s: &mut S, buf: &mut BytesMut, wait: Duration) -> Result<(), ClientError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    s.shutdown()
        .await
        .map_err(|e| ClientError::Io(format!("closing the connection: {e}")))?;
    let deadline = Instant::now() + wait;
    loop {
        match timeout_at(deadline, read_message(s, buf)).await {
            Err(_) | Ok(Err(ReadError::Closed)) => return Ok(()),
            Ok(Err(e)) => {
                return Err(ClientError::Io(format!(
                    "the connection broke before the server confirmed it closed: {e}"
                )))
            }
            Ok(Ok(msg)) => {
                if let Some(e) = decode_reply(&msg).ok().and_then(objection) {
                    return Err(e);
                }
            }
        }
    }
}

/// Why sending failed: what the server said before it closed the connection
/// (a HELO the sender did not expect, a refusal), else the write error.
pub async fn send_failed<S: AsyncRead + Unpin>(
    s: &mut S,
    buf: &mut BytesMut,
    write_error: std::io::Error,
) -> ClientError {
    // The server's last words are already buffered: a short wait is enough.
    let wait = Duration::from_secs(1);
    while let Ok(Ok(msg)) = timeout(wait, read_message(s, buf)).await {
        if let Some(e) = decode_reply(&msg).ok().and_then(objection) {
            return e;
        }
    }
    ClientError::Io(format!("sending: {write_error}"))
}

/// "30s", "1.5s", "250ms".
fn secs(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}
