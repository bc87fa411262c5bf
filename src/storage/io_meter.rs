//! What object storage was asked for: GET requests and the bytes they
//! brought, counted for the whole session (`/metrics`) and for the search
//! running on the current thread (its profile, `explain`).
//!
//! A search sets its meter on the thread that runs it ([`enter`]); the
//! scan pool carries the meter of the thread that hands out shares to the
//! threads that run them, so a partition fetched by a helper thread is
//! still counted to the search that asked for it.

use serde::Serialize;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// GETs and bytes counted so far.
#[derive(Debug, Default)]
pub struct IoCounts {
    gets: AtomicU64,
    bytes: AtomicU64,
}

/// GET requests and bytes counted so far (session totals or one search's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StorageIo {
    /// GET requests (whole objects and byte ranges).
    pub gets: u64,
    /// Bytes those requests brought.
    pub bytes: u64,
}

impl IoCounts {
    /// Counts `gets` requests that brought `bytes`.
    pub fn add(&self, gets: u64, bytes: u64) {
        self.gets.fetch_add(gets, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// The counts now.
    pub fn read(&self) -> StorageIo {
        StorageIo {
            gets: self.gets.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
        }
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<IoCounts>>> = const { RefCell::new(None) };
}

/// Restores the thread's previous meter when dropped.
#[must_use = "the meter is unset when the scope is dropped"]
pub struct MeterScope {
    previous: Option<Arc<IoCounts>>,
}

impl Drop for MeterScope {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// Makes `meter` the current thread's search meter until the scope ends.
pub fn enter(meter: Option<Arc<IoCounts>>) -> MeterScope {
    let previous = CURRENT.with(|c| std::mem::replace(&mut *c.borrow_mut(), meter));
    MeterScope { previous }
}

/// The current thread's search meter, if a search set one.
pub fn current() -> Option<Arc<IoCounts>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Counts requests in the session's totals and in the current search's.
pub fn record(session: &IoCounts, gets: u64, bytes: u64) {
    session.add(gets, bytes);
    CURRENT.with(|c| {
        if let Some(meter) = c.borrow().as_ref() {
            meter.add(gets, bytes);
        }
    });
}
