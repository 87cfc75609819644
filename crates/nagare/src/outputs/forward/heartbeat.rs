//! Heartbeats: every `heartbeat_interval`, a TCP connect (with the TLS and
//! shared-key handshakes), a UDP datagram or nothing to each server; the
//! answers feed each server's phi accrual failure detector (phi.rs), which
//! marks a silent server down, and an answer brings a down server back.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::connect::Connector;
use super::pool::Pool;
use super::server::Server;
use super::{ForwardOutput, HeartbeatType};

impl Connector {
    /// One transport heartbeat: a TCP connect, and the TLS and shared-key
    /// handshakes when the server has them (so the server sees a complete
    /// client, not a handshake error, and a refused key keeps it down).
    async fn heartbeat(&self, s: &Server, wait: Duration) -> Beat {
        let full = self.tls.is_some() || self.key(s).is_some();
        let r = if full {
            // Closed with a TLS close_notify: a server's TLS layer logs a
            // connection dropped without one as an error (OpenSSL's
            // "unexpected eof while reading").
            tokio::time::timeout(wait, async {
                let mut c = self.connect(s).await?;
                let _ = c.shutdown().await;
                Ok(())
            })
            .await
        } else {
            tokio::time::timeout(wait, TcpStream::connect(&s.cfg.address))
                .await
                .map(|r| r.map(drop).map_err(|e| format!("connect: {e}")))
        };
        match r {
            Err(_) => Beat::Silent,
            Ok(Ok(())) => Beat::Answered,
            // The connect's own timeouts (connect_timeout, the TLS
            // handshake's) are at least `wait`: an error here is definite.
            Ok(Err(e)) => Beat::Failed(e),
        }
    }
}

/// The outcome of one heartbeat.
#[derive(Debug, PartialEq)]
enum Beat {
    /// The server answered: an arrival for the failure detector.
    Answered,
    /// No answer in time: the failure detector judges the silence.
    Silent,
    /// A definite failure (refused connection, refused handshake): the
    /// server is down now, as after a send error.
    Failed(String),
}

impl ForwardOutput {
    pub(super) fn start_heartbeat(&self) {
        if self.cfg.heartbeat_type == HeartbeatType::None {
            return;
        }
        // The task ends with the output (a reload replaces it): it holds
        // the servers weakly. It runs only inside a runtime (not in
        // `nagare check`).
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let pool = Arc::downgrade(&self.pool);
        let connector = self.connector.clone();
        let kind = self.cfg.heartbeat_type;
        let interval = self.cfg.heartbeat_interval.0;
        let timeout = self
            .cfg
            .connect_timeout
            .0
            .min(interval.max(Duration::from_millis(500)));
        let (threshold, hard) = (self.cfg.phi_threshold, self.cfg.hard_timeout.0);
        handle.spawn(heartbeats(
            pool, connector, kind, interval, timeout, threshold, hard,
        ));
    }
}

/// The heartbeat task: every `interval`, one heartbeat to each server at
/// once; an answer is an arrival for the server's failure detector (and
/// brings a down server back), a definite failure marks it down at once,
/// and silence is judged by phi and `hard`.
async fn heartbeats(
    pool: Weak<Pool>,
    connector: Arc<Connector>,
    kind: HeartbeatType,
    interval: Duration,
    timeout: Duration,
    threshold: f64,
    hard: Duration,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(pool) = pool.upgrade() else {
            return;
        };
        let servers = pool.load();
        drop(pool);
        let mut beats = tokio::task::JoinSet::new();
        for (i, s) in servers.iter().enumerate() {
            let (s, connector) = (s.clone(), connector.clone());
            beats.spawn(async move {
                let beat = match kind {
                    HeartbeatType::Transport => connector.heartbeat(&s, timeout).await,
                    HeartbeatType::Udp => udp_heartbeat(&s.cfg.address, timeout).await,
                    HeartbeatType::None => Beat::Answered,
                };
                (i, beat)
            });
        }
        while let Some(done) = beats.join_next().await {
            let Ok((i, beat)) = done else { continue };
            judge(&servers[i], beat, Instant::now(), threshold, hard);
        }
    }
}

/// Applies one heartbeat's outcome at `now` to a server.
fn judge(s: &Server, beat: Beat, now: Instant, threshold: f64, hard: Duration) {
    match beat {
        Beat::Answered => {
            s.phi.lock().expect("server").arrive(now);
            s.mark_up();
            return;
        }
        Beat::Failed(why) => {
            s.down(&why);
            return;
        }
        Beat::Silent => {}
    }
    if !s.up.load(Relaxed) {
        return;
    }
    let (phi, silence) = {
        let p = s.phi.lock().expect("server");
        (p.phi(now), p.silence(now))
    };
    if silence > hard {
        s.down(&format!(
            "no heartbeat answered for {:.1}s (hard_timeout {}s)",
            silence.as_secs_f64(),
            hard.as_secs_f64()
        ));
    } else if phi > threshold {
        s.down(&format!(
            "no heartbeat answered for {:.1}s (phi {phi:.1} > phi_threshold {threshold})",
            silence.as_secs_f64()
        ));
    }
}

async fn udp_heartbeat(address: &str, timeout: Duration) -> Beat {
    let sock = match tokio::net::UdpSocket::bind(if address.starts_with('[') {
        "[::]:0"
    } else {
        "0.0.0.0:0"
    })
    .await
    {
        Ok(s) => s,
        Err(e) => return Beat::Failed(format!("udp heartbeat: {e}")),
    };
    let sent = async {
        sock.connect(address).await?;
        sock.send(b"\0").await
    };
    if let Err(e) = sent.await {
        return Beat::Failed(format!("udp heartbeat: {e}"));
    }
    let mut b = [0u8; 16];
    match tokio::time::timeout(timeout, sock.recv(&mut b)).await {
        Ok(Ok(_)) => Beat::Answered,
        // An ICMP "port unreachable" comes back as a refused receive.
        Ok(Err(e)) => Beat::Failed(format!("udp heartbeat: {e}")),
        // A datagram may be lost: the failure detector judges the silence.
        Err(_) => Beat::Silent,
    }
}
