//! Ingest: reading an input file into a dataset, creating it on first use.
//!
//! The readers (`storage::input`) stream the input in chunks; this module
//! opens or creates the dataset, appends every chunk as one new version and
//! reports the input bytes read to the options' [`crate::Progress`]. A failed ingest commits
//! nothing, and a failed first ingest leaves no dataset behind.

use crate::config::Config;
use crate::db::dataset::{Commit, Dataset};
use crate::db::session::Session;
use crate::error::{Error, Result};
use crate::kernel::Metric;
use crate::progress::Progress;
use crate::storage::input::{infer_schema, ChunkReader, Format, IngestOptions};
use crate::storage::manifest::VERSIONS_DIR;
use crate::storage::ColumnType;
use std::path::Path;

/// What an ingest did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IngestReport {
    /// Rows appended.
    pub rows: u64,
    /// The version committed.
    pub version: u64,
    /// True when the dataset was created by this ingest.
    pub created: bool,
}

/// Ingests `input` into the dataset at `dataset_dir`, creating it when it
/// does not exist. All rows are committed as one new version, or none.
pub fn ingest(
    dataset_dir: &Path,
    input: &Path,
    opts: &IngestOptions,
    config: &Config,
) -> Result<IngestReport> {
    let format = Format::of(input)?;
    if opts.meta.is_some() && !matches!(format, Format::Fvecs | Format::Npy) {
        return Err(Error::InvalidArgument(
            "a metadata file (IngestOptions::meta) only applies to .fvecs and .npy input".into(),
        ));
    }
    // A path or an object-storage URL.
    let session = Session::new(config.clone());
    let existing = if session.exists(dataset_dir)? {
        Some(session.open(dataset_dir)?)
    } else {
        None
    };
    if let (Some(ds), Some(asked)) = (&existing, opts.metric) {
        for col in &ds.schema().columns {
            if let ColumnType::Vector { metric, .. } = col.ty {
                if metric != asked {
                    return Err(Error::InvalidArgument(format!(
                        "{}: vector column '{}' uses {metric}; the metric asked for, {asked}, \
                         disagrees (a dataset's metric is fixed when it is created)",
                        dataset_dir.display(),
                        col.name
                    )));
                }
            }
        }
    }
    let dir_existed = dataset_dir.exists();
    let total_bytes = std::fs::metadata(input)
        .map_err(|e| Error::io(input, e))?
        .len();
    let progress = |done: u64| Progress::maybe(opts.progress.as_ref(), "ingest", done, total_bytes);
    let mut reader = ChunkReader::open(format, input, opts, config.ingest.chunk_rows)?;
    let first = reader.next_chunk()?;
    let Some(first) = first else {
        return Err(Error::malformed(input, "the input holds no rows"));
    };
    let created = existing.is_none();
    let mut dataset = match existing {
        Some(d) => d,
        None => {
            let inferred = infer_schema(&first, opts.metric.unwrap_or(Metric::L2))?;
            session.create(dataset_dir, inferred)?
        }
    };
    let appended = append_all(&mut dataset, first, &mut reader, &progress);
    let rows = match appended {
        Ok(commit) => commit.rows,
        Err(e) => {
            if created {
                remove_created(dataset_dir, dir_existed);
            }
            return Err(e);
        }
    };
    Ok(IngestReport {
        rows,
        version: dataset.version(),
        created,
    })
}

/// Appends the first chunk and the rest of `reader` as one commit.
fn append_all(
    dataset: &mut Dataset,
    first: crate::storage::input::Chunk,
    reader: &mut ChunkReader,
    progress: &dyn Fn(u64),
) -> Result<Commit> {
    let schema = dataset.schema().clone();
    let first = first.into_batch(&schema)?;
    let rest = std::iter::from_fn(|| {
        progress(reader.bytes_read());
        match reader.next_chunk() {
            Ok(Some(chunk)) => Some(chunk.into_batch(&schema)),
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        }
    });
    let commit = dataset.append(std::iter::once(Ok(first)).chain(rest))?;
    progress(reader.bytes_read());
    Ok(commit)
}

/// Removes what creating a dataset at `dir` made (its subdirectories, and
/// `dir` itself when it did not exist before), so that a failed first
/// ingest leaves nothing that fixes the dimension or metric.
fn remove_created(dir: &Path, dir_existed: bool) {
    use crate::index::ivf::INDICES_DIR;
    use crate::storage::{deletions::DELETIONS_DIR, fragment::DATA_DIR};
    for sub in [VERSIONS_DIR, DATA_DIR, DELETIONS_DIR, INDICES_DIR] {
        let _ = std::fs::remove_dir_all(dir.join(sub));
    }
    if !dir_existed {
        let _ = std::fs::remove_dir(dir);
    }
}
