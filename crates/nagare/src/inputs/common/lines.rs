//! A line as an event: its PackedForward entry, and a file's tag.

use std::path::Path;

use nagare_forward::msgpack::{write_map_len, write_str};
use nagare_forward::EventTime;

use crate::parsers::Parser;

/// Appends one PackedForward entry `[time, record]` for `line` to `out`:
/// `{message_key: line}` (parser "none", without an allocation) or the
/// parser's record, with `path_key` = (key, path) added when set. The time
/// is the line's own when the parser found one, else `now`. Returns false
/// when the line did not parse (the record then carries the parse error).
pub fn encode_line(
    out: &mut Vec<u8>,
    now: EventTime,
    line: &[u8],
    parser: &Parser,
    path_key: Option<(&str, &str)>,
) -> bool {
    out.push(0x92);
    let at = out.len();
    out.extend_from_slice(&now.to_bytes());
    if !parser.is_none() {
        let extra = path_key.map(|(k, p)| (k.as_bytes(), p.as_bytes()));
        let parsed = parser.parse_with(line, extra.as_slice(), out);
        if let Some(t) = parsed.time {
            out[at..at + 10].copy_from_slice(&t.to_bytes());
        }
        return parsed.ok;
    }
    write_map_len(out, if path_key.is_some() { 2 } else { 1 });
    write_str(out, parser.message_key().as_bytes());
    write_str(out, line);
    if let Some((k, p)) = path_key {
        write_str(out, k.as_bytes());
        write_str(out, p.as_bytes());
    }
    true
}

/// The tag of a followed file: `pattern`'s `*` replaced by the file's path
/// with its slashes as dots (`app.*` and /var/log/a.log: app.var.log.a.log).
pub fn tag_for(pattern: &str, path: &Path) -> String {
    if !pattern.contains('*') {
        return pattern.to_string();
    }
    let p = path.to_string_lossy();
    let dotted = p.trim_start_matches('/').replace('/', ".");
    pattern.replacen('*', &dotted, 1)
}
