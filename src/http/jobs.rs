//! Index builds over HTTP: `POST /v1/datasets/{name}/indexes` checks the
//! request against the dataset, starts the build as a background task (the
//! work itself runs on a blocking thread inside the handle) and answers 202
//! with a job; `GET /v1/datasets/{name}/indexes` shows the dataset's index
//! segments and its jobs with their progress. At most
//! [`MAX_FINISHED_JOBS`] finished jobs are kept; running jobs always are.

use super::error::{code_of, ApiError};
use super::{AppState, JsonBody};
use crate::error::Error;
use crate::index::{IndexKind, IndexParams, IndexSegmentMeta};
use crate::progress::Progress;
use crate::serve::Engine;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Finished jobs kept in memory (oldest dropped first), across datasets.
pub const MAX_FINISHED_JOBS: usize = 32;
/// Largest `partitions` a request may ask for.
pub const MAX_PARTITIONS: usize = 65_536;
/// Largest `iterations` a request may ask for.
pub const MAX_ITERATIONS: usize = 1_000;
/// Largest `sample_per_partition` a request may ask for.
pub const MAX_SAMPLE_PER_PARTITION: usize = 65_536;

/// `POST /v1/datasets/{name}/indexes`: either a build
/// (`type`, `partitions`, ...) or `{ "optimize": true }`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexBody {
    /// `ivf_flat`, `ivf_pq`, `ivf_sq`, `ivf_rq` or `hnsw`.
    #[serde(rename = "type")]
    pub kind: Option<String>,
    /// Number of partitions (k-means centroids; IVF indexes).
    pub partitions: Option<usize>,
    /// Neighbours per node on the upper layers (`hnsw` only; default 16).
    pub m: Option<usize>,
    /// Candidates kept while linking a row (`hnsw` only; default 200).
    pub ef_construction: Option<usize>,
    /// PQ sub-vectors (bytes per code; `ivf_pq` only, divides the dimension).
    pub sub_vectors: Option<usize>,
    /// RaBitQ bits per dimension (`ivf_rq` only; 1 to 8, default 4).
    pub bits: Option<usize>,
    /// Vector column (the only one when left out).
    pub column: Option<String>,
    /// Training rows per partition (default 256).
    pub sample_per_partition: Option<usize>,
    /// k-means iterations (default 25).
    pub iterations: Option<usize>,
    /// Seed of the sampling and k-means (default 42).
    pub seed: Option<u64>,
    /// `true`: index the fragments appended since the last build, reusing
    /// its model (no other field allowed).
    pub optimize: Option<bool>,
}

/// What a validated request will do.
#[derive(Debug)]
enum Work {
    Build {
        column: Option<String>,
        params: IndexParams,
    },
    Optimize,
}

impl IndexBody {
    fn into_work(self) -> Result<Work, Error> {
        let bad = |m: &str| Error::InvalidArgument(m.to_string());
        if self.optimize == Some(true) {
            let others = self.kind.is_some()
                || self.partitions.is_some()
                || self.sub_vectors.is_some()
                || self.m.is_some()
                || self.ef_construction.is_some()
                || self.column.is_some()
                || self.sample_per_partition.is_some()
                || self.iterations.is_some()
                || self.seed.is_some();
            if others {
                return Err(bad(
                    "'optimize' takes no other field: it reuses the model of the existing index",
                ));
            }
            return Ok(Work::Optimize);
        }
        if self.optimize == Some(false) && self.kind.is_none() {
            return Err(bad(
                "'optimize' is false and no 'type' is given: nothing to do",
            ));
        }
        if self.bits.is_some() && self.kind.as_deref() != Some("ivf_rq") {
            return Err(bad("'bits' applies to ivf_rq only"));
        }
        let graph = self.kind.as_deref() == Some("hnsw");
        if !graph && (self.m.is_some() || self.ef_construction.is_some()) {
            return Err(bad("'m' and 'ef_construction' apply to hnsw only"));
        }
        if graph {
            let ivf_only = self.partitions.is_some()
                || self.sub_vectors.is_some()
                || self.sample_per_partition.is_some()
                || self.iterations.is_some();
            if ivf_only {
                return Err(bad(
                    "hnsw takes m and ef_construction (and seed); partitions, sub_vectors, \
                     sample_per_partition and iterations apply to IVF indexes",
                ));
            }
            let mut params = IndexParams::new(
                IndexKind::Hnsw {
                    m: self.m.unwrap_or(IndexKind::DEFAULT_HNSW_M),
                    ef_construction: self
                        .ef_construction
                        .unwrap_or(IndexKind::DEFAULT_EF_CONSTRUCTION),
                },
                1,
            );
            if let Some(seed) = self.seed {
                params.seed = seed;
            }
            return Ok(Work::Build {
                column: self.column,
                params,
            });
        }
        let kind =
            match (self.kind.as_deref(), self.sub_vectors) {
                (None, _) => return Err(bad(
                    "'type' is required: ivf_flat, ivf_pq, ivf_sq, ivf_rq or hnsw (or send {\"optimize\": true})",
                )),
                (Some("ivf_rq"), None) => IndexKind::IvfRq {
                    bits: self.bits.unwrap_or(IndexKind::DEFAULT_RQ_BITS),
                },
                (Some("ivf_flat"), None) => IndexKind::IvfFlat,
                (Some("ivf_sq"), None) => IndexKind::IvfSq,
                (Some("ivf_pq"), Some(sub_vectors)) => IndexKind::IvfPq { sub_vectors },
                (Some("ivf_pq"), None) => {
                    return Err(bad(
                        "ivf_pq needs 'sub_vectors' (bytes per code; divides the dimension)",
                    ))
                }
                (Some("ivf_flat" | "ivf_sq" | "ivf_rq"), Some(_)) => {
                    return Err(bad("'sub_vectors' applies to ivf_pq only"))
                }
                (Some(other), _) => {
                    return Err(Error::InvalidArgument(format!(
                        "unknown index type '{}' (ivf_flat, ivf_pq, ivf_sq, ivf_rq, hnsw)",
                        other.escape_debug()
                    )))
                }
            };
        let partitions = self
            .partitions
            .ok_or_else(|| bad("'partitions' is required"))?;
        let mut params = IndexParams::new(kind, partitions);
        if let Some(n) = self.sample_per_partition {
            params.sample_per_partition = n;
        }
        if let Some(n) = self.iterations {
            params.iterations = n;
        }
        if let Some(seed) = self.seed {
            params.seed = seed;
        }
        for (what, value, max) in [
            ("partitions", params.partitions, MAX_PARTITIONS),
            ("iterations", params.iterations, MAX_ITERATIONS),
            (
                "sample_per_partition",
                params.sample_per_partition,
                MAX_SAMPLE_PER_PARTITION,
            ),
        ] {
            if value > max {
                return Err(Error::LimitExceeded { what, value, max });
            }
        }
        Ok(Work::Build {
            column: self.column,
            params,
        })
    }
}

