//! Partition files: every IVF partition of a segment stored contiguously,
//! so that one positioned read loads one partition.
//!
//! `partitions.bin` is a sequence of records, each starting on a 64-byte
//! boundary:
//!
//! ```text
//! header (64 bytes): b"SHOALPRT", partition u32, rows u32, kind u32,
//!                    dim u32, code_len u32, body_len u64, crc32(body) u32,
//!                    crc32(header bytes 0..40) u32, zero padding
//! body:              row ids (u64 × rows, padded to 64 bytes), then
//!                    flat: norms (f32 × rows, padded to 64) + block-transposed vectors
//!                    sq:   codes (u8 × rows × dim)
//!                    pq:   codes (u8 × rows × m)
//!                    rq:   per row: `bits` bit planes of D'/8 bytes, then
//!                          ‖r‖, Σ|x_i| and (bits > 1) ⟨y, x⟩ as f32
//!                          (see [`rq`](crate::index::rq))
//! ```
//!
//! The segment's `segment.json` lists each record's offset, length and
//! rows; the header repeats what is needed to check a read. On read every
//! header field is held to what the segment expects (partition, rows, kind,
//! dimension, code length, body length), the header's own CRC-32 (segment
//! format 2) catches a flipped byte in it, and the body's CRC-32 catches
//! corruption before any garbage could be scored.

use crate::error::{Error, Result};
use crate::index::pq::RowTerms;
use crate::index::rq::{self, RabitQuantizer, RqCodes};
use crate::index::sq::ScalarQuantizer;
use crate::kernel::lookup::CodeColumns;
use crate::kernel::{fma_dot, CodeBlocks, Lanes, VectorBlocks, BLOCK};
use crate::storage::RangedFile;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

const MAGIC: &[u8; 8] = b"SHOALPRT";
const HEADER: usize = 64;
/// Where the header's own CRC-32 sits (it covers the bytes before it).
const HEADER_CRC_AT: usize = 40;

/// What a partition's rows hold.
#[derive(Debug)]
pub enum Payload {
    /// Float32 vectors, block-transposed, with norms (IVF_FLAT).
    Flat(VectorBlocks),
    /// Scalar-quantized vectors kept as their 8-bit codes (IVF_SQ), scored
    /// by the code kernel ([`crate::kernel::codes`]) with the quantizer's
    /// ranges folded into the query.
    Sq {
        /// The codes, block-transposed, with the decoded rows' norms.
        codes: CodeBlocks,
        /// The segment's quantizer.
        quantizer: Arc<ScalarQuantizer>,
    },
    /// Product-quantization codes, `m` bytes per row (IVF_PQ), in blocks of
    /// 64 rows for the quantized-table screen ([`crate::kernel::lookup`]).
    Pq {
        /// The codes.
        codes: CodeColumns,
        /// What each row adds to a query's table sum (see
        /// [`ProductQuantizer::row_terms`](crate::index::pq::ProductQuantizer::row_terms)),
        /// computed when the partition is loaded.
        terms: RowTerms,
    },
    /// RaBitQ codes (IVF_RQ): bit planes in blocks of 64 rows and the
    /// per-row factors, with the l2 centroid terms filled in at load.
    Rq(Box<RqCodes>),
    /// A whole `hnsw` segment: its graph and float32 vectors (see
    /// [`crate::index::hnsw::segment`]); never read by the IVF scans.
    Graph(Box<crate::index::hnsw::segment::GraphBody>),
}

/// One partition in memory.
#[derive(Debug)]
pub struct Partition {
    /// Row id of each row, in storage order.
    pub row_ids: Vec<u64>,
    /// The rows' vectors or codes.
    pub payload: Payload,
}

impl Partition {
    /// Rows in the partition.
    pub fn len(&self) -> usize {
        self.row_ids.len()
    }

    /// True when the partition has no rows.
    pub fn is_empty(&self) -> bool {
        self.row_ids.is_empty()
    }

