//! Shutdown that never loses in silence: the inputs finish, the buffers
//! drain, and progress is logged while they do. At `shutdown_timeout` or at
//! a second SIGTERM/SIGINT nagare stops waiting for the outputs, and what is
//! left is kept (file buffers' chunk files, for the next start) or handed
//! over (memory buffers: the secondary output, else dead-letter files that
//! `nagare replay` sends); only what nothing could take is lost, counted and
//! named in the final error.

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::buffer::Buffer;
use crate::topology::signals::{Signal, StopSignals};

/// How often draining logs what is left.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// After giving up, how long the chunks left may take to reach the places
/// that keep them (a secondary output gets a few quick tries).
const HAND_OVER_WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, PartialEq)]
enum Waited {
    Done,
    Deadline,
    Signal,
}

/// Waits for the inputs, then the flush workers; gives up at `timeout` or
/// at a second stop signal. An error says what was not delivered and where
/// it is.
pub async fn drain(
    inputs: Vec<JoinHandle<()>>,
    buffers: &[Arc<Buffer>],
    flushers: Vec<JoinHandle<()>>,
    timeout: Duration,
    dead_letters: PathBuf,
    signals: &mut StopSignals,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let mut waited = wait(join(inputs), deadline, buffers, signals).await;
    for b in buffers {
        b.close();
    }
    let flushed = join(flushers);
    tokio::pin!(flushed);
    if waited == Waited::Done {
        waited = wait(&mut flushed, deadline, buffers, signals).await;
    }
    if waited == Waited::Done {
        for b in buffers {
            b.stop_output().await;
        }
        return Ok(());
    }
    let (left, _) = pending(buffers);
    let why = match waited {
        Waited::Signal => "a second stop signal".to_string(),
        _ => format!("shutdown_timeout ({})", humantime::format_duration(timeout)),
    };
    tracing::error!(events = left, "stopped waiting for the outputs at {why}; keeping what is left (file buffers) or handing it over (secondary outputs, dead letters)");
    for b in buffers {
        b.give_up(dead_letters.clone());
    }
    tokio::select! {
        _ = &mut flushed => {}
        _ = tokio::time::sleep(HAND_OVER_WAIT) => {}
        _ = signals.wait() => {}
    }
    let sum = |f: fn(&Buffer) -> u64| buffers.iter().map(|b| f(b)).sum::<u64>();
    let handed_over = sum(|b| b.shutdown.handed_over.load(Relaxed));
    let kept = sum(|b| b.shutdown.kept_on_disk.load(Relaxed));
    // Whatever is still pending now had no time to be handed over.
    let lost = sum(|b| b.shutdown.lost.load(Relaxed)) + pending(buffers).0;
    anyhow::bail!(
        "{} events were not delivered by {why}: {handed_over} handed to secondary outputs or written as dead letters (under {} for memory buffers; `nagare replay` sends them), {kept} kept in file buffers for the next start, {lost} lost",
        handed_over + kept + lost,
        dead_letters.display()
    )
}

async fn join(handles: Vec<JoinHandle<()>>) {
    for h in handles {
        let _ = h.await;
    }
}

/// (events, chunks) left in all buffers.
fn pending(buffers: &[Arc<Buffer>]) -> (u64, usize) {
    buffers
        .iter()
        .map(|b| b.pending())
        .fold((0, 0), |(e, c), (e2, c2)| (e + e2, c + c2))
}

/// Waits for `done`, logging what each buffer still holds every few
/// seconds, until the deadline or a stop signal.
async fn wait(
    done: impl Future<Output = ()>,
    deadline: Instant,
    buffers: &[Arc<Buffer>],
    signals: &mut StopSignals,
) -> Waited {
    tokio::pin!(done);
    let mut progress = tokio::time::interval_at(Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
    loop {
        tokio::select! {
            _ = &mut done => return Waited::Done,
            _ = tokio::time::sleep_until(deadline) => return Waited::Deadline,
            s = signals.wait() => match s {
                Signal::Stop => return Waited::Signal,
                Signal::Hangup => {}
            },
            _ = progress.tick() => {
                let left = deadline.saturating_duration_since(Instant::now());
                for b in buffers {
                    let (events, chunks) = b.pending();
                    if events > 0 {
                        tracing::warn!(output = %b.name(), events, chunks,
                            "draining: {events} events left; waiting up to {} more (SIGTERM again stops waiting)",
                            humantime::format_duration(Duration::from_secs(left.as_secs())));
                    }
                }
            }
        }
    }
}
