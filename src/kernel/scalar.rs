//! The portable fallback of the dot kernel: the same FMA chain per pair
//! as the SIMD tiles, with `f32::mul_add`.

use super::blocks::{BlockLanes, BLOCK};

/// `out[i * stride + r]` for every query `i` and row `r` of the blocks `x`.
pub fn dots_scalar<L: BlockLanes>(
    q: &[f32],
    nq: usize,
    dim: usize,
    x: &[L],
    out: &mut [f32],
    stride: usize,
) {
    let nblocks = x.len() / dim;
    for i in 0..nq {
        let qrow = &q[i * dim..(i + 1) * dim];
        for b in 0..nblocks {
            let mut acc = [0.0f32; BLOCK];
            for (j, qj) in qrow.iter().enumerate() {
                let xl = x[b * dim + j].values();
                for lane in 0..BLOCK {
                    acc[lane] = qj.mul_add(xl[lane], acc[lane]);
                }
            }
            out[i * stride + b * BLOCK..i * stride + (b + 1) * BLOCK].copy_from_slice(&acc);
        }
    }
}
