//! Index management: build an index over a column, index appended
//! fragments as delta segments (optimize), retrain (reindex). Each commits
//! a new version listing the column's segments.

use super::{Commit, Dataset};
use crate::error::{Error, Result};
use crate::index::hnsw::segment::{build_hnsw_segment, HnswSegment};
use crate::index::ivf::{build_segment, validate_params, LoadedSegment, INDICES_DIR};
use crate::index::{IndexKind, IndexParams, IndexSegmentMeta, PartitionCache};
use crate::progress::Progress;
use crate::query::{SearchMode, ValidatedBatch};
use crate::storage::manifest::{commit_manifest, sync_dir};
use crate::storage::FragmentView;
use std::sync::Arc;

impl Dataset {
    /// The index segments of `column` in this version, opened. Internal
    /// (tests).
    #[doc(hidden)]
    pub fn segments(&self, column: &str) -> Result<Vec<Arc<LoadedSegment>>> {
        let (_, dim, _) = self.schema().vector_column(Some(column))?;
        self.manifest
            .indices
            .iter()
            .filter(|m| m.column == column && !m.params.kind.is_graph())
            .map(|meta| self.session.segment(&self.root, meta, dim))
            .collect()
    }

    /// The `hnsw` segments of `column` in this version, opened. Internal
    /// (tests).
    #[doc(hidden)]
    pub fn graph_segments(&self, column: &str) -> Result<Vec<Arc<HnswSegment>>> {
        let (_, dim, _) = self.schema().vector_column(Some(column))?;
        self.manifest
            .indices
            .iter()
            .filter(|m| m.column == column && m.params.kind.is_graph())
            .map(|meta| self.session.graph_segment(&self.root, meta, dim))
            .collect()
    }

    /// The columns that have an index in this version, sorted, each once
    /// (segments of one column need not be adjacent in the manifest).
    pub(crate) fn indexed_columns(&self) -> Vec<String> {
        let mut columns: Vec<String> = self
            .manifest
            .indices
            .iter()
            .map(|m| m.column.clone())
            .collect();
        columns.sort();
        columns.dedup();
        columns
    }

    /// The kind of `column`'s index in this version, if it has one.
    pub fn index_kind(&self, column: &str) -> Option<IndexKind> {
        self.manifest
            .indices
            .iter()
            .find(|m| m.column == column)
            .map(|m| m.params.kind)
    }

    /// Refuses a search option that the column's index does not take:
    /// `ef` on an IVF index, `nprobes` on an `hnsw` index (a query that
    /// does not use the index takes either).
    pub(crate) fn check_index_options(&self, batch: &ValidatedBatch) -> Result<()> {
        if batch.mode == SearchMode::Exact || !batch.use_index {
            return Ok(());
        }
        let Some(kind) = self.index_kind(&batch.column) else {
            return Ok(());
        };
        let named = |qi: usize| {
            if batch.len() > 1 {
                format!("query {qi}: ")
            } else {
                String::new()
            }
        };
        for (qi, spec) in batch.specs.iter().enumerate() {
            if kind.is_graph() && spec.nprobes_given {
                return Err(Error::InvalidArgument(format!(
                    "{}nprobes applies to IVF indexes; the index on column '{}' is hnsw, \
                     which takes ef (candidates kept by the graph walk)",
                    named(qi),
                    batch.column
                )));
            }
            if !kind.is_graph() && spec.ef.is_some() {
                return Err(Error::InvalidArgument(format!(
                    "{}ef applies to hnsw indexes; the index on column '{}' is {}, \
                     which takes nprobes (partitions probed)",
                    named(qi),
                    batch.column,
                    kind.name()
                )));
            }
        }
        Ok(())
    }

    /// The partition cache (the session's, shared by all its datasets).
    pub fn partition_cache(&self) -> &PartitionCache {
        self.session.partition_cache()
    }

    /// Index segments recorded in this version.
    pub fn index_segments(&self) -> &[IndexSegmentMeta] {
        &self.manifest.indices
    }

    fn commit_indices(
        &mut self,
        operation: &str,
        column: &str,
        keep_old: bool,
        new: Vec<IndexSegmentMeta>,
    ) -> Result<()> {
        let mut manifest = self.manifest.next(operation);
        if !keep_old {
            manifest.indices.retain(|m| m.column != column);
        }
        manifest.indices.extend(new);
        sync_dir(&self.root.join(INDICES_DIR))?;
        commit_manifest(&self.root, &manifest)?;
        *self = self.with_manifest(manifest);
        Ok(())
    }

