//! The scan side of the engine: runs batches, at most
//! `scan.max_concurrent_batches` at a time, each as one job on the
//! session's scan pool (never on the async runtime's threads), and hands
//! each query's rows back to its caller by query index from the thread
//! that scanned them.
//!
//! A batch first drops callers that went away or whose deadline passed; a
//! batch with nobody left is skipped. It takes its bytes from the memory
//! budget (when they are not free now, it waits for them up to
//! `limits.budget_wait_ms` on a blocking thread rather than on a scan
//! thread). Each caller's reply channel counts its caller out when it
//! leaves; when every one has gone, the batch's [`CancelToken`] stops the
//! scan at the next partition. A batch-wide error reaches every caller as a
//! clone.
//!
//! One coalesced search thus crosses three threads: the caller's task
//! hands it to the coalescer actor, the actor posts the batch to a scan
//! thread, and the scan thread's reply wakes the caller.

use super::budget::MemoryBudget;
use super::coalescer::core::{split_at_start, Batch};
use super::reply::{cancel_when_all_gone, reply_channel, ReplySender};
use super::stats::Stats;
use crate::db::Dataset;
use crate::error::{Error, Result};
use crate::exec::{CancelToken, Profile};
use crate::query::{
    BatchInfo, BatchQuery, Hit, PerQuery, PerQueryParams, SearchResponse, SearchResults,
    SharedParams,
};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// What two searches must share to be answered by one scan: the dataset,
/// the version, column and metric (resolved), the mode and index use.
/// Everything else (k, offset, filter, filter mode, nprobes, refine
/// factor, projection) is each query's own, inside the batch.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct BatchKey {
    pub dataset: std::sync::Arc<str>,
    pub params: SharedParams,
}

/// One caller's search as it waits in the coalescer.
#[derive(Debug)]
pub(crate) struct SearchRequest {
    pub vector: Vec<f32>,
    pub k: usize,
    pub offset: usize,
    /// Its own filter (normal form), filter mode, projection, probing.
    pub own: PerQueryParams,
    /// The version the search resolved when it was submitted.
    pub snapshot: Dataset,
    pub reply: ReplySender<Result<SearchResponse>>,
}

/// A coalesced batch as the coalescer hands it over.
pub(crate) type CoalescedBatch = Batch<BatchKey, SearchRequest>;

/// Runs batches; shared by the coalescer actor and explicit batches.
#[derive(Debug)]
pub(crate) struct Scanner {
    slots: Arc<Semaphore>,
    total_slots: u32,
    slot_freed: Arc<Notify>,
    budget: MemoryBudget,
    budget_wait: Duration,
    stats: Arc<Stats>,
    next_batch: AtomicU64,
    /// Heaps a query has at once while its batch scans: one per scan
    /// thread, plus the merged one.
    heap_copies: u64,
}

/// A scan slot; giving it back wakes the coalescer (it may flush now).
#[derive(Debug)]
pub(crate) struct SlotGuard {
    permit: Option<OwnedSemaphorePermit>,
    freed: Arc<Notify>,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        // Release first, then wake: a coalescer woken while the permit is
        // still held would find no free slot and sleep through it.
        drop(self.permit.take());
        self.freed.notify_one();
    }
}

/// A finished scan: results, profile, scan time.
type Scanned = (SearchResults, Profile, Duration);

/// A scan's outcome: the batch's answer, or — when a coalesced batch failed
/// on something only some of its callers may touch (an I/O error, a damaged
/// fragment that one caller's filter or projection reads) — each caller's
/// own answer or error, searched alone.
enum Coalesced {
    Batch(Box<Scanned>),
    Each(Vec<Result<(SearchResults, Profile)>>, Duration),
}

/// Query `i` of `batch` as a batch of one, with its own parameters.
fn alone(batch: &BatchQuery, i: usize) -> Result<BatchQuery> {
    batch
        .query(i)
        .map(|q| q.into_batch())
        .ok_or_else(|| Error::Internal(format!("a batch has no query {i}")))
}

impl Scanner {
    pub(crate) fn new(
        slots: usize,
        budget: MemoryBudget,
        budget_wait: Duration,
        stats: Arc<Stats>,
        scan_threads: usize,
    ) -> Scanner {
        let slots = slots.clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
        Scanner {
            slots: Arc::new(Semaphore::new(slots)),
            total_slots: slots as u32,
            slot_freed: Arc::new(Notify::new()),
            budget,
            budget_wait,
            stats,
            next_batch: AtomicU64::new(1),
            heap_copies: scan_threads as u64 + 1,
        }
    }

