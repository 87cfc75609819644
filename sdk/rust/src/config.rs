//! Client configuration: every option, its default, and parsing from strings
//! (used by the C API and by applications that read options from a file).

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::Error;

/// Where a server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `host:port` (TCP).
    Tcp(String),
    /// A UNIX stream socket path.
    Unix(PathBuf),
}

impl Endpoint {
    /// Parses `host:port`, `tcp://host:port` or `unix:///path/to.sock`.
    pub fn parse(s: &str) -> Result<Self, Error> {
        let s = s.trim();
        if let Some(p) = s.strip_prefix("unix://") {
            if p.is_empty() {
                return Err(Error::Config(format!("empty UNIX socket path in {s:?}")));
            }
            return Ok(Endpoint::Unix(PathBuf::from(p)));
        }
        let hp = s.strip_prefix("tcp://").unwrap_or(s);
        match hp.rsplit_once(':') {
            Some((h, p)) if !h.is_empty() && p.parse::<u16>().is_ok() => {
                Ok(Endpoint::Tcp(hp.to_string()))
            }
            _ => Err(Error::Config(format!(
                "server {s:?}: expected host:port, tcp://host:port or unix:///path"
            ))),
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Tcp(a) => write!(f, "tcp://{a}"),
            Endpoint::Unix(p) => write!(f, "unix://{}", p.display()),
        }
    }
}

/// What `emit` does when the memory buffer is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    /// Write the event to the spill file (`spill_path`); drop (counted) when
    /// that file reached `spill_limit` too, or when no path is set.
    Spill,
    /// Wait until the sender made room (or `block_timeout` passed, then drop).
    Block,
    /// Drop the event and count it.
    Drop,
}

impl Overflow {
    pub fn parse(s: &str) -> Result<Self, Error> {
        match s {
            "spill" => Ok(Overflow::Spill),
            "block" => Ok(Overflow::Block),
            "drop" => Ok(Overflow::Drop),
            _ => Err(Error::Config(format!(
                "overflow {s:?}: expected \"spill\", \"block\" or \"drop\""
            ))),
        }
    }
}

/// Compression of the frames' payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compress {
    /// PackedForward.
    None,
    /// CompressedPackedForward with gzip (`"compressed": "gzip"`).
    Gzip,
}

/// The error callback: called from the sender thread (and from `emit` when an
/// event is dropped), so it must be quick and must not call back into the
/// logger's `flush`/`close`.
pub type ErrorHandler = Arc<dyn Fn(&Error) + Send + Sync>;

