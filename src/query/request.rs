//! Search requests and their validation.
//!
//! A request is plain data composed of two parts: what each query chooses
//! for itself ([`PerQueryParams`]: filter, filter mode, projection,
//! nprobes, refine factor) and what a whole scan shares ([`SharedParams`]:
//! version, column, metric, mode, index use). Builder methods on [`Query`]
//! and [`BatchQuery`] set either. A request is checked completely before
//! any work starts: a bad query gets an error of its own and never joins a
//! batch.

use crate::cancel::CancelToken;
use crate::config::Limits;
use crate::error::{Error, Result};
use crate::kernel::metric::VectorProblem;
use crate::kernel::Metric;
use crate::kernel::PreparedQueries;
use crate::query::filter::Filter;
use crate::storage::schema::Schema;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// When a filter is applied relative to the vector search.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FilterMode {
    /// Only rows matching the filter are candidates (always k rows if k match).
    #[default]
    Prefilter,
    /// Search first, then drop non-matching rows (may return fewer than k).
    Postfilter,
}

/// How a search is executed: asked for in [`SharedParams::mode`], and
/// reported (never `Auto`) in a [`crate::Profile`] and a batch's info.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchMode {
    /// The shared scan when the column has an index (and `use_index`),
    /// falling back as the planner says; exact without an index.
    #[default]
    Auto,
    /// Brute force over every visible row, shared over the batch.
    Exact,
    /// The single-query ANN path, once per query of the batch.
    PerQuery,
    /// The shared IVF partition scan.
    #[serde(rename = "shared_scan", alias = "shared")]
    Shared,
}

impl SearchMode {
    /// The mode's name as the HTTP API and profiles write it
    /// (`auto`, `exact`, `per_query`, `shared_scan`).
    pub fn as_str(self) -> &'static str {
        match self {
            SearchMode::Auto => "auto",
            SearchMode::Exact => "exact",
            SearchMode::PerQuery => "per_query",
            SearchMode::Shared => "shared_scan",
        }
    }
}

impl std::fmt::Display for SearchMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How many IVF partitions a query probes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Nprobes {
    /// Exactly this many (or every partition, if fewer).
    Fixed(usize),
    /// Partitions in centroid order: at least `min`; after that, stop as
    /// soon as the probed partitions hold k + offset rows that pass the
    /// prefilter; never more than `max`. Counted per index segment.
    Adaptive {
        /// Partitions always probed.
        min: usize,
        /// Partitions never exceeded.
        max: usize,
    },
}

impl Default for Nprobes {
    /// 20 partitions per index segment.
    fn default() -> Self {
        Nprobes::Fixed(20)
    }
}

impl Nprobes {
    fn validate(&self) -> Result<()> {
        match *self {
            Nprobes::Fixed(0) => Err(Error::InvalidArgument("nprobes must be at least 1".into())),
            Nprobes::Adaptive { min, max } if min == 0 || min > max => Err(Error::InvalidArgument(
                format!("adaptive nprobes needs 1 <= min <= max, got min {min}, max {max}"),
            )),
            _ => Ok(()),
        }
    }
}

/// What one query chooses for itself, apart from its vector, k and
/// offset: filter, filter mode, columns returned, partitions probed and
/// refine factor. Queries with different choices still share one scan;
/// only [`SharedParams`] must be equal.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PerQueryParams {
    /// SQL filter over scalar columns.
    #[serde(default)]
    pub filter: Option<String>,
    /// Pre- or post-filtering.
    #[serde(default)]
    pub filter_mode: FilterMode,
    /// Scalar (or vector) columns to return with each row.
    #[serde(default)]
    pub projection: Vec<String>,
    /// Partitions to probe (IVF indexes); 20 when not given.
    #[serde(default)]
    pub nprobes: Option<Nprobes>,
    /// Candidates a graph walk keeps (`hnsw` indexes); at least k, 64
    /// when not given.
    #[serde(default)]
    pub ef: Option<usize>,
    /// Take (k + offset) × r candidates from the index and rerank them
    /// with the exact float32 vectors.
    #[serde(default)]
    pub refine_factor: Option<usize>,
}

