//! Versioned manifests: one JSON file per committed version.
//!
//! `_versions/<20-digit version>.manifest` lists the schema, the fragments
//! and their deletion files. A commit writes a temp file, fsyncs it, then
//! hard-links it to its final name — a link fails if the name exists, so of
//! two writers racing for the same version exactly one wins and the other
//! gets [`Error::CommitConflict`]. A crash before the link leaves only a temp
//! file, which readers ignore: the previous version stays the latest.
//!
//! On object storage the same rule holds through a conditional put
//! (`PutMode::Create`) of the manifest, after the files it names are
//! uploaded: a manifest is never visible before its files.

use crate::error::{Error, Result};
use crate::storage::checksum::FileChecksum;
use crate::storage::root::DatasetRoot;
use crate::storage::schema::Schema;
use serde::{Deserialize, Serialize};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Directory of manifests inside a dataset.
pub const VERSIONS_DIR: &str = "_versions";
const SUFFIX: &str = ".manifest";
/// The on-disk format this build writes. Format 2 added checksums: the
/// manifest's own CRC-32 and one per fragment and deletion file; format 3
/// the commit's nonce ([`Manifest::commit_nonce`]); format 4 paged
/// fragment files ([`FragmentMeta::paged`]). Manifests of formats 1 to 3
/// are still read (format 1 without those checks).
pub const FORMAT_VERSION: u32 = 4;

/// One data fragment: an Arrow IPC file of rows, plus its deletions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FragmentMeta {
    /// Fragment id: the high 32 bits of its rows' row ids.
    pub id: u32,
    /// File name under `data/`.
    pub file: String,
    /// Rows physically in the file (deleted or not).
    pub rows: u64,
    /// Deletion bitmap file under `deletions/`, if any row is deleted.
    pub deletion_file: Option<String>,
    /// Number of deleted rows.
    pub deleted_rows: u64,
    /// Length and CRC-32 of the fragment file, checked before its first
    /// use in a session. Absent only in fragments written before format 2
    /// (those are read unchecked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<FileChecksum>,
    /// Length and CRC-32 of the deletion file, checked whenever it is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_checksum: Option<FileChecksum>,
    /// A paged file (format 4): where its page directory is. Absent: the
    /// file is one Arrow IPC file (every fragment written before format
    /// 4, or with `storage.fragment_format = 1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paged: Option<crate::storage::paged::PagedLayout>,
}

/// Everything that defines one version of a dataset.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// On-disk format version.
    pub format: u32,
    /// This manifest's version number (1 = the freshly created dataset).
    pub version: u64,
    /// Milliseconds since the Unix epoch when committed.
    pub timestamp_ms: u64,
    /// What produced this version (`create`, `append`, `delete`).
    pub operation: String,
    /// The dataset's schema.
    pub schema: Schema,
    /// The fragments visible in this version.
    pub fragments: Vec<FragmentMeta>,
    /// The id the next new fragment gets.
    pub next_fragment_id: u32,
    /// Rows ever appended; the default `id` of the next appended row.
    pub rows_appended: u64,
    /// Index segments of this version.
    #[serde(default)]
    pub indices: Vec<crate::storage::index_meta::IndexSegmentMeta>,
    /// A random token of the commit that published this manifest (format
    /// 3 on). A writer whose conditional put is answered "exists" reads the
    /// manifest back: its own nonce there means the put succeeded and only
    /// its answer was lost (then retried by the client and refused), so the
    /// commit is reported as done instead of as a conflict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_nonce: Option<String>,
    /// CRC-32 of this manifest's compact JSON form without this field
    /// (recomputed on read); required from format 2 on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crc32: Option<u32>,
}

/// The CRC-32 a manifest records of itself: over its compact JSON form with
/// `crc32` left out. Computed from the parsed struct on read, so any change
/// to a value (not to whitespace) is caught.
fn manifest_crc32(manifest: &Manifest) -> Result<u32> {
    let mut unsigned = manifest.clone();
    unsigned.crc32 = None;
    let json = serde_json::to_vec(&unsigned)
        .map_err(|e| Error::Internal(format!("manifest serialisation: {e}")))?;
    Ok(crc32fast::hash(&json))
}

