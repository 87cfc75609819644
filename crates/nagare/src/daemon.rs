//! `nagare run`: builds the pipeline from a config, runs it, and drains it on
//! SIGTERM/SIGINT; SIGHUP only checks the config file again.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::config::Config;
use crate::plugin::InputContext;
use crate::router::Router;
use crate::stats::Registry;
use crate::{filters, logging, monitor, outputs, service, shutdown};

pub fn worker_count(cfg: &Config) -> usize {
    if cfg.system.workers > 0 {
        cfg.system.workers
    } else {
        std::thread::available_parallelism().map_or(2, |n| n.get())
    }
}

/// Runs until a stop signal; returns once every buffer is drained.
/// `source` is the config file, read again on SIGHUP.
pub fn run(cfg: Config, source: Option<PathBuf>) -> anyhow::Result<()> {
    let workers = worker_count(&cfg);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("nagare-worker")
        .enable_all()
        .build()?;
    rt.block_on(run_async(cfg, workers, source))
}

/// Starts a built configuration: opens the outputs' buffers, makes the
/// route table, serves the monitor and starts the inputs. `nagare check`
/// stops after building; this is the part that does I/O.
async fn run_async(cfg: Config, workers: usize, source: Option<PathBuf>) -> anyhow::Result<()> {
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
    service::ready();

    while let Signal::Hangup = stop_signals.wait().await {
        service::reloading();
        hangup(source.as_deref());
        service::ready();
    }
    tracing::info!("stopping: no new connections; draining inputs and buffers");
    service::stopping();
    let _ = stop_tx.send(true);
    let timeout = system
        .shutdown_timeout
        .map_or(Duration::from_secs(60), |d| d.0);
    let dead_letters = system.dead_letter_dir.map_or_else(
        || std::env::temp_dir().join("nagare-dead-letters"),
        PathBuf::from,
    );
    let drained = shutdown::drain(
        input_tasks,
        &buffers,
        flushers,
        timeout,
        dead_letters,
        &mut stop_signals,
    )
    .await;
    if let Some(m) = monitor {
        let _ = tokio::time::timeout(Duration::from_secs(1), m).await;
    }
    drained?;
    tracing::info!("stopped; every buffer drained");
    Ok(())
}

/// SIGHUP: the configuration is read and checked again. Reloading it into
/// the running pipeline is not done yet (issue 15): until then the signal
/// says whether the file is good and what to do, and never stops nagare —
/// logrotate and closed terminals send SIGHUP, and its default action would
/// lose the events acked into memory buffers.
fn hangup(source: Option<&Path>) {
    let Some(path) = source else {
        tracing::warn!("SIGHUP: running the embedded default configuration; nothing to reload");
        return;
    };
    match crate::config::load(path) {
        Ok(_) => tracing::warn!(config = %path.display(),
            "SIGHUP: the configuration file is valid, but reloading a running nagare is not supported yet; restart nagare to apply it (the running pipeline is unchanged)"),
        Err(errors) => {
            for e in errors {
                tracing::error!("SIGHUP: {e}");
            }
            tracing::error!(config = %path.display(),
                "SIGHUP: the configuration file has errors; the running pipeline is unchanged");
        }
    }
}

pub(crate) enum Signal {
    Stop,
    Hangup,
}

/// SIGTERM, SIGINT and SIGHUP, listened to from the start; SIGUSR1 (the log
/// file is reopened) is handled inside `wait`.
pub(crate) struct StopSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    usr1: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn install() -> anyhow::Result<StopSignals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(StopSignals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
            usr1: signal(SignalKind::user_defined1())?,
        })
    }

    pub(crate) async fn wait(&mut self) -> Signal {
        loop {
            tokio::select! {
                _ = self.term.recv() => return Signal::Stop,
                _ = self.int.recv() => return Signal::Stop,
                _ = self.hup.recv() => return Signal::Hangup,
                _ = self.usr1.recv() => logging::reopen(),
            }
        }
    }
}
