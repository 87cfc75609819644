//! Protocol clients and codecs that plugins share (an input and an output
//! of one protocol, or a plugin and the command line): the forward
//! protocol's control messages on a stream, Thrift for Scribe, Redis and
//! Kafka connections. The forward frame codec itself is the nagare-forward
//! crate.

pub mod forward_io;
pub mod kafka;
pub mod redis;
pub mod thrift;
