//! A versioned dataset: open, create, check out, read rows; writes in
//! [`write`], searches in [`search`], index management in [`index`].
//!
//! A [`Dataset`] handle is pinned to one version (a snapshot). Writes build
//! the next version's files, then publish its manifest atomically; the handle
//! that wrote moves to the new version, other handles keep theirs. Every
//! handle belongs to a [`Session`], whose caches, scan pool and config it
//! uses.

mod index;
mod prewarm;
mod retention;
mod search;
mod splits;
mod write;

pub use prewarm::{PrewarmPartitions, PrewarmReport};
pub use retention::{Cleanup, ORPHAN_MIN_AGE};
pub use splits::Split;
pub use write::{IntoRecordBatch, StagedCommit};

use crate::config::Config;
use crate::db::session::Session;
use crate::error::{Error, Result};
use crate::exec;
use crate::index::ivf::INDICES_DIR;
use crate::index::IndexSegmentMeta;
use crate::progress::Progress;
use crate::query::ScalarValue;
use crate::storage::deletions::DELETIONS_DIR;
use crate::storage::fragment::DATA_DIR;
use crate::storage::manifest::list_versions_as_of;
use crate::storage::manifest::{
    commit_manifest, list_versions, now_ms, read_manifest, sync_dir, Manifest, FORMAT_VERSION,
    VERSIONS_DIR,
};
use crate::storage::schema::Schema;
use crate::storage::{DatasetRoot, FragmentView};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A handle on one version of a dataset directory.
#[derive(Clone, Debug)]
pub struct Dataset {
    root: DatasetRoot,
    manifest: Arc<Manifest>,
    schema: Arc<Schema>,
    session: Session,
    progress: Option<Progress>,
    /// This handle's hold on its version (see [`Dataset::cleanup`]).
    _pin: Arc<retention::VersionPin>,
}

/// What a write committed: every write ([`Dataset::append`],
/// [`Dataset::delete`], [`Dataset::create_index`], [`Dataset::optimize`],
/// [`Dataset::reindex`]) answers one.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Commit {
    /// The version the dataset is at afterwards (unchanged when the write
    /// had nothing to do: a delete matching no row, an optimize with
    /// nothing unindexed).
    pub version: u64,
    /// Rows appended, deleted or indexed.
    pub rows: u64,
    /// Index segments built (index writes only).
    pub segments: Vec<IndexSegmentMeta>,
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
        let root = session.locate(root.as_ref())?;
        if root.remote_side().is_some() {
            if list_versions_as_of(&root, true).is_ok() {
                return Err(Error::DatasetExists(PathBuf::from(root.uri())));
            }
        } else if root.join(VERSIONS_DIR).exists() {
            return Err(Error::DatasetExists(root.to_path_buf()));
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
            commit_nonce: None,
            crc32: None,
        };
        match commit_manifest(&root, &manifest) {
            // Another process created it between the check and the commit.
            Err(Error::CommitConflict { .. }) => {
                return Err(Error::DatasetExists(PathBuf::from(root.uri())))
            }
            other => other?,
        }
        Ok(Dataset::from_manifest(root, manifest, session.clone()))
    }

    fn from_manifest(root: DatasetRoot, manifest: Manifest, session: Session) -> Dataset {
        let pin = retention::VersionPin::new(&root, manifest.version);
        Dataset::pinned(root, manifest, session, pin)
    }

    fn pinned(
        root: DatasetRoot,
        manifest: Manifest,
        session: Session,
        pin: Arc<retention::VersionPin>,
    ) -> Dataset {
        Dataset {
            _pin: pin,
            root,
            schema: Arc::new(manifest.schema.clone()),
            manifest: Arc::new(manifest),
            session,
            progress: None,
        }
    }

    fn with_manifest(&self, manifest: Manifest) -> Dataset {
        let pin = retention::VersionPin::new(&self.root, manifest.version);
        self.with_pinned_manifest(manifest, pin)
    }

    fn with_pinned_manifest(&self, manifest: Manifest, pin: Arc<retention::VersionPin>) -> Dataset {
        let schema = if manifest.schema == *self.schema {
            self.schema.clone()
        } else {
            Arc::new(manifest.schema.clone())
        };
        Dataset {
            _pin: pin,
            root: self.root.clone(),
            manifest: Arc::new(manifest),
            schema,
            session: self.session.clone(),
            progress: self.progress.clone(),
        }
    }

    /// Is there a dataset (a `_versions/` directory) in the local
    /// directory `root`? (For any location, URLs included, see
    /// [`Session::exists`].)
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
        let root = session.locate(root.as_ref())?;
        if root.remote_side().is_none() && !root.exists() {
            return Err(Error::DatasetNotFound(root.to_path_buf()));
        }
        // The version is pinned before its manifest is read, so that a
        // cleanup either keeps it or has removed it (then a newer one is
        // the latest: try again).
        let mut tries = 0;
        loop {
            let latest = *list_versions(&root)?
                .last()
                .ok_or_else(|| Error::NotADataset(root.to_path_buf()))?;
            let pin = retention::VersionPin::new(&root, latest);
            match read_manifest(&root, latest) {
                Ok(manifest) => {
                    within_limits(&manifest, session.config())?;
                    return Ok(Dataset::pinned(root, manifest, session.clone(), pin));
                }
                Err(Error::VersionNotFound { .. }) if tries < 3 => tries += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// A handle on `version` of the same dataset (sharing loaded fragments).
    pub fn checkout(&self, version: u64) -> Result<Dataset> {
        if version == self.manifest.version {
            return Ok(self.clone());
        }
        // Pinned before the manifest is read (see `Dataset::cleanup`).
        let pin = retention::VersionPin::new(&self.root, version);
        let manifest = read_manifest(&self.root, version)?;
        within_limits(&manifest, self.session.config())?;
        Ok(self.with_pinned_manifest(manifest, pin))
    }

    /// A handle on the newest committed version (on object storage, or
    /// with other processes writing, as listed at most
    /// `storage.refresh_ms` ago).
    pub fn checkout_latest(&self) -> Result<Dataset> {
        let latest = *list_versions(&self.root)?
            .last()
            .ok_or_else(|| Error::NotADataset(self.root.to_path_buf()))?;
        self.checkout(latest)
    }

    /// The dataset's local directory (for a dataset on object storage,
    /// its local mirror in the disk cache).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the dataset is: its URL, or its directory.
    pub fn uri(&self) -> String {
        self.root.uri()
    }

    /// The version this handle sees.
    pub fn version(&self) -> u64 {
        self.manifest.version
    }

    /// The schema.
    pub fn schema(&self) -> &Schema {
        &self.manifest.schema
    }

    /// The manifest of this version: its fragments, index segments and
    /// history line, as recorded on disk.
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
    /// on demand through the session's column cache. Internal (tests).
    #[doc(hidden)]
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

    /// This handle reporting the progress of its long writes (append,
    /// index builds, optimize) to `progress`. Cheap: the handle is shared.
    pub fn with_progress(mut self, progress: Progress) -> Dataset {
        self.progress = Some(progress);
        self
    }

    /// The progress callback of this handle's writes, if any.
    pub(crate) fn progress(&self) -> Option<&Progress> {
        self.progress.as_ref()
    }

    /// This handle without a progress callback.
    pub(crate) fn without_progress(mut self) -> Dataset {
        self.progress = None;
        self
    }

    /// The commit that leaves this handle where it is now.
    fn commit_answer(&self, rows: u64, segments: Vec<IndexSegmentMeta>) -> Commit {
        Commit {
            version: self.version(),
            rows,
            segments,
        }
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
}
