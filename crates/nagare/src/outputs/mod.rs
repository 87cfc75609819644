//! Outputs: each writes closed chunks to a destination. The buffer in front
//! of each output (see `buffer`) owns batching, retries and backpressure.
//! Each output type lives in its own file and is registered below (see
//! nagare-core's plugin.rs).

pub mod common;

use nagare_core::output::{output, OutputRegistration};
use nagare_core::registry;

registry! {
    OutputRegistration;
    stdout => output::<stdout::StdoutConfig>(),
    null => output::<null::NullConfig>(),
    file => output::<file::FileConfig>(),
    forward => output::<forward::ForwardOutputConfig>(),
    redis => output::<redis::RedisOutputConfig>(),
    kafka => output::<kafka::KafkaOutputConfig>(),
    syslog => output::<syslog::SyslogOutputConfig>(),
    tcp => output::<tcp::TcpOutputConfig>(),
    scribe => output::<scribe::ScribeOutputConfig>(),
    http => output::<http::HttpOutputConfig>(),
    opentelemetry => output::<opentelemetry::OtlpOutputConfig>(),
    clickhouse => output::<clickhouse::ClickhouseOutputConfig>(),
    postgresql => output::<postgresql::PostgresqlOutputConfig>(),
    s3 => output::<s3::S3OutputConfig>(),
    azure_blob => output::<azure_blob::AzureBlobOutputConfig>(),
    loki => output::<loki::LokiOutputConfig>(),
    splunk_hec => output::<splunk_hec::SplunkHecOutputConfig>(),
    elasticsearch => output::<elasticsearch::ElasticsearchConfig>(),
    gelf => output::<gelf::GelfOutputConfig>(),
    copy => copy::REGISTRATION,
}