/// Where a job is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobState {
    /// Queued behind another write or building.
    Running,
    /// Committed.
    Done,
    /// Failed; nothing was committed.
    Failed,
}

impl JobState {
    fn name(self) -> &'static str {
        match self {
            JobState::Running => "running",
            JobState::Done => "done",
            JobState::Failed => "failed",
        }
    }
}

/// One index job.
#[derive(Debug)]
struct Job {
    id: u64,
    dataset: String,
    operation: &'static str,
    request: Value,
    state: JobState,
    started_ms: u64,
    started: Instant,
    finished_ms: Option<u64>,
    elapsed_ms: Option<u64>,
    /// Latest `(stage, done, total)` the build reported.
    progress: Option<(String, usize, usize)>,
    result: Option<Value>,
    error: Option<Value>,
}

impl Job {
    fn to_json(&self) -> Value {
        let elapsed = self
            .elapsed_ms
            .unwrap_or_else(|| self.started.elapsed().as_millis() as u64);
        json!({
            "id": self.id,
            "dataset": self.dataset,
            "operation": self.operation,
            "request": self.request,
            "state": self.state.name(),
            "started_ms": self.started_ms,
            "finished_ms": self.finished_ms,
            "elapsed_ms": elapsed,
            "progress": self.progress.as_ref().map(|(stage, done, total)| {
                json!({ "stage": stage, "done": done, "total": total })
            }),
            "result": self.result,
            "error": self.error,
        })
    }
}

/// The index jobs of one server.
#[derive(Debug, Default)]
pub struct IndexJobs {
    inner: Mutex<JobsInner>,
}

