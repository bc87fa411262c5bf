//! Searches of one version: one query, a batch, a batch with its profile.
//! All three run the same validated batch through the planner, so a query
//! gets the same rows whichever way it is asked.

use super::Dataset;
use crate::cancel::CancelToken;
use crate::error::{Error, Result};
use crate::exec;
use crate::exec::Profile;
use crate::query::{
    BatchInfo, BatchQuery, Query, SearchMode, SearchResponse, SearchResults, ValidatedBatch,
};
use crate::storage::FragmentView;

impl Dataset {
    /// Searches for one vector's nearest rows (a batch of one). A
    /// [`Query::cancel_token`] stops it from another thread.
    pub fn search(&self, query: &Query) -> Result<SearchResponse> {
        let started = std::time::Instant::now();
        let (mut results, profile) = self.explain(&query.clone().into_batch())?;
        let batch = BatchInfo {
            id: 0,
            size: 1,
            mode: profile.mode,
            retried_alone: false,
            queue_wait_us: 0,
            scan_us: started.elapsed().as_micros() as u64,
        };
        Ok(SearchResponse::of(&mut results, 0, batch))
    }

    /// Searches a batch of vectors in one scan; `hits[i]` answers query `i`.
    pub fn search_batch(&self, batch: &BatchQuery) -> Result<SearchResults> {
        Ok(self.explain(batch)?.0)
    }

    /// Searches a batch and reports what the execution did (mode, the
    /// partitions and rows it read, its phases' times).
    pub fn explain(&self, batch: &BatchQuery) -> Result<(SearchResults, Profile)> {
        match &batch.cancel {
            Some(token) => self.run(batch, token),
            None => self.run(batch, &CancelToken::new()),
        }
    }

    /// Searches a batch that `cancel` may stop: once cancelled, the scan
    /// stops within one partition (or exact-scan chunk) and the search
    /// returns [`crate::Error::Cancelled`], holding nothing afterwards.
    pub(crate) fn run(
        &self,
        batch: &BatchQuery,
        cancel: &CancelToken,
    ) -> Result<(SearchResults, Profile)> {
        // Counts the object-storage reads this search causes, on any thread.
        let meter = std::sync::Arc::new(crate::storage::io_meter::IoCounts::default());
        let _metered = crate::storage::io_meter::enter(Some(meter.clone()));
        let snapshot = match batch.shared.version {
            Some(v) => self.checkout(v)?,
            None => self.clone(),
        };
        let validated = ValidatedBatch::new(batch, snapshot.schema(), &self.config().limits)?;
        snapshot.check_index_options(&validated)?;
        let fragments = snapshot.fragments()?;
        let indexed = snapshot
            .manifest
            .indices
            .iter()
            .any(|m| m.column == validated.column);
        // An exact search never opens the index: damaged index files must
        // not stop it.
        let (mut segments, mut graphs) =
            if validated.mode == SearchMode::Exact || !validated.use_index {
                (Vec::new(), Vec::new())
            } else {
                (
                    snapshot.segments(&validated.column)?,
                    snapshot.graph_segments(&validated.column)?,
                )
            };
        if let Some(split) = &validated.split {
            if let Some(id) = split
                .iter()
                .find(|id| !fragments.iter().any(|f| f.meta.id == **id))
            {
                return Err(Error::InvalidArgument(format!(
                    "fragment {id} is not in version {} (see Dataset::splits)",
                    snapshot.version()
                )));
            }
            // A segment with no fragment in the split has no row to give.
            let in_split =
                |fragments: &[u32]| fragments.iter().any(|f| split.binary_search(f).is_ok());
            segments.retain(|s| in_split(&s.meta.fragments));
            graphs.retain(|s| in_split(&s.meta.fragments));
        }
        let view = exec::ann::IndexView {
            fragments: &fragments,
            indexed,
            segments,
            graphs,
            cache: self.session.partition_cache(),
            threads: self.config().scan_threads(),
            pool: self.session.pool(),
            cancel,
            filters: self.session.filter_cache(),
        };
        // A remote dataset reads its fragments' page directories while
        // the scan runs (the hits need them next).
        let meter_now = crate::storage::io_meter::current();
        let (candidates, mut profile) = std::thread::scope(|s| {
            if fragments.iter().any(FragmentView::directory_unread) {
                let fragments = &fragments;
                s.spawn(move || {
                    let _metered = crate::storage::io_meter::enter(meter_now);
                    fragments.iter().for_each(FragmentView::warm_directory);
                });
            }
            exec::plan::execute(&view, &validated)
        })?;
        cancel.check()?;
        let t = std::time::Instant::now();
        let projections: Vec<&[String]> = validated
            .specs
            .iter()
            .map(|s| s.projection.as_slice())
            .collect();
        let hits = exec::materialise::hits(&fragments, &candidates, &projections)?;
        profile.materialise_ms = exec::profile::ms_since(t);
        let io = meter.read();
        (profile.storage_gets, profile.storage_bytes) = (io.gets, io.bytes);
        let shared = projections.iter().all(|p| *p == projections[0]);
        Ok((
            SearchResults {
                version: snapshot.version(),
                projection: if shared {
                    projections[0].to_vec()
                } else {
                    Vec::new()
                },
                projections: if shared {
                    Vec::new()
                } else {
                    projections.iter().map(|p| p.to_vec()).collect()
                },
                hits,
            },
            profile,
        ))
    }
}
