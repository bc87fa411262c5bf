//! A search request after validation: every query's own choices checked
//! ([`QuerySpec`]), the vectors prepared for the kernel, the filters
//! parsed once per distinct text ([`ValidatedBatch`]). Nothing runs on a
//! request until it gets here.

use super::request::{BatchQuery, FilterMode, PerQuery, SearchMode};
use crate::config::Limits;
use crate::error::{Error, Result};
use crate::kernel::metric::VectorProblem;
use crate::kernel::Metric;
use crate::kernel::PreparedQueries;
use crate::query::filter::Filter;
use crate::query::request::Nprobes;
use crate::storage::schema::Schema;

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
