//! The block-transposed vector layout the kernel reads, and query rows
//! prepared for a metric.

use super::metric::Metric;
use super::{fma_dot, Kernel};
use std::ops::Range;

/// Lanes per block: vectors that share one SIMD register row.
pub const BLOCK: usize = 16;

/// One dimension of one block: 16 lanes, 64-byte aligned (one cache line).
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Lanes(pub [f32; BLOCK]);

/// What one dimension of a 16-row block holds, as the kernels read it:
/// float32 vectors ([`Lanes`]) or 8-bit codes
/// ([`CodeLanes`](super::codes::CodeLanes)), each lane exactly a float32.
pub trait BlockLanes: Copy {
    /// The 16 lanes as float32.
    fn values(&self) -> [f32; BLOCK];
}

impl BlockLanes for Lanes {
    #[inline]
    fn values(&self) -> [f32; BLOCK] {
        self.0
    }
}
/// ‖x‖² of the 16 vectors of one block (`dim` lanes), each as the FMA chain
/// of [`fma_dot`] — vectorised across the block's vectors.
fn block_norms(block: &[Lanes]) -> [f32; BLOCK] {
    #[cfg(target_arch = "x86_64")]
    {
        if Kernel::detect() == Kernel::Avx512 {
            // SAFETY: AVX-512F was detected.
            return unsafe { super::x86::block_norms_avx512(block) };
        }
    }
    let mut acc = [0.0f32; BLOCK];
    for lanes in block {
        for (a, x) in acc.iter_mut().zip(lanes.0) {
            *a = x.mul_add(x, *a);
        }
    }
    acc
}

/// Queries made ready for a metric: cosine queries are normalised, and
/// ‖q‖² is precomputed. Single and batch searches both go through this.
#[derive(Clone, Debug)]
pub struct PreparedQueries {
    /// Number of dimensions.
    pub dim: usize,
    /// Row-major `len × dim` query matrix.
    pub data: Vec<f32>,
    /// ‖q‖² per prepared query.
    pub norms_sq: Vec<f32>,
}

impl PreparedQueries {
    /// Prepares `rows` (row-major, `dim` wide) for `metric`.
    /// Callers validate first: cosine queries must have a non-zero norm.
    pub fn new(metric: Metric, dim: usize, rows: &[f32]) -> Self {
        let mut data = rows.to_vec();
        if metric == Metric::Cosine {
            for q in data.chunks_exact_mut(dim) {
                let norm = fma_dot(q, q).sqrt();
                if norm > 0.0 {
                    q.iter_mut().for_each(|v| *v /= norm);
                }
            }
        }
        let norms_sq = data.chunks_exact(dim).map(|q| fma_dot(q, q)).collect();
        PreparedQueries {
            dim,
            data,
            norms_sq,
        }
    }

    /// Number of queries.
    pub fn len(&self) -> usize {
        self.norms_sq.len()
    }

    /// True when there are no queries.
    pub fn is_empty(&self) -> bool {
        self.norms_sq.is_empty()
    }

    /// Query `i` as a slice.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }
}

/// Vectors in block-transposed layout with precomputed squared norms.
#[derive(Clone, Debug, Default)]
pub struct VectorBlocks {
    dim: usize,
    len: usize,
    blocks: Vec<Lanes>,
    norms_sq: Vec<f32>,
}

impl VectorBlocks {
    /// An empty set of `dim`-dimensional vectors.
    pub fn new(dim: usize) -> Self {
        VectorBlocks {
            dim,
            len: 0,
            blocks: Vec::new(),
            norms_sq: Vec::new(),
        }
    }

    /// Builds from row-major vectors (`rows.len()` must be a multiple of `dim`).
    pub fn from_rows(dim: usize, rows: &[f32]) -> Self {
        let mut out = VectorBlocks::new(dim);
        out.extend_from_rows(rows);
        out
    }

    /// Appends row-major vectors.
    pub fn extend_from_rows(&mut self, rows: &[f32]) {
        assert!(self.dim > 0 && rows.len().is_multiple_of(self.dim));
        let n = rows.len() / self.dim;
        self.blocks
            .resize((self.len + n).div_ceil(BLOCK) * self.dim, Lanes::default());
        for (r, v) in rows.chunks_exact(self.dim).enumerate() {
            let i = self.len + r;
            let (b, lane) = (i / BLOCK, i % BLOCK);
            for (j, x) in v.iter().enumerate() {
                self.blocks[b * self.dim + j].0[lane] = *x;
            }
        }
        let first_block = self.len / BLOCK;
        self.len += n;
        // Norms of every block touched, 16 vectors at a time: lane by lane
        // the same FMA chain as `fma_dot(v, v)`, so the same bits.
        self.norms_sq.truncate(first_block * BLOCK);
        for b in first_block..self.block_count() {
            let lanes = block_norms(&self.blocks[b * self.dim..(b + 1) * self.dim]);
            let live = (self.len - b * BLOCK).min(BLOCK);
            self.norms_sq.extend_from_slice(&lanes[..live]);
        }
    }

    /// Number of dimensions.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of vectors.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of 16-vector blocks (the last may be padded with zeros).
    pub fn block_count(&self) -> usize {
        self.len.div_ceil(BLOCK)
    }

    /// ‖x‖² per vector.
    pub fn norms_sq(&self) -> &[f32] {
        &self.norms_sq
    }

    /// Vector `i`, copied out of the transposed layout.
    pub fn vector(&self, i: usize) -> Vec<f32> {
        let (b, lane) = (i / BLOCK, i % BLOCK);
        (0..self.dim)
            .map(|j| self.blocks[b * self.dim + j].0[lane])
            .collect()
    }

    /// Bytes held (for memory accounting).
    pub fn size_bytes(&self) -> usize {
        self.blocks.len() * std::mem::size_of::<Lanes>() + self.norms_sq.len() * 4
    }

    /// Rebuilds from the raw parts written by [`VectorBlocks::raw_blocks`]
    /// and [`VectorBlocks::norms_sq`]; `None` if the sizes disagree.
    pub fn from_parts(
        dim: usize,
        len: usize,
        blocks: Vec<Lanes>,
        norms_sq: Vec<f32>,
    ) -> Option<Self> {
        (dim > 0 && blocks.len() == len.div_ceil(BLOCK) * dim && norms_sq.len() == len).then_some(
            VectorBlocks {
                dim,
                len,
                blocks,
                norms_sq,
            },
        )
    }

    /// The block-transposed storage, `block_count() × dim` lanes.
    pub fn raw_blocks(&self) -> &[Lanes] {
        &self.blocks
    }

    pub(super) fn block_slice(&self, blocks: Range<usize>) -> &[Lanes] {
        &self.blocks[blocks.start * self.dim..blocks.end * self.dim]
    }
}