    /// Bytes held in memory (the cache's weight).
    pub fn size_bytes(&self) -> usize {
        self.row_ids.len() * 8
            + match &self.payload {
                Payload::Flat(v) => v.size_bytes(),
                Payload::Sq { codes, .. } => codes.size_bytes(),
                Payload::Pq { codes, terms } => codes.size_bytes() + terms.size_bytes(),
                Payload::Rq(codes) => codes.size_bytes(),
                Payload::Graph(body) => body.size_bytes(),
            }
            + 64
    }
}

/// What the writer stores for one partition.
#[cfg(test)]
pub enum EncodedRows<'a> {
    /// Flat vectors.
    Flat(&'a VectorBlocks),
    /// SQ codes, `dim` bytes per row.
    Sq(&'a [u8]),
    /// PQ codes, `m` bytes per row.
    Pq(&'a [u8], usize),
    /// RaBitQ records, `rq::code_len(bits, padded)` bytes per row.
    Rq(&'a [u8], usize, usize),
}

#[cfg(test)]
fn pad64(v: &mut Vec<u8>) {
    while !v.len().is_multiple_of(64) {
        v.push(0);
    }
}

/// The fixed part of a record: magic, partition, rows, kind, dim, code
/// length, body length, the body's CRC-32 and the CRC-32 of those 40 bytes,
/// zero-padded to 64 bytes.
#[allow(clippy::too_many_arguments)]
fn header_bytes(
    partition: u32,
    rows: u32,
    kind: u32,
    dim: usize,
    code_len: u32,
    body_len: u64,
    crc: u32,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&partition.to_le_bytes());
    out.extend_from_slice(&rows.to_le_bytes());
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&(dim as u32).to_le_bytes());
    out.extend_from_slice(&code_len.to_le_bytes());
    out.extend_from_slice(&body_len.to_le_bytes());
    out.extend_from_slice(&crc.to_le_bytes());
    let header_crc = crc32fast::hash(&out[..HEADER_CRC_AT]);
    out.extend_from_slice(&header_crc.to_le_bytes());
    out.resize(HEADER, 0);
    out
}

fn round64(n: u64) -> u64 {
    n.div_ceil(64) * 64
}

/// What a partition file stores per row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind {
    /// Float32 vectors, block-transposed, with norms.
    Flat,
    /// SQ codes, `dim` bytes per row.
    Sq,
    /// PQ codes, `m` bytes per row.
    Pq {
        /// Bytes per code.
        m: usize,
    },
    /// RaBitQ records ([`rq::code_len`] bytes per row).
    Rq {
        /// Bits per rotated dimension.
        bits: usize,
        /// The rotation's dimension.
        padded: usize,
    },
}

impl RecordKind {
    fn tag(self, dim: usize) -> (u32, u32) {
        match self {
            RecordKind::Flat => (0, 0),
            RecordKind::Sq => (1, dim as u32),
            RecordKind::Pq { m } => (2, m as u32),
            RecordKind::Rq { bits, padded } => (3, rq::code_len(bits, padded) as u32),
        }
    }
}

/// Where the parts of one partition record lie in the file.
#[derive(Clone, Copy, Debug)]
struct RecordLayout {
    offset: u64,
    rows: usize,
    /// Body offsets (from the record's start) of the norms (flat) and of the
    /// vectors or codes.
    norms_at: u64,
    payload_at: u64,
    body_len: u64,
}

impl RecordLayout {
    fn new(offset: u64, rows: usize, kind: RecordKind, dim: usize) -> RecordLayout {
        let ids = round64(8 * rows as u64);
        let (norms, payload) = match kind {
            RecordKind::Flat => (
                round64(4 * rows as u64),
                (rows.div_ceil(BLOCK) * dim * BLOCK * 4) as u64,
            ),
            RecordKind::Sq => (0, (rows * dim) as u64),
            RecordKind::Pq { m } => (0, (rows * m) as u64),
            RecordKind::Rq { bits, padded } => (0, (rows * rq::code_len(bits, padded)) as u64),
        };
        RecordLayout {
            offset,
            rows,
            norms_at: HEADER as u64 + ids,
            payload_at: HEADER as u64 + ids + norms,
            body_len: round64(ids + norms + payload),
        }
    }

