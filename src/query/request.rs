//! Search requests and their validation.
//!
//! A request is checked completely before any work starts: a bad query gets
//! an error of its own and never joins a batch.

use crate::config::Limits;
use crate::error::{Error, Result};
use crate::kernel::metric::VectorProblem;
use crate::kernel::Metric;
use crate::kernel::PreparedQueries;
use crate::query::filter::Filter;
use crate::storage::schema::Schema;
use serde::{Deserialize, Serialize};

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

/// How a search is executed.
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
    Shared,
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

/// Index-search options. `use_index` and `fast_search` are shared by a
/// scan; `nprobes` and `refine_factor` are per query.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SearchOptions {
    /// Use the column's index when it has one.
    pub use_index: bool,
    /// Partitions to probe.
    pub nprobes: Nprobes,
    /// Take (k + offset) × r candidates from the index and rerank them
    /// with the exact float32 vectors.
    pub refine_factor: Option<usize>,
    /// Skip the exact scan of fragments no index segment covers yet.
    pub fast_search: bool,
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            use_index: true,
            nprobes: Nprobes::Fixed(20),
            refine_factor: None,
            fast_search: false,
        }
    }
}

impl SearchOptions {
    /// Checks the option values.
    pub fn validate(&self) -> Result<()> {
        match self.nprobes {
            Nprobes::Fixed(0) => {
                return Err(Error::InvalidArgument("nprobes must be at least 1".into()))
            }
            Nprobes::Adaptive { min, max } if min == 0 || min > max => {
                return Err(Error::InvalidArgument(format!(
                    "adaptive nprobes needs 1 <= min <= max, got min {min}, max {max}"
                )))
            }
            _ => {}
        }
        if self.refine_factor == Some(0) {
            return Err(Error::InvalidArgument(
                "refine factor must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// A search's parameters: column, filter, projection, version, metric,
/// mode and index options — everything but the vectors, k and offset. Of
/// these, only [`SharedParams`] (version, column, metric, mode, index use)
/// must be equal for two searches to share a scan; the filter, filter
/// mode, projection, nprobes and refine factor are each query's own
/// ([`PerQueryParams`]). [`Query`] and [`BatchQuery`] dereference to it, so
/// `q.filter` or `b.options.nprobes` read and write these fields directly.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SearchParams {
    /// Vector column to search; may be left out when there is only one.
    pub column: Option<String>,
    /// SQL filter over scalar columns.
    pub filter: Option<String>,
    /// Pre- or post-filtering.
    pub filter_mode: FilterMode,
    /// Scalar columns to return with each row.
    pub projection: Vec<String>,
    /// Version to search; latest when `None`.
    pub version: Option<u64>,
    /// Metric; the column's default when `None`.
    pub metric: Option<Metric>,
    /// Execution mode.
    pub mode: SearchMode,
    /// Index-search options.
    pub options: SearchOptions,
}

impl Default for SearchParams {
    fn default() -> Self {
        SearchParams {
            column: None,
            filter: None,
            filter_mode: FilterMode::Prefilter,
            projection: Vec::new(),
            version: None,
            metric: None,
            mode: SearchMode::Auto,
            options: SearchOptions::default(),
        }
    }
}

/// What one query of a batch chooses for itself, apart from its k and
/// offset: filter, filter mode, partitions probed, refine factor and the
/// columns returned. Queries with different choices still share one scan;
/// only [`SharedParams`] must be equal.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
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
    /// Partitions to probe.
    #[serde(default = "default_nprobes")]
    pub nprobes: Nprobes,
    /// Take (k + offset) × r candidates from the index and rerank them
    /// with the exact float32 vectors.
    #[serde(default)]
    pub refine_factor: Option<usize>,
}

fn default_nprobes() -> Nprobes {
    SearchOptions::default().nprobes
}

impl Default for PerQueryParams {
    fn default() -> Self {
        PerQueryParams::from(&SearchParams::default())
    }
}

impl From<&SearchParams> for PerQueryParams {
    fn from(p: &SearchParams) -> Self {
        PerQueryParams {
            filter: p.filter.clone(),
            filter_mode: p.filter_mode,
            projection: p.projection.clone(),
            nprobes: p.options.nprobes,
            refine_factor: p.options.refine_factor,
        }
    }
}

/// What every query of one scan must share: the version, the column and
/// metric (one partition read serves them all), the execution mode and
/// whether unindexed fragments are scanned. With the dataset, the
/// coalescer's grouping key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SharedParams {
    /// Version searched.
    pub version: Option<u64>,
    /// Vector column.
    pub column: Option<String>,
    /// Metric.
    pub metric: Option<Metric>,
    /// Execution mode.
    pub mode: SearchMode,
    /// Use the column's index when it has one.
    pub use_index: bool,
    /// Skip the exact scan of fragments no index segment covers yet.
    pub fast_search: bool,
}

impl SearchParams {
    /// The part of these parameters a whole scan shares.
    pub fn shared(&self) -> SharedParams {
        SharedParams {
            version: self.version,
            column: self.column.clone(),
            metric: self.metric,
            mode: self.mode,
            use_index: self.options.use_index,
            fast_search: self.options.fast_search,
        }
    }

    /// Search parameters with `shared` for the batch and `own` for the
    /// query.
    pub fn from_parts(shared: SharedParams, own: PerQueryParams) -> SearchParams {
        SearchParams {
            column: shared.column,
            filter: own.filter,
            filter_mode: own.filter_mode,
            projection: own.projection,
            version: shared.version,
            metric: shared.metric,
            mode: shared.mode,
            options: SearchOptions {
                use_index: shared.use_index,
                nprobes: own.nprobes,
                refine_factor: own.refine_factor,
                fast_search: shared.fast_search,
            },
        }
    }
}

/// One vector's nearest-neighbour search.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Query {
    /// The query vector.
    pub vector: Vec<f32>,
    /// Rows wanted.
    pub k: usize,
    /// Best rows to skip before the k returned.
    pub offset: usize,
    /// Everything a batch shares.
    #[serde(flatten)]
    pub params: SearchParams,
}

impl Query {
    /// A query for the `k` nearest rows to `vector`, with defaults elsewhere.
    pub fn new(vector: Vec<f32>, k: usize) -> Self {
        Query {
            vector,
            k,
            offset: 0,
            params: SearchParams::default(),
        }
    }