    /// Trains and builds an index over every fragment of `column` (the only
    /// vector column when `None`), replacing the column's existing segments,
    /// as a new version. The commit counts the rows indexed and lists the
    /// segment. Reports `(stage, done, total)` to the handle's
    /// [`Progress`] (k-means iterations, rows assigned, rows written).
    pub fn create_index(&mut self, column: Option<&str>, params: IndexParams) -> Result<Commit> {
        let (column, dim, metric) = self.schema().vector_column(column)?;
        let column = column.to_string();
        validate_params(&params, dim, self.count_rows())?;
        let fragments = self.fragments()?;
        let progress = self.progress.clone();
        let meta = if params.kind.is_graph() {
            self.build_graph(&column, dim, metric, &params, &fragments)?
        } else {
            build_segment(
                &self.root,
                &column,
                dim,
                metric,
                &params,
                &fragments,
                None,
                &mut reporter(progress.as_ref()),
            )?
            .0
        };
        self.commit_indices("create_index", &column, false, vec![meta.clone()])?;
        Ok(self.commit_answer(meta.rows, vec![meta]))
    }

    /// Rewrites fragments of the Arrow IPC layout into paged files (same
    /// fragment ids and rows: one version), then indexes the fragments no
    /// segment covers yet, per indexed column, as delta segments that
    /// reuse the existing centroids and quantizers (another version). The
    /// commit counts the rows rewritten and indexed and lists the new
    /// segments (none, and the version unchanged, when there was nothing
    /// to do).
    pub fn optimize(&mut self) -> Result<Commit> {
        let rewritten = self.rewrite_arrow_fragments()?;
        let columns = self.indexed_columns();
        let fragments = self.fragments()?;
        let progress = self.progress.clone();
        let mut built = Vec::new();
        for column in columns {
            let (_, dim, _) = self.schema().vector_column(Some(&column))?;
            let graphs = self.graph_segments(&column)?;
            if let Some(base) = graphs.first() {
                // A delta graph over the fragments no graph covers.
                let todo: Vec<FragmentView> = fragments
                    .iter()
                    .filter(|f| !graphs.iter().any(|s| s.meta.fragments.contains(&f.meta.id)))
                    .cloned()
                    .collect();
                if !todo.is_empty() {
                    let (metric, params) = (base.meta.metric, base.meta.params.clone());
                    built.push(self.build_graph(&column, dim, metric, &params, &todo)?);
                }
                continue;
            }
            let segments = self.segments(&column)?;
            let Some(base) = segments
                .iter()
                .find(|s| s.meta.trained_in == s.meta.id)
                .or(segments.first())
            else {
                continue;
            };
            let todo: Vec<FragmentView> = fragments
                .iter()
                .filter(|f| {
                    !segments
                        .iter()
                        .any(|s| s.meta.fragments.contains(&f.meta.id))
                })
                .cloned()
                .collect();
            if todo.is_empty() {
                continue;
            }
            let (meta, _) = build_segment(
                &self.root,
                &column,
                dim,
                base.meta.metric,
                &base.meta.params,
                &todo,
                Some((&base.model, &base.meta.trained_in)),
                &mut reporter(progress.as_ref()),
            )?;
            built.push(meta);
        }
        if built.is_empty() {
            return Ok(self.commit_answer(rewritten, built));
        }
        let column = built[0].column.clone();
        self.commit_indices("optimize", &column, true, built.clone())?;
        let rows = built.iter().map(|m| m.rows).sum::<u64>() + rewritten;
        Ok(self.commit_answer(rows, built))
    }

    /// Retrains the index of `column` over all its rows with the parameters
    /// it was built with, replacing every segment (base and deltas).
    pub fn reindex(&mut self, column: Option<&str>) -> Result<Commit> {
        let (column, _, _) = self.schema().vector_column(column)?;
        let params = self
            .manifest
            .indices
            .iter()
            .find(|m| m.column == column)
            .map(|m| m.params.clone())
            .ok_or_else(|| {
                Error::InvalidArgument(format!("column '{column}' has no index to rebuild"))
            })?;
        let column = column.to_string();
        self.create_index(Some(&column), params)
    }
}

impl Dataset {
    /// Builds an `hnsw` segment over `fragments`, its neighbour searches
    /// on the session's scan threads.
    fn build_graph(
        &self,
        column: &str,
        dim: usize,
        metric: crate::kernel::Metric,
        params: &IndexParams,
        fragments: &[FragmentView],
    ) -> Result<IndexSegmentMeta> {
        let pool = self.session.pool();
        let parallel = |shares: usize, task: &(dyn Fn(usize) + Sync)| {
            // A share that fails (a panic) leaves its nodes unsearched;
            // the build searches them itself (see `HnswGraph::build`).
            let _ = pool.run(shares, |share| {
                task(share);
                Ok(())
            });
        };
        build_hnsw_segment(
            &self.root,
            column,
            dim,
            metric,
            params,
            fragments,
            &parallel,
            &mut reporter(self.progress.as_ref()),
        )
    }
}

/// The index build's `(stage, done, total)` callback, reporting to
/// `progress` when there is one.
fn reporter(progress: Option<&Progress>) -> impl FnMut(&str, usize, usize) + '_ {
    move |stage, done, total| Progress::maybe(progress, stage, done as u64, total as u64)
}
