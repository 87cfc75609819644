//! The HTTP monitor: `/metrics` (Prometheus text), `/health`, `/api/plugins` (JSON),
//! `/api/config` and `POST /api/reload` (reload.rs), `/api/tap` (live events
//! from the router's tap hub, router/tap_hub.rs, served by tap_endpoint.rs)
//! and the status page at `/` (status.html).

mod reload;

use std::fmt::Write;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Extension;
use axum::{Json, Router};
use nagare_core::metrics::{PluginStats, Registry};
use tokio::sync::watch;

use crate::topology::Control;

mod tap_endpoint;

type Counter = fn(&PluginStats) -> u64;

/// (metric suffix, help text, reader) for every per-plugin counter.
const COUNTERS: &[(&str, &str, Counter)] = &[
    ("events_in_total", "Events received by the plugin", |s| {
        PluginStats::get(&s.events_in)
    }),
    (
        "events_out_total",
        "Events passed on or delivered by the plugin",
        |s| PluginStats::get(&s.events_out),
    ),
    ("bytes_in_total", "Payload bytes received", |s| {
        PluginStats::get(&s.bytes_in)
    }),
    ("bytes_out_total", "Payload bytes delivered", |s| {
        PluginStats::get(&s.bytes_out)
    }),
    (
        "errors_total",
        "Errors (failed flushes, unroutable batches, …)",
        |s| PluginStats::get(&s.errors),
    ),
    ("retries_total", "Flush retries (outputs), program restarts (exec filters)", |s| {
        PluginStats::get(&s.retries)
    }),
    (
        "permanent_errors_total",
        "Failed flushes that a retry cannot fix; the chunk went to the secondary output at once",
        |s| PluginStats::get(&s.permanent_errors),
    ),
    (
        "dropped_events_total",
        "Events dropped: by an output's overflow_action drop_oldest_chunk, or by a filter (grep, throttle, sample, rewrite_tag unmatched = drop, lua code -1, exec)",
        |s| PluginStats::get(&s.dropped),
    ),
    (
        "throttled_events_total",
        "Events over a throttle filter's rate limit (dropped, or re-tagged with excess_tag)",
        |s| PluginStats::get(&s.throttled),
    ),
    (
        "rejected_events_total",
        "Events refused by overflow_action throw (not acked; the sender retries)",
        |s| PluginStats::get(&s.rejected),
    ),
    (
        "secondary_events_total",
        "Events handed to the secondary output: retries ran out, or a permanent error",
        |s| PluginStats::get(&s.to_secondary),
    ),
    (
        "lost_events_total",
        "Events discarded: the output gave up on them (retries ran out or a permanent error) with no secondary, or a chunk kept on disk only could not be read back",
        |s| PluginStats::get(&s.lost),
    ),
    ("connections_total", "Connections accepted", |s| {
        PluginStats::get(&s.connections)
    }),
    ("bad_input_total", "Connections closed for bad input", |s| {
        PluginStats::get(&s.bad_input)
    }),
    (
        "label_overflow_events_total",
        "Events a loki output sent to its overflow stream: their label set was new past max_label_sets",
        |s| PluginStats::get(&s.label_overflow),
    ),
    (
        "duplicate_events_total",
        "Events of resent chunks acked again without being stored twice",
        |s| PluginStats::get(&s.duplicates),
    ),
];

const GAUGES: &[(&str, &str, Counter)] = &[
    ("buffer_bytes", "Bytes held in the output's buffer", |s| {
        PluginStats::get(&s.buffer_bytes)
    }),
    (
        "buffer_chunks",
        "Closed chunks waiting or being flushed",
        |s| PluginStats::get(&s.buffer_chunks),
    ),
    (
        "buffer_disk_only_bytes",
        "Bytes of queued chunks a file buffer keeps on disk only (past memory_limit_size)",
        |s| PluginStats::get(&s.buffer_disk_only_bytes),
    ),
];

pub fn render_metrics(reg: &Registry) -> String {
    let plugins = reg.all();
    let mut out = String::new();
    for (kind, list) in [("counter", COUNTERS), ("gauge", GAUGES)] {
        for (name, help, read) in list {
            let _ = writeln!(
                out,
                "# HELP nagare_{name} {help}\n# TYPE nagare_{name} {kind}"
            );
            for p in &plugins {
                let _ = writeln!(
                    out,
                    "nagare_{name}{{plugin=\"{}\",kind=\"{}\",type=\"{}\"}} {}",
                    p.name,
                    p.kind,
                    p.plugin_type,
                    read(p)
                );
            }
        }
    }
    let _ = writeln!(
        out,
        "# HELP nagare_refused_events_total Events the destination refused for good in a partial write (per item), by reason; they went to the secondary output or dead letters\n# TYPE nagare_refused_events_total counter"
    );
    for p in &plugins {
        for (reason, n) in p.refused() {
            let reason = reason.replace(['\\', '"', '\n'], "_");
            let _ = writeln!(
                out,
                "nagare_refused_events_total{{plugin=\"{}\",kind=\"{}\",type=\"{}\",reason=\"{reason}\"}} {n}",
                p.name, p.kind, p.plugin_type
            );
        }
    }
    out
}

pub fn plugins_json(reg: &Registry) -> serde_json::Value {
    let list: Vec<serde_json::Value> = reg
        .all()
        .iter()
        .map(|p| {
            let mut m = serde_json::Map::new();
            m.insert("name".into(), p.name.clone().into());
            m.insert("kind".into(), p.kind.into());
            m.insert("type".into(), p.plugin_type.clone().into());
            for (name, _, read) in COUNTERS.iter().chain(GAUGES) {
                let key = name.trim_end_matches("_total");
                m.insert(key.into(), read(p).into());
            }
            serde_json::Value::Object(m)
        })
        .collect();
    serde_json::json!({ "plugins": list })
}

async fn metrics(
    State(reg): State<Arc<Registry>>,
    Extension(control): Extension<Arc<Control>>,
) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        render_metrics(&reg) + &control.metrics(),
    )
}

async fn plugins(State(reg): State<Arc<Registry>>) -> impl IntoResponse {
    Json(plugins_json(&reg))
}

/// The status page: one self-contained HTML file that polls /api/plugins.
async fn status_page() -> impl IntoResponse {
    axum::response::Html(include_str!("status.html"))
}

async fn health() -> impl IntoResponse {
    Json(serde_json::json!({ "status": "ok" }))
}

pub async fn serve(
    bind: &str,
    reg: Arc<Registry>,
    control: Arc<Control>,
    mut shutdown: watch::Receiver<bool>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .map_err(|e| anyhow::anyhow!("monitor: cannot listen on {bind}: {e}"))?;
    tracing::info!(bind = %bind, "monitor listening");
    let app = Router::new()
        .route("/", get(status_page))
        .route("/metrics", get(metrics))
        .route("/health", get(health))
        .route("/api/plugins", get(plugins))
        .route("/api/tap", get(tap_endpoint::tap))
        .merge(reload::routes(control.clone()))
        .layer(Extension(control))
        .with_state(reg);
    Ok(tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = shutdown.wait_for(|v| *v).await;
                // Taps stream forever: end them, or the shutdown waits.
                crate::router::tap_hub::close_all();
            })
            .await;
    }))
}