#[derive(Debug, Default)]
struct JobsInner {
    next_id: u64,
    jobs: Vec<Job>,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl IndexJobs {
    fn lock(&self) -> std::sync::MutexGuard<'_, JobsInner> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Registers a running job unless `dataset` already has one.
    fn start(
        &self,
        dataset: &str,
        operation: &'static str,
        request: Value,
    ) -> Result<u64, ApiError> {
        let mut inner = self.lock();
        if let Some(running) = inner
            .jobs
            .iter()
            .find(|j| j.dataset == dataset && j.state == JobState::Running)
        {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "index_job_running",
                format!(
                    "index job {} is still running on dataset '{dataset}'; wait for it (GET /v1/datasets/{dataset}/indexes)",
                    running.id
                ),
            ));
        }
        inner.next_id += 1;
        let id = inner.next_id;
        inner.jobs.push(Job {
            id,
            dataset: dataset.to_string(),
            operation,
            request,
            state: JobState::Running,
            started_ms: now_ms(),
            started: Instant::now(),
            finished_ms: None,
            elapsed_ms: None,
            progress: None,
            result: None,
            error: None,
        });
        Ok(id)
    }

    fn progress(&self, id: u64, stage: &str, done: usize, total: usize) {
        let mut inner = self.lock();
        if let Some(job) = inner.jobs.iter_mut().find(|j| j.id == id) {
            match &mut job.progress {
                Some((s, d, t)) if s == stage => {
                    *d = done;
                    *t = total;
                }
                slot => *slot = Some((stage.to_string(), done, total)),
            }
        }
    }

    fn finish(&self, id: u64, outcome: Result<Value, Error>) {
        let mut inner = self.lock();
        if let Some(job) = inner.jobs.iter_mut().find(|j| j.id == id) {
            job.finished_ms = Some(now_ms());
            job.elapsed_ms = Some(job.started.elapsed().as_millis() as u64);
            match outcome {
                Ok(result) => {
                    job.state = JobState::Done;
                    job.result = Some(result);
                }
                Err(e) => {
                    job.state = JobState::Failed;
                    job.error = Some(json!({ "code": code_of(&e), "message": e.to_string() }));
                }
            }
        }
        let finished = inner
            .jobs
            .iter()
            .filter(|j| j.state != JobState::Running)
            .count();
        let mut drop = finished.saturating_sub(MAX_FINISHED_JOBS);
        // Jobs are in start order: drop the oldest finished ones.
        inner.jobs.retain(|j| {
            if drop > 0 && j.state != JobState::Running {
                drop -= 1;
                false
            } else {
                true
            }
        });
    }

    /// The jobs of `dataset`, newest first.
    fn of(&self, dataset: &str) -> Vec<Value> {
        self.lock()
            .jobs
            .iter()
            .rev()
            .filter(|j| j.dataset == dataset)
            .map(Job::to_json)
            .collect()
    }

    /// Jobs kept, running and finished (for tests).
    pub fn len(&self) -> usize {
        self.lock().jobs.len()
    }

    /// No job kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn segments_json(segments: &[IndexSegmentMeta]) -> Vec<Value> {
    segments
        .iter()
        .map(|s| serde_json::to_value(s).unwrap_or(Value::Null))
        .collect()
}

/// `POST /v1/datasets/{name}/indexes`: 202 with the job, or a 4xx before
/// anything starts.
pub(super) async fn start_index_job(
    State(state): State<AppState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<IndexBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let handle = state.engine.dataset(&name).await?;
    let request = json!({
        "type": body.kind,
        "partitions": body.partitions,
        "sub_vectors": body.sub_vectors,
        "column": body.column,
        "sample_per_partition": body.sample_per_partition,
        "iterations": body.iterations,
        "seed": body.seed,
        "optimize": body.optimize,
    });
    let request = match request {
        Value::Object(map) => {
            Value::Object(map.into_iter().filter(|(_, v)| !v.is_null()).collect())
        }
        other => other,
    };
    let work = body.into_work()?;
    // Check against the latest version now, so that a bad request is a
    // 4xx and not a failed job.
    let latest = handle.latest();
    let operation = match &work {
        Work::Build { column, params } => {
            let (_, dim, _) = latest.schema().vector_column(column.as_deref())?;
            crate::index::ivf::validate_params(params, dim, latest.count_rows())?;
            "create_index"
        }
        Work::Optimize => {
            if latest.index_segments().is_empty() {
                return Err(Error::InvalidArgument(format!(
                    "dataset '{name}' has no index to optimize; build one first"
                ))
                .into());
            }
            "optimize"
        }
    };
    let jobs = Arc::clone(&state.jobs);
    let id = jobs.start(&name, operation, request)?;
    let reporter = Arc::clone(&jobs);
    let progress = Progress::new(move |stage: &str, done: u64, total: u64| {
        reporter.progress(id, stage, done as usize, total as usize)
    });
    let handle = handle.with_progress(progress);
    let task_jobs = Arc::clone(&jobs);
    tokio::spawn(async move {
        let outcome = match work {
            Work::Build { column, params } => handle.create_index(column.as_deref(), params).await,
            Work::Optimize => handle.optimize().await,
        }
        .map(|commit| {
            json!({ "version": commit.version, "segments": segments_json(&commit.segments) })
        });
        task_jobs.finish(id, outcome);
    });
    let job = jobs
        .of(&name)
        .into_iter()
        .find(|j| j["id"] == id)
        .unwrap_or(Value::Null);
    Ok((StatusCode::ACCEPTED, Json(json!({ "job": job }))))
}

/// `GET /v1/datasets/{name}/indexes`: the latest version's segments and
/// the dataset's jobs (newest first).
pub(super) async fn list_indexes(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let engine: &Engine = &state.engine;
    let latest = engine.dataset(&name).await?.latest();
    Ok(Json(json!({
        "version": latest.version(),
        "segments": segments_json(latest.index_segments()),
        "jobs": state.jobs.of(&name),
    })))
}
