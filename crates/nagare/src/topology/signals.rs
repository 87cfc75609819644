//! The signals that stop (SIGTERM, SIGINT) and reload (SIGHUP) the daemon,
//! and SIGUSR1, which reopens the log file.

use crate::logging;

pub enum Signal {
    Stop,
    Hangup,
}

/// SIGTERM, SIGINT and SIGHUP, listened to from the start; SIGUSR1 (the log
/// file is reopened) is handled inside `wait`.
pub struct StopSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    usr1: tokio::signal::unix::Signal,
}

impl StopSignals {
    pub fn install() -> anyhow::Result<StopSignals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(StopSignals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
            usr1: signal(SignalKind::user_defined1())?,
        })
    }

    pub async fn wait(&mut self) -> Signal {
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
