//! Paging of a file buffer: past `memory_limit_size`, a queued chunk is
//! kept on disk only and its events are read back from its chunk file when
//! its turn comes, so `total_limit_size` may be far bigger than memory.

use std::sync::atomic::Ordering::Relaxed;

use nagare_core::metrics::PluginStats;

use super::recovery::read_chunk_file;
use super::{Buffer, Queued, State};

/// A file buffer keeps a queued chunk on disk only (its events are read back
/// when it is sent) while the chunks held in memory pass `memory_limit`: so
/// `total_limit_size` may be far bigger than memory.
pub(super) fn keep_on_disk_if_over(st: &mut State, q: &mut Queued, memory_limit: usize) {
    if q.slot.is_some() && st.bytes - st.disk_only > memory_limit {
        q.chunk.segments = Vec::new();
        // From now on the chunk holds its payload's length, on disk.
        st.bytes -= q.held - q.chunk.len;
        q.held = q.chunk.len;
        st.disk_only += q.chunk.len;
    }
}

impl Buffer {
    /// Shows the bytes kept on disk only in the gauge.
    pub(super) fn show_disk_only(&self, st: &State) {
        self.stats
            .buffer_disk_only_bytes
            .store(st.disk_only as u64, Relaxed);
    }

    /// Reads a chunk kept on disk only back from its file. A file that no
    /// longer holds the chunk (damaged on disk) is quarantined and its events
    /// counted as lost: `None`.
    pub(super) async fn read_back(&self, mut q: Queued) -> Option<Queued> {
        let slot = match &q.slot {
            Some(slot) if q.chunk.on_disk_only() => slot.clone(),
            _ => return Some(q),
        };
        let chunk = &mut q.chunk;
        let path = slot.path.clone();
        let read = tokio::task::spawn_blocking(move || read_chunk_file(&path))
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
        {
            let mut st = self.state.lock().expect("buffer state");
            st.disk_only -= chunk.len;
            self.show_disk_only(&st);
        }
        let why = match read {
            Ok(Some(r))
                if r.id == chunk.id && r.count == chunk.count && r.data.len() == chunk.len =>
            {
                chunk.segments = vec![r.data];
                return Some(q);
            }
            Ok(Some(r)) => format!(
                "holds {} events in {} bytes, {} in {} were written",
                r.count,
                r.data.len(),
                chunk.count,
                chunk.len
            ),
            Ok(None) => "holds no events".to_string(),
            Err(e) => e,
        };
        if let Some(store) = &self.store {
            store.quarantine(&slot.path, &why, &self.name);
        }
        PluginStats::add(&self.stats.lost, chunk.count as u64);
        tracing::error!(output = %self.name, chunk = %chunk.id_hex(), events = chunk.count,
            file = %slot.path.display(), reason = %why,
            "a chunk kept on disk only cannot be read back; its events are lost");
        // The file went to quarantine: it must not be reused.
        q.slot = None;
        self.commit(&q, false);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{
        append_chunk, drain, first_seqs, paging_buffer, paging_buffer_with,
    };
    use super::*;
    use crate::buffer::{BufferConfig, OverflowAction};
    use nagare_core::units::Size;

    #[tokio::test]
    async fn a_file_buffer_keeps_chunks_past_its_memory_limit_on_disk_only() {
        let dir = tempfile::tempdir().unwrap();
        let (b, out) = paging_buffer(dir.path(), 60);
        let mut want = Vec::new();
        for c in 0..10u8 {
            want.extend(append_chunk(&b, c).await);
        }
        // 30 bytes per chunk: the first two fit the 60 bytes, the rest wait on disk.
        let on_disk = |b: &Buffer| {
            let st = b.state.lock().unwrap();
            st.queue.iter().filter(|q| q.chunk.on_disk_only()).count()
        };
        assert_eq!(on_disk(&b), 8);
        assert_eq!(PluginStats::get(&b.stats.buffer_disk_only_bytes), 8 * 30);
        drain(&b).await;
        let chunks = out.0.lock().unwrap();
        let got: Vec<u8> = chunks
            .iter()
            .flat_map(|c| c.contiguous().to_vec())
            .collect();
        assert_eq!(got, want, "every chunk read back whole and in order");
        assert_eq!(PluginStats::get(&b.stats.buffer_disk_only_bytes), 0);
        assert_eq!(b.held_bytes(), 0);
    }

    #[tokio::test]
    async fn drop_oldest_chunk_drops_chunks_kept_on_disk_only_too() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = BufferConfig {
            total_limit_size: Size(90),
            overflow_action: OverflowAction::DropOldestChunk,
            ..Default::default()
        };
        let (b, out) = paging_buffer_with(dir.path(), 30, cfg);
        for c in 0..6u8 {
            append_chunk(&b, c).await;
        }
        // Three 30-byte chunks fit; the oldest went for each of the next three.
        assert_eq!(PluginStats::get(&b.stats.dropped), 30);
        assert_eq!(b.held_bytes(), 90);
        let on_disk: usize = {
            let st = b.state.lock().unwrap();
            st.queue
                .iter()
                .filter(|q| q.chunk.on_disk_only())
                .map(|q| q.chunk.len)
                .sum()
        };
        assert!(on_disk > 0);
        assert_eq!(
            PluginStats::get(&b.stats.buffer_disk_only_bytes),
            on_disk as u64
        );
        drain(&b).await;
        let firsts = first_seqs(&out);
        assert_eq!(
            firsts,
            vec![30, 40, 50],
            "the three newest chunks delivered"
        );
        assert_eq!(PluginStats::get(&b.stats.buffer_disk_only_bytes), 0);
    }

    #[tokio::test]
    async fn a_chunk_damaged_on_disk_is_quarantined_and_counted_the_rest_delivered() {
        use std::os::unix::fs::FileExt;
        let dir = tempfile::tempdir().unwrap();
        let (b, out) = paging_buffer(dir.path(), 0);
        for c in 0..3u8 {
            append_chunk(&b, c).await;
        }
        let damaged = {
            let st = b.state.lock().unwrap();
            assert!(st.queue.iter().all(|q| q.chunk.on_disk_only()));
            st.queue[1].slot.as_ref().unwrap().path.clone()
        };
        std::fs::OpenOptions::new()
            .write(true)
            .open(&damaged)
            .unwrap()
            .write_all_at(b"JUNK", 0)
            .unwrap();
        drain(&b).await;
        let firsts = first_seqs(&out);
        assert_eq!(firsts, vec![0, 20], "chunks 0 and 2 delivered");
        assert_eq!(PluginStats::get(&b.stats.lost), 10);
        assert!(dir
            .path()
            .join("quarantine")
            .join(damaged.file_name().unwrap())
            .exists());
        assert!(!damaged.exists());
        assert_eq!(b.held_bytes(), 0);
    }
}
