//! `shoal._shoal`: the Python bindings' native half. Thin on purpose: each
//! call converts its arguments (NumPy vectors without per-element Python
//! objects, Arrow record batches through the C data interface), runs the
//! crate's own `Engine` / `DatasetHandle` call with the GIL released, and
//! converts the answer to Arrow. `shoal/__init__.py` holds the Python-side
//! conveniences (dicts of NumPy arrays, dtype checks, tables).

mod convert;

use arrow_array::RecordBatch;
use arrow_pyarrow::ToPyArrow;
use convert::{
    batches_of, matrix_of, response_batch, results_batch, schema_of, vector_of, Options,
};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use shoal::{ColumnType, Config, DatasetHandle, ErrorKind, IndexKind, IndexParams, Metric};
use std::sync::Arc;

create_exception!(_shoal, ShoalError, PyException, "Every error shoal raises.");
create_exception!(
    _shoal,
    InvalidInput,
    ShoalError,
    "Bad input: nothing was changed."
);
create_exception!(
    _shoal,
    NotFound,
    ShoalError,
    "No such dataset, version or row."
);
create_exception!(
    _shoal,
    Conflict,
    ShoalError,
    "The dataset exists, or another writer won."
);
create_exception!(
    _shoal,
    Overloaded,
    ShoalError,
    "The engine is busy: retry later."
);
create_exception!(_shoal, Cancelled, ShoalError, "The search was cancelled.");
create_exception!(
    _shoal,
    DeadlineExceeded,
    ShoalError,
    "The search did not start within its timeout."
);
create_exception!(
    _shoal,
    StorageUnavailable,
    ShoalError,
    "Object storage could not be reached or refused the request; nothing changed, retry later."
);
create_exception!(
    _shoal,
    InternalError,
    ShoalError,
    "shoal or its storage failed."
);

/// A shoal error as the Python exception of its kind, message unchanged.
fn to_py(e: shoal::Error) -> PyErr {
    let message = e.to_string();
    match e.kind() {
        ErrorKind::InvalidInput => InvalidInput::new_err(message),
        ErrorKind::NotFound => NotFound::new_err(message),
        ErrorKind::Conflict => Conflict::new_err(message),
        ErrorKind::Overloaded => Overloaded::new_err(message),
        ErrorKind::Cancelled => Cancelled::new_err(message),
        ErrorKind::DeadlineExceeded => DeadlineExceeded::new_err(message),
        ErrorKind::Unavailable => StorageUnavailable::new_err(message),
        _ => InternalError::new_err(message),
    }
}

fn invalid(message: impl Into<String>) -> PyErr {
    InvalidInput::new_err(message.into())
}

/// The runtime the engines run on (their coalescer actors, the blocking
/// calls' waits): not the one that completes asyncio futures, whose
/// threads wait for the GIL and must never hold up a coalescer.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("shoal-engine")
            .enable_all()
            .build()
            .expect("the engine's tokio runtime starts")
    })
}

fn metric_of(name: &str) -> PyResult<Metric> {
    match name {
        "l2" => Ok(Metric::L2),
        "cosine" => Ok(Metric::Cosine),
        "dot" => Ok(Metric::Dot),
        other => Err(invalid(format!(
            "unknown metric '{other}' (l2, cosine or dot)"
        ))),
    }
}

/// An engine over a directory of datasets: `shoal.connect(path)`.
#[pyclass(module = "shoal._shoal", frozen)]
struct Engine {
    inner: shoal::Engine,
}

#[pymethods]
impl Engine {
    /// Starts an engine over `path` (created if missing) with the config
    /// given as TOML text (empty: the defaults).
    #[new]
    #[pyo3(signature = (path, config_toml = ""))]
    fn new(py: Python<'_>, path: std::path::PathBuf, config_toml: &str) -> PyResult<Engine> {
        let config = if config_toml.is_empty() {
            Config::default()
        } else {
            Config::from_toml_str(config_toml).map_err(to_py)?
        };
        let inner = py
            .detach(|| {
                let _guard = runtime().enter();
                shoal::Engine::start(config, &path)
            })
            .map_err(to_py)?;
        Ok(Engine { inner })
    }

