//! Answers to the UDP heartbeats of forward senders (Fluentd's
//! `heartbeat_type udp`, nagare's `heartbeat_type = "udp"`): every datagram
//! on the input's port is answered with one byte.

use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::sync::watch;

use crate::inputs::common::listeners::stopped;

pub(super) async fn answer_heartbeats(sock: UdpSocket, mut shutdown: watch::Receiver<bool>) {
    let mut b = [0u8; 64];
    loop {
        let received = tokio::select! {
            r = sock.recv_from(&mut b) => r,
            _ = stopped(&mut shutdown) => return,
        };
        match received {
            Ok((_, peer)) => {
                let _ = sock.send_to(b"\0", peer).await;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}
