//! The synchronisation types the engine's core is written against: the
//! standard library's, or loom's when built with `--cfg shoal_loom`, so that
//! loom models check the real code (the memory budget, the coalescer's
//! bookkeeping) in every interleaving. A crate-specific cfg, not loom's own
//! `loom` cfg, which would also switch tokio's internals.

#[cfg(shoal_loom)]
pub(crate) use loom::sync::{Arc, Condvar, Mutex, MutexGuard};

#[cfg(not(shoal_loom))]
pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Locks `mutex`, recovering the data if a panicking thread poisoned it: the
/// engine's shared state is kept consistent at every unlock (counters are
/// updated in one step), so a panic elsewhere must not wedge every caller.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}