    /// Creates dataset `name` from Arrow record batches (its schema from
    /// the first one's) and appends them.
    fn create_dataset(
        &self,
        py: Python<'_>,
        name: &str,
        data: &Bound<'_, PyAny>,
        metric: &str,
    ) -> PyResult<Dataset> {
        let batches = batches_of(data)?;
        let Some(first) = batches.first() else {
            return Err(invalid("the data has no record batch"));
        };
        let schema = schema_of(&first.schema(), metric_of(metric)?)?;
        let engine = self.inner.clone();
        let name = name.to_string();
        let handle = py
            .detach(|| {
                runtime().block_on(async {
                    let handle = engine.create_dataset(&name, schema).await?;
                    if batches.iter().any(|b| b.num_rows() > 0) {
                        handle.append(batches).await?;
                    }
                    Ok::<_, shoal::Error>(handle)
                })
            })
            .map_err(to_py)?;
        Ok(Dataset { handle })
    }

    /// Dataset `name`.
    fn open(&self, py: Python<'_>, name: &str) -> PyResult<Dataset> {
        let engine = self.inner.clone();
        let name = name.to_string();
        let handle = py
            .detach(|| runtime().block_on(engine.dataset(&name)))
            .map_err(to_py)?;
        Ok(Dataset { handle })
    }

    /// The names of the datasets under the engine's directory.
    fn dataset_names(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let engine = self.inner.clone();
        py.detach(|| runtime().block_on(engine.dataset_names()))
            .map_err(to_py)
    }

    /// The engine's counters as JSON text (`shoal.Engine.stats` parses it).
    fn stats_json(&self) -> PyResult<String> {
        let stats = self.inner.stats();
        let mut value =
            serde_json::to_value(&stats).map_err(|e| InternalError::new_err(e.to_string()))?;
        if let Some(map) = value.as_object_mut() {
            map.insert("mean_batch_size".into(), stats.mean_batch_size().into());
        }
        Ok(value.to_string())
    }

    /// Stops the engine: searches already queued are answered, later ones
    /// fail with `Overloaded` (shutting down).
    fn shutdown(&self, py: Python<'_>) {
        let engine = self.inner.clone();
        py.detach(|| runtime().block_on(engine.shutdown()));
    }
}

/// One served dataset.
#[pyclass(module = "shoal._shoal", frozen)]
struct Dataset {
    handle: DatasetHandle,
}

/// Stops one submitted search (the asyncio future it answers was
/// cancelled).
#[pyclass(module = "shoal._shoal", frozen)]
struct Cancel {
    token: shoal::CancelToken,
}

#[pymethods]
impl Cancel {
    /// Cancels the search: it leaves the coalescer (or its scan) and its
    /// answer is never delivered.
    fn cancel(&self) {
        self.token.cancel();
    }
}

/// Answers of asynchronous searches waiting for their event loop: search
/// tasks post them without the GIL and poke a socket the loop watches
/// (`loop.add_reader(mailbox.fileno(), ...)`); the loop's thread then takes
/// every answer ready in one call. One per event loop.
#[pyclass(module = "shoal._shoal", frozen)]
struct Mailbox {
    inner: Arc<MailboxInner>,
}

struct MailboxInner {
    answers: std::sync::Mutex<Vec<(u64, Result<RecordBatch, shoal::Error>)>>,
    poke: std::os::unix::net::UnixStream,
    watched: std::os::unix::net::UnixStream,
}