impl Manifest {
    /// The next version's manifest, as yet unchanged: this one with its
    /// version bumped, stamped now and made by `operation`.
    pub fn next(&self, operation: &str) -> Manifest {
        let mut next = self.clone();
        next.version += 1;
        next.timestamp_ms = now_ms();
        next.operation = operation.into();
        next.commit_nonce = None;
        next.crc32 = None;
        next
    }

    /// The files this version names, by path inside the dataset
    /// (`data/…`, `deletions/…`, and each index segment as its directory
    /// `indices/<id>`): what retention keeps and a remote commit uploads.
    pub fn files(&self) -> std::collections::BTreeSet<String> {
        use crate::storage::{
            deletions::DELETIONS_DIR, fragment::DATA_DIR, index_meta::INDICES_DIR,
        };
        let mut out = std::collections::BTreeSet::new();
        for f in &self.fragments {
            out.insert(format!("{DATA_DIR}/{}", f.file));
            if let Some(d) = &f.deletion_file {
                out.insert(format!("{DELETIONS_DIR}/{d}"));
            }
        }
        for s in &self.indices {
            out.insert(format!("{INDICES_DIR}/{}", s.id));
        }
        out
    }

    /// Rows visible in this version (not deleted).
    pub fn visible_rows(&self) -> u64 {
        self.fragments.iter().map(|f| f.rows - f.deleted_rows).sum()
    }
}

fn manifest_name(version: u64) -> String {
    format!("{version:020}{SUFFIX}")
}

/// The manifest of `version`, relative to the dataset.
pub fn manifest_rel(version: u64) -> String {
    format!("{VERSIONS_DIR}/{}", manifest_name(version))
}

/// Path of the manifest of `version`.
pub fn manifest_path(root: &Path, version: u64) -> PathBuf {
    root.join(VERSIONS_DIR).join(manifest_name(version))
}

/// All committed version numbers, ascending. On object storage the
/// listing may be up to `storage.refresh_ms` old.
pub fn list_versions(root: &DatasetRoot) -> Result<Vec<u64>> {
    list_versions_as_of(root, false)
}

/// All committed version numbers, ascending, listed now (`fresh`) or
/// possibly `storage.refresh_ms` old.
pub fn list_versions_as_of(root: &DatasetRoot, fresh: bool) -> Result<Vec<u64>> {
    let versions = match root.remote_side() {
        Some(remote) => remote.versions(VERSIONS_DIR, SUFFIX, fresh)?,
        None => list_local_versions(root)?,
    };
    if versions.is_empty() {
        return Err(match root.remote_side() {
            // Nothing under the prefix: no dataset there.
            Some(_) => Error::DatasetNotFound(PathBuf::from(root.uri())),
            None => Error::NotADataset(root.to_path_buf()),
        });
    }
    Ok(versions)
}

fn list_local_versions(root: &Path) -> Result<Vec<u64>> {
    if !root.exists() {
        return Err(Error::DatasetNotFound(root.to_path_buf()));
    }
    let dir = root.join(VERSIONS_DIR);
    let entries = match fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::NotADataset(root.to_path_buf()))
        }
        Err(e) => return Err(Error::io(&dir, e)),
    };
    let mut versions = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(&dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(stem) = name.strip_suffix(SUFFIX) {
            if stem.len() == 20 {
                if let Ok(v) = stem.parse::<u64>() {
                    versions.push(v);
                }
            }
        }
    }
    versions.sort_unstable();
    Ok(versions)
}

