//! `nagare cat [--address HOST:PORT | --unix PATH] [--ack] [--tls …] TAG`:
//! reads JSON objects, one per line, from stdin and sends them as events, as
//! fluent-cat does; over TLS with `--tls` (or any `--tls-*` option).
//!
//! It exits non-zero whenever the server did not take the events, saying why:
//! a handshake refused, or required and not started (the server's HELO is
//! noticed even without `--ack`), an ack missing.

use std::io::BufRead;
use std::process::ExitCode;
use std::time::Duration;

use bytes::BytesMut;
use nagare_core::plugin::BuildContext;
use nagare_forward::handshake::ClientHandshake;
use nagare_forward::{encode_packed_forward, write_entry, Compression, EventTime};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::net::tls::{TlsClient, TlsOptions};
use crate::proto::forward_io::{self, ClientError};

/// Without acks, how long cat waits at the end for the server to close the
/// connection (it has read everything then; a server that wanted a
/// handshake has sent its HELO).
const CLOSE_WAIT: Duration = Duration::from_secs(5);

#[derive(clap::Args)]
pub struct CatArgs {
    /// Tag of the events.
    pub tag: String,
    /// Forward server to send to.
    #[arg(long, default_value = "127.0.0.1:24224", conflicts_with = "unix")]
    pub address: String,
    /// Send over this UNIX socket instead.
    #[arg(long)]
    pub unix: Option<String>,
    /// Ask the server to ack every frame, and wait for the acks.
    #[arg(long)]
    pub ack: bool,
    /// Shared key, when the server requires the handshake.
    #[arg(long)]
    pub shared_key: Option<String>,
    /// Username and password for the handshake, as USER:PASSWORD.
    #[arg(long)]
    pub user: Option<String>,
    /// Events per frame at most (frames also go out whenever stdin pauses).
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
    /// How long to wait for each answer from the server: an ack, or the
    /// handshake's HELO and PONG.
    #[arg(long, default_value = "30s", value_parser = nagare_core::units::parse_duration)]
    pub ack_timeout: Duration,
    /// Connect over TLS (implied by every other --tls-* option).
    #[arg(long)]
    pub tls: bool,
    /// PEM file of the CA certificates to trust (default: the system's).
    #[arg(long, value_name = "PATH")]
    pub tls_ca: Option<String>,
    /// PEM file of a client certificate, for servers that require one (mTLS).
    #[arg(long, value_name = "PATH", requires = "tls_key")]
    pub tls_cert: Option<String>,
    /// PEM file of the client certificate's key.
    #[arg(long, value_name = "PATH", requires = "tls_cert")]
    pub tls_key: Option<String>,
    /// The name the server's certificate must hold (default: the host of --address).
    #[arg(long, value_name = "NAME")]
    pub tls_server_name: Option<String>,
    /// Accept any server certificate (no protection against a man in the middle).
    #[arg(long)]
    pub tls_no_verify: bool,
}

impl CatArgs {
    /// The `tls` table these flags stand for, when TLS is on.
    fn tls_options(&self) -> Option<TlsOptions> {
        let on = self.tls
            || self.tls_ca.is_some()
            || self.tls_cert.is_some()
            || self.tls_server_name.is_some()
            || self.tls_no_verify;
        on.then(|| TlsOptions {
            ca: self.tls_ca.clone(),
            cert: self.tls_cert.clone(),
            key: self.tls_key.clone(),
            server_name: self.tls_server_name.clone(),
            verify: !self.tls_no_verify,
            ..TlsOptions::default()
        })
    }
}

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

pub fn main(a: CatArgs) -> ExitCode {
    super::block_on(async {
        let n = run(&a).await?;
        Ok(format!("nagare cat: sent {n} events"))
    })
}

/// A server's answer in the user's terms.
fn said(e: ClientError) -> String {
    e.explain("--shared-key")
}

