//! One float32 query against one row of 8-bit codes at a time: the
//! estimate an `hnsw` walk reads (see `index::hnsw::codes`).
//!
//! A walk visits rows one by one; reading a row's 8-bit codes instead of
//! its float32 vector moves a quarter of the bytes, which is what the walk
//! waits on once the vectors outgrow the caches. The codes are widened to
//! float32 in registers (exactly) and multiplied into the query, which the
//! caller has already scaled by the quantizer's steps, so
//! `q · x̂ = q · min + CodeDot::dot(q ⊙ step, code)`.
//!
//! Like [`PairDot`](super::pair::PairDot), this is an estimate with its
//! own summation order: walks compare these among themselves only, and
//! [`CodeDot::dot4`] gives every row the bits [`CodeDot::dot`] gives it.

/// The walk's code dot product, chosen once for the CPU.
#[derive(Clone, Copy)]
pub struct CodeDot {
    one: fn(&[f32], &[u8]) -> f32,
    four: fn(&[f32], [&[u8]; 4]) -> [f32; 4],
}

impl std::fmt::Debug for CodeDot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CodeDot")
    }
}

impl CodeDot {
    /// The fastest form this CPU runs.
    pub fn detect() -> CodeDot {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            return CodeDot {
                // SAFETY: AVX2 and FMA were detected above.
                one: |q, c| unsafe { code_rows_avx2::<1>(q, [c])[0] },
                // SAFETY: as above.
                four: |q, rows| unsafe { code4_avx2(q, rows) },
            };
        }
        CodeDot {
            one: code_dot_portable,
            four: |q, rows| rows.map(|r| code_dot_portable(q, r)),
        }
    }

    /// `q · code` (the codes as numbers 0–255; equal lengths).
    #[inline(always)]
    pub fn dot(self, q: &[f32], code: &[u8]) -> f32 {
        (self.one)(q, code)
    }

    /// [`CodeDot::dot`] of four rows, each bit for bit as alone.
    #[inline(always)]
    pub fn dot4(self, q: &[f32], rows: [&[u8]; 4]) -> [f32; 4] {
        (self.four)(q, rows)
    }
}

/// Eight partial sums, added pairwise at the end.
fn code_dot_portable(q: &[f32], code: &[u8]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (cq, cc) = (q.chunks_exact(8), code.chunks_exact(8));
    let (rq, rc) = (cq.remainder(), cc.remainder());
    for (x, c) in cq.zip(cc) {
        for i in 0..8 {
            acc[i] += x[i] * f32::from(c[i]);
        }
    }
    let mut tail = 0.0f32;
    for (x, &c) in rq.iter().zip(rc) {
        tail += x * f32::from(c);
    }
    let mut width = 8;
    while width > 1 {
        width /= 2;
        for i in 0..width {
            acc[i] += acc[i + width];
        }
    }
    acc[0] + tail
}

/// [`code_rows_avx2`] of four rows, two at a time.
///
/// # Safety
/// The CPU supports AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn code4_avx2(q: &[f32], rows: [&[u8]; 4]) -> [f32; 4] {
    let [w, x] = code_rows_avx2::<2>(q, [rows[0], rows[1]]);
    let [y, z] = code_rows_avx2::<2>(q, [rows[2], rows[3]]);
    [w, x, y, z]
}

/// Two eight-lane FMA accumulators over 16 codes a step (widened u8 →
/// i32 → f32), a step of 8 into the first, a scalar tail; the same
/// operations for each row whatever `R` is.
///
/// # Safety
/// The CPU supports AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
#[allow(clippy::needless_range_loop)] // rows and lanes side by side
unsafe fn code_rows_avx2<const R: usize>(q: &[f32], rows: [&[u8]; R]) -> [f32; R] {
    use std::arch::x86_64::*;
    let n = rows.iter().fold(q.len(), |n, r| n.min(r.len()));
    let pq = q.as_ptr();
    let p = rows.map(|r| r.as_ptr());
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    let mut i = 0;
    while i + 16 <= n {
        let q0 = _mm256_loadu_ps(pq.add(i));
        let q1 = _mm256_loadu_ps(pq.add(i + 8));
        for r in 0..R {
            let c = _mm_loadu_si128(p[r].add(i).cast::<__m128i>());
            let lo = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(c));
            let hi = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128::<8>(c)));
            acc[r][0] = _mm256_fmadd_ps(q0, lo, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(q1, hi, acc[r][1]);
        }
        i += 16;
    }
    if i + 8 <= n {
        let q0 = _mm256_loadu_ps(pq.add(i));
        for r in 0..R {
            let c = _mm_loadl_epi64(p[r].add(i).cast::<__m128i>());
            let lo = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(c));
            acc[r][0] = _mm256_fmadd_ps(q0, lo, acc[r][0]);
        }
        i += 8;
    }
    let mut out = [0.0f32; R];
    for r in 0..R {
        let mut total = super::pair::sum_lanes(_mm256_add_ps(acc[r][0], acc[r][1]));
        for j in i..n {
            total += *pq.add(j) * f32::from(*p[r].add(j));
        }
        out[r] = total;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn data(dim: usize, seed: u64) -> (Vec<f32>, Vec<Vec<u8>>) {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let q = (0..dim).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let rows = (0..4)
            .map(|_| (0..dim).map(|_| rng.random()).collect())
            .collect();
        (q, rows)
    }

    #[test]
    fn four_rows_at_once_are_each_row_alone_bit_for_bit() {
        let code = CodeDot::detect();
        for dim in [1, 7, 8, 15, 16, 17, 24, 33, 384] {
            let (q, r) = data(dim, dim as u64);
            let four = code.dot4(&q, [&r[0], &r[1], &r[2], &r[3]]);
            for i in 0..4 {
                assert_eq!(
                    four[i].to_bits(),
                    code.dot(&q, &r[i]).to_bits(),
                    "{dim} {i}"
                );
            }
        }
    }

    #[test]
    fn the_code_dot_is_close_to_the_exact_one() {
        let code = CodeDot::detect();
        for dim in [1, 5, 8, 16, 31, 33, 100, 384, 1536] {
            let (q, r) = data(dim, dim as u64 + 11);
            let exact: f64 = q
                .iter()
                .zip(&r[0])
                .map(|(a, &c)| *a as f64 * c as f64)
                .sum();
            for got in [code.dot(&q, &r[0]), code_dot_portable(&q, &r[0])] {
                assert!(
                    (got as f64 - exact).abs() <= 1e-4 * 255.0 * (1.0 + dim as f64).sqrt(),
                    "dim {dim}: {got} vs {exact}"
                );
            }
        }
    }
}
