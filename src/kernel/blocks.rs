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

    /// `fma_dot(queries.row(q), &self.vector(i))` for each pair `(q, i)`
    /// — the same FMA chain from `+0.0`, so the same bits — with eight
    /// pairs' chains interleaved so that they do not wait on each other's
    /// latency (a refine's scattered candidates, one row each). Panics
    /// where `i` or `q` is out of range or the dimensions differ.
    pub fn fma_dot_pairs(&self, queries: &PreparedQueries, pairs: &[(usize, usize)]) -> Vec<f32> {
        assert_eq!(queries.dim, self.dim, "fma_dot_pairs: dimensions differ");
        #[cfg(target_arch = "x86_64")]
        if super::has_fma() {
            // SAFETY: the CPU supports FMA (checked above).
            return unsafe { self.fma_dot_pairs_hw(queries, pairs) };
        }
        self.fma_dot_pairs_chains(queries, pairs)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "fma")]
    unsafe fn fma_dot_pairs_hw(
        &self,
        queries: &PreparedQueries,
        pairs: &[(usize, usize)],
    ) -> Vec<f32> {
        self.fma_dot_pairs_chains(queries, pairs)
    }

    #[inline(always)]
    fn fma_dot_pairs_chains(
        &self,
        queries: &PreparedQueries,
        pairs: &[(usize, usize)],
    ) -> Vec<f32> {
        const WAYS: usize = 8;
        let dim = self.dim;
        let mut out = Vec::with_capacity(pairs.len());
        for group in pairs.chunks(WAYS) {
            // Short groups repeat their first pair in the spare chains.
            let pick = |l: usize| group.get(l).unwrap_or(&group[0]);
            let q: [&[f32]; WAYS] = std::array::from_fn(|l| queries.row(pick(l).0));
            let x: [&[Lanes]; WAYS] = std::array::from_fn(|l| {
                let b = pick(l).1 / BLOCK;
                &self.blocks[b * dim..(b + 1) * dim]
            });
            let lane: [usize; WAYS] = std::array::from_fn(|l| pick(l).1 % BLOCK);
            for &(_, i) in group {
                assert!(i < self.len, "fma_dot_pairs: row {i} of {}", self.len);
            }
            let mut acc = [0.0f32; WAYS];
            for j in 0..dim {
                for l in 0..WAYS {
                    acc[l] = q[l][j].mul_add(x[l][j].0[lane[l]], acc[l]);
                }
            }
            out.extend_from_slice(&acc[..group.len()]);
        }
        out
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::fma_dot;

    /// Interleaved chains give `fma_dot`'s bits for every pair, in full
    /// and short groups of eight.
    #[test]
    fn fma_dot_pairs_are_fma_dots() {
        let (dim, rows, nq) = (37, 70, 5);
        let mut seed = 5u64;
        let mut next = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        };
        let data: Vec<f32> = (0..rows * dim).map(|_| next()).collect();
        let qs: Vec<f32> = (0..nq * dim).map(|_| next()).collect();
        let xs = VectorBlocks::from_rows(dim, &data);
        let queries = PreparedQueries::new(Metric::Dot, dim, &qs);
        for n in [0, 1, 7, 8, 9, 23] {
            let pairs: Vec<(usize, usize)> = (0..n).map(|p| (p * 3 % nq, p * 17 % rows)).collect();
            let got = xs.fma_dot_pairs(&queries, &pairs);
            assert_eq!(got.len(), n);
            for (&(q, i), g) in pairs.iter().zip(&got) {
                let want = fma_dot(queries.row(q), &xs.vector(i));
                assert_eq!(g.to_bits(), want.to_bits(), "pair ({q}, {i})");
            }
        }
    }
}
