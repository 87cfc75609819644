//! Where a chunk goes when its output gave up on it: the secondary output,
//! else a dead-letter file that `nagare replay` can send (under a file
//! buffer's path, else under `[system] dead_letter_dir`), never dropped
//! unless that file cannot be written either.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
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
        self.hand_over(chunk, &[]).await
    }

    /// Hands over the entries of a partial write that the destination
    /// refused for good (`rejected`: index in `chunk`, reason), counted
    /// per reason.
    pub(super) async fn refuse(&self, chunk: &Chunk, rejected: &[(u32, String)]) {
        let mut indexes: Vec<u32> = rejected.iter().map(|(i, _)| *i).collect();
        indexes.sort_unstable();
        indexes.dedup();
        let part = chunk.select(&indexes);
        // The reasons by the entry's position in the whole chunk, as the
        // dead-letter file's `.reasons` file names them.
        let reasons: Vec<(u32, String)> = rejected
            .iter()
            .map(|(i, why)| (chunk.position(*i), why.clone()))
            .collect();
        let mut by_reason: BTreeMap<&str, u64> = BTreeMap::new();
        for (_, why) in rejected {
            *by_reason.entry(reason_name(why)).or_default() += 1;
        }
        self.stats
            .add_refused(by_reason.iter().map(|(k, v)| (*k, *v)));
        let summary: Vec<String> = by_reason.iter().map(|(k, n)| format!("{k} ×{n}")).collect();
        tracing::error!(output = %self.name, chunk = %chunk.id_hex(), tag = %chunk.tag,
            events = part.count, reasons = %summary.join(", "), first = %rejected[0].1,
            "the destination refused these events for good");
        self.hand_over(&part, &reasons).await
    }

    async fn hand_over(&self, chunk: &Chunk, reasons: &[(u32, String)]) {
        if self.try_secondary(chunk).await {
            return;
        }
        if let Some(dir) = self.dead_letters() {
            if self.to_dead_letters(chunk, &dir, "chunk", reasons) {
                return;
            }
        }
        PluginStats::add(&self.stats.lost, chunk.count as u64);
        tracing::error!(output = %self.name, chunk = %chunk.id_hex(), events = chunk.count,
            "chunk discarded: its output gave up on it, no secondary output took it and no dead-letter file could be written");
    }

    /// Writes `chunk` as a dead-letter file in `dir` (with `reasons`, if
    /// any, in a `.reasons` file beside it) and logs where (or why not),
    /// `what` leading the message; returns whether it is there.
    pub(super) fn to_dead_letters(
        &self,
        chunk: &Chunk,
        dir: &Path,
        what: &str,
        reasons: &[(u32, String)],
    ) -> bool {
        match write_dead_letter(dir, &chunk.id, &chunk.tag, &chunk.segments, chunk.count)
            .and_then(|path| write_reasons(&path, reasons).map(|()| path))
        {
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

/// The name a refusal is counted under: its text up to the first ':'
/// (e.g. "mapper_parsing_exception"), at most 64 bytes.
pub(super) fn reason_name(why: &str) -> &str {
    let name = why.split(':').next().unwrap_or("").trim();
    let mut end = name.len().min(64);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    if end == 0 {
        "unknown"
    } else {
        &name[..end]
    }
}

/// Beside a dead-letter file `<id>.chunk`, `<id>.reasons`: one line per
/// refused entry, its position in the chunk the output was given and why
/// (`nagare replay` sends `.chunk` files only).
fn write_reasons(chunk_file: &Path, reasons: &[(u32, String)]) -> io::Result<()> {
    if reasons.is_empty() {
        return Ok(());
    }
    let mut text = String::new();
    for (pos, why) in reasons {
        text.push_str(&format!("{pos}\t{}\n", why.replace(['\n', '\r'], " ")));
    }
    let mut f = fs::File::create(chunk_file.with_extension("reasons"))?;
    f.write_all(text.as_bytes())?;
    f.sync_data()
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