/// What every query of one scan must share: the version, the column and
/// metric (one partition read serves them all), the execution mode and
/// whether the index and the unindexed fragments are used. With the
/// dataset, the engine's grouping key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SharedParams {
    /// Version searched; the latest when `None`.
    #[serde(default)]
    pub version: Option<u64>,
    /// Vector column; may be left out when there is only one.
    #[serde(default)]
    pub column: Option<String>,
    /// Metric; the column's when `None`.
    #[serde(default)]
    pub metric: Option<Metric>,
    /// Execution mode.
    #[serde(default)]
    pub mode: SearchMode,
    /// Use the column's index when it has one (default true).
    #[serde(default = "yes")]
    pub use_index: bool,
    /// Skip the exact scan of fragments no index segment covers yet.
    #[serde(default)]
    pub fast_search: bool,
    /// Search only these fragments of the snapshot, by id: a *split*
    /// (see [`Dataset::splits`](crate::Dataset::splits)). A query then
    /// returns its best `k + offset` rows among them, the offset not
    /// applied, so that results of disjoint splits merged per query
    /// ([`merge_split_hits`](crate::merge_split_hits)) equal the whole
    /// snapshot's search, ties included. Refused with options whose
    /// answer depends on rows outside the split: postfilter, adaptive
    /// nprobes, refine.
    #[serde(default)]
    pub split: Option<Vec<u32>>,
}

fn yes() -> bool {
    true
}

impl Default for SharedParams {
    fn default() -> Self {
        SharedParams {
            version: None,
            column: None,
            metric: None,
            mode: SearchMode::Auto,
            use_index: true,
            fast_search: false,
            split: None,
        }
    }
}

/// Builder methods for the fields of [`PerQueryParams`].
macro_rules! own_builders {
    ($t:ty, $self_:ident => $apply:expr) => {
        impl $t {
            /// Only rows matching this SQL filter (a prefilter by default).
            pub fn filter(mut self, sql: impl Into<String>) -> Self {
                let sql = sql.into();
                let $self_ = &mut self;
                $apply(&mut |p: &mut PerQueryParams| p.filter = Some(sql.clone()));
                self
            }

            /// Applies the filter after the search (may return fewer than
            /// k rows).
            pub fn postfilter(mut self) -> Self {
                let $self_ = &mut self;
                $apply(&mut |p: &mut PerQueryParams| p.filter_mode = FilterMode::Postfilter);
                self
            }

            /// Scalar (or vector) columns to return with each row.
            pub fn select<S: Into<String>>(mut self, columns: impl IntoIterator<Item = S>) -> Self {
                let columns: Vec<String> = columns.into_iter().map(Into::into).collect();
                let $self_ = &mut self;
                $apply(&mut |p: &mut PerQueryParams| p.projection = columns.clone());
                self
            }

            /// Probes this many partitions per index segment.
            pub fn nprobes(mut self, n: usize) -> Self {
                let $self_ = &mut self;
                $apply(&mut |p: &mut PerQueryParams| p.nprobes = Some(Nprobes::Fixed(n)));
                self
            }

            /// Probes at least `min` and at most `max` partitions, stopping
            /// once enough matching rows were seen (see [`Nprobes::Adaptive`]).
            pub fn adaptive_nprobes(mut self, min: usize, max: usize) -> Self {
                let $self_ = &mut self;
                $apply(&mut |p: &mut PerQueryParams| {
                    p.nprobes = Some(Nprobes::Adaptive { min, max })
                });
                self
            }

            /// Keeps `ef` candidates in a graph walk (an `hnsw` index; at
            /// least k): higher finds more of the true nearest rows, slower.
            pub fn ef(mut self, ef: usize) -> Self {
                let $self_ = &mut self;
                $apply(&mut |p: &mut PerQueryParams| p.ef = Some(ef));
                self
            }

            /// Reranks `(k + offset) × factor` index candidates with exact
            /// vectors.
            pub fn refine_factor(mut self, factor: usize) -> Self {
                let $self_ = &mut self;
                $apply(&mut |p: &mut PerQueryParams| p.refine_factor = Some(factor));
                self
            }
        }
    };
}

