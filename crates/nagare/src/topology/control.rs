//! What the monitor knows about reloads: the running config (redacted) and
//! its hash, the reload counters, and the way to ask for a reload (`POST
//! /api/reload`), answered once the reload is done.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::RwLock;

use tokio::sync::{mpsc, oneshot};

/// What a reload did: the plugins it kept running, replaced (stopped the
/// old, started the new), started and stopped, by name.
#[derive(Debug, Default, serde::Serialize)]
pub struct Summary {
    pub hash: String,
    pub kept: Vec<String>,
    pub replaced: Vec<String>,
    pub started: Vec<String>,
    pub stopped: Vec<String>,
    /// Changes that apply at the next restart only.
    pub warnings: Vec<String>,
}

/// Ok, or the errors (file:line: key: message) that left the running
/// pipeline as it was.
pub type Outcome = Result<Summary, Vec<String>>;

/// A reload request and where its outcome goes.
pub type Request = oneshot::Sender<Outcome>;

/// The running config as `/api/config` shows it.
struct Running {
    path: Option<String>,
    hash: String,
    config: serde_json::Value,
    loaded_at: String,
}

pub struct Control {
    running: RwLock<Running>,
    reloads_ok: AtomicU64,
    reloads_failed: AtomicU64,
    requests: mpsc::Sender<Request>,
}

impl Control {
    /// The control and the receiving end of reload requests (the daemon's).
    pub fn new(path: Option<String>, text: &str) -> (Control, mpsc::Receiver<Request>) {
        let (tx, rx) = mpsc::channel(4);
        let control = Control {
            running: RwLock::new(Running {
                path,
                hash: super::sections::hash(text),
                config: super::sections::redacted(text),
                loaded_at: now(),
            }),
            reloads_ok: AtomicU64::new(0),
            reloads_failed: AtomicU64::new(0),
            requests: tx,
        };
        (control, rx)
    }

    /// A reload applied `text`.
    pub fn loaded(&self, text: &str) {
        let mut r = self.running.write().expect("running config");
        r.hash = super::sections::hash(text);
        r.config = super::sections::redacted(text);
        r.loaded_at = now();
        drop(r);
        self.reloads_ok.fetch_add(1, Relaxed);
    }

    pub fn failed(&self) {
        self.reloads_failed.fetch_add(1, Relaxed);
    }

    pub fn hash(&self) -> String {
        self.running.read().expect("running config").hash.clone()
    }

    /// Asks the daemon for a reload and waits for its outcome.
    pub async fn reload(&self) -> Outcome {
        let (tx, rx) = oneshot::channel();
        if self.requests.send(tx).await.is_err() {
            return Err(vec!["nagare is stopping; no reload".into()]);
        }
        rx.await
            .unwrap_or_else(|_| Err(vec!["nagare is stopping; no reload".into()]))
    }

    /// `/api/config`.
    pub fn config_json(&self) -> serde_json::Value {
        let r = self.running.read().expect("running config");
        serde_json::json!({
            "path": r.path,
            "hash": r.hash,
            "loaded_at": r.loaded_at,
            "reloads": self.reloads_ok.load(Relaxed),
            "failed_reloads": self.reloads_failed.load(Relaxed),
            "config": r.config,
        })
    }

    /// Prometheus lines: the running config's hash and the reload counters.
    pub fn metrics(&self) -> String {
        format!(
            "# HELP nagare_config_info The running configuration; its hash in the label\n\
             # TYPE nagare_config_info gauge\n\
             nagare_config_info{{hash=\"{}\"}} 1\n\
             # HELP nagare_config_reloads_total Reloads (SIGHUP, nagare reload, POST /api/reload) by result\n\
             # TYPE nagare_config_reloads_total counter\n\
             nagare_config_reloads_total{{result=\"ok\"}} {}\n\
             nagare_config_reloads_total{{result=\"error\"}} {}\n",
            self.hash(),
            self.reloads_ok.load(Relaxed),
            self.reloads_failed.load(Relaxed),
        )
    }
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
