//! Drives the Rust library for the conformance suite (protocol:
//! sdk/conformance/README.md): one command per line on stdin, one JSON reply
//! per line on stdout.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nagare_logger::{Config, Error, Logger, NagareLayer, Overflow};
use serde_json::{json, Value};
use tracing_subscriber::layer::SubscriberExt;

fn configure(o: &Value, connect_failures: Arc<AtomicU64>) -> Result<Logger, String> {
    let servers: Vec<String> = o["servers"]
        .as_array()
        .ok_or("servers: a list")?
        .iter()
        .filter_map(|s| s.as_str().map(String::from))
        .collect();
    let ms = |k: &str, d: u64| Duration::from_millis(o[k].as_u64().unwrap_or(d));
    let mut cfg = Config::new()
        .servers(servers)
        .map_err(|e| e.to_string())?
        .require_ack(o["require_ack"].as_bool().unwrap_or(false))
        .backoff(ms("backoff_base_ms", 100), ms("backoff_max_ms", 30_000))
        .on_error(move |e| {
            if matches!(e, Error::Connect { .. }) {
                connect_failures.fetch_add(1, Ordering::Relaxed);
            }
        });
    if let Some(p) = o["spill_path"].as_str() {
        cfg = cfg.spill_path(p);
    }
    if let Some(ca) = o["tls_ca"].as_str() {
        cfg.set("tls", "true").map_err(|e| e.to_string())?;
        cfg.set("tls_ca_file", ca).map_err(|e| e.to_string())?;
    }
    if let Some(n) = o["buffer_bytes"].as_u64() {
        cfg = cfg.buffer_limit(n as usize);
    }
    if let Some(ov) = o["overflow"].as_str() {
        cfg = cfg.overflow(Overflow::parse(ov).map_err(|e| e.to_string())?);
    }
    Logger::new(cfg).map_err(|e| e.to_string())
}

fn main() {
    let mut log: Option<Logger> = None;
    let mut closed = false;
    let mut seqs: HashMap<String, u64> = HashMap::new();
    // connection attempts that failed (the runner waits on it, not on sleeps)
    let connect_failures = Arc::new(AtomicU64::new(0));
    let stdout = std::io::stdout();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let (cmd, arg) = line.trim().split_once(' ').unwrap_or((line.trim(), ""));
        let reply = match (cmd, log.as_ref()) {
            ("configure", _) => match serde_json::from_str(arg)
                .map_err(|e| e.to_string())
                .and_then(|o| configure(&o, connect_failures.clone()))
            {
                Ok(l) => {
                    log = Some(l);
                    json!({ "ok": true })
                }
                Err(e) => json!({ "error": e }),
            },
            ("emit", Some(l)) => {
                let (tag, n) = arg.split_once(' ').unwrap_or((arg, "0"));
                let n: u64 = n.parse().unwrap_or(0);
                let start = *seqs.get(tag).unwrap_or(&0);
                seqs.insert(tag.to_string(), start + n);
                let accepted = (start..start + n)
                    .filter(|i| l.emit(tag, &json!({ "seq": i })).is_ok())
                    .count();
                json!({ "accepted": accepted })
            }
            ("log", Some(l)) => {
                // through the tracing integration: message "seq N", seq also a field
                let (tag, n) = arg.split_once(' ').unwrap_or((arg, "0"));
                let n: u64 = n.parse().unwrap_or(0);
                let start = *seqs.get(tag).unwrap_or(&0);
                seqs.insert(tag.to_string(), start + n);
                let subscriber =
                    tracing_subscriber::registry().with(NagareLayer::new(l.clone(), tag));
                tracing::subscriber::with_default(subscriber, || {
                    for i in start..start + n {
                        tracing::info!(seq = i, "seq {i}");
                    }
                });
                json!({ "logged": n })
            }
            ("close", Some(l)) => {
                closed = true;
                let t0 = Instant::now();
                let r = l.close(Duration::from_millis(arg.parse().unwrap_or(10_000)));
                json!({ "closed": r.is_ok(), "ms": t0.elapsed().as_millis() as u64 })
            }
            ("stats", Some(l)) => {
                let s = l.stats();
                // kept: events in the spill file. After close, buffered is what
                // the file keeps; before, at most what was written to it.
                let kept = if closed {
                    s.buffered
                } else {
                    s.spilled.min(s.buffered)
                };
                json!({
                    "sent": s.sent,
                    "dropped": s.dropped,
                    "kept": kept,
                    "buffered": s.buffered,
                    "connect_failures": connect_failures.load(Ordering::Relaxed),
                })
            }
            ("quit", _) => break,
            (_, None) => json!({ "error": format!("{cmd} before configure") }),
            _ => json!({ "error": format!("unknown command {cmd:?}") }),
        };
        let mut out = stdout.lock();
        let _ = writeln!(out, "{reply}");
        let _ = out.flush();
    }
}
