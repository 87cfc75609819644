//! Sending a chunk: its frame (header, the chunk bytes as they are, and
//! the options; or a whole compressed frame), written to a server and
//! acked when the output asks for acks; a whole chunk to one server, or
//! under consistent hashing on a record field, one part per server.

use std::sync::Arc;

use bytes::BytesMut;
use nagare_core::output::FlushError;
use nagare_core::record::{self, FieldPath};
use nagare_forward::msgpack::{
    write_array_len, write_bin_header, write_map_len, write_str, write_uint,
};
use nagare_forward::Compression;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::balance::seeds;
use super::hashing::{self, HashKey};
use super::server::Server;
use super::{ForwardCompression, ForwardOutput, MAX_PARTIAL};
use crate::buffer::Chunk;
use crate::proto::forward_io;

impl ForwardOutput {
    fn frame(&self, chunk: &Chunk) -> Result<(Frame, Option<String>), FlushError> {
        let ack_id = self.cfg.require_ack_response.then(|| chunk.id_hex());
        let compression = match self.cfg.compress {
            None => Compression::None,
            Some(ForwardCompression::Gzip) => Compression::Gzip,
            Some(ForwardCompression::Zstd) => Compression::Zstd,
        };
        if compression != Compression::None {
            let mut whole = Vec::with_capacity(chunk.len / 4);
            nagare_forward::encode_packed_forward(
                &mut whole,
                &chunk.tag,
                &chunk.contiguous(),
                chunk.count,
                ack_id.as_ref().map(|s| s.as_bytes()),
                compression,
            )
            .map_err(|e| FlushError::Retry(format!("compressing: {e}")))?;
            return Ok((Frame::Whole(whole), ack_id));
        }
        let mut head = Vec::with_capacity(16 + chunk.tag.len());
        write_array_len(&mut head, 3);
        write_str(&mut head, chunk.tag.as_bytes());
        write_bin_header(&mut head, chunk.len);
        let mut tail = Vec::with_capacity(64);
        write_map_len(&mut tail, if ack_id.is_some() { 2 } else { 1 });
        write_str(&mut tail, b"size");
        write_uint(&mut tail, chunk.count as u64);
        if let Some(id) = &ack_id {
            write_str(&mut tail, b"chunk");
            write_str(&mut tail, id.as_bytes());
        }
        Ok((Frame::Raw { head, tail }, ack_id))
    }

    async fn send_to(
        &self,
        s: &Server,
        chunk: &Chunk,
        frame: &Frame,
        ack_id: Option<&str>,
    ) -> Result<(), String> {
        let mut c = self.conn(s).await?;
        let send = async {
            match frame {
                // The chunk bytes go out as they are, between header and
                // options, in as few writes (and TLS records) as possible.
                Frame::Raw { head, tail } => {
                    let mut parts = Vec::with_capacity(chunk.segments.len() + 2);
                    parts.push(std::io::IoSlice::new(head));
                    parts.extend(chunk.segments.iter().map(|seg| std::io::IoSlice::new(seg)));
                    parts.push(std::io::IoSlice::new(tail));
                    write_all_vectored(&mut c, &mut parts).await?;
                }
                Frame::Whole(b) => c.write_all(b).await?,
            }
            c.flush().await
        };
        match tokio::time::timeout(self.cfg.send_timeout.0, send).await {
            Err(_) => return Err("send timed out".to_string()),
            Ok(Err(e)) => {
                let why = forward_io::send_failed(&mut c, &mut BytesMut::new(), e).await;
                return Err(why.explain("shared_key"));
            }
            Ok(Ok(())) => {}
        }
        if let Some(id) = ack_id {
            let mut buf = BytesMut::new();
            forward_io::wait_ack(
                &mut c,
                &mut buf,
                id.as_bytes(),
                self.cfg.ack_response_timeout.0,
            )
            .await
            .map_err(|e| e.explain("shared_key"))?;
        }
        if self.cfg.keepalive {
            s.idle.lock().expect("server").push(c);
        }
        Ok(())
    }
}

