//! One query against one stored row at a time: what a graph walk needs.
//!
//! The block kernels ([`crate::kernel::dot_blocks`]) score many rows per
//! call; a graph walk visits rows one by one, in an order it learns as it
//! goes. Two functions serve it:
//!
//! * [`PairDot`], the walk's estimate: eight-lane (AVX2) or sixteen-lane
//!   partial sums added at the end — fast, but rounded differently from the
//!   FMA chain. Walks only compare these among themselves.
//! * [`fma_dots`], the exact dot products of one query with several rows,
//!   each as the FMA chain of [`fma_dot`](crate::kernel::fma_dot) (the bits
//!   of every block kernel), interleaved so that the chains hide each
//!   other's latency. Reported distances are finished from these, so a
//!   graph search and an exact scan give a row the same distance.

/// Rows [`fma_dots`] interleaves.
pub const CHAINS: usize = 8;

/// The walk's dot product: chosen once for the CPU, then called through
/// plain function pointers. [`PairDot::dot4`] gives each row the very bits
/// [`PairDot::dot`] gives it (the same operations, four rows interleaved).
#[derive(Clone, Copy)]
pub struct PairDot {
    one: fn(&[f32], &[f32]) -> f32,
    four: fn(&[f32], [&[f32]; 4]) -> [f32; 4],
}

impl std::fmt::Debug for PairDot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PairDot")
    }
}

impl PairDot {
    /// The fastest estimate this CPU runs.
    pub fn detect() -> PairDot {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            return PairDot {
                // SAFETY: AVX2 and FMA were detected above.
                one: |a, b| unsafe { dot_avx2(a, b) },
                // SAFETY: as above.
                four: |a, rows| unsafe { dot4_avx2(a, rows) },
            };
        }
        PairDot {
            one: dot_portable,
            four: |a, rows| rows.map(|r| dot_portable(a, r)),
        }
    }

    /// `a · b` (equal lengths), summed in lanes.
    #[inline(always)]
    pub fn dot(self, a: &[f32], b: &[f32]) -> f32 {
        (self.one)(a, b)
    }

    /// `a · rows[r]` for four rows of `a`'s length, each equal to
    /// [`PairDot::dot`] of that row bit for bit.
    #[inline(always)]
    pub fn dot4(self, a: &[f32], rows: [&[f32]; 4]) -> [f32; 4] {
        (self.four)(a, rows)
    }
}

/// Asks the CPU to start loading the cache lines of `row` (float32 values
/// or 8-bit codes; up to the first 1 KiB), so that a dot product soon
/// after finds them near.
#[inline(always)]
pub fn prefetch<T>(row: &[T]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let lines = std::mem::size_of_val(row).div_ceil(64).min(16);
        for l in 0..lines {
            // SAFETY: prefetching is a hint and never faults; the address
            // lies inside (or one line past the start of) `row`.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(row.as_ptr().cast::<i8>().wrapping_add(64 * l)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = row;
}

/// `out[i]` = the distance to `nodes[i]`: groups of four by `four` (their
/// rows load side by side), the rest one by one by `one`. How every walk
/// and build distance scores a node's neighbours.
#[inline(always)]
pub fn in_fours(
    nodes: &[u32],
    out: &mut [f32],
    mut four: impl FnMut([u32; 4]) -> [f32; 4],
    mut one: impl FnMut(u32) -> f32,
) {
    let groups = nodes.chunks_exact(4);
    let rest = groups.remainder();
    let mut at = 0;
    for g in groups {
        out[at..at + 4].copy_from_slice(&four([g[0], g[1], g[2], g[3]]));
        at += 4;
    }
    for &i in rest {
        out[at] = one(i);
        at += 1;
    }
}

/// Sixteen partial sums, added pairwise at the end.
fn dot_portable(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..16 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut tail = 0.0f32;
    for (x, y) in ra.iter().zip(rb) {
        tail += x * y;
    }
    let mut width = 16;
    while width > 1 {
        width /= 2;
        for i in 0..width {
            acc[i] += acc[i + width];
        }
    }
    acc[0] + tail
}

/// The eight lanes of `s` summed (the same tree for every row).
///
/// # Safety
/// The CPU supports AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn sum_lanes(s: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::*;
    let half = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    let quad = _mm_add_ps(half, _mm_movehl_ps(half, half));
    _mm_cvtss_f32(_mm_add_ss(quad, _mm_shuffle_ps(quad, quad, 1)))
}

/// Four eight-lane FMA accumulators over 32 dimensions a step, then steps
/// of 8 into the first, then a scalar tail; the accumulators added as
/// `(0 + 1) + (2 + 3)`.
///
/// # Safety
/// The CPU supports AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    dot_rows_avx2::<1>(a, [b])[0]
}

/// [`dot_avx2`] of four rows, two at a time.
///
/// # Safety
/// The CPU supports AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot4_avx2(a: &[f32], rows: [&[f32]; 4]) -> [f32; 4] {
    let [w, x] = dot_rows_avx2::<2>(a, [rows[0], rows[1]]);
    let [y, z] = dot_rows_avx2::<2>(a, [rows[2], rows[3]]);
    [w, x, y, z]
}

