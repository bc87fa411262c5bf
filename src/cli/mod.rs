//! The command line's building blocks (not library API): arguments,
//! commands, printing, the benchmarks and the demo walk-through.

pub mod args;
pub mod bench;
pub mod commands;
pub mod demo;
pub mod print;
pub mod serve;
