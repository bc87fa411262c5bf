//! The command line's building blocks that are not library API: the
//! benchmarks and the demo walk-through.

pub mod bench;
pub mod demo;
mod fma_peak;
