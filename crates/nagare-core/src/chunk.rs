//! A closed chunk, as the buffer hands it to an output.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};

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
    /// When this chunk is a part of a chunk (the entries left to send
    /// again after a partial write, see [`Chunk::select`]): the position
    /// of each of its entries in the whole chunk. None: the whole chunk.
    pub positions: Option<Arc<[u32]>>,
}

impl Chunk {
    /// A chunk held in memory in one piece (no buffer file): a part of a
    /// chunk cut for one server, or a test's chunk.
    pub fn in_memory(id: [u8; 16], tag: Arc<str>, payload: Vec<u8>, count: u32) -> Chunk {
        Chunk {
            id,
            tag,
            len: payload.len(),
            count,
            segments: vec![Bytes::from(payload)],
            positions: None,
        }
    }

    /// The position of its `i`th entry in the whole chunk it came from:
    /// with the chunk id, a key that stays the same when a part of the
    /// chunk is sent again (outputs that give each event an id derive it
    /// from these two, so a re-sent event overwrites itself).
    pub fn position(&self, i: u32) -> u32 {
        match &self.positions {
            Some(p) => p[i as usize],
            None => i,
        }
    }

    /// The part of the chunk made of its entries at `which` (indexes in
    /// this chunk, ascending; others are ignored): same id and tag, the
    /// entries copied into one segment, their positions in the whole
    /// chunk kept. For a partial write: the entries to send again, or
    /// those refused for good.
    pub fn select(&self, which: &[u32]) -> Chunk {
        let mut payload = Vec::new();
        let mut positions = Vec::with_capacity(which.len());
        let mut wanted = which.iter().copied().peekable();
        for (i, entry) in self.raw_entries().enumerate() {
            let i = i as u32;
            while wanted.next_if(|&w| w < i).is_some() {}
            if wanted.next_if_eq(&i).is_some() {
                payload.extend_from_slice(entry);
                positions.push(self.position(i));
            }
        }
        let mut part = Chunk::in_memory(self.id, self.tag.clone(), payload, positions.len() as u32);
        part.positions = Some(positions.into());
        part
    }

    /// A file buffer's chunk whose events are on disk only, read back before it is sent.
    pub fn on_disk_only(&self) -> bool {
        self.segments.is_empty() && self.len > 0
    }

    pub fn id_hex(&self) -> String {
        hex::encode(self.id)
    }

    /// Every event of the chunk: (time, record, whole entry).
    pub fn entries(&self) -> impl Iterator<Item = (nagare_forward::EventTime, &[u8], &[u8])> {
        self.segments.iter().flat_map(|s| crate::record::entries(s))
    }

    /// Each entry's record with the value of its top-level `key`, in one
    /// walk (`record::entries_with_field`).
    pub fn entries_with_field<'a>(
        &'a self,
        key: &'a [u8],
    ) -> impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)> {
        self.segments
            .iter()
            .flat_map(move |s| crate::record::entries_with_field(s, key))
    }

    /// Each entry's bytes whole (`[time, record]`), for outputs that pass
    /// entries on as they are (the walk of `record::entry_bounds`; the time
    /// is not read).
    pub fn raw_entries(&self) -> impl Iterator<Item = &[u8]> {
        self.segments.iter().flat_map(|s| {
            let mut start = 0;
            crate::record::entry_bounds(s).map(move |(_, end)| {
                let entry = &s[start..end];
                start = end;
                entry
            })
        })
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
