//! Running one worker function on several scan threads.

use crate::error::{Error, Result};

/// Runs `worker(0..threads)` on `threads` scoped threads (inline when
/// `threads <= 1`) and returns their results in thread order; the first
/// error wins, a panicking worker is an internal error.
pub fn run_workers<T: Send>(
    threads: usize,
    worker: impl Fn(usize) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    if threads <= 1 {
        return Ok(vec![worker(0)?]);
    }
    let worker = &worker;
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads).map(|t| s.spawn(move || worker(t))).collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::Internal("scan thread panicked".into())))
            })
            .collect()
    })
}
