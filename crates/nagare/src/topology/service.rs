//! Tells systemd (a `Type=notify` unit) what nagare is doing, over the
//! datagram socket named by NOTIFY_SOCKET; without it these do nothing.
//!
//! READY=1 once every input listens, so units ordered after nagare start
//! when it can take events; STOPPING=1 when draining begins; RELOADING=1
//! (with MONOTONIC_USEC, which systemd 253 and later require) and READY=1
//! again around SIGHUP's work.

use sd_notify::NotifyState;

pub fn ready() {
    send(&[NotifyState::Ready]);
}

pub fn stopping() {
    send(&[NotifyState::Stopping]);
}

pub fn reloading() {
    match NotifyState::monotonic_usec_now() {
        Ok(now) => send(&[NotifyState::Reloading, now]),
        Err(e) => tracing::warn!("sd_notify: cannot read the monotonic clock: {e}"),
    }
}

fn send(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        let socket = std::env::var("NOTIFY_SOCKET").unwrap_or_default();
        tracing::warn!(socket, "sd_notify: cannot tell the service manager: {e}");
    }
}
