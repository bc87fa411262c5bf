//! loom models of shoal's concurrency core: the real types (memory budget,
//! coalescer core, reply channel, scan pool hand-off, cancellation token,
//! partition-load semaphore) built against loom's primitives through the
//! crate's `sync` shim, explored in every interleaving up to loom's
//! preemption bound.
//!
//! Empty unless built with `--cfg shoal_loom`:
//!
//! ```text
//! RUSTFLAGS="--cfg shoal_loom" LOOM_MAX_PREEMPTIONS=2 \
//!     cargo test --release --test loom
//! ```
//!
//! tokio is not modelled (loom cannot): the models drive the synchronous
//! core the engine's actors are built on, with loom threads standing in for
//! the coalescer actor, the scan tasks and the callers, and a mutex around
//! the coalescer core standing in for the actor's one-message-at-a-time
//! loop.
#![cfg(shoal_loom)]

mod budget;
mod coalescer;
mod partition_loads;
mod reply;
mod scan_pool;
