//! [`DatasetHandle`]: one dataset as the engine serves it. Searches are
//! validated here, alone, pinned to a version, and handed to the coalescer;
//! explicit batches go straight to the scanner; writes run on a blocking
//! thread, one at a time, and move the handle's "latest" version forward so
//! that a later search sees them and a queued one keeps what it resolved.

use super::coalescer::core::{Batch, FlushReason, Pending};
use super::coalescer::{Message, Submission};
use super::engine::{on_blocking_thread, EngineCore};
use super::reply::{reply_channel, ReplyReceiver};
use super::scanner::{BatchKey, SearchRequest};
use super::stats::Stats;
use crate::cancel::CancelToken;
use crate::db::{Commit, Dataset};
use crate::error::{Error, Result};
use crate::exec::Profile;
use crate::index::IndexParams;
use crate::progress::Progress;
use crate::query::validated::ValidatedBatch;
use crate::query::{BatchQuery, Query, SearchResponse, SearchResults};
use arrow_array::RecordBatch;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::sync::RwLock;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::Instrument;

/// A served dataset. Cheap to clone; `Send + Sync`.
#[derive(Clone, Debug)]
pub struct DatasetHandle {
    inner: Arc<HandleInner>,
    progress: Option<Progress>,
}

#[derive(Debug)]
struct HandleInner {
    name: std::sync::Arc<str>,
    engine: Arc<EngineCore>,
    latest: RwLock<Dataset>,
    writes: std::sync::Arc<tokio::sync::Mutex<()>>,
    /// When the storage was last asked for newer versions (another
    /// process may commit: a replica, or a second writer of a directory).
    checked_at: tokio::sync::Mutex<Instant>,
}

impl HandleInner {
    /// A snapshot of the latest version (a poisoned lock still holds a
    /// whole `Dataset`: writers replace it in one assignment).
    fn latest(&self) -> Dataset {
        match self.latest.read() {
            Ok(d) => d.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Makes `dataset` the latest version, unless a newer one is there.
    fn publish(&self, dataset: Dataset) {
        let mut latest = match self.latest.write() {
            Ok(latest) => latest,
            Err(poisoned) => poisoned.into_inner(),
        };
        if dataset.version() >= latest.version() {
            *latest = dataset;
        }
    }

    /// The latest version, after asking the storage for a newer one when
    /// `storage.refresh_ms` has passed since the last time (one caller
    /// asks; the others meanwhile take the version known).
    async fn refreshed(&self) -> Dataset {
        let latest = self.latest();
        let every = Duration::from_millis(latest.config().storage.refresh_ms);
        let Ok(mut checked_at) = self.checked_at.try_lock() else {
            return latest;
        };
        if checked_at.elapsed() < every {
            return latest;
        }
        *checked_at = Instant::now();
        match on_blocking_thread(move || latest.checkout_latest()).await {
            Ok(newest) => self.publish(newest),
            Err(e) => tracing::warn!(error = %e, "looking for newer versions failed"),
        }
        self.latest()
    }
}

/// Withdraws a caller's search from the coalescer when the caller stops
/// waiting (drops its future), unless disarmed. Best effort: a full inbox
/// loses the message, and the scanner drops the closed caller before its
/// batch starts anyway.
struct WithdrawOnDrop<'a> {
    id: u64,
    inbox: &'a mpsc::Sender<Message>,
    armed: bool,
}

impl Drop for WithdrawOnDrop<'_> {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.inbox.try_send(Message::Cancel(self.id));
        }
    }
}

impl DatasetHandle {
    pub(crate) fn new(name: &str, engine: Arc<EngineCore>, dataset: Dataset) -> DatasetHandle {
        DatasetHandle {
            inner: Arc::new(HandleInner {
                name: name.into(),
                engine,
                latest: RwLock::new(dataset),
                writes: Default::default(),
                checked_at: tokio::sync::Mutex::new(Instant::now()),
            }),
            progress: None,
        }
    }

    /// This handle reporting the progress of its long writes (index
    /// builds, optimize, appends) to `progress`, from the blocking thread
    /// the write runs on. Cheap: the dataset is shared.
    pub fn with_progress(&self, progress: Progress) -> DatasetHandle {
        DatasetHandle {
            inner: Arc::clone(&self.inner),
            progress: Some(progress),
        }
    }

    /// The dataset's name in the engine.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The latest version as the engine knows it (a cheap snapshot).
    pub fn latest(&self) -> Dataset {
        self.inner.latest()
    }

    /// The latest version's number.
    pub fn version(&self) -> u64 {
        self.latest().version()
    }

