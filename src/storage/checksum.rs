//! File checksums: the length and CRC-32 of a file, recorded in the
//! manifest when the file is written and checked before the file is used.
//!
//! Fragment and deletion files are immutable once written, so a recorded
//! [`FileChecksum`] names their bytes for ever: any flipped byte, truncation
//! or appended garbage is caught before a value of the file reaches a scan.
//! CRC-32 (the `crc32fast` crate, hardware-assisted) runs at several GB/s,
//! so a check costs about as much as reading the file once.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::path::Path;

/// The length and CRC-32 of a file's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileChecksum {
    /// File length in bytes.
    pub bytes: u64,
    /// CRC-32 (IEEE) of the whole file.
    pub crc32: u32,
}

impl FileChecksum {
    /// The checksum of `bytes`.
    pub fn of(bytes: &[u8]) -> FileChecksum {
        FileChecksum {
            bytes: bytes.len() as u64,
            crc32: crc32fast::hash(bytes),
        }
    }

    /// Checks bytes already read from `path` against this checksum.
    pub fn check_bytes(&self, path: &Path, bytes: &[u8]) -> Result<()> {
        self.compare(path, FileChecksum::of(bytes))
    }

    /// Reads `path` through in 1 MiB pieces (never the whole file in
    /// memory) and checks it against this checksum.
    pub fn check_file(&self, path: &Path) -> Result<()> {
        let file = std::fs::File::open(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::corrupt(path, "file is missing"),
            _ => Error::io(path, e),
        })?;
        self.check_open_file(path, file)
    }

    /// [`FileChecksum::check_file`] on a file already open (read from its
    /// current position, which should be its start).
    pub fn check_open_file(&self, path: &Path, mut file: std::fs::File) -> Result<()> {
        let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
        if len != self.bytes {
            return Err(Error::corrupt(
                path,
                format!("file has {len} bytes, the manifest records {}", self.bytes),
            ));
        }
        let mut hasher = crc32fast::Hasher::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut read = 0u64;
        loop {
            let n = file.read(&mut buf).map_err(|e| Error::io(path, e))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            read += n as u64;
        }
        self.compare(
            path,
            FileChecksum {
                bytes: read,
                crc32: hasher.finalize(),
            },
        )
    }

    fn compare(&self, path: &Path, actual: FileChecksum) -> Result<()> {
        if actual.bytes != self.bytes {
            return Err(Error::corrupt(
                path,
                format!(
                    "file has {} bytes, the manifest records {}",
                    actual.bytes, self.bytes
                ),
            ));
        }
        if actual.crc32 != self.crc32 {
            return Err(Error::corrupt(
                path,
                format!(
                    "checksum mismatch (CRC-32 {:08x}, the manifest records {:08x})",
                    actual.crc32, self.crc32
                ),
            ));
        }
        Ok(())
    }
}

/// A writer that counts and checksums every byte passed through it, so a
/// file's checksum is known when it is finished without reading it back.
pub struct ChecksumWriter<W> {
    inner: W,
    hasher: crc32fast::Hasher,
    bytes: u64,
}

impl<W: Write> ChecksumWriter<W> {
    /// Wraps `inner`.
    pub fn new(inner: W) -> Self {
        ChecksumWriter {
            inner,
            hasher: crc32fast::Hasher::new(),
            bytes: 0,
        }
    }

    /// The checksum of everything written so far, and the inner writer.
    pub fn finish(self) -> (FileChecksum, W) {
        (
            FileChecksum {
                bytes: self.bytes,
                crc32: self.hasher.finalize(),
            },
            self.inner,
        )
    }
}

impl<W: Write> Write for ChecksumWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_file_checks_and_any_change_to_it_is_caught() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut w = ChecksumWriter::new(Vec::new());
        for chunk in data.chunks(12_345) {
            w.write_all(chunk).unwrap();
        }
        let (sum, written) = w.finish();
        assert_eq!(written, data);
        assert_eq!(sum, FileChecksum::of(&data));
        std::fs::write(&path, &data).unwrap();
        sum.check_file(&path).unwrap();

        let mut flipped = data.clone();
        flipped[2_500_000] ^= 0x10;
        std::fs::write(&path, &flipped).unwrap();
        let err = sum.check_file(&path).unwrap_err().to_string();
        assert!(err.contains("checksum mismatch"), "{err}");
        assert!(sum.check_bytes(&path, &flipped).is_err());

        std::fs::write(&path, &data[..data.len() - 1]).unwrap();
        let err = sum.check_file(&path).unwrap_err().to_string();
        assert!(err.contains("bytes"), "{err}");
    }
}
