//! Helpers of the buffer's unit tests.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use nagare_core::metrics::PluginStats;
use nagare_core::output::{FlushError, Output};
use nagare_core::units::Size;

use super::{Buffer, BufferConfig, Chunk, FileStore};

/// An entry `[i, {}]`.
pub fn entry(i: u8) -> Bytes {
    Bytes::from(vec![0x92, i & 0x7f, 0x80])
}

/// Records every chunk it is given.
#[derive(Default)]
pub struct Collect(pub Mutex<Vec<Chunk>>);

#[async_trait]
impl Output for Collect {
    async fn write(&self, chunk: &Chunk) -> Result<(), FlushError> {
        self.0.lock().unwrap().push(chunk.clone());
        Ok(())
    }
}

/// A memory buffer in front of a `Collect`.
pub fn buffer(cfg: BufferConfig) -> (Arc<Buffer>, Arc<Collect>) {
    let out = Arc::new(Collect::default());
    let b = Buffer::new(
        "test",
        cfg,
        Arc::new(PluginStats::default()),
        out.clone(),
        None,
        None,
    );
    (b, out)
}

/// A file buffer in `dir` that keeps at most `memory_limit` bytes in
/// memory, with chunks of 10 entries.
pub fn paging_buffer(dir: &std::path::Path, memory_limit: u64) -> (Arc<Buffer>, Arc<Collect>) {
    paging_buffer_with(dir, memory_limit, BufferConfig::default())
}

pub fn paging_buffer_with(
    dir: &std::path::Path,
    memory_limit: u64,
    cfg: BufferConfig,
) -> (Arc<Buffer>, Arc<Collect>) {
    let out = Arc::new(Collect::default());
    let store = FileStore::open(dir, "test", 16, usize::MAX).unwrap();
    assert!(store.1.is_empty());
    let cfg = BufferConfig {
        kind: super::BufferType::File,
        chunk_limit_records: Some(10),
        memory_limit_size: Size(memory_limit),
        ..cfg
    };
    let stats = Arc::new(PluginStats::default());
    let b = Buffer::new("test", cfg, stats, out.clone(), None, Some(store));
    (b, out)
}

/// Appends chunk number `c`: 10 entries [c*10+i, {}] of 3 bytes.
pub async fn append_chunk(b: &Buffer, c: u8) -> Vec<u8> {
    let entries: Vec<u8> = (0..10u8).flat_map(|i| [0x92, c * 10 + i, 0x80]).collect();
    b.append("t", &[Bytes::from(entries.clone())], 10, false, false, &[])
        .await
        .unwrap();
    entries
}

/// The first entry's number ([n, {}]) of every delivered chunk.
pub fn first_seqs(out: &Collect) -> Vec<u8> {
    let chunks = out.0.lock().unwrap();
    chunks.iter().map(|c| c.contiguous()[1]).collect()
}

/// Starts the flush workers, closes the buffer and waits until it is empty.
pub async fn drain(b: &Arc<Buffer>) {
    let tasks = b.start();
    b.close();
    for t in tasks {
        t.await.unwrap();
    }
}