/// Writes every byte of `parts`, several slices per write.
async fn write_all_vectored<W: AsyncWrite + Unpin>(
    w: &mut W,
    mut parts: &mut [std::io::IoSlice<'_>],
) -> std::io::Result<()> {
    while !parts.is_empty() {
        let n = w.write_vectored(parts).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        std::io::IoSlice::advance_slices(&mut parts, n);
    }
    Ok(())
}

/// A frame ready to send: header and options around the chunk bytes, or a
/// whole compressed frame.
enum Frame {
    Raw { head: Vec<u8>, tail: Vec<u8> },
    Whole(Vec<u8>),
}

impl ForwardOutput {
    /// Sends the whole chunk to one server: the first candidate, then the
    /// next ones if it fails.
    pub(super) async fn write_whole(
        &self,
        chunk: &Chunk,
        servers: &[Arc<Server>],
    ) -> Result<(), FlushError> {
        let (frame, ack_id) = self.frame(chunk)?;
        let mut errors = Vec::new();
        let mut tried = Vec::new();
        // The candidates are recomputed after each failure, so a standby takes
        // over within the same write once the last primary is marked down.
        loop {
            let next = match &self.hash_key {
                Some(_) => {
                    // hash_key = "tag": the chunk's tag is the key.
                    let pool = self.hash_pool(servers, &tried);
                    let seeds = seeds(servers, &pool);
                    hashing::pick(chunk.tag.as_bytes(), &seeds).map(|p| pool[p])
                }
                None => self
                    .candidates(servers)
                    .into_iter()
                    .find(|i| !tried.contains(i)),
            };
            let Some(i) = next else { break };
            tried.push(i);
            let s = &servers[i];
            match self.send_to(s, chunk, &frame, ack_id.as_deref()).await {
                Ok(()) => {
                    s.mark_up();
                    return Ok(());
                }
                Err(e) => {
                    s.mark_down(&e);
                    errors.push(format!("{}: {e}", s.cfg.address));
                }
            }
        }
        if errors.is_empty() {
            errors.push("every server is down".into());
        }
        // The buffer's log line names the output; the error names the servers.
        Err(FlushError::Retry(errors.join("; ")))
    }

    /// Consistent hashing on a record field: the chunk's events are split
    /// into one part per server (each key's events in their order), and
    /// each part is sent as a chunk of its own. A part whose server fails
    /// is split again over the servers left, so only that server's keys
    /// move. What was delivered is remembered for the buffer's retry.
    pub(super) async fn write_split(
        &self,
        chunk: &Chunk,
        servers: &[Arc<Server>],
        path: &FieldPath,
    ) -> Result<(), FlushError> {
        // Each entry: (segment, start, end, record start).
        let mut spans = Vec::with_capacity(chunk.count as usize);
        for (si, seg) in chunk.segments.iter().enumerate() {
            let mut start = 0;
            for (record, end) in record::entry_bounds(seg) {
                spans.push((si, start, end, record));
                start = end;
            }
        }
        let mut done = self
            .partial
            .lock()
            .expect("partial")
            .remove(&chunk.id)
            .filter(|d| d.len() == spans.len())
            .unwrap_or_else(|| vec![false; spans.len()]);
        let mut todo: Vec<usize> = (0..spans.len()).filter(|&e| !done[e]).collect();
        let mut excluded = Vec::new();
        let mut errors = Vec::new();
        let mut scratch = Vec::new();
        while !todo.is_empty() {
            let pool = self.hash_pool(servers, &excluded);
            if pool.is_empty() {
                break;
            }
            let seeds = seeds(servers, &pool);
            // (server, its entries), in order of first appearance.
            let mut parts: Vec<(usize, Vec<usize>)> = Vec::new();
            for &e in &todo {
                let (si, _, end, r) = spans[e];
                let key = HashKey::of(path, &chunk.segments[si][r..end], &mut scratch);
                let i = pool[hashing::pick(key, &seeds).expect("a server")];
                match parts.iter_mut().find(|(s, _)| *s == i) {
                    Some((_, v)) => v.push(e),
                    None => parts.push((i, vec![e])),
                }
            }
            todo.clear();
            for (i, entries) in parts {
                let s = &servers[i];
                let owned;
                let part = if entries.len() == spans.len() {
                    // Every event to one server: the chunk as it is.
                    chunk
                } else {
                    let mut b = Vec::with_capacity(chunk.len);
                    for &e in &entries {
                        let (si, start, end, _) = spans[e];
                        b.extend_from_slice(&chunk.segments[si][start..end]);
                    }
                    let id = hashing::part_id(&chunk.id, &s.cfg.address, &b);
                    owned = Chunk::in_memory(id, chunk.tag.clone(), b, entries.len() as u32);
                    &owned
                };
                let (frame, ack_id) = self.frame(part)?;
                match self.send_to(s, part, &frame, ack_id.as_deref()).await {
                    Ok(()) => {
                        s.mark_up();
                        entries.iter().for_each(|&e| done[e] = true);
                    }
                    Err(e) => {
                        s.mark_down(&e);
                        errors.push(format!("{}: {e}", s.cfg.address));
                        excluded.push(i);
                        todo.extend(entries);
                    }
                }
            }
            todo.sort_unstable();
        }
        if todo.is_empty() {
            return Ok(());
        }
        if done.iter().any(|&d| d) {
            let mut partial = self.partial.lock().expect("partial");
            if partial.len() >= MAX_PARTIAL {
                partial.clear();
            }
            partial.insert(chunk.id, done);
        }
        if errors.is_empty() {
            errors.push("every server is down".into());
        }
        Err(FlushError::Retry(errors.join("; ")))
    }
}
