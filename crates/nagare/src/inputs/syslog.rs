//! `syslog`: RFC 3164 and RFC 5424 messages over UDP, TCP or a UNIX socket
//! (datagram or stream), like Fluentd's in_syslog. On streams each message
//! is framed by RFC 6587 octet counting (`<length> <message>`) or ends with
//! a newline, recognised message by message.
//!
//! The tag is `<tag>.<facility>.<severity>` from the message's PRI (as
//! Fluentd builds it, e.g. `system.auth.warn`); a message without a
//! readable PRI is tagged `<tag>.unmatched`. The record is the `syslog`
//! parser's (`host`, `ident`, `pid`, `message`, and for RFC 5424 `msgid`
//! and `extradata`, the structured data as sent), the event time the
//! message's. A message that does not parse is kept: `{"message": <the
//! message as received>, "parse_error": <why>}`.
//!
//! Over TCP, `[input.tls]` makes it a syslog-over-TLS server (RFC 5425:
//! octet-counted messages inside TLS, as rsyslog's and syslog-ng's TLS
//! senders write them).

use std::sync::Arc;

use nagare_core::plugin::{BuildContext, OptionError};
use nagare_core::units::Size;
use nagare_forward::msgpack::{write_map_len, write_str};
use nagare_forward::EventTime;
use serde::Deserialize;
use tokio::task::JoinHandle;

use crate::inputs::common::connection_options;
use crate::inputs::common::sockets::framing::Framing;
use crate::inputs::common::sockets::{self, Batches, Decoder, Endpoint, Peer, Settings};
use crate::inputs::common::SocketType;
use crate::inputs::{Input, InputContext, InputPlugin};
use crate::net::tls::TlsServer;
use crate::parsers::{Parser, ParserConfig, ParserType, SyslogFormat};

/// The transport of a syslog input with `bind`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// One message per datagram (RFC 5426; default).
    #[default]
    Udp,
    /// Octet-counted or newline-ended messages (RFC 6587).
    Tcp,
}

connection_options!(
    /// The `syslog` input.
    SyslogInputConfig {
        /// "HOST:PORT" to listen on (with `protocol`).
        #[serde(default)]
        bind: Option<String>,
        /// "udp" (default) or "tcp", with `bind`.
        #[serde(default)]
        protocol: Protocol,
        /// A UNIX socket path to listen on instead of `bind` (with `socket_type`).
        #[serde(default)]
        path: Option<String>,
        /// "dgram" (default with `path`, as /dev/log) or "stream".
        #[serde(default)]
        socket_type: Option<SocketType>,
        /// The first part of the tag; `.<facility>.<severity>` is added. Required.
        tag: String,
        /// "rfc3164", "rfc5424" or "auto" (default: each message by its look,
        /// a version number after the PRI meaning RFC 5424).
        #[serde(default)]
        message_format: SyslogFormat,
        /// Longest message kept whole (default "64KiB"); a longer one is cut
        /// to this size (then parsed), and counted as an error.
        #[serde_inline_default(Size::kib(64))]
        max_message_size: Size,
        /// Add the facility's name (e.g. "auth") to each record under this key.
        #[serde(default)]
        facility_key: Option<String>,
        /// Add the severity's name (e.g. "warn") to each record under this key.
        #[serde(default)]
        severity_key: Option<String>,
        /// Add the sender's IP address (or the socket's path) under this key.
        #[serde(default)]
        source_address_key: Option<String>,
    }
);

/// Facility names by number, as Fluentd's in_syslog names them.
const FACILITIES: [&str; 24] = [
    "kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron", "authpriv",
    "ftp", "ntp", "audit", "alert", "at", "local0", "local1", "local2", "local3", "local4",
    "local5", "local6", "local7",
];
/// Severity names by number, as Fluentd's in_syslog names them.
const SEVERITIES: [&str; 8] = [
    "emerg", "alert", "crit", "err", "warn", "notice", "info", "debug",
];