/// All options of a [`crate::Logger`]. Build one with [`Config::new`] and the
/// setters, or with [`Config::set`] from `key`/`value` strings.
#[derive(Clone)]
pub struct Config {
    /// Servers in order of preference; the first is the primary. Default `127.0.0.1:24224`.
    pub servers: Vec<Endpoint>,
    /// Most bytes of encoded events held in memory (pending + in flight). Default 32 MiB.
    pub buffer_limit: usize,
    /// A batch is sent once this many bytes are pending for it. Default 1 MiB.
    pub batch_bytes: usize,
    /// Longest time an event waits in memory before its batch is sent. Default 100 ms.
    pub flush_interval: Duration,
    /// Payload compression. Default `None`.
    pub compress: Compress,
    /// What to do when the memory buffer is full. Default `Spill` (which drops when no `spill_path`).
    pub overflow: Overflow,
    /// Spill file for `Overflow::Spill`; also where unsent events go at close. Default none.
    pub spill_path: Option<PathBuf>,
    /// Largest size of the spill file in bytes. Default 256 MiB.
    pub spill_limit: u64,
    /// With `Overflow::Block`: longest wait in `emit` before the event is dropped (default 10 s); `None` waits forever.
    pub block_timeout: Option<Duration>,
    /// At-least-once: send a `chunk` id with every frame and resend frames not acked in `ack_timeout`.
    pub require_ack: bool,
    /// How long to wait for an ack before reconnecting and resending. Default 10 s.
    pub ack_timeout: Duration,
    /// Connect timeout per server. Default 5 s.
    pub connect_timeout: Duration,
    /// Write timeout; a write that stalls longer breaks the connection. Default 10 s.
    pub write_timeout: Duration,
    /// First reconnect delay. Default 100 ms.
    pub backoff_base: Duration,
    /// Largest reconnect delay. Default 30 s.
    pub backoff_max: Duration,
    /// While connected to a secondary, try the primary again this often. Default 10 s.
    pub primary_retry: Duration,
    /// Shared key for the HELO/PING/PONG handshake; none = no handshake.
    pub shared_key: Option<String>,
    /// User name for the handshake's user authentication (empty = none).
    pub username: String,
    /// Password for the handshake's user authentication.
    pub password: String,
    /// Hostname sent in PING. Default: this machine's hostname.
    pub client_hostname: Option<String>,
    /// Time to deliver buffered events when the logger is dropped. Default 10 s.
    pub close_timeout: Duration,
    /// Called with every error the sender meets (connect, write, handshake, ack timeout, drop).
    pub error_handler: Option<ErrorHandler>,
    /// TLS for TCP servers (cargo feature `tls`); `None` = plain TCP.
    #[cfg(feature = "tls")]
    pub tls: Option<crate::tls::TlsConfig>,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("servers", &self.servers)
            .field("buffer_limit", &self.buffer_limit)
            .field("batch_bytes", &self.batch_bytes)
            .field("flush_interval", &self.flush_interval)
            .field("overflow", &self.overflow)
            .field("spill_path", &self.spill_path)
            .field("spill_limit", &self.spill_limit)
            .field("require_ack", &self.require_ack)
            .field("ack_timeout", &self.ack_timeout)
            .field("shared_key", &self.shared_key.as_ref().map(|_| "<set>"))
            .finish_non_exhaustive()
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            servers: vec![Endpoint::Tcp("127.0.0.1:24224".into())],
            buffer_limit: 32 << 20,
            batch_bytes: 1 << 20,
            flush_interval: Duration::from_millis(100),
            compress: Compress::None,
            overflow: Overflow::Spill,
            spill_path: None,
            spill_limit: 256 << 20,
            block_timeout: Some(Duration::from_secs(10)),
            require_ack: false,
            ack_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(10),
            backoff_base: Duration::from_millis(100),
            backoff_max: Duration::from_secs(30),
            primary_retry: Duration::from_secs(10),
            shared_key: None,
            username: String::new(),
            password: String::new(),
            client_hostname: None,
            close_timeout: Duration::from_secs(10),
            error_handler: None,
            #[cfg(feature = "tls")]
            tls: None,
        }
    }
}

fn parse_duration(key: &str, v: &str) -> Result<Duration, Error> {
    let v = v.trim();
    let bad = || {
        Error::Config(format!(
            "{key} = {v:?}: expected a duration like 250ms, 5s, 2m"
        ))
    };
    let (num, unit) = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .map_or((v, "s"), |i| (&v[..i], &v[i..]));
    let n: f64 = num.parse().map_err(|_| bad())?;
    let secs = match unit.trim() {
        "ns" => n / 1e9,
        "us" => n / 1e6,
        "ms" => n / 1e3,
        "s" | "" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(bad()),
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(secs))
}

fn parse_size(key: &str, v: &str) -> Result<u64, Error> {
    let v = v.trim();
    let bad = || {
        Error::Config(format!(
            "{key} = {v:?}: expected a size like 4096, 64KiB, 8MiB, 1GiB"
        ))
    };
    let i = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let n: u64 = v[..i].parse().map_err(|_| bad())?;
    let mult = match v[i..].trim() {
        "" | "B" => 1,
        "K" | "KB" | "KiB" | "k" => 1 << 10,
        "M" | "MB" | "MiB" => 1 << 20,
        "G" | "GB" | "GiB" => 1 << 30,
        _ => return Err(bad()),
    };
    n.checked_mul(mult).ok_or_else(bad)
}

