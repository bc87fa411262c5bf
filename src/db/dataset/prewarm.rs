//! Filling the disk cache of a dataset on object storage before traffic
//! arrives: what a new replica runs at start (`storage.prewarm`) so that
//! its first searches cost what warm ones do.

use super::Dataset;
use crate::error::{Error, Result};
use crate::progress::Progress;
use crate::storage::io_meter::{self, IoCounts};
use serde::Serialize;
use std::sync::Arc;

/// Index partitions fetched per step (one merged read, one progress
/// report).
const PARTITIONS_PER_STEP: usize = 256;

/// Which partitions [`Dataset::prewarm`] fetches.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum PrewarmPartitions {
    /// Every partition of every IVF segment of the column.
    #[default]
    All,
    /// These partition numbers, in each IVF segment of the column.
    Only(Vec<u32>),
}

/// What a prewarm fetched.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PrewarmReport {
    /// The vector columns warmed.
    pub columns: Vec<String>,
    /// IVF partitions now in the disk cache (HNSW segments are fetched
    /// whole and count here as one each).
    pub partitions: u64,
    /// Fragments whose `id` pages (and, where no index covers them, vector
    /// pages) are now in the disk cache.
    pub fragments: u64,
    /// GET requests sent.
    pub gets: u64,
    /// Bytes they brought.
    pub bytes: u64,
    /// Wall time, ms.
    pub elapsed_ms: f64,
}

impl Dataset {
    /// Fetches into the disk cache what searches of `column` (every vector
    /// column that has an index, when `None`) read: the chosen partitions
    /// of its IVF segments, its HNSW segments, every fragment's `id`
    /// column, and the vectors of fragments no index covers. Partitions
    /// and pages go to the disk cache only (an HNSW segment loads into
    /// memory, as its first search would load it). A local dataset has
    /// nothing to fetch (the report counts no GET). Reports progress as
    /// `prewarm`.
    pub fn prewarm(
        &self,
        column: Option<&str>,
        partitions: &PrewarmPartitions,
    ) -> Result<PrewarmReport> {
        let started = std::time::Instant::now();
        let meter = Arc::new(IoCounts::default());
        let _metered = io_meter::enter(Some(meter.clone()));
        let columns: Vec<String> = match column {
            Some(name) => {
                self.schema.vector_column(Some(name))?;
                vec![name.to_string()]
            }
            None => self.indexed_columns(),
        };
        let mut report = PrewarmReport {
            columns: columns.clone(),
            ..PrewarmReport::default()
        };
        let fragments = self.fragments()?;
        let cache = self.session.partition_cache();
        for column in &columns {
            // A graph segment is read whole when it loads.
            report.partitions += self.graph_segments(column)?.len() as u64;
            let segments = self.segments(column)?;
            let mut steps: Vec<(usize, Vec<u32>)> = Vec::new();
            for (s, seg) in segments.iter().enumerate() {
                let wanted: Vec<u32> = match partitions {
                    PrewarmPartitions::All => (0..seg.partitions() as u32).collect(),
                    PrewarmPartitions::Only(list) => {
                        if let Some(p) = list.iter().find(|&&p| p as usize >= seg.partitions()) {
                            return Err(Error::InvalidArgument(format!(
                                "partition {p} does not exist: the index on '{column}' has {} \
                                 partitions",
                                seg.partitions()
                            )));
                        }
                        let mut list = list.clone();
                        list.sort_unstable();
                        list.dedup();
                        list
                    }
                };
                steps.extend(wanted.chunks(PARTITIONS_PER_STEP).map(|c| (s, c.to_vec())));
            }
            for (done, (s, chunk)) in steps.iter().enumerate() {
                segments[*s].prefetch(chunk, cache)?;
                report.partitions += chunk.len() as u64;
                Progress::maybe(
                    self.progress(),
                    "prewarm",
                    done as u64 + 1,
                    steps.len() as u64,
                );
            }
            // Fragments no index of the column covers are scanned exactly:
            // their vectors are read too.
            let covered = |id: u32| {
                self.manifest
                    .indices
                    .iter()
                    .any(|s| s.column == *column && s.fragments.contains(&id))
            };
            for view in &fragments {
                if !covered(view.meta.id) {
                    view.prefetch(&[column.as_str()])?;
                }
            }
        }
        for (done, view) in fragments.iter().enumerate() {
            view.prefetch(&[crate::storage::ID_COLUMN])?;
            report.fragments += 1;
            Progress::maybe(
                self.progress(),
                "prewarm fragments",
                done as u64 + 1,
                fragments.len() as u64,
            );
        }
        let io = meter.read();
        (report.gets, report.bytes) = (io.gets, io.bytes);
        report.elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
        Ok(report)
    }
}
