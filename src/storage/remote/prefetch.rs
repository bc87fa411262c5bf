//! Several independent round trips at once: what opening an index
//! segment needs (its metadata, its model, the size of its partitions
//! file) asked for together instead of one after the other.

use super::Remote;
use crate::error::Result;
use crate::storage::io_meter;

impl Remote {
    /// Downloads the files `whole` into the mirror (those the disk cache
    /// lacks) and learns the sizes of the objects `sized`, all at once on
    /// scoped threads; the reads that follow find them there. Missing
    /// objects are left for those reads to report.
    pub fn prefetch_files(&self, whole: &[&str], sized: &[&str]) -> Result<()> {
        let meter = io_meter::current();
        std::thread::scope(|s| {
            let mut tasks = Vec::new();
            for &rel in whole {
                let meter = meter.clone();
                tasks.push(s.spawn(move || {
                    let _metered = io_meter::enter(meter);
                    self.open(rel).map(|_| ())
                }));
            }
            for &rel in sized {
                let meter = meter.clone();
                tasks.push(s.spawn(move || {
                    let _metered = io_meter::enter(meter);
                    self.size(rel).map(|_| ())
                }));
            }
            tasks
                .into_iter()
                .map(|t| {
                    t.join().unwrap_or_else(|_| {
                        Err(crate::error::Error::Internal(
                            "a prefetch thread panicked".into(),
                        ))
                    })
                })
                .collect::<Result<Vec<()>>>()
        })?;
        Ok(())
    }
}
