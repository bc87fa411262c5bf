//! The synchronisation types shoal's concurrent core is written against:
//! the standard library's, or loom's when built with `--cfg shoal_loom`, so
//! that the loom models in `loom_tests/` check the real code (the memory
//! budget, the reply channel, the scan pool's hand-off, the cancellation
//! token, the partition loads' semaphore) in every interleaving. A
//! crate-specific cfg, not loom's own `loom` cfg, which would also switch
//! tokio's internals.

#[cfg(shoal_loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicUsize};
#[cfg(shoal_loom)]
pub(crate) use loom::sync::{Arc, Condvar, Mutex, MutexGuard};

#[cfg(not(shoal_loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicUsize};
#[cfg(not(shoal_loom))]
pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Locks `mutex`, recovering the data if a panicking thread poisoned it:
/// shared state is kept consistent at every unlock (counters are updated in
/// one step), so a panic elsewhere must not wedge every caller.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}