    /// Searches for one vector's nearest rows, coalesced with concurrent
    /// searches of the same version, column, metric and mode (each keeps
    /// its own filter, k, offset, nprobes, refine factor and projection).
    /// The rows are exactly those of [`Dataset::search`] on the version it
    /// resolves now. Dropping the future cancels the search, as does the
    /// query's cancel token; its `timeout` (else the engine's
    /// `coalescer.default_deadline_ms`) bounds the wait for a scan.
    pub async fn search(&self, query: &Query) -> Result<SearchResponse> {
        let timeout = query.timeout.or_else(|| {
            let ms = self
                .inner
                .engine
                .session
                .config()
                .coalescer
                .default_deadline_ms;
            (ms > 0).then(|| Duration::from_millis(ms))
        });
        let id = self
            .inner
            .engine
            .next_request
            .fetch_add(1, Ordering::Relaxed);
        let span = tracing::debug_span!("search", dataset = %self.inner.name, request = id);
        let search = self.submit_as(id, query.clone(), timeout).instrument(span);
        until_cancelled(query.cancel.as_ref(), search).await
    }

    async fn submit_as(
        &self,
        id: u64,
        query: Query,
        timeout: Option<Duration>,
    ) -> Result<SearchResponse> {
        let engine = &self.inner.engine;
        engine.check_open()?;
        Stats::add(&engine.stats.requests, 1);
        let arrived = Instant::now();
        let snapshot = self.snapshot(query.shared.version).await?;
        let (key, request, reply) = self.prepare(snapshot, query)?;
        let deadline = timeout.map(|t| arrived + t);
        if let Some(slot) = engine.idle_slot() {
            // Nothing waits and a scan slot is free: the coalescer would
            // close this search's group at once, so it starts here, one
            // hand-off sooner. A caller who leaves is counted out by its
            // reply channel (see the scanner), as in any batch.
            let alone = Batch {
                key,
                requests: vec![Pending {
                    id,
                    arrived: arrived.into_std(),
                    deadline: deadline.map(Instant::into_std),
                    payload: request,
                }],
                reason: FlushReason::Idle,
            };
            engine.scanner.start(alone, slot);
            return match reply.await {
                Ok(result) => result,
                Err(_) => Err(Error::ShuttingDown),
            };
        }
        let message = Message::Submit(Box::new(Submission {
            id,
            key,
            deadline,
            request,
        }));
        engine
            .inbox
            .send(message)
            .await
            .map_err(|_| Error::ShuttingDown)?;
        let mut withdraw = WithdrawOnDrop {
            id,
            inbox: &engine.inbox,
            armed: true,
        };
        let answer = reply.await;
        withdraw.armed = false;
        match answer {
            Ok(result) => result,
            // The engine stopped (its runtime is going away) before
            // answering.
            Err(_) => Err(Error::ShuttingDown),
        }
    }

    /// Checks `query` against the snapshot's schema and limits (a bad
    /// query fails here and never joins a batch) and builds its batch key
    /// (version, column and metric resolved; mode and index use) and its
    /// own parameters (filter in normal form, filter mode, projection,
    /// nprobes, refine factor), which do not split batches.
    fn prepare(
        &self,
        snapshot: Dataset,
        query: Query,
    ) -> Result<(
        BatchKey,
        SearchRequest,
        ReplyReceiver<Result<SearchResponse>>,
    )> {
        let (k, offset) = (query.k, query.offset);
        let one = query.into_batch();
        let validated = ValidatedBatch::new(&one, snapshot.schema(), &snapshot.config().limits)?;
        snapshot.check_index_options(&validated)?;
        let BatchQuery {
            vectors,
            own,
            mut shared,
            ..
        } = one;
        shared.version = Some(snapshot.version());
        shared.column = Some(validated.column.clone());
        shared.metric = Some(validated.metric);
        let mut own = own.get(0).cloned().unwrap_or_default();
        own.filter = validated.specs[0]
            .filter
            .map(|f| validated.filters[f].normalized().to_string());
        let vector = vectors.into_iter().next().unwrap_or_default();
        let (reply, receiver) = reply_channel();
        Ok((
            BatchKey {
                dataset: std::sync::Arc::clone(&self.inner.name),
                params: shared,
            },
            SearchRequest {
                vector,
                k,
                offset,
                own,
                snapshot,
                reply,
            },
            receiver,
        ))
    }

    /// The version a search asks for: the latest as of now, or the one it
    /// names (read on a blocking thread).
    async fn snapshot(&self, version: Option<u64>) -> Result<Dataset> {
        let latest = self.inner.refreshed().await;
        match version {
            None => Ok(latest),
            Some(v) if v == latest.version() => Ok(latest),
            Some(v) => on_blocking_thread(move || latest.checkout(v)).await,
        }
    }

    /// Searches an explicit batch at once (no window), on a scan slot;
    /// `hits[i]` answers query `i`. Dropping the future cancels the scan,
    /// as does the batch's cancel token.
    pub async fn search_batch(&self, batch: &BatchQuery) -> Result<SearchResults> {
        Ok(self.explain(batch).await?.0)
    }

    /// [`DatasetHandle::search_batch`], with what the execution did.
    pub async fn explain(&self, batch: &BatchQuery) -> Result<(SearchResults, Profile)> {
        let engine = &self.inner.engine;
        engine.check_open()?;
        let latest = match batch.shared.version {
            Some(_) => self.latest(),
            None => self.inner.refreshed().await,
        };
        let run = engine.scanner.run_explicit(latest, batch.clone());
        until_cancelled(batch.cancel.as_ref(), run).await
    }

