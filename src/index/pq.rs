//! Product quantization: a vector's residual to its partition centroid is
//! cut into `m` sub-vectors, each replaced by the index (one byte) of its
//! nearest of 256 sub-centroids. A query scores codes through a lookup table
//! of `m × 256` partial distances (asymmetric distance computation, ADC).

use crate::index::kmeans::{self, KMeansParams};
use crate::kernel::Metric;

/// Sub-centroids per sub-space (8-bit codes).
pub const CODES: usize = 256;

/// Trained codebooks. Stored sub-space-major and dimension-major within a
/// sub-space (`codebook[s][t][j]`), so a lookup-table row is a vectorisable
/// loop over the 256 entries.
#[derive(Clone, Debug, PartialEq)]
pub struct ProductQuantizer {
    /// Full dimension.
    pub dim: usize,
    /// Number of sub-vectors.
    pub m: usize,
    /// `m × dsub × 256` floats.
    pub codebook: Vec<f32>,
}

impl ProductQuantizer {
    /// Dimensions per sub-vector.
    pub fn dsub(&self) -> usize {
        self.dim / self.m
    }

    /// Trains codebooks on residuals (row-major, `dim` wide), with a
    /// seeded L2 k-means per sub-space.
    pub fn train(
        residuals: &[f32],
        dim: usize,
        m: usize,
        iterations: usize,
        seed: u64,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Self {
        let dsub = dim / m;
        let n = residuals.len() / dim;
        let mut codebook = vec![0.0f32; m * dsub * CODES];
        for s in 0..m {
            let sub: Vec<f32> = (0..n)
                .flat_map(|i| {
                    residuals[i * dim + s * dsub..i * dim + (s + 1) * dsub]
                        .iter()
                        .copied()
                })
                .collect();
            let params = KMeansParams {
                k: CODES,
                iterations,
                seed: seed.wrapping_add(s as u64),
                metric: Metric::L2,
            };
            let cents = kmeans::train(&sub, dsub, &params, &mut |_, _| {});
            let k = cents.len() / dsub;
            for j in 0..CODES {
                // With fewer than 256 training points, unused codes repeat centroid 0.
                let src = if j < k { j } else { 0 };
                for t in 0..dsub {
                    codebook[(s * dsub + t) * CODES + j] = cents[src * dsub + t];
                }
            }
            progress(s + 1, m);
        }
        ProductQuantizer { dim, m, codebook }
    }

    /// Code of one residual: nearest sub-centroid per sub-space (ties to
    /// the lower code).
    pub fn encode(&self, residual: &[f32], out: &mut [u8]) {
        let dsub = self.dsub();
        let mut dist = [0.0f32; CODES];
        for s in 0..self.m {
            self.sub_distances(s, &residual[s * dsub..(s + 1) * dsub], &mut dist);
            out[s] = crate::index::kmeans::argmin(&dist).0 as u8;
        }
    }

    /// Reconstructs a residual from its code.
    pub fn decode(&self, code: &[u8]) -> Vec<f32> {
        let dsub = self.dsub();
        let mut out = vec![0.0; self.dim];
        for s in 0..self.m {
            for t in 0..dsub {
                out[s * dsub + t] = self.codebook[(s * dsub + t) * CODES + code[s] as usize];
            }
        }
        out
    }

    /// Squared L2 distances from sub-vector `x` to every sub-centroid of
    /// sub-space `s`, accumulated over `t` in order.
    fn sub_distances(&self, s: usize, x: &[f32], out: &mut [f32; CODES]) {
        out.fill(0.0);
        let dsub = self.dsub();
        for (t, xt) in x.iter().enumerate().take(dsub) {
            let row = &self.codebook[(s * dsub + t) * CODES..(s * dsub + t + 1) * CODES];
            for (o, y) in out.iter_mut().zip(row) {
                let d = xt - y;
                *o += d * d;
            }
        }
    }

    /// The query's table, `m × 256`, computed once per query and segment:
    /// `−q_s · y` for dot and cosine, `−2 q_s · y` for l2. With
    /// [`row_bases`](Self::row_bases) and [`query_constant`](Self::query_constant)
    /// it gives ADC distances without a table per (query, partition) —
    /// FAISS's "precomputed tables":
    ///
    /// * l2: `‖q − c − y‖² = ‖q − c‖² + Σ_s (‖y_s‖² + 2 c_s·y_s) + Σ_s (−2 q_s·y_s)`
    /// * dot: `−q·(c + y) = −q·c + Σ_s (−q_s·y_s)`
    /// * cosine: `1 − q̂·(c + y)`, as dot plus one.
    pub fn query_table(&self, metric: Metric, q: &[f32], out: &mut [f32]) {
        let dsub = self.dsub();
        for s in 0..self.m {
            let row = &mut out[s * CODES..(s + 1) * CODES];
            row.fill(0.0);
            for t in 0..dsub {
                let qt = q[s * dsub + t];
                let cb = &self.codebook[(s * dsub + t) * CODES..(s * dsub + t + 1) * CODES];
                for (o, y) in row.iter_mut().zip(cb) {
                    *o += qt * y;
                }
            }
            let scale = if metric == Metric::L2 { -2.0 } else { -1.0 };
            row.iter_mut().for_each(|v| *v *= scale);
        }
    }

    /// The query-independent part of each row's distance in the partition
    /// with centroid `c`: `Σ_s (‖y_s‖² + 2 c_s·y_s)` for l2, zero otherwise.
    pub fn row_bases(&self, metric: Metric, c: &[f32], codes: &[u8]) -> Vec<f32> {
        let rows = codes.len() / self.m;
        if metric != Metric::L2 {
            return vec![0.0; rows];
        }
        let dsub = self.dsub();
        let mut table = vec![0.0f32; self.m * CODES];
        for s in 0..self.m {
            let row = &mut table[s * CODES..(s + 1) * CODES];
            for t in 0..dsub {
                let ct = c[s * dsub + t];
                let cb = &self.codebook[(s * dsub + t) * CODES..(s * dsub + t + 1) * CODES];
                for (o, y) in row.iter_mut().zip(cb) {
                    *o += y * y + 2.0 * ct * y;
                }
            }
        }
        codes
            .chunks_exact(self.m)
            .map(|code| Self::score(&table, code, 0.0))
            .collect()
    }

    /// The (query, partition) constant: `‖q − c‖²` for l2, `−q·c` for dot,
    /// `1 − q̂·c` for cosine.
    pub fn query_constant(metric: Metric, q: &[f32], c: &[f32]) -> f32 {
        match metric {
            Metric::L2 => {
                let mut acc = 0.0f32;
                for (a, b) in q.iter().zip(c) {
                    let d = a - b;
                    acc += d * d;
                }
                acc
            }
            Metric::Dot => -crate::kernel::fma_dot(q, c),
            Metric::Cosine => 1.0 - crate::kernel::fma_dot(q, c),
        }
    }

    /// `out[r] = score(table, code_r, constant + row_base[r])` for every row
    /// of `codes` (`m` bytes each). Eight rows are summed side by side so
    /// that their independent add chains overlap; each row's own sum runs in
    /// the same order as [`score`](Self::score), so the bits are the same.
    pub fn score_rows(
        table: &[f32],
        codes: &[u8],
        m: usize,
        constant: f32,
        row_base: &[f32],
        out: &mut [f32],
    ) {
        const LANES: usize = 8;
        let rows = codes.len() / m;
        let full = rows / LANES * LANES;
        for r in (0..full).step_by(LANES) {
            let mut acc = [0.0f32; LANES];
            for (i, a) in acc.iter_mut().enumerate() {
                *a = constant + row_base[r + i];
            }
            let block = &codes[r * m..(r + LANES) * m];
            for s in 0..m {
                let t = &table[s * CODES..(s + 1) * CODES];
                for (i, a) in acc.iter_mut().enumerate() {
                    *a += t[block[i * m + s] as usize];
                }
            }
            out[r..r + LANES].copy_from_slice(&acc);
        }
        for r in full..rows {
            out[r] = Self::score(table, &codes[r * m..(r + 1) * m], constant + row_base[r]);
        }
    }

    /// Sums one code's table entries in sub-space order, starting at `base`.
    #[inline]
    pub fn score(table: &[f32], code: &[u8], base: f32) -> f32 {
        let mut acc = base;
        for (s, c) in code.iter().enumerate() {
            acc += table[s * CODES + *c as usize];
        }
        acc
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::clustered_vectors;

    #[test]
    fn adc_equals_distance_to_the_decoded_vector() {
        let dim = 16;
        let data = clustered_vectors(3000, dim, 10, 5);
        // Treat the data as residuals to a centroid `c`.
        let c: Vec<f32> = (0..dim).map(|j| j as f32 * 0.1 - 0.5).collect();
        let pq = ProductQuantizer::train(&data, dim, 4, 8, 1, &mut |_, _| {});
        let q: Vec<f32> = clustered_vectors(1, dim, 10, 6);
        let mut table = vec![0.0; 4 * CODES];
        let mut code = vec![0u8; 4];
        for metric in [Metric::L2, Metric::Dot, Metric::Cosine] {
            pq.query_table(metric, &q, &mut table);
            let constant = ProductQuantizer::query_constant(metric, &q, &c);
            for r in data.chunks(dim).take(200) {
                pq.encode(r, &mut code);
                let base = pq.row_bases(metric, &c, &code)[0];
                let adc = ProductQuantizer::score(&table, &code, constant + base) as f64;
                let x: Vec<f64> = pq
                    .decode(&code)
                    .iter()
                    .zip(&c)
                    .map(|(y, c)| (*y + *c) as f64)
                    .collect();
                let qx: f64 = q.iter().zip(&x).map(|(a, b)| *a as f64 * b).sum();
                let direct = match metric {
                    Metric::L2 => q.iter().zip(&x).map(|(a, b)| (*a as f64 - b).powi(2)).sum(),
                    Metric::Dot => -qx,
                    Metric::Cosine => 1.0 - qx,
                };
                assert!(
                    (adc - direct).abs() <= 1e-4 * (1.0 + direct.abs()),
                    "{metric}: {adc} vs {direct}"
                );
            }
        }
    }

    #[test]
    fn score_rows_matches_score_bit_for_bit() {
        let pq = ProductQuantizer::train(
            &clustered_vectors(1000, 8, 5, 1),
            8,
            4,
            4,
            1,
            &mut |_, _| {},
        );
        let mut table = vec![0.0; 4 * CODES];
        pq.query_table(Metric::L2, &clustered_vectors(1, 8, 5, 2), &mut table);
        let codes: Vec<u8> = (0..4 * 21).map(|i| (i * 37 % 256) as u8).collect();
        let bases: Vec<f32> = (0..21).map(|i| i as f32 * 0.37).collect();
        let mut out = vec![0.0; 21];
        ProductQuantizer::score_rows(&table, &codes, 4, 1.5, &bases, &mut out);
        for r in 0..21 {
            let one = ProductQuantizer::score(&table, &codes[r * 4..(r + 1) * 4], 1.5 + bases[r]);
            assert_eq!(out[r].to_bits(), one.to_bits());
        }
    }

    #[test]
    fn reconstruction_error_is_small_relative_to_the_data_spread() {
        let dim = 16;
        let data = clustered_vectors(4000, dim, 10, 7);
        let pq = ProductQuantizer::train(&data, dim, 8, 10, 2, &mut |_, _| {});
        let mut code = vec![0u8; 8];
        let (mut err, mut spread) = (0.0f64, 0.0f64);
        let mean: Vec<f64> = (0..dim)
            .map(|j| data.chunks(dim).map(|x| x[j] as f64).sum::<f64>() / 4000.0)
            .collect();
        for x in data.chunks(dim) {
            pq.encode(x, &mut code);
            let dec = pq.decode(&code);
            err += x
                .iter()
                .zip(&dec)
                .map(|(a, b)| (*a as f64 - *b as f64).powi(2))
                .sum::<f64>();
            spread += x
                .iter()
                .zip(&mean)
                .map(|(a, m)| (*a as f64 - m).powi(2))
                .sum::<f64>();
        }
        // 256 codes per 2-dimensional sub-space: well under 5% of the variance.
        assert!(err / spread < 0.05, "relative error {}", err / spread);
    }
}
