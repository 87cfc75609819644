//! nagare's end-to-end tests, one binary: each module is an area (an input,
//! a filter, an output, a command, a failure), and `common` holds the one set
//! of helpers they share (the daemon starter, the forward sender and sink,
//! the waits). Every test runs the real `nagare` binary on free loopback
//! ports against real servers and clients; see common/mod.rs.
//!
//! One binary instead of one per area: cargo builds and links it once.
//! Run one area with `cargo test -p nagare --test it -- <area>::`.

mod common;

mod auth;
mod azure_blob;
mod bad_input;
mod balance;
mod buffer;
mod check;
mod cli;
mod cli_test;
mod clickhouse;
mod cluster;
mod containers;
mod convert;
mod directory;
mod durability;
mod elasticsearch;
mod exec_filter;
mod exec_input;
mod field_filters;
mod filters;
mod flow;
mod fuse;
mod fuzz_seeds;
mod gelf;
mod http;
mod instances;
mod journald;
mod kafka;
mod labels;
mod lines;
mod loki;
mod lua_filter;
mod memory;
mod objects;
mod opentelemetry;
mod parsers;
mod postgresql;
mod rate_filters;
mod receivers;
mod redis;
mod reload;
mod s3;
mod scale;
mod scribe;
mod service;
mod shutdown;
mod splunk_hec;
mod syslog;
mod tail;
mod tap;
mod tls;
mod top;
