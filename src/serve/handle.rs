//! [`DatasetHandle`]: one dataset as the engine serves it. Searches are
//! validated here, alone, pinned to a version, and handed to the coalescer;
//! explicit batches go straight to the scanner; writes run on a blocking
//! thread, one at a time, and move the handle's "latest" version forward so
//! that a later search sees them and a queued one keeps what it resolved.

use super::coalescer::{Message, Submission};
use super::engine::{blocking, EngineCore};
use super::reply::{reply_channel, ReplyReceiver};
use super::scanner::{BatchKey, SearchRequest, SearchResponse};
use super::stats::Stats;
use crate::db::Dataset;
use crate::error::{Error, Result};
use crate::exec::Profile;
use crate::index::{IndexParams, IndexSegmentMeta};
use crate::query::request::ValidatedBatch;
use crate::query::{BatchQuery, PerQuery, PerQueryParams, Query, SearchResults};
use arrow_array::RecordBatch;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::sync::RwLock;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::Instrument;

/// A progress callback of an index build: `(stage, done, total)`, called
/// from the blocking thread the build runs on.
pub type IndexProgress = Box<dyn FnMut(&str, usize, usize) + Send>;

/// A served dataset. Cheap to clone; `Send + Sync`.
#[derive(Clone, Debug)]
pub struct DatasetHandle {
    inner: Arc<HandleInner>,
}

#[derive(Debug)]
struct HandleInner {
    name: std::sync::Arc<str>,
    engine: Arc<EngineCore>,
    latest: RwLock<Dataset>,
    writes: std::sync::Arc<tokio::sync::Mutex<()>>,
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

    /// Makes `dataset` the latest version.
    fn publish(&self, dataset: Dataset) {
        match self.latest.write() {
            Ok(mut latest) => *latest = dataset,
            Err(poisoned) => *poisoned.into_inner() = dataset,
        }
    }
}

/// Tells the coalescer that a caller stopped waiting (dropped its future)
/// unless disarmed. Best effort: a full inbox loses the message, and the
/// scanner drops the closed caller before its batch starts anyway.
struct CancelOnDrop<'a> {
    id: u64,
    inbox: &'a mpsc::Sender<Message>,
    armed: bool,
}

