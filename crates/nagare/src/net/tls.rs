//! TLS for every listener and client (rustls, ring): the `tls` option table
//! with the same keys everywhere, its files checked when the config is
//! checked, a server side ([`TlsServer::accept`]) and a client side
//! ([`TlsClient::connect`]) over any tokio stream, and certificates reloaded
//! when their files change (new connections get the new ones; open
//! connections go on with the old).
//!
//! A plugin uses it in three places:
//!
//! ```ignore
//! // 1. its options struct
//! /// TLS: see docs/tls.md.
//! #[serde(default)]
//! pub tls: Option<crate::net::tls::TlsOptions>,
//!
//! // 2. build (also what `nagare check` runs): reads and checks the files
//! let tls = crate::net::tls::TlsServer::build(self.tls.as_ref(), cx)?;   // listener
//! let tls = crate::net::tls::TlsClient::build(self.tls.as_ref(), cx)?;   // client
//!
//! // 3. per connection (both give a MaybeTls<S>, plain when TLS is off)
//! let Some(s) = crate::net::tls::accept(&tls, tcp, &peer).await else { return };
//! let s = crate::net::tls::connect(&tls, tcp, &address).await?;
//! ```

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use nagare_core::plugin::{serde_inline_default, BuildContext, OptionError};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A TLS handshake that takes longer fails that connection.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// `tls`: TLS on a listener or a client, with the same keys in every
/// plugin. Writing the table turns TLS on (Fluent Bit's `tls on`, Fluentd's
/// `<transport tls>`); `enable = false` turns it off and keeps the rest.
#[serde_inline_default]
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TlsOptions {
    /// Use TLS (default true: the table's presence turns it on).
    #[serde_inline_default(true)]
    pub enable: bool,
    /// PEM file of this side's certificate chain, leaf first. Required on a
    /// listener; on a client, sent to servers that ask for one (mTLS).
    #[serde(default)]
    pub cert: Option<String>,
    /// PEM file of the private key of `cert` (PKCS#8, PKCS#1 or SEC1).
    #[serde(default)]
    pub key: Option<String>,
    /// PEM file of the CA certificates to trust. A client checks the server
    /// against it (default: the system's trust store); a listener with `ca`
    /// requires every client to present a certificate that chains to it (mTLS).
    #[serde(default)]
    pub ca: Option<String>,
    /// Check the peer's certificate (default true). On a client, false
    /// accepts any server certificate and name; on a listener with `ca`,
    /// false makes client certificates optional (checked when presented).
    #[serde_inline_default(true)]
    pub verify: bool,
    /// A client: the name the server's certificate must hold, and the SNI
    /// sent (default: the host of the address).
    #[serde(default)]
    pub server_name: Option<String>,
    /// The oldest TLS version accepted: "1.2" (default, as Fluentd) or "1.3".
    #[serde(default)]
    pub min_version: TlsVersion,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
pub enum TlsVersion {
    #[default]
    #[serde(rename = "1.2", alias = "TLSv1.2", alias = "TLS1_2")]
    V1_2,
    #[serde(rename = "1.3", alias = "TLSv1.3", alias = "TLS1_3")]
    V1_3,
}

impl TlsVersion {
    fn versions(self) -> &'static [&'static rustls::SupportedProtocolVersion] {
        static FROM_1_2: [&rustls::SupportedProtocolVersion; 2] =
            [&rustls::version::TLS13, &rustls::version::TLS12];
        static ONLY_1_3: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
        match self {
            TlsVersion::V1_2 => &FROM_1_2,
            TlsVersion::V1_3 => &ONLY_1_3,
        }
    }
}

/// TLS on, every other key at its default.
impl Default for TlsOptions {
    fn default() -> Self {
        TlsOptions {
            enable: true,
            cert: None,
            key: None,
            ca: None,
            verify: true,
            server_name: None,
            min_version: TlsVersion::default(),
        }
    }
}

/// The process's one crypto provider (ring), installed on first use; the
/// redis client's `rediss://` uses the same.
pub fn provider() -> Arc<CryptoProvider> {
    // An error means one is installed already, which is what we want.
    let _ = ring_provider().install_default();
    CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(ring_provider()))
}

