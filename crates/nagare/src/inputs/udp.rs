//! `udp`: lines in UDP datagrams (a datagram holds one line or several,
//! ended by `delimiter`), each through the input's parser, like Fluentd's
//! in_udp. The shared socket code is in net/.

use nagare_core::plugin::{serde_inline_default, BuildContext, OptionError};
use nagare_core::units::Size;
use serde::Deserialize;
use tokio::task::JoinHandle;

use crate::inputs::common::sockets::lines::LineOptions;
use crate::inputs::common::sockets::{self, Endpoint, Settings};
use crate::inputs::common::{DEFAULT_DELIMITER, DEFAULT_MAX_LINE};
use crate::inputs::{Input, InputContext, InputPlugin};
use crate::parsers::ParserConfig;

#[serde_inline_default]
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UdpInputConfig {
    /// "HOST:PORT" to listen on. Required.
    pub bind: String,
    /// The events' tag. Required.
    pub tag: String,
    /// What ends a line inside a datagram (default "\n"); the end of the
    /// datagram ends its last line.
    #[serde_inline_default(DEFAULT_DELIMITER.into())]
    pub delimiter: String,
    /// Longest line kept whole (default "1MiB"; a datagram is at most
    /// 64 KiB); a longer line is cut to this size and counted as an error.
    #[serde_inline_default(DEFAULT_MAX_LINE)]
    pub max_line_size: Size,
    /// Add the sender's IP address to each record under this key.
    #[serde(default)]
    pub source_address_key: Option<String>,
    /// `[input.parser]`: how a line becomes a record (default type "none").
    #[serde(default)]
    pub parser: Option<Box<ParserConfig>>,
}

impl UdpInputConfig {
    fn lines(&self) -> LineOptions<'_> {
        LineOptions {
            tag: &self.tag,
            parser: self.parser.as_deref(),
            delimiter: &self.delimiter,
            source_address_key: self.source_address_key.as_deref(),
        }
    }
}

impl InputPlugin for UdpInputConfig {
    const TYPE: &'static str = "udp";
    const DOC: &'static str = "Receives lines in UDP datagrams; each line becomes an event through `[input.parser]` (see [Network inputs](network-inputs.md)).";

    fn build(self, cx: &mut BuildContext) -> Result<Box<dyn Input>, OptionError> {
        let addr =
            nagare_core::address::resolve(&self.bind).map_err(|e| OptionError::new("bind", e))?;
        cx.listen("bind", Endpoint::Udp(addr).listen());
        self.lines().check()?;
        Ok(Box::new(self))
    }
}

#[async_trait::async_trait]
impl Input for UdpInputConfig {
    async fn start(self: Box<Self>, cx: InputContext) -> anyhow::Result<Vec<JoinHandle<()>>> {
        let addr = nagare_core::address::resolve(&self.bind).map_err(anyhow::Error::msg)?;
        let settings = Settings {
            framing: self.lines().framing(),
            max_message: self.max_line_size.0 as usize,
            max_connections: 1,
            // Not used for datagrams.
            idle_timeout: std::time::Duration::from_secs(300),
            datagram_is_message: false,
            tls: None,
        };
        sockets::start(Endpoint::Udp(addr), settings, self.lines().decoder()?, cx).await
    }
}
