//! `nagare cat [--address HOST:PORT | --unix PATH] [--ack] TAG`: reads JSON
//! objects, one per line, from stdin and sends them as events, as fluent-cat does.

use std::io::BufRead;
use std::process::ExitCode;
use std::time::Duration;

use nagare_forward::{encode_packed_forward, write_entry, Compression, EventTime};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::outputs::forward::{client_handshake, read_message};

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
    /// How long to wait for each ack.
    #[arg(long, default_value = "30s", value_parser = crate::config::units::parse_duration)]
    pub ack_timeout: Duration,
}

trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

pub fn main(a: CatArgs) -> ExitCode {
    super::block_on(async {
        let n = run(&a).await?;
        Ok(format!("nagare cat: sent {n} events"))
    })
}

async fn connect(a: &CatArgs) -> Result<Box<dyn Stream>, String> {
    let mut s: Box<dyn Stream> = match &a.unix {
        Some(p) => Box::new(
            tokio::net::UnixStream::connect(p)
                .await
                .map_err(|e| format!("cannot connect to {p}: {e}"))?,
        ),
        None => Box::new(
            tokio::net::TcpStream::connect(&a.address)
                .await
                .map_err(|e| format!("cannot connect to {}: {e}", a.address))?,
        ),
    };
    if let Some(key) = &a.shared_key {
        let (user, pass) = a
            .user
            .as_deref()
            .and_then(|u| u.split_once(':'))
            .unwrap_or(("", ""));
        let host = gethostname::gethostname().to_string_lossy().into_owned();
        client_handshake(&mut s, key, &host, user, pass).await?;
    }
    Ok(s)
}

async fn run(a: &CatArgs) -> Result<u64, String> {
    let mut conn = connect(a).await?;
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
                crate::formats::json::msgpack_from_json(&v, &mut rec);
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
            conn.write_all(&frame)
                .await
                .map_err(|e| format!("sending: {e}"))?;
            if let Some(id) = id {
                let mut buf = Vec::new();
                let msg = tokio::time::timeout(a.ack_timeout, read_message(&mut conn, &mut buf))
                    .await
                    .map_err(|_| {
                        format!("no ack within {:?} for {count} events", a.ack_timeout)
                    })??;
                let got = nagare_forward::handshake::decode_ack(&msg).map_err(|e| e.to_string())?;
                if got != id.as_bytes() {
                    return Err("the server acked a different chunk".into());
                }
            }
            sent += count as u64;
            entries.clear();
            count = 0;
        }
        if eof {
            break;
        }
    }
    conn.flush().await.map_err(|e| format!("sending: {e}"))?;
    let _ = conn.shutdown().await;
    Ok(sent)
}