fn parse_bool(key: &str, v: &str) -> Result<bool, Error> {
    match v.trim() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(Error::Config(format!(
            "{key} = {v:?}: expected true or false"
        ))),
    }
}

impl Config {
    pub fn new() -> Self {
        Config::default()
    }

    /// Replaces the server list (the first is the primary).
    pub fn servers<I, S>(mut self, servers: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.servers = servers
            .into_iter()
            .map(|s| Endpoint::parse(s.as_ref()))
            .collect::<Result<_, _>>()?;
        Ok(self)
    }

    /// Sets one option from strings; the keys are the field names of [`Config`]
    /// (`servers` takes a comma-separated list; durations read `250ms`, `5s`;
    /// sizes read `4096`, `64KiB`, `8MiB`).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), Error> {
        match key {
            "servers" | "server" => {
                let list: Vec<&str> = value.split(',').filter(|s| !s.trim().is_empty()).collect();
                if list.is_empty() {
                    return Err(Error::Config(
                        "servers: at least one server is needed".into(),
                    ));
                }
                self.servers = list
                    .into_iter()
                    .map(Endpoint::parse)
                    .collect::<Result<_, _>>()?;
            }
            "buffer_limit" => self.buffer_limit = parse_size(key, value)? as usize,
            "batch_bytes" => self.batch_bytes = parse_size(key, value)? as usize,
            "flush_interval" => self.flush_interval = parse_duration(key, value)?,
            "overflow" => self.overflow = Overflow::parse(value.trim())?,
            "compress" => {
                self.compress = match value.trim() {
                    "" | "none" | "text" => Compress::None,
                    "gzip" => Compress::Gzip,
                    v => {
                        return Err(Error::Config(format!(
                            "compress = {v:?}: expected \"none\" or \"gzip\""
                        )))
                    }
                }
            }
            "spill_path" => {
                self.spill_path = if value.is_empty() {
                    None
                } else {
                    Some(PathBuf::from(value))
                }
            }
            "spill_limit" => self.spill_limit = parse_size(key, value)?,
            "block_timeout" => {
                self.block_timeout = if value.is_empty() || value == "none" {
                    None
                } else {
                    Some(parse_duration(key, value)?)
                }
            }
            "require_ack" => self.require_ack = parse_bool(key, value)?,
            "ack_timeout" => self.ack_timeout = parse_duration(key, value)?,
            "connect_timeout" => self.connect_timeout = parse_duration(key, value)?,
            "write_timeout" => self.write_timeout = parse_duration(key, value)?,
            "backoff_base" => self.backoff_base = parse_duration(key, value)?,
            "backoff_max" => self.backoff_max = parse_duration(key, value)?,
            "primary_retry" => self.primary_retry = parse_duration(key, value)?,
            "shared_key" => {
                self.shared_key = if value.is_empty() {
                    None
                } else {
                    Some(value.to_string())
                }
            }
            "username" => self.username = value.to_string(),
            "password" => self.password = value.to_string(),
            "client_hostname" => self.client_hostname = Some(value.to_string()),
            "close_timeout" => self.close_timeout = parse_duration(key, value)?,
            #[cfg(feature = "tls")]
            "tls" => {
                if parse_bool(key, value)? {
                    self.tls.get_or_insert_with(Default::default);
                } else {
                    self.tls = None;
                }
            }
            #[cfg(feature = "tls")]
            "tls_ca_file" | "tls_server_name" | "tls_cert_file" | "tls_key_file" => {
                let t = self.tls.get_or_insert_with(Default::default);
                let v = (!value.is_empty()).then(|| value.to_string());
                match key {
                    "tls_ca_file" => t.ca_file = v.map(PathBuf::from),
                    "tls_server_name" => t.server_name = v,
                    "tls_cert_file" => t.cert_file = v.map(PathBuf::from),
                    _ => t.key_file = v.map(PathBuf::from),
                }
            }
            _ => return Err(Error::Config(format!("unknown option {key:?}"))),
        }
        Ok(())
    }

    pub fn buffer_limit(mut self, bytes: usize) -> Self {
        self.buffer_limit = bytes;
        self
    }
    pub fn batch_bytes(mut self, bytes: usize) -> Self {
        self.batch_bytes = bytes;
        self
    }
    pub fn flush_interval(mut self, d: Duration) -> Self {
        self.flush_interval = d;
        self
    }
    pub fn compress(mut self, c: Compress) -> Self {
        self.compress = c;
        self
    }
    pub fn overflow(mut self, o: Overflow) -> Self {
        self.overflow = o;
        self
    }
    pub fn spill_path(mut self, p: impl Into<PathBuf>) -> Self {
        self.spill_path = Some(p.into());
        self
    }
    pub fn spill_limit(mut self, bytes: u64) -> Self {
        self.spill_limit = bytes;
        self
    }
    pub fn block_timeout(mut self, d: Option<Duration>) -> Self {
        self.block_timeout = d;
        self
    }
    pub fn require_ack(mut self, on: bool) -> Self {
        self.require_ack = on;
        self
    }
    pub fn ack_timeout(mut self, d: Duration) -> Self {
        self.ack_timeout = d;
        self
    }
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }
    pub fn write_timeout(mut self, d: Duration) -> Self {
        self.write_timeout = d;
        self
    }
    pub fn backoff(mut self, base: Duration, max: Duration) -> Self {
        self.backoff_base = base;
        self.backoff_max = max;
        self
    }
    pub fn primary_retry(mut self, d: Duration) -> Self {
        self.primary_retry = d;
        self
    }
    pub fn shared_key(mut self, key: impl Into<String>) -> Self {
        self.shared_key = Some(key.into());
        self
    }
    pub fn user(mut self, username: impl Into<String>, password: impl Into<String>) -> Self {
        self.username = username.into();
        self.password = password.into();
        self
    }
    pub fn client_hostname(mut self, h: impl Into<String>) -> Self {
        self.client_hostname = Some(h.into());
        self
    }
    pub fn close_timeout(mut self, d: Duration) -> Self {
        self.close_timeout = d;
        self
    }
    pub fn on_error(mut self, f: impl Fn(&Error) + Send + Sync + 'static) -> Self {
        self.error_handler = Some(Arc::new(f));
        self
    }

    /// Turns TLS on with these settings (cargo feature `tls`).
    #[cfg(feature = "tls")]
    pub fn tls(mut self, t: crate::tls::TlsConfig) -> Self {
        self.tls = Some(t);
        self
    }

    pub(crate) fn validate(&self) -> Result<(), Error> {
        if self.servers.is_empty() {
            return Err(Error::Config(
                "servers: at least one server is needed".into(),
            ));
        }
        if self.batch_bytes == 0 || self.buffer_limit == 0 {
            return Err(Error::Config(
                "batch_bytes and buffer_limit must be positive".into(),
            ));
        }
        if self.backoff_base.is_zero() {
            return Err(Error::Config("backoff_base must be positive".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_options() {
        let mut c = Config::new();
        c.set("servers", "a:1, unix:///tmp/x.sock").unwrap();
        assert_eq!(
            c.servers,
            vec![
                Endpoint::Tcp("a:1".into()),
                Endpoint::Unix("/tmp/x.sock".into())
            ]
        );
        c.set("flush_interval", "250ms").unwrap();
        assert_eq!(c.flush_interval, Duration::from_millis(250));
        c.set("buffer_limit", "8MiB").unwrap();
        assert_eq!(c.buffer_limit, 8 << 20);
        c.set("overflow", "drop").unwrap();
        assert_eq!(c.overflow, Overflow::Drop);
        c.set("require_ack", "true").unwrap();
        assert!(c.require_ack);
        assert!(c.set("nope", "1").is_err());
        assert!(c.set("overflow", "later").is_err());
        assert!(c.set("servers", "nohost").is_err());
    }
}
