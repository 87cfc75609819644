//! `nagare run`: builds the pipeline from a config, runs it, reloads it on
//! SIGHUP or `POST /api/reload` (topology/), and drains it on SIGTERM/SIGINT.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use nagare_core::metrics::Registry;
use tokio::sync::watch;

use crate::config::Config;
use crate::monitor;
use crate::topology::service;
use crate::topology::signals::{Signal, StopSignals};
use crate::topology::Pipeline;

pub fn worker_count(cfg: &Config) -> usize {
    if cfg.system.workers > 0 {
        cfg.system.workers
    } else {
        std::thread::available_parallelism().map_or(2, |n| n.get())
    }
}

/// Runs until a stop signal; returns once every buffer is drained.
/// `text` is the config the daemon starts with; `source` its file, read
/// again at each reload (SIGHUP, `nagare reload`, `POST /api/reload`).
pub fn run(cfg: Config, text: String, source: Option<PathBuf>) -> anyhow::Result<()> {
    let workers = worker_count(&cfg);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("nagare-worker")
        .enable_all()
        .build()?;
    rt.block_on(run_async(cfg, text, workers, source))
}

/// Starts a built configuration (outputs' buffers, route table, monitor,
/// inputs: see `topology::Pipeline`), reloads it on request, and drains it at
/// the end. `nagare check` stops after building; this is the part that
/// does I/O.
async fn run_async(
    cfg: Config,
    text: String,
    workers: usize,
    source: Option<PathBuf>,
) -> anyhow::Result<()> {
    // Before anything starts: a SIGTERM during start-up must stop nagare
    // cleanly, not kill it with the signal's default action.
    let mut stop_signals = StopSignals::install()?;
    let reg = Arc::new(Registry::default());
    let monitor_cfg = cfg.monitor.clone();
    let (mut pipeline, mut reload_requests) =
        Pipeline::start(cfg, &text, source, reg.clone()).await?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let monitor = match &monitor_cfg {
        Some(m) => Some(
            monitor::serve(
                &m.bind,
                reg.clone(),
                pipeline.control.clone(),
                stop_rx.clone(),
            )
            .await?,
        ),
        None => None,
    };
    pipeline.start_inputs().await?;
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        workers,
        config_hash = %pipeline.control.hash(),
        "nagare started"
    );
    service::ready();

    loop {
        tokio::select! {
            signal = stop_signals.wait() => match signal {
                Signal::Stop => break,
                Signal::Hangup => {
                    service::reloading();
                    let _ = pipeline.reload("SIGHUP").await;
                    service::ready();
                }
            },
            Some(answer) = reload_requests.recv() => {
                service::reloading();
                let outcome = pipeline.reload("POST /api/reload").await;
                service::ready();
                let _ = answer.send(outcome);
            }
        }
    }
    tracing::info!("stopping: no new connections; draining inputs and buffers");
    service::stopping();
    let _ = stop_tx.send(true);
    let drained = pipeline.drain(&mut stop_signals).await;
    if let Some(m) = monitor {
        let _ = tokio::time::timeout(Duration::from_secs(1), m).await;
    }
    drained?;
    tracing::info!("stopped; every buffer drained");
    Ok(())
}
