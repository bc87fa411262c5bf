//! Writes: append (staged, then committed) and delete. Each builds the
//! next version's files, then publishes its manifest atomically.

use super::{Commit, Dataset};
use crate::error::{Error, Result};
use crate::progress::Progress;
use crate::storage::conform::conform_batch;
use crate::storage::deletions::{write_deletions, DELETIONS_DIR};
use crate::storage::fragment::{FragmentWriter, DATA_DIR};
use crate::storage::manifest::{commit_manifest, sync_dir, Manifest};
use crate::storage::FragmentView;
use arrow_array::RecordBatch;

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

/// What [`Dataset::append`] takes per batch: a [`RecordBatch`], or
/// `shoal::Result<RecordBatch>` (a reader's items, whose first error stops
/// the append with nothing committed).
pub trait IntoRecordBatch {
    /// The batch, or the error that stopped reading it.
    fn into_record_batch(self) -> Result<RecordBatch>;
}

impl IntoRecordBatch for RecordBatch {
    fn into_record_batch(self) -> Result<RecordBatch> {
        Ok(self)
    }
}

impl IntoRecordBatch for Result<RecordBatch> {
    fn into_record_batch(self) -> Result<RecordBatch> {
        self
    }
}

/// Fills new fragment files of up to `ingest.rows_per_fragment` rows from
/// a stream of batches, adding each finished fragment (and the ids it
/// takes) to the next version's manifest: what append and compaction
/// write with.
struct FragmentFiller<'a> {
    root: &'a crate::storage::DatasetRoot,
    per_fragment: u64,
    paged: bool,
    writer: Option<FragmentWriter>,
}

impl<'a> FragmentFiller<'a> {
    fn new(dataset: &'a Dataset) -> Self {
        FragmentFiller {
            root: &dataset.root,
            per_fragment: dataset.config().ingest.rows_per_fragment as u64,
            paged: dataset.config().storage.fragment_layout == crate::config::FragmentLayout::Paged,
            writer: None,
        }
    }

    /// Writes `batch` (already in the schema's stored form), starting a
    /// new fragment whenever the open one is full.
    fn write(&mut self, manifest: &mut Manifest, batch: &RecordBatch) -> Result<()> {
        let mut start = 0usize;
        while start < batch.num_rows() {
            let w = match self.writer.as_mut() {
                Some(w) => w,
                None => {
                    let id = manifest.next_fragment_id;
                    manifest.next_fragment_id = id
                        .checked_add(1)
                        .ok_or_else(|| Error::Internal("fragment ids exhausted".into()))?;
                    self.writer.insert(FragmentWriter::create(
                        self.root,
                        id,
                        &manifest.schema,
                        self.paged,
                    )?)
                }
            };
            let room = (self.per_fragment - w.rows()) as usize;
            let take = room.min(batch.num_rows() - start);
            w.write(&batch.slice(start, take))?;
            start += take;
            if w.rows() == self.per_fragment {
                if let Some(full) = self.writer.take() {
                    manifest.fragments.push(full.finish()?);
                }
            }
        }
        Ok(())
    }

    /// Finishes the open fragment, if it holds rows, and syncs the data
    /// directory.
    fn finish(mut self, manifest: &mut Manifest) -> Result<()> {
        if let Some(w) = self.writer.take() {
            if w.rows() > 0 {
                manifest.fragments.push(w.finish()?);
            }
        }
        sync_dir(&self.root.join(DATA_DIR))
    }
}

impl Dataset {
    /// Writes `batches` as new fragments of the next version without
    /// publishing it. Batches are conformed to the schema; rows without an
    /// `id` get the running row count of the dataset.
    pub fn stage_append<I>(&self, batches: I) -> Result<StagedCommit>
    where
        I: IntoIterator<Item = Result<RecordBatch>>,
    {
        let mut manifest = self.manifest.next("append");
        let mut filler = FragmentFiller::new(self);
        let mut appended = 0u64;
        for batch in batches {
            let batch = batch?;
            let first_id = i64::try_from(manifest.rows_appended)
                .map_err(|_| Error::Internal("row count overflows int64".into()))?;
            let batch = conform_batch(&manifest.schema, &batch, first_id, appended)?;
            filler.write(&mut manifest, &batch)?;
            manifest.rows_appended += batch.num_rows() as u64;
            appended += batch.num_rows() as u64;
        }
        if appended == 0 {
            return Err(Error::InvalidArgument(
                "nothing to append: the input has no rows".into(),
            ));
        }
        filler.finish(&mut manifest)?;
        Ok(StagedCommit {
            dataset: self.clone(),
            manifest,
        })
    }

    /// Appends `batches` (Arrow record batches, or the results of
    /// reading them) as a new version; the commit counts the rows added.
    pub fn append<I>(&mut self, batches: I) -> Result<Commit>
    where
        I: IntoIterator,
        I::Item: IntoRecordBatch,
    {
        let before = self.manifest.rows_appended;
        *self = self
            .stage_append(batches.into_iter().map(IntoRecordBatch::into_record_batch))?
            .commit()?;
        Ok(self.commit_answer(self.manifest.rows_appended - before, Vec::new()))
    }

