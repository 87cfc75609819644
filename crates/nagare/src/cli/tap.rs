//! `nagare tap [PATTERN]...`: prints the events a running daemon routes
//! with a matching tag, as JSON lines, from its monitor's `/api/tap`
//! (monitor/tap_endpoint.rs, fed by the router's tap hub, router/tap_hub.rs).

use std::io::Write;
use std::process::ExitCode;

use super::monitor_client::{self, MonitorArgs, SseReader};

#[derive(clap::Args)]
pub struct TapArgs {
    /// Tag patterns, as in a `match` (`*`, `**`, `{a,b}`); default `**`.
    #[arg(value_name = "PATTERN")]
    pub patterns: Vec<String>,
    #[command(flatten)]
    pub monitor: MonitorArgs,
    /// Show at most this many events per second (0: no limit); the others
    /// are counted on stderr.
    #[arg(long, default_value_t = 100.0, value_name = "EVENTS")]
    pub rate: f64,
    /// Show one event in N.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub sample: u64,
    /// Exit after printing this many events.
    #[arg(short = 'n', long, value_name = "N")]
    pub count: Option<u64>,
}

pub fn main(a: TapArgs) -> ExitCode {
    super::block_on(tap(a))
}

async fn tap(a: TapArgs) -> Result<String, String> {
    let pattern = if a.patterns.is_empty() {
        "**".to_string()
    } else {
        a.patterns.join(" ")
    };
    let path = format!(
        "/api/tap?pattern={}&rate={}&sample={}",
        percent_encode(&pattern),
        a.rate,
        a.sample
    );
    let addr = &a.monitor.monitor;
    let mut events = SseReader::new(monitor_client::get(addr, &path).await?);
    eprintln!(
        "tapping {pattern} at {addr} (rate {}/s, one in {})",
        a.rate, a.sample
    );
    let mut stdout = std::io::stdout().lock();
    let mut printed = 0u64;
    let (mut skipped, mut over_rate) = (0u64, 0u64);
    while let Some(ev) = events.next().await? {
        match ev.event.as_str() {
            "events" => {
                for line in ev.data.lines() {
                    if a.count.is_some_and(|n| printed >= n) {
                        break;
                    }
                    if writeln!(stdout, "{line}").is_err() {
                        return Ok(summary(printed, skipped, over_rate)); // stdout closed (| head)
                    }
                    printed += 1;
                }
                let _ = stdout.flush();
                if a.count.is_some_and(|n| printed >= n) {
                    break;
                }
            }
            "skipped" => {
                let v: serde_json::Value = serde_json::from_str(&ev.data).unwrap_or_default();
                let n = v["skipped"].as_u64().unwrap_or(0);
                if n > 0 {
                    eprintln!("tap: {n} events skipped: this tap fell behind the pipeline");
                }
                let m = v["over_rate"].as_u64().unwrap_or(0);
                if m > 0 {
                    eprintln!("tap: {m} events over --rate");
                }
                skipped += n;
                over_rate += m;
            }
            _ => {}
        }
    }
    Ok(summary(printed, skipped, over_rate))
}

fn summary(printed: u64, skipped: u64, over_rate: u64) -> String {
    format!("tap: done: {printed} events shown, {over_rate} over --rate, {skipped} skipped (the tap fell behind)")
}

/// Encodes a query value (patterns hold spaces, braces and commas).
fn percent_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.*".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
