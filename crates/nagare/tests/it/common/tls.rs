//! TLS for the end-to-end tests: certificate authorities and certificates
//! made at run time (rcgen), and a blocking rustls client under the forward
//! [`Sender`](super::Sender).

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{BasicConstraints, Certificate, CertificateParams, DnType, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

use super::{Conn, Sender, WAIT};

/// A certificate authority whose files live in a test's directory.
pub struct Ca {
    dir: PathBuf,
    name: String,
    cert: Certificate,
    key: KeyPair,
    /// The CA certificate, PEM (for `tls.ca`).
    pub path: PathBuf,
}

/// A certificate and its key, as PEM files.
#[derive(Clone)]
pub struct Pair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Ca {
    /// A new CA named `name`; its files are `dir/<name>-….pem`.
    pub fn new(dir: &Path, name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("nagare test CA {name}"));
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let path = dir.join(format!("{name}-ca.pem"));
        std::fs::write(&path, cert.pem()).unwrap();
        Ca {
            dir: dir.to_path_buf(),
            name: name.to_string(),
            cert,
            key,
            path,
        }
    }

    /// A certificate for `names` (DNS names or IP addresses) signed by this
    /// CA, valid now.
    pub fn issue(&self, file: &str, names: &[&str]) -> Pair {
        self.issue_with(file, names, |_| {})
    }

    /// A certificate whose validity ended in 2021.
    pub fn issue_expired(&self, file: &str, names: &[&str]) -> Pair {
        self.issue_with(file, names, |p| {
            p.not_before = rcgen::date_time_ymd(2020, 1, 1);
            p.not_after = rcgen::date_time_ymd(2021, 1, 1);
        })
    }

    fn issue_with(
        &self,
        file: &str,
        names: &[&str],
        edit: impl FnOnce(&mut CertificateParams),
    ) -> Pair {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{file} ({})", self.name));
        edit(&mut params);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let pair = Pair {
            cert: self.dir.join(format!("{}-{file}.pem", self.name)),
            key: self.dir.join(format!("{}-{file}-key.pem", self.name)),
        };
        std::fs::write(&pair.cert, cert.pem()).unwrap();
        std::fs::write(&pair.key, key.serialize_pem()).unwrap();
        pair
    }
}

/// A `[<section>.tls]` table with these files (`ca` optional).
pub fn tls_table(section: &str, pair: Option<&Pair>, ca: Option<&Path>, extra: &str) -> String {
    let mut t = format!("[{section}.tls]\n");
    if let Some(p) = pair {
        t += &format!("cert = {:?}\nkey = {:?}\n", p.cert, p.key);
    }
    if let Some(ca) = ca {
        t += &format!("ca = {ca:?}\n");
    }
    t + extra
}

/// A rustls client config trusting `ca`, presenting `client` when given.
pub fn client_config(ca: &Path, client: Option<&Pair>) -> Arc<ClientConfig> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let b = ClientConfig::builder().with_root_certificates(roots);
    Arc::new(match client {
        Some(p) => {
            let chain = CertificateDer::pem_file_iter(&p.cert)
                .unwrap()
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            b.with_client_auth_cert(chain, PrivateKeyDer::from_pem_file(&p.key).unwrap())
                .unwrap()
        }
        None => b.with_no_client_auth(),
    })
}

type TlsStream = StreamOwned<ClientConnection, TcpStream>;

impl Conn for TlsStream {
    fn set_timeout(&self, d: Option<Duration>) {
        self.sock.set_timeout(d);
    }
    fn shutdown_write(&self) {
        self.sock.shutdown_write();
    }
    fn local(&self) -> String {
        self.sock.local()
    }
}

/// A forward sender over TLS to 127.0.0.1:`port`, checking the server's
/// certificate for `server_name`. The error is the client's handshake
/// error (a server refusing a client certificate under TLS 1.3 shows only
/// later, when the connection is closed on the client).
pub fn tls_sender(
    port: u16,
    config: Arc<ClientConfig>,
    server_name: &str,
) -> Result<Sender, String> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).expect("connect to nagare");
    tcp.set_nodelay(true).unwrap();
    tcp.set_timeout(Some(WAIT));
    let name = ServerName::try_from(server_name.to_string()).unwrap();
    let conn = ClientConnection::new(config, name).unwrap();
    let mut s = StreamOwned::new(conn, tcp);
    while s.conn.is_handshaking() {
        s.conn.complete_io(&mut s.sock).map_err(|e| e.to_string())?;
    }
    Ok(Sender::over(Box::new(s)))
}