/// Builder methods for the fields of [`SharedParams`].
macro_rules! shared_builders {
    ($t:ty) => {
        impl $t {
            /// The vector column to search (needed when there are several).
            pub fn column(mut self, name: impl Into<String>) -> Self {
                self.shared.column = Some(name.into());
                self
            }

            /// Searches this version instead of the latest.
            pub fn version(mut self, version: u64) -> Self {
                self.shared.version = Some(version);
                self
            }

            /// Uses this metric instead of the column's.
            pub fn metric(mut self, metric: Metric) -> Self {
                self.shared.metric = Some(metric);
                self
            }

            /// Forces an execution mode (exact, per-query, shared).
            pub fn mode(mut self, mode: SearchMode) -> Self {
                self.shared.mode = mode;
                self
            }

            /// Whether to use the column's index when it has one (default
            /// true; false searches every row exactly).
            pub fn use_index(mut self, use_index: bool) -> Self {
                self.shared.use_index = use_index;
                self
            }

            /// Skips the exact scan of fragments no index covers yet.
            pub fn fast_search(mut self) -> Self {
                self.shared.fast_search = true;
                self
            }

            /// Searches only the fragments `ids` (a split, see
            /// [`SharedParams::split`]).
            pub fn split(mut self, ids: impl IntoIterator<Item = u32>) -> Self {
                self.shared.split = Some(ids.into_iter().collect());
                self
            }

            /// Lets `token` stop the search: once cancelled, the scan stops
            /// within one partition (or exact-scan chunk) and the search
            /// fails with [`Error::Cancelled`], holding nothing afterwards.
            pub fn cancel_token(mut self, token: CancelToken) -> Self {
                self.cancel = Some(token);
                self
            }
        }
    };
}

own_builders!(PerQueryParams, p => |f: &mut dyn FnMut(&mut PerQueryParams)| f(p));
own_builders!(Query, q => |f: &mut dyn FnMut(&mut PerQueryParams)| f(&mut q.own));
own_builders!(BatchQuery, b => |f: &mut dyn FnMut(&mut PerQueryParams)| b.own.for_each_mut(f));
shared_builders!(Query);
shared_builders!(BatchQuery);

/// One vector's nearest-neighbour search.
#[derive(Clone, Debug, PartialEq)]
pub struct Query {
    /// The query vector.
    pub vector: Vec<f32>,
    /// Rows wanted.
    pub k: usize,
    /// Best rows to skip before the k returned.
    pub offset: usize,
    /// Its own filter, projection and probing.
    pub own: PerQueryParams,
    /// What it must share with the queries it is batched with.
    pub shared: SharedParams,
    /// A token that may stop the search.
    pub cancel: Option<CancelToken>,
    /// In the engine: fail with [`Error::DeadlineExceeded`] when the scan
    /// has not started this long after the search was submitted (a direct
    /// [`crate::Dataset::search`] starts at once). `None`: the engine's
    /// `coalescer.default_deadline_ms`.
    pub timeout: Option<Duration>,
}

impl Query {
    /// A query for the `k` nearest rows to `vector`, with defaults elsewhere.
    pub fn new(vector: Vec<f32>, k: usize) -> Self {
        Query {
            vector,
            k,
            offset: 0,
            own: PerQueryParams::default(),
            shared: SharedParams::default(),
            cancel: None,
            timeout: None,
        }
    }

    /// Skips the `offset` best rows before the k returned.
    pub fn offset(mut self, offset: usize) -> Self {
        self.offset = offset;
        self
    }

    /// See [`Query::timeout`] (the field).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// The equivalent batch of one.
    pub fn into_batch(self) -> BatchQuery {
        BatchQuery {
            vectors: vec![self.vector],
            k: PerQuery::All(self.k),
            offset: PerQuery::All(self.offset),
            own: PerQuery::All(self.own),
            shared: self.shared,
            cancel: self.cancel,
        }
    }
}

/// A value given once for the whole batch or once per query.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PerQuery<T> {
    /// The same value for every query.
    All(T),
    /// One value per query, in query order.
    Each(Vec<T>),
}

impl<T> PerQuery<T> {
    /// The value for query `i` (`None` past the end of a per-query list,
    /// which validation rejects).
    pub fn get(&self, i: usize) -> Option<&T> {
        match self {
            PerQuery::All(v) => Some(v),
            PerQuery::Each(vs) => vs.get(i),
        }
    }

    /// Applies `f` to the single value or to every per-query value.
    pub fn for_each_mut(&mut self, f: &mut dyn FnMut(&mut T)) {
        match self {
            PerQuery::All(v) => f(v),
            PerQuery::Each(vs) => vs.iter_mut().for_each(f),
        }
    }

    fn check_len(&self, what: &str, unit: &str, n: usize) -> Result<()> {
        match self {
            PerQuery::Each(vs) if vs.len() != n => Err(Error::InvalidArgument(format!(
                "{what} has {} {unit} for {n} queries",
                vs.len()
            ))),
            _ => Ok(()),
        }
    }
}