impl SyslogInputConfig {
    fn endpoint(&self) -> Result<Endpoint, OptionError> {
        match (&self.bind, &self.path) {
            (Some(bind), None) => {
                if self.socket_type.is_some() {
                    return Err(OptionError::new(
                        "socket_type",
                        "is for a UNIX socket (`path`); with `bind` set `protocol`",
                    ));
                }
                let addr = nagare_core::address::resolve(bind).map_err(|e| OptionError::new("bind", e))?;
                Ok(match self.protocol {
                    Protocol::Udp => Endpoint::Udp(addr),
                    Protocol::Tcp => Endpoint::Tcp(addr),
                })
            }
            (None, Some(path)) => {
                if self.protocol != Protocol::Udp {
                    return Err(OptionError::new(
                        "protocol",
                        "is for `bind`; with a UNIX socket (`path`) set `socket_type`",
                    ));
                }
                Ok(match self.socket_type.unwrap_or(SocketType::Dgram) {
                    SocketType::Dgram => Endpoint::UnixDgram(path.into()),
                    SocketType::Stream => Endpoint::UnixStream(path.into()),
                })
            }
            (Some(_), Some(_)) => Err(OptionError::new(
                "path",
                "set either `bind` (UDP or TCP) or `path` (a UNIX socket), not both",
            )),
            (None, None) => Err(OptionError::new(
                "",
                "a syslog input needs `bind` (e.g. bind = \"0.0.0.0:5140\") or `path` (a UNIX socket)",
            )),
        }
    }

    fn settings(&self, tls: Option<Arc<TlsServer>>) -> Settings {
        Settings {
            framing: Framing::Syslog,
            max_message: self.max_message_size.0 as usize,
            max_connections: self.max_connections,
            idle_timeout: self.idle_timeout.0,
            datagram_is_message: true,
            tls,
        }
    }

    /// What this input makes of `feed` (datagrams, or a stream
    /// connection's bytes: octet counting or lines), without sockets: for
    /// the fuzz target `syslog` and the test that replays its seeds
    /// (fuzz/, docs/fuzzing.md).
    #[doc(hidden)]
    pub fn replay(&self, feed: sockets::Feed<'_>) -> anyhow::Result<sockets::Replayed> {
        Ok(sockets::replay(
            &self.settings(None),
            &self.decoder()?,
            feed,
        ))
    }

    fn decoder(&self) -> anyhow::Result<SyslogDecoder> {
        let parser = |format| {
            Parser::new(&ParserConfig {
                kind: ParserType::Syslog,
                message_format: format,
                ..ParserConfig::default()
            })
        };
        let mut tags = Vec::with_capacity(FACILITIES.len() * SEVERITIES.len());
        for f in FACILITIES {
            for s in SEVERITIES {
                tags.push(format!("{}.{f}.{s}", self.tag));
            }
        }
        Ok(SyslogDecoder {
            format: self.message_format,
            rfc3164: parser(SyslogFormat::Rfc3164)?,
            rfc5424: parser(SyslogFormat::Rfc5424)?,
            unmatched: format!("{}.unmatched", self.tag),
            tags,
            facility_key: self.facility_key.clone(),
            severity_key: self.severity_key.clone(),
            source_address_key: self.source_address_key.clone(),
            hostname: gethostname::gethostname().to_string_lossy().into_owned(),
        })
    }
}

struct SyslogDecoder {
    format: SyslogFormat,
    rfc3164: Parser,
    rfc5424: Parser,
    /// `<tag>.<facility>.<severity>` by PRI.
    tags: Vec<String>,
    unmatched: String,
    facility_key: Option<String>,
    severity_key: Option<String>,
    source_address_key: Option<String>,
    /// This machine's name, for RFC 3164 messages without a HOSTNAME.
    hostname: String,
}

