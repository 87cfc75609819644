//! What the `redis` input and output share: the connection options
//! (address or UNIX socket, ACL user and password, database, TLS), turning
//! them into a `redis::Client`, and telling a Redis error that a retry can
//! fix from one that it cannot.
//!
//! The options are declared by [`redis_options!`], which appends them to a
//! plugin's own options struct (serde's `flatten` would lose the line
//! numbers of errors and cannot deny unknown keys).

use std::time::Duration;

use ::redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use ::redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisError};
use nagare_core::plugin::OptionError;

use crate::net::tls::{TlsOptions, TlsVersion};

/// Declares a redis plugin's options struct with the connection options
/// appended, and `connection()` to read them.
macro_rules! redis_options {
    ($($plugin:tt)*) => {
        nagare_core::option_group! {
            [$($plugin)*]
            fields {
                /// The server: "HOST:PORT", "redis://HOST:PORT/DB" or
                /// "rediss://HOST:PORT" (TLS) (default "127.0.0.1:6379").
                #[serde_inline_default("127.0.0.1:6379".into())]
                pub address: String,
                /// A UNIX socket of the server, instead of `address`.
                #[serde(default)]
                pub path: Option<String>,
                /// The `redis` output only: nodes of a Redis Cluster ("HOST:PORT"
                /// or URLs), instead of `address`; the output learns the other
                /// nodes and sends each key to the node that holds it.
                #[serde(default)]
                pub addresses: Vec<String>,
                /// Redis Sentinel: sentinels ("HOST:PORT" or URLs, with the
                /// sentinels' own password in the URL, "redis://:PASS@HOST:PORT"),
                /// instead of `address`. The client asks them for the master
                /// `master_name` and, after a failover, asks again and follows the
                /// new master.
                #[serde(default)]
                pub sentinels: Vec<String>,
                /// Redis Sentinel: the name the sentinels know the master by
                /// (their `sentinel monitor NAME …`) (default "mymaster").
                #[serde_inline_default("mymaster".into())]
                pub master_name: String,
                /// The ACL user (Redis 6 and later); without one, `password` is
                /// checked against the default user.
                #[serde(default)]
                pub username: Option<String>,
                /// The password (AUTH).
                #[serde(default)]
                pub password: Option<String>,
                /// The database number (SELECT) (default 0).
                #[serde(default)]
                pub db: i64,
                /// TLS (`ca`, `cert`, `key`, `verify`; see docs/tls.md); setting
                /// this table, or an address "rediss://…", turns TLS on.
                #[serde(default)]
                pub tls: Option<crate::net::tls::TlsOptions>,
            }
            impl {
                fn connection(&self) -> crate::proto::redis::conn::Connection<'_> {
                    crate::proto::redis::conn::Connection {
                        address: &self.address,
                        path: self.path.as_deref(),
                        addresses: &self.addresses,
                        sentinels: &self.sentinels,
                        master_name: &self.master_name,
                        username: self.username.as_deref(),
                        password: self.password.as_deref(),
                        db: self.db,
                        tls: self.tls.as_ref(),
                    }
                }
            }
        }
    };
}
pub(crate) use redis_options;

/// The connection options of one plugin section.
pub struct Connection<'a> {
    pub address: &'a str,
    pub path: Option<&'a str>,
    pub addresses: &'a [String],
    pub sentinels: &'a [String],
    pub master_name: &'a str,
    pub username: Option<&'a str>,
    pub password: Option<&'a str>,
    pub db: i64,
    pub tls: Option<&'a TlsOptions>,
}