/// Many independent query vectors searched in one scan of one version,
/// column and metric; each has its own k, offset, filter, filter mode,
/// projection, nprobes and refine factor (given once for all or per
/// query).
#[derive(Clone, Debug, PartialEq)]
pub struct BatchQuery {
    /// The query vectors (an n × dim matrix, one row per query).
    pub vectors: Vec<Vec<f32>>,
    /// Rows wanted, for all or per query.
    pub k: PerQuery<usize>,
    /// Rows skipped, for all or per query.
    pub offset: PerQuery<usize>,
    /// Filter, projection and probing, for all or per query.
    pub own: PerQuery<PerQueryParams>,
    /// What the whole batch shares.
    pub shared: SharedParams,
    /// A token that may stop the search.
    pub cancel: Option<CancelToken>,
}

impl BatchQuery {
    /// A batch asking for the `k` nearest rows to each vector.
    pub fn new(vectors: Vec<Vec<f32>>, k: usize) -> Self {
        BatchQuery {
            vectors,
            k: PerQuery::All(k),
            offset: PerQuery::All(0),
            own: PerQuery::All(PerQueryParams::default()),
            shared: SharedParams::default(),
            cancel: None,
        }
    }

    /// One k per query, in query order.
    pub fn ks(mut self, ks: Vec<usize>) -> Self {
        self.k = PerQuery::Each(ks);
        self
    }

    /// Skips the `offset` best rows of every query.
    pub fn offset(mut self, offset: usize) -> Self {
        self.offset = PerQuery::All(offset);
        self
    }

    /// One offset per query, in query order.
    pub fn offsets(mut self, offsets: Vec<usize>) -> Self {
        self.offset = PerQuery::Each(offsets);
        self
    }

    /// Each query's own filter, filter mode, projection, nprobes and
    /// refine factor, in query order (one entry per query). Replaces what
    /// earlier builder calls set for all queries; later ones (`.filter`,
    /// `.nprobes`, ...) apply to every entry.
    pub fn each(mut self, each: Vec<PerQueryParams>) -> Self {
        self.own = PerQuery::Each(each);
        self
    }

    /// Query `i`'s own parameters.
    pub fn params_of(&self, i: usize) -> PerQueryParams {
        self.own.get(i).cloned().unwrap_or_default()
    }

    /// Query `i` alone, as a [`Query`].
    pub fn query(&self, i: usize) -> Option<Query> {
        Some(Query {
            vector: self.vectors.get(i)?.clone(),
            k: *self.k.get(i)?,
            offset: *self.offset.get(i)?,
            own: self.own.get(i)?.clone(),
            shared: self.shared.clone(),
            cancel: self.cancel.clone(),
            timeout: None,
        })
    }
}

