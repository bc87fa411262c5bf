//! A versioned dataset: open, create, append, delete, check out, search.
//!
//! A [`Dataset`] handle is pinned to one version (a snapshot). Writes build
//! the next version's files, then publish its manifest atomically; the handle
//! that wrote moves to the new version, other handles keep theirs. Every
//! handle belongs to a [`Session`], whose caches, scan pool and config it
//! uses.

use crate::config::Config;
use crate::db::session::Session;
use crate::error::{Error, Result};
use crate::exec;
use crate::exec::{CancelToken, Profile};
use crate::index::ivf::{build_segment, validate_params, LoadedSegment, INDICES_DIR};
use crate::index::{IndexParams, IndexSegmentMeta, PartitionCache};
use crate::query::{BatchQuery, Query, ScalarValue, SearchMode, SearchResults, ValidatedBatch};
use crate::storage::conform::conform_batch;
use crate::storage::deletions::{write_deletions, DELETIONS_DIR};
use crate::storage::fragment::{FragmentWriter, DATA_DIR};
use crate::storage::manifest::{
    commit_manifest, list_versions, read_manifest, sync_dir, Manifest, FORMAT_VERSION, VERSIONS_DIR,
};
use crate::storage::schema::Schema;
use crate::storage::FragmentView;
use arrow_array::RecordBatch;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A handle on one version of a dataset directory.
#[derive(Clone, Debug)]
pub struct Dataset {
    root: PathBuf,
    manifest: Arc<Manifest>,
    schema: Arc<Schema>,
    session: Session,
}

/// One line of a dataset's history.
#[derive(Clone, Debug, Serialize)]
pub struct VersionInfo {
    /// Version number.
    pub version: u64,
    /// Commit time, milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
    /// What made it.
    pub operation: String,
    /// Visible rows.
    pub rows: u64,
    /// Fragments.
    pub fragments: usize,
}

/// One row read back whole: [`Dataset::row_by_id`].
#[derive(Clone, Debug, PartialEq)]
pub struct RowValues {
    /// Row id (`fragment << 32 | offset`).
    pub row_id: u64,
    /// Every column's value, in schema order.
    pub values: Vec<(String, ScalarValue)>,
}

/// Files of the next version written and synced, manifest not yet
/// published. Dropping it without [`StagedCommit::commit`] is exactly a
/// crash before the commit: the files are orphans, the dataset unchanged.
#[derive(Debug)]
pub struct StagedCommit {
    dataset: Dataset,
    manifest: Manifest,
}

impl StagedCommit {
    /// The version this commit will publish.
    pub fn version(&self) -> u64 {
        self.manifest.version
    }

    /// Publishes the manifest; returns a handle on the new version.
    pub fn commit(self) -> Result<Dataset> {
        commit_manifest(&self.dataset.root, &self.manifest)?;
        Ok(self.dataset.with_manifest(self.manifest))
    }
}

