//! `nagare run`: builds the pipeline from a config, runs it, and drains it on
//! SIGTERM/SIGINT.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::config::Config;
use crate::plugin::InputContext;
use crate::router::Router;
use crate::stats::Registry;
use crate::{filters, monitor, outputs};

pub fn worker_count(cfg: &Config) -> usize {
    if cfg.system.workers > 0 {
        cfg.system.workers
    } else {
        std::thread::available_parallelism().map_or(2, |n| n.get())
    }
}

/// Runs until a stop signal; returns once every buffer is drained.
pub fn run(cfg: Config) -> anyhow::Result<()> {
    let workers = worker_count(&cfg);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("nagare-worker")
        .enable_all()
        .build()?;
    rt.block_on(run_async(cfg, workers))
}

/// Starts a built configuration: opens the outputs' buffers, makes the
/// route table, serves the monitor and starts the inputs. `nagare check`
/// stops after building; this is the part that does I/O.
async fn run_async(cfg: Config, workers: usize) -> anyhow::Result<()> {
    // Before anything starts: a SIGTERM during start-up must stop nagare
    // cleanly, not kill it with the signal's default action.
    let mut stop_signals = StopSignals::install()?;
    let reg = Arc::new(Registry::default());
    let Config {
        system,
        monitor,
        inputs,
        filters,
        outputs,
        warnings,
        ..
    } = cfg;
    for w in warnings {
        tracing::warn!("{w}");
    }
    // `outputs::open` makes one rule per output section, in order.
    let output_labels: Vec<Option<String>> = outputs.iter().map(|o| o.label.clone()).collect();
    let filter_labels: Vec<Option<String>> = filters.iter().map(|f| f.label.clone()).collect();
    let (rules, buffers) = outputs::open(outputs, &reg)?;
    let mut flushers = Vec::new();
    for b in &buffers {
        flushers.extend(b.start());
    }
    let stages = filters::stages(filters, &reg);
    let router = Router::with_labels(
        output_labels
            .into_iter()
            .zip(rules)
            .map(|(l, (p, o))| (l, p, o))
            .collect(),
        filter_labels.into_iter().zip(stages).collect(),
        system.error_label.as_deref(),
    );
    let (stop_tx, stop_rx) = watch::channel(false);
    let monitor = match &monitor {
        Some(m) => Some(monitor::serve(&m.bind, reg.clone(), stop_rx.clone()).await?),
        None => None,
    };
    // Chunk ids stored in recovered file-buffer chunks: their senders' resends
    // must be recognised even though the ids never reached a dedup_path.
    let stored_ids: Arc<Vec<bytes::Bytes>> = Arc::new(
        buffers
            .iter()
            .flat_map(|b| b.take_recovered_ids())
            .collect(),
    );
    let mut input_tasks = Vec::new();
    for i in inputs {
        let cx = InputContext {
            stats: reg.register("input", &i.name, i.type_name),
            name: i.name,
            // The input routes in its label only.
            router: Arc::new(router.in_label(i.label.as_deref())),
            workers,
            stored_ids: stored_ids.clone(),
            shutdown: stop_rx.clone(),
        };
        input_tasks.extend(i.input.start(cx).await?);
    }
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        workers,
        "nagare started"
    );

    stop_signals.wait().await;
    tracing::info!("stopping: no new connections; draining inputs and buffers");
    let _ = stop_tx.send(true);
    let timeout = system
        .shutdown_timeout
        .map_or(Duration::from_secs(60), |d| d.0);
    let deadline = tokio::time::Instant::now() + timeout;
    for t in input_tasks {
        if tokio::time::timeout_at(deadline, t).await.is_err() {
            tracing::error!("inputs did not finish within shutdown_timeout");
            break;
        }
    }
    for b in &buffers {
        b.close();
    }
    for t in flushers {
        if tokio::time::timeout_at(deadline, t).await.is_err() {
            let held: usize = buffers.iter().map(|b| b.held_bytes()).sum();
            anyhow::bail!(
                "buffers not drained within shutdown_timeout ({}); {held} bytes of events were not delivered",
                humantime::format_duration(timeout)
            );
        }
    }
    if let Some(m) = monitor {
        let _ = tokio::time::timeout(Duration::from_secs(1), m).await;
    }
    tracing::info!("stopped; every buffer drained");
    Ok(())
}

/// SIGTERM and SIGINT, listened to from the start.
struct StopSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn install() -> anyhow::Result<StopSignals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(StopSignals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    async fn wait(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}
