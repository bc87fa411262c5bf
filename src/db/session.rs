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
//!
//! Datasets on object storage are given by URL; the session keeps one
//! client per store (`scheme://bucket`), one [`Remote`] per dataset URL, and
//! one disk cache of their downloaded files (`cache.disk_bytes`).

use crate::config::Config;
use crate::db::dataset::Dataset;
use crate::error::{Error, Result};
use crate::exec::prefilter::FilterCache;
use crate::exec::ScanPool;
use crate::index::hnsw::segment::HnswSegment;
use crate::index::ivf::{LoadedSegment, INDICES_DIR};
use crate::index::{IndexSegmentMeta, PartitionCache};
use crate::storage::fragment::ColumnCache;
use crate::storage::remote::{build_store, location_of, parse_location, Location};
use crate::storage::{DatasetRoot, DiskCache, Remote, Schema};
use object_store::ObjectStore;
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
    /// Opened `hnsw` segments by directory (their graphs and vectors load
    /// through the partition cache).
    graphs: Mutex<HashMap<PathBuf, Arc<HnswSegment>>>,
    /// Local copies of object-storage files.
    disk: DiskCache,
    /// Object-store clients by `scheme://authority`.
    stores: Mutex<HashMap<String, Arc<dyn ObjectStore>>>,
    /// Remote datasets by URL.
    remotes: Mutex<HashMap<String, Arc<Remote>>>,
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
        let pool = ScanPool::new(
            config.scan_threads(),
            std::time::Duration::from_micros(config.search.idle_spin_us),
        );
        let disk = DiskCache::new(&config);
        Session {
            inner: Arc::new(Inner {
                disk,
                stores: Mutex::default(),
                remotes: Mutex::default(),
                config,
                partitions,
                columns,
                filters,
                pool,
                segments: Mutex::default(),
                graphs: Mutex::default(),
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

    /// Serves every dataset URL that starts with `scheme://authority` of
    /// `url` (say `s3://bucket`) from `store` instead of a client built
    /// from the environment: a store configured in code, or a wrapper
    /// (metrics, latency, a test double). Affects datasets opened later.
    pub fn register_object_store(&self, url: &str, store: Arc<dyn ObjectStore>) -> Result<()> {
        let (key, _) = parse_location(url)?;
        self.inner
            .stores
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, store);
        Ok(())
    }

    /// Where the dataset `location` (a path, a `file://` URL, or an
    /// object-storage URL) keeps its files.
    pub fn locate(&self, location: &Path) -> Result<DatasetRoot> {
        let url = match location_of(location) {
            Location::Local(dir) => return Ok(DatasetRoot::local(dir.into_owned())),
            Location::Remote(url) => url.trim_end_matches('/').to_string(),
        };
        let mut remotes = self.inner.remotes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(remote) = remotes.get(&url) {
            return Ok(DatasetRoot::remote(remote.clone()));
        }
        let (store, prefix) = self.store_of(&url)?;
        let remote = Arc::new(Remote::new(
            &url,
            store,
            prefix,
            self.inner.disk.clone(),
            &self.inner.config,
        )?);
        remotes.insert(url, remote.clone());
        Ok(DatasetRoot::remote(remote))
    }

    /// The client of the store `url` is in (built once per session) and
    /// the object prefix `url` names.
    fn store_of(&self, url: &str) -> Result<(Arc<dyn ObjectStore>, object_store::path::Path)> {
        let (key, prefix) = parse_location(url)?;
        let mut stores = self.inner.stores.lock().unwrap_or_else(|p| p.into_inner());
        let store = match stores.get(&key) {
            Some(store) => store.clone(),
            None => {
                let store = build_store(url, &self.inner.config)?;
                stores.insert(key, store.clone());
                store
            }
        };
        Ok((store, prefix))
    }

    /// The names directly inside `location` (a directory or a URL):
    /// subdirectories, or the next path segment of objects under the URL
    /// (none for a directory that does not exist).
    pub fn children(&self, location: &Path) -> Result<Vec<String>> {
        let url = match location_of(location) {
            Location::Remote(url) => url,
            Location::Local(dir) => {
                let entries = match std::fs::read_dir(&dir) {
                    Ok(entries) => entries,
                    // A directory not made yet holds nothing.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
                    Err(e) => return Err(Error::io(&*dir, e)),
                };
                let mut names = Vec::new();
                for entry in entries {
                    let entry = entry.map_err(|e| Error::io(&*dir, e))?;
                    if entry.path().is_dir() {
                        names.push(entry.file_name().to_string_lossy().into_owned());
                    }
                }
                return Ok(names);
            }
        };
        let (store, prefix) = self.store_of(url)?;
        let listed = crate::storage::remote::block_on(async move {
            store.list_with_delimiter(Some(&prefix)).await
        })?
        .map_err(|e| Error::StorageUnavailable {
            url: url.to_string(),
            message: e.to_string(),
        })?;
        Ok(listed
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_string))
            .collect())
    }

    /// Is there a dataset at `location` (a path or a URL)?
    pub fn exists(&self, location: impl AsRef<Path>) -> Result<bool> {
        let root = self.locate(location.as_ref())?;
        if root.remote_side().is_none() {
            return Ok(Dataset::exists(&*root));
        }
        match crate::storage::manifest::list_versions_as_of(&root, true) {
            Ok(_) => Ok(true),
            Err(Error::NotADataset(_)) | Err(Error::DatasetNotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The local disk cache of object-storage files.
    pub fn disk_cache(&self) -> &DiskCache {
        &self.inner.disk
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
        root: &DatasetRoot,
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

    /// The `hnsw` segment `meta` of the dataset at `root`, opened once.
    pub(crate) fn graph_segment(
        &self,
        root: &DatasetRoot,
        meta: &IndexSegmentMeta,
        dim: usize,
    ) -> Result<Arc<HnswSegment>> {
        let dir = root.join(INDICES_DIR).join(&meta.id);
        let mut open = self.inner.graphs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = open.get(&dir) {
            return Ok(s.clone());
        }
        let s = Arc::new(HnswSegment::open(root, meta, dim)?);
        open.insert(dir, s.clone());
        Ok(s)
    }
}