/// Reads the manifest of `version`.
pub fn read_manifest(root: &DatasetRoot, version: u64) -> Result<Manifest> {
    let path = manifest_path(root, version);
    let found = match root.remote_side() {
        Some(remote) => remote.get(&manifest_rel(version))?,
        None => match fs::read(&path) {
            Ok(b) => Some(b),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::io(&path, e)),
        },
    };
    let Some(bytes) = found else {
        let latest = list_versions(root)?.last().copied().unwrap_or(0);
        return Err(Error::VersionNotFound {
            requested: version,
            latest,
        });
    };
    let manifest: Manifest =
        serde_json::from_slice(&bytes).map_err(|e| Error::corrupt(&path, e.to_string()))?;
    if !(1..=FORMAT_VERSION).contains(&manifest.format) {
        return Err(Error::corrupt(
            &path,
            format!(
                "format {} is not supported by this build (reads 1..={FORMAT_VERSION})",
                manifest.format
            ),
        ));
    }
    let has_checksums = manifest.crc32.is_some()
        || manifest
            .fragments
            .iter()
            .any(|f| f.checksum.is_some() || f.deletion_checksum.is_some());
    if manifest.format == 1 && has_checksums {
        // A format number that lost its checks is damage, not an old file.
        return Err(Error::corrupt(&path, "format 1 manifest carries checksums"));
    }
    if manifest.format < 4 && manifest.fragments.iter().any(|f| f.paged.is_some()) {
        return Err(Error::corrupt(
            &path,
            format!("format {} manifest names paged fragments", manifest.format),
        ));
    }
    if manifest.format >= 2 {
        match manifest.crc32 {
            Some(recorded) if recorded == manifest_crc32(&manifest)? => {}
            Some(_) => return Err(Error::corrupt(&path, "checksum mismatch")),
            None => return Err(Error::corrupt(&path, "manifest has no checksum")),
        }
    }
    if manifest.version != version {
        return Err(Error::corrupt(
            &path,
            "version inside does not match its name",
        ));
    }
    check_names_and_counts(&manifest).map_err(|message| Error::corrupt(&path, message))?;
    Ok(manifest)
}

/// A file or directory name a manifest may hold: one plain component
/// inside its folder of the dataset (no separators, no `..`, not absolute).
fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\', '\0'])
        && !Path::new(name).is_absolute()
}

/// Checks what a manifest names and counts: every file a plain name inside
/// the dataset (a manifest naming `../../etc/passwd` is corrupt, never
/// opened), and no fragment with more deleted rows than rows.
fn check_names_and_counts(manifest: &Manifest) -> std::result::Result<(), String> {
    for f in &manifest.fragments {
        let names = std::iter::once(&f.file).chain(f.deletion_file.as_ref());
        if let Some(bad) = names.into_iter().find(|n| !is_plain_name(n)) {
            return Err(format!(
                "fragment {} names the file {bad:?}, which is not a plain file name inside the dataset",
                f.id
            ));
        }
        if f.deleted_rows > f.rows {
            return Err(format!(
                "fragment {} has {} deleted rows but only {} rows",
                f.id, f.deleted_rows, f.rows
            ));
        }
    }
    for seg in &manifest.indices {
        if !is_plain_name(&seg.id) || !is_plain_name(&seg.trained_in) {
            return Err(format!(
                "index segment {:?} (trained in {:?}) is not a plain directory name inside the dataset",
                seg.id, seg.trained_in
            ));
        }
    }
    Ok(())
}