    fn len(&self) -> u64 {
        HEADER as u64 + self.body_len
    }
}

/// Rows of one partition waiting to be written: up to one block of flat
/// vectors, or a run of codes.
#[derive(Default)]
struct Staged {
    rows: Vec<f32>,
    codes: Vec<u8>,
    staged: usize,
    written: usize,
    norms: Vec<f32>,
}

/// Rows of SQ/PQ codes staged per partition before one positioned write.
const CODE_RUN: usize = 256;

/// Writes `partitions.bin` row by row, in one pass, when each partition's
/// row count is known in advance: every record's place in the file is then
/// fixed, rows are staged per partition (one block of 16 flat vectors, or a
/// run of codes) and written at their offsets, and headers with CRCs go in
/// last. Memory is the staging plus 12 bytes per row (ids and norms), not
/// the data. The bytes are those of [`encode_partition`] for the same rows
/// in the same order.
pub struct PartitionWriter {
    path: std::path::PathBuf,
    file: std::fs::File,
    kind: RecordKind,
    dim: usize,
    layouts: Vec<RecordLayout>,
    staged: Vec<Staged>,
    ids: Vec<Vec<u64>>,
}

impl PartitionWriter {
    /// Creates `path` sized for partitions of `rows[p]` rows each.
    pub fn create(path: &Path, kind: RecordKind, dim: usize, rows: &[usize]) -> Result<Self> {
        let mut layouts = Vec::with_capacity(rows.len());
        let mut offset = 0u64;
        for &r in rows {
            let l = RecordLayout::new(offset, r, kind, dim);
            offset += l.len();
            layouts.push(l);
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| Error::io(path, e))?;
        file.set_len(offset).map_err(|e| Error::io(path, e))?;
        Ok(PartitionWriter {
            path: path.to_path_buf(),
            file,
            kind,
            dim,
            staged: rows.iter().map(|_| Staged::default()).collect(),
            ids: rows.iter().map(|&r| Vec::with_capacity(r)).collect(),
            layouts,
        })
    }

    fn write_at(&self, bytes: &[u8], at: u64) -> Result<()> {
        self.file
            .write_all_at(bytes, at)
            .map_err(|e| Error::io(&self.path, e))
    }

    /// Adds a flat row (`dim` floats) to partition `p`.
    pub fn push_flat(&mut self, p: usize, row_id: u64, row: &[f32]) -> Result<()> {
        self.ids[p].push(row_id);
        let s = &mut self.staged[p];
        s.rows.extend_from_slice(row);
        s.staged += 1;
        if s.staged == BLOCK {
            self.flush_flat(p)?;
        }
        Ok(())
    }

    /// Adds a row's SQ or PQ code to partition `p`.
    pub fn push_code(&mut self, p: usize, row_id: u64, code: &[u8]) -> Result<()> {
        self.ids[p].push(row_id);
        let s = &mut self.staged[p];
        s.codes.extend_from_slice(code);
        s.staged += 1;
        if s.staged == CODE_RUN {
            self.flush_codes(p)?;
        }
        Ok(())
    }

    fn flush_flat(&mut self, p: usize) -> Result<()> {
        let s = &mut self.staged[p];
        if s.staged == 0 {
            return Ok(());
        }
        let blocks = VectorBlocks::from_rows(self.dim, &s.rows);
        s.norms.extend_from_slice(blocks.norms_sq());
        let block_bytes = (self.dim * BLOCK * 4) as u64;
        let l = self.layouts[p];
        let at = l.offset + l.payload_at + (s.written / BLOCK) as u64 * block_bytes;
        s.written += s.staged;
        s.staged = 0;
        s.rows.clear();
        let mut bytes = Vec::with_capacity(block_bytes as usize);
        for lanes in blocks.raw_blocks() {
            for x in lanes.0 {
                bytes.extend_from_slice(&x.to_le_bytes());
            }
        }
        self.write_at(&bytes, at)
    }

