//! Where a dataset's files are: a local directory, or a URL on object
//! storage read through a local mirror (see [`crate::storage::remote`]).
//!
//! A [`DatasetRoot`] dereferences to the local directory (the dataset
//! itself, or the mirror), so code that names files keeps joining paths;
//! code that *reads* a file asks the root to [`open`](DatasetRoot::open)
//! or [`read`](DatasetRoot::read) it (which downloads it first when the
//! dataset is remote), and code that writes one tells the root it
//! [`wrote`](DatasetRoot::wrote) it (so the commit uploads it).

use crate::error::Result;
use crate::storage::remote::Remote;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A dataset's location: its local directory and, for a dataset on
/// object storage, the remote it mirrors.
#[derive(Clone, Debug)]
pub struct DatasetRoot {
    local: PathBuf,
    remote: Option<Arc<Remote>>,
}

impl std::ops::Deref for DatasetRoot {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.local
    }
}

impl AsRef<Path> for DatasetRoot {
    fn as_ref(&self) -> &Path {
        &self.local
    }
}

impl DatasetRoot {
    /// A dataset in the local directory `dir`.
    pub fn local(dir: impl Into<PathBuf>) -> DatasetRoot {
        DatasetRoot {
            local: dir.into(),
            remote: None,
        }
    }

    /// A dataset on object storage, mirrored locally.
    pub fn remote(remote: Arc<Remote>) -> DatasetRoot {
        DatasetRoot {
            local: remote.mirror().to_path_buf(),
            remote: Some(remote),
        }
    }

    /// The object-storage side, when the dataset is remote.
    pub fn remote_side(&self) -> Option<&Arc<Remote>> {
        self.remote.as_ref()
    }

    /// The dataset's URL (remote) or directory (local), for messages.
    pub fn uri(&self) -> String {
        match &self.remote {
            Some(r) => r.url().to_string(),
            None => self.local.display().to_string(),
        }
    }

    /// The local path of `rel` (a path inside the dataset, `/`-separated).
    pub fn path_of(&self, rel: &str) -> PathBuf {
        self.local.join(rel)
    }

    /// Opens `rel` for reading, downloading it first when the dataset is
    /// remote (through the disk cache). A missing file is `NotFound` (the
    /// caller words it).
    pub fn open(&self, rel: &str) -> Result<std::io::Result<std::fs::File>> {
        match &self.remote {
            None => Ok(std::fs::File::open(self.local.join(rel))),
            Some(remote) => Ok(remote
                .open(rel)?
                .ok_or_else(|| std::io::ErrorKind::NotFound.into())),
        }
    }

    /// Reads `rel` whole (see [`DatasetRoot::open`]).
    pub fn read(&self, rel: &str) -> Result<std::io::Result<Vec<u8>>> {
        Ok(self.open(rel)?.and_then(|mut f| {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut f, &mut bytes).map(|_| bytes)
        }))
    }

    /// Opens `rel` for reads by byte range: a local file (`pread`), or for
    /// a remote dataset the object itself, read by ranged GETs (each range
    /// kept in the disk cache), so that reading one partition of a large
    /// index file never downloads the rest. A missing file is `NotFound`.
    pub fn open_ranged(&self, rel: &str) -> Result<std::io::Result<RangedFile>> {
        match &self.remote {
            None => Ok(std::fs::File::open(self.local.join(rel)).map(RangedFile::Local)),
            Some(remote) => Ok(match remote.size(rel)? {
                Some(len) => Ok(RangedFile::Remote {
                    remote: remote.clone(),
                    rel: rel.to_string(),
                    len,
                }),
                None => Err(std::io::ErrorKind::NotFound.into()),
            }),
        }
    }

    /// Byte ranges `(offset, length)` of `rel`, in order: positioned reads
    /// of a local file, or for a remote dataset the ranges the disk cache
    /// lacks fetched together (neighbours merged into one GET, several
    /// GETs in flight). A missing file is `NotFound`, a range past its end
    /// `UnexpectedEof`.
    pub fn read_ranges(
        &self,
        rel: &str,
        ranges: &[(u64, u64)],
    ) -> Result<std::io::Result<Vec<Vec<u8>>>> {
        match &self.remote {
            None => Ok(std::fs::File::open(self.local.join(rel)).and_then(|f| {
                ranges
                    .iter()
                    .map(|&(offset, len)| {
                        let mut buf = vec![0u8; len as usize];
                        std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, offset)
                            .map(|()| buf)
                    })
                    .collect()
            })),
            Some(remote) => Ok(remote
                .read_ranges(rel, ranges)?
                .ok_or_else(|| std::io::ErrorKind::NotFound.into())),
        }
    }

    /// Fetches byte ranges of `rel` into the disk cache (see
    /// [`DatasetRoot::read_ranges`]) without reading them; nothing to do
    /// for a local dataset. `false`: a remote dataset has no such file.
    pub fn prefetch_ranges(&self, rel: &str, ranges: &[(u64, u64)]) -> Result<bool> {
        match &self.remote {
            None => Ok(true),
            Some(remote) => remote.fetch_ranges(rel, ranges),
        }
    }

    /// Records that `rel` was written (finished and synced) locally: a
    /// remote dataset uploads it with the commit that names it.
    pub fn wrote(&self, rel: &str) {
        if let Some(remote) = &self.remote {
            remote.wrote(rel);
        }
    }
}

