//! `GET /api/config` (the running config, secrets redacted, and its hash)
//! and `POST /api/reload` (reloads the config file and answers with the
//! outcome: 200 and what was kept, replaced, started and stopped, or 422
//! and the errors that left the running pipeline unchanged).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use nagare_core::metrics::Registry;

use crate::topology::Control;

pub fn routes(control: Arc<Control>) -> Router<Arc<Registry>> {
    Router::new()
        .route("/api/config", get(config))
        .route("/api/reload", post(reload))
        .with_state(control)
}

async fn config(State(control): State<Arc<Control>>) -> impl IntoResponse {
    Json(control.config_json())
}

async fn reload(State(control): State<Arc<Control>>) -> impl IntoResponse {
    match control.reload().await {
        Ok(summary) => (
            StatusCode::OK,
            Json(serde_json::json!({ "status": "ok", "summary": summary })),
        ),
        Err(errors) => (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(
                serde_json::json!({ "status": "error", "errors": errors, "hash": control.hash() }),
            ),
        ),
    }
}