impl Connection<'_> {
    /// The client for these options; no I/O but reading the TLS files.
    /// Errors name the option.
    pub fn client(&self) -> Result<::redis::Client, OptionError> {
        let mut info: ConnectionInfo = match self.path {
            Some(path) => ConnectionAddr::Unix(path.into())
                .into_connection_info()
                .map_err(|e| OptionError::new("path", e.to_string()))?,
            None => tcp_info("address", self.address)?,
        };
        let mut redis = info.redis_settings().clone();
        if let Some(u) = self.username {
            redis = redis.set_username(u);
        }
        if let Some(p) = self.password {
            redis = redis.set_password(p);
        }
        if self.db != 0 {
            redis = redis.set_db(self.db);
        }
        info = info.set_redis_settings(redis);
        let tls_url = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
        let Some(tls) = self.tls_options(tls_url)? else {
            return ::redis::Client::open(info)
                .map_err(|e| OptionError::new("address", e.to_string()));
        };
        crate::net::tls::provider();
        let addr = match info.addr().clone() {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                ConnectionAddr::TcpTls {
                    host,
                    port,
                    insecure: !tls.verify,
                    tls_params: None,
                }
            }
            _ => {
                return Err(OptionError::new(
                    "tls",
                    "TLS needs a TCP `address`, not a UNIX socket `path`",
                ))
            }
        };
        info = info.set_addr(addr);
        ::redis::Client::build_with_tls(info, certificates(&tls)?)
            .map_err(|e| OptionError::new("tls", e.to_string()))
    }

    /// A Redis Cluster client when `addresses` is set; no I/O but reading
    /// the TLS files.
    pub fn cluster_client(
        &self,
        timeout: Duration,
    ) -> Result<Option<::redis::cluster::ClusterClient>, OptionError> {
        if self.addresses.is_empty() {
            return Ok(None);
        }
        if self.path.is_some() {
            return Err(OptionError::new(
                "addresses",
                "a cluster is reached over TCP: set `addresses` or `path`, not both",
            ));
        }
        if self.db != 0 {
            return Err(OptionError::new(
                "db",
                "a Redis Cluster has only database 0",
            ));
        }
        let nodes = self
            .addresses
            .iter()
            .map(|a| tcp_info("addresses", a))
            .collect::<Result<Vec<_>, _>>()?;
        let tls_url = nodes
            .iter()
            .any(|n| matches!(n.addr(), ConnectionAddr::TcpTls { .. }));
        let mut b = ::redis::cluster::ClusterClient::builder(nodes)
            .connection_timeout(timeout)
            .response_timeout(timeout);
        if let Some(u) = self.username {
            b = b.username(u);
        }
        if let Some(p) = self.password {
            b = b.password(p);
        }
        if let Some(tls) = self.tls_options(tls_url)? {
            crate::net::tls::provider();
            let mode = if tls.verify {
                ::redis::TlsMode::Secure
            } else {
                ::redis::TlsMode::Insecure
            };
            b = b.tls(mode).certs(certificates(&tls)?);
        }
        b.build()
            .map(Some)
            .map_err(|e| OptionError::new("addresses", e.to_string()))
    }
}

