//! Chunks in memory: the staged chunk a tag's batches are appended to, the
//! closed chunk the flush workers hand to the output, and the cutting of a
//! batch too big for one chunk.

use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};

use super::chunk_file::{ChunkFile, Slot};

/// Batches at least this big are kept as they arrived (shared, not copied);
/// smaller ones are copied together so a chunk does not become thousands of
/// tiny pieces.
pub(super) const SHARE_THRESHOLD: usize = 32 * 1024;

/// A closed chunk: one tag and its events as PackedForward entries, held in
/// one or more segments that together form the payload.
#[derive(Debug, Clone)]
pub struct Chunk {
    /// Unique id, stable across retries (sent as the forward `chunk` option).
    pub id: [u8; 16],
    pub tag: Arc<str>,
    pub segments: Vec<Bytes>,
    /// Total payload bytes of all segments.
    pub len: usize,
    pub count: u32,
    /// The chunk's file, for a file buffer: freed once the chunk is committed.
    pub file: Option<Arc<Slot>>,
}

impl Chunk {
    /// A file buffer's chunk whose events are on disk only, read back before it is sent.
    pub(super) fn on_disk_only(&self) -> bool {
        self.segments.is_empty() && self.len > 0
    }

    pub fn id_hex(&self) -> String {
        hex::encode(self.id)
    }

    /// Every event of the chunk: (time, record, whole entry).
    pub fn entries(&self) -> impl Iterator<Item = (nagare_forward::EventTime, &[u8], &[u8])> {
        self.segments
            .iter()
            .flat_map(|s| crate::formats::entries(s))
    }

    /// The payload in one piece (copies unless there is a single segment).
    pub fn contiguous(&self) -> Bytes {
        match self.segments.as_slice() {
            [one] => one.clone(),
            many => {
                let mut b = BytesMut::with_capacity(self.len);
                for s in many {
                    b.extend_from_slice(s);
                }
                b.freeze()
            }
        }
    }
}

/// The chunk of a tag that batches are being appended to.
pub(super) struct Staging {
    /// The chunk id, fixed when the chunk starts (it names the chunk file).
    pub id: [u8; 16],
    pub segments: Vec<Bytes>,
    /// Small batches copied together; becomes a segment when closed.
    pub small: BytesMut,
    pub len: usize,
    pub count: u32,
    pub created: Instant,
    /// The chunk's file, for a file buffer.
    pub file: Option<ChunkFile>,
}

impl Staging {
    pub fn new(id: [u8; 16], file: Option<ChunkFile>) -> Staging {
        Staging {
            id,
            segments: Vec::new(),
            small: BytesMut::new(),
            len: 0,
            count: 0,
            created: Instant::now(),
            file,
        }
    }

    pub fn push(&mut self, part: &Bytes) {
        if part.len() >= SHARE_THRESHOLD {
            if !self.small.is_empty() {
                self.segments.push(self.small.split().freeze());
            }
            self.segments.push(part.clone());
        } else {
            // Grows by doubling: a fixed up-front reserve per staged tag would
            // hold memory that total_limit_size does not count.
            self.small.extend_from_slice(part);
        }
        self.len += part.len();
    }

    pub fn into_segments(mut self) -> Vec<Bytes> {
        if !self.small.is_empty() {
            self.segments.push(self.small.freeze());
        }
        self.segments
    }
}

/// Cuts a batch into pieces of at most `max_count` events and about
/// `max_len` bytes (a single bigger event stays whole), at entry boundaries,
/// without copying.
pub(super) fn split_batch(
    parts: &[Bytes],
    max_count: u32,
    max_len: usize,
) -> Vec<(Vec<Bytes>, u32)> {
    let mut out = Vec::new();
    let (mut cur, mut cur_n, mut cur_len) = (Vec::new(), 0u32, 0usize);
    for part in parts {
        let (mut start, mut pos) = (0, 0);
        while pos < part.len() {
            // Entries were checked on the way in; a failure would be a bug, and
            // keeping the rest of the part whole is the safe answer.
            let end = nagare_forward::msgpack::skip_value(part, pos).unwrap_or(part.len());
            let size = end - pos;
            if cur_n > 0 && (cur_n >= max_count || cur_len + size > max_len) {
                if pos > start {
                    cur.push(part.slice(start..pos));
                }
                out.push((std::mem::take(&mut cur), cur_n));
                (cur_n, cur_len, start) = (0, 0, pos);
            }
            cur_n += 1;
            cur_len += size;
            pos = end;
        }
        if pos > start {
            cur.push(part.slice(start..pos));
        }
    }
    if cur_n > 0 {
        out.push((cur, cur_n));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_batch_cuts_at_entry_boundaries() {
        // 7 entries [i, {}] of 3 bytes each, over two parts.
        let e = |i: u8| vec![0x92, i, 0x80];
        let p1: Vec<u8> = (0..4).flat_map(e).collect();
        let p2: Vec<u8> = (4..7).flat_map(e).collect();
        let parts = [Bytes::from(p1), Bytes::from(p2)];
        let pieces = split_batch(&parts, 3, 1000);
        let counts: Vec<u32> = pieces.iter().map(|p| p.1).collect();
        assert_eq!(counts, vec![3, 3, 1]);
        let joined: Vec<u8> = pieces
            .iter()
            .flat_map(|p| p.0.iter().flat_map(|b| b.to_vec()))
            .collect();
        assert_eq!(joined, (0..7).flat_map(e).collect::<Vec<u8>>());
        let by_size = split_batch(&parts, u32::MAX, 7);
        assert_eq!(
            by_size.iter().map(|p| p.1).collect::<Vec<_>>(),
            vec![2, 2, 2, 1]
        );
    }
}