/// [`dot_avx2`] of `R` rows side by side: each row's operations are the
/// same whatever `R` is.
///
/// # Safety
/// The CPU supports AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
#[allow(clippy::needless_range_loop)] // rows and lanes side by side
unsafe fn dot_rows_avx2<const R: usize>(a: &[f32], rows: [&[f32]; R]) -> [f32; R] {
    use std::arch::x86_64::*;
    let n = rows.iter().fold(a.len(), |n, r| n.min(r.len()));
    let pa = a.as_ptr();
    let p = rows.map(|r| r.as_ptr());
    let mut acc = [[_mm256_setzero_ps(); 4]; R];
    let mut i = 0;
    while i + 32 <= n {
        for j in 0..4 {
            let q = _mm256_loadu_ps(pa.add(i + 8 * j));
            for r in 0..R {
                acc[r][j] = _mm256_fmadd_ps(q, _mm256_loadu_ps(p[r].add(i + 8 * j)), acc[r][j]);
            }
        }
        i += 32;
    }
    while i + 8 <= n {
        let q = _mm256_loadu_ps(pa.add(i));
        for r in 0..R {
            acc[r][0] = _mm256_fmadd_ps(q, _mm256_loadu_ps(p[r].add(i)), acc[r][0]);
        }
        i += 8;
    }
    let mut out = [0.0f32; R];
    for r in 0..R {
        let s = _mm256_add_ps(
            _mm256_add_ps(acc[r][0], acc[r][1]),
            _mm256_add_ps(acc[r][2], acc[r][3]),
        );
        let mut total = sum_lanes(s);
        for j in i..n {
            total += *pa.add(j) * *p[r].add(j);
        }
        out[r] = total;
    }
    out
}

/// `out[r] = fma_dot(q, rows[r])` for up to [`CHAINS`] rows: the exact
/// FMA chains of the block kernels, run side by side.
pub fn fma_dots(q: &[f32], rows: &[&[f32]], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::has_fma() {
        // SAFETY: the CPU supports FMA (checked above).
        unsafe { fma_dots_hw(q, rows, out) };
        return;
    }
    fma_dots_chains(q, rows, out);
}

#[inline(always)]
fn fma_dots_chains(q: &[f32], rows: &[&[f32]], out: &mut [f32]) {
    let n = rows.len().min(CHAINS).min(out.len());
    let mut acc = [0.0f32; CHAINS];
    if n == CHAINS {
        for (j, x) in q.iter().enumerate() {
            for r in 0..CHAINS {
                acc[r] = x.mul_add(rows[r][j], acc[r]);
            }
        }
    } else {
        for (j, x) in q.iter().enumerate() {
            for r in 0..n {
                acc[r] = x.mul_add(rows[r][j], acc[r]);
            }
        }
    }
    out[..n].copy_from_slice(&acc[..n]);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn fma_dots_hw(q: &[f32], rows: &[&[f32]], out: &mut [f32]) {
    fma_dots_chains(q, rows, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::fma_dot;
    use rand::{Rng, SeedableRng};

    fn rows(n: usize, dim: usize, seed: u64) -> Vec<Vec<f32>> {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        (0..n)
            .map(|_| (0..dim).map(|_| rng.random_range(-1.0f32..1.0)).collect())
            .collect()
    }

    #[test]
    fn fma_dots_are_the_fma_chain_bit_for_bit() {
        for dim in [1, 7, 33, 384] {
            let q = &rows(1, dim, 1)[0];
            let data = rows(CHAINS, dim, dim as u64);
            for n in 1..=CHAINS {
                let refs: Vec<&[f32]> = data[..n].iter().map(|r| r.as_slice()).collect();
                let mut out = [f32::NAN; CHAINS];
                fma_dots(q, &refs, &mut out);
                for r in 0..n {
                    assert_eq!(
                        out[r].to_bits(),
                        fma_dot(q, &data[r]).to_bits(),
                        "{dim} {n} {r}"
                    );
                }
            }
        }
    }

    #[test]
    fn four_rows_at_once_are_each_row_alone_bit_for_bit() {
        let pair = PairDot::detect();
        for dim in [1, 7, 8, 15, 16, 24, 33, 384] {
            let q = &rows(1, dim, 2)[0];
            let r = rows(4, dim, dim as u64 + 3);
            let four = pair.dot4(q, [&r[0], &r[1], &r[2], &r[3]]);
            for i in 0..4 {
                assert_eq!(
                    four[i].to_bits(),
                    pair.dot(q, &r[i]).to_bits(),
                    "dim {dim} row {i}"
                );
            }
        }
    }

    #[test]
    fn the_walk_estimate_is_close_to_the_exact_dot() {
        let pair = PairDot::detect();
        for dim in [1, 5, 8, 31, 32, 33, 100, 384, 1536] {
            let v = rows(2, dim, dim as u64 + 7);
            let exact: f64 = v[0]
                .iter()
                .zip(&v[1])
                .map(|(a, b)| *a as f64 * *b as f64)
                .sum();
            for got in [pair.dot(&v[0], &v[1]), dot_portable(&v[0], &v[1])] {
                assert!(
                    (got as f64 - exact).abs() <= 1e-4 * (1.0 + dim as f64).sqrt(),
                    "dim {dim}: {got} vs {exact}"
                );
            }
        }
    }
}
