//! Network code that inputs, outputs and the command line share: TLS, the
//! sockets listeners bind (and hand over across a reload, handover.rs), a
//! client's connection with reconnects, and the HTTP client.

pub mod connection;
pub mod handover;
pub mod http_client;
pub mod listen;
pub mod object_http;
pub mod tls;

use tokio::io::{AsyncRead, AsyncWrite};

/// A connection's byte stream: a TCP or UNIX socket, or a TLS session over
/// a TCP one. Everything past the accept reads only this.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}