/// A file read by byte ranges (see [`DatasetRoot::open_ranged`]).
#[derive(Debug)]
pub enum RangedFile {
    /// A local file.
    Local(std::fs::File),
    /// An object on storage.
    Remote {
        /// Its dataset.
        remote: Arc<Remote>,
        /// Its path inside the dataset.
        rel: String,
        /// Its length.
        len: u64,
    },
}

impl RangedFile {
    /// The file's length in bytes.
    pub fn len(&self) -> std::io::Result<u64> {
        match self {
            RangedFile::Local(f) => f.metadata().map(|m| m.len()),
            RangedFile::Remote { len, .. } => Ok(*len),
        }
    }

    /// Is the file an object on storage (read by ranged GETs)?
    pub fn is_remote(&self) -> bool {
        matches!(self, RangedFile::Remote { .. })
    }

    /// Is the file empty?
    pub fn is_empty(&self) -> std::io::Result<bool> {
        self.len().map(|n| n == 0)
    }

    /// Fetches the ranges `ranges` into the disk cache ahead of their reads
    /// (merged and concurrent, see [`DatasetRoot::read_ranges`]): a
    /// remote file's share of a batch's reads in few round trips. Nothing
    /// to do for a local file; ranges past the end are left to the read
    /// that reports them.
    pub fn prefetch(&self, ranges: &[(u64, u64)]) -> Result<()> {
        if let RangedFile::Remote { remote, rel, len } = self {
            let inside: Vec<(u64, u64)> = ranges
                .iter()
                .copied()
                .filter(|&(offset, n)| offset.checked_add(n).is_some_and(|end| end <= *len))
                .collect();
            remote.fetch_ranges(rel, &inside)?;
        }
        Ok(())
    }

    /// Fills `buf` from `offset` (a range past the end is
    /// `UnexpectedEof`). Storage failures are the outer error.
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<std::io::Result<()>> {
        match self {
            RangedFile::Local(f) => Ok(std::os::unix::fs::FileExt::read_exact_at(f, buf, offset)),
            RangedFile::Remote { remote, rel, len } => {
                let end = offset.checked_add(buf.len() as u64);
                if end.is_none_or(|end| end > *len) {
                    return Ok(Err(std::io::ErrorKind::UnexpectedEof.into()));
                }
                let Some(bytes) = remote.read_range(rel, offset, buf.len() as u64)? else {
                    return Ok(Err(std::io::ErrorKind::NotFound.into()));
                };
                if bytes.len() != buf.len() {
                    return Ok(Err(std::io::ErrorKind::UnexpectedEof.into()));
                }
                buf.copy_from_slice(&bytes);
                Ok(Ok(()))
            }
        }
    }
}