    /// The equivalent batch of one.
    pub fn into_batch(self) -> BatchQuery {
        BatchQuery {
            vectors: vec![self.vector],
            k: PerQuery::All(self.k),
            offset: PerQuery::All(self.offset),
            params: self.params,
            each: None,
        }
    }
}

impl std::ops::Deref for Query {
    type Target = SearchParams;
    fn deref(&self) -> &SearchParams {
        &self.params
    }
}

impl std::ops::DerefMut for Query {
    fn deref_mut(&mut self) -> &mut SearchParams {
        &mut self.params
    }
}

/// A value given once for the whole batch or once per query.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PerQuery {
    /// The same value for every query.
    All(usize),
    /// One value per query, in query order.
    Each(Vec<usize>),
}

impl PerQuery {
    /// The value for query `i` (0 past the end of a per-query list, which
    /// validation rejects anyway).
    pub fn get(&self, i: usize) -> usize {
        match self {
            PerQuery::All(v) => *v,
            PerQuery::Each(vs) => vs.get(i).copied().unwrap_or(0),
        }
    }

    fn expand(&self, what: &str, n: usize) -> Result<Vec<usize>> {
        match self {
            PerQuery::All(v) => Ok(vec![*v; n]),
            PerQuery::Each(vs) if vs.len() == n => Ok(vs.clone()),
            PerQuery::Each(vs) => Err(Error::InvalidArgument(format!(
                "{what} has {} values for {n} queries",
                vs.len()
            ))),
        }
    }
}

/// Many independent query vectors searched in one scan of one version,
/// column and metric; each has its own k and offset, and (with `each`) its
/// own filter, filter mode, projection, nprobes and refine factor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchQuery {
    /// The query vectors (an n × dim matrix, one row per query).
    pub vectors: Vec<Vec<f32>>,
    /// Rows wanted, for all or per query.
    pub k: PerQuery,
    /// Rows skipped, for all or per query.
    pub offset: PerQuery,
    /// Parameters of the batch; without `each`, also every query's filter,
    /// projection and probing.
    #[serde(flatten)]
    pub params: SearchParams,
    /// One entry per query, in query order: each query's own filter,
    /// filter mode, projection, nprobes and refine factor, in place of
    /// those of `params` (whose nprobes is then ignored, and whose filter,
    /// filter mode, projection and refine factor must be left unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub each: Option<Vec<PerQueryParams>>,
}

impl BatchQuery {
    /// A batch asking for the `k` nearest rows to each vector.
    pub fn new(vectors: Vec<Vec<f32>>, k: usize) -> Self {
        BatchQuery {
            vectors,
            k: PerQuery::All(k),
            offset: PerQuery::All(0),
            params: SearchParams::default(),
            each: None,
        }
    }

    /// Query `i`'s own parameters: its entry of `each`, or the batch's.
    pub fn params_of(&self, i: usize) -> PerQueryParams {
        match self.each.as_ref().and_then(|e| e.get(i)) {
            Some(own) => own.clone(),
            None => PerQueryParams::from(&self.params),
        }
    }
}

impl std::ops::Deref for BatchQuery {
    type Target = SearchParams;
    fn deref(&self) -> &SearchParams {
        &self.params
    }
}

impl std::ops::DerefMut for BatchQuery {
    fn deref_mut(&mut self) -> &mut SearchParams {
        &mut self.params
    }
}

