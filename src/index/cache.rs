//! The partition cache: decoded partitions shared as `Arc`s, bounded in
//! bytes, least-recently-used eviction, single-flight loads.
//!
//! A `moka::sync::Cache` is used from the scan threads; `try_get_with`
//! makes concurrent requests for the same partition wait for one load.
//! Counters record hits, misses and bytes loaded for profiles.

use crate::error::{Error, Result};
use crate::index::partition::Partition;
use moka::policy::EvictionPolicy;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Key: (index segment id, partition number).
pub type PartitionKey = (Arc<str>, u32);

/// Hit/miss/bytes counters, cumulative since the cache was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CacheCounters {
    /// Requests served from memory.
    pub hits: u64,
    /// Requests that loaded the partition.
    pub misses: u64,
    /// Bytes read from disk by those loads.
    pub bytes_loaded: u64,
}

/// A byte-bounded LRU cache of partitions.
pub struct PartitionCache {
    cache: moka::sync::Cache<PartitionKey, Arc<Partition>>,
    hits: AtomicU64,
    misses: AtomicU64,
    bytes_loaded: AtomicU64,
}

impl std::fmt::Debug for PartitionCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionCache")
            .field("counters", &self.counters())
            .finish()
    }
}

impl PartitionCache {
    /// A cache holding at most `capacity_bytes` of decoded partitions.
    pub fn new(capacity_bytes: u64) -> Self {
        let cache = moka::sync::Cache::builder()
            .max_capacity(capacity_bytes)
            .weigher(|_k: &PartitionKey, v: &Arc<Partition>| {
                u32::try_from(v.size_bytes()).unwrap_or(u32::MAX)
            })
            .eviction_policy(EvictionPolicy::lru())
            .build();
        PartitionCache {
            cache,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            bytes_loaded: AtomicU64::new(0),
        }
    }

    /// The partition under `key`, loaded by `load` (which returns it and
    /// the bytes read) on a miss. Concurrent misses on one key load once.
    /// Also returns the bytes this call read (0 on a hit).
    pub fn get(
        &self,
        key: PartitionKey,
        load: impl FnOnce() -> Result<(Partition, u64)>,
    ) -> Result<(Arc<Partition>, Option<u64>)> {
        let mut loaded = None;
        let value = self
            .cache
            .try_get_with(key, || {
                let (p, bytes) = load()?;
                loaded = Some(bytes);
                self.bytes_loaded.fetch_add(bytes, Ordering::Relaxed);
                Ok::<_, Error>(Arc::new(p))
            })
            .map_err(|e: Arc<Error>| (*e).clone())?;
        if loaded.is_some() {
            self.misses.fetch_add(1, Ordering::Relaxed);
        } else {
            self.hits.fetch_add(1, Ordering::Relaxed);
        }
        Ok((value, loaded))
    }

    /// Counters so far.
    pub fn counters(&self) -> CacheCounters {
        CacheCounters {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            bytes_loaded: self.bytes_loaded.load(Ordering::Relaxed),
        }
    }

    /// Bytes currently held (after pending evictions run).
    pub fn weighted_size(&self) -> u64 {
        self.cache.run_pending_tasks();
        self.cache.weighted_size()
    }
}