/// Where the TAG starts in an RFC 3164 message (after the PRI) that has no
/// HOSTNAME, as local programs write to /dev/log: `Mmm dd hh:mm:ss TAG: …`
/// (the word after the time ends with ':' or holds a '[').
fn hostless_3164(after_pri: &[u8]) -> Option<usize> {
    const TIME: usize = "Mmm dd hh:mm:ss ".len();
    if after_pri.get(TIME - 1) != Some(&b' ') || after_pri.get(TIME - 4) != Some(&b':') {
        return None;
    }
    let rest = &after_pri[TIME..];
    let word = rest.split(|c| *c == b' ').next()?;
    (word.ends_with(b":") || word.contains(&b'[')).then_some(TIME)
}

/// The PRI of a message (0..=191) and the bytes `<PRI>` takes.
fn priority(msg: &[u8]) -> Option<(usize, usize)> {
    let rest = msg.strip_prefix(b"<")?;
    let digits = rest
        .iter()
        .take(4)
        .take_while(|c| c.is_ascii_digit())
        .count();
    if !(1..=3).contains(&digits) || rest.get(digits) != Some(&b'>') {
        return None;
    }
    let pri: usize = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
    (pri < FACILITIES.len() * 8).then_some((pri, digits + 2))
}

/// The length of RFC 5424's `VERSION SP` at the start of `rest`, if there.
fn version(rest: &[u8]) -> Option<usize> {
    let digits = rest
        .iter()
        .take(4)
        .take_while(|c| c.is_ascii_digit())
        .count();
    let ok = (1..=3).contains(&digits) && rest[0] != b'0' && rest.get(digits) == Some(&b' ');
    ok.then_some(digits + 1)
}

impl Decoder for SyslogDecoder {
    fn decode(&self, msg: &[u8], peer: &Peer, now: EventTime, out: &mut Batches) -> bool {
        let pri = priority(msg);
        let after_pri = &msg[pri.map_or(0, |(_, n)| n)..];
        let rfc5424 = match self.format {
            SyslogFormat::Rfc3164 => None,
            SyslogFormat::Rfc5424 => Some(version(after_pri)),
            SyslogFormat::Auto => version(after_pri).map(Some),
        };
        // The extra fields, without an allocation per message.
        let names = pri.map(|(p, _)| (FACILITIES[p >> 3], SEVERITIES[p & 7]));
        let wanted: [(Option<&String>, &[u8]); 3] = [
            (
                self.facility_key.as_ref().filter(|_| names.is_some()),
                names.map_or(&b""[..], |(f, _)| f.as_bytes()),
            ),
            (
                self.severity_key.as_ref().filter(|_| names.is_some()),
                names.map_or(&b""[..], |(_, s)| s.as_bytes()),
            ),
            (self.source_address_key.as_ref(), peer.address.as_bytes()),
        ];
        let mut slots: [(&[u8], &[u8]); 3] = [(b"", b""); 3];
        let mut n = 0;
        for (k, v) in wanted {
            if let Some(k) = k {
                slots[n] = (k.as_bytes(), v);
                n += 1;
            }
        }
        let extra = &slots[..n];
        let tag = pri.map_or(&self.unmatched, |(p, _)| &self.tags[p]);
        // RFC 3164 without a HOSTNAME: this machine's name is put in.
        let with_host;
        let after_pri = match (rfc5424, hostless_3164(after_pri)) {
            (None, Some(at)) => {
                with_host = [
                    &after_pri[..at],
                    self.hostname.as_bytes(),
                    b" ",
                    &after_pri[at..],
                ]
                .concat();
                &with_host[..]
            }
            _ => after_pri,
        };
        let mut ok = true;
        out.push(tag, |buf| {
            buf.push(0x92);
            let at = buf.len();
            buf.extend_from_slice(&now.to_bytes());
            let record = buf.len();
            let parsed = match (pri, rfc5424) {
                (None, _) => Err("no <PRI> at the start of the message".to_string()),
                (Some(_), Some(None)) => Err("no RFC 5424 version after the <PRI>".to_string()),
                (Some(_), Some(Some(v))) => {
                    Ok(self.rfc5424.parse_with(&after_pri[v..], extra, buf))
                }
                (Some(_), None) => Ok(self.rfc3164.parse_with(after_pri, extra, buf)),
            };
            match parsed {
                Ok(p) if p.ok => {
                    if let Some(t) = p.time {
                        buf[at..at + 10].copy_from_slice(&t.to_bytes());
                    }
                }
                other => {
                    // Kept as received, with the reason.
                    let reason = match other {
                        Err(e) => e,
                        Ok(_) => format!(
                            "not an RFC {} syslog message",
                            if rfc5424.is_some() { 5424 } else { 3164 }
                        ),
                    };
                    buf.truncate(record);
                    write_map_len(buf, 2 + extra.len());
                    write_str(buf, b"message");
                    write_str(buf, msg);
                    write_str(buf, b"parse_error");
                    write_str(buf, reason.as_bytes());
                    for (k, v) in extra {
                        write_str(buf, k);
                        write_str(buf, v);
                    }
                    ok = false;
                }
            }
        });
        ok
    }
}

