//! `json`: one JSON object per line, written as msgpack with its keys in
//! order; `time_key` (when set and present) gives the event time.

use nagare_forward::msgpack::{write_map_len, write_str};
use nagare_forward::EventTime;
use serde_json::Value;

use super::Parser;

pub fn parse(
    p: &Parser,
    line: &[u8],
    extra: &[(&[u8], &[u8])],
    out: &mut Vec<u8>,
) -> Result<Option<EventTime>, String> {
    let v: Value = serde_json::from_slice(line).map_err(|e| format!("bad json: {e}"))?;
    let Value::Object(mut map) = v else {
        return Err("not a JSON object".into());
    };
    let mut time = None;
    if let Some(tk) = &p.time_key {
        if let Some(t) = map.get(tk) {
            let parsed = match t {
                Value::Number(n) => n
                    .as_f64()
                    .and_then(|f| super::parse_time(&f.to_string(), &super::TimeFmt::Auto)),
                Value::String(s) => super::parse_time(s, &p.time),
                _ => None,
            };
            time = Some(parsed.ok_or_else(|| {
                format!("time {t} in field {tk:?} does not match the time format")
            })?);
            if !p.keep_time_key {
                map.shift_remove(tk);
            }
        }
    }
    write_map_len(out, map.len() + extra.len());
    for (k, v) in &map {
        write_str(out, k.as_bytes());
        crate::formats::json::msgpack_from_json(v, out);
    }
    super::write_extra(extra, out);
    Ok(time)
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;

    #[test]
    fn sample_lines() {
        let p = parser("type = \"json\"\ntime_key = \"ts\"");
        let text = sample("app.jsonl");
        let lines: Vec<&str> = text.lines().collect();
        let (v, t, ok) = run(&p, lines[0]);
        assert!(ok, "{v}");
        assert_eq!(t, Some(utc("2026-11-21T10:15:30.123Z")));
        assert_eq!(
            keys(&v),
            ["level", "msg", "user", "latency_ms", "ok", "tags", "ctx"]
        );
        assert_eq!(s(&v, "level"), "info");
        assert_eq!(get(&v, "latency_ms").unwrap().as_f64(), Some(12.5));
        assert_eq!(get(&v, "ok").unwrap().as_bool(), Some(true));
        assert_eq!(get(&v, "tags").unwrap().as_array().unwrap().len(), 2);
        let ctx = get(&v, "ctx").unwrap();
        assert_eq!(get(ctx, "request_id").unwrap().as_str(), Some("r-17"));
        assert_eq!(get(ctx, "attempt").unwrap().as_i64(), Some(2));
        assert!(get(&v, "user").unwrap().is_nil());
        // A numeric time.
        let (_, t, ok) = run(&p, lines[1]);
        assert!(ok);
        assert_eq!(t.map(|t| t.secs), Some(1_795_252_531));
        // The malformed line is kept with the reason.
        let (v, t, ok) = run(&p, lines[2]);
        assert!(!ok && t.is_none());
        assert_eq!(s(&v, "message"), lines[2]);
        assert!(s(&v, "parse_error").starts_with("bad json"));
        // Not an object.
        let (v, _, ok) = run(&p, "[1,2]");
        assert!(!ok);
        assert_eq!(s(&v, "parse_error"), "not a JSON object");
    }
}
