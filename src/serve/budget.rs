//! The engine's memory budget: every batch holds a [`BudgetPermit`] for the
//! bytes it needs (query vectors, top-k heaps, result rows) while it runs.
//!
//! A permit is taken before the batch starts and given back when it is
//! dropped, so completion, error, cancellation and panic all release it.
//! When the budget is spent, a new batch waits (bounded by a timeout) for
//! running ones to finish, or fails with [`Error::Overloaded`]. The budget
//! is a mutex-protected counter and a condition variable from the
//! `sync` shim: blocking waits happen on the batch's own
//! worker thread, never on the async runtime, and loom can model it as is.

use crate::error::{Error, Result};
use crate::sync::{lock, Arc, AtomicUsize, Condvar, Mutex};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// A shared byte budget. Cloning gives another handle on the same budget.
#[derive(Clone, Debug)]
pub struct MemoryBudget {
    inner: Arc<BudgetState>,
}

#[derive(Debug)]
struct BudgetState {
    limit: u64,
    used: Mutex<u64>,
    released: Condvar,
    /// Threads in `acquire_timeout` waiting for bytes to come back.
    waiting: AtomicUsize,
}

/// Bytes held against a [`MemoryBudget`]; dropping it gives them back and
/// wakes waiters.
#[derive(Debug)]
pub struct BudgetPermit {
    budget: Arc<BudgetState>,
    bytes: u64,
}

impl MemoryBudget {
    /// A budget of `limit` bytes.
    pub fn new(limit: u64) -> MemoryBudget {
        MemoryBudget {
            inner: Arc::new(BudgetState {
                limit,
                used: Mutex::new(0),
                released: Condvar::new(),
                waiting: AtomicUsize::new(0),
            }),
        }
    }

    /// The budget's size in bytes.
    pub fn limit(&self) -> u64 {
        self.inner.limit
    }

    /// Bytes held by permits now.
    pub fn in_use(&self) -> u64 {
        *lock(&self.inner.used)
    }

    /// Batches waiting for bytes to come back now.
    pub fn waiting(&self) -> usize {
        self.inner.waiting.load(Ordering::SeqCst)
    }

    /// Takes `bytes` now, or fails with `Overloaded` when they are not
    /// free. A request above the whole budget takes the whole budget (it
    /// runs alone rather than never).
    pub fn try_acquire(&self, bytes: u64) -> Result<BudgetPermit> {
        let bytes = bytes.min(self.inner.limit);
        let mut used = lock(&self.inner.used);
        if *used + bytes <= self.inner.limit {
            *used += bytes;
            return Ok(self.permit(bytes));
        }
        Err(self.overloaded(*used, bytes))
    }

    /// Takes `bytes`, waiting up to `timeout` for running batches to give
    /// enough back. Blocks the calling thread: call it off the runtime.
    pub fn acquire_timeout(&self, bytes: u64, timeout: Duration) -> Result<BudgetPermit> {
        let bytes = bytes.min(self.inner.limit);
        let deadline = Instant::now() + timeout;
        let mut used = lock(&self.inner.used);
        loop {
            if *used + bytes <= self.inner.limit {
                *used += bytes;
                return Ok(self.permit(bytes));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(self.overloaded(*used, bytes));
            }
            self.inner.waiting.fetch_add(1, Ordering::SeqCst);
            used = match self.inner.released.wait_timeout(used, deadline - now) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
            self.inner.waiting.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn permit(&self, bytes: u64) -> BudgetPermit {
        BudgetPermit {
            budget: Arc::clone(&self.inner),
            bytes,
        }
    }

    fn overloaded(&self, used: u64, bytes: u64) -> Error {
        Error::Overloaded(format!(
            "the memory budget is spent ({used} of {} bytes in use, the batch needs {bytes})",
            self.inner.limit
        ))
    }
}

impl BudgetPermit {
    /// Bytes this permit holds.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for BudgetPermit {
    fn drop(&mut self) {
        let mut used = lock(&self.budget.used);
        *used -= self.bytes;
        drop(used);
        self.budget.released.notify_all();
    }
}

#[cfg(all(test, not(shoal_loom)))]
mod tests {
    use super::*;

    #[test]
    fn permits_come_back_on_drop_and_wake_waiters() {
        let budget = MemoryBudget::new(100);
        let a = budget.try_acquire(60).unwrap();
        assert_eq!(budget.in_use(), 60);
        assert!(matches!(budget.try_acquire(50), Err(Error::Overloaded(_))));
        assert!(budget
            .acquire_timeout(50, Duration::from_millis(10))
            .is_err());
        let waiter = {
            let budget = budget.clone();
            std::thread::spawn(move || budget.acquire_timeout(50, Duration::from_secs(30)))
        };
        // Release only once the waiter waits, so the wake-up is what lets
        // it through (bounded: the test fails rather than hangs).
        let start = Instant::now();
        while budget.waiting() == 0 {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the waiter never waited"
            );
            std::thread::yield_now();
        }
        drop(a);
        let b = waiter.join().unwrap().unwrap();
        assert_eq!(budget.in_use(), 50);
        drop(b);
        assert_eq!(budget.in_use(), 0);
    }

    #[test]
    fn a_request_above_the_budget_takes_all_of_it() {
        let budget = MemoryBudget::new(100);
        let all = budget.try_acquire(1_000).unwrap();
        assert_eq!(all.bytes(), 100);
        assert!(budget.try_acquire(1).is_err());
        drop(all);
        assert_eq!(budget.in_use(), 0);
    }

    #[test]
    fn a_panicking_holder_still_releases() {
        let budget = MemoryBudget::new(10);
        let b2 = budget.clone();
        let r = std::thread::spawn(move || {
            let _permit = b2.try_acquire(10).unwrap();
            panic!("batch failed");
        })
        .join();
        assert!(r.is_err());
        assert_eq!(budget.in_use(), 0);
    }
}