/// ring's suites with AES-128-GCM first in each TLS version (ring's own
/// order puts AES-256-GCM first). A client offers its suites in this order
/// and a server (rustls's default) takes the client's first it supports, so
/// two nagares agree on AES-128-GCM (10 AES rounds to AES-256's 14;
/// `openssl speed -evp` on the development machine gave it 1.06-1.6x
/// AES-256-GCM's bytes per second), and a TLS relay of 1 KiB events spends
/// most of its extra CPU in the cipher. AES-128-GCM is TLS 1.3's mandatory
/// suite, and the one Go's clients prefer on hardware with AES instructions.
fn ring_provider() -> CryptoProvider {
    let mut p = rustls::crypto::ring::default_provider();
    let aes128 = [
        rustls::CipherSuite::TLS13_AES_128_GCM_SHA256,
        rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        rustls::CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    ];
    // Stable: TLS 1.3 suites stay before TLS 1.2 ones.
    p.cipher_suites
        .sort_by_key(|s| (s.tls13().is_none(), !aes128.contains(&s.suite())));
    p
}

/// The options when TLS is on.
fn enabled(opts: Option<&TlsOptions>) -> Option<&TlsOptions> {
    opts.filter(|o| o.enable)
}

// ---- the server side ----

/// A listener's TLS: accepts connections with the current certificates.
pub struct TlsServer {
    /// The plugin, for log lines.
    name: String,
    opts: TlsOptions,
    config: Reloading<ServerConfig>,
}

/// Its options (the loaded certificates are not shown).
impl std::fmt::Debug for TlsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsServer")
            .field("name", &self.name)
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

impl TlsServer {
    /// Reads and checks the files of `opts` (None when TLS is off). Errors
    /// name the key and the file; an expired certificate is a warning.
    pub fn build(
        opts: Option<&TlsOptions>,
        cx: &mut BuildContext,
    ) -> Result<Option<Arc<TlsServer>>, OptionError> {
        let Some(opts) = enabled(opts) else {
            return Ok(None);
        };
        if opts.cert.is_none() || opts.key.is_none() {
            return Err(OptionError::new(
                "tls",
                "a TLS listener needs `cert` and `key` (PEM files)",
            ));
        }
        if opts.server_name.is_some() {
            cx.warn("tls.server_name", "is for clients; a listener ignores it");
        }
        let config = server_config(opts)?;
        if let Some(w) = expiry_warning(opts) {
            cx.warn("tls.cert", w);
        }
        Ok(Some(Arc::new(TlsServer {
            name: cx.name.clone(),
            config: Reloading::new(opts, config),
            opts: opts.clone(),
        })))
    }

    /// The TLS handshake on an accepted connection. A failure is logged
    /// naming the peer and the reason and gives None: only that connection
    /// fails.
    pub async fn accept<S>(
        &self,
        s: S,
        peer: &str,
    ) -> Option<tokio_rustls::server::TlsStream<Buffered<S>>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let config = self
            .config
            .current(&self.name, || server_config(&self.opts));
        let handshake = tokio_rustls::TlsAcceptor::from(config).accept(buffered(s));
        let why = match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
            Ok(Ok(mut s)) => {
                s.get_mut().1.set_buffer_limit(Some(TLS_WRITE_LIMIT));
                return Some(s);
            }
            Err(_) => format!("no TLS handshake within {}s", HANDSHAKE_TIMEOUT.as_secs()),
            // A connection that closes before saying anything is a port
            // check (a forward output's heartbeat), not a failed client.
            Ok(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => {
                tracing::debug!(plugin = %self.name, peer = %peer, "closed before the TLS handshake");
                return None;
            }
            Ok(Err(e)) => e.to_string(),
        };
        tracing::warn!(plugin = %self.name, peer = %peer, reason = %why, "TLS handshake failed; closing connection");
        None
    }
}

/// The server side for a plugin whose TLS may be off: `s` as it is, or
/// after the handshake (None when it failed; it was logged).
pub async fn accept<S>(tls: &Option<Arc<TlsServer>>, s: S, peer: &str) -> Option<MaybeTls<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    match tls {
        None => Some(MaybeTls::Plain(s)),
        Some(t) => t
            .accept(s, peer)
            .await
            .map(|s| MaybeTls::Tls(Box::new(s.into()))),
    }
}

