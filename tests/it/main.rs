//! Integration tests: one binary, shared fixtures in `common`.

mod api;
mod bad_input;
mod cli;
mod cold_reads;
mod common;
mod compact;
mod corruption;
mod engine;
mod exact;
mod fuzz;
mod hnsw;
mod http;
mod ingest;
mod ivf;
mod mixed;
mod object_storage;
mod readiness;
mod real_data;
mod retention;
mod session;
mod shared;
mod splits;
mod storage;
