//! Cancellation of a running scan.
//!
//! A [`CancelToken`] is a shared flag: whoever holds a clone may cancel, and
//! the scans check it at every partition and every exact-scan chunk, so a
//! cancelled search stops within one unit of work and returns
//! [`Error::Cancelled`], keeping nothing of what it had gathered.

use crate::error::{Error, Result};
use crate::sync::{Arc, AtomicBool};
use std::sync::atomic::Ordering;

/// A cancellation flag shared between a search and whoever may stop it.
#[derive(Clone, Debug)]
pub struct CancelToken(Arc<AtomicBool>);

impl Default for CancelToken {
    fn default() -> CancelToken {
        CancelToken(Arc::new(AtomicBool::new(false)))
    }
}

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    /// Asks every search holding this token to stop.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Has [`CancelToken::cancel`] been called?
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// `Err(Error::Cancelled)` once cancelled; the scans' check point.
    #[inline]
    pub fn check(&self) -> Result<()> {
        if self.is_cancelled() {
            Err(Error::Cancelled)
        } else {
            Ok(())
        }
    }
}

/// Two tokens are equal when they are the same flag (clones of one token).
impl PartialEq for CancelToken {
    fn eq(&self, other: &CancelToken) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
