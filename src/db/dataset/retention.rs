//! Retention: removing old versions and the files only they use.
//!
//! Every file a version names is immutable, and later versions share the
//! files they did not change, so a file may be deleted only when no kept
//! version names it. The versions kept: the newest `keep`, every version a
//! [`Dataset`] handle of this process holds (a pin, counted per handle and
//! its clones, released on drop), and every version younger than
//! `min_age` (another process may be reading it). Manifests go first, so
//! no one opens a removed version afterwards; then the files that only
//! removed versions named. Files no manifest names are left by writes in
//! flight, or by writes that failed or lost a commit race: they are
//! removed once older than both `min_age` and [`ORPHAN_MIN_AGE`] (an
//! hour), when no write can still be about to commit them.

use super::Dataset;
use crate::error::{Error, Result};
use crate::index::ivf::INDICES_DIR;
use crate::storage::deletions::DELETIONS_DIR;
use crate::storage::fragment::DATA_DIR;
use crate::storage::manifest::{
    list_versions, list_versions_as_of, manifest_path, manifest_rel, now_ms, read_manifest,
    Manifest,
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
    /// Of those, files no version names (left by writes that failed or
    /// lost a commit race), removed once older than [`ORPHAN_MIN_AGE`].
    pub orphans_removed: usize,
    /// Their bytes.
    pub bytes_removed: u64,
}

/// Files no version names are removed only once they are this old (and
/// older than the cleanup's `min_age`): a write in progress anywhere, even
/// a long index build, commits its files well within it.
pub const ORPHAN_MIN_AGE: Duration = Duration::from_secs(3600);

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
        let objects: Vec<(String, u64)> = if rel.starts_with(INDICES_DIR) {
            remote
                .list(rel)?
                .into_iter()
                .map(|(object, size, _)| (object, size))
                .collect()
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

/// Every fragment, deletion and index file (segments as their
/// directories) stored for the dataset, with when it was last modified
/// (milliseconds since the Unix epoch; a segment: its newest file).
fn stored_files(root: &DatasetRoot) -> Result<Vec<(String, u64)>> {
    let mut out: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    let mut note = |rel: String, modified: u64| {
        let at = out.entry(rel).or_insert(0);
        *at = (*at).max(modified);
    };
    for dir in [DATA_DIR, DELETIONS_DIR, INDICES_DIR] {
        if let Some(remote) = root.remote_side() {
            for (object, _, modified) in remote.list(dir)? {
                let mut parts = object.splitn(3, '/');
                let (Some(top), Some(name)) = (parts.next(), parts.next()) else {
                    continue;
                };
                note(format!("{top}/{name}"), modified);
            }
            continue;
        }
        let path = root.path_of(dir);
        let entries = match std::fs::read_dir(&path) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io(&path, e)),
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            // A download or write in progress, except the column spools
            // of a paged fragment being written: a crashed writer's are
            // orphans like its other files once they are old.
            if name.starts_with('.') && !name.starts_with(crate::storage::paged::SPOOL_PREFIX) {
                continue;
            }
            let modified = newest_mtime(&entry.path());
            note(format!("{dir}/{name}"), modified);
        }
    }
    Ok(out.into_iter().collect())
}

/// The newest modification time under `path` (a file or a directory), in
/// milliseconds since the Unix epoch; "now" when unreadable, so that an
/// unreadable file is never taken for an old one.
fn newest_mtime(path: &Path) -> u64 {
    let own = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or_else(now_ms, |d| d.as_millis() as u64);
    if path.is_dir() {
        std::fs::read_dir(path)
            .map(|d| {
                d.flatten()
                    .map(|e| newest_mtime(&e.path()))
                    .fold(own, u64::max)
            })
            .unwrap_or_else(|_| now_ms())
    } else {
        own
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
    /// than `min_age`, and then the files only they named, and the files
    /// no version names that are older than `min_age` and
    /// [`ORPHAN_MIN_AGE`]. Searches on kept versions are unaffected; a
    /// removed version can no longer be checked out.
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
                kept_files.extend(manifest.files());
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
            doomed.extend(manifest.files());
        }
        drop(pins);
        // Versions committed since the listing keep their files too.
        let newest_listed = versions.last().copied().unwrap_or(0);
        for v in list_versions_as_of(&self.root, true)? {
            if v > newest_listed {
                match read_manifest(&self.root, v) {
                    Ok(m) => kept_files.extend(m.files()),
                    Err(Error::VersionNotFound { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        let orphan_before = now_ms().saturating_sub(min_age.max(ORPHAN_MIN_AGE).as_millis() as u64);
        let named_by_removed = doomed.clone();
        for (rel, modified) in stored_files(&self.root)? {
            if modified < orphan_before
                && !kept_files.contains(&rel)
                && !named_by_removed.contains(&rel)
            {
                doomed.insert(rel.clone());
                report.orphans_removed += 1;
            }
        }
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
