//! Inputs: sources of batches. Each input type lives in its own file.

pub mod directory;
pub mod forward;
pub mod fuse;
pub mod tail;

use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::router::Router;
use crate::stats::Registry;

#[derive(Debug, Clone)]
pub enum InputSpec {
    Forward(forward::ForwardInputConfig),
    Tail(tail::TailConfig),
    Directory(directory::DirectoryConfig),
    Fuse(fuse::FuseConfig),
}

impl InputSpec {
    pub fn type_name(&self) -> &'static str {
        match self {
            InputSpec::Forward(_) => "forward",
            InputSpec::Tail(_) => "tail",
            InputSpec::Directory(_) => "directory",
            InputSpec::Fuse(_) => "fuse",
        }
    }
}

/// Starts an input; it stops when `shutdown` turns true and every task it
/// started has been joined by the returned handles. `stored_ids` are chunk
/// ids already stored (recovered from file buffers), for the dedup window.
pub async fn start(
    name: &str,
    spec: &InputSpec,
    router: Arc<Router>,
    reg: &Registry,
    workers: usize,
    stored_ids: &[bytes::Bytes],
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<Vec<JoinHandle<()>>> {
    let stats = reg.register("input", name, spec.type_name());
    match spec {
        InputSpec::Forward(c) => {
            forward::start(
                name,
                c.clone(),
                router,
                stats,
                workers,
                stored_ids,
                shutdown,
            )
            .await
        }
        InputSpec::Tail(c) => tail::start(name, c.clone(), router, stats, shutdown).await,
        InputSpec::Directory(c) => directory::start(name, c.clone(), router, stats, shutdown).await,
        InputSpec::Fuse(c) => fuse::start(name, c.clone(), router, stats, shutdown).await,
    }
}