impl Connection<'_> {
    /// The one server a plugin talks to: the master the sentinels name when
    /// `sentinels` is set (then `address` is not read: a plain client would
    /// fail on an address `check` lets through), else `address`/`path`.
    pub fn server(&self) -> Result<Server, OptionError> {
        match self.sentinel()? {
            Some(s) => Ok(Server::Sentinel(s)),
            None => self.client().map(Server::One),
        }
    }

    /// A Redis Sentinel client when `sentinels` is set; no I/O but reading
    /// the TLS files. The credentials, database and `tls` table apply to
    /// the master; a sentinel's own password goes in its URL.
    pub fn sentinel(&self) -> Result<Option<Sentinel>, OptionError> {
        if self.sentinels.is_empty() {
            return Ok(None);
        }
        if self.path.is_some() || !self.addresses.is_empty() {
            return Err(OptionError::new(
                "sentinels",
                "set `sentinels` or `path` or `addresses`, not several",
            ));
        }
        if self.master_name.is_empty() {
            return Err(OptionError::new(
                "master_name",
                "must name the master the sentinels watch",
            ));
        }
        let nodes = self
            .sentinels
            .iter()
            .map(|a| tcp_info("sentinels", a))
            .collect::<Result<Vec<_>, _>>()?;
        // The builder takes one set of sentinel credentials: those of the
        // first URL that has some.
        let auth = nodes
            .iter()
            .map(|n| n.redis_settings())
            .find(|r| r.password().is_some());
        let sentinel_tls = nodes
            .iter()
            .any(|n| matches!(n.addr(), ConnectionAddr::TcpTls { .. }));
        let tls = self.tls_options(false)?;
        let mut b = SentinelClientBuilder::new(
            nodes.iter().map(|n| n.addr().clone()),
            self.master_name,
            SentinelServerType::Master,
        )
        .map_err(|e| OptionError::new("sentinels", e.to_string()))?;
        if let Some(r) = auth {
            if let Some(u) = r.username() {
                b = b.set_client_to_sentinel_username(u);
            }
            if let Some(p) = r.password() {
                b = b.set_client_to_sentinel_password(p);
            }
        }
        if let Some(u) = self.username {
            b = b.set_client_to_redis_username(u);
        }
        if let Some(p) = self.password {
            b = b.set_client_to_redis_password(p);
        }
        if self.db != 0 {
            b = b.set_client_to_redis_db(self.db);
        }
        if sentinel_tls || tls.is_some() {
            crate::net::tls::provider();
        }
        if let Some(tls) = &tls {
            let mode = if tls.verify {
                ::redis::TlsMode::Secure
            } else {
                ::redis::TlsMode::Insecure
            };
            b = b
                .set_client_to_redis_tls_mode(mode)
                .set_client_to_redis_certificates(certificates(tls)?);
            if sentinel_tls {
                b = b
                    .set_client_to_sentinel_tls_mode(mode)
                    .set_client_to_sentinel_certificates(certificates(tls)?);
            }
        }
        let client = b
            .build()
            .map_err(|e| OptionError::new("sentinels", e.to_string()))?;
        Ok(Some(Sentinel {
            client: tokio::sync::Mutex::new(client),
            name: format!(
                "sentinel master {:?} via {}",
                self.master_name,
                self.sentinels.join(",")
            ),
        }))
    }

    /// TLS for a connection that is not the redis crate's (the input's
    /// lists, see resp.rs): the same `tls` table, or rediss://, read
    /// into a [`TlsClient`] (None when TLS is off).
    pub fn tls_client(
        &self,
        name: &str,
    ) -> Result<Option<std::sync::Arc<crate::net::tls::TlsClient>>, OptionError> {
        let tls_url = self.sentinels.is_empty()
            && self.path.is_none()
            && self.address.starts_with("rediss://");
        // On when the table or the URL says so, whatever the table's
        // `enable` (rediss:// alone turns TLS on, with the default settings).
        let opts = self
            .tls_options(tls_url)?
            .map(|o| TlsOptions { enable: true, ..o });
        crate::net::tls::TlsClient::build(
            opts.as_ref(),
            &mut nagare_core::plugin::BuildContext::new(name),
        )
    }

    /// The `tls` table when TLS is on (it is, or the address is rediss://),
    /// refusing the keys the redis client has no setting for.
    fn tls_options(&self, tls_url: bool) -> Result<Option<TlsOptions>, OptionError> {
        let tls = match self.tls {
            Some(t) if t.enable || tls_url => t.clone(),
            _ if tls_url => TlsOptions::default(),
            _ => return Ok(None),
        };
        if tls.server_name.is_some() {
            return Err(OptionError::new(
                "tls.server_name",
                "the redis client checks the host of `address`; it has no server_name setting",
            ));
        }
        if tls.min_version != TlsVersion::default() {
            return Err(OptionError::new(
                "tls.min_version",
                "the redis client has no min_version setting (it offers TLS 1.2 and 1.3)",
            ));
        }
        Ok(Some(tls))
    }
}

/// One server (not a Cluster): `address`/`path`, or the master the
/// sentinels name.
pub enum Server {
    One(::redis::Client),
    /// Asked for the master at each (re)connect.
    Sentinel(Sentinel),
}

impl Server {
    /// A client for the server to connect to now.
    pub async fn client(&self) -> Result<::redis::Client, RedisError> {
        match self {
            Server::Sentinel(s) => s.master().await,
            Server::One(c) => Ok(c.clone()),
        }
    }

    /// What the logs call it.
    pub fn name(&self) -> String {
        match self {
            Server::One(c) => format!("redis {}", c.get_connection_info().addr()),
            Server::Sentinel(s) => s.name.clone(),
        }
    }
}

/// A client that asks Redis Sentinel where the master is.
pub struct Sentinel {
    // The library's lookups take `&mut`; the lock is held only while one
    // asks (at a connect, never per command).
    client: tokio::sync::Mutex<SentinelClient>,
    /// What the logs call it: the master's name and the sentinels.
    pub name: String,
}

