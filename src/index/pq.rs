//! Product quantization: a vector's residual to its partition centroid is
//! cut into `m` sub-vectors, each replaced by the index (one byte) of its
//! nearest of 256 sub-centroids. A query scores codes through a lookup table
//! of `m × 256` partial distances (asymmetric distance computation, ADC).

use crate::index::distance::Metric;
use crate::index::kmeans::{self, KMeansParams};

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

    /// The ADC lookup table for one query against one partition, `m × 256`.
    /// For l2 and cosine, `query_residual = q − centroid` and entries are
    /// squared distances; for dot, `query_residual = q` and entries are
    /// `−q_s · y`. Same inputs, same bits, in every search path.
    pub fn lookup_table(&self, metric: Metric, query_residual: &[f32], out: &mut Vec<f32>) {
        let dsub = self.dsub();
        out.clear();
        out.resize(self.m * CODES, 0.0);
        for s in 0..self.m {
            let x = &query_residual[s * dsub..(s + 1) * dsub];
            let row: &mut [f32; CODES] = (&mut out[s * CODES..(s + 1) * CODES])
                .try_into()
                .expect("CODES entries");
            match metric {
                Metric::Dot => {
                    row.fill(0.0);
                    for (t, xt) in x.iter().enumerate() {
                        let cb = &self.codebook[(s * dsub + t) * CODES..(s * dsub + t + 1) * CODES];
                        for (o, y) in row.iter_mut().zip(cb) {
                            *o += xt * y;
                        }
                    }
                    row.iter_mut().for_each(|v| *v = -*v);
                }
                _ => self.sub_distances(s, x, row),
            }
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
        let pq = ProductQuantizer::train(&data, dim, 4, 8, 1, &mut |_, _| {});
        let q: Vec<f32> = clustered_vectors(1, dim, 10, 6);
        let mut table = Vec::new();
        let mut code = vec![0u8; 4];
        for metric in [Metric::L2, Metric::Dot] {
            pq.lookup_table(metric, &q, &mut table);
            for x in data.chunks(dim).take(200) {
                pq.encode(x, &mut code);
                let dec = pq.decode(&code);
                let adc = ProductQuantizer::score(&table, &code, 0.0) as f64;
                let direct: f64 = match metric {
                    Metric::Dot => -q
                        .iter()
                        .zip(&dec)
                        .map(|(a, b)| *a as f64 * *b as f64)
                        .sum::<f64>(),
                    _ => q
                        .iter()
                        .zip(&dec)
                        .map(|(a, b)| (*a as f64 - *b as f64).powi(2))
                        .sum(),
                };
                assert!(
                    (adc - direct).abs() <= 1e-4 * (1.0 + direct.abs()),
                    "{metric}: {adc} vs {direct}"
                );
            }
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
