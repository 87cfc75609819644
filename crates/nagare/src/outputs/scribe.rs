//! `scribe`: sends chunks to a Scribe server as `Log` calls (Thrift framed
//! transport, binary protocol), as Fluentd's out_scribe: the category is
//! the tag (less `remove_prefix`), the message one field of the record
//! (format "text") or the whole record as JSON (format "json").
//!
//! One call per chunk, or per `entries_per_call` entries. `TRY_LATER` and
//! connection errors are retried by the buffer. When a chunk takes several
//! calls, the calls the server already answered `OK` are not sent again on
//! the retry (progress is kept by chunk id), so TRY_LATER in the middle of
//! a chunk duplicates nothing. With `[output.tls]` the framed transport
//! runs inside TLS (as Thrift's `TSSLSocket`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures_util::FutureExt;
use nagare_core::json;
use nagare_core::output::OutputPlugin;
use nagare_core::output::{FlushError, Output};
use nagare_core::plugin::{serde_inline_default, BuildContext, OptionError};
use nagare_core::units::Dur;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::buffer::Chunk;
use crate::formats::DEFAULT_MESSAGE_KEY;
use crate::net::tls::{MaybeTls, TlsClient, TlsOptions};
use crate::proto::thrift::{self, LogCall, ResultCode};

/// How a record becomes a Scribe message.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum MessageFormat {
    /// The string in the record's `message_key` field, as it is. A record
    /// without that field (or where it is not a string) is sent as JSON, so
    /// nothing is lost.
    #[default]
    Text,
    /// The whole record as a JSON object.
    Json,
}

#[serde_inline_default]
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScribeOutputConfig {
    /// "HOST:PORT" of the Scribe server. Required.
    pub address: String,
    /// Removed from the start of the tag (with the dot after it) to make
    /// the category; a tag equal to it gets `default_category`.
    #[serde(default)]
    pub remove_prefix: Option<String>,
    /// The category when nothing of the tag is left (default "unknown").
    #[serde_inline_default("unknown".into())]
    pub default_category: String,
    /// "text" (default) or "json".
    #[serde(default)]
    pub format: MessageFormat,
    /// Format "text": the record field sent as the message (default "message").
    #[serde_inline_default(DEFAULT_MESSAGE_KEY.into())]
    pub message_key: String,
    /// Append a newline to each message (default false).
    #[serde(default)]
    pub add_newline: bool,
    /// Entries per Log call; 0 (default) sends each chunk in one call.
    #[serde(default)]
    pub entries_per_call: usize,
    /// Default "5s".
    #[serde_inline_default(Dur::secs(5))]
    pub connect_timeout: Dur,
    /// Sending a call and receiving its answer must take less (default "30s").
    #[serde_inline_default(Dur::secs(30))]
    pub timeout: Dur,
    /// TLS to the server (`[output.tls]`: `ca`, `server_name`, and `cert`
    /// and `key` for a client certificate); see docs/tls.md.
    #[serde(default)]
    pub tls: Option<TlsOptions>,
}

/// The largest answer read from a server (a Log reply is a few dozen bytes;
/// an exception carries a message).
const MAX_REPLY: usize = 1 << 20;

/// Chunks whose progress is remembered at most; past this the oldest
/// entries are forgotten (a chunk that went to the secondary output never
/// comes back to clear its own).
const MAX_PROGRESS: usize = 4096;

impl OutputPlugin for ScribeOutputConfig {
    const TYPE: &'static str = "scribe";
    const DOC: &'static str = "Sends events to a Scribe server as `Log` calls; `TRY_LATER` is retried (see [Scribe](scribe.md)).";

    fn build(self, cx: &mut BuildContext) -> Result<Arc<dyn Output>, OptionError> {
        nagare_core::address::host_port(&self.address, "scribe.example:1463")
            .map_err(|e| OptionError::new("address", e))?;
        if self.default_category.is_empty() {
            return Err(OptionError::new("default_category", "must not be empty"));
        }
        if self.message_key.is_empty() {
            return Err(OptionError::new("message_key", "must not be empty"));
        }
        let tls = TlsClient::build(self.tls.as_ref(), cx)?;
        Ok(Arc::new(ScribeOutput {
            cfg: self,
            tls,
            idle: Mutex::new(Vec::new()),
            seqid: AtomicI32::new(0),
            progress: Mutex::new(HashMap::new()),
            frames: Mutex::new(Vec::new()),
        }))
    }
}

