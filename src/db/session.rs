//! One session per process: the caches, scan threads and config that every
//! open dataset shares.
//!
//! A [`Session`] owns one partition cache for all of its datasets (keyed by
//! segment directory and partition, weighed in bytes, bounded by
//! `cache.capacity_bytes`), one cache of fragment columns
//! (`cache.column_bytes`), one cache of filter results
//! (`cache.filter_mask_bytes`), the scan pool (`search.threads`) and the
//! configuration. "auto" sizes are read once, when the session is made.
//! [`Session::open`] returns a [`Dataset`] that uses them; a session is a
//! cheap `Clone` handle, and its threads end when the last handle (and the
//! last dataset of it) is dropped.

use crate::config::Config;
use crate::db::dataset::Dataset;
use crate::error::Result;
use crate::exec::prefilter::FilterCache;
use crate::exec::ScanPool;
use crate::index::ivf::{LoadedSegment, INDICES_DIR};
use crate::index::{IndexSegmentMeta, PartitionCache};
use crate::storage::fragment::ColumnCache;
use crate::storage::Schema;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Caches, scan pool and configuration shared by the datasets opened in it.
#[derive(Clone)]
pub struct Session {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    partitions: PartitionCache,
    columns: Arc<ColumnCache>,
    filters: FilterCache,
    pool: ScanPool,
    /// Opened index segments by directory (segments never change once
    /// written; an open segment is a file handle and its small directory).
    segments: Mutex<HashMap<PathBuf, Arc<LoadedSegment>>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("partitions", &self.inner.partitions)
            .field("columns", &self.inner.columns)
            .field("pool", &self.inner.pool)
            .finish()
    }
}

impl Session {
    /// A session with `config` (already validated by [`Config`]'s loaders).
    pub fn new(config: Config) -> Session {
        let partitions = PartitionCache::new(
            config.cache.capacity_bytes.bytes(),
            config.cache.max_concurrent_loads,
        );
        let columns = Arc::new(ColumnCache::new(config.cache.column_bytes.bytes()));
        let filters = FilterCache::new(config.cache.filter_mask_bytes.bytes());
        let pool = ScanPool::new(config.scan_threads());
        Session {
            inner: Arc::new(Inner {
                config,
                partitions,
                columns,
                filters,
                pool,
                segments: Mutex::default(),
            }),
        }
    }

    /// Opens the latest version of the dataset at `root` in this session.
    pub fn open(&self, root: impl AsRef<Path>) -> Result<Dataset> {
        Dataset::open_in(self, root)
    }

    /// Creates an empty dataset at `root` with `schema` in this session.
    pub fn create(&self, root: impl AsRef<Path>, schema: Schema) -> Result<Dataset> {
        Dataset::create_in(self, root, schema)
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The partition cache of every dataset of the session.
    pub fn partition_cache(&self) -> &PartitionCache {
        &self.inner.partitions
    }

    /// The fragment-column cache of every dataset of the session.
    pub fn column_cache(&self) -> &Arc<ColumnCache> {
        &self.inner.columns
    }

    /// The filter-result cache of every dataset of the session.
    pub fn filter_cache(&self) -> &FilterCache {
        &self.inner.filters
    }

    /// The scan threads.
    pub fn pool(&self) -> &ScanPool {
        &self.inner.pool
    }

    /// The index segment `meta` of the dataset at `root`, opened once.
    pub(crate) fn segment(
        &self,
        root: &Path,
        meta: &IndexSegmentMeta,
        dim: usize,
    ) -> Result<Arc<LoadedSegment>> {
        let dir = root.join(INDICES_DIR).join(&meta.id);
        let mut open = self
            .inner
            .segments
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(s) = open.get(&dir) {
            return Ok(s.clone());
        }
        let s = Arc::new(LoadedSegment::open(root, meta, dim)?);
        open.insert(dir, s.clone());
        Ok(s)
    }
}
