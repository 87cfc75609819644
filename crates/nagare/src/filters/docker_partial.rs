//! `docker_partial`: joins the pieces of a long line that Docker's
//! `fluentd` log driver sends as separate events (moby cuts a line at
//! 16 KiB; daemon/logger/fluentd/fluentd.go marks each piece with
//! `partial_message = "true"`, `partial_id`, `partial_ordinal` (from 1) and
//! `partial_last`), into one event: the first piece's record with the
//! pieces' `log` texts joined in ordinal order and the `partial_*` fields
//! taken off; the first piece's time.
//!
//! A filter, not an option of the forward input: the driver's records reach
//! nagare through any forward hop (a Fluentd or Fluent Bit relay, nagare's
//! own forward output) and the filter joins them wherever they come in,
//! matched by tag like the rest of a Docker pipeline. Pieces wait in memory
//! between batches, keyed by tag and `partial_id` (a random id per line,
//! so the interleaved pieces of stdout and stderr stay apart).
//!
//! Bounded: a joined text holds at most `max_size` bytes, the bytes beyond
//! are counted in the event's `truncated` field. A line whose last piece
//! has not come within `flush_interval` goes out, with `partial = true`,
//! with the next batch the filter sees (of any tag it matches). Pieces held
//! when the daemon stops are lost: the driver sent them without acks.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use bytes::Bytes;
use nagare_core::filter::{Filter, FilterPlugin, Filtered};
use nagare_core::plugin::{serde_inline_default, BuildContext, OptionError};
use nagare_core::record::{entries, field, map_at, pair_at};
use nagare_core::units::{Dur, Size};
use nagare_forward::msgpack::{write_bool, write_map_len, write_str};
use serde::Deserialize;

#[serde_inline_default]
#[derive(Debug, Clone, Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DockerPartialConfig {
    /// The field holding each piece's text (default "log", the driver's).
    #[serde_inline_default("log".into())]
    pub key: String,
    /// Longest joined text (default "1MiB"); the bytes beyond are left out
    /// and counted in the event's `truncated` field.
    #[serde_inline_default(Size::mib(1))]
    pub max_size: Size,
    /// A line whose last piece has not come for this long goes out as it
    /// is, with `partial = true`, with the next batch (default "5s").
    #[serde_inline_default(Dur::secs(5))]
    pub flush_interval: Dur,
}

impl FilterPlugin for DockerPartialConfig {
    const TYPE: &'static str = "docker_partial";
    const DOC: &'static str = "Joins the pieces of long lines that Docker's `fluentd` log driver sends as separate events (`partial_message`, `partial_id`, `partial_ordinal`, `partial_last`) into one event, bounded by `max_size` (see [Container logs](containers.md)).";

    fn build(self, _cx: &mut BuildContext) -> Result<Box<dyn Filter>, OptionError> {
        if self.key.is_empty() {
            return Err(OptionError::new("key", "must not be empty"));
        }
        Ok(Box::new(DockerPartial {
            cfg: self,
            held: Mutex::new(HashMap::new()),
        }))
    }
}

/// The fields the driver adds to a piece, taken off the joined event.
const PARTIAL_FIELDS: [&[u8]; 4] = [
    b"partial_message",
    b"partial_id",
    b"partial_ordinal",
    b"partial_last",
];

struct DockerPartial {
    cfg: DockerPartialConfig,
    /// Lines being joined, by (tag, partial_id).
    held: Mutex<HashMap<(String, Vec<u8>), Held>>,
}

struct Held {
    /// The first piece's entry head (0x92 and its time) and record.
    head: Vec<u8>,
    record: Vec<u8>,
    /// (ordinal, text) of the pieces so far.
    pieces: Vec<(u64, Vec<u8>)>,
    size: usize,
    dropped: u64,
    at: Instant,
}

