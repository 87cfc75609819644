//! Where a chunk goes when its output gave up on it: the secondary output,
//! else (file buffer) a dead-letter file under `<path>/dead-letters/` that
//! `nagare replay` can send, else it is counted as lost.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use nagare_core::metrics::PluginStats;
use nagare_core::output::FlushError;

use super::chunk_file::{start_chunk, Slot};
use super::{Buffer, Chunk};

impl Buffer {
    /// Hands over a chunk whose output gave up on it (retries exhausted, or
    /// an error that a retry cannot fix).
    pub(super) async fn to_secondary(&self, chunk: &Chunk) {
        if self.try_secondary(chunk).await {
            return;
        }
        // A file buffer's default secondary: a dead-letter file `nagare replay` can send.
        if let Some(store) = &self.store {
            if self.to_dead_letters(chunk, &store.dir().join("dead-letters"), "chunk") {
                return;
            }
        }
        PluginStats::add(&self.stats.lost, chunk.count as u64);
        tracing::error!(output = %self.name, chunk = %chunk.id_hex(), events = chunk.count,
            "chunk discarded: its output gave up on it and no secondary output took it");
    }

    /// Writes `chunk` as a dead-letter file in `dir` and logs where (or why
    /// not), `what` leading the message; returns whether it is there.
    pub(super) fn to_dead_letters(&self, chunk: &Chunk, dir: &Path, what: &str) -> bool {
        match write_dead_letter(dir, &chunk.id, &chunk.tag, &chunk.segments, chunk.count) {
            Ok(path) => {
                PluginStats::add(&self.stats.to_secondary, chunk.count as u64);
                tracing::error!(output = %self.name, chunk = %chunk.id_hex(), events = chunk.count,
                    file = %path.display(), "{what} written to the dead-letter file (send it again with `nagare replay`)");
                true
            }
            Err(e) => {
                tracing::error!(output = %self.name, chunk = %chunk.id_hex(), path = %dir.display(),
                    error = %e, "{what}: cannot write the dead-letter file");
                false
            }
        }
    }

    /// Gives a chunk to the secondary output, if there is one (a few quick
    /// tries); returns whether it took it.
    pub(super) async fn try_secondary(&self, chunk: &Chunk) -> bool {
        if let Some((out, stats)) = &self.secondary() {
            // The secondary gets a few quick tries of its own.
            for attempt in 0..3u32 {
                match out.write(chunk).await {
                    Ok(()) => {
                        PluginStats::add(&self.stats.to_secondary, chunk.count as u64);
                        PluginStats::add(&stats.events_in, chunk.count as u64);
                        PluginStats::add(&stats.events_out, chunk.count as u64);
                        return true;
                    }
                    Err(e) => {
                        PluginStats::add(&stats.errors, 1);
                        tracing::error!(output = %stats.name, chunk = %chunk.id_hex(), attempt, error = %e, "secondary output failed");
                        if let FlushError::Permanent(_) = e {
                            PluginStats::add(&stats.permanent_errors, 1);
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
                    }
                }
            }
        }
        false
    }
}

/// Writes a chunk to `dir` (created when missing), in the chunk file format
/// (`nagare replay` sends such files); returns the file.
pub(super) fn write_dead_letter(
    dir: &Path,
    id: &[u8; 16],
    tag: &str,
    segments: &[Bytes],
    count: u32,
) -> io::Result<PathBuf> {
    fs::create_dir_all(dir)?;
    let (file, path) = super::chunk_file::create_unique(dir, &hex::encode(id))?;
    let slot = Slot::new(file, path.clone());
    let written = start_chunk(slot.clone(), id, tag)
        .and_then(|mut f| f.append(segments, count, &[]))
        .and_then(|()| slot.file.sync_data());
    if let Err(e) = written {
        let _ = fs::remove_file(&path);
        return Err(e);
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::super::recovery::read_chunk_file;
    use super::super::testing::entry;
    use super::*;

    #[test]
    fn dead_letters_are_chunk_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_dead_letter(dir.path(), &[9; 16], "dl", &[entry(1), entry(2)], 2).unwrap();
        let r = read_chunk_file(&path).unwrap().unwrap();
        assert_eq!((r.id, r.tag.as_str(), r.count), ([9; 16], "dl", 2));
    }
}