/// Builder methods that [`Query`] and [`BatchQuery`] share (the fields a
/// batch has in common: everything but the vectors, k and offset).
macro_rules! search_builders {
    ($t:ty) => {
        impl $t {
            /// Only rows matching this SQL filter (a prefilter by default).
            pub fn filter(mut self, sql: impl Into<String>) -> Self {
                self.filter = Some(sql.into());
                self
            }

            /// Applies the filter after the search (may return fewer than k rows).
            pub fn postfilter(mut self) -> Self {
                self.filter_mode = FilterMode::Postfilter;
                self
            }

            /// Scalar (or vector) columns to return with each row.
            pub fn select<S: Into<String>>(mut self, columns: impl IntoIterator<Item = S>) -> Self {
                self.projection = columns.into_iter().map(Into::into).collect();
                self
            }

            /// The vector column to search (needed when there are several).
            pub fn column(mut self, name: impl Into<String>) -> Self {
                self.column = Some(name.into());
                self
            }

            /// Probes this many partitions per index segment.
            pub fn nprobes(mut self, n: usize) -> Self {
                self.options.nprobes = Nprobes::Fixed(n);
                self
            }

            /// Probes at least `min` and at most `max` partitions, stopping once
            /// enough matching rows were seen (see [`Nprobes::Adaptive`]).
            pub fn adaptive_nprobes(mut self, min: usize, max: usize) -> Self {
                self.options.nprobes = Nprobes::Adaptive { min, max };
                self
            }

            /// Reranks `(k + offset) × factor` index candidates with exact vectors.
            pub fn refine_factor(mut self, factor: usize) -> Self {
                self.options.refine_factor = Some(factor);
                self
            }

            /// Skips the exact scan of fragments no index covers yet.
            pub fn fast_search(mut self) -> Self {
                self.options.fast_search = true;
                self
            }

            /// Searches this version instead of the latest.
            pub fn version(mut self, version: u64) -> Self {
                self.version = Some(version);
                self
            }

            /// Uses this metric instead of the column's.
            pub fn metric(mut self, metric: Metric) -> Self {
                self.metric = Some(metric);
                self
            }

            /// Forces an execution mode (exact, per-query, shared).
            pub fn mode(mut self, mode: SearchMode) -> Self {
                self.mode = mode;
                self
            }
        }
    };
}

search_builders!(Query);
search_builders!(BatchQuery);

impl Query {
    /// Skips the `offset` best rows before the k returned.
    pub fn offset(mut self, offset: usize) -> Self {
        self.offset = offset;
        self
    }
}

impl BatchQuery {
    /// One k per query, in query order.
    pub fn ks(mut self, ks: Vec<usize>) -> Self {
        self.k = PerQuery::Each(ks);
        self
    }

    /// One offset per query, in query order.
    pub fn offsets(mut self, offsets: Vec<usize>) -> Self {
        self.offset = PerQuery::Each(offsets);
        self
    }

    /// Each query's own filter, filter mode, projection, nprobes and
    /// refine factor, in query order (one entry per query).
    pub fn each(mut self, each: Vec<PerQueryParams>) -> Self {
        self.each = Some(each);
        self
    }
}

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
        if let Some(each) = &batch.each {
            if each.len() != n {
                return Err(Error::InvalidArgument(format!(
                    "each has {} entries for {n} queries",
                    each.len()
                )));
            }
            let p = &batch.params;
            if p.filter.is_some()
                || p.filter_mode != FilterMode::Prefilter
                || !p.projection.is_empty()
                || p.options.refine_factor.is_some()
            {
                return Err(Error::InvalidArgument(
                    "with per-query parameters (each), the filter, filter mode, projection, \
                     nprobes and refine factor belong to each entry, not to the batch"
                        .into(),
                ));
            }
        }
        let (column, dim, default_metric) = schema.vector_column(batch.column.as_deref())?;
        let metric = batch.metric.unwrap_or(default_metric);
        let ks = batch.k.expand("k", n)?;
        let offsets = batch.offset.expand("offset", n)?;
        let mut filters: Vec<Filter> = Vec::new();
        let mut specs = Vec::with_capacity(n);
        for (qi, (&k, &offset)) in ks.iter().zip(&offsets).enumerate() {
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
                if batch.each.is_none() || n == 1 {
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
            SearchOptions {
                use_index: batch.options.use_index,
                nprobes: own.nprobes,
                refine_factor: own.refine_factor,
                fast_search: batch.options.fast_search,
            }
            .validate()
            .map_err(in_query)?;
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
                nprobes: own.nprobes,
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
        Ok(ValidatedBatch {
            column: column.to_string(),
            dim,
            metric,
            queries: PreparedQueries::new(metric, dim, &flat),
            specs,
            filters,
            mode: batch.mode,
            use_index: batch.options.use_index,
            fast_search: batch.options.fast_search,
        })
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
        }
    }
}
