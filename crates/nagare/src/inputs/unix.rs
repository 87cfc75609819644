//! `unix`: lines over a UNIX socket, stream (connections, like `tcp`) or
//! datagram (like `udp`), each through the input's parser. The shared
//! socket code is in net/.

use nagare_core::plugin::{serde_inline_default, BuildContext, OptionError};
use nagare_core::units::{Dur, Size};
use serde::Deserialize;
use tokio::task::JoinHandle;

use crate::inputs::common::sockets::lines::LineOptions;
use crate::inputs::common::sockets::{self, Endpoint, Settings};
use crate::inputs::common::SocketType;
use crate::inputs::common::{
    check_max_connections, DEFAULT_DELIMITER, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_LINE,
};
use crate::inputs::{Input, InputContext, InputPlugin};
use crate::parsers::ParserConfig;

#[serde_inline_default]
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UnixInputConfig {
    /// The socket's path; a socket file left by a stopped process is replaced. Required.
    pub path: String,
    /// "stream" (default) or "dgram".
    #[serde(default)]
    pub socket_type: SocketType,
    /// The events' tag. Required.
    pub tag: String,
    /// What ends a line (default "\n").
    #[serde_inline_default(DEFAULT_DELIMITER.into())]
    pub delimiter: String,
    /// Longest line kept whole (default "1MiB"); a longer line is cut to
    /// this size, the rest of it skipped, and counted as an error.
    #[serde_inline_default(DEFAULT_MAX_LINE)]
    pub max_line_size: Size,
    /// Add the socket's path to each record under this key.
    #[serde(default)]
    pub source_address_key: Option<String>,
    /// Stream: open connections at most (default 1024); more are closed at once.
    #[serde_inline_default(DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Stream: a connection that completes no line for this long is closed (default "5m").
    #[serde_inline_default(DEFAULT_IDLE_TIMEOUT)]
    pub idle_timeout: Dur,
    /// `[input.parser]`: how a line becomes a record (default type "none").
    #[serde(default)]
    pub parser: Option<Box<ParserConfig>>,
}

impl UnixInputConfig {
    fn lines(&self) -> LineOptions<'_> {
        LineOptions {
            tag: &self.tag,
            parser: self.parser.as_deref(),
            delimiter: &self.delimiter,
            source_address_key: self.source_address_key.as_deref(),
        }
    }

    fn endpoint(&self) -> Endpoint {
        match self.socket_type {
            SocketType::Stream => Endpoint::UnixStream(self.path.clone().into()),
            SocketType::Dgram => Endpoint::UnixDgram(self.path.clone().into()),
        }
    }
}

impl InputPlugin for UnixInputConfig {
    const TYPE: &'static str = "unix";
    const DOC: &'static str = "Receives lines over a UNIX socket (stream or datagram); each line becomes an event through `[input.parser]` (see [Network inputs](network-inputs.md)).";

    fn build(self, cx: &mut BuildContext) -> Result<Box<dyn Input>, OptionError> {
        if self.path.trim().is_empty() {
            return Err(OptionError::new("path", "must name a socket file"));
        }
        cx.listen("path", self.endpoint().listen());
        cx.writes_file("path", &self.path);
        self.lines().check()?;
        check_max_connections(self.max_connections)?;
        Ok(Box::new(self))
    }
}

#[async_trait::async_trait]
impl Input for UnixInputConfig {
    async fn start(self: Box<Self>, cx: InputContext) -> anyhow::Result<Vec<JoinHandle<()>>> {
        let settings = Settings {
            framing: self.lines().framing(),
            max_message: self.max_line_size.0 as usize,
            max_connections: self.max_connections,
            idle_timeout: self.idle_timeout.0,
            datagram_is_message: false,
            tls: None,
        };
        sockets::start(self.endpoint(), settings, self.lines().decoder()?, cx).await
    }
}
