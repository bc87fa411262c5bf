//! The partition cache: decoded partitions shared as `Arc`s, bounded in
//! bytes, least-recently-used eviction, single-flight loads.
//!
//! A `moka::sync::Cache` is used from the scan threads; `try_get_with`
//! makes concurrent requests for the same partition wait for one load.
//! Counters record hits, misses and bytes loaded for profiles.

use crate::error::{Error, Result};
use crate::index::partition::Partition;
use crate::sync::{lock, Condvar, Mutex};
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
    loads: LoadPermits,
    hits: AtomicU64,
    misses: AtomicU64,
    bytes_loaded: AtomicU64,
}

/// Bounds partition loads in flight (reads + decodes), so that many
/// concurrent batches missing the cache at once do not hold unbounded
/// read buffers. A counting semaphore: a mutex-guarded count and a condvar.
pub struct LoadPermits {
    max: usize,
    in_flight: Mutex<usize>,
    freed: Condvar,
    peak: AtomicU64,
}

/// One load in flight; released on drop (also on error or panic).
pub struct LoadPermit<'a>(&'a LoadPermits);

impl LoadPermits {
    /// At most `max` (at least one) loads in flight.
    pub fn new(max: usize) -> LoadPermits {
        LoadPermits {
            max: max.max(1),
            in_flight: Mutex::new(0),
            freed: Condvar::new(),
            peak: AtomicU64::new(0),
        }
    }

    /// Waits for a free load slot and takes it.
    pub fn acquire(&self) -> LoadPermit<'_> {
        let mut n = lock(&self.in_flight);
        while *n >= self.max {
            n = self.freed.wait(n).unwrap_or_else(|p| p.into_inner());
        }
        *n += 1;
        self.peak.fetch_max(*n as u64, Ordering::Relaxed);
        LoadPermit(self)
    }

    /// Loads in flight now.
    pub fn in_flight(&self) -> usize {
        *lock(&self.in_flight)
    }

    /// The most loads that were ever in flight at once.
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }
}

impl Drop for LoadPermit<'_> {
    fn drop(&mut self) {
        let mut n = lock(&self.0.in_flight);
        *n -= 1;
        drop(n);
        self.0.freed.notify_one();
    }
}

impl std::fmt::Debug for PartitionCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionCache")
            .field("counters", &self.counters())
            .finish()
    }
}

impl PartitionCache {
    /// A cache holding at most `capacity_bytes` of decoded partitions, with
    /// at most `max_loads` partition loads in flight.
    pub fn new(capacity_bytes: u64, max_loads: usize) -> Self {
        let cache = moka::sync::Cache::builder()
            .max_capacity(capacity_bytes)
            .weigher(|_k: &PartitionKey, v: &Arc<Partition>| {
                u32::try_from(v.size_bytes()).unwrap_or(u32::MAX)
            })
            .eviction_policy(EvictionPolicy::lru())
            .build();
        PartitionCache {
            cache,
            loads: LoadPermits::new(max_loads),
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
                let _permit = self.loads.acquire();
                let (p, bytes) = load()?;
                loaded = Some(bytes);
                self.bytes_loaded.fetch_add(bytes, Ordering::Relaxed);
                Ok::<_, Error>(Arc::new(p))
            })
            .map_err(|e: Arc<Error>| (*e).clone())?;
        if loaded.is_some() {
            self.misses.fetch_add(1, Ordering::Relaxed);
            // moka evicts lazily (its housekeeping runs every so many
            // writes); without this, a burst of large misses can hold well
            // over the bound until then. A miss read a whole partition from
            // disk, so this costs little in comparison.
            self.cache.run_pending_tasks();
        } else {
            self.hits.fetch_add(1, Ordering::Relaxed);
        }
        Ok((value, loaded))
    }

    /// Counters so far.
    /// Is partition `key` in memory now?
    pub fn contains(&self, key: &PartitionKey) -> bool {
        self.cache.contains_key(key)
    }

    /// Counters so far.
    pub fn counters(&self) -> CacheCounters {
        CacheCounters {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            bytes_loaded: self.bytes_loaded.load(Ordering::Relaxed),
        }
    }

    /// Partition loads in flight now (0 when no search is loading).
    pub fn loads_in_flight(&self) -> usize {
        self.loads.in_flight()
    }

    /// Bytes of partitions held now (after applying pending evictions).
    pub fn weighted_size(&self) -> u64 {
        self.cache.run_pending_tasks();
        self.cache.weighted_size()
    }

    /// The most partition loads that were ever in flight at once.
    pub fn peak_loads_in_flight(&self) -> u64 {
        self.loads.peak()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::partition::Payload;

    fn empty() -> Partition {
        Partition {
            row_ids: Vec::new(),
            payload: Payload::Pq {
                codes: crate::kernel::lookup::CodeColumns::from_rows(1, &[]).unwrap(),
                terms: Default::default(),
            },
        }
    }

    #[test]
    fn loads_in_flight_never_exceed_the_bound_and_each_key_loads_once() {
        let cache = PartitionCache::new(1 << 20, 2);
        let key_of = |i: u32| -> PartitionKey { (Arc::from("seg"), i) };
        let loads = AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..8u32 {
                let (cache, loads) = (&cache, &loads);
                s.spawn(move || {
                    for i in 0..6u32 {
                        cache
                            .get(key_of((i + t) % 6), || {
                                loads.fetch_add(1, Ordering::Relaxed);
                                std::thread::sleep(std::time::Duration::from_millis(2));
                                Ok((empty(), 10))
                            })
                            .unwrap();
                    }
                });
            }
        });
        assert!(
            cache.peak_loads_in_flight() <= 2,
            "{}",
            cache.peak_loads_in_flight()
        );
        assert_eq!(
            loads.load(Ordering::Relaxed),
            6,
            "single-flight: one load per key"
        );
        let c = cache.counters();
        assert_eq!((c.hits + c.misses, c.misses, c.bytes_loaded), (48, 6, 60));
    }

    #[test]
    fn a_failed_load_releases_its_permit_and_reports_the_error() {
        let cache = PartitionCache::new(1 << 20, 1);
        let key: PartitionKey = (Arc::from("seg"), 0);
        let err = cache
            .get(key.clone(), || Err(Error::Internal("boom".into())))
            .unwrap_err();
        assert!(err.to_string().contains("boom"));
        // The only permit is free again: the next load goes through.
        assert!(cache.get(key, || Ok((empty(), 1))).is_ok());
    }
}