    /// Appends rows as a new version; the commit counts the rows added.
    /// When the append leaves `ingest.compact_after_fragments` small
    /// unindexed fragments at the end of the dataset, they are compacted
    /// right after (a second version, which the commit then names); a
    /// compaction that fails is logged and leaves the append committed.
    pub async fn append(&self, batches: Vec<RecordBatch>) -> Result<Commit> {
        self.write(move |ds| {
            let mut commit = ds.append(batches.clone())?;
            let after = ds.config().ingest.compact_after_fragments;
            if after > 0 && ds.compactable_tail().len() >= after {
                match ds.compact() {
                    Ok(compacted) => commit.version = compacted.version,
                    Err(e) => tracing::warn!(error = %e, "automatic compaction failed"),
                }
            }
            Ok(commit)
        })
        .await
    }

    /// Merges the small unindexed fragments at the end of the dataset
    /// (see [`Dataset::compact`]).
    pub async fn compact(&self) -> Result<Commit> {
        self.write(|ds| ds.compact()).await
    }

    /// Deletes the rows matching `filter` as a new version; the commit
    /// counts them (deleting nothing commits nothing and answers the
    /// version as it was).
    pub async fn delete(&self, filter: &str) -> Result<Commit> {
        let filter = filter.to_string();
        self.write(move |ds| ds.delete(&filter)).await
    }

    /// Builds an index over `column` (the only vector column when `None`),
    /// replacing its segments, on a blocking thread (see
    /// [`Dataset::create_index`]).
    pub async fn create_index(&self, column: Option<&str>, params: IndexParams) -> Result<Commit> {
        let column = column.map(str::to_string);
        self.write(move |ds| ds.create_index(column.as_deref(), params.clone()))
            .await
    }

    /// Indexes the fragments no segment covers yet (delta segments; see
    /// [`Dataset::optimize`]).
    pub async fn optimize(&self) -> Result<Commit> {
        self.write(|ds| ds.optimize()).await
    }

    /// Retrains the index of `column` (see [`Dataset::reindex`]).
    pub async fn reindex(&self, column: Option<&str>) -> Result<Commit> {
        let column = column.map(str::to_string);
        self.write(move |ds| ds.reindex(column.as_deref())).await
    }

    /// Runs one write at a time on a blocking thread and publishes the new
    /// version as the handle's latest; then, with `retention.keep_versions`
    /// set, removes the versions it no longer keeps (a failure there is
    /// logged: the write stands). The write runs to the end even if
    /// the caller stops waiting, and the handle still learns its version.
    ///
    /// Another process may commit first (a replica on the same storage):
    /// the write then conflicts, and is done again on the newest version,
    /// up to [`WRITE_TRIES`] times, before `CommitConflict` is answered.
    /// A write that conflicted committed nothing.
    async fn write<T, F>(&self, change: F) -> Result<T>
    where
        F: Fn(&mut Dataset) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        self.inner.engine.check_open()?;
        let turn = std::sync::Arc::clone(&self.inner.writes).lock_owned().await;
        let inner = Arc::clone(&self.inner);
        let progress = self.progress.clone();
        on_blocking_thread(move || {
            let _turn = turn;
            let mut tries = 0;
            let (out, dataset) = loop {
                let latest = inner.latest();
                let mut dataset = match &progress {
                    Some(p) => latest.with_progress(p.clone()),
                    None => latest,
                };
                match change(&mut dataset) {
                    Ok(out) => break (out, dataset),
                    Err(Error::CommitConflict { .. }) if tries + 1 < WRITE_TRIES => {
                        tries += 1;
                        Stats::add(&inner.engine.stats.write_conflicts, 1);
                        // Back off a little (jittered), then start again
                        // from the newest version.
                        let pause = 2u64 << tries.min(6);
                        std::thread::sleep(Duration::from_millis(
                            pause + rand::random::<u64>() % pause,
                        ));
                        inner.publish(dataset.checkout_latest()?);
                    }
                    Err(e) => return Err(e),
                }
            };
            let retention = dataset.config().retention.clone();
            let latest = dataset.without_progress();
            inner.publish(latest.clone());
            if retention.keep_versions > 0 {
                let min_age = Duration::from_millis(retention.min_age_ms);
                if let Err(e) = latest.cleanup(retention.keep_versions, min_age) {
                    tracing::warn!(error = %e, "removing old versions failed");
                }
            }
            Ok(out)
        })
        .await
    }
}

/// How many times a write is tried when other processes keep committing
/// first.
pub const WRITE_TRIES: usize = 8;

/// Runs `work` unless `token` is cancelled first (then fails with
/// [`Error::Cancelled`] and drops `work`, which cancels it). The token has
/// no waker, so it is polled every few milliseconds while a search waits.
async fn until_cancelled<T>(
    token: Option<&CancelToken>,
    work: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    let Some(token) = token else {
        return work.await;
    };
    token.check()?;
    let watch = async {
        loop {
            tokio::time::sleep(Duration::from_millis(5)).await;
            if token.is_cancelled() {
                return;
            }
        }
    };
    tokio::select! {
        out = work => out,
        () = watch => Err(Error::Cancelled),
    }
}