/// Refuses a manifest whose vector dimension is above `limits.max_dim`
/// before anything is sized by it (a hand-edited dimension of 2^32 − 1
/// would otherwise ask for a huge allocation).
fn within_limits(manifest: &Manifest, config: &Config) -> Result<()> {
    for col in &manifest.schema.columns {
        if let crate::storage::ColumnType::Vector { dim, .. } = col.ty {
            if dim > config.limits.max_dim {
                return Err(Error::LimitExceeded {
                    what: "a vector column's dimension in the manifest",
                    value: dim,
                    max: config.limits.max_dim,
                });
            }
        }
    }
    Ok(())
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Dataset {
    /// Creates an empty dataset (version 1) at `root` with `schema`, in a
    /// session of its own with `config`.
    pub fn create(root: impl AsRef<Path>, schema: Schema, config: Config) -> Result<Dataset> {
        Dataset::create_in(&Session::new(config), root, schema)
    }

    /// Creates an empty dataset in `session` (see [`Session::create`]).
    pub(crate) fn create_in(
        session: &Session,
        root: impl AsRef<Path>,
        schema: Schema,
    ) -> Result<Dataset> {
        let config = session.config();
        let root = root.as_ref().to_path_buf();
        if root.join(VERSIONS_DIR).exists() {
            return Err(Error::DatasetExists(root));
        }
        for col in &schema.columns {
            if let crate::storage::ColumnType::Vector { dim, .. } = col.ty {
                if dim > config.limits.max_dim {
                    return Err(Error::InvalidArgument(format!(
                        "column '{}' has dimension {dim}, above limits.max_dim = {}",
                        col.name, config.limits.max_dim
                    )));
                }
            }
        }
        for dir in [VERSIONS_DIR, DATA_DIR, DELETIONS_DIR, INDICES_DIR] {
            std::fs::create_dir_all(root.join(dir)).map_err(|e| Error::io(root.join(dir), e))?;
        }
        sync_dir(&root)?;
        let manifest = Manifest {
            format: FORMAT_VERSION,
            version: 1,
            timestamp_ms: now_ms(),
            operation: "create".into(),
            schema,
            fragments: Vec::new(),
            next_fragment_id: 0,
            rows_appended: 0,
            indices: Vec::new(),
            crc32: None,
        };
        commit_manifest(&root, &manifest)?;
        Ok(Dataset::from_manifest(root, manifest, session.clone()))
    }

    fn from_manifest(root: PathBuf, manifest: Manifest, session: Session) -> Dataset {
        Dataset {
            root,
            schema: Arc::new(manifest.schema.clone()),
            manifest: Arc::new(manifest),
            session,
        }
    }

    fn with_manifest(&self, manifest: Manifest) -> Dataset {
        let schema = if manifest.schema == *self.schema {
            self.schema.clone()
        } else {
            Arc::new(manifest.schema.clone())
        };
        Dataset {
            root: self.root.clone(),
            manifest: Arc::new(manifest),
            schema,
            session: self.session.clone(),
        }
    }

    /// Is there a dataset (a `_versions/` directory) at `root`?
    pub fn exists(root: impl AsRef<Path>) -> bool {
        root.as_ref().join(VERSIONS_DIR).is_dir()
    }

    /// Opens the latest version with the default configuration, in a
    /// session of its own. Use [`Session::open`] to share caches and scan
    /// threads between datasets.
    pub fn open(root: impl AsRef<Path>) -> Result<Dataset> {
        Dataset::open_with_config(root, Config::default())
    }

    /// Opens the latest version in a session of its own with `config`.
    pub fn open_with_config(root: impl AsRef<Path>, config: Config) -> Result<Dataset> {
        Dataset::open_in(&Session::new(config), root)
    }

    /// Opens the latest version in `session` (see [`Session::open`]).
    pub(crate) fn open_in(session: &Session, root: impl AsRef<Path>) -> Result<Dataset> {
        let root = root.as_ref().to_path_buf();
        if !root.exists() {
            return Err(Error::DatasetNotFound(root));
        }
        let latest = *list_versions(&root)?
            .last()
            .ok_or_else(|| Error::NotADataset(root.clone()))?;
        let manifest = read_manifest(&root, latest)?;
        within_limits(&manifest, session.config())?;
        Ok(Dataset::from_manifest(root, manifest, session.clone()))
    }

    /// A handle on `version` of the same dataset (sharing loaded fragments).
    pub fn checkout(&self, version: u64) -> Result<Dataset> {
        if version == self.manifest.version {
            return Ok(self.clone());
        }
        let manifest = read_manifest(&self.root, version)?;
        within_limits(&manifest, self.session.config())?;
        Ok(self.with_manifest(manifest))
    }

    /// A handle on the newest committed version.
    pub fn checkout_latest(&self) -> Result<Dataset> {
        let latest = *list_versions(&self.root)?
            .last()
            .ok_or_else(|| Error::NotADataset(self.root.clone()))?;
        self.checkout(latest)
    }

    /// The dataset directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The version this handle sees.
    pub fn version(&self) -> u64 {
        self.manifest.version
    }

    /// The schema.
    pub fn schema(&self) -> &Schema {
        &self.manifest.schema
    }

    /// The manifest of this version.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The configuration in force (the session's).
    pub fn config(&self) -> &Config {
        self.session.config()
    }

    /// The session this handle belongs to.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Rows visible in this version.
    pub fn count_rows(&self) -> u64 {
        self.manifest.visible_rows()
    }

    /// Every committed version, oldest first.
    pub fn versions(&self) -> Result<Vec<VersionInfo>> {
        list_versions(&self.root)?
            .into_iter()
            .map(|v| {
                let m = read_manifest(&self.root, v)?;
                Ok(VersionInfo {
                    version: v,
                    timestamp_ms: m.timestamp_ms,
                    operation: m.operation.clone(),
                    rows: m.visible_rows(),
                    fragments: m.fragments.len(),
                })
            })
            .collect()
    }

    /// Every fragment of this version with its deletions; columns are read
    /// on demand through the session's column cache.
    pub fn fragments(&self) -> Result<Vec<FragmentView>> {
        self.manifest
            .fragments
            .iter()
            .map(|meta| {
                FragmentView::open(
                    &self.root,
                    meta,
                    self.schema.clone(),
                    self.session.column_cache().clone(),
                )
            })
            .collect()
    }

    /// Writes `batches` as new fragments of the next version without
    /// publishing it. Batches are conformed to the schema; rows without an
    /// `id` get the running row count of the dataset.
    pub fn stage_append<I>(&self, batches: I) -> Result<StagedCommit>
    where
        I: IntoIterator<Item = Result<RecordBatch>>,
    {
        let schema = &self.manifest.schema;
        let per_fragment = self.config().ingest.rows_per_fragment as u64;
        let mut manifest = (*self.manifest).clone();
        manifest.version += 1;
        manifest.timestamp_ms = now_ms();
        manifest.operation = "append".into();
        let mut writer: Option<FragmentWriter> = None;
        let mut appended = 0u64;
        for batch in batches {
            let batch = batch?;
            let first_id = i64::try_from(manifest.rows_appended)
                .map_err(|_| Error::Internal("row count overflows int64".into()))?;
            let batch = conform_batch(schema, &batch, first_id, appended)?;
            let mut start = 0usize;
            while start < batch.num_rows() {
                let w = match writer.as_mut() {
                    Some(w) => w,
                    None => {
                        let id = manifest.next_fragment_id;
                        manifest.next_fragment_id = id
                            .checked_add(1)
                            .ok_or_else(|| Error::Internal("fragment ids exhausted".into()))?;
                        writer.insert(FragmentWriter::create(&self.root, id, schema)?)
                    }
                };
                let room = (per_fragment - w.rows()) as usize;
                let take = room.min(batch.num_rows() - start);
                w.write(&batch.slice(start, take))?;
                start += take;
                if w.rows() == per_fragment {
                    if let Some(full) = writer.take() {
                        manifest.fragments.push(full.finish()?);
                    }
                }
            }
            manifest.rows_appended += batch.num_rows() as u64;
            appended += batch.num_rows() as u64;
        }
        if let Some(w) = writer.take() {
            if w.rows() > 0 {
                manifest.fragments.push(w.finish()?);
            }
        }
        if appended == 0 {
            return Err(Error::InvalidArgument(
                "nothing to append: the input has no rows".into(),
            ));
        }
        sync_dir(&self.root.join(DATA_DIR))?;
        Ok(StagedCommit {
            dataset: self.clone(),
            manifest,
        })
    }

    /// Appends `batches` as a new version; returns the number of rows added.
    pub fn append<I>(&mut self, batches: I) -> Result<u64>
    where
        I: IntoIterator<Item = Result<RecordBatch>>,
    {
        let before = self.manifest.rows_appended;
        *self = self.stage_append(batches)?.commit()?;
        Ok(self.manifest.rows_appended - before)
    }

    /// Deletes the visible rows matching `filter` (SQL) as a new version;
    /// returns how many were deleted. Deleting nothing still commits nothing
    /// and returns 0.
    pub fn delete(&mut self, filter: &str) -> Result<u64> {
        let filter = crate::query::Filter::parse(filter, self.schema())?;
        let mut manifest = (*self.manifest).clone();
        manifest.version += 1;
        manifest.timestamp_ms = now_ms();
        manifest.operation = "delete".into();
        let mut total = 0u64;
        for (meta, view) in manifest.fragments.iter_mut().zip(self.fragments()?) {
            let matched = filter.evaluate(&view.scalars(&filter.columns())?)?;
            let mut deleted = view.deleted.as_deref().cloned().unwrap_or_default();
            let before = deleted.len();
            deleted |= matched;
            let added = deleted.len() - before;
            if added > 0 {
                let (file, checksum) =
                    write_deletions(&self.root, meta.id, manifest.version, &deleted)?;
                meta.deletion_file = Some(file);
                meta.deletion_checksum = Some(checksum);
                meta.deleted_rows = deleted.len();
                total += added;
            }
        }
        if total == 0 {
            return Ok(0);
        }
        sync_dir(&self.root.join(DELETIONS_DIR))?;
        commit_manifest(&self.root, &manifest)?;
        *self = self.with_manifest(manifest);
        Ok(total)
    }

    /// Searches for one vector's nearest rows. The result has one entry in
    /// `hits`.
    pub fn search(&self, query: &Query) -> Result<SearchResults> {
        self.search_batch(&query.clone().into_batch())
    }

    /// Searches a batch of vectors.
    pub fn search_batch(&self, batch: &BatchQuery) -> Result<SearchResults> {
        Ok(self.search_batch_profiled(batch)?.0)
    }

    /// Searches a batch and reports what the execution did.
    pub fn search_batch_profiled(&self, batch: &BatchQuery) -> Result<(SearchResults, Profile)> {
        self.search_batch_cancellable(batch, &CancelToken::new())
    }

    /// Searches a batch that `cancel` may stop: once cancelled, the scan
    /// stops within one partition (or exact-scan chunk) and the search
    /// returns [`Error::Cancelled`], holding nothing afterwards.
    pub fn search_batch_cancellable(
        &self,
        batch: &BatchQuery,
        cancel: &CancelToken,
    ) -> Result<(SearchResults, Profile)> {
        let snapshot = match batch.version {
            Some(v) => self.checkout(v)?,
            None => self.clone(),
        };
        let validated = ValidatedBatch::new(batch, snapshot.schema(), &self.config().limits)?;
        let fragments = snapshot.fragments()?;
        let indexed = snapshot
            .manifest
            .indices
            .iter()
            .any(|m| m.column == validated.column);
        // An exact search never opens the index: damaged index files must
        // not stop it.
        let segments = if validated.mode == SearchMode::Exact || !validated.use_index {
            Vec::new()
        } else {
            snapshot.segments(&validated.column)?
        };
        let view = exec::ann::IndexView {
            fragments: &fragments,
            indexed,
            segments,
            cache: self.session.partition_cache(),
            threads: self.config().scan_threads(),
            pool: self.session.pool(),
            cancel,
            filters: self.session.filter_cache(),
        };
        let (candidates, mut profile) = exec::plan::execute(&view, &validated)?;
        cancel.check()?;
        let t = std::time::Instant::now();
        let projections: Vec<&[String]> = validated
            .specs
            .iter()
            .map(|s| s.projection.as_slice())
            .collect();
        let hits = exec::materialise::hits(&fragments, &candidates, &projections)?;
        profile.materialise_ms = exec::profile::ms_since(t);
        let shared = projections.iter().all(|p| *p == projections[0]);
        Ok((
            SearchResults {
                version: snapshot.version(),
                projection: batch.params.projection.clone(),
                projections: if shared && projections[0] == batch.params.projection.as_slice() {
                    Vec::new()
                } else {
                    projections.iter().map(|p| p.to_vec()).collect()
                },
                hits,
            },
            profile,
        ))
    }

    /// The first visible row whose `id` column is `id` (with duplicate ids,
    /// the one with the lowest row id), as its row id and every column's
    /// value in schema order; `None` when no visible row has that id. Reads
    /// the `id` columns through the column cache, then the one fragment
    /// holding the row.
    pub fn row_by_id(&self, id: i64) -> Result<Option<RowValues>> {
        use arrow_array::Array;
        for view in self.fragments()? {
            let ids = view.ids()?;
            let ids = ids
                .as_any()
                .downcast_ref::<arrow_array::Int64Array>()
                .ok_or_else(|| Error::Internal("the id column is not int64".into()))?;
            let found = (0..ids.len()).find(|&offset| {
                ids.is_valid(offset)
                    && ids.value(offset) == id
                    && !view
                        .deleted
                        .as_ref()
                        .is_some_and(|d| d.contains(offset as u32))
            });
            if let Some(offset) = found {
                let names: Vec<&str> = self
                    .schema
                    .columns
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect();
                let values = exec::materialise::row_values(&view, offset, &names)?;
                let row_id = (u64::from(view.meta.id) << 32) | offset as u64;
                let named = names.iter().map(|n| n.to_string()).zip(values).collect();
                return Ok(Some(RowValues {
                    row_id,
                    values: named,
                }));
            }
        }
        Ok(None)
    }

    /// The index segments of `column` in this version, opened.
    pub fn segments(&self, column: &str) -> Result<Vec<Arc<LoadedSegment>>> {
        let (_, dim, _) = self.schema().vector_column(Some(column))?;
        self.manifest
            .indices
            .iter()
            .filter(|m| m.column == column)
            .map(|meta| self.session.segment(&self.root, meta, dim))
            .collect()
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
        let mut manifest = (*self.manifest).clone();
        manifest.version += 1;
        manifest.timestamp_ms = now_ms();
        manifest.operation = operation.into();
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
    /// as a new version.
    pub fn create_index(
        &mut self,
        column: Option<&str>,
        params: IndexParams,
    ) -> Result<IndexSegmentMeta> {
        self.create_index_with_progress(column, params, &mut |_, _, _| {})
    }

    /// [`Dataset::create_index`], reporting (stage, done, total) to
    /// `progress` while it runs (k-means iterations, rows assigned, rows
    /// written).
    pub fn create_index_with_progress(
        &mut self,
        column: Option<&str>,
        params: IndexParams,
        progress: &mut dyn FnMut(&str, usize, usize),
    ) -> Result<IndexSegmentMeta> {
        let (column, dim, metric) = self.schema().vector_column(column)?;
        let column = column.to_string();
        validate_params(&params, dim, self.count_rows())?;
        let fragments = self.fragments()?;
        let (meta, _) = build_segment(
            &self.root, &column, dim, metric, &params, &fragments, None, progress,
        )?;
        self.commit_indices("create_index", &column, false, vec![meta.clone()])?;
        Ok(meta)
    }

    /// Indexes the fragments no segment covers yet, per indexed column, as
    /// delta segments that reuse the existing centroids and quantizers.
    /// Returns the new segments (none when everything is indexed).
    pub fn optimize(
        &mut self,
        progress: &mut dyn FnMut(&str, usize, usize),
    ) -> Result<Vec<IndexSegmentMeta>> {
        let mut columns: Vec<String> = self
            .manifest
            .indices
            .iter()
            .map(|m| m.column.clone())
            .collect();
        // Segments of one column need not be adjacent in the manifest.
        columns.sort();
        columns.dedup();
        let fragments = self.fragments()?;
        let mut built = Vec::new();
        for column in columns {
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
            let (_, dim, _) = self.schema().vector_column(Some(&column))?;
            let (meta, _) = build_segment(
                &self.root,
                &column,
                dim,
                base.meta.metric,
                &base.meta.params,
                &todo,
                Some((&base.model, &base.meta.trained_in)),
                progress,
            )?;
            built.push(meta);
        }
        if built.is_empty() {
            return Ok(built);
        }
        let column = built[0].column.clone();
        self.commit_indices("optimize", &column, true, built.clone())?;
        Ok(built)
    }

    /// Retrains the index of `column` over all its rows with the parameters
    /// it was built with, replacing every segment (base and deltas).
    pub fn reindex(
        &mut self,
        column: Option<&str>,
        progress: &mut dyn FnMut(&str, usize, usize),
    ) -> Result<IndexSegmentMeta> {
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
        self.create_index_with_progress(Some(&column), params, progress)
    }
}