impl InputPlugin for SyslogInputConfig {
    const TYPE: &'static str = "syslog";
    const DOC: &'static str = "Receives RFC 3164 and RFC 5424 syslog messages over UDP, TCP (octet counting or newlines) or a UNIX socket; tags them `<tag>.<facility>.<severity>` as Fluentd does (see [Syslog](syslog.md)).";

    fn build(self, cx: &mut BuildContext) -> Result<Box<dyn Input>, OptionError> {
        let endpoint = self.endpoint()?;
        let key = if self.bind.is_some() { "bind" } else { "path" };
        cx.listen(key, endpoint.listen());
        if let Some(p) = &self.path {
            cx.writes_file("path", p);
        }
        if self.tag.trim().is_empty() {
            return Err(OptionError::new("tag", "must not be empty"));
        }
        self.check_connections()?;
        let on = self.tls.as_ref().is_some_and(|t| t.enable);
        if on && !matches!(endpoint, Endpoint::Tcp(_)) {
            return Err(OptionError::new(
                "tls",
                "TLS is for TCP: set bind and protocol = \"tcp\" (no TLS over UDP or a UNIX socket)",
            ));
        }
        let tls = TlsServer::build(self.tls.as_ref(), cx)?;
        Ok(Box::new(SyslogInput { cfg: self, tls }))
    }
}

/// A built syslog input: its options and its TLS files, loaded.
struct SyslogInput {
    cfg: SyslogInputConfig,
    tls: Option<Arc<TlsServer>>,
}