impl Filter for DockerPartial {
    fn filter(&self, tag: &str, parts: &[Bytes], _count: u32) -> Filtered {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let any_piece = parts
            .iter()
            .flat_map(|p| entries(p))
            .any(|(_, r, _)| field(r, b"partial_message") == Some(b"true"));
        let mut out = Filtered::default();
        // Lines whose last piece is late, of any tag: out with this batch.
        let late: Vec<(String, Vec<u8>)> = held
            .iter()
            .filter(|(_, h)| h.at.elapsed() >= self.cfg.flush_interval.0)
            .map(|(k, _)| k.clone())
            .collect();
        let mut late_same_tag = Vec::new();
        for k in late {
            let h = held.remove(&k).expect("listed above");
            let mut e = Vec::new();
            self.write_joined(&h, true, &mut e);
            out.errors += 1;
            if k.0 == tag {
                late_same_tag.push(e);
            } else {
                out.moved.push((k.0, Bytes::from(e), 1));
            }
        }
        if !any_piece && late_same_tag.is_empty() {
            return out;
        }
        let max = self.cfg.max_size.0 as usize;
        let mut batch = Vec::new();
        let mut n = 0u32;
        for e in late_same_tag {
            batch.extend_from_slice(&e);
            n += 1;
        }
        for (_, record, entry) in parts.iter().flat_map(|p| entries(p)) {
            let id = match (
                field(record, b"partial_message"),
                field(record, b"partial_id"),
            ) {
                (Some(b"true"), Some(id)) => id,
                _ => {
                    batch.extend_from_slice(entry);
                    n += 1;
                    continue;
                }
            };
            let ordinal = field(record, b"partial_ordinal")
                .and_then(|o| std::str::from_utf8(o).ok()?.parse().ok())
                .unwrap_or(0);
            let last = field(record, b"partial_last") == Some(b"true");
            let text = field(record, self.cfg.key.as_bytes()).unwrap_or(b"");
            let key = (tag.to_string(), id.to_vec());
            let h = held.entry(key.clone()).or_insert_with(|| Held {
                head: entry[..entry.len() - record.len()].to_vec(),
                record: record.to_vec(),
                pieces: Vec::new(),
                size: 0,
                dropped: 0,
                at: Instant::now(),
            });
            let take = max.saturating_sub(h.size).min(text.len());
            h.pieces.push((ordinal, text[..take].to_vec()));
            h.size += take;
            h.dropped += (text.len() - take) as u64;
            h.at = Instant::now();
            if last {
                let h = held.remove(&key).expect("inserted above");
                if h.dropped > 0 {
                    out.errors += 1;
                }
                self.write_joined(&h, false, &mut batch);
                n += 1;
            }
        }
        out.batch = Some((Bytes::from(batch), n));
        out
    }
}

impl DockerPartial {
    /// Writes the joined entry of `h`.
    fn write_joined(&self, h: &Held, partial: bool, out: &mut Vec<u8>) {
        let mut pieces: Vec<&(u64, Vec<u8>)> = h.pieces.iter().collect();
        pieces.sort_by_key(|(o, _)| *o);
        let text: Vec<u8> = pieces.iter().flat_map(|(_, t)| t.iter().copied()).collect();
        let key = self.cfg.key.as_bytes();
        // The first piece's pairs but the partial fields and the text.
        let mut pairs = Vec::new();
        let mut kept = 0;
        if let Some((count, mut p)) = map_at(&h.record, 0) {
            for _ in 0..count {
                let Some(pair) = pair_at(&h.record, p) else {
                    break;
                };
                let name = pair.key.map(|(a, b)| &h.record[a..b]);
                let skip = name.is_some_and(|n| n == key || PARTIAL_FIELDS.contains(&n));
                if !skip {
                    pairs.extend_from_slice(&h.record[p..pair.end]);
                    kept += 1;
                }
                p = pair.end;
            }
        }
        out.extend_from_slice(&h.head);
        write_map_len(out, kept + 1 + partial as usize + (h.dropped > 0) as usize);
        out.extend_from_slice(&pairs);
        write_str(out, key);
        write_str(out, &text);
        if partial {
            write_str(out, b"partial");
            write_bool(out, true);
        }
        if h.dropped > 0 {
            write_str(out, b"truncated");
            let _ = rmp::encode::write_uint(out, h.dropped);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nagare_forward::EventTime;

    /// A piece as moby's fluentd driver makes it (fluentd.go's Log).
    fn piece(time: u32, id: &str, ordinal: u32, last: bool, log: &str) -> Vec<u8> {
        let mut e = vec![0x92];
        e.extend_from_slice(&EventTime::new(time, 0).to_bytes());
        write_map_len(&mut e, 8);
        for (k, v) in [
            ("container_id", "c0ffee"),
            ("container_name", "/web"),
            ("source", "stdout"),
            ("log", log),
            ("partial_message", "true"),
            ("partial_id", id),
            ("partial_ordinal", &ordinal.to_string()),
            ("partial_last", if last { "true" } else { "false" }),
        ] {
            write_str(&mut e, k.as_bytes());
            write_str(&mut e, v.as_bytes());
        }
        e
    }

    fn whole(time: u32, log: &str) -> Vec<u8> {
        let mut e = vec![0x92];
        e.extend_from_slice(&EventTime::new(time, 0).to_bytes());
        write_map_len(&mut e, 2);
        write_str(&mut e, b"log");
        write_str(&mut e, log.as_bytes());
        write_str(&mut e, b"source");
        write_str(&mut e, b"stderr");
        e
    }

    fn filter(toml_text: &str) -> Box<dyn Filter> {
        let cfg: DockerPartialConfig = toml::from_str(toml_text).unwrap();
        cfg.build(&mut BuildContext::default()).unwrap()
    }

    fn records(b: &[u8]) -> Vec<(EventTime, rmpv::Value)> {
        entries(b)
            .map(|(t, r, _)| (t, rmpv::decode::read_value(&mut &r[..]).unwrap()))
            .collect()
    }

    fn get<'a>(v: &'a rmpv::Value, k: &str) -> Option<&'a rmpv::Value> {
        v.as_map()?
            .iter()
            .find(|(kk, _)| kk.as_str() == Some(k))
            .map(|(_, v)| v)
    }

