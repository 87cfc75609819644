//! The tap endpoint, `GET /api/tap?pattern=P&rate=R&sample=N`: the events
//! routed with a tag matching P, as server-sent events, for `nagare tap`
//! (cli/tap.rs). It subscribes to the router's tap hub (router/tap_hub.rs).
//!
//! - `event: events`: `data:` lines, one JSON event each
//!   (`{"time":"…","tag":"…","record":{…}}`, as the stdout output writes).
//! - `event: skipped`: `{"skipped":N,"over_rate":M}` at most once a second:
//!   N events were not shown because this tapper fell behind (its channel
//!   was full), M because of the rate limit.
//!
//! `pattern`: Fluentd tag patterns separated by spaces (default `**`);
//! `sample`: keep one event in N (default 1); `rate`: at most R events per
//! second (default 0: no limit).

use std::convert::Infallible;
use std::time::{Duration, Instant};

use axum::extract::Query;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use nagare_core::pattern::Pattern;
use nagare_core::plugin::serde_inline_default;

use crate::router::tap_hub::{self, Limiter, Subscription, Tapped};

#[serde_inline_default]
#[derive(serde::Deserialize)]
pub struct TapQuery {
    #[serde_inline_default("**".into())]
    pattern: String,
    #[serde(default)]
    rate: f64,
    #[serde_inline_default(1)]
    sample: u64,
}

/// How often skipped counts are reported.
const REPORT_EVERY: Duration = Duration::from_secs(1);

struct Tapping {
    sub: Subscription,
    limiter: Limiter,
    last_report: Instant,
}

pub async fn tap(
    query: Result<Query<TapQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let q = match query {
        Ok(Query(q)) => q,
        Err(e) => return bad_request(format!("tap: {e}")),
    };
    let patterns = match Pattern::parse_list(&q.pattern) {
        Ok(p) => p,
        Err(e) => return bad_request(format!("tap: pattern: {e}")),
    };
    if q.sample == 0 {
        return bad_request("tap: sample must be 1 or more (keep one event in N)".into());
    }
    if !q.rate.is_finite() || q.rate < 0.0 {
        return bad_request(
            "tap: rate must be 0 (no limit) or a positive number of events per second".into(),
        );
    }
    tracing::info!(pattern = %q.pattern, rate = q.rate, sample = q.sample, "tap started");
    let state = Tapping {
        sub: tap_hub::subscribe(patterns),
        limiter: Limiter::new(q.sample, q.rate),
        last_report: Instant::now(),
    };
    let events = futures_util::stream::unfold(state, |mut st| async move {
        let event = next_event(&mut st).await?;
        Some((Ok::<_, Infallible>(event), st))
    });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

fn bad_request(msg: String) -> Response {
    (StatusCode::BAD_REQUEST, msg).into_response()
}

/// The next SSE event; None when the daemon is stopping.
async fn next_event(st: &mut Tapping) -> Option<Event> {
    loop {
        if st.last_report.elapsed() >= REPORT_EVERY {
            st.last_report = Instant::now();
            let skipped = st.sub.take_skipped();
            let over_rate = st.limiter.take_limited();
            if skipped + over_rate > 0 {
                let data = serde_json::json!({ "skipped": skipped, "over_rate": over_rate });
                return Some(Event::default().event("skipped").data(data.to_string()));
            }
        }
        match tokio::time::timeout(REPORT_EVERY, st.sub.rx.recv()).await {
            Ok(None) => return None,
            Ok(Some(batch)) => {
                if let Some(lines) = render(&batch, &mut st.limiter) {
                    return Some(Event::default().event("events").data(lines));
                }
            }
            Err(_) => {}
        }
    }
}

/// The JSON lines of the events of `batch` the limiter keeps (None if none).
fn render(batch: &Tapped, limiter: &mut Limiter) -> Option<String> {
    if !limiter.wants_any(batch.count) {
        return None;
    }
    let mut out = Vec::new();
    for part in &batch.parts {
        for (time, record, _) in nagare_core::record::entries(part) {
            if limiter.keep() {
                nagare_core::json::write_event(&mut out, &batch.tag, time, record);
            }
        }
    }
    // The last newline would make an empty data line.
    out.pop()?;
    Some(String::from_utf8_lossy(&out).into_owned())
}