impl MailboxInner {
    fn post(&self, ticket: u64, answer: Result<RecordBatch, shoal::Error>) {
        let mut answers = self
            .answers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let first = answers.is_empty();
        answers.push((ticket, answer));
        drop(answers);
        if first {
            // A full socket already holds a poke: nothing is lost.
            let _ = std::io::Write::write(&mut &self.poke, &[1]);
        }
    }
}

#[pymethods]
impl Mailbox {
    /// A mailbox with its socket pair.
    #[new]
    fn new() -> PyResult<Mailbox> {
        let (poke, watched) = std::os::unix::net::UnixStream::pair()?;
        poke.set_nonblocking(true)?;
        watched.set_nonblocking(true)?;
        Ok(Mailbox {
            inner: Arc::new(MailboxInner {
                answers: std::sync::Mutex::new(Vec::new()),
                poke,
                watched,
            }),
        })
    }

    /// The descriptor the event loop watches for answers.
    fn fileno(&self) -> i32 {
        use std::os::fd::AsRawFd;
        self.inner.watched.as_raw_fd()
    }

    /// Every answer posted so far: `(groups, errors)`, where a group is
    /// `(record batch, [(ticket, offset, length)])` (the answers with one
    /// schema concatenated, so that pyarrow imports one batch per group,
    /// not one per answer) and an error is `(ticket, exception)`.
    #[allow(clippy::type_complexity)]
    fn take<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(
        Vec<(Bound<'py, PyAny>, Vec<(u64, usize, usize)>)>,
        Vec<(u64, Bound<'py, PyAny>)>,
    )> {
        let mut buf = [0u8; 64];
        while let Ok(n) = std::io::Read::read(&mut &self.inner.watched, &mut buf) {
            if n == 0 {
                break;
            }
        }
        let answers = std::mem::take(
            &mut *self
                .inner
                .answers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let mut groups: Vec<(Vec<RecordBatch>, Vec<(u64, usize, usize)>, usize)> = Vec::new();
        let mut errors = Vec::new();
        for (ticket, answer) in answers {
            match answer {
                Ok(batch) => {
                    let rows = batch.num_rows();
                    let group = match groups
                        .iter_mut()
                        .position(|g| g.0[0].schema() == batch.schema())
                    {
                        Some(at) => &mut groups[at],
                        None => {
                            groups.push((Vec::new(), Vec::new(), 0));
                            let last = groups.len() - 1;
                            &mut groups[last]
                        }
                    };
                    group.1.push((ticket, group.2, rows));
                    group.2 += rows;
                    group.0.push(batch);
                }
                Err(e) => errors.push((ticket, to_py(e).into_value(py).into_bound(py).into_any())),
            }
        }
        // Every answer taken is handed back, as rows or as an error: a
        // failure here must not leave a caller waiting.
        let mut out = Vec::with_capacity(groups.len());
        for (batches, tickets, _) in groups {
            let schema = batches[0].schema();
            let imported = arrow_select::concat::concat_batches(&schema, &batches)
                .map_err(|e| InternalError::new_err(e.to_string()))
                .and_then(|joined| joined.to_pyarrow(py));
            match imported {
                Ok(batch) => out.push((batch, tickets)),
                Err(e) => {
                    let error = e.into_value(py).into_bound(py).into_any();
                    for (ticket, _, _) in tickets {
                        errors.push((ticket, error.clone()));
                    }
                }
            }
        }
        Ok((out, errors))
    }
}

/// One search as `Dataset.submit` takes it: `(vector, k, filter,
/// postfilter, select, nprobes, refine_factor, column, version, exact,
/// timeout_ms, ef)`.
type Request<'py> = (
    Bound<'py, PyAny>,
    usize,
    Option<String>,
    bool,
    Option<Vec<String>>,
    Option<usize>,
    Option<usize>,
    Option<String>,
    Option<u64>,
    bool,
    Option<u64>,
    Option<usize>,
);

#[pymethods]
impl Dataset {
    /// The dataset's name.
    #[getter]
    fn name(&self) -> String {
        self.handle.name().to_string()
    }

    /// The latest version.
    #[getter]
    fn version(&self) -> u64 {
        self.handle.version()
    }

    /// Rows visible in the latest version.
    fn count_rows(&self) -> u64 {
        self.handle.latest().count_rows()
    }

    /// The dataset's Arrow schema (as stored: vectors are fixed-size
    /// lists of float32).
    #[getter]
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.handle
            .latest()
            .schema()
            .arrow_schema()
            .as_ref()
            .to_pyarrow(py)
    }

    /// The vector columns: `{name: (dim, metric)}`.
    fn vector_columns(&self) -> Vec<(String, usize, String)> {
        self.handle
            .latest()
            .schema()
            .columns
            .iter()
            .filter_map(|c| match c.ty {
                ColumnType::Vector { dim, metric } => {
                    Some((c.name.clone(), dim, metric.to_string()))
                }
                _ => None,
            })
            .collect()
    }

    /// Appends Arrow record batches as a new version; returns it.
    fn add(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<u64> {
        let batches = batches_of(data)?;
        let handle = self.handle.clone();
        let commit = py
            .detach(|| runtime().block_on(handle.append(batches)))
            .map_err(to_py)?;
        Ok(commit.version)
    }

    /// Deletes the rows matching `filter`; returns the version after it.
    fn delete(&self, py: Python<'_>, filter: &str) -> PyResult<u64> {
        let handle = self.handle.clone();
        let commit = py
            .detach(|| runtime().block_on(handle.delete(filter)))
            .map_err(to_py)?;
        Ok(commit.version)
    }

    /// Merges the small unindexed fragments at the end of the dataset;
    /// returns `(version, rows rewritten)`.
    fn compact(&self, py: Python<'_>) -> PyResult<(u64, u64)> {
        let handle = self.handle.clone();
        let commit = py
            .detach(|| runtime().block_on(handle.compact()))
            .map_err(to_py)?;
        Ok((commit.version, commit.rows))
    }

    /// Fills the disk cache with what searches of `column` read (every
    /// indexed column when `None`; `partitions` of each IVF segment, all
    /// when `None`); returns `(partitions, fragments, gets, bytes)`.
    #[pyo3(signature = (column=None, partitions=None))]
    fn prewarm(
        &self,
        py: Python<'_>,
        column: Option<String>,
        partitions: Option<Vec<u32>>,
    ) -> PyResult<(u64, u64, u64, u64)> {
        let ds = self.handle.latest();
        let which = match partitions {
            Some(list) => shoal::PrewarmPartitions::Only(list),
            None => shoal::PrewarmPartitions::All,
        };
        let r = py
            .detach(|| ds.prewarm(column.as_deref(), &which))
            .map_err(to_py)?;
        Ok((r.partitions, r.fragments, r.gets, r.bytes))
    }

    /// How many fragment files the latest version has.
    fn fragment_count(&self) -> usize {
        self.handle.latest().manifest().fragments.len()
    }

    /// Builds an index; returns the version it committed.
    #[pyo3(signature = (index_type, partitions = None, sub_vectors = None, column = None, seed = None, bits = None, m = None, ef_construction = None))]
    #[allow(clippy::too_many_arguments)]
    fn create_index(
        &self,
        py: Python<'_>,
        index_type: &str,
        partitions: Option<usize>,
        sub_vectors: Option<usize>,
        column: Option<String>,
        seed: Option<u64>,
        bits: Option<usize>,
        m: Option<usize>,
        ef_construction: Option<usize>,
    ) -> PyResult<u64> {
        if bits.is_some() && index_type != "ivf_rq" {
            return Err(invalid("bits only applies to ivf_rq"));
        }
        let graph = index_type == "hnsw";
        if !graph && (m.is_some() || ef_construction.is_some()) {
            return Err(invalid("m and ef_construction only apply to hnsw"));
        }
        if graph && (partitions.is_some() || sub_vectors.is_some()) {
            return Err(invalid(
                "hnsw takes m and ef_construction; partitions and sub_vectors apply to IVF indexes",
            ));
        }
        let kind = match (index_type, sub_vectors) {
            ("hnsw", _) => IndexKind::Hnsw {
                m: m.unwrap_or(IndexKind::DEFAULT_HNSW_M),
                ef_construction: ef_construction.unwrap_or(IndexKind::DEFAULT_EF_CONSTRUCTION),
            },
            ("ivf_flat", None) => IndexKind::IvfFlat,
            ("ivf_rq", None) => IndexKind::IvfRq {
                bits: bits.unwrap_or(IndexKind::DEFAULT_RQ_BITS),
            },
            ("ivf_sq", None) => IndexKind::IvfSq,
            ("ivf_pq", Some(m)) => IndexKind::IvfPq { sub_vectors: m },
            ("ivf_pq", None) => return Err(invalid("ivf_pq needs sub_vectors")),
            ("ivf_flat" | "ivf_sq" | "ivf_rq", Some(_)) => {
                return Err(invalid("sub_vectors only applies to ivf_pq"))
            }
            (other, _) => {
                return Err(invalid(format!(
                    "unknown index type '{other}' (ivf_flat, ivf_pq, ivf_sq, ivf_rq or hnsw)"
                )))
            }
        };
        let partitions = match (graph, partitions) {
            (true, _) => 1,
            (false, Some(p)) => p,
            (false, None) => return Err(invalid(format!("{index_type} needs partitions"))),
        };
        let mut params = IndexParams::new(kind, partitions);
        if let Some(seed) = seed {
            params.seed = seed;
        }
        let handle = self.handle.clone();
        let commit = py
            .detach(|| runtime().block_on(handle.create_index(column.as_deref(), params)))
            .map_err(to_py)?;
        Ok(commit.version)
    }

    /// One vector's nearest rows, coalesced with concurrent searches (the
    /// GIL released while it waits). Returns a `pyarrow.RecordBatch`.
    #[pyo3(signature = (vector, k, filter = None, postfilter = false, select = None, nprobes = None, refine_factor = None, column = None, version = None, exact = false, timeout_ms = None, ef = None))]
    #[allow(clippy::too_many_arguments)]
    fn search<'py>(
        &self,
        py: Python<'py>,
        vector: &Bound<'py, PyAny>,
        k: usize,
        filter: Option<String>,
        postfilter: bool,
        select: Option<Vec<String>>,
        nprobes: Option<usize>,
        refine_factor: Option<usize>,
        column: Option<String>,
        version: Option<u64>,
        exact: bool,
        timeout_ms: Option<u64>,
        ef: Option<usize>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let options = Options {
            filter,
            postfilter,
            select: select.unwrap_or_default(),
            nprobes,
            ef,
            refine_factor,
            column,
            version,
            exact,
            timeout_ms,
        };
        let query = options.query(vector_of(vector)?, k);
        let handle = self.handle.clone();
        let batch = py
            .detach(|| {
                let response = runtime().block_on(handle.search(&query))?;
                response_batch(response, &handle)
            })
            .map_err(to_py)?;
        batch.to_pyarrow(py)
    }

    /// Submits searches made in one turn of an asyncio loop, each to the
    /// engine's coalescer on its own (they arrive together), and returns
    /// one `Cancel` per search. Search `i`'s answer goes into `mailbox`
    /// under ticket `first_ticket + i`; no GIL is taken to deliver it.
    fn submit(
        &self,
        requests: Vec<Request<'_>>,
        mailbox: &Mailbox,
        first_ticket: u64,
    ) -> PyResult<Vec<Cancel>> {
        let mut queries = Vec::with_capacity(requests.len());
        for (
            vector,
            k,
            filter,
            postfilter,
            select,
            nprobes,
            refine_factor,
            column,
            version,
            exact,
            timeout_ms,
            ef,
        ) in requests
        {
            let options = Options {
                filter,
                postfilter,
                select: select.unwrap_or_default(),
                nprobes,
                ef,
                refine_factor,
                column,
                version,
                exact,
                timeout_ms,
            };
            let token = shoal::CancelToken::new();
            queries.push(options.query(vector_of(&vector)?, k).cancel_token(token));
        }
        let cancels = queries
            .iter()
            .map(|q| Cancel {
                token: q.cancel.clone().unwrap_or_default(),
            })
            .collect();
        for (i, query) in queries.into_iter().enumerate() {
            let handle = self.handle.clone();
            let inbox = Arc::clone(&mailbox.inner);
            runtime().spawn(async move {
                // A panic in the search still answers its caller.
                let answer = tokio::spawn({
                    let handle = handle.clone();
                    async move {
                        let response = handle.search(&query).await?;
                        response_batch(response, &handle)
                    }
                })
                .await
                .unwrap_or_else(|e| {
                    Err(shoal::Error::Internal(format!("a search task failed: {e}")))
                });
                inbox.post(first_ticket + i as u64, answer);
            });
        }
        Ok(cancels)
    }

    /// Many vectors (a 2-D float32 matrix) in one shared scan: one batch
    /// of rows with a `query_index` column. With `explain`, also the
    /// profile as JSON text.
    #[pyo3(signature = (matrix, k, filter = None, postfilter = false, select = None, nprobes = None, refine_factor = None, column = None, version = None, exact = false, explain = false, ef = None))]
    #[allow(clippy::too_many_arguments)]
    fn search_batch<'py>(
        &self,
        py: Python<'py>,
        matrix: &Bound<'py, PyAny>,
        k: usize,
        filter: Option<String>,
        postfilter: bool,
        select: Option<Vec<String>>,
        nprobes: Option<usize>,
        refine_factor: Option<usize>,
        column: Option<String>,
        version: Option<u64>,
        exact: bool,
        explain: bool,
        ef: Option<usize>,
    ) -> PyResult<(Bound<'py, PyAny>, Option<String>)> {
        let options = Options {
            filter,
            postfilter,
            select: select.unwrap_or_default(),
            nprobes,
            ef,
            refine_factor,
            column,
            version,
            exact,
            timeout_ms: None,
        };
        let batch = options.batch(matrix_of(matrix)?, k);
        let handle = self.handle.clone();
        let (rows, profile) = py
            .detach(|| {
                let (results, profile) = runtime().block_on(handle.explain(&batch))?;
                let rows = results_batch(&results, handle.latest().schema(), true)?;
                let profile = if explain {
                    serde_json::to_string(&profile).ok()
                } else {
                    None
                };
                Ok::<_, shoal::Error>((rows, profile))
            })
            .map_err(to_py)?;
        Ok((rows.to_pyarrow(py)?, profile))
    }
}

/// The native module.
#[pymodule]
fn _shoal(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Engine>()?;
    m.add_class::<Dataset>()?;
    m.add_class::<Cancel>()?;
    m.add_class::<Mailbox>()?;
    for (name, ty) in [
        ("ShoalError", py.get_type::<ShoalError>()),
        ("InvalidInput", py.get_type::<InvalidInput>()),
        ("NotFound", py.get_type::<NotFound>()),
        ("Conflict", py.get_type::<Conflict>()),
        ("Overloaded", py.get_type::<Overloaded>()),
        ("Cancelled", py.get_type::<Cancelled>()),
        ("DeadlineExceeded", py.get_type::<DeadlineExceeded>()),
        ("StorageUnavailable", py.get_type::<StorageUnavailable>()),
        ("InternalError", py.get_type::<InternalError>()),
    ] {
        m.add(name, ty)?;
    }
    Ok(())
}