    pub(crate) fn budget(&self) -> &MemoryBudget {
        &self.budget
    }

    /// A free scan slot, if there is one now.
    pub(crate) fn try_slot(&self) -> Option<SlotGuard> {
        let permit = Arc::clone(&self.slots).try_acquire_owned().ok()?;
        Some(self.guard(permit))
    }

    fn guard(&self, permit: OwnedSemaphorePermit) -> SlotGuard {
        SlotGuard {
            permit: Some(permit),
            freed: Arc::clone(&self.slot_freed),
        }
    }

    /// Scan slots free now.
    pub(crate) fn free_slots(&self) -> usize {
        self.slots.available_permits()
    }

    /// Resolves when a slot has been given back since the last call.
    pub(crate) async fn slot_freed(&self) {
        self.slot_freed.notified().await
    }

    /// Waits until no batch is running (every slot is free).
    pub(crate) async fn wait_idle(&self) {
        if let Ok(all) = self.slots.acquire_many(self.total_slots).await {
            drop(all);
        }
    }

    /// Starts a coalesced batch, holding `slot` until it is done. The batch
    /// runs as one job on a scan-pool thread, which then answers every
    /// caller itself: no task or blocking thread stands between the scan
    /// and the callers (see [`Scanner::dispatch`]).
    pub(crate) fn start(self: &Arc<Self>, batch: CoalescedBatch, slot: SlotGuard) {
        let now = Instant::now().into_std();
        let split = split_at_start(batch.requests, now, |r| r.reply.is_closed());
        Stats::add(&self.stats.cancelled, split.released as u64);
        for r in split.expired {
            Stats::add(&self.stats.deadline_exceeded, 1);
            let error = r.deadline_exceeded(now);
            let _ = r.payload.reply.send(Err(error));
        }
        let live = split.live;
        let key_hash = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            batch.key.hash(&mut h);
            h.finish()
        };
        let Some(first) = live.first() else {
            Stats::add(&self.stats.skipped_batches, 1);
            return;
        };
        let snapshot = first.payload.snapshot.clone();
        let n = live.len();
        let mut vectors = Vec::with_capacity(n);
        let mut ks = Vec::with_capacity(n);
        let mut offsets = Vec::with_capacity(n);
        let mut replies = Vec::with_capacity(n);
        let mut waits = Vec::with_capacity(n);
        let mut owns = Vec::with_capacity(n);
        for r in live {
            let wait = now.saturating_duration_since(r.arrived);
            self.stats.queue_wait_us.record(wait.as_micros() as u64);
            waits.push(wait.as_micros() as u64);
            vectors.push(r.payload.vector);
            ks.push(r.payload.k);
            offsets.push(r.payload.offset);
            owns.push(r.payload.own);
            replies.push(r.payload.reply);
        }
        let query = BatchQuery {
            vectors,
            k: PerQuery::Each(ks),
            offset: PerQuery::Each(offsets),
            own: PerQuery::Each(owns),
            shared: batch.key.params,
            cancel: None,
        };
        let id = self.next_batch.fetch_add(1, Ordering::Relaxed);
        let span = tracing::debug_span!("batch", id, key = %format_args!("{key_hash:016x}"), size = n, reason = ?batch.reason);
        let token = CancelToken::new();
        cancel_when_all_gone(&replies, &token);
        let scanner = Arc::clone(self);
        self.dispatch(slot, snapshot, query, token, true, move |outcome| {
            let _entered = span.enter();
            scanner.answer_coalesced(id, outcome, replies, waits)
        });
    }

    /// Sends each caller of coalesced batch `id` its rows (by query
    /// index), its own answer when the batch was split, or the batch's
    /// error.
    fn answer_coalesced(
        &self,
        id: u64,
        outcome: Result<Coalesced>,
        replies: Vec<ReplySender<Result<SearchResponse>>>,
        waits: Vec<u64>,
    ) {
        let n = replies.len();
        match outcome {
            Err(Error::Cancelled) => {
                Stats::add(&self.stats.cancelled, n as u64);
                tracing::debug!(id, "batch cancelled: every caller left");
            }
            Err(e) => self.fail(&e, replies),
            Ok(Coalesced::Each(answers, took)) => {
                Stats::add(&self.stats.failed_batches, 1);
                tracing::debug!(
                    id,
                    size = n,
                    "batch failed; its callers were searched alone"
                );
                for ((reply, answer), queue_wait_us) in replies.into_iter().zip(answers).zip(waits)
                {
                    let response = answer.map(|(mut results, profile)| {
                        let batch = BatchInfo {
                            id,
                            size: 1,
                            mode: profile.mode,
                            retried_alone: true,
                            queue_wait_us,
                            scan_us: took.as_micros() as u64,
                        };
                        SearchResponse::of(&mut results, 0, batch)
                    });
                    if reply.send(response).is_err() {
                        Stats::add(&self.stats.cancelled, 1);
                    }
                }
            }
            Ok(Coalesced::Batch(scanned)) => {
                let (results, profile, took) = *scanned;
                self.record_batch(n, took, &profile);
                tracing::debug!(
                    id,
                    size = n,
                    mode = %profile.mode,
                    max_queue_wait_us = waits.iter().max().copied().unwrap_or(0),
                    scan_us = took.as_micros() as u64,
                    "batch done"
                );
                let mut results = results;
                for (i, (reply, queue_wait_us)) in replies.into_iter().zip(waits).enumerate() {
                    let batch = BatchInfo {
                        id,
                        size: n,
                        mode: profile.mode,
                        retried_alone: false,
                        queue_wait_us,
                        scan_us: took.as_micros() as u64,
                    };
                    let response = SearchResponse::of(&mut results, i, batch);
                    if reply.send(Ok(response)).is_err() {
                        Stats::add(&self.stats.cancelled, 1);
                    }
                }
            }
        }
    }

    /// Runs an explicit batch now (it waits for a slot, not for a window).
    /// Dropping the returned future cancels the scan.
    pub(crate) async fn run_explicit(
        self: &Arc<Self>,
        snapshot: Dataset,
        query: BatchQuery,
    ) -> Result<(SearchResults, Profile)> {
        let permit = Arc::clone(&self.slots)
            .acquire_owned()
            .await
            .map_err(|_| Error::ShuttingDown)?;
        let slot = self.guard(permit);
        let n = query.vectors.len();
        let (reply, answer) = reply_channel();
        let token = CancelToken::new();
        cancel_when_all_gone(std::slice::from_ref(&reply), &token);
        let scanner = Arc::clone(self);
        self.dispatch(slot, snapshot, query, token, false, move |outcome| {
            Stats::add(&scanner.stats.explicit_batches, 1);
            let answered = match outcome {
                Ok(Coalesced::Each(..)) => Err(Error::Internal(
                    "an explicit batch was split by query".into(),
                )),
                Ok(Coalesced::Batch(scanned)) => {
                    let (results, profile, took) = *scanned;
                    scanner.record_batch(n, took, &profile);
                    Ok((results, profile))
                }
                Err(e) => {
                    if !matches!(e, Error::Cancelled) {
                        scanner.count_failure(&e, n);
                    }
                    Err(e)
                }
            };
            let _ = reply.send(answered);
        });
        match answer.await {
            Ok(answered) => answered,
            Err(_) => Err(Error::Internal("a batch ended without an answer".into())),
        }
    }

    /// Runs `query` holding `slot` and the batch's memory budget, then
    /// hands the outcome to `answer` on the same thread. `token` stops the
    /// scan (its callers set it up to fire when every one has gone).
    ///
    /// When the budget has the bytes now, the batch runs as one job on the
    /// scan pool: the pool thread scans (its idle siblings help, as with
    /// any scan) and answers. When the bytes must be waited for, the batch
    /// waits on a blocking thread instead, so that no scan thread sits
    /// idle holding a place in the pool's queue.
    fn dispatch(
        &self,
        slot: SlotGuard,
        snapshot: Dataset,
        query: BatchQuery,
        token: CancelToken,
        split_on_error: bool,
        answer: impl FnOnce(Result<Coalesced>) + Send + 'static,
    ) {
        let bytes = batch_bytes(&query, self.heap_copies);
        let budget = self.budget.clone();
        let wait = self.budget_wait;
        let held = budget.try_acquire(bytes);
        let pool = snapshot.session().pool().clone();
        let must_wait = held.is_err() && !wait.is_zero();
        let job = move || {
            let _slot = slot;
            let permit = match held {
                Ok(permit) => Ok(permit),
                Err(_) if !wait.is_zero() => budget.acquire_timeout(bytes, wait),
                Err(e) => Err(e),
            };
            let outcome = permit.and_then(|_permit| {
                token.check()?;
                // The callers must hear of a panic as an error, not as the
                // engine going away (their reply channels dropped).
                catch_unwind(AssertUnwindSafe(|| {
                    scan(&snapshot, &query, &token, split_on_error)
                }))
                .unwrap_or_else(|_| Err(Error::Internal("a batch's scan panicked".into())))
            });
            answer(outcome);
        };
        if must_wait {
            tokio::task::spawn_blocking(job);
            return;
        }
        if let Err(job) = pool.spawn(Box::new(job)) {
            // No scan thread is left (they could not be started).
            tokio::task::spawn_blocking(job);
        }
    }

    fn record_batch(&self, n: usize, took: Duration, profile: &Profile) {
        Stats::add(&self.stats.batches, 1);
        self.stats
            .batch_filters
            .record(profile.distinct_filters as u64);
        self.stats.batch_size.record(n as u64);
        self.stats.scan_us.record(took.as_micros() as u64);
    }

    /// Counts a batch of `callers` that failed as a whole: each caller as
    /// rejected when the budget turned it away, else one failed batch.
    fn count_failure(&self, error: &Error, callers: usize) {
        if matches!(error, Error::Overloaded(_)) {
            Stats::add(&self.stats.rejected_overloaded, callers as u64);
        } else {
            Stats::add(&self.stats.failed_batches, 1);
        }
    }

    fn fail(&self, error: &Error, replies: Vec<ReplySender<Result<SearchResponse>>>) {
        self.count_failure(error, replies.len());
        tracing::debug!(%error, callers = replies.len(), "batch failed");
        for reply in replies {
            let _ = reply.send(Err(error.clone()));
        }
    }
}

