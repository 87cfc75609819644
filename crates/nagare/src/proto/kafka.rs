//! What the `kafka` input and output share: the connection options (broker
//! addresses, SASL, TLS, librdkafka properties passed through) and turning
//! them into an rdkafka `ClientConfig`.
//!
//! The options are declared by [`kafka_options!`], which appends them to a
//! plugin's own options struct (as `redis_options!` does: serde's `flatten`
//! would lose the line numbers of errors and cannot deny unknown keys).

use std::collections::BTreeMap;

use nagare_core::plugin::{serde_inline_default, OptionError};
use rdkafka::ClientConfig;
use serde::Deserialize;

/// `tls`: the keys every client shares that librdkafka supports.
#[serde_inline_default]
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KafkaTls {
    /// PEM file of the CA certificates the brokers' certificates must chain
    /// to (default: the system's trust store).
    #[serde(default)]
    pub ca: Option<String>,
    /// PEM file of a client certificate, for brokers that ask for one (with `key`).
    #[serde(default)]
    pub cert: Option<String>,
    /// PEM file of the client certificate's private key.
    #[serde(default)]
    pub key: Option<String>,
    /// Check the brokers' certificates and names (default true).
    #[serde_inline_default(true)]
    pub verify: bool,
}

/// The SASL mechanisms nagare is built with (GSSAPI/Kerberos is not).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
pub enum SaslMechanism {
    #[serde(rename = "PLAIN")]
    Plain,
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
}

/// `sasl`: a user name and password, checked by the brokers.
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KafkaSasl {
    /// "PLAIN", "SCRAM-SHA-256" or "SCRAM-SHA-512".
    pub mechanism: SaslMechanism,
    /// The user name the brokers check.
    pub username: String,
    /// Its password.
    pub password: String,
}

/// Declares a kafka plugin's options struct with the connection options
/// appended, and `connection()` to read them.
macro_rules! kafka_options {
    ($($plugin:tt)*) => {
        nagare_core::option_group! {
            [$($plugin)*]
            fields {
                /// Bootstrap brokers, "HOST:PORT" (default ["127.0.0.1:9092"]);
                /// the client learns the rest of the cluster from them.
                #[serde_inline_default(vec!["127.0.0.1:9092".into()])]
                pub addresses: Vec<String>,
                /// SASL authentication: a table of `mechanism` ("PLAIN",
                /// "SCRAM-SHA-256" or "SCRAM-SHA-512"), `username` and `password`
                /// (none by default).
                #[serde(default)]
                pub sasl: Option<crate::proto::kafka::KafkaSasl>,
                /// TLS settings (`ca`, `cert`, `key`, `verify`); setting this table turns TLS on.
                #[serde(default)]
                pub tls: Option<crate::proto::kafka::KafkaTls>,
                /// More librdkafka properties, passed as they are and applied
                /// last, e.g. { "socket.keepalive.enable" = "true" }.
                #[serde(default)]
                pub properties: std::collections::BTreeMap<String, String>,
            }
            impl {
                fn connection(&self) -> crate::proto::kafka::Connection<'_> {
                    crate::proto::kafka::Connection {
                        addresses: &self.addresses,
                        sasl: self.sasl.as_ref(),
                        tls: self.tls.as_ref(),
                        properties: &self.properties,
                    }
                }
            }
        }
    };
}
pub(crate) use kafka_options;

/// The connection options of one plugin section.
pub struct Connection<'a> {
    pub addresses: &'a [String],
    pub sasl: Option<&'a KafkaSasl>,
    pub tls: Option<&'a KafkaTls>,
    pub properties: &'a BTreeMap<String, String>,
}

impl Connection<'_> {
    /// The client configuration: the connection options, then the plugin's
    /// own `settings`, then `properties`. Checked by librdkafka without
    /// connecting anywhere; errors name the option.
    pub fn config(&self, settings: &[(&str, String)]) -> Result<ClientConfig, OptionError> {
        if self.addresses.is_empty() || self.addresses.iter().any(|a| a.trim().is_empty()) {
            return Err(OptionError::new(
                "addresses",
                "must list at least one broker, \"HOST:PORT\"",
            ));
        }
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", self.addresses.join(","));
        let protocol = match (self.sasl.is_some(), self.tls.is_some()) {
            (false, false) => "plaintext",
            (false, true) => "ssl",
            (true, false) => "sasl_plaintext",
            (true, true) => "sasl_ssl",
        };
        c.set("security.protocol", protocol);
        if let Some(s) = self.sasl {
            let mechanism = match s.mechanism {
                SaslMechanism::Plain => "PLAIN",
                SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
                SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
            };
            c.set("sasl.mechanism", mechanism)
                .set("sasl.username", &s.username)
                .set("sasl.password", &s.password);
        }
        if let Some(t) = self.tls {
            for (key, file, prop) in [
                ("tls.ca", &t.ca, "ssl.ca.location"),
                ("tls.cert", &t.cert, "ssl.certificate.location"),
                ("tls.key", &t.key, "ssl.key.location"),
            ] {
                if let Some(f) = file {
                    if !std::path::Path::new(f).is_file() {
                        return Err(OptionError::new(key, format!("{f}: no such file")));
                    }
                    c.set(prop, f);
                }
            }
            if t.cert.is_some() != t.key.is_some() {
                return Err(OptionError::new("tls", "`cert` and `key` go together"));
            }
            if !t.verify {
                c.set("enable.ssl.certificate.verification", "false")
                    .set("ssl.endpoint.identification.algorithm", "none");
            }
        }
        for (k, v) in settings {
            c.set(*k, v);
        }
        for (k, v) in self.properties {
            c.set(k, v);
        }
        // librdkafka checks every name and value here, without starting a client.
        c.create_native_config()
            .map_err(|e| OptionError::new("properties", e.to_string()))?;
        Ok(c)
    }
}

/// librdkafka's log lines, through `tracing`.
pub fn log(client: &str, level: rdkafka::config::RDKafkaLogLevel, fac: &str, msg: &str) {
    use rdkafka::config::RDKafkaLogLevel as L;
    match level {
        L::Emerg | L::Alert | L::Critical | L::Error => {
            tracing::error!(plugin = %client, facility = fac, "librdkafka: {msg}")
        }
        L::Warning => tracing::warn!(plugin = %client, facility = fac, "librdkafka: {msg}"),
        L::Notice | L::Info => {
            tracing::info!(plugin = %client, facility = fac, "librdkafka: {msg}")
        }
        L::Debug => tracing::debug!(plugin = %client, facility = fac, "librdkafka: {msg}"),
    }
}
