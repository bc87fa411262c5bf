//! Choosing how a validated batch runs, and running it.
//!
//! | case | mode |
//! |---|---|
//! | `mode = exact`, `use_index = false`, or no index on the column | `exact` |
//! | an IVF index (any mix of filters, nprobes, adaptive probing, refine factors) | `shared_scan` |
//! | an `hnsw` index (any mode but exact) | each query walks the graph ([`graph`]); reported as `shared_scan`, or `per_query` when asked |
//! | `mode = per_query` | `per_query` |
//!
//! A fallback is never silent: the profile names the reason.
//!
//! An index built for another metric than the query's is refused with a
//! clear error rather than searched with the wrong distances.

use crate::error::{Error, Result};
use crate::exec::ann::{self, IndexView};
use crate::exec::prefilter::Admission;
use crate::exec::profile::{ms_since, Profile};
use crate::exec::{exact, graph, shared_scan};
use crate::query::{Candidate, SearchMode, ValidatedBatch};
use std::time::Instant;

/// Runs `batch` over `view`; returns each query's rows (postfilter, offset
/// and k applied) and the batch's profile.
pub fn execute(
    view: &IndexView<'_>,
    batch: &ValidatedBatch,
) -> Result<(Vec<Vec<Candidate>>, Profile)> {
    view.cancel.check()?;
    let mut profile = Profile {
        queries: batch.len(),
        distinct_filters: batch.filters.len(),
        ..Profile::default()
    };
    let admission = Admission::new(view.fragments, batch, view.filters);
    let wants_index = batch.mode != SearchMode::Exact && batch.use_index;
    if wants_index && !view.graphs.is_empty() {
        if let Some(seg) = view.graphs.iter().find(|s| s.meta.metric != batch.metric) {
            return Err(wrong_metric(batch, seg.meta.metric));
        }
        // Every query walks alone: per-query and shared are one path.
        profile.mode = if batch.mode == SearchMode::PerQuery {
            SearchMode::PerQuery
        } else {
            SearchMode::Shared
        };
        let heaps = graph::search_graphs(view, batch, &admission, &mut profile)?;
        let t = Instant::now();
        let out = exact::postfilter_and_page(&admission, batch, heaps)?;
        profile.merge_ms += ms_since(t);
        admission.add_to(&mut profile);
        return Ok((out, profile));
    }
    if wants_index && !view.segments.is_empty() {
        if let Some(seg) = view.segments.iter().find(|s| s.meta.metric != batch.metric) {
            return Err(wrong_metric(batch, seg.meta.metric));
        }
        let heaps = if batch.mode == SearchMode::PerQuery {
            profile.mode = SearchMode::PerQuery;
            ann::search_per_query(view, batch, &admission, &mut profile)?
        } else {
            profile.mode = SearchMode::Shared;
            shared_scan::search_shared(view, batch, &admission, &mut profile)?
        };
        let t = Instant::now();
        let out = exact::postfilter_and_page(&admission, batch, heaps)?;
        profile.merge_ms += ms_since(t);
        admission.add_to(&mut profile);
        return Ok((out, profile));
    }
    profile.mode = SearchMode::Exact;
    if matches!(batch.mode, SearchMode::PerQuery | SearchMode::Shared) {
        profile.fallback_reason = Some(if batch.use_index {
            format!("column '{}' has no index", batch.column)
        } else {
            "use_index = false".to_string()
        });
    } else if batch.mode == SearchMode::Auto && !batch.use_index && view.indexed {
        profile.fallback_reason = Some("use_index = false".into());
    }
    let t = Instant::now();
    let out = exact::search(view, batch, &admission)?;
    admission.add_to(&mut profile);
    profile.rows_scored +=
        view.fragments.iter().map(|f| f.rows() as u64).sum::<u64>() * batch.len() as u64;
    profile.scan_ms += ms_since(t);
    Ok((out, profile))
}

/// The error for a query whose metric is not its index's.
fn wrong_metric(batch: &ValidatedBatch, built_for: crate::kernel::Metric) -> Error {
    Error::InvalidArgument(format!(
        "the index on column '{}' was built for metric {}, but the query asks for {}; \
         search exactly (mode exact or use_index = false) or build an index for {}",
        batch.column, built_for, batch.metric, batch.metric
    ))
}