#[async_trait::async_trait]
impl Input for SyslogInput {
    async fn start(self: Box<Self>, cx: InputContext) -> anyhow::Result<Vec<JoinHandle<()>>> {
        let cfg = &self.cfg;
        let endpoint = cfg
            .endpoint()
            .map_err(|e| anyhow::anyhow!("{}: {e}", cx.name))?;
        let settings = cfg.settings(self.tls.clone());
        sockets::start(endpoint, settings, Box::new(cfg.decoder()?), cx).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(cfg: &str, msg: &str) -> (String, rmpv::Value, EventTime, bool) {
        let cfg: SyslogInputConfig = toml::from_str(cfg).unwrap();
        let d = cfg.decoder().unwrap();
        let mut out = Batches::default();
        let peer = Peer {
            label: "192.0.2.1:514".into(),
            address: "192.0.2.1".into(),
        };
        let now = EventTime::new(1_700_000_000, 0);
        let ok = d.decode(msg.as_bytes(), &peer, now, &mut out);
        let (tag, bytes, n) = out.take().pop().unwrap();
        assert_eq!(n, 1);
        let mut rd = &bytes[..];
        let v = rmpv::decode::read_value(&mut rd).unwrap();
        assert!(rd.is_empty());
        let time = match &v[0] {
            rmpv::Value::Ext(0, b) => EventTime::from_payload(b),
            other => panic!("time {other}"),
        };
        (tag, v[1].clone(), time, ok)
    }

    fn field<'a>(v: &'a rmpv::Value, k: &str) -> &'a str {
        v.as_map()
            .unwrap()
            .iter()
            .find(|(kk, _)| kk.as_str() == Some(k))
            .and_then(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("{k} in {v}"))
    }

    const CFG: &str = "bind = \"127.0.0.1:5140\"\ntag = \"sys\"\nfacility_key = \"facility\"\nseverity_key = \"severity\"\nsource_address_key = \"from\"";

    #[test]
    fn rfc5424_with_structured_data() {
        let (tag, v, t, ok) = decode(
            CFG,
            r#"<165>1 2003-10-11T22:14:15.003Z mymachine.example.com evntslog - ID47 [exampleSDID@32473 iut="3" eventSource="Application"] An application event"#,
        );
        assert!(ok, "{v}");
        assert_eq!(tag, "sys.local4.notice");
        assert_eq!(t, EventTime::new(1_065_910_455, 3_000_000));
        assert_eq!(field(&v, "host"), "mymachine.example.com");
        assert_eq!(field(&v, "ident"), "evntslog");
        assert_eq!(field(&v, "pid"), "-");
        assert_eq!(field(&v, "msgid"), "ID47");
        assert_eq!(
            field(&v, "extradata"),
            r#"[exampleSDID@32473 iut="3" eventSource="Application"]"#
        );
        assert_eq!(field(&v, "message"), "An application event");
        assert_eq!(field(&v, "facility"), "local4");
        assert_eq!(field(&v, "severity"), "notice");
        assert_eq!(field(&v, "from"), "192.0.2.1");
        assert!(v
            .as_map()
            .unwrap()
            .iter()
            .all(|(k, _)| k.as_str() != Some("pri")));
    }

    #[test]
    fn rfc3164() {
        let (tag, v, _, ok) = decode(
            CFG,
            "<34>Oct 11 22:14:15 mymachine su[77]: 'su root' failed",
        );
        assert!(ok, "{v}");
        assert_eq!(tag, "sys.auth.crit");
        assert_eq!(field(&v, "host"), "mymachine");
        assert_eq!(field(&v, "ident"), "su");
        assert_eq!(field(&v, "pid"), "77");
        assert_eq!(field(&v, "message"), "'su root' failed");
        // Without a HOSTNAME (as written to /dev/log).
        let (_, v, _, ok) = decode(CFG, "<13>Nov  4 12:52:24 app[9]: hello unix");
        assert!(ok, "{v}");
        let here = gethostname::gethostname().to_string_lossy().into_owned();
        assert_eq!(field(&v, "host"), here);
        assert_eq!(field(&v, "ident"), "app");
        assert_eq!(field(&v, "pid"), "9");
        assert_eq!(field(&v, "message"), "hello unix");
    }

    #[test]
    fn malformed_messages_are_kept_with_the_reason() {
        let (tag, v, t, ok) = decode(CFG, "garbage without a priority");
        assert!(!ok);
        assert_eq!(tag, "sys.unmatched");
        assert_eq!(t, EventTime::new(1_700_000_000, 0));
        assert_eq!(field(&v, "message"), "garbage without a priority");
        assert!(field(&v, "parse_error").contains("PRI"));
        assert_eq!(field(&v, "from"), "192.0.2.1");
        // A readable PRI tags it even when the rest is not syslog.
        let (tag, v, _, ok) = decode(CFG, "<11>1 not-a-time");
        assert!(!ok);
        assert_eq!(tag, "sys.user.err");
        assert_eq!(field(&v, "message"), "<11>1 not-a-time");
        assert!(field(&v, "parse_error").contains("5424"), "{v}");
        assert_eq!(field(&v, "severity"), "err");
        // Out of range.
        let (tag, _, _, ok) = decode(CFG, "<192>Oct 11 22:14:15 h a: m");
        assert!(!ok);
        assert_eq!(tag, "sys.unmatched");
        // Forced RFC 5424 on a 3164 message.
        let cfg = format!("{CFG}\nmessage_format = \"rfc5424\"");
        let (_, v, _, ok) = decode(&cfg, "<34>Oct 11 22:14:15 mymachine su: x");
        assert!(!ok);
        assert!(field(&v, "parse_error").contains("version"), "{v}");
    }
}
