//! Optional TLS (cargo feature `tls`, on by default) with rustls.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::Error;

/// TLS settings: `tls = true` turns TLS on for every TCP server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsConfig {
    /// PEM file of the CA certificates to trust; default: the Mozilla root
    /// store (webpki-roots).
    pub ca_file: Option<PathBuf>,
    /// Name to verify the server certificate against; default: the host of
    /// the server address.
    pub server_name: Option<String>,
    /// Client certificate chain (PEM) for servers that require one.
    pub cert_file: Option<PathBuf>,
    /// Private key (PEM) of the client certificate.
    pub key_file: Option<PathBuf>,
}

fn cfg_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Config(format!("tls: {what}: {e}"))
}

pub(crate) fn client_config(t: &TlsConfig) -> Result<Arc<rustls::ClientConfig>, Error> {
    let mut roots = rustls::RootCertStore::empty();
    match &t.ca_file {
        Some(p) => {
            let certs = CertificateDer::pem_file_iter(p)
                .map_err(|e| cfg_err(&p.display().to_string(), e))?;
            for c in certs {
                let c = c.map_err(|e| cfg_err(&p.display().to_string(), e))?;
                roots
                    .add(c)
                    .map_err(|e| cfg_err(&p.display().to_string(), e))?;
            }
            if roots.is_empty() {
                return Err(cfg_err(&p.display().to_string(), "no certificate found"));
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let b = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| cfg_err("protocol versions", e))?
        .with_root_certificates(roots);
    let cfg = match (&t.cert_file, &t.key_file) {
        (Some(c), Some(k)) => {
            let chain = CertificateDer::pem_file_iter(c)
                .map_err(|e| cfg_err(&c.display().to_string(), e))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| cfg_err(&c.display().to_string(), e))?;
            let key = PrivateKeyDer::from_pem_file(k)
                .map_err(|e| cfg_err(&k.display().to_string(), e))?;
            b.with_client_auth_cert(chain, key)
                .map_err(|e| cfg_err("client certificate", e))?
        }
        (None, None) => b.with_no_client_auth(),
        _ => {
            return Err(cfg_err(
                "client certificate",
                "set both cert_file and key_file",
            ))
        }
    };
    Ok(Arc::new(cfg))
}