    fn flush_codes(&mut self, p: usize) -> Result<()> {
        let s = &mut self.staged[p];
        if s.staged == 0 {
            return Ok(());
        }
        let per = self.kind.tag(self.dim).1 as u64;
        let l = self.layouts[p];
        let at = l.offset + l.payload_at + s.written as u64 * per;
        s.written += s.staged;
        s.staged = 0;
        let codes = std::mem::take(&mut s.codes);
        self.write_at(&codes, at)
    }

    /// Writes what is staged, the ids, norms and headers (with CRCs), and
    /// syncs the file. Returns each record's (offset, length, rows).
    pub fn finish(mut self) -> Result<Vec<(u64, u64, u32)>> {
        let mut out = Vec::with_capacity(self.layouts.len());
        let mut body = Vec::new();
        for p in 0..self.layouts.len() {
            match self.kind {
                RecordKind::Flat => self.flush_flat(p)?,
                _ => self.flush_codes(p)?,
            }
            let l = self.layouts[p];
            if self.ids[p].len() != l.rows || self.staged[p].written != l.rows {
                return Err(Error::Internal(format!(
                    "partition {p}: {} rows written, {} announced",
                    self.ids[p].len(),
                    l.rows
                )));
            }
            let mut bytes = Vec::with_capacity(l.rows * 8);
            for id in &self.ids[p] {
                bytes.extend_from_slice(&id.to_le_bytes());
            }
            self.write_at(&bytes, l.offset + HEADER as u64)?;
            if self.kind == RecordKind::Flat {
                bytes.clear();
                for n in &self.staged[p].norms {
                    bytes.extend_from_slice(&n.to_le_bytes());
                }
                self.write_at(&bytes, l.offset + l.norms_at)?;
            }
            self.ids[p] = Vec::new();
            self.staged[p] = Staged::default();
            body.resize(l.body_len as usize, 0);
            self.file
                .read_exact_at(&mut body, l.offset + HEADER as u64)
                .map_err(|e| Error::io(&self.path, e))?;
            let (kind, code_len) = self.kind.tag(self.dim);
            let header = header_bytes(
                p as u32,
                l.rows as u32,
                kind,
                self.dim,
                code_len,
                l.body_len,
                crc32fast::hash(&body),
            );
            self.write_at(&header, l.offset)?;
            out.push((l.offset, l.len(), l.rows as u32));
        }
        self.file.sync_all().map_err(|e| Error::io(&self.path, e))?;
        Ok(out)
    }
}

