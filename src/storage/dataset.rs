//! A versioned dataset: open, create, append, delete, check out, search.
//!
//! A [`Dataset`] handle is pinned to one version (a snapshot). Writes build
//! the next version's files, then publish its manifest atomically; the handle
//! that wrote moves to the new version, other handles keep theirs.

use crate::config::Config;
use crate::error::{Error, Result};
use crate::exec;
use crate::query::{BatchQuery, Query, SearchResults, ValidatedBatch};
use crate::storage::conform::conform_batch;
use crate::storage::deletions::{read_deletions, write_deletions, DELETIONS_DIR};
use crate::storage::fragment::{FragmentCache, FragmentWriter, LoadedFragment, DATA_DIR};
use crate::storage::manifest::{
    commit_manifest, list_versions, read_manifest, sync_dir, FragmentMeta, Manifest,
    FORMAT_VERSION, VERSIONS_DIR,
};
use crate::storage::schema::Schema;
use arrow_array::RecordBatch;
use roaring::RoaringBitmap;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A handle on one version of a dataset directory.
#[derive(Clone, Debug)]
pub struct Dataset {
    root: PathBuf,
    manifest: Arc<Manifest>,
    config: Arc<Config>,
    cache: Arc<FragmentCache>,
}

/// A fragment of a snapshot, loaded, with its deletions.
#[derive(Clone, Debug)]
pub struct FragmentView {
    /// The manifest entry.
    pub meta: FragmentMeta,
    /// The rows in memory.
    pub data: Arc<LoadedFragment>,
    /// Deleted offsets in this version, if any.
    pub deleted: Option<Arc<RoaringBitmap>>,
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
        Ok(Dataset {
            manifest: Arc::new(self.manifest),
            ..self.dataset
        })
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Dataset {
    /// Creates an empty dataset (version 1) at `root` with `schema`.
    pub fn create(root: impl AsRef<Path>, schema: Schema, config: Config) -> Result<Dataset> {
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
        for dir in [VERSIONS_DIR, DATA_DIR, DELETIONS_DIR] {
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
        };
        commit_manifest(&root, &manifest)?;
        Ok(Dataset {
            root,
            manifest: Arc::new(manifest),
            config: Arc::new(config),
            cache: Arc::default(),
        })
    }

    /// Opens the latest version with the default configuration.
    pub fn open(root: impl AsRef<Path>) -> Result<Dataset> {
        Dataset::open_with_config(root, Config::default())
    }

    /// Opens the latest version.
    pub fn open_with_config(root: impl AsRef<Path>, config: Config) -> Result<Dataset> {
        let root = root.as_ref().to_path_buf();
        let latest = *list_versions(&root)?
            .last()
            .ok_or_else(|| Error::NotADataset(root.clone()))?;
        let manifest = read_manifest(&root, latest)?;
        Ok(Dataset {
            root,
            manifest: Arc::new(manifest),
            config: Arc::new(config),
            cache: Arc::default(),
        })
    }

    /// A handle on `version` of the same dataset (sharing loaded fragments).
    pub fn checkout(&self, version: u64) -> Result<Dataset> {
        if version == self.manifest.version {
            return Ok(self.clone());
        }
        let manifest = read_manifest(&self.root, version)?;
        Ok(Dataset {
            manifest: Arc::new(manifest),
            ..self.clone()
        })
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

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
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

    /// Every fragment of this version, loaded, with its deletions.
    pub fn fragments(&self) -> Result<Vec<FragmentView>> {
        self.manifest
            .fragments
            .iter()
            .map(|meta| {
                let data = self.cache.get(&self.root, meta, &self.manifest.schema)?;
                let deleted = match &meta.deletion_file {
                    Some(file) => Some(
                        self.cache
                            .deletions(file, || read_deletions(&self.root, file))?,
                    ),
                    None => None,
                };
                Ok(FragmentView {
                    meta: meta.clone(),
                    data,
                    deleted,
                })
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
        let per_fragment = self.config.ingest.rows_per_fragment as u64;
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
            let matched = filter.evaluate(&view.data.scalars)?;
            let mut deleted = view.deleted.as_deref().cloned().unwrap_or_default();
            let before = deleted.len();
            deleted |= matched;
            let added = deleted.len() - before;
            if added > 0 {
                meta.deletion_file = Some(write_deletions(
                    &self.root,
                    meta.id,
                    manifest.version,
                    &deleted,
                )?);
                meta.deleted_rows = deleted.len();
                total += added;
            }
        }
        if total == 0 {
            return Ok(0);
        }
        sync_dir(&self.root.join(DELETIONS_DIR))?;
        commit_manifest(&self.root, &manifest)?;
        self.manifest = Arc::new(manifest);
        Ok(total)
    }

    /// Searches for one vector's nearest rows. The result has one entry in
    /// `hits`.
    pub fn search(&self, query: &Query) -> Result<SearchResults> {
        self.search_batch(&query.clone().into_batch())
    }

    /// Searches a batch of vectors in one shared pass.
    pub fn search_batch(&self, batch: &BatchQuery) -> Result<SearchResults> {
        let snapshot = match batch.version {
            Some(v) => self.checkout(v)?,
            None => self.clone(),
        };
        let validated = ValidatedBatch::new(batch, snapshot.schema(), &self.config.limits)?;
        let fragments = snapshot.fragments()?;
        let candidates = exec::exact::search(&fragments, &validated, self.config.scan_threads())?;
        let hits = exec::materialise::hits(&fragments, &candidates, &validated.projection)?;
        Ok(SearchResults {
            version: snapshot.version(),
            projection: validated.projection,
            hits,
        })
    }
}