/// Scans `query` on the calling thread. A coalesced batch
/// (`split_on_error`) that fails on something only some of its callers may
/// touch is searched again query by query, so that each caller gets its own
/// outcome.
fn scan(
    snapshot: &Dataset,
    query: &BatchQuery,
    token: &CancelToken,
    split_on_error: bool,
) -> Result<Coalesced> {
    let started = std::time::Instant::now();
    match snapshot.run(query, token) {
        Ok((results, profile)) => Ok(Coalesced::Batch(Box::new((
            results,
            profile,
            started.elapsed(),
        )))),
        // Coalesced callers bring their own filters and columns: a
        // failure that one of them caused must not fail the others, so
        // each is searched alone and gets its own outcome.
        Err(e)
            if split_on_error
                && query.vectors.len() > 1
                && e.kind() == crate::error::ErrorKind::Internal =>
        {
            let answers = (0..query.vectors.len())
                .map(|i| {
                    token.check()?;
                    snapshot.run(&alone(query, i)?, token)
                })
                .collect();
            Ok(Coalesced::Each(answers, started.elapsed()))
        }
        Err(e) => Err(e),
    }
}

/// Bytes a batch holds while it runs: the query vectors (the callers' and
/// the prepared copy), `heap_copies` heaps per query with one entry per
/// candidate row ((k + offset) × refine factor; each scan thread keeps its
/// own) and the result rows with their projected values.
pub(crate) fn batch_bytes(query: &BatchQuery, heap_copies: u64) -> u64 {
    const HEAP_ENTRY: u64 = 16;
    const HIT: u64 = std::mem::size_of::<Hit>() as u64;
    const VALUE: u64 = 32;
    let mut bytes = 0u64;
    for (i, v) in query.vectors.iter().enumerate() {
        let own = query.params_of(i);
        let projected = own.projection.len() as u64;
        let k = query.k.get(i).copied().unwrap_or(0) as u64;
        let depth = k
            .saturating_add(query.offset.get(i).copied().unwrap_or(0) as u64)
            .saturating_mul(own.refine_factor.unwrap_or(1) as u64);
        bytes = bytes
            .saturating_add(v.len() as u64 * 8)
            .saturating_add(depth.saturating_mul(HEAP_ENTRY).saturating_mul(heap_copies))
            .saturating_add(k.saturating_mul(HIT + projected * VALUE));
    }
    bytes
}
