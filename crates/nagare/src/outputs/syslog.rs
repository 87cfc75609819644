//! `syslog`: sends each event as an RFC 5424 or RFC 3164 message over UDP
//! (one datagram each) or TCP (RFC 6587 octet counting, or newline-ended).
//!
//! The message is built from the record: PRI from `facility_key` /
//! `severity_key` fields when the record has them (names such as "auth" and
//! "warn", or numbers) else the `facility` / `severity` options; HOSTNAME,
//! APP-NAME, PROCID, MSGID and STRUCTURED-DATA from the fields the syslog
//! input writes (`host`, `ident`, `pid`, `msgid`, `extradata`; keys
//! configurable), "-" or the defaults when missing; MSG from
//! `message_key`, or the whole record as JSON when it has no such field.
//! The time is the event's.

use std::sync::Arc;

use async_trait::async_trait;
use nagare_core::json;
use nagare_core::output::OutputPlugin;
use nagare_core::output::{FlushError, Output};
use nagare_core::plugin::{serde_inline_default, BuildContext, OptionError};
use nagare_core::record::field_text;
use nagare_core::units::Dur;
use serde::Deserialize;
use tokio::net::UdpSocket;
use tokio::sync::OnceCell;

use crate::buffer::Chunk;
use crate::formats::DEFAULT_MESSAGE_KEY;
use crate::net::connection::Connection;
use crate::net::connection::{check_address, DEFAULT_TIMEOUT};
use crate::net::tls::{TlsClient, TlsOptions};

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// One datagram per message (default).
    #[default]
    Udp,
    /// One connection, messages framed by `framing`.
    Tcp,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum MessageFormat {
    /// `<PRI>1 TIMESTAMP HOST APP PROCID MSGID SD MSG` (default).
    #[default]
    Rfc5424,
    /// `<PRI>Mmm dd hh:mm:ss HOST APP[PROCID]: MSG` (local time).
    Rfc3164,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum TcpFraming {
    /// `<length> <message>` (RFC 6587; default).
    #[default]
    OctetCounting,
    /// The message and "\n" (messages must not contain newlines).
    Newline,
}

#[serde_inline_default]
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SyslogOutputConfig {
    /// "HOST:PORT" of the syslog server. Required.
    pub address: String,
    /// "udp" (default) or "tcp".
    #[serde(default)]
    pub protocol: Protocol,
    /// "rfc5424" (default) or "rfc3164".
    #[serde(default)]
    pub message_format: MessageFormat,
    /// TCP: "octet_counting" (default) or "newline".
    #[serde(default)]
    pub framing: TcpFraming,
    /// The facility when the record has none (default "user").
    #[serde_inline_default("user".into())]
    pub facility: String,
    /// The severity when the record has none (default "info").
    #[serde_inline_default("info".into())]
    pub severity: String,
    /// The record field holding the facility (a name or number), if any.
    #[serde(default)]
    pub facility_key: Option<String>,
    /// The record field holding the severity (a name or number), if any.
    #[serde(default)]
    pub severity_key: Option<String>,
    /// The record field of HOSTNAME (default "host"; missing: this machine's name).
    #[serde_inline_default("host".into())]
    pub hostname_key: String,
    /// The record field of APP-NAME / the 3164 TAG (default "ident"; missing: `app_name`).
    #[serde_inline_default("ident".into())]
    pub app_name_key: String,
    /// APP-NAME when the record has none (default "nagare").
    #[serde_inline_default("nagare".into())]
    pub app_name: String,
    /// The record field of PROCID (default "pid").
    #[serde_inline_default("pid".into())]
    pub procid_key: String,
    /// The record field of MSGID (default "msgid"; RFC 5424 only).
    #[serde_inline_default("msgid".into())]
    pub msgid_key: String,
    /// The record field of STRUCTURED-DATA, sent as is when it is `[…]`
    /// (default "extradata"; RFC 5424 only).
    #[serde_inline_default("extradata".into())]
    pub structured_data_key: String,
    /// The record field of MSG (default "message"; missing: the record as JSON).
    #[serde_inline_default(DEFAULT_MESSAGE_KEY.into())]
    pub message_key: String,
    /// TCP: connecting, and writing a chunk, may take this long before the
    /// chunk is retried (default "10s").
    #[serde_inline_default(DEFAULT_TIMEOUT)]
    pub timeout: Dur,
    /// TLS with `protocol = "tcp"` (RFC 5425; `[output.tls]`: `ca`,
    /// `server_name`, and `cert` and `key` for a client certificate); see
    /// docs/tls.md.
    #[serde(default)]
    pub tls: Option<TlsOptions>,
}

/// Facility names by number (with the common aliases below).
const FACILITIES: [&str; 24] = [
    "kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron", "authpriv",
    "ftp", "ntp", "audit", "alert", "at", "local0", "local1", "local2", "local3", "local4",
    "local5", "local6", "local7",
];
const SEVERITIES: [&str; 8] = [
    "emerg", "alert", "crit", "err", "warn", "notice", "info", "debug",
];

fn facility_number(s: &str) -> Option<u8> {
    let s = s.trim().to_ascii_lowercase();
    if let Ok(n) = s.parse::<u8>() {
        return (n < 24).then_some(n);
    }
    let s = match s.as_str() {
        "security" => "auth",
        "clock" => "cron",
        other => other,
    };
    FACILITIES.iter().position(|f| *f == s).map(|n| n as u8)
}

fn severity_number(s: &str) -> Option<u8> {
    let s = s.trim().to_ascii_lowercase();
    if let Ok(n) = s.parse::<u8>() {
        return (n < 8).then_some(n);
    }
    let s = match s.as_str() {
        "emergency" | "panic" => "emerg",
        "critical" => "crit",
        "error" => "err",
        "warning" => "warn",
        "informational" => "info",
        other => other,
    };
    SEVERITIES.iter().position(|f| *f == s).map(|n| n as u8)
}

/// The largest UDP payload over IPv4.
const MAX_DATAGRAM: usize = 65_507;

struct SyslogOutput {
    cfg: SyslogOutputConfig,
    facility: u8,
    severity: u8,
    hostname: String,
    tcp: Connection,
    udp: OnceCell<UdpSocket>,
}

/// `field` as printable ASCII without spaces, at most `max` bytes ("-" when empty).
fn header_field(out: &mut Vec<u8>, value: Option<&[u8]>, max: usize) {
    let v = value.unwrap_or_default();
    let start = out.len();
    out.extend(
        v.iter()
            .take(max)
            .map(|&c| if (b'!'..=b'~').contains(&c) { c } else { b'_' }),
    );
    if out.len() == start {
        out.push(b'-');
    }
}

impl SyslogOutput {
    fn pri(&self, record: &[u8]) -> u8 {
        let pick = |key: &Option<String>, parse: fn(&str) -> Option<u8>| {
            let v = field_text(record, key.as_ref()?.as_bytes())?;
            parse(std::str::from_utf8(&v).ok()?)
        };
        let f = pick(&self.cfg.facility_key, facility_number).unwrap_or(self.facility);
        let s = pick(&self.cfg.severity_key, severity_number).unwrap_or(self.severity);
        f * 8 + s
    }

    /// Appends one message (without framing) for the event.
    fn message(&self, out: &mut Vec<u8>, time: nagare_forward::EventTime, record: &[u8]) {
        use std::io::Write;
        // Every field as text: an integer pid or severity counts too.
        let get = |k: &str| field_text(record, k.as_bytes());
        let host = get(&self.cfg.hostname_key);
        let host = host.as_deref().unwrap_or(self.hostname.as_bytes());
        let app = get(&self.cfg.app_name_key);
        let app = app.as_deref().unwrap_or(self.cfg.app_name.as_bytes());
        let pid = get(&self.cfg.procid_key);
        let pid = pid.as_deref();
        let _ = write!(out, "<{}>", self.pri(record));
        match self.cfg.message_format {
            MessageFormat::Rfc5424 => {
                let t =
                    chrono::DateTime::from_timestamp(time.secs as i64, time.nanos.min(999_999_999))
                        .unwrap_or_default();
                let _ = write!(out, "1 {} ", t.format("%Y-%m-%dT%H:%M:%S%.6fZ"));
                header_field(out, Some(host), 255);
                out.push(b' ');
                header_field(out, Some(app), 48);
                out.push(b' ');
                header_field(out, pid, 128);
                out.push(b' ');
                header_field(out, get(&self.cfg.msgid_key).as_deref(), 32);
                out.push(b' ');
                match get(&self.cfg.structured_data_key) {
                    Some(sd) if sd.starts_with(b"[") && sd.ends_with(b"]") => {
                        out.extend_from_slice(&sd)
                    }
                    _ => out.push(b'-'),
                }
            }
            MessageFormat::Rfc3164 => {
                let t = chrono::DateTime::from_timestamp(time.secs as i64, 0).unwrap_or_default();
                let local = t.with_timezone(&chrono::Local);
                let _ = write!(out, "{} ", local.format("%b %e %H:%M:%S"));
                header_field(out, Some(host), 255);
                out.push(b' ');
                header_field(out, Some(app), 32);
                if let Some(p) = pid.filter(|p| !p.is_empty() && *p != b"-") {
                    out.push(b'[');
                    header_field(out, Some(p), 128);
                    out.push(b']');
                }
                out.push(b':');
            }
        }
        out.push(b' ');
        match get(&self.cfg.message_key) {
            Some(m) => out.extend_from_slice(&m),
            None => {
                json::write_value(out, record);
            }
        }
    }

    async fn udp(&self) -> Result<&UdpSocket, FlushError> {
        self.udp
            .get_or_try_init(|| async {
                let local = if self.cfg.address.starts_with('[') {
                    "[::]:0"
                } else {
                    "0.0.0.0:0"
                };
                let s = UdpSocket::bind(local).await?;
                s.connect(&self.cfg.address).await?;
                Ok(s)
            })
            .await
            .map_err(|e: std::io::Error| {
                FlushError::Retry(format!("UDP to {}: {e}", self.cfg.address))
            })
    }
}

#[async_trait]
impl Output for SyslogOutput {
    async fn write(&self, chunk: &Chunk) -> Result<(), FlushError> {
        let mut msg = Vec::with_capacity(512);
        match self.cfg.protocol {
            Protocol::Udp => {
                let sock = self.udp().await?;
                for (time, record, _) in chunk.entries() {
                    msg.clear();
                    self.message(&mut msg, time, record);
                    // A message a datagram cannot hold is cut (RFC 5426 allows it).
                    msg.truncate(MAX_DATAGRAM);
                    sock.send(&msg).await.map_err(|e| {
                        FlushError::Retry(format!("sending to {}: {e}", self.cfg.address))
                    })?;
                }
                Ok(())
            }
            Protocol::Tcp => {
                let mut out = Vec::with_capacity(chunk.len * 2);
                for (time, record, _) in chunk.entries() {
                    msg.clear();
                    self.message(&mut msg, time, record);
                    match self.cfg.framing {
                        TcpFraming::OctetCounting => {
                            out.extend_from_slice(format!("{} ", msg.len()).as_bytes());
                            out.extend_from_slice(&msg);
                        }
                        TcpFraming::Newline => {
                            out.extend(msg.iter().map(|&c| if c == b'\n' { b' ' } else { c }));
                            out.push(b'\n');
                        }
                    }
                }
                self.tcp.send(&out).await
            }
        }
    }
}

impl OutputPlugin for SyslogOutputConfig {
    const TYPE: &'static str = "syslog";
    const DOC: &'static str = "Sends events as RFC 5424 or RFC 3164 syslog messages over UDP or TCP (octet counting or newlines) (see [Syslog](syslog.md)).";

    fn build(self, cx: &mut BuildContext) -> Result<Arc<dyn Output>, OptionError> {
        check_address(&self.address)?;
        let facility = facility_number(&self.facility).ok_or_else(|| {
            OptionError::new(
                "facility",
                format!(
                    "{:?} is not a facility (e.g. \"user\", \"local0\", 0-23)",
                    self.facility
                ),
            )
        })?;
        let severity = severity_number(&self.severity).ok_or_else(|| {
            OptionError::new(
                "severity",
                format!(
                    "{:?} is not a severity (e.g. \"info\", \"warn\", 0-7)",
                    self.severity
                ),
            )
        })?;
        let hostname = gethostname::gethostname().to_string_lossy().into_owned();
        if self.protocol != Protocol::Tcp && self.tls.as_ref().is_some_and(|t| t.enable) {
            return Err(OptionError::new(
                "tls",
                "TLS is for TCP: set protocol = \"tcp\" (no TLS over UDP)",
            ));
        }
        let tls = TlsClient::build(self.tls.as_ref(), cx)?;
        let tcp = Connection::new(&self.address, self.timeout.0, tls);
        Ok(Arc::new(SyslogOutput {
            cfg: self,
            facility,
            severity,
            hostname,
            tcp,
            udp: OnceCell::new(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(extra: &str) -> SyslogOutput {
        let cfg: SyslogOutputConfig =
            toml::from_str(&format!("address = \"127.0.0.1:514\"\n{extra}")).unwrap();
        let mut cx = BuildContext::new("syslog#0");
        let _ = cfg.clone().build(&mut cx).unwrap();
        SyslogOutput {
            facility: facility_number(&cfg.facility).unwrap(),
            severity: severity_number(&cfg.severity).unwrap(),
            hostname: "here".into(),
            tcp: Connection::new(&cfg.address, cfg.timeout.0, None),
            udp: OnceCell::new(),
            cfg,
        }
    }

    fn record(v: serde_json::Value) -> Vec<u8> {
        let mut out = Vec::new();
        json::msgpack_from_json(&v, &mut out);
        out
    }

    #[test]
    fn rfc5424_from_a_syslog_record() {
        let o = output("facility_key = \"facility\"\nseverity_key = \"severity\"");
        let r = record(
            serde_json::json!({"host": "web 1", "ident": "app", "pid": "42", "msgid": "ID7",
            "extradata": "[x@1 a=\"b\"]", "message": "hello", "facility": "auth", "severity": "warning"}),
        );
        let mut out = Vec::new();
        o.message(
            &mut out,
            nagare_forward::EventTime::new(1_065_910_455, 3_000_000),
            &r,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "<36>1 2003-10-11T22:14:15.003000Z web_1 app 42 ID7 [x@1 a=\"b\"] hello"
        );
    }

    #[test]
    fn integer_fields_are_read_as_numbers() {
        let o = output("facility_key = \"facility\"\nseverity_key = \"severity\"");
        let r = record(
            serde_json::json!({"pid": 1234, "severity": 5, "facility": 4, "message": 17, "host": "h"}),
        );
        let mut out = Vec::new();
        o.message(&mut out, nagare_forward::EventTime::new(0, 0), &r);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "<37>1 1970-01-01T00:00:00.000000Z h nagare 1234 - - 17"
        );
    }

    #[test]
    fn defaults_and_a_record_without_message() {
        let o = output("severity = \"err\"\nfacility = \"local0\"");
        let r = record(serde_json::json!({"a": 1}));
        let mut out = Vec::new();
        o.message(&mut out, nagare_forward::EventTime::new(0, 0), &r);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "<131>1 1970-01-01T00:00:00.000000Z here nagare - - - {\"a\":1}"
        );
        let o = output("message_format = \"rfc3164\"");
        let r = record(serde_json::json!({"ident": "su", "pid": "7", "message": "m"}));
        let mut out = Vec::new();
        o.message(&mut out, nagare_forward::EventTime::new(0, 0), &r);
        let s = String::from_utf8(out).unwrap();
        assert!(s.starts_with("<14>"), "{s}");
        assert!(s.ends_with(" here su[7]: m"), "{s}");
    }

    #[test]
    fn bad_options() {
        for (opt, key) in [
            ("facility = \"nope\"", "facility"),
            ("severity = \"9\"", "severity"),
            ("", ""),
        ] {
            let text = if opt.is_empty() {
                "address = \"nohost\"".to_string()
            } else {
                format!("address = \"h:1\"\n{opt}")
            };
            let cfg: SyslogOutputConfig = toml::from_str(&text).unwrap();
            let e = cfg.build(&mut BuildContext::new("x")).err().unwrap();
            assert_eq!(e.key, if key.is_empty() { "address" } else { key });
        }
    }
}