/// Publishes `manifest` as its version, in this build's format with its
/// checksum and a fresh commit nonce. Fails with `CommitConflict` when that
/// version already exists, or when a newer one does (the writer started
/// from an old version); never overwrites.
pub fn commit_manifest(root: &DatasetRoot, manifest: &Manifest) -> Result<()> {
    let mut manifest = manifest.clone();
    manifest.format = FORMAT_VERSION;
    manifest.commit_nonce = Some(format!("{:016x}", rand::random::<u64>()));
    manifest.crc32 = Some(manifest_crc32(&manifest)?);
    let manifest = &manifest;
    if let Some(remote) = root.remote_side() {
        return commit_remote(root, remote, manifest);
    }
    let dir = root.join(VERSIONS_DIR);
    let final_path = manifest_path(root, manifest.version);
    let tmp_path = dir.join(format!(
        ".tmp-{}-{}-{:016x}",
        manifest.version,
        std::process::id(),
        rand::random::<u64>()
    ));
    let json = serde_json::to_vec_pretty(manifest)
        .map_err(|e| Error::Internal(format!("manifest serialisation: {e}")))?;
    write_synced(&tmp_path, &json)?;
    // A version number retention removed is free again, so a writer still
    // on an old version could link it: a commit must be newer than every
    // version there is (cleanup never removes the newest, so a newer one
    // is still listed), or it conflicts. Equal numbers are the link's job.
    let newest = match list_versions_as_of(root, true) {
        Ok(versions) => versions.last().copied(),
        Err(Error::NotADataset(_)) => None, // the first commit, by create
        Err(e) => {
            let _ = fs::remove_file(&tmp_path);
            return Err(e);
        }
    };
    if newest.is_some_and(|v| v > manifest.version) {
        let _ = fs::remove_file(&tmp_path);
        return Err(Error::CommitConflict {
            version: manifest.version,
        });
    }
    let linked = fs::hard_link(&tmp_path, &final_path);
    let _ = fs::remove_file(&tmp_path);
    match linked {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(Error::CommitConflict {
                version: manifest.version,
            })
        }
        Err(e) => return Err(Error::io(&final_path, e)),
    }
    sync_dir(&dir)
}

/// [`commit_manifest`] on object storage: uploads the files the manifest
/// names that this process wrote, checks that no newer version exists,
/// then puts the manifest if its name is free.
fn commit_remote(
    root: &DatasetRoot,
    remote: &crate::storage::remote::Remote,
    manifest: &Manifest,
) -> Result<()> {
    // The fragment and deletion files it names, and the files inside the
    // segment directories it names.
    let named = manifest.files();
    remote.upload_written(|rel| {
        named.contains(rel)
            || rel
                .rsplit_once('/')
                .is_some_and(|(dir, _)| named.contains(dir))
    })?;
    let newest = match list_versions_as_of(root, true) {
        Ok(versions) => versions.last().copied(),
        Err(Error::DatasetNotFound(_)) => None, // the first commit, by create
        Err(e) => return Err(e),
    };
    if newest.is_some_and(|v| v > manifest.version) {
        return Err(Error::CommitConflict {
            version: manifest.version,
        });
    }
    let json = serde_json::to_vec_pretty(manifest)
        .map_err(|e| Error::Internal(format!("manifest serialisation: {e}")))?;
    let put = remote.put_if_absent(&manifest_rel(manifest.version), json);
    remote.forget_versions();
    match put {
        Ok(true) => Ok(()),
        // "Exists", or no answer at all: the store may have taken the put
        // and lost its answer (a client that retries it is then refused).
        // The manifest under that name tells whose commit it is.
        Ok(false) | Err(_) if committed_by(root, manifest) => Ok(()),
        Ok(false) => Err(Error::CommitConflict {
            version: manifest.version,
        }),
        Err(e) => Err(e),
    }
}

/// Is `manifest`'s version published with `manifest`'s own nonce? (No when
/// it cannot be read: the caller then reports what its put answered.)
fn committed_by(root: &DatasetRoot, manifest: &Manifest) -> bool {
    manifest.commit_nonce.is_some()
        && read_manifest(root, manifest.version)
            .is_ok_and(|published| published.commit_nonce == manifest.commit_nonce)
}

/// Writes `bytes` to a new file and fsyncs it.
pub fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    f.write_all(bytes).map_err(|e| Error::io(path, e))?;
    f.sync_all().map_err(|e| Error::io(path, e))
}

/// Fsyncs a directory so that new names in it are durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    match fs::File::open(dir) {
        Ok(d) => d.sync_all().map_err(|e| Error::io(dir, e)),
        Err(e) => Err(Error::io(dir, e)),
    }
}

/// Milliseconds since the Unix epoch (0 on a clock before it).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