fn server_config(o: &TlsOptions) -> Result<ServerConfig, OptionError> {
    let provider = provider();
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(o.min_version.versions())
        .map_err(|e| OptionError::new("tls.min_version", e.to_string()))?;
    let builder = match &o.ca {
        Some(ca) => {
            let roots = Arc::new(roots("tls.ca", ca)?);
            let mut v = WebPkiClientVerifier::builder_with_provider(roots, provider);
            if !o.verify {
                v = v.allow_unauthenticated();
            }
            let v = v
                .build()
                .map_err(|e| OptionError::new("tls.ca", format!("{ca:?}: {e}")))?;
            builder.with_client_cert_verifier(v)
        }
        None => builder.with_no_client_auth(),
    };
    let key = certified_key(o)?.expect("a listener has cert and key");
    Ok(builder.with_cert_resolver(Arc::new(SingleCertAndKey::from(key))))
}

// ---- the client side ----

/// A client's TLS: connects with the current certificates.
pub struct TlsClient {
    name: String,
    opts: TlsOptions,
    config: Reloading<ClientConfig>,
}

impl TlsClient {
    /// Reads and checks the files of `opts` (None when TLS is off).
    pub fn build(
        opts: Option<&TlsOptions>,
        cx: &mut BuildContext,
    ) -> Result<Option<Arc<TlsClient>>, OptionError> {
        let Some(opts) = enabled(opts) else {
            return Ok(None);
        };
        if let Some(n) = &opts.server_name {
            ServerName::try_from(n.as_str()).map_err(|e| {
                OptionError::new(
                    "tls.server_name",
                    format!("{n:?} is not a DNS name or IP address: {e}"),
                )
            })?;
        }
        let config = client_config(opts)?;
        if let Some(w) = expiry_warning(opts) {
            cx.warn("tls.cert", w);
        }
        if !opts.verify {
            cx.warn("tls.verify", "false: any server certificate is accepted (no protection against a man in the middle)");
        }
        Ok(Some(Arc::new(TlsClient {
            name: cx.name.clone(),
            config: Reloading::new(opts, config),
            opts: opts.clone(),
        })))
    }

    /// The TLS handshake with the server at `address` ("HOST:PORT"; HOST is
    /// the name checked unless `server_name` is set). The error is the
    /// reason, for the caller's log line or retry.
    pub async fn connect<S>(
        &self,
        s: S,
        address: &str,
    ) -> Result<tokio_rustls::client::TlsStream<Buffered<S>>, String>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let name = self
            .opts
            .server_name
            .clone()
            .unwrap_or_else(|| host_of(address).to_string());
        let name = ServerName::try_from(name).map_err(|e| {
            format!("TLS: {address:?} has no valid server name ({e}); set tls.server_name")
        })?;
        let config = self
            .config
            .current(&self.name, || client_config(&self.opts));
        let handshake = tokio_rustls::TlsConnector::from(config).connect(name, buffered(s));
        match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
            Ok(Ok(mut s)) => {
                s.get_mut().1.set_buffer_limit(Some(TLS_WRITE_LIMIT));
                Ok(s)
            }
            Ok(Err(e)) => Err(format!("TLS handshake failed: {e}")),
            Err(_) => Err(format!(
                "no TLS handshake within {}s",
                HANDSHAKE_TIMEOUT.as_secs()
            )),
        }
    }
}

/// The client side for a plugin whose TLS may be off.
pub async fn connect<S>(
    tls: &Option<Arc<TlsClient>>,
    s: S,
    address: &str,
) -> Result<MaybeTls<S>, String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    match tls {
        None => Ok(MaybeTls::Plain(s)),
        Some(t) => Ok(MaybeTls::Tls(Box::new(t.connect(s, address).await?.into()))),
    }
}

/// The host of "HOST:PORT" or "[V6]:PORT".
pub fn host_of(address: &str) -> &str {
    let host = address.rsplit_once(':').map_or(address, |(h, _)| h);
    host.trim_start_matches('[').trim_end_matches(']')
}