impl Sentinel {
    /// A client for the master the sentinels name now. The library checks
    /// that the node it names answers ROLE as a master, so a stale answer
    /// during a failover is an error (retried), not a write to a replica.
    pub async fn master(&self) -> Result<::redis::Client, RedisError> {
        self.client.lock().await.async_get_client().await
    }
}

/// "HOST:PORT" or a redis:// or rediss:// URL, as the option `key` holds it.
fn tcp_info(key: &str, address: &str) -> Result<ConnectionInfo, OptionError> {
    let url = if address.contains("://") {
        address.to_string()
    } else {
        format!("redis://{address}")
    };
    url.as_str().into_connection_info().map_err(|e| {
        OptionError::new(
            key,
            format!("{address:?} is not HOST:PORT or a redis:// URL: {e}"),
        )
    })
}

/// The CA and client certificate of the `tls` table, read from their files.
fn certificates(tls: &TlsOptions) -> Result<::redis::TlsCertificates, OptionError> {
    let read = |key: &str, path: &Option<String>| -> Result<Option<Vec<u8>>, OptionError> {
        path.as_ref()
            .map(|p| {
                std::fs::read(p).map_err(|e| {
                    OptionError::new(format!("tls.{key}"), format!("cannot read {p:?}: {e}"))
                })
            })
            .transpose()
    };
    let client_tls = match (read("cert", &tls.cert)?, read("key", &tls.key)?) {
        (Some(client_cert), Some(client_key)) => Some(::redis::ClientTlsConfig {
            client_cert,
            client_key,
        }),
        (None, None) => None,
        _ => {
            return Err(OptionError::new(
                "tls",
                "set both `cert` and `key`, or neither",
            ))
        }
    };
    Ok(::redis::TlsCertificates {
        client_tls,
        root_cert: read("ca", &tls.ca)?,
    })
}

/// Whether a retry can help: a reply that refuses the command itself
/// (WRONGTYPE: the key holds another type; NOPERM: the ACL user may not;
/// ERR: a command Redis cannot run) stays refused however long the buffer
/// waits; a lost connection, a timeout, OOM, LOADING, READONLY (a failover)
/// or MASTERDOWN may pass.
pub fn is_permanent(e: &RedisError) -> bool {
    let codes: Vec<String> = e
        .clone()
        .into_server_errors()
        .map(|errs| errs.iter().map(|(_, s)| s.code().to_string()).collect())
        .unwrap_or_default();
    codes.iter().any(|c| is_permanent_code(c))
}

/// [`is_permanent`] for the code of an error reply ("WRONGTYPE", …).
pub fn is_permanent_code(code: &str) -> bool {
    matches!(code, "WRONGTYPE" | "NOPERM" | "ERR")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn(address: &str) -> Connection<'_> {
        Connection {
            address,
            path: None,
            addresses: &[],
            sentinels: &[],
            master_name: "mymaster",
            username: Some("app"),
            password: Some("s3cret"),
            db: 2,
            tls: None,
        }
    }

    #[test]
    fn addresses_and_credentials() {
        let c = conn("127.0.0.1:7000").client().unwrap();
        let info = c.get_connection_info();
        assert!(matches!(info.addr(), ConnectionAddr::Tcp(h, 7000) if h == "127.0.0.1"));
        assert_eq!(info.redis_settings().username(), Some("app"));
        assert_eq!(info.redis_settings().password(), Some("s3cret"));
        assert_eq!(info.redis_settings().db(), 2);
        let tls = conn("rediss://localhost:7001").client().unwrap();
        let addr = tls.get_connection_info().addr().clone();
        assert!(
            matches!(
                addr,
                ConnectionAddr::TcpTls {
                    port: 7001,
                    insecure: false,
                    ..
                }
            ),
            "{addr:?}"
        );
        let e = conn("redis://[nope").client().unwrap_err();
        assert_eq!(e.key, "address");
    }

    #[test]
    fn tls_files_that_cannot_be_read_name_their_key() {
        let tls = TlsOptions {
            ca: Some("/nonexistent/ca.pem".into()),
            ..TlsOptions::default()
        };
        let c = Connection {
            tls: Some(&tls),
            ..conn("127.0.0.1:7000")
        };
        assert_eq!(c.client().unwrap_err().key, "tls.ca");
    }
}
