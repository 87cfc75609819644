pub mod bench;
pub mod gen;