/// Serialises one partition record; returns its bytes (a multiple of 64).
/// The reference the streaming [`PartitionWriter`] is tested against.
#[cfg(test)]
pub fn encode_partition(
    partition: u32,
    dim: usize,
    row_ids: &[u64],
    rows: EncodedRows<'_>,
) -> Vec<u8> {
    let mut body = Vec::new();
    for r in row_ids {
        body.extend_from_slice(&r.to_le_bytes());
    }
    pad64(&mut body);
    let (kind, code_len) = match rows {
        EncodedRows::Flat(v) => {
            for n in v.norms_sq() {
                body.extend_from_slice(&n.to_le_bytes());
            }
            pad64(&mut body);
            for lanes in v.raw_blocks() {
                for x in lanes.0 {
                    body.extend_from_slice(&x.to_le_bytes());
                }
            }
            (0u32, 0u32)
        }
        EncodedRows::Sq(codes) => {
            body.extend_from_slice(codes);
            (1, dim as u32)
        }
        EncodedRows::Pq(codes, m) => {
            body.extend_from_slice(codes);
            (2, m as u32)
        }
        EncodedRows::Rq(codes, bits, padded) => {
            body.extend_from_slice(codes);
            (3, rq::code_len(bits, padded) as u32)
        }
    };
    pad64(&mut body);
    let mut out = header_bytes(
        partition,
        row_ids.len() as u32,
        kind,
        dim,
        code_len,
        body.len() as u64,
        crc32fast::hash(&body),
    );
    out.extend_from_slice(&body);
    out
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// What the segment expects of one partition record; every header field is
/// held to it before the body is used.
#[derive(Clone, Copy, Debug)]
pub struct ExpectedRecord {
    /// The partition's number.
    pub partition: u32,
    /// Where the record starts in the file, and its length (header + body).
    pub offset: u64,
    /// Length of the record.
    pub len: u64,
    /// Rows the segment directory says it holds.
    pub rows: u32,
    /// The segment's payload kind.
    pub kind: RecordKind,
    /// The segment's dimension.
    pub dim: usize,
    /// Whether the header carries its own CRC-32 (segment format 2 on).
    pub header_crc: bool,
}

/// Reads and checks one partition record of `file`. `sq` decodes IVF_SQ
/// codes. A record that does not match `expected` in every header field, or
/// whose header or body fails its CRC, is [`Error::Corrupt`] naming the file.
pub fn read_partition(
    path: &Path,
    file: &RangedFile,
    expected: &ExpectedRecord,
    sq: Option<&Arc<ScalarQuantizer>>,
) -> Result<Partition> {
    let partition = expected.partition;
    let corrupt = |m: String| Error::corrupt(path, format!("partition {partition}: {m}"));
    let mut bytes = vec![0u8; expected.len as usize];
    file.read_exact_at(&mut bytes, expected.offset)?
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => corrupt("file is truncated".into()),
            _ => Error::io(path, e),
        })?;
    if bytes.len() < HEADER || &bytes[..8] != MAGIC {
        return Err(corrupt("bad record header".into()));
    }
    if expected.header_crc
        && crc32fast::hash(&bytes[..HEADER_CRC_AT]) != u32_at(&bytes, HEADER_CRC_AT)
    {
        return Err(corrupt("header checksum mismatch".into()));
    }
    let (pid, rows, kind, dim, code_len) = (
        u32_at(&bytes, 8),
        u32_at(&bytes, 12) as usize,
        u32_at(&bytes, 16),
        u32_at(&bytes, 20) as usize,
        u32_at(&bytes, 24),
    );
    let body_len = u64::from_le_bytes(
        bytes[28..36]
            .try_into()
            .map_err(|_| corrupt("header".into()))?,
    );
    let crc = u32_at(&bytes, 36);
    let (want_kind, want_code_len) = expected.kind.tag(expected.dim);
    let mismatch = [
        ("partition number", u64::from(pid), u64::from(partition)),
        ("row count", rows as u64, u64::from(expected.rows)),
        ("payload kind", u64::from(kind), u64::from(want_kind)),
        ("dimension", dim as u64, expected.dim as u64),
        ("code length", u64::from(code_len), u64::from(want_code_len)),
        ("body length", body_len, (bytes.len() - HEADER) as u64),
    ]
    .into_iter()
    .find(|(_, got, want)| got != want);
    if let Some((field, got, want)) = mismatch {
        return Err(corrupt(format!(
            "header {field} is {got}, the segment expects {want}"
        )));
    }
    let code_len = code_len as usize;
    let body = &bytes[HEADER..];
    if crc32fast::hash(body) != crc {
        return Err(corrupt("checksum mismatch".into()));
    }
    let ids_len = (rows * 8).div_ceil(64) * 64;
    let need = |n: usize| {
        if n <= body.len() {
            Ok(())
        } else {
            Err(corrupt("body too short".into()))
        }
    };
    need(ids_len)?;
    let row_ids = body[..rows * 8]
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect();
    let rest = &body[ids_len..];
    let payload = match expected.kind {
        RecordKind::Flat => {
            let norms_len = (rows * 4).div_ceil(64) * 64;
            let nblocks = rows.div_ceil(BLOCK);
            need(ids_len + norms_len + nblocks * dim * 64)?;
            let norms = rest[..rows * 4]
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            let mut blocks = vec![Lanes::default(); nblocks * dim];
            for (lanes, chunk) in blocks.iter_mut().zip(rest[norms_len..].chunks_exact(64)) {
                for (x, b) in lanes.0.iter_mut().zip(chunk.chunks_exact(4)) {
                    *x = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                }
            }
            Payload::Flat(
                VectorBlocks::from_parts(dim, rows, blocks, norms)
                    .ok_or_else(|| corrupt("sizes".into()))?,
            )
        }
        RecordKind::Sq => {
            need(ids_len + rows * dim)?;
            let sq = sq.ok_or_else(|| corrupt("SQ partition without a quantizer".into()))?;
            let codes = &rest[..rows * dim];
            let mut decoded = vec![0.0f32; dim];
            let norms = codes
                .chunks_exact(dim)
                .map(|code| {
                    sq.decode(code, &mut decoded);
                    fma_dot(&decoded, &decoded)
                })
                .collect();
            Payload::Sq {
                codes: CodeBlocks::from_rows(dim, codes, norms)
                    .ok_or_else(|| corrupt("sizes".into()))?,
                quantizer: sq.clone(),
            }
        }
        RecordKind::Pq { .. } => {
            need(ids_len + rows * code_len)?;
            Payload::Pq {
                codes: CodeColumns::from_rows(code_len, &rest[..rows * code_len])
                    .ok_or_else(|| corrupt("sizes".into()))?,
                terms: RowTerms::default(),
            }
        }
        RecordKind::Rq { bits, padded } => {
            need(ids_len + rows * code_len)?;
            Payload::Rq(Box::new(
                RabitQuantizer::split_rows(bits, padded, &rest[..rows * code_len])
                    .ok_or_else(|| corrupt("sizes".into()))?,
            ))
        }
    };
    Ok(Partition { row_ids, payload })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The streaming writer's file equals the records of `encode_partition`
    /// laid end to end, for every kind, partition sizes around the block
    /// size, and rows arriving interleaved across partitions.
    #[test]
    fn the_streaming_writer_matches_encode_partition_byte_for_byte() {
        let dim = 5;
        let sizes = [0usize, 1, 15, 16, 17, 300, 3];
        for kind in [
            RecordKind::Flat,
            RecordKind::Sq,
            RecordKind::Pq { m: 3 },
            RecordKind::Rq {
                bits: 2,
                padded: 64,
            },
        ] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("partitions.bin");
            let mut w = PartitionWriter::create(&path, kind, dim, &sizes).unwrap();
            let code_len = kind.tag(dim).1 as usize;
            type Row = (u64, Vec<f32>, Vec<u8>);
            let mut rows: Vec<Vec<Row>> = vec![Vec::new(); sizes.len()];
            let mut left = sizes.to_vec();
            let mut i = 0u64;
            while left.iter().any(|&n| n > 0) {
                let p = (i as usize * 3 + i as usize / 11) % sizes.len();
                if left[p] > 0 {
                    left[p] -= 1;
                    let v: Vec<f32> = (0..dim)
                        .map(|j| (i as f32 * 0.37 + j as f32).sin())
                        .collect();
                    let c: Vec<u8> = (0..code_len).map(|j| (i as usize * 31 + j) as u8).collect();
                    if kind == RecordKind::Flat {
                        w.push_flat(p, i << 3, &v).unwrap();
                    } else {
                        w.push_code(p, i << 3, &c).unwrap();
                    }
                    rows[p].push((i << 3, v, c));
                }
                i += 1;
            }
            let entries = w.finish().unwrap();
            let mut expected = Vec::new();
            for (p, part) in rows.iter().enumerate() {
                let ids: Vec<u64> = part.iter().map(|r| r.0).collect();
                let flat: Vec<f32> = part.iter().flat_map(|r| r.1.clone()).collect();
                let codes: Vec<u8> = part.iter().flat_map(|r| r.2.clone()).collect();
                let blocks = VectorBlocks::from_rows(dim, &flat);
                let rec = match kind {
                    RecordKind::Flat => EncodedRows::Flat(&blocks),
                    RecordKind::Sq => EncodedRows::Sq(&codes),
                    RecordKind::Pq { m } => EncodedRows::Pq(&codes, m),
                    RecordKind::Rq { bits, padded } => EncodedRows::Rq(&codes, bits, padded),
                };
                let bytes = encode_partition(p as u32, dim, &ids, rec);
                assert_eq!(
                    entries[p],
                    (expected.len() as u64, bytes.len() as u64, ids.len() as u32)
                );
                expected.extend_from_slice(&bytes);
            }
            assert_eq!(std::fs::read(&path).unwrap(), expected, "{kind:?}");
        }
    }
}
