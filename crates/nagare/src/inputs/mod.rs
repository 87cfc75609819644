//! Inputs: sources of batches. Each input type lives in its own file and is
//! registered below (`nagare_core::registry!`).
//!
//! The input contract lives here rather than in nagare-core because what an
//! input routes through, the live route table (`router::LiveRouter`), sits
//! above the core: it holds the buffers.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use nagare_core::metrics::PluginStats;
use nagare_core::plugin::{
    registration, BuildContext, Built, OptionError, Registration, Section, SectionError,
};
use nagare_core::registry;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::router::LiveRouter;

pub mod common;

registry! {
    InputRegistration;
    forward => input::<forward::ForwardInputConfig>(),
    tail => input::<tail::TailConfig>(),
    directory => input::<directory::DirectoryConfig>(),
    fuse => input::<fuse::FuseConfig>(),
    redis => input::<redis::RedisInputConfig>(),
    kafka => input::<kafka::KafkaInputConfig>(),
    syslog => input::<syslog::SyslogInputConfig>(),
    tcp => input::<tcp::TcpInputConfig>(),
    udp => input::<udp::UdpInputConfig>(),
    unix => input::<unix::UnixInputConfig>(),
    scribe => input::<scribe::ScribeInputConfig>(),
    http => input::<http::HttpInputConfig>(),
    opentelemetry => input::<opentelemetry::OtlpInputConfig>(),
    journald => input::<journald::JournaldConfig>(),
    exec => input::<exec::ExecInputConfig>(),
    elasticsearch => input::<elasticsearch::ElasticsearchInputConfig>(),
    beats => input::<beats::BeatsInputConfig>(),
    splunk_hec => input::<splunk_hec::SplunkHecInputConfig>(),
    gelf => input::<gelf::GelfInputConfig>(),
}

/// What a started input gets.
pub struct InputContext {
    pub name: String,
    pub router: LiveRouter,
    pub stats: Arc<PluginStats>,
    /// Chunk ids already stored in file buffers, for a dedup window.
    pub stored_ids: Arc<Vec<Bytes>>,
    /// Turns true when the daemon stops.
    pub shutdown: watch::Receiver<bool>,
}

/// A built input, ready to start.
#[async_trait]
pub trait Input: Send {
    /// Opens what the input needs and spawns its tasks; the input stops when
    /// `shutdown` turns true and every returned task has ended.
    async fn start(self: Box<Self>, cx: InputContext) -> anyhow::Result<Vec<JoinHandle<()>>>;
}

/// An input type: its options struct.
pub trait InputPlugin: DeserializeOwned + JsonSchema + 'static {
    /// The `type` of its `[[input]]` sections.
    const TYPE: &'static str;
    /// One paragraph for the configuration reference.
    const DOC: &'static str;
    /// Checks the options and prepares the input; no I/O that changes anything.
    fn build(self, cx: &mut BuildContext) -> Result<Box<dyn Input>, OptionError>;
}

pub type InputRegistration = Registration<Box<dyn Input>>;

/// The registration of the input type `T`.
pub const fn input<T: InputPlugin>() -> InputRegistration {
    fn build<'a, T: InputPlugin>(
        s: Section<'a>,
        cx: &mut BuildContext,
    ) -> Result<Built<'a, Box<dyn Input>>, SectionError> {
        Ok(Built::One(s.options::<T>()?.build(cx)?))
    }
    registration::<T, _>(T::TYPE, T::DOC, build::<T>)
}
