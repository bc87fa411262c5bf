//! Retention: removing old versions and the files only they use.
//!
//! Every file a version names is immutable, and later versions share the
//! files they did not change, so a file may be deleted only when no kept
//! version names it. The versions kept: the newest `keep`, every version a
//! [`Dataset`] handle of this process holds (a pin, counted per handle and
//! its clones, released on drop), and every version younger than
//! `min_age` (another process may be reading it). Manifests go first, so
//! no one opens a removed version afterwards; then the files that only
//! removed versions named. Files no manifest names (an append in flight)
//! are never touched.

use super::Dataset;
use crate::error::{Error, Result};
use crate::index::ivf::INDICES_DIR;
use crate::storage::deletions::DELETIONS_DIR;
use crate::storage::fragment::DATA_DIR;
use crate::storage::manifest::{
    list_versions, manifest_path, manifest_rel, now_ms, read_manifest, Manifest,
};
use crate::storage::DatasetRoot;
use serde::Serialize;
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

/// What a cleanup removed.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Cleanup {
    /// Versions whose manifests were removed.
    pub versions_removed: Vec<u64>,
    /// Fragment, deletion and index files (or segment directories) removed.
    pub files_removed: usize,
    /// Their bytes.
    pub bytes_removed: u64,
}

/// Versions held by live handles in this process: (canonical root,
/// version) → handles.
static PINS: LazyLock<Mutex<HashMap<(PathBuf, u64), usize>>> = LazyLock::new(Mutex::default);

fn pins() -> std::sync::MutexGuard<'static, HashMap<(PathBuf, u64), usize>> {
    PINS.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn canonical(root: &Path) -> PathBuf {
    std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf())
}

/// A handle's hold on its version: shared by the handle's clones,
/// released when the last one is dropped. Taken before the version's
/// manifest is read (see [`Dataset::cleanup`]).
#[derive(Debug)]
pub(crate) struct VersionPin {
    key: (PathBuf, u64),
}

impl VersionPin {
    pub(crate) fn new(root: &Path, version: u64) -> Arc<VersionPin> {
        let key = (canonical(root), version);
        *pins().entry(key.clone()).or_insert(0) += 1;
        Arc::new(VersionPin { key })
    }
}

impl Drop for VersionPin {
    fn drop(&mut self) {
        let mut pins = pins();
        if let Some(n) = pins.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                pins.remove(&self.key);
            }
        }
    }
}

/// The files a version names (index segments as their directories), by
/// path inside the dataset.
fn files_of(m: &Manifest) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for f in &m.fragments {
        out.insert(format!("{DATA_DIR}/{}", f.file));
        if let Some(d) = &f.deletion_file {
            out.insert(format!("{DELETIONS_DIR}/{d}"));
        }
    }
    for s in &m.indices {
        out.insert(format!("{INDICES_DIR}/{}", s.id));
    }
    out
}

fn size_of(path: &Path) -> u64 {
    if path.is_dir() {
        std::fs::read_dir(path)
            .map(|d| d.flatten().map(|e| size_of(&e.path())).sum())
            .unwrap_or(0)
    } else {
        std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
    }
}

/// Removes the file or segment directory `rel`; its bytes, or `None` when
/// it was gone already.
fn remove(root: &DatasetRoot, rel: &str) -> Result<Option<u64>> {
    if let Some(remote) = root.remote_side() {
        // A segment is a folder of objects; any other file one object.
        let objects = if rel.starts_with(INDICES_DIR) {
            remote.list(rel)?
        } else {
            remote
                .size(rel)?
                .map(|b| (rel.to_string(), b))
                .into_iter()
                .collect()
        };
        if objects.is_empty() {
            return Ok(None);
        }
        let mut bytes = 0;
        for (object, size) in objects {
            remote.delete(&object)?;
            bytes += size;
        }
        let _ = std::fs::remove_dir_all(root.path_of(rel));
        return Ok(Some(bytes));
    }
    let path = root.path_of(rel);
    let bytes = size_of(&path);
    let gone = if path.is_dir() {
        std::fs::remove_dir_all(&path)
    } else {
        std::fs::remove_file(&path)
    };
    match gone {
        Ok(()) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// Removes the manifest of `version`; false when it was gone already.
fn remove_manifest(root: &DatasetRoot, version: u64) -> Result<bool> {
    if let Some(remote) = root.remote_side() {
        remote.delete(&manifest_rel(version))?;
        remote.forget_versions();
        return Ok(true);
    }
    let path = manifest_path(root, version);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io(&path, e)),
    }
}

impl Dataset {
    /// Removes the versions older than the newest `keep` (at least one is
    /// always kept) that no handle of this process holds and that are older
    /// than `min_age`, and then the files only they named. Searches on kept
    /// versions are unaffected; a removed version can no longer be checked
    /// out.
    pub fn cleanup(&self, keep: usize, min_age: Duration) -> Result<Cleanup> {
        let keep = keep.max(1);
        let versions = list_versions(&self.root)?;
        let newest: BTreeSet<u64> = versions.iter().rev().take(keep).copied().collect();
        let young_after = now_ms().saturating_sub(min_age.as_millis() as u64);
        // Each version with its manifest (None: already removed by a
        // concurrent cleanup) and when its successor replaced it.
        let mut read: Vec<(u64, Option<Manifest>)> = Vec::with_capacity(versions.len());
        for &v in &versions {
            match read_manifest(&self.root, v) {
                Ok(m) => read.push((v, Some(m))),
                Err(Error::VersionNotFound { .. }) => read.push((v, None)),
                Err(e) => return Err(e),
            }
        }
        let root = canonical(&self.root);
        // Pins are read, and manifests removed, under the pin lock: a
        // handle that pins a version first and reads its manifest second
        // either is seen here or finds the manifest gone.
        let pins = pins();
        let pinned: BTreeSet<u64> = pins
            .keys()
            .filter(|(r, _)| *r == root)
            .map(|(_, v)| *v)
            .collect();
        let mut kept_files = BTreeSet::new();
        let mut removed: Vec<(u64, Manifest)> = Vec::new();
        let mut replaced_at = u64::MAX; // the latest is still current
        for (v, manifest) in read.into_iter().rev() {
            let Some(manifest) = manifest else { continue };
            // A version is young while it was the latest less than
            // `min_age` ago: another process may have opened it just then.
            let young = replaced_at > young_after;
            replaced_at = manifest.timestamp_ms;
            if newest.contains(&v) || pinned.contains(&v) || young {
                kept_files.extend(files_of(&manifest));
            } else {
                removed.push((v, manifest));
            }
        }
        let mut report = Cleanup::default();
        let mut doomed = BTreeSet::new();
        removed.sort_by_key(|(v, _)| *v);
        for (v, manifest) in &removed {
            // A manifest already gone was removed by a concurrent cleanup.
            if remove_manifest(&self.root, *v)? {
                report.versions_removed.push(*v);
            }
            doomed.extend(files_of(manifest));
        }
        drop(pins);
        for rel in doomed.difference(&kept_files) {
            // A file already gone was removed by an earlier, interrupted
            // cleanup.
            if let Some(bytes) = remove(&self.root, rel)? {
                report.files_removed += 1;
                report.bytes_removed += bytes;
            }
        }
        Ok(report)
    }
}
