//! `nagare test`: runs the tests written in a config (`[[test]]` tables,
//! read and checked with the config by config/test_spec.rs, as `nagare
//! check` does) through the real router and filters, with no sockets and
//! no outputs started (run.rs).

pub mod run;
