//! `tcp`: lines over TCP, each through the input's parser (default `none`:
//! `{"message": "<line>"}`), like Fluentd's in_tcp (and its `<transport
//! tls>` with `[input.tls]`). The shared socket code is in net/.

use std::sync::Arc;

use nagare_core::plugin::{BuildContext, OptionError};
use nagare_core::units::Size;
use tokio::task::JoinHandle;

use crate::inputs::common::sockets::lines::LineOptions;
use crate::inputs::common::sockets::{self, Endpoint, Settings};
use crate::inputs::common::{connection_options, DEFAULT_DELIMITER, DEFAULT_MAX_LINE};
use crate::inputs::{Input, InputContext, InputPlugin};
use crate::net::tls::TlsServer;
use crate::parsers::ParserConfig;

connection_options!(
    /// The `tcp` input.
    TcpInputConfig {
        /// "HOST:PORT" to listen on. Required.
        bind: String,
        /// The events' tag. Required.
        tag: String,
        /// What ends a line (default "\n"; e.g. "\r\n" or "\u0000").
        #[serde_inline_default(DEFAULT_DELIMITER.into())]
        delimiter: String,
        /// Longest line kept whole (default "1MiB"); a longer line is cut to
        /// this size, the rest of it skipped, and counted as an error.
        #[serde_inline_default(DEFAULT_MAX_LINE)]
        max_line_size: Size,
        /// Add the sender's IP address to each record under this key.
        #[serde(default)]
        source_address_key: Option<String>,
        /// `[input.parser]`: how a line becomes a record (default type "none").
        #[serde(default)]
        parser: Option<Box<ParserConfig>>,
    }
);

impl TcpInputConfig {
    fn lines(&self) -> LineOptions<'_> {
        LineOptions {
            tag: &self.tag,
            parser: self.parser.as_deref(),
            delimiter: &self.delimiter,
            source_address_key: self.source_address_key.as_deref(),
        }
    }
}

impl InputPlugin for TcpInputConfig {
    const TYPE: &'static str = "tcp";
    const DOC: &'static str = "Receives lines over TCP; each line becomes an event through `[input.parser]` (see [Network inputs](network-inputs.md)).";

    fn build(self, cx: &mut BuildContext) -> Result<Box<dyn Input>, OptionError> {
        let addr =
            nagare_core::address::resolve(&self.bind).map_err(|e| OptionError::new("bind", e))?;
        cx.listen("bind", Endpoint::Tcp(addr).listen());
        self.lines().check()?;
        self.check_connections()?;
        let tls = TlsServer::build(self.tls.as_ref(), cx)?;
        Ok(Box::new(TcpInput { cfg: self, tls }))
    }
}

/// A built tcp input: its options and its TLS files, loaded.
struct TcpInput {
    cfg: TcpInputConfig,
    tls: Option<Arc<TlsServer>>,
}

#[async_trait::async_trait]
impl Input for TcpInput {
    async fn start(self: Box<Self>, cx: InputContext) -> anyhow::Result<Vec<JoinHandle<()>>> {
        let cfg = &self.cfg;
        let addr = nagare_core::address::resolve(&cfg.bind).map_err(anyhow::Error::msg)?;
        let settings = Settings {
            framing: cfg.lines().framing(),
            max_message: cfg.max_line_size.0 as usize,
            max_connections: cfg.max_connections,
            idle_timeout: cfg.idle_timeout.0,
            datagram_is_message: false,
            tls: self.tls.clone(),
        };
        sockets::start(Endpoint::Tcp(addr), settings, cfg.lines().decoder()?, cx).await
    }
}