/// A connection to the server, with or without TLS.
type Conn = MaybeTls<TcpStream>;

struct ScribeOutput {
    cfg: ScribeOutputConfig,
    tls: Option<Arc<TlsClient>>,
    /// Connections between calls (several flush workers may write at once).
    idle: Mutex<Vec<Conn>>,
    seqid: AtomicI32,
    /// Entries of a chunk the server already took, by chunk id, while the
    /// chunk is being retried.
    progress: Mutex<HashMap<[u8; 16], u32>>,
    /// Frame buffers between calls, one per flush worker: a chunk's call is
    /// about the chunk's size, and a fresh allocation of that size costs a
    /// page fault per 4 KiB each time.
    frames: Mutex<Vec<Vec<u8>>>,
}

impl ScribeOutput {
    /// The category of a tag.
    fn category<'a>(&'a self, tag: &'a str) -> &'a str {
        let Some(p) = self.cfg.remove_prefix.as_deref() else {
            return tag;
        };
        match tag.strip_prefix(p) {
            Some("") => &self.cfg.default_category,
            Some(rest) if rest.starts_with('.') && rest.len() > 1 => &rest[1..],
            _ => tag,
        }
    }

    /// Appends the message of one record; `field` is its `message_key`
    /// value.
    fn message(&self, record: &[u8], field: Option<&[u8]>, out: &mut Vec<u8>) {
        let text = field.filter(|_| self.cfg.format == MessageFormat::Text);
        match text {
            Some(t) => out.extend_from_slice(t),
            None => {
                json::write_value(out, record);
            }
        }
        if self.cfg.add_newline {
            out.push(b'\n');
        }
    }

    /// An idle connection the server has not closed, or a new one.
    async fn conn(&self) -> Result<Conn, String> {
        loop {
            let Some(mut c) = self.idle.lock().expect("idle connections").pop() else {
                break;
            };
            // Data to read on an idle connection means closed (or garbage):
            // drop it. (Through TLS, a read that only takes in a session
            // ticket stays pending.)
            let mut probe = [0u8; 1];
            if c.read(&mut probe).now_or_never().is_none() {
                return Ok(c);
            }
        }
        let c = tokio::time::timeout(
            self.cfg.connect_timeout.0,
            TcpStream::connect(&self.cfg.address),
        )
        .await
        .map_err(|_| format!("connecting to {}: timed out", self.cfg.address))?
        .map_err(|e| format!("connecting to {}: {e}", self.cfg.address))?;
        let _ = c.set_nodelay(true);
        crate::net::tls::connect(&self.tls, c, &self.cfg.address)
            .await
            .map_err(|e| format!("connecting to {}: {e}", self.cfg.address))
    }

    fn remember(&self, id: [u8; 16], taken: u32) {
        let mut p = self.progress.lock().expect("progress");
        if taken == 0 {
            p.remove(&id);
            return;
        }
        if p.len() >= MAX_PROGRESS && !p.contains_key(&id) {
            p.clear();
        }
        p.insert(id, taken);
    }
}

/// Sends one framed call and reads its answer.
async fn call<S>(s: &mut S, frame: &[u8], seqid: i32) -> Result<ResultCode, String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    s.write_all(frame)
        .await
        .map_err(|e| format!("sending: {e}"))?;
    let mut head = [0u8; 4];
    s.read_exact(&mut head)
        .await
        .map_err(|e| format!("reading the answer: {e}"))?;
    let len = match thrift::frame_len(&head) {
        Some(Ok(n)) if n <= MAX_REPLY => n,
        Some(Ok(n)) => return Err(format!("an answer of {n} bytes (more than {MAX_REPLY})")),
        _ => return Err(format!("an answer with a bad frame length {head:02x?}")),
    };
    let mut body = vec![0u8; len];
    s.read_exact(&mut body)
        .await
        .map_err(|e| format!("reading the answer: {e}"))?;
    let (got, code) = thrift::decode_log_reply(&body).map_err(|e| e.to_string())?;
    if got != seqid {
        return Err(format!(
            "an answer to call {got} where call {seqid} was waited for"
        ));
    }
    Ok(code)
}

