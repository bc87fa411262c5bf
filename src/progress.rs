//! [`Progress`]: an optional callback that long work (ingest, index
//! builds, optimize) reports to, so that a caller can draw a bar or fill a
//! job's status. The library never prints progress itself.

use std::fmt;
use std::sync::Arc;

/// A progress callback: `(stage, done, total)`, e.g. `("assign", 65536,
/// 100000)`. Called from the thread doing the work, so it must be cheap.
/// Cloning shares the same callback.
#[derive(Clone)]
pub struct Progress(Arc<Report>);

/// The callback behind a [`Progress`].
type Report = dyn Fn(&str, u64, u64) + Send + Sync;

impl Progress {
    /// Reports to `report(stage, done, total)`.
    pub fn new(report: impl Fn(&str, u64, u64) + Send + Sync + 'static) -> Progress {
        Progress(Arc::new(report))
    }

    /// Reports one step: `done` of `total` in `stage`.
    pub fn report(&self, stage: &str, done: u64, total: u64) {
        (self.0)(stage, done, total)
    }

    /// Reports to `progress` when there is one.
    pub(crate) fn maybe(progress: Option<&Progress>, stage: &str, done: u64, total: u64) {
        if let Some(p) = progress {
            p.report(stage, done, total);
        }
    }
}

impl fmt::Debug for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Progress(..)")
    }
}
