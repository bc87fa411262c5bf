//! Choosing how a validated batch runs, and running it.
//!
//! | case | mode |
//! |---|---|
//! | `mode = exact`, `use_index = false`, or no index on the column | `exact` |
//! | an index, fixed nprobes, no refine factor | `shared_scan` |
//! | an index, adaptive nprobes or a refine factor | `per_query` (reason recorded) |
//! | `mode = per_query` | `per_query` |
//!
//! A fallback is never silent: the profile names the reason.
//!
//! An index built for another metric than the query's is refused with a
//! clear error rather than searched with the wrong distances.

use crate::error::{Error, Result};
use crate::exec::ann::{self, IndexView};
use crate::exec::profile::{ms_since, Profile};
use crate::exec::{exact, shared_scan};
use crate::query::{Candidate, Nprobes, SearchMode, ValidatedBatch};
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
        ..Profile::default()
    };
    let wants_index = batch.mode != SearchMode::Exact && batch.options.use_index;
    if wants_index && !view.segments.is_empty() {
        if let Some(seg) = view.segments.iter().find(|s| s.meta.metric != batch.metric) {
            return Err(Error::InvalidArgument(format!(
                "the index on column '{}' was built for metric {}, but the query asks for {}; \
                 search exactly (mode exact or use_index = false) or build an index for {}",
                batch.column, seg.meta.metric, batch.metric, batch.metric
            )));
        }
        let fallback = if matches!(batch.options.nprobes, Nprobes::Adaptive { .. }) {
            Some("adaptive nprobes")
        } else if batch.options.refine_factor.is_some() {
            Some("refine_factor")
        } else {
            None
        };
        let heaps = if batch.mode == SearchMode::PerQuery || fallback.is_some() {
            profile.mode = "per_query".into();
            if batch.mode != SearchMode::PerQuery {
                profile.fallback_reason = fallback.map(String::from);
            }
            ann::search_per_query(view, batch, &mut profile)?
        } else {
            profile.mode = "shared_scan".into();
            shared_scan::search_shared(view, batch, &mut profile)?
        };
        let t = Instant::now();
        let out = exact::postfilter_and_page(view.fragments, batch, heaps)?;
        profile.merge_ms += ms_since(t);
        return Ok((out, profile));
    }
    profile.mode = "exact".into();
    if matches!(batch.mode, SearchMode::PerQuery | SearchMode::Shared) {
        profile.fallback_reason = Some(if batch.options.use_index {
            format!("column '{}' has no index", batch.column)
        } else {
            "use_index = false".to_string()
        });
    } else if batch.mode == SearchMode::Auto && !batch.options.use_index && view.indexed {
        profile.fallback_reason = Some("use_index = false".into());
    }
    let t = Instant::now();
    let out = exact::search(view, batch)?;
    profile.prefilter_builds += view.fragments.len();
    profile.rows_scored +=
        view.fragments.iter().map(|f| f.rows() as u64).sum::<u64>() * batch.len() as u64;
    profile.scan_ms += ms_since(t);
    Ok((out, profile))
}
