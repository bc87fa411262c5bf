//! 8-bit codes in the kernel's block-transposed layout, scored without
//! decoding them to memory (IVF_SQ partitions).
//!
//! A scalar-quantized row is `x_j = min_j + step_j · code_j`, so
//! `q · x = q · min + Σ_j (q_j · step_j) · code_j`. The kernel takes the
//! query pre-multiplied by the steps and runs, per (query, row), one FMA
//! chain over `j` of `q'_j × (code_j as f32)` from `+0.0` — the codes are
//! widened to float32 in registers (exactly: every u8 is a float32). As in
//! the float kernel, that per-pair order is the same for every tile shape
//! and instruction set, so results are batch invariant. A partition held
//! this way weighs a quarter of its decoded float32 form.
//!
//! With many queries on one partition the widening is done once instead:
//! the codes are widened into a per-thread float32 scratch block and the
//! float kernel runs over it. Widening is exact, so that is the same FMA
//! chain and the same bits — only cheaper when the widened block is
//! reused by enough queries (compute-bound, the in-register widening is
//! extra work per tile; memory-bound, the 8-bit read wins).

use super::blocks::{BlockLanes, Lanes, BLOCK};
use super::{fma_dot, Kernel};

/// One dimension of one block of codes: 16 rows' bytes.
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CodeLanes(pub [u8; BLOCK]);

impl BlockLanes for CodeLanes {
    #[inline]
    fn values(&self) -> [f32; BLOCK] {
        self.0.map(f32::from)
    }
}

/// Rows of `dim` 8-bit codes, block-transposed (16 rows per block, one
/// [`CodeLanes`] per dimension), with the squared norms of the vectors they
/// decode to.
#[derive(Clone, Debug, Default)]
pub struct CodeBlocks {
    dim: usize,
    len: usize,
    blocks: Vec<CodeLanes>,
    norms_sq: Vec<f32>,
}

impl CodeBlocks {
    /// Transposes row-major `codes` (`dim` bytes per row); `norms_sq[r]` is
    /// ‖decoded row r‖². `None` when the sizes disagree.
    pub fn from_rows(dim: usize, codes: &[u8], norms_sq: Vec<f32>) -> Option<Self> {
        if dim == 0 || !codes.len().is_multiple_of(dim) || codes.len() / dim != norms_sq.len() {
            return None;
        }
        let len = norms_sq.len();
        let mut blocks = vec![CodeLanes::default(); len.div_ceil(BLOCK) * dim];
        for (r, row) in codes.chunks_exact(dim).enumerate() {
            let (b, lane) = (r / BLOCK, r % BLOCK);
            for (j, c) in row.iter().enumerate() {
                blocks[b * dim + j].0[lane] = *c;
            }
        }
        Some(CodeBlocks {
            dim,
            len,
            blocks,
            norms_sq,
        })
    }

    /// Number of dimensions.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of 16-row blocks (the last may be padded with zero codes).
    pub fn block_count(&self) -> usize {
        self.len.div_ceil(BLOCK)
    }

    /// ‖decoded row‖² per row.
    pub fn norms_sq(&self) -> &[f32] {
        &self.norms_sq
    }

    /// Row `i`'s codes, copied out of the transposed layout.
    pub fn code(&self, i: usize) -> Vec<u8> {
        let (b, lane) = (i / BLOCK, i % BLOCK);
        (0..self.dim)
            .map(|j| self.blocks[b * self.dim + j].0[lane])
            .collect()
    }

    /// Bytes held (for memory accounting).
    pub fn size_bytes(&self) -> usize {
        self.blocks.len() * BLOCK + self.norms_sq.len() * 4
    }
}

/// From this many queries on, [`dot_code_blocks`] widens the codes once
/// into float32 and runs the float kernel (same bits, see the module doc).
pub const WIDEN_FROM_QUERIES: usize = 8;

thread_local! {
    /// Per-thread scratch for widened code blocks (kept between calls).
    static WIDENED: std::cell::RefCell<Vec<Lanes>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `queries` (row-major, `dim` wide) times every row's codes as floats:
/// `out[qi * stride + r]`, `stride = block_count() × 16`; each entry the FMA
/// chain of [`fma_dot`] over `q_j × code_j`. Padding lanes get zero.
pub fn dot_code_blocks(kernel: Kernel, queries: &[f32], xs: &CodeBlocks, out: &mut [f32]) {
    let dim = xs.dim;
    assert!(dim > 0 && queries.len().is_multiple_of(dim));
    let nq = queries.len() / dim;
    let stride = xs.block_count() * BLOCK;
    assert!(out.len() >= nq * stride);
    assert_eq!(xs.blocks.len(), xs.block_count() * dim);
    if nq >= WIDEN_FROM_QUERIES {
        WIDENED.with(|scratch| {
            let mut lanes = scratch.borrow_mut();
            lanes.clear();
            lanes.extend(xs.blocks.iter().map(|c| Lanes(c.values())));
            super::dot_lanes(kernel, queries, nq, dim, &lanes, out, stride, false);
        });
        return;
    }
    super::dot_lanes(kernel, queries, nq, dim, &xs.blocks, out, stride, false);
}

/// The reference for one (query, row) pair: [`fma_dot`] of the query with
/// the codes widened to floats.
pub fn code_dot(q: &[f32], code: &[u8]) -> f32 {
    let widened: Vec<f32> = code.iter().map(|&c| f32::from(c)).collect();
    fma_dot(q, &widened)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn every_kernel_matches_the_fma_chain_bit_for_bit_at_every_tile_shape() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(17);
        for &(nq, n, dim) in &[
            (1, 1, 1),
            (1, 100, 7),
            (2, 33, 9),
            (3, 17, 5),
            (5, 48, 16),
            (8, 32, 16),
            (9, 70, 33),
            (13, 40, 384),
            (64, 50, 128),
        ] {
            let q: Vec<f32> = (0..nq * dim).map(|_| rng.random_range(-1.0..1.0)).collect();
            let codes: Vec<u8> = (0..n * dim).map(|_| rng.random()).collect();
            let xs = CodeBlocks::from_rows(dim, &codes, vec![0.0; n]).unwrap();
            let stride = xs.block_count() * BLOCK;
            for kernel in Kernel::available() {
                let mut out = vec![f32::NAN; nq * stride];
                dot_code_blocks(kernel, &q, &xs, &mut out);
                for i in 0..nq {
                    let qi = &q[i * dim..(i + 1) * dim];
                    for r in 0..n {
                        let want = code_dot(qi, &codes[r * dim..(r + 1) * dim]);
                        assert_eq!(
                            out[i * stride + r].to_bits(),
                            want.to_bits(),
                            "{kernel:?} q{i} r{r} nq={nq} n={n} dim={dim}"
                        );
                    }
                    // One query alone gives the same bits as inside the tile.
                    let mut alone = vec![0.0; stride];
                    dot_code_blocks(kernel, qi, &xs, &mut alone);
                    assert_eq!(
                        alone[..n].iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                        out[i * stride..i * stride + n]
                            .iter()
                            .map(|x| x.to_bits())
                            .collect::<Vec<_>>()
                    );
                }
            }
            for r in 0..n {
                assert_eq!(xs.code(r), codes[r * dim..(r + 1) * dim].to_vec());
            }
        }
    }
}
