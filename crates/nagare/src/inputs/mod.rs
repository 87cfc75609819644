//! Inputs: sources of batches. Each input type lives in its own file and is
//! registered below (see plugin.rs).

use crate::plugin::{input, registry, InputRegistration};

pub(crate) mod append;
pub(crate) mod http_listener;
pub(crate) mod net;

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
}