    /// Deletes the visible rows matching `filter` (SQL) as a new version;
    /// the commit counts the rows deleted. Deleting nothing commits
    /// nothing (the version stays).
    pub fn delete(&mut self, filter: &str) -> Result<Commit> {
        let filter = crate::query::Filter::parse(filter, self.schema())?;
        let mut manifest = self.manifest.next("delete");
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
            return Ok(self.commit_answer(0, Vec::new()));
        }
        sync_dir(&self.root.join(DELETIONS_DIR))?;
        commit_manifest(&self.root, &manifest)?;
        *self = self.with_manifest(manifest);
        Ok(self.commit_answer(total, Vec::new()))
    }

    /// The small fragments (fewer visible rows than a 64th of
    /// `rows_per_fragment`) that no index segment covers and that come after
    /// every other fragment: what [`Dataset::compact`] would merge. Merged
    /// fragments stop counting as small once they pass that size, so
    /// repeated compaction rewrites a bounded number of rows each time, not
    /// everything appended so far.
    pub(crate) fn compactable_tail(&self) -> Vec<u32> {
        let per_fragment = (self.config().ingest.rows_per_fragment as u64 / 64).max(2);
        let covered = |id: u32| {
            self.manifest
                .indices
                .iter()
                .any(|s| s.fragments.contains(&id))
        };
        let mut tail: Vec<u32> = self
            .manifest
            .fragments
            .iter()
            .rev()
            .take_while(|f| !covered(f.id) && f.rows - f.deleted_rows < per_fragment)
            .map(|f| f.id)
            .collect();
        tail.reverse();
        tail
    }

    /// Merges the small fragments at the end of the dataset that no index
    /// covers (what many small appends leave; see `compactable_tail` for
    /// "small") into as few fragments of up to `ingest.rows_per_fragment`
    /// rows as they fill, leaving deleted
    /// rows out, as a new version; the commit counts the rows rewritten
    /// (0, committing nothing, when fewer than two fragments qualify).
    ///
    /// Only a tail run is merged, so the merged rows keep their order and
    /// stay after every other row: searches answer exactly as before
    /// (ties included; row ids change), and index coverage is untouched
    /// (the merged fragments are unindexed, as the originals were, until
    /// [`Dataset::optimize`]). Old versions still name the old files.
    pub fn compact(&mut self) -> Result<Commit> {
        let tail = self.compactable_tail();
        if tail.len() < 2 {
            return Ok(self.commit_answer(0, Vec::new()));
        }
        let views: Vec<_> = self
            .fragments()?
            .into_iter()
            .filter(|v| tail.contains(&v.meta.id))
            .collect();
        let total: u64 = views
            .iter()
            .map(|v| (v.rows() as u64) - v.meta.deleted_rows)
            .sum();
        let mut manifest = self.manifest.next("compact");
        manifest.fragments.retain(|f| !tail.contains(&f.id));
        let mut filler = FragmentFiller::new(self);
        let mut written = 0u64;
        for (n, view) in views.iter().enumerate() {
            for batch in view.visible_batches()? {
                filler.write(&mut manifest, &batch)?;
                written += batch.num_rows() as u64;
            }
            Progress::maybe(self.progress(), "compact", n as u64 + 1, views.len() as u64);
        }
        filler.finish(&mut manifest)?;
        if written != total {
            return Err(Error::Internal(format!(
                "compaction read {written} rows where the manifest counts {total}"
            )));
        }
        commit_manifest(&self.root, &manifest)?;
        *self = self.with_manifest(manifest);
        Ok(self.commit_answer(written, Vec::new()))
    }

    /// Rewrites every fragment still in the Arrow IPC layout into a paged
    /// file with the same fragment id and the same rows, deleted ones
    /// included (so row ids, deletion files and index segments stay
    /// valid), as a new version; the rows rewritten (0, committing
    /// nothing, when none is left or `storage.fragment_layout` is
    /// `arrow_ipc`). Part of [`Dataset::optimize`].
    pub(crate) fn rewrite_arrow_fragments(&mut self) -> Result<u64> {
        if self.config().storage.fragment_layout != crate::config::FragmentLayout::Paged {
            return Ok(0);
        }
        let old: Vec<FragmentView> = self
            .fragments()?
            .into_iter()
            .filter(|v| v.meta.paged.is_none())
            .collect();
        if old.is_empty() {
            return Ok(0);
        }
        let mut manifest = self.manifest.next("rewrite_fragments");
        let mut rows = 0u64;
        for (n, view) in old.iter().enumerate() {
            let mut writer =
                FragmentWriter::create(&self.root, view.meta.id, &manifest.schema, true)?;
            view.for_each_stored_batch(|batch| writer.write(batch))?;
            if writer.rows() != view.meta.rows {
                return Err(Error::corrupt(
                    view.path(),
                    format!(
                        "holds {} rows, the manifest says {}",
                        writer.rows(),
                        view.meta.rows
                    ),
                ));
            }
            let new = writer.finish()?;
            let slot = manifest
                .fragments
                .iter_mut()
                .find(|f| f.id == view.meta.id)
                .ok_or_else(|| Error::Internal("rewritten fragment left the manifest".into()))?;
            slot.file = new.file;
            slot.checksum = new.checksum;
            slot.paged = new.paged;
            rows += new.rows;
            Progress::maybe(
                self.progress(),
                "rewrite fragments",
                n as u64 + 1,
                old.len() as u64,
            );
        }
        sync_dir(&self.root.join(DATA_DIR))?;
        commit_manifest(&self.root, &manifest)?;
        *self = self.with_manifest(manifest);
        Ok(rows)
    }
}
