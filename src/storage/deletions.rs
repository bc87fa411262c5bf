//! Deletion files: a roaring bitmap of deleted row offsets per fragment.
//!
//! A delete never rewrites data: it writes a new bitmap file (the union of
//! the old one and the newly deleted offsets) named
//! `deletions/<fragment>-<version>-<nonce>.bin` and points the next
//! manifest at it.

use crate::error::{Error, Result};
use crate::storage::checksum::FileChecksum;
use crate::storage::manifest::{write_synced, FragmentMeta};
use crate::storage::root::DatasetRoot;
use roaring::RoaringBitmap;

/// Directory of deletion files inside a dataset.
pub const DELETIONS_DIR: &str = "deletions";

/// Reads the deletion bitmap `file` of the fragment `meta`, checked against
/// the manifest: its checksum (when recorded), its count of deleted rows,
/// and every deleted offset inside the fragment.
pub fn read_deletions(
    root: &DatasetRoot,
    file: &str,
    meta: &FragmentMeta,
) -> Result<RoaringBitmap> {
    let path = root.join(DELETIONS_DIR).join(file);
    let bytes = root
        .read(&format!("{DELETIONS_DIR}/{file}"))?
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::corrupt(&path, "deletion file is missing"),
            _ => Error::io(&path, e),
        })?;
    if let Some(checksum) = &meta.deletion_checksum {
        checksum.check_bytes(&path, &bytes)?;
    }
    let bitmap = RoaringBitmap::deserialize_from(&bytes[..])
        .map_err(|e| Error::corrupt(&path, e.to_string()))?;
    if bitmap.len() != meta.deleted_rows {
        return Err(Error::corrupt(
            &path,
            format!(
                "holds {} deleted rows, the manifest says {}",
                bitmap.len(),
                meta.deleted_rows
            ),
        ));
    }
    if let Some(max) = bitmap.max().filter(|&m| u64::from(m) >= meta.rows) {
        return Err(Error::corrupt(
            &path,
            format!(
                "deletes row offset {max} of a fragment of {} rows",
                meta.rows
            ),
        ));
    }
    Ok(bitmap)
}

/// Writes a deletion bitmap for `fragment_id` at `version`; returns its file
/// name and checksum.
pub fn write_deletions(
    root: &DatasetRoot,
    fragment_id: u32,
    version: u64,
    bitmap: &RoaringBitmap,
) -> Result<(String, FileChecksum)> {
    let file = format!("{fragment_id}-{version}-{:016x}.bin", rand::random::<u64>());
    let mut bytes = Vec::with_capacity(bitmap.serialized_size());
    bitmap
        .serialize_into(&mut bytes)
        .map_err(|e| Error::Internal(format!("serialising deletions: {e}")))?;
    write_synced(&root.join(DELETIONS_DIR).join(&file), &bytes)?;
    root.wrote(&format!("{DELETIONS_DIR}/{file}"));
    Ok((file, FileChecksum::of(&bytes)))
}