fn client_config(o: &TlsOptions) -> Result<ClientConfig, OptionError> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(o.min_version.versions())
        .map_err(|e| OptionError::new("tls.min_version", e.to_string()))?;
    let builder = if o.verify {
        let roots = match &o.ca {
            Some(ca) => roots("tls.ca", ca)?,
            None => system_roots()?,
        };
        builder.with_root_certificates(roots)
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyServer(provider)))
    };
    let mut config = match certified_key(o)? {
        Some(key) => builder.with_client_cert_resolver(Arc::new(SingleCertAndKey::from(key))),
        None => builder.with_no_client_auth(),
    };
    // No session resumption: an OpenSSL server that verifies peers without
    // a session id context (Fluentd's in_forward with `<transport tls>`)
    // answers a resumed session with an internal-error alert, so every
    // connection after the first would fail. nagare's connections are long
    // lived; a full handshake for each costs little.
    config.resumption = rustls::client::Resumption::disabled();
    Ok(config)
}

fn system_roots() -> Result<RootCertStore, OptionError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(found.certs);
    if roots.is_empty() {
        return Err(OptionError::new(
            "tls.ca",
            "no CA certificates in the system's trust store: set `tls.ca` (or install ca-certificates)",
        ));
    }
    Ok(roots)
}

/// `verify = false` on a client: any certificate, any name. Signatures are
/// still checked, so the handshake itself is sound.
#[derive(Debug)]
struct AnyServer(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

// ---- the files ----

fn read(key: &str, path: &str) -> Result<Vec<u8>, OptionError> {
    std::fs::read(path).map_err(|e| OptionError::new(key, format!("cannot read {path:?}: {e}")))
}

/// The certificates of a PEM file; an error when it holds none.
fn certs(key: &str, path: &str) -> Result<Vec<CertificateDer<'static>>, OptionError> {
    let pem = read(key, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| OptionError::new(key, format!("{path:?} is not PEM: {e}")))?;
    if certs.is_empty() {
        return Err(OptionError::new(
            key,
            format!("{path:?} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"),
        ));
    }
    Ok(certs)
}

fn roots(key: &str, path: &str) -> Result<RootCertStore, OptionError> {
    let mut roots = RootCertStore::empty();
    for c in certs(key, path)? {
        roots.add(c).map_err(|e| {
            OptionError::new(key, format!("{path:?}: not a usable CA certificate: {e}"))
        })?;
    }
    Ok(roots)
}

/// `cert` and `key` loaded and checked to belong together; None when
/// neither is set.
fn certified_key(o: &TlsOptions) -> Result<Option<CertifiedKey>, OptionError> {
    let (cert, key) = match (&o.cert, &o.key) {
        (Some(c), Some(k)) => (c, k),
        (None, None) => return Ok(None),
        (Some(_), None) => {
            return Err(OptionError::new(
                "tls.key",
                "`tls.cert` is set: set `tls.key` too",
            ))
        }
        (None, Some(_)) => {
            return Err(OptionError::new(
                "tls.cert",
                "`tls.key` is set: set `tls.cert` too",
            ))
        }
    };
    let chain = certs("tls.cert", cert)?;
    let pem = read("tls.key", key)?;
    let der = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        let why = match e {
            rustls_pki_types::pem::Error::NoItemsFound => {
                "holds no PEM private key (-----BEGIN PRIVATE KEY-----)".to_string()
            }
            e => format!("is not a PEM private key: {e}"),
        };
        OptionError::new("tls.key", format!("{key:?} {why}"))
    })?;
    let signing = provider()
        .key_provider
        .load_private_key(der)
        .map_err(|e| OptionError::new("tls.key", format!("{key:?}: unsupported key: {e}")))?;
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().map_err(|e| {
        OptionError::new(
            "tls.key",
            format!("the key in {key:?} does not match the certificate in {cert:?} ({e})"),
        )
    })?;
    Ok(Some(certified))
}

/// A warning when `cert`'s leaf certificate is outside its validity.
fn expiry_warning(o: &TlsOptions) -> Option<String> {
    let path = o.cert.as_deref()?;
    let leaf = certs("tls.cert", path).ok()?.into_iter().next()?;
    let (_, parsed) = x509_parser::parse_x509_certificate(&leaf).ok()?;
    let validity = parsed.validity();
    let now = x509_parser::time::ASN1Time::now();
    if validity.not_after < now {
        Some(format!(
            "the certificate in {path:?} expired on {}; peers will refuse it",
            validity.not_after
        ))
    } else if validity.not_before > now {
        Some(format!(
            "the certificate in {path:?} is not valid before {}; peers will refuse it until then",
            validity.not_before
        ))
    } else {
        None
    }
}

