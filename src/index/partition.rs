//! Partition files: every IVF partition of a segment stored contiguously,
//! so that one positioned read loads one partition.
//!
//! `partitions.bin` is a sequence of records, each starting on a 64-byte
//! boundary:
//!
//! ```text
//! header (64 bytes): b"SHOALPRT", partition u32, rows u32, kind u32,
//!                    dim u32, code_len u32, body_len u64, crc32(body) u32, zero padding
//! body:              row ids (u64 × rows, padded to 64 bytes), then
//!                    flat: norms (f32 × rows, padded to 64) + block-transposed vectors
//!                    sq:   codes (u8 × rows × dim)
//!                    pq:   codes (u8 × rows × m)
//! ```
//!
//! The segment's `segment.json` lists each record's offset and length; the
//! header repeats what is needed to check a read, and the CRC-32 catches
//! corruption before any garbage could be scored.

use crate::error::{Error, Result};
use crate::index::sq::ScalarQuantizer;
use crate::kernel::{Lanes, VectorBlocks, BLOCK};
use std::os::unix::fs::FileExt;
use std::path::Path;

const MAGIC: &[u8; 8] = b"SHOALPRT";
const HEADER: usize = 64;

/// What a partition's rows hold.
#[derive(Debug)]
pub enum Payload {
    /// Float32 vectors, block-transposed, with norms (IVF_FLAT).
    Flat(VectorBlocks),
    /// Scalar-quantized vectors, decoded to float32 on load (IVF_SQ).
    Sq(VectorBlocks),
    /// Product-quantization codes, `m` bytes per row (IVF_PQ).
    Pq {
        /// Bytes per code.
        m: usize,
        /// `rows × m` codes.
        codes: Vec<u8>,
        /// The query-independent part of each row's distance (see
        /// [`ProductQuantizer::row_bases`](crate::index::pq::ProductQuantizer::row_bases)),
        /// computed when the partition is loaded.
        row_base: Vec<f32>,
    },
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
                Payload::Flat(v) | Payload::Sq(v) => v.size_bytes(),
                Payload::Pq {
                    codes, row_base, ..
                } => codes.len() + row_base.len() * 4,
            }
            + 64
    }
}

/// What the writer stores for one partition.
pub enum EncodedRows<'a> {
    /// Flat vectors.
    Flat(&'a VectorBlocks),
    /// SQ codes, `dim` bytes per row.
    Sq(&'a [u8]),
    /// PQ codes, `m` bytes per row.
    Pq(&'a [u8], usize),
}

fn pad64(v: &mut Vec<u8>) {
    while !v.len().is_multiple_of(64) {
        v.push(0);
    }
}

/// Serialises one partition record; returns its bytes (a multiple of 64).
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
    };
    pad64(&mut body);
    let mut out = Vec::with_capacity(HEADER + body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&partition.to_le_bytes());
    out.extend_from_slice(&(row_ids.len() as u32).to_le_bytes());
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&(dim as u32).to_le_bytes());
    out.extend_from_slice(&code_len.to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    out.resize(HEADER, 0);
    out.extend_from_slice(&body);
    out
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Reads and checks partition `partition` from `file` at `offset..offset+len`.
/// `sq` decodes IVF_SQ codes.
pub fn read_partition(
    path: &Path,
    file: &std::fs::File,
    partition: u32,
    offset: u64,
    len: u64,
    sq: Option<&ScalarQuantizer>,
) -> Result<Partition> {
    let corrupt = |m: String| Error::corrupt(path, format!("partition {partition}: {m}"));
    let mut bytes = vec![0u8; len as usize];
    file.read_exact_at(&mut bytes, offset)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => corrupt("file is truncated".into()),
            _ => Error::io(path, e),
        })?;
    if bytes.len() < HEADER || &bytes[..8] != MAGIC {
        return Err(corrupt("bad record header".into()));
    }
    let (pid, rows, kind, dim, code_len) = (
        u32_at(&bytes, 8),
        u32_at(&bytes, 12) as usize,
        u32_at(&bytes, 16),
        u32_at(&bytes, 20) as usize,
        u32_at(&bytes, 24) as usize,
    );
    let body_len = u64::from_le_bytes(
        bytes[28..36]
            .try_into()
            .map_err(|_| corrupt("header".into()))?,
    ) as usize;
    let crc = u32_at(&bytes, 36);
    if pid != partition || HEADER + body_len != bytes.len() {
        return Err(corrupt(
            "record does not match the segment directory".into(),
        ));
    }
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
    let payload = match kind {
        0 => {
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
        1 => {
            need(ids_len + rows * dim)?;
            let sq = sq.ok_or_else(|| corrupt("SQ partition without a quantizer".into()))?;
            let mut decoded = vec![0.0f32; rows * dim];
            for (code, out) in rest[..rows * dim]
                .chunks_exact(dim)
                .zip(decoded.chunks_exact_mut(dim))
            {
                sq.decode(code, out);
            }
            Payload::Sq(VectorBlocks::from_rows(dim, &decoded))
        }
        2 => {
            need(ids_len + rows * code_len)?;
            Payload::Pq {
                m: code_len,
                codes: rest[..rows * code_len].to_vec(),
                row_base: Vec::new(),
            }
        }
        other => return Err(corrupt(format!("unknown payload kind {other}"))),
    };
    Ok(Partition { row_ids, payload })
}
