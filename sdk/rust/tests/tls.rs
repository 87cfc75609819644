//! TLS against a rustls test server with a self-signed certificate.
#![cfg(feature = "tls")]

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Opts, Server};
use nagare_logger::{Config, Logger, TlsConfig};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A self-signed certificate for "localhost" (its PEM written to
/// `dir/ca.pem`) and a server configuration using it.
fn server_config(dir: &std::path::Path) -> Arc<rustls::ServerConfig> {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    std::fs::write(dir.join("ca.pem"), ck.cert.pem()).unwrap();
    let cert = CertificateDer::from(ck.cert.der().to_vec());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.key_pair.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .unwrap(),
    )
}

fn tls_server_on(cfg: Arc<rustls::ServerConfig>, port: u16) -> Server {
    Server::start_wrapped_on(
        port,
        Opts::default(),
        Arc::new(move |s| {
            let conn = rustls::ServerConnection::new(cfg.clone()).unwrap();
            Box::new(rustls::StreamOwned::new(conn, s))
        }),
    )
}

#[test]
fn tls_delivers_and_verifies_the_server() {
    let dir = std::env::temp_dir().join(format!("nagare-logger-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let srv = tls_server_on(server_config(&dir), 0);
    let tls = TlsConfig {
        ca_file: Some(dir.join("ca.pem")),
        server_name: Some("localhost".into()),
        ..TlsConfig::default()
    };
    let log = Logger::new(
        Config::new()
            .servers([&srv.addr])
            .unwrap()
            .tls(tls.clone())
            .require_ack(true)
            .flush_interval(Duration::from_millis(10)),
    )
    .unwrap();
    for seq in 0..500u64 {
        log.emit("tls", &serde_json::json!({ "seq": seq })).unwrap();
    }
    log.close(Duration::from_secs(5)).unwrap();
    assert!(srv.wait_for(500, Duration::from_secs(5)));
    let seqs: Vec<u64> = srv.events().iter().map(|e| e.seq()).collect();
    assert_eq!(seqs, (0..500).collect::<Vec<_>>());

    // A name the certificate does not hold is refused.
    let errs = Arc::new(std::sync::Mutex::new(Vec::new()));
    let e2 = errs.clone();
    let log = Logger::new(
        Config::new()
            .servers([&srv.addr])
            .unwrap()
            .tls(TlsConfig {
                server_name: Some("other.example".into()),
                ..tls
            })
            .on_error(move |e| e2.lock().unwrap().push(e.to_string())),
    )
    .unwrap();
    log.emit("tls", &serde_json::json!({ "seq": 999 })).unwrap();
    assert!(log.flush(Duration::from_millis(300)).is_err());
    assert!(
        errs.lock()
            .unwrap()
            .iter()
            .any(|m| m.contains("cannot connect")),
        "{:?}",
        errs.lock().unwrap()
    );
    let _ = log.close(Duration::from_millis(50));
    assert_eq!(srv.count(), 500);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn tls_options_from_strings() {
    let mut c = Config::new();
    c.set("tls", "true").unwrap();
    c.set("tls_ca_file", "/nonexistent/ca.pem").unwrap();
    // A missing CA file is a configuration error at creation.
    assert!(matches!(
        Logger::new(c),
        Err(nagare_logger::Error::Config(_))
    ));
}

#[test]
fn tls_restart_loses_nothing() {
    let dir = std::env::temp_dir().join(format!("nagare-logger-tls2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let scfg = server_config(&dir);
    let mut srv = tls_server_on(scfg.clone(), 0);
    let port = srv.port();
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let errors2 = errors.clone();
    let log = Logger::new(
        Config::new()
            .servers([&srv.addr])
            .unwrap()
            .tls(TlsConfig {
                ca_file: Some(dir.join("ca.pem")),
                server_name: Some("localhost".into()),
                ..TlsConfig::default()
            })
            .flush_interval(Duration::from_millis(10))
            .backoff(Duration::from_millis(20), Duration::from_millis(200))
            .on_error(move |e| errors2.lock().unwrap().push(e.to_string())),
    )
    .unwrap();
    for seq in 0..100u64 {
        log.emit("tls", &serde_json::json!({ "seq": seq })).unwrap();
    }
    log.flush(Duration::from_secs(5)).unwrap();
    assert!(srv.wait_for(100, Duration::from_secs(5)));
    srv.stop();
    // Without acks: the closed TLS connection must be noticed before writing.
    for seq in 100..200u64 {
        log.emit("tls", &serde_json::json!({ "seq": seq })).unwrap();
    }
    // The server comes back only after the logger found it gone.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !errors
        .lock()
        .unwrap()
        .iter()
        .any(|m| m.contains("cannot connect"))
    {
        assert!(
            Instant::now() < deadline,
            "the logger never tried to reconnect"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let srv2 = tls_server_on(scfg, port);
    log.flush(Duration::from_secs(10)).unwrap();
    assert!(srv2.wait_for(100, Duration::from_secs(5)));
    let seqs: Vec<u64> = srv2.events().iter().map(|e| e.seq()).collect();
    assert_eq!(seqs, (100..200).collect::<Vec<_>>());
    log.close(Duration::from_secs(2)).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
