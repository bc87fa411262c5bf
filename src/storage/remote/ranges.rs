//! Byte ranges of remote objects: index partitions and fragment pages.
//!
//! Each range is kept in the disk cache as a file of its own
//! (`<rel>.ranges/<offset>-<len>`), so a range read again comes from
//! local disk and the cache holds exactly what searches used. A read of
//! several ranges ([`Remote::read_ranges`], [`Remote::fetch_ranges`])
//! fetches only those the cache lacks, merges neighbours (at most
//! [`COALESCE_GAP`] apart, at most [`MAX_MERGED_GET`] together) into one
//! GET, and keeps up to `storage.max_concurrent_gets` GETs in flight.

use super::{block_on, io_runtime, left_by_earlier_process, Remote};
use crate::error::{Error, Result};
use futures_util::StreamExt;
use object_store::ObjectStoreExt;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Ranges at most this far apart are fetched by one GET (the bytes
/// between them are fetched and dropped): partition records are 64-byte
/// aligned, and a GET's round trip costs more than a few KiB.
pub const COALESCE_GAP: u64 = 64 << 10;

/// The most one merged GET fetches (memory held per GET in flight).
pub const MAX_MERGED_GET: u64 = 8 << 20;

/// One GET covering `start..end`, and the asked ranges inside it.
#[derive(Debug, PartialEq)]
struct MergedGet {
    start: u64,
    end: u64,
    ranges: Vec<(u64, u64)>,
}

/// Sorted, distinct ranges grouped into GETs: a range joins the previous
/// GET when it starts at most `gap` after that GET's end and the GET
/// stays within `max` bytes (a range longer than `max` is a GET alone).
fn coalesce(ranges: &[(u64, u64)], gap: u64, max: u64) -> Vec<MergedGet> {
    let mut out: Vec<MergedGet> = Vec::new();
    for &(offset, len) in ranges {
        let end = offset + len;
        match out.last_mut() {
            Some(g) if offset <= g.end + gap && end.max(g.end) - g.start <= max => {
                g.end = g.end.max(end);
                g.ranges.push((offset, len));
            }
            _ => out.push(MergedGet {
                start: offset,
                end,
                ranges: vec![(offset, len)],
            }),
        }
    }
    out
}

impl Remote {
    /// The disk-cache file of bytes `offset..offset + len` of `rel`.
    fn range_path(&self, rel: &str, offset: u64, len: u64) -> PathBuf {
        self.mirror
            .join(format!("{rel}.ranges"))
            .join(format!("{offset}-{len}"))
    }

    /// Bytes `offset..offset + len` of `rel`, from the disk cache or by
    /// one ranged GET (then kept in the cache). `Ok(None)`: there is no
    /// such object.
    pub fn read_range(&self, rel: &str, offset: u64, len: u64) -> Result<Option<Vec<u8>>> {
        let local = self.range_path(rel, offset, len);
        let Some(mut file) =
            self.open_cached(&local, &|| self.download_range(rel, offset, len, &local))?
        else {
            return Ok(None);
        };
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| Error::io(&local, e))?;
        Ok(Some(bytes))
    }

    /// The ranges `ranges` of `rel`, in order: the missing ones fetched
    /// first by [`Remote::fetch_ranges`]. `Ok(None)`: no such object.
    pub fn read_ranges(&self, rel: &str, ranges: &[(u64, u64)]) -> Result<Option<Vec<Vec<u8>>>> {
        if !self.fetch_ranges(rel, ranges)? {
            return Ok(None);
        }
        // A range evicted since (the cache is full) is fetched again alone.
        ranges
            .iter()
            .map(|&(offset, len)| self.read_range(rel, offset, len))
            .collect()
    }

    /// Puts the ranges `ranges` of `rel` into the disk cache: those it
    /// lacks, merged into few GETs, several in flight at once. `false`:
    /// there is no such object.
    pub fn fetch_ranges(&self, rel: &str, ranges: &[(u64, u64)]) -> Result<bool> {
        let mut todo: Vec<(u64, u64)> = ranges
            .iter()
            .copied()
            .filter(|&(offset, len)| {
                let local = self.range_path(rel, offset, len);
                if self.disk.files.contains_key(&local) && local.exists() {
                    return false;
                }
                match left_by_earlier_process(&local) {
                    Some(bytes) => {
                        self.disk.files.insert(local, bytes);
                        false
                    }
                    None => true,
                }
            })
            .collect();
        todo.sort_unstable();
        todo.dedup();
        if todo.is_empty() {
            return Ok(true);
        }
        let gets = coalesce(&todo, COALESCE_GAP, MAX_MERGED_GET);
        let spans: Vec<(u64, u64)> = gets.iter().map(|g| (g.start, g.end)).collect();
        let (store, path) = (self.store.clone(), self.object(rel));
        let in_flight = self.max_gets;
        // The runtime keeps `in_flight` GETs going; this thread writes
        // each answer into the cache as it comes (the channel's bound
        // holds memory to a few merged GETs).
        let (tx, rx) = std::sync::mpsc::sync_channel(in_flight);
        io_runtime()?.spawn(async move {
            let mut answers = futures_util::stream::iter(spans.into_iter().enumerate())
                .map(|(i, (start, end))| {
                    let (store, path) = (store.clone(), path.clone());
                    async move { (i, store.get_range(&path, start..end).await) }
                })
                .buffer_unordered(in_flight);
            while let Some(answer) = answers.next().await {
                if tx.send(answer).is_err() {
                    break;
                }
            }
        });
        for (i, answer) in rx {
            let bytes = match answer {
                Ok(bytes) => bytes,
                Err(object_store::Error::NotFound { .. }) => return Ok(false),
                Err(e) => return Err(self.unavailable(rel, e)),
            };
            let get = &gets[i];
            self.record(1, bytes.len() as u64);
            if bytes.len() as u64 != get.end - get.start {
                return Err(self.unavailable(
                    rel,
                    format!(
                        "asked for {} bytes at {}, got {}",
                        get.end - get.start,
                        get.start,
                        bytes.len()
                    ),
                ));
            }
            for &(offset, len) in &get.ranges {
                let at = (offset - get.start) as usize;
                let local = self.range_path(rel, offset, len);
                Self::write_whole(&local, &bytes[at..at + len as usize])?;
                self.disk.files.insert(local, len);
            }
        }
        Ok(true)
    }

    /// Writes `bytes` to a temp file beside `local`, then renames it into
    /// place: a reader never sees half a range.
    fn write_whole(local: &Path, bytes: &[u8]) -> Result<()> {
        let (tmp, mut file) = Self::temp_beside(local)?;
        let written = file
            .write_all(bytes)
            .and_then(|()| std::fs::rename(&tmp, local));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(Error::io(local, e));
        }
        Ok(())
    }

    /// One ranged GET of `rel` into a temp file renamed to `local`; its
    /// length. `DatasetNotFound` stands for a missing object here.
    fn download_range(&self, rel: &str, offset: u64, len: u64, local: &Path) -> Result<u64> {
        let (store, path) = (self.store.clone(), self.object(rel));
        let bytes =
            match block_on(async move { store.get_range(&path, offset..offset + len).await })? {
                Ok(bytes) => bytes,
                Err(object_store::Error::NotFound { .. }) => {
                    return Err(Error::DatasetNotFound(local.to_path_buf()))
                }
                Err(e) => return Err(self.unavailable(rel, e)),
            };
        self.record(1, bytes.len() as u64);
        Self::write_whole(local, &bytes)?;
        Ok(bytes.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbours_merge_within_the_gap_and_the_size_limit() {
        let r = [(0, 100), (100, 50), (200, 10), (1_000, 10)];
        let got = coalesce(&r, 32, 1 << 20);
        assert_eq!(got.len(), 3);
        assert_eq!((got[0].start, got[0].end), (0, 150));
        assert_eq!(got[0].ranges, vec![(0, 100), (100, 50)]);
        // 200 is 50 past 150: within a gap of 64, not of 32.
        let got = coalesce(&r, 64, 1 << 20);
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].start, got[0].end), (0, 210));
        assert_eq!(got[1].ranges, vec![(1_000, 10)]);
        // The size limit splits a run; an oversized range stands alone.
        let split = coalesce(&[(0, 60), (60, 60), (120, 60)], 0, 130);
        assert_eq!(split.len(), 2);
        let alone = coalesce(&[(0, 500), (500, 10)], 0, 100);
        assert_eq!(alone.len(), 2);
    }
}
