//! `tcp`: writes each event as a formatted line (json, ltsv, single_value,
//! or raw msgpack entries) to a TCP server, over one connection kept open
//! and opened again after an error (the buffer retries with backoff);
//! over TLS with `[output.tls]`.

use std::sync::Arc;

use async_trait::async_trait;
use nagare_core::output::OutputPlugin;
use nagare_core::output::{FlushError, Output};
use nagare_core::plugin::{serde_inline_default, BuildContext, OptionError};
use nagare_core::units::Dur;
use serde::Deserialize;

use crate::buffer::Chunk;
use crate::formats::Format;
use crate::formats::{render, DEFAULT_MESSAGE_KEY};
use crate::net::connection::Connection;
use crate::net::connection::{check_address, DEFAULT_TIMEOUT};
use crate::net::tls::{TlsClient, TlsOptions};

#[serde_inline_default]
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TcpOutputConfig {
    /// "HOST:PORT" to connect to. Required.
    pub address: String,
    /// "json" (default), "ltsv", "msgpack" or "single_value", as the file output writes them.
    #[serde(default)]
    pub format: Format,
    /// The field written by format "single_value" (default "message").
    #[serde_inline_default(DEFAULT_MESSAGE_KEY.into())]
    pub message_key: String,
    /// Connecting, and writing a chunk, may take this long before the
    /// chunk is retried (default "10s").
    #[serde_inline_default(DEFAULT_TIMEOUT)]
    pub timeout: Dur,
    /// TLS to the server (`[output.tls]`: `ca`, `server_name`, and `cert`
    /// and `key` for a client certificate); see docs/tls.md.
    #[serde(default)]
    pub tls: Option<TlsOptions>,
}

struct TcpOutput {
    cfg: TcpOutputConfig,
    conn: Connection,
}

#[async_trait]
impl Output for TcpOutput {
    async fn write(&self, chunk: &Chunk) -> Result<(), FlushError> {
        let mut out = Vec::with_capacity(chunk.len * 2);
        render(self.cfg.format, &self.cfg.message_key, chunk, &mut out);
        self.conn.send(&out).await
    }
}

impl OutputPlugin for TcpOutputConfig {
    const TYPE: &'static str = "tcp";
    const DOC: &'static str = "Writes events as lines (json, ltsv, single_value) or msgpack entries to a TCP server; reconnects after errors (see [Network inputs](network-inputs.md)).";

    fn build(self, cx: &mut BuildContext) -> Result<Arc<dyn Output>, OptionError> {
        check_address(&self.address)?;
        let tls = TlsClient::build(self.tls.as_ref(), cx)?;
        let conn = Connection::new(&self.address, self.timeout.0, tls);
        Ok(Arc::new(TcpOutput { cfg: self, conn }))
    }
}