async fn connect(a: &CatArgs, buf: &mut BytesMut) -> Result<Box<dyn Stream>, String> {
    let mut cx = BuildContext::new("cat");
    let tls = TlsClient::build(a.tls_options().as_ref(), &mut cx).map_err(|e| {
        let flag = e.key.replace("tls.", "--tls-").replace('_', "-");
        format!("{flag}: {}", e.message)
    })?;
    for (key, w) in &cx.warnings {
        eprintln!("nagare cat: warning: {key}: {w}");
    }
    let mut s: Box<dyn Stream> = match (&a.unix, tls) {
        (Some(p), _) if a.tls_options().is_some() => {
            return Err(format!("--unix {p}: TLS is for TCP (--address)"))
        }
        (Some(p), _) => Box::new(
            tokio::net::UnixStream::connect(p)
                .await
                .map_err(|e| format!("cannot connect to {p}: {e}"))?,
        ),
        (None, tls) => {
            let tcp = tokio::net::TcpStream::connect(&a.address)
                .await
                .map_err(|e| format!("cannot connect to {}: {e}", a.address))?;
            match tls {
                None => Box::new(tcp),
                Some(t) => Box::new(
                    t.connect(tcp, &a.address)
                        .await
                        .map_err(|e| format!("{}: {e}", a.address))?,
                ),
            }
        }
    };
    if let Some(key) = &a.shared_key {
        let (user, pass) = a
            .user
            .as_deref()
            .and_then(|u| u.split_once(':'))
            .unwrap_or(("", ""));
        let host = gethostname::gethostname().to_string_lossy().into_owned();
        let hs = ClientHandshake::new(
            key.as_bytes(),
            host.as_bytes(),
            user.as_bytes(),
            pass.as_bytes(),
        );
        forward_io::client_handshake(&mut s, buf, hs, a.ack_timeout)
            .await
            .map_err(said)?;
    }
    Ok(s)
}

async fn run(a: &CatArgs) -> Result<u64, String> {
    let mut replies = BytesMut::new();
    let mut conn = connect(a, &mut replies).await?;
    let mut input = std::io::BufReader::with_capacity(1 << 16, std::io::stdin().lock());
    let mut entries = Vec::new();
    let mut count = 0u32;
    let mut sent = 0u64;
    let mut line = String::new();
    let mut lineno = 0u64;
    let mut frame_no = 0u64;
    loop {
        line.clear();
        let n = input
            .read_line(&mut line)
            .map_err(|e| format!("reading stdin: {e}"))?;
        let eof = n == 0;
        if !eof {
            lineno += 1;
            let t = line.trim();
            if !t.is_empty() {
                let v: serde_json::Value = serde_json::from_str(t)
                    .map_err(|e| format!("stdin line {lineno}: not JSON: {e}"))?;
                if !v.is_object() {
                    return Err(format!("stdin line {lineno}: expected a JSON object"));
                }
                let mut rec = Vec::new();
                nagare_core::json::msgpack_from_json(&v, &mut rec);
                write_entry(&mut entries, EventTime::now(), &rec);
                count += 1;
            }
        }
        // Send when the batch is full, at the end, or when no more input is waiting.
        // "Nothing more buffered" must not read: that would wait for the next line.
        let idle = input.buffer().is_empty();
        if count > 0 && (eof || idle || count as usize >= a.batch) {
            frame_no += 1;
            let id = a
                .ack
                .then(|| format!("cat-{}-{frame_no}", std::process::id()));
            let mut frame = Vec::with_capacity(entries.len() + 64);
            encode_packed_forward(
                &mut frame,
                &a.tag,
                &entries,
                count,
                id.as_deref().map(str::as_bytes),
                Compression::None,
            )
            .map_err(|e| e.to_string())?;
            if let Err(e) = conn.write_all(&frame).await {
                return Err(said(
                    forward_io::send_failed(&mut conn, &mut replies, e).await,
                ));
            }
            if let Some(id) = id {
                forward_io::wait_ack(&mut conn, &mut replies, id.as_bytes(), a.ack_timeout)
                    .await
                    .map_err(said)?;
            }
            sent += count as u64;
            entries.clear();
            count = 0;
        }
        if eof {
            break;
        }
    }
    if a.ack {
        let _ = conn.shutdown().await;
    } else {
        // Nothing confirmed the events: at least hear out the server.
        forward_io::finish(&mut conn, &mut replies, CLOSE_WAIT)
            .await
            .map_err(said)?;
    }
    Ok(sent)
}
