//! `nagare replay PATH --to HOST:PORT`: sends chunk files (dead letters, or a
//! file buffer's chunks) to a forward server, each as one PackedForward frame
//! with an ack, and removes each file once it is acked.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use bytes::BytesMut;
use nagare_forward::handshake::ClientHandshake;
use nagare_forward::{encode_packed_forward, Compression};
use tokio::io::AsyncWriteExt;

use crate::buffer::read_chunk_file;
use crate::proto::forward_io::{self, ClientError};

#[derive(clap::Args)]
pub struct ReplayArgs {
    /// A chunk file, or a directory of them (e.g. BUFFER_PATH/dead-letters).
    pub path: PathBuf,
    /// Forward server to send to.
    #[arg(long, default_value = "127.0.0.1:24224")]
    pub to: String,
    /// Shared key, when the server requires the handshake.
    #[arg(long)]
    pub shared_key: Option<String>,
    /// Keep the files after they were acked (default: remove them).
    #[arg(long)]
    pub keep: bool,
    /// How long to wait for each answer from the server: an ack, or the
    /// handshake's HELO and PONG.
    #[arg(long, default_value = "30s", value_parser = nagare_core::units::parse_duration)]
    pub ack_timeout: Duration,
}

pub fn main(a: ReplayArgs) -> ExitCode {
    super::block_on(async {
        let (files, events) = run(&a).await?;
        Ok(format!(
            "nagare replay: sent {events} events from {files} chunk files to {}",
            a.to
        ))
    })
}

/// The chunk files under `path`, oldest first.
fn chunk_files(path: &Path) -> Result<Vec<PathBuf>, String> {
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let rd = std::fs::read_dir(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut v: Vec<(std::time::SystemTime, PathBuf)> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "chunk"))
        .map(|p| {
            (
                std::fs::metadata(&p)
                    .and_then(|m| m.modified())
                    .unwrap_or(std::time::UNIX_EPOCH),
                p,
            )
        })
        .collect();
    v.sort();
    Ok(v.into_iter().map(|(_, p)| p).collect())
}

/// A server's answer in the user's terms.
fn said(e: ClientError) -> String {
    e.explain("--shared-key")
}

async fn run(a: &ReplayArgs) -> Result<(usize, u64), String> {
    let files = chunk_files(&a.path)?;
    let mut conn = tokio::net::TcpStream::connect(&a.to)
        .await
        .map_err(|e| format!("cannot connect to {}: {e}", a.to))?;
    let mut replies = BytesMut::new();
    if let Some(key) = &a.shared_key {
        let host = gethostname::gethostname().to_string_lossy().into_owned();
        let hs = ClientHandshake::new(key.as_bytes(), host.as_bytes(), b"", b"");
        forward_io::client_handshake(&mut conn, &mut replies, hs, a.ack_timeout)
            .await
            .map_err(said)?;
    }
    let (mut sent_files, mut events) = (0, 0u64);
    for path in files {
        let Some(chunk) = read_chunk_file(&path).map_err(|e| format!("{}: {e}", path.display()))?
        else {
            continue;
        };
        // The chunk id as the ack id: a nagare receiver stores a resend once.
        let id = hex::encode(chunk.id);
        let mut frame = Vec::with_capacity(chunk.data.len() + 64);
        encode_packed_forward(
            &mut frame,
            &chunk.tag,
            &chunk.data,
            chunk.count,
            Some(id.as_bytes()),
            Compression::None,
        )
        .map_err(|e| e.to_string())?;
        let not_taken = |e: ClientError| {
            format!(
                "{}: {}; {sent_files} chunk files were sent and acknowledged before",
                path.display(),
                said(e)
            )
        };
        if let Err(e) = conn.write_all(&frame).await {
            return Err(not_taken(
                forward_io::send_failed(&mut conn, &mut replies, e).await,
            ));
        }
        forward_io::wait_ack(&mut conn, &mut replies, id.as_bytes(), a.ack_timeout)
            .await
            .map_err(not_taken)?;
        if !a.keep {
            std::fs::remove_file(&path)
                .map_err(|e| format!("sent, but cannot remove {}: {e}", path.display()))?;
        }
        sent_files += 1;
        events += chunk.count as u64;
    }
    Ok((sent_files, events))
}
