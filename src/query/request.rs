//! Search requests: what a caller asks for (validated in `validated.rs`).
//!
//! A request is plain data composed of two parts: what each query chooses
//! for itself ([`PerQueryParams`]: filter, filter mode, projection,
//! nprobes, refine factor) and what a whole scan shares ([`SharedParams`]:
//! version, column, metric, mode, index use). Builder methods on [`Query`]
//! and [`BatchQuery`] set either. A request is checked completely before
//! any work starts: a bad query gets an error of its own and never joins a
//! batch.

use crate::cancel::CancelToken;
use crate::error::{Error, Result};
use crate::kernel::Metric;
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
    pub(crate) fn validate(&self) -> Result<()> {
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

    pub(crate) fn check_len(&self, what: &str, unit: &str, n: usize) -> Result<()> {
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
