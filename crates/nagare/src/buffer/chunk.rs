//! Chunks in memory: the staged chunk a tag's batches are appended to, the
//! closed chunk the flush workers hand to the output, and the cutting of a
//! batch too big for one chunk.

use std::time::Instant;

use bytes::Bytes;
pub use nagare_core::chunk::Chunk;

use super::chunk_file::ChunkFile;

/// Batches at least this big are kept as they arrived (shared, not copied);
/// smaller ones are copied together so a chunk does not become thousands of
/// tiny pieces. A shared batch keeps its whole allocation alive, so an input
/// hands over batches this big only in allocations of about their own size
/// (see `Buffer::append`).
pub const SHARE_THRESHOLD: usize = 32 * 1024;

/// Batches at least this big but under `SHARE_THRESHOLD` are copied before
/// the buffer's lock is taken, into an allocation of their own size, which
/// the chunk then keeps as a segment: copying them into the tag's staged
/// chunk under the lock made every connection's copy wait for every
/// other's, the serialization that kept a relay of 200-event frames of
/// 100 B (24 KB) at about 3.5 busy cores whatever `workers` was. Smaller
/// batches are still copied together under the lock (a short copy, and a
/// chunk does not become thousands of tiny pieces): a chunk holds at most
/// `chunk_limit_size` / 4 KiB such segments.
pub const COPY_APART_THRESHOLD: usize = 4 * 1024;

/// The first allocation for copied batches of a staged chunk; it doubles as
/// it fills, up to the chunk's size limit.
const FIRST_COPY_BLOCK: usize = 4 * 1024;

/// The chunk of a tag that batches are being appended to.
pub(super) struct Staging {
    /// The chunk id, fixed when the chunk starts (it names the chunk file).
    pub id: [u8; 16],
    pub segments: Vec<Bytes>,
    /// Small batches copied together; becomes a segment when closed.
    pub small: Vec<u8>,
    pub len: usize,
    /// Memory the chunk keeps alive: the capacity of the allocations it
    /// made for copied batches, and the length of the batches it shares.
    pub held: usize,
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
            small: Vec::new(),
            len: 0,
            held: 0,
            count: 0,
            created: Instant::now(),
            file,
        }
    }

    /// Adds a batch part. `held` changes by what it costs in memory (to
    /// charge against `total_limit_size`): it may go down, as sealing the
    /// copied batches before a shared one gives their spare room back.
    /// Parts of at least `share_from` bytes are shared: `SHARE_THRESHOLD`,
    /// or `COPY_APART_THRESHOLD` for a batch already copied apart (an
    /// allocation of its own size, see `Buffer::append`).
    pub fn push(&mut self, part: &Bytes, limit: usize, share_from: usize) {
        if part.len() >= share_from {
            self.seal_small();
            self.segments.push(part.clone());
            self.held += part.len();
        } else {
            if self.small.capacity() - self.small.len() < part.len() {
                self.grow_small(part.len(), limit);
            }
            self.small.extend_from_slice(part);
        }
        self.len += part.len();
    }

    /// Grows the allocation of the copied batches: to double its size, at
    /// most the chunk's limit (a chunk never holds more than that of copied
    /// batches), at least what the new part needs. `reserve_exact`, as
    /// `reserve` doubles past the limit and a full chunk could then hold as
    /// much spare capacity as payload; it reallocates, which glibc often
    /// does in place.
    fn grow_small(&mut self, need: usize, limit: usize) {
        let (len, old) = (self.small.len(), self.small.capacity());
        let cap = (old * 2).max(FIRST_COPY_BLOCK).min(limit).max(len + need);
        self.small.reserve_exact(cap - len);
        self.held = self.held - old + self.small.capacity();
    }

    /// Ends the current run of copied batches (the next copied batch starts
    /// a new allocation).
    fn seal_small(&mut self) {
        if let Some(segment) = self.take_small() {
            self.segments.push(segment);
        }
    }

    /// The copied batches as a segment. When they fill less than 4/5 of
    /// their allocation (a chunk closed by `flush_interval` rather than by
    /// size, or cut short by a shared batch) the spare capacity is given
    /// back, so a queued chunk holds little more than its payload.
    fn take_small(&mut self) -> Option<Bytes> {
        let mut small = std::mem::take(&mut self.small);
        let cap = small.capacity();
        if small.len() < cap - cap / 5 {
            small.shrink_to_fit();
        }
        self.held = self.held - cap + small.capacity();
        (!small.is_empty()).then(|| Bytes::from(small))
    }

    /// The segments of the closed chunk and the memory they hold.
    pub fn into_segments(mut self) -> (Vec<Bytes>, usize) {
        self.seal_small();
        (self.segments, self.held)
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
            let end = nagare_core::record::entry_at(part, pos).map_or(part.len(), |(_, end)| end);
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