/// A TLS config rebuilt when one of its files changes (checked on each
/// accept or connect: a few `stat`s).
struct Reloading<C> {
    files: Vec<PathBuf>,
    state: Mutex<(Vec<Option<Stamp>>, Arc<C>)>,
}

/// What tells a file changed: replaced (inode), rewritten (mtime, size).
type Stamp = (u64, SystemTime, u64);

fn stamp(path: &PathBuf) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.ino(), m.modified().ok()?, m.len()))
}

impl<C> Reloading<C> {
    fn new(o: &TlsOptions, config: C) -> Reloading<C> {
        let files: Vec<PathBuf> = [&o.cert, &o.key, &o.ca]
            .into_iter()
            .flatten()
            .map(PathBuf::from)
            .collect();
        let stamps = files.iter().map(stamp).collect();
        Reloading {
            files,
            state: Mutex::new((stamps, Arc::new(config))),
        }
    }

    /// The config, rebuilt first when a file changed. A rebuild that fails
    /// (a file half written, a key that does not match yet) keeps the
    /// previous config and is tried again at the next change.
    fn current(&self, plugin: &str, build: impl FnOnce() -> Result<C, OptionError>) -> Arc<C> {
        let stamps: Vec<Option<Stamp>> = self.files.iter().map(stamp).collect();
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.0 != stamps {
            state.0 = stamps;
            match build() {
                Ok(c) => {
                    state.1 = Arc::new(c);
                    tracing::info!(plugin = %plugin, "TLS certificates reloaded");
                }
                Err(e) => {
                    tracing::warn!(plugin = %plugin, error = %e,
                        "TLS files changed but cannot be loaded; keeping the previous certificates");
                }
            }
        }
        state.1.clone()
    }
}

// ---- the stream ----

/// A connection with or without TLS, so a plugin has one stream type.
pub enum MaybeTls<S> {
    Plain(S),
    Tls(Box<tokio_rustls::TlsStream<Buffered<S>>>),
}

/// The socket under a TLS stream. rustls reads at most 4 KiB per
/// `read_tls` (its deframer's read size), so straight on the socket a
/// 1 KiB-event relay made one read syscall per 4 KiB; this buffer takes
/// what the socket holds in one read and rustls's reads are copies from it.
/// Writes go straight through (rustls already writes its records with one
/// `writev`).
pub type Buffered<S> = tokio::io::BufReader<S>;

/// Read size of [`Buffered`]: a few TLS records (16 KiB each) per read.
const TLS_READ_SIZE: usize = 64 * 1024;

/// How much a write may encrypt before its records go out (rustls's
/// default is 64 KiB): a forward chunk of 512 KiB goes out in two `writev`s
/// instead of eight.
const TLS_WRITE_LIMIT: usize = 256 * 1024;

fn buffered<S: AsyncRead>(s: S) -> Buffered<S> {
    tokio::io::BufReader::with_capacity(TLS_READ_SIZE, s)
}

