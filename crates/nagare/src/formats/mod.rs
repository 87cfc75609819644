//! Turning PackedForward entries into text and bytes for outputs: JSON lines
//! (`nagare_core::json`), LTSV, msgpack, single values and OTLP. Records
//! are walked straight from msgpack into the output buffer; no value tree
//! is built.

pub mod json_msgpack;
pub mod logstash;
pub mod ltsv;
pub mod otlp;
pub mod template;

use nagare_core::chunk::Chunk;
use nagare_core::json;
use nagare_core::record::field;
use serde::Deserialize;

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, schemars::JsonSchema, Default,
)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// `{"time":"<RFC3339 nanos>","tag":"…","record":{…}}` per line.
    #[default]
    Json,
    /// `time:…<TAB>tag:…<TAB>key:value…` per line.
    Ltsv,
    /// The raw msgpack `[time, record]` entries.
    Msgpack,
    /// One field of the record (`message_key`), raw, followed by a newline.
    SingleValue,
}

/// The record key outputs read a line from by default (`message_key`).
pub const DEFAULT_MESSAGE_KEY: &str = "message";

/// Writes every event of the chunk in `format`, one line each.
/// Formats a chunk's events for line-oriented outputs (stdout, file).
pub fn render(format: Format, message_key: &str, chunk: &Chunk, out: &mut Vec<u8>) {
    for (time, record, entry) in chunk.entries() {
        render_entry(format, message_key, &chunk.tag, time, record, entry, out);
    }
}

pub fn render_entry(
    format: Format,
    message_key: &str,
    tag: &str,
    time: nagare_forward::EventTime,
    record: &[u8],
    entry: &[u8],
    out: &mut Vec<u8>,
) {
    match format {
        Format::Json => json::write_event(out, tag, time, record),
        Format::Ltsv => ltsv::write_event(out, tag, time, record),
        Format::Msgpack => out.extend_from_slice(entry),
        Format::SingleValue => {
            if let Some(v) = field(record, message_key.as_bytes()) {
                out.extend_from_slice(v);
            }
            out.push(b'\n');
        }
    }
}
