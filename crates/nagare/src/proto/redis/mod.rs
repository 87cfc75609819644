//! Redis: the connection options and client the `redis` input and output
//! share (conn.rs), and the RESP2 connection of our own for list reads and
//! writes (resp.rs).

pub mod conn;
pub mod resp;