#[async_trait]
impl Output for ScribeOutput {
    async fn write(&self, chunk: &Chunk) -> Result<(), FlushError> {
        let mut frame = self
            .frames
            .lock()
            .expect("frames")
            .pop()
            .unwrap_or_default();
        let done = self.send_chunk(chunk, &mut frame).await;
        // A frame that grew past twice a chunk's payload (a chunk of JSON
        // messages) is not kept.
        if frame.capacity() <= 2 * chunk.len.max(64 << 10) {
            frame.clear();
            self.frames.lock().expect("frames").push(frame);
        }
        done
    }
}

impl ScribeOutput {
    /// Sends the entries of a chunk the server has not taken yet, in calls
    /// of up to `entries_per_call`, building each in `frame`.
    async fn send_chunk(&self, chunk: &Chunk, frame: &mut Vec<u8>) -> Result<(), FlushError> {
        let category = self.category(&chunk.tag).as_bytes();
        let per_call = match self.cfg.entries_per_call {
            0 => usize::MAX,
            n => n,
        };
        let mut taken = self
            .progress
            .lock()
            .expect("progress")
            .get(&chunk.id)
            .copied()
            .unwrap_or(0);
        let mut entries = chunk
            .entries_with_field(self.cfg.message_key.as_bytes())
            .skip(taken as usize)
            .peekable();
        let mut conn = self.conn().await.map_err(FlushError::Retry)?;
        // A text message is the record's string; a Thrift entry adds the
        // category and 15 bytes to it, a msgpack entry about 20: this is
        // enough for a call's share of the chunk.
        let whole = chunk.len + chunk.count as usize * category.len();
        let calls = (chunk.count as usize).div_ceil(per_call).max(1);
        frame.reserve(whole / calls);
        while entries.peek().is_some() {
            frame.clear();
            let seqid = self.seqid.fetch_add(1, Relaxed);
            let c = LogCall::begin(frame, seqid);
            let mut n = 0u32;
            for (record, field) in entries.by_ref().take(per_call) {
                LogCall::entry(frame, category, |out| self.message(record, field, out));
                n += 1;
            }
            c.finish(frame, n as usize);
            let answer = tokio::time::timeout(self.cfg.timeout.0, call(&mut conn, frame, seqid))
                .await
                .unwrap_or_else(|_| {
                    Err(format!("no answer within timeout = {}", self.cfg.timeout))
                });
            match answer {
                Ok(ResultCode::Ok) => taken += n,
                Ok(ResultCode::TryLater) => {
                    self.remember(chunk.id, taken);
                    self.idle.lock().expect("idle connections").push(conn);
                    return Err(FlushError::Retry(format!(
                        "{} answered TRY_LATER ({} of {} events taken)",
                        self.cfg.address, taken, chunk.count
                    )));
                }
                Err(e) => {
                    // The connection is dropped: an answer may still be on its way.
                    self.remember(chunk.id, taken);
                    return Err(FlushError::Retry(format!("{}: {e}", self.cfg.address)));
                }
            }
        }
        self.remember(chunk.id, 0);
        self.idle.lock().expect("idle connections").push(conn);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(remove_prefix: Option<&str>) -> ScribeOutput {
        let cfg: ScribeOutputConfig = toml::from_str(&format!(
            "address = \"127.0.0.1:1463\"\n{}",
            remove_prefix.map_or(String::new(), |p| format!("remove_prefix = {p:?}"))
        ))
        .unwrap();
        ScribeOutput {
            cfg,
            tls: None,
            idle: Mutex::new(Vec::new()),
            seqid: AtomicI32::new(0),
            progress: Mutex::new(HashMap::new()),
            frames: Mutex::new(Vec::new()),
        }
    }

    #[test]
    fn category_from_tag() {
        let o = output(Some("scribe"));
        assert_eq!(o.category("scribe.app.web"), "app.web");
        assert_eq!(o.category("scribe"), "unknown");
        assert_eq!(o.category("scribes.app"), "scribes.app");
        assert_eq!(o.category("other"), "other");
        assert_eq!(output(None).category("scribe.app"), "scribe.app");
    }
}