/// Checks a split search's queries and turns each one's `k` and `offset`
/// into `k + offset` rows with no offset (the merge pages); returns the
/// split's fragment ids, sorted and distinct.
fn scope_to_split(ids: &[u32], specs: &mut [QuerySpec]) -> Result<Vec<u32>> {
    if ids.is_empty() {
        return Err(Error::InvalidArgument(
            "a split names at least one fragment".into(),
        ));
    }
    for (qi, spec) in specs.iter_mut().enumerate() {
        let refused = if spec.filter_mode == FilterMode::Postfilter {
            Some("postfilter")
        } else if matches!(spec.nprobes, Nprobes::Adaptive { .. }) {
            Some("adaptive nprobes")
        } else if spec.refine_factor.is_some() {
            Some("refine")
        } else {
            None
        };
        if let Some(option) = refused {
            return Err(Error::InvalidArgument(format!(
                "query {qi}: {option} cannot be used in a split search (its rows depend on \
                 rows outside the split, so merged splits would differ from the whole search)"
            )));
        }
        spec.k += spec.offset;
        spec.offset = 0;
    }
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

/// The largest `ef` a query may ask for (or the limit on k, when higher).
pub const MAX_EF: usize = 4096;

/// One validated query's own choices.
#[derive(Clone, Debug)]
pub struct QuerySpec {
    /// Rows wanted.
    pub k: usize,
    /// Best rows skipped.
    pub offset: usize,
    /// Its filter: an index into [`ValidatedBatch::filters`].
    pub filter: Option<usize>,
    /// Pre- or post-filtering.
    pub filter_mode: FilterMode,
    /// Partitions to probe.
    pub nprobes: Nprobes,
    /// Whether the query named its nprobes (refused on a graph index).
    pub nprobes_given: bool,
    /// Candidates a graph walk keeps, when the query named it.
    pub ef: Option<usize>,
    /// Refine factor.
    pub refine_factor: Option<usize>,
    /// Projected columns.
    pub projection: Vec<String>,
}

/// A batch that passed every check, with queries prepared for the kernel.
#[derive(Clone, Debug)]
pub struct ValidatedBatch {
    /// The vector column searched.
    pub column: String,
    /// Its dimension.
    pub dim: usize,
    /// The metric in force.
    pub metric: Metric,
    /// Queries normalised (cosine) and with norms.
    pub queries: PreparedQueries,
    /// Each query's own k, offset, filter, probing and projection.
    pub specs: Vec<QuerySpec>,
    /// The batch's distinct filters (by normal form), compiled once.
    pub filters: Vec<Filter>,
    /// Execution mode asked for.
    pub mode: SearchMode,
    /// Use the column's index when it has one.
    pub use_index: bool,
    /// Skip the exact scan of fragments no index covers yet.
    pub fast_search: bool,
    /// The fragments searched (sorted, distinct), when the search is
    /// scoped to a split; each spec's `k` is then its `k + offset` and
    /// its offset zero.
    pub split: Option<Vec<u32>>,
}

impl ValidatedBatch {
    /// Checks `batch` against the schema and limits. Every problem a user
    /// can cause is reported here, naming the query and position.
    pub fn new(batch: &BatchQuery, schema: &Schema, limits: &Limits) -> Result<ValidatedBatch> {
        let n = batch.vectors.len();
        if n == 0 {
            return Err(Error::InvalidArgument(
                "the batch has no query vectors".into(),
            ));
        }
        if n > limits.max_batch_size {
            return Err(Error::LimitExceeded {
                what: "batch size",
                value: n,
                max: limits.max_batch_size,
            });
        }
        batch.k.check_len("k", "values", n)?;
        batch.offset.check_len("offset", "values", n)?;
        batch.own.check_len("each", "entries", n)?;
        let shared = &batch.shared;
        let (column, dim, default_metric) = schema.vector_column(shared.column.as_deref())?;
        let metric = shared.metric.unwrap_or(default_metric);
        let per_query = matches!(batch.own, PerQuery::Each(_)) && n > 1;
        let mut filters: Vec<Filter> = Vec::new();
        let mut specs = Vec::with_capacity(n);
        for qi in 0..n {
            let (k, offset) = (batch.k.get(qi), batch.offset.get(qi));
            let (Some(&k), Some(&offset)) = (k, offset) else {
                return Err(Error::Internal("per-query lengths checked above".into()));
            };
            if k == 0 {
                return Err(Error::InvalidArgument("k must be at least 1".into()));
            }
            if k > limits.max_k {
                return Err(Error::LimitExceeded {
                    what: "k",
                    value: k,
                    max: limits.max_k,
                });
            }
            if offset > limits.max_offset {
                return Err(Error::LimitExceeded {
                    what: "offset",
                    value: offset,
                    max: limits.max_offset,
                });
            }
            let own = batch.params_of(qi);
            // A query's own bad option or filter names the query.
            let in_query = |e: Error| -> Error {
                if !per_query {
                    return e;
                }
                match e {
                    Error::Filter { message } => Error::Filter {
                        message: format!("query {qi}: {message}"),
                    },
                    Error::InvalidArgument(m) => Error::InvalidArgument(format!("query {qi}: {m}")),
                    other => other,
                }
            };
            let nprobes = own.nprobes.unwrap_or_default();
            nprobes.validate().map_err(in_query)?;
            if let Some(ef) = own.ef {
                let max_ef = limits.max_k.max(MAX_EF);
                if ef < k {
                    return Err(in_query(Error::InvalidArgument(format!(
                        "ef ({ef}) must be at least k ({k}): a walk returns at most ef rows"
                    ))));
                }
                if ef > max_ef {
                    return Err(Error::LimitExceeded {
                        what: "ef",
                        value: ef,
                        max: max_ef,
                    });
                }
            }
            if own.refine_factor == Some(0) {
                return Err(in_query(Error::InvalidArgument(
                    "refine factor must be at least 1".into(),
                )));
            }
            if let Some(r) = own.refine_factor {
                if r > limits.max_refine_factor {
                    return Err(Error::LimitExceeded {
                        what: "refine factor",
                        value: r,
                        max: limits.max_refine_factor,
                    });
                }
            }
            let filter = match &own.filter {
                Some(sql) => {
                    let parsed = Filter::parse(sql, schema).map_err(in_query)?;
                    Some(
                        match filters
                            .iter()
                            .position(|f| f.normalized() == parsed.normalized())
                        {
                            Some(i) => i,
                            None => {
                                filters.push(parsed);
                                filters.len() - 1
                            }
                        },
                    )
                }
                None => None,
            };
            for name in &own.projection {
                schema.column(name)?;
            }
            specs.push(QuerySpec {
                k,
                offset,
                filter,
                filter_mode: own.filter_mode,
                nprobes,
                nprobes_given: own.nprobes.is_some(),
                ef: own.ef,
                refine_factor: own.refine_factor,
                projection: own.projection,
            });
        }
        let mut flat = Vec::with_capacity(n * dim);
        for (qi, v) in batch.vectors.iter().enumerate() {
            let what = if n == 1 {
                "query vector".to_string()
            } else {
                format!("query vector {qi}")
            };
            if v.is_empty() {
                return Err(Error::InvalidArgument(format!("{what} is empty")));
            }
            if v.len() != dim {
                return Err(Error::DimensionMismatch {
                    column: column.to_string(),
                    expected: dim,
                    got: v.len(),
                });
            }
            match metric.vector_problem(v) {
                None => {}
                Some(VectorProblem::NonFinite { position }) => {
                    return Err(Error::NonFinite { what, position })
                }
                Some(problem) => return Err(Error::InvalidArgument(format!("{what} {problem}"))),
            }
            flat.extend_from_slice(v);
        }
        let split = match &shared.split {
            None => None,
            Some(ids) => Some(scope_to_split(ids, &mut specs)?),
        };
        Ok(ValidatedBatch {
            column: column.to_string(),
            dim,
            metric,
            queries: PreparedQueries::new(metric, dim, &flat),
            specs,
            filters,
            mode: shared.mode,
            use_index: shared.use_index,
            fast_search: shared.fast_search,
            split,
        })
    }

    /// Does the batch search fragment `id` (in its split, or no split)?
    pub fn searches_fragment(&self, id: u32) -> bool {
        self.split
            .as_ref()
            .is_none_or(|s| s.binary_search(&id).is_ok())
    }

    /// Number of queries.
    pub fn len(&self) -> usize {
        self.specs.len()
    }

    /// True for an empty batch (never, once validated).
    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }

    /// Heap capacity of query `i`: its k plus its offset.
    pub fn depth(&self, i: usize) -> usize {
        self.specs[i].k + self.specs[i].offset
    }

    /// Candidates query `i` takes from the index: its depth, times its
    /// refine factor when it has one.
    pub fn index_depth(&self, i: usize) -> usize {
        self.depth(i)
            .saturating_mul(self.specs[i].refine_factor.unwrap_or(1))
    }

    /// The slot (in [`ValidatedBatch::filters`]) of query `i`'s
    /// prefilter: the filter that decides which rows are its candidates.
    pub fn prefilter(&self, i: usize) -> Option<usize> {
        let spec = &self.specs[i];
        match spec.filter_mode {
            FilterMode::Prefilter => spec.filter,
            FilterMode::Postfilter => None,
        }
    }

    /// The distinct prefilters, as slots of [`ValidatedBatch::filters`]
    /// (`None` for queries without one), in order of first use.
    pub fn distinct_prefilters(&self) -> Vec<Option<usize>> {
        let mut out = Vec::new();
        for i in 0..self.len() {
            let f = self.prefilter(i);
            if !out.contains(&f) {
                out.push(f);
            }
        }
        out
    }

    /// The same batch restricted to the queries `ids`, in that order.
    pub fn subset(&self, ids: &[usize]) -> ValidatedBatch {
        let queries = PreparedQueries {
            dim: self.dim,
            data: ids
                .iter()
                .flat_map(|&i| self.queries.row(i).iter().copied())
                .collect(),
            norms_sq: ids.iter().map(|&i| self.queries.norms_sq[i]).collect(),
        };
        ValidatedBatch {
            column: self.column.clone(),
            dim: self.dim,
            metric: self.metric,
            queries,
            specs: ids.iter().map(|&i| self.specs[i].clone()).collect(),
            filters: self.filters.clone(),
            mode: self.mode,
            use_index: self.use_index,
            fast_search: self.fast_search,
            split: self.split.clone(),
        }
    }
}