/// A peer that closes the TCP connection without a TLS close_notify ends
/// the stream as a plain close does (many clients do: Python's `close()`
/// without `unwrap()`, `openssl s_client` killed, Thrift's TSSLSocket).
/// Every protocol read through it is framed (forward, HTTP, Thrift, syslog
/// octet counting, delimited lines), so a cut message is still seen as one
/// by its framing, as on plain TCP; only a line cut exactly at its end
/// passes, as it does without TLS.
impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for MaybeTls<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_read(cx, buf),
            MaybeTls::Tls(t) => {
                let start = buf.filled().len();
                match Pin::new(t.as_mut()).poll_read(cx, buf) {
                    Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => {
                        return Poll::Ready(Ok(()))
                    }
                    Poll::Ready(Ok(())) if buf.filled().len() > start => {}
                    other => return other,
                }
                // One poll_read of the TLS stream gives one record's
                // plaintext (16 KiB at most); the caller's buffer takes
                // every record that is already here, so a reader that
                // asks for 256 KiB (the forward input) is not woken per
                // record. Stops at the first read that would wait (its
                // waker stays registered) or fails (rustls keeps the
                // error for the next call).
                while buf.remaining() > 0 {
                    let before = buf.filled().len();
                    match Pin::new(t.as_mut()).poll_read(cx, buf) {
                        Poll::Ready(Ok(())) if buf.filled().len() > before => {}
                        _ => break,
                    }
                }
                Poll::Ready(Ok(()))
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for MaybeTls<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_write(cx, buf),
            MaybeTls::Tls(t) => Pin::new(t.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            MaybeTls::Tls(t) => Pin::new(t.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            MaybeTls::Plain(s) => s.is_write_vectored(),
            MaybeTls::Tls(t) => t.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_flush(cx),
            MaybeTls::Tls(t) => Pin::new(t.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            MaybeTls::Plain(s) => Pin::new(s).poll_shutdown(cx),
            MaybeTls::Tls(t) => Pin::new(t.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two nagares agree on AES-128-GCM, and a megabyte written in odd
    /// pieces arrives whole and in order through the buffered socket and
    /// the several-records-per-read path, with a reader that asks for
    /// 256 KiB as the forward input does.
    #[tokio::test]
    async fn a_megabyte_crosses_in_aes_128_gcm_records() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let file = |name: &str, text: String| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            p.to_str().unwrap().to_string()
        };
        let cert = file("cert.pem", cert.pem());
        let key = file("key.pem", key.serialize_pem());
        let server = TlsOptions {
            cert: Some(cert.clone()),
            key: Some(key),
            ..TlsOptions::default()
        };
        let client = TlsOptions {
            ca: Some(cert),
            ..TlsOptions::default()
        };
        let mut cx = BuildContext::new("forward#0");
        let server = TlsServer::build(Some(&server), &mut cx).unwrap();
        let client = TlsClient::build(Some(&client), &mut cx).unwrap();
        let (a, b) = tokio::io::duplex(64 * 1024);
        let (s, c) = tokio::join!(
            accept(&server, a, "test"),
            connect(&client, b, "127.0.0.1:24224")
        );
        let (mut s, mut c) = (s.unwrap(), c.unwrap());
        let MaybeTls::Tls(t) = &c else {
            panic!("not TLS")
        };
        let suite = t.get_ref().1.negotiated_cipher_suite().unwrap().suite();
        assert_eq!(suite, rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
        let data: Vec<u8> = (0..1_000_003u32).map(|i| (i * 7 % 251) as u8).collect();
        let sent = data.clone();
        let writer = tokio::spawn(async move {
            let mut at = 0;
            for step in [1usize, 17, 4096, 16385, 300_000].iter().cycle() {
                let end = (at + step).min(sent.len());
                c.write_all(&sent[at..end]).await.unwrap();
                at = end;
                if at == sent.len() {
                    break;
                }
            }
            c.shutdown().await.unwrap();
        });
        let mut got = Vec::new();
        let mut buf = bytes::BytesMut::new();
        loop {
            buf.reserve(256 * 1024);
            if s.read_buf(&mut buf).await.unwrap() == 0 {
                break;
            }
            got.extend_from_slice(&buf.split());
        }
        writer.await.unwrap();
        assert!(got == data, "{} bytes arrived of {}", got.len(), data.len());
    }

    #[test]
    fn hosts_of_addresses() {
        assert_eq!(host_of("logs.example:24224"), "logs.example");
        assert_eq!(host_of("127.0.0.1:24224"), "127.0.0.1");
        assert_eq!(host_of("[::1]:24224"), "::1");
    }

    #[test]
    fn files_that_cannot_be_used_name_their_key() {
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate\n").unwrap();
        let junk = junk.to_str().unwrap().to_string();
        let opts = |cert: &str, key: &str| TlsOptions {
            enable: true,
            cert: Some(cert.into()),
            key: Some(key.into()),
            ca: None,
            verify: true,
            server_name: None,
            min_version: TlsVersion::V1_2,
        };
        let mut cx = BuildContext::new("forward#0");
        let e = TlsServer::build(Some(&opts("/nonexistent/c.pem", &junk)), &mut cx)
            .err()
            .unwrap();
        assert_eq!(e.key, "tls.cert");
        assert!(e.message.contains("cannot read"), "{e}");
        let e = TlsServer::build(Some(&opts(&junk, &junk)), &mut cx)
            .err()
            .unwrap();
        assert_eq!(e.key, "tls.cert");
        assert!(e.message.contains("no PEM certificate"), "{e}");
        let off = TlsOptions {
            enable: false,
            ..opts("/nonexistent/c.pem", &junk)
        };
        assert!(TlsServer::build(Some(&off), &mut cx).unwrap().is_none());
    }
}