impl Drop for CancelOnDrop<'_> {
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
            }),
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
    /// resolves now. Dropping the future cancels the search.
    pub async fn search(&self, query: Query) -> Result<SearchResponse> {
        let deadline_ms = self
            .inner
            .engine
            .session
            .config()
            .coalescer
            .default_deadline_ms;
        let deadline = (deadline_ms > 0).then(|| Duration::from_millis(deadline_ms));
        self.submit(query, deadline).await
    }

    /// [`DatasetHandle::search`] that fails with
    /// [`Error::DeadlineExceeded`] if its scan has not started within
    /// `timeout`.
    pub async fn search_with_deadline(
        &self,
        query: Query,
        timeout: Duration,
    ) -> Result<SearchResponse> {
        self.submit(query, Some(timeout)).await
    }

    async fn submit(&self, query: Query, timeout: Option<Duration>) -> Result<SearchResponse> {
        let id = self
            .inner
            .engine
            .next_request
            .fetch_add(1, Ordering::Relaxed);
        let span = tracing::debug_span!("search", dataset = %self.inner.name, request = id);
        self.submit_as(id, query, timeout).instrument(span).await
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
        let snapshot = self.snapshot(query.version).await?;
        let (key, request, reply) = self.prepare(snapshot, query)?;
        let deadline = timeout.map(|t| arrived + t);
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
        let mut cancel = CancelOnDrop {
            id,
            inbox: &engine.inbox,
            armed: true,
        };
        let answer = reply.await;
        cancel.armed = false;
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
        let Query {
            vector,
            k,
            offset,
            params,
        } = query;
        let mut one = BatchQuery {
            vectors: vec![vector],
            k: PerQuery::All(k),
            offset: PerQuery::All(offset),
            params,
            each: None,
        };
        let validated = ValidatedBatch::new(&one, snapshot.schema(), &snapshot.config().limits)?;
        let mut shared = one.params.shared();
        shared.version = Some(snapshot.version());
        shared.column = Some(validated.column.clone());
        shared.metric = Some(validated.metric);
        let mut own = PerQueryParams::from(&one.params);
        own.filter = validated.specs[0]
            .filter
            .map(|f| validated.filters[f].normalized().to_string());
        let vector = one.vectors.pop().unwrap_or_default();
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
        let latest = self.latest();
        match version {
            None => Ok(latest),
            Some(v) if v == latest.version() => Ok(latest),
            Some(v) => blocking(move || latest.checkout(v)).await,
        }
    }

    /// Searches an explicit batch at once (no window), on a scan slot.
    /// Dropping the future cancels the scan.
    pub async fn search_batch(&self, batch: BatchQuery) -> Result<SearchResults> {
        Ok(self.explain(batch).await?.0)
    }

    /// [`DatasetHandle::search_batch`], with what the execution did.
    pub async fn explain(&self, batch: BatchQuery) -> Result<(SearchResults, Profile)> {
        let engine = &self.inner.engine;
        engine.check_open()?;
        engine.scanner.run_explicit(self.latest(), batch).await
    }

    /// Appends rows as a new version; returns how many were added.
    pub async fn append(&self, batches: Vec<RecordBatch>) -> Result<u64> {
        Ok(self.append_versioned(batches).await?.1)
    }

    /// [`DatasetHandle::append`], with the version it committed:
    /// `(version, rows added)`.
    pub async fn append_versioned(&self, batches: Vec<RecordBatch>) -> Result<(u64, u64)> {
        self.write(move |ds| {
            let added = ds.append(batches.into_iter().map(Ok))?;
            Ok((ds.version(), added))
        })
        .await
    }

    /// Deletes the rows matching `filter` as a new version; returns how many.
    pub async fn delete(&self, filter: &str) -> Result<u64> {
        Ok(self.delete_versioned(filter).await?.1)
    }

    /// [`DatasetHandle::delete`], with the version it leaves the dataset
    /// at: `(version, rows deleted)` (deleting nothing commits nothing and
    /// answers the version as it was).
    pub async fn delete_versioned(&self, filter: &str) -> Result<(u64, u64)> {
        let filter = filter.to_string();
        self.write(move |ds| {
            let deleted = ds.delete(&filter)?;
            Ok((ds.version(), deleted))
        })
        .await
    }

    /// Builds an index over `column` (the only vector column when `None`),
    /// replacing its segments, on a blocking thread.
    pub async fn create_index(
        &self,
        column: Option<String>,
        params: IndexParams,
    ) -> Result<IndexSegmentMeta> {
        self.write(move |ds| ds.create_index(column.as_deref(), params))
            .await
    }

    /// [`DatasetHandle::create_index`], reporting `(stage, done, total)` to
    /// `progress` from the blocking thread while it runs (k-means
    /// iterations, rows assigned, partitions written). Answers the segment
    /// and the version it committed.
    pub async fn create_index_with_progress(
        &self,
        column: Option<String>,
        params: IndexParams,
        mut progress: IndexProgress,
    ) -> Result<(IndexSegmentMeta, u64)> {
        self.write(move |ds| {
            let meta = ds.create_index_with_progress(column.as_deref(), params, &mut *progress)?;
            Ok((meta, ds.version()))
        })
        .await
    }

    /// Indexes the fragments no segment covers yet (delta segments).
    pub async fn optimize(&self) -> Result<Vec<IndexSegmentMeta>> {
        self.write(|ds| ds.optimize(&mut |_, _, _| {})).await
    }

    /// [`DatasetHandle::optimize`], reporting progress like
    /// [`DatasetHandle::create_index_with_progress`]. Answers the new
    /// segments and the version the dataset is at afterwards.
    pub async fn optimize_with_progress(
        &self,
        mut progress: IndexProgress,
    ) -> Result<(Vec<IndexSegmentMeta>, u64)> {
        self.write(move |ds| {
            let built = ds.optimize(&mut *progress)?;
            Ok((built, ds.version()))
        })
        .await
    }

    /// Runs one write at a time on a blocking thread and publishes the new
    /// version as the handle's latest. The write runs to the end even if
    /// the caller stops waiting, and the handle still learns its version.
    async fn write<T, F>(&self, change: F) -> Result<T>
    where
        F: FnOnce(&mut Dataset) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        self.inner.engine.check_open()?;
        let turn = std::sync::Arc::clone(&self.inner.writes).lock_owned().await;
        let inner = Arc::clone(&self.inner);
        blocking(move || {
            let _turn = turn;
            let mut dataset = inner.latest();
            let out = change(&mut dataset)?;
            inner.publish(dataset);
            Ok(out)
        })
        .await
    }
}