    #[test]
    fn pieces_across_batches_become_one_event() {
        let f = filter("");
        let b1 = [piece(10, "a", 1, false, "aa"), whole(11, "x")].concat();
        let out = f.filter("docker.web", &[Bytes::from(b1)], 2);
        let (b, n) = out.batch.unwrap();
        assert_eq!(n, 1);
        assert_eq!(get(&records(&b)[0].1, "log").unwrap().as_str(), Some("x"));
        let b2 = [
            piece(12, "a", 2, false, "bb"),
            piece(13, "a", 3, true, "cc"),
        ]
        .concat();
        let (b, n) = f.filter("docker.web", &[Bytes::from(b2)], 2).batch.unwrap();
        assert_eq!(n, 1);
        let r = records(&b);
        assert_eq!(r[0].0, EventTime::new(10, 0));
        let keys: Vec<_> = r[0]
            .1
            .as_map()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str().unwrap())
            .collect();
        assert_eq!(keys, ["container_id", "container_name", "source", "log"]);
        assert_eq!(get(&r[0].1, "log").unwrap().as_str(), Some("aabbcc"));
        // A batch without pieces goes on as it came.
        assert!(f
            .filter("docker.web", &[Bytes::from(whole(1, "y"))], 1)
            .batch
            .is_none());
    }

    #[test]
    fn bounded_and_late_lines_are_marked() {
        let f = filter("max_size = \"3B\"\nflush_interval = \"0s\"");
        let b = [
            piece(1, "a", 1, false, "ab"),
            piece(1, "a", 2, true, "cdef"),
        ]
        .concat();
        let (b, _) = f.filter("t", &[Bytes::from(b)], 2).batch.unwrap();
        let r = records(&b);
        assert_eq!(get(&r[0].1, "log").unwrap().as_str(), Some("abc"));
        assert_eq!(get(&r[0].1, "truncated").unwrap().as_u64(), Some(3));
        let out = f.filter("t", &[Bytes::from(piece(1, "b", 1, false, "zz"))], 1);
        assert_eq!(out.batch.unwrap().1, 0);
        let out = f.filter("other", &[Bytes::from(whole(2, "w"))], 1);
        assert_eq!(out.moved.len(), 1);
        let r = records(&out.moved[0].1);
        assert_eq!(get(&r[0].1, "log").unwrap().as_str(), Some("zz"));
        assert_eq!(get(&r[0].1, "partial").unwrap().as_bool(), Some(true));
    }
}
