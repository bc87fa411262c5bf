//! k-means for IVF centroids and PQ codebooks.
//!
//! Seeded and deterministic: the initial centroids are k distinct rows of
//! the training sample drawn at random (FAISS's default; with a sample of up
//! to 256 rows per centroid, k-means++'s k extra passes buy little), then
//! Lloyd iterations whose assignment step is the many-queries ×
//! many-vectors kernel (samples as queries, centroids as blocks), spread
//! over the cores. Empty clusters are re-seeded by splitting the largest
//! cluster: its centroid is copied and both copies are nudged apart.

use crate::kernel::{dot_blocks, fma_dot, Kernel, Metric, PreparedQueries, VectorBlocks, BLOCK};
use rand::{Rng, SeedableRng};

/// Training settings.
#[derive(Clone, Debug)]
pub struct KMeansParams {
    /// Number of centroids.
    pub k: usize,
    /// Lloyd iterations.
    pub iterations: usize,
    /// Random seed.
    pub seed: u64,
    /// Assignment metric: `L2`, or `Cosine` for spherical k-means
    /// (samples normalised, centroids re-normalised each iteration).
    pub metric: Metric,
}

/// Nearest centroid of every row (row-major `rows`). Ties go to the lower
/// centroid index.
pub fn assign(rows: &[f32], dim: usize, centroids: &VectorBlocks, metric: Metric) -> Vec<u32> {
    map_row_parts(rows, dim, |part| assign_range(part, dim, centroids, metric))
}

/// `f` of consecutive parts of `rows` (`dim` wide), one part per core in
/// whole chunks of 256 rows (all of it on this thread when that is one
/// part), the outputs concatenated in row order. For work whose output
/// for a row depends on that row alone (assignment, encoding).
pub fn map_row_parts<T: Send>(
    rows: &[f32],
    dim: usize,
    f: impl Fn(&[f32]) -> Vec<T> + Sync,
) -> Vec<T> {
    const CHUNK: usize = 256;
    let n = rows.len() / dim;
    let threads = crate::config::cores().min(n.div_ceil(CHUNK)).max(1);
    if threads == 1 {
        return f(rows);
    }
    let per = n.div_ceil(CHUNK).div_ceil(threads) * CHUNK;
    let f = &f;
    std::thread::scope(|s| {
        let handles: Vec<_> = rows
            .chunks(per * dim)
            .map(|part| s.spawn(move || f(part)))
            .collect();
        // A panicking worker is a bug: re-raise it rather than lose rows.
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

fn assign_range(rows: &[f32], dim: usize, centroids: &VectorBlocks, metric: Metric) -> Vec<u32> {
    const CHUNK: usize = 256;
    let kernel = Kernel::detect();
    let nb = centroids.block_count();
    let k = centroids.len();
    let mut out = Vec::with_capacity(rows.len() / dim);
    let mut scratch = vec![0.0f32; CHUNK * nb * BLOCK];
    for chunk in rows.chunks(CHUNK * dim) {
        let stride = nb * BLOCK;
        let cn = centroids.norms_sq();
        if metric == Metric::L2 {
            // argmin of ‖c‖² − 2 q·c (‖q‖² is the same for every c), found
            // with a vectorised argmin.
            dot_blocks(kernel, chunk, centroids, 0..nb, &mut scratch);
            for i in 0..chunk.len() / dim {
                let dots = &mut scratch[i * stride..i * stride + k];
                for (d, n) in dots.iter_mut().zip(cn) {
                    *d = n - 2.0 * *d;
                }
                out.push(argmin(dots).0 as u32);
            }
        } else {
            let q = PreparedQueries::new(metric, dim, chunk);
            dot_blocks(kernel, &q.data, centroids, 0..nb, &mut scratch);
            for i in 0..q.len() {
                let mut best = (0u32, f32::INFINITY);
                for (c, (dot, n)) in scratch[i * stride..i * stride + k]
                    .iter()
                    .zip(cn)
                    .enumerate()
                {
                    let d = metric.finish(*dot, q.norms_sq[i], *n);
                    if d < best.1 {
                        best = (c as u32, d);
                    }
                }
                out.push(best.0);
            }
        }
    }
    out
}

/// Index and value of the smallest element of `xs` (the first one on ties;
/// `(0, inf)` when empty). Vectorised: the minimum first, then the first
/// position holding it.
pub fn argmin(xs: &[f32]) -> (usize, f32) {
    #[cfg(target_arch = "x86_64")]
    {
        if Kernel::detect() == Kernel::Avx512 {
            // SAFETY: AVX-512F was detected.
            return unsafe { argmin_avx512(xs) };
        }
    }
    argmin_scalar(xs)
}

fn argmin_scalar(xs: &[f32]) -> (usize, f32) {
    let mut best = (0usize, f32::INFINITY);
    for (i, x) in xs.iter().enumerate() {
        if *x < best.1 {
            best = (i, *x);
        }
    }
    best
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn argmin_avx512(xs: &[f32]) -> (usize, f32) {
    use std::arch::x86_64::*;
    let chunks = xs.chunks_exact(16);
    let tail = chunks.remainder();
    let mut vmin = _mm512_set1_ps(f32::INFINITY);
    for c in chunks.clone() {
        // SAFETY: `c` holds exactly 16 floats.
        vmin = _mm512_min_ps(vmin, unsafe { _mm512_loadu_ps(c.as_ptr()) });
    }
    let mut min = _mm512_reduce_min_ps(vmin);
    for x in tail {
        min = min.min(*x);
    }
    // All +inf, or a NaN absorbed by the min: the scalar loop's answer
    // (never a position past the end).
    if min == f32::INFINITY || min.is_nan() {
        return argmin_scalar(xs);
    }
    let target = _mm512_set1_ps(min);
    for (ci, c) in chunks.enumerate() {
        // SAFETY: as above.
        let mask = _mm512_cmpeq_ps_mask(unsafe { _mm512_loadu_ps(c.as_ptr()) }, target);
        if mask != 0 {
            return (ci * 16 + mask.trailing_zeros() as usize, min);
        }
    }
    let base = xs.len() - tail.len();
    match tail.iter().position(|x| *x == min) {
        Some(i) => (base + i, min),
        None => argmin_scalar(xs),
    }
}

/// Trains `params.k` centroids on `sample` (row-major, `dim` wide).
/// Returns them row-major. `progress` is called after each iteration.
pub fn train(
    sample: &[f32],
    dim: usize,
    params: &KMeansParams,
    progress: &mut dyn FnMut(usize, usize),
) -> Vec<f32> {
    let n = sample.len() / dim;
    let k = params.k.min(n).max(1);
    let data: Vec<f32> = if params.metric == Metric::Cosine {
        PreparedQueries::new(Metric::Cosine, dim, sample).data
    } else {
        sample.to_vec()
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(params.seed);
    let mut centroids = init_random(&data, dim, k, &mut rng);
    for it in 0..params.iterations {
        let blocks = VectorBlocks::from_rows(dim, &centroids);
        let assignment = assign(&data, dim, &blocks, Metric::L2);
        let (sums, mut counts) = cluster_sums(&data, dim, &assignment, k);
        for c in 0..k {
            if counts[c] > 0 {
                for j in 0..dim {
                    centroids[c * dim + j] = (sums[c * dim + j] / counts[c] as f64) as f32;
                }
            }
        }
        // Split the largest cluster into each empty one.
        for c in 0..k {
            if counts[c] == 0 {
                let largest = (0..k)
                    .max_by_key(|&i| (counts[i], std::cmp::Reverse(i)))
                    .unwrap_or(0);
                for j in 0..dim {
                    let v = centroids[largest * dim + j];
                    let eps = if v == 0.0 { 1e-6 } else { v.abs() * 1e-3 };
                    let sign = if rng.random::<bool>() { 1.0 } else { -1.0 };
                    centroids[c * dim + j] = v + sign * eps;
                    centroids[largest * dim + j] = v - sign * eps;
                }
                counts[c] = counts[largest] / 2;
                counts[largest] -= counts[c];
            }
        }
        if params.metric == Metric::Cosine {
            for c in centroids.chunks_exact_mut(dim) {
                let norm = fma_dot(c, c).sqrt();
                if norm > 0.0 {
                    c.iter_mut().for_each(|v| *v /= norm);
                }
            }
        }
        progress(it + 1, params.iterations);
    }
    centroids
}

/// Each of the `k` clusters' sum of the rows `assignment` puts in it
/// (`k × dim`, in float64, rows added in order) and its row count.
pub fn cluster_sums(
    rows: &[f32],
    dim: usize,
    assignment: &[u32],
    k: usize,
) -> (Vec<f64>, Vec<usize>) {
    let mut sums = vec![0.0f64; k * dim];
    let mut counts = vec![0usize; k];
    for (row, c) in rows.chunks_exact(dim).zip(assignment) {
        let c = *c as usize;
        counts[c] += 1;
        for (s, x) in sums[c * dim..(c + 1) * dim].iter_mut().zip(row) {
            *s += f64::from(*x);
        }
    }
    (sums, counts)
}

/// k distinct sample rows, drawn at random.
fn init_random(data: &[f32], dim: usize, k: usize, rng: &mut rand::rngs::StdRng) -> Vec<f32> {
    let n = data.len() / dim;
    let picks = rand::seq::index::sample(rng, n, k);
    let mut chosen: Vec<usize> = picks.into_iter().collect();
    chosen.sort_unstable();
    chosen
        .iter()
        .flat_map(|&i| data[i * dim..(i + 1) * dim].iter().copied())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo::clustered_vectors;

    #[test]
    fn finds_well_separated_clusters_deterministically() {
        let dim = 8;
        let data = clustered_vectors(2000, dim, 5, 3);
        let params = KMeansParams {
            k: 5,
            iterations: 10,
            seed: 1,
            metric: Metric::L2,
        };
        let a = train(&data, dim, &params, &mut |_, _| {});
        let b = train(&data, dim, &params, &mut |_, _| {});
        assert_eq!(a, b, "same seed, same centroids");
        // Every point is close to its centroid (noise is at most ±0.45 per coordinate).
        let blocks = VectorBlocks::from_rows(dim, &a);
        for (row, c) in data
            .chunks(dim)
            .zip(assign(&data, dim, &blocks, Metric::L2))
        {
            let cent = &a[c as usize * dim..(c as usize + 1) * dim];
            let d: f32 = row.iter().zip(cent).map(|(x, y)| (x - y) * (x - y)).sum();
            assert!(d < 0.45 * 0.45 * dim as f32, "distance {d}");
        }
    }

    #[test]
    fn argmin_finds_the_first_smallest() {
        for n in [1usize, 5, 16, 17, 40, 256] {
            for at in [0, n / 2, n - 1] {
                let mut xs: Vec<f32> = (0..n).map(|i| 10.0 + (i % 7) as f32).collect();
                xs[at] = 1.0;
                if at + 3 < n {
                    xs[at + 3] = 1.0; // a later tie must lose
                }
                assert_eq!(argmin(&xs), (at, 1.0), "n {n} at {at}");
            }
        }
    }

    #[test]
    fn argmin_of_nan_is_a_position_inside_the_slice() {
        for n in [1usize, 16, 17, 256] {
            let (i, _) = argmin(&vec![f32::NAN; n]);
            assert!(i < n, "n {n}: {i}");
            let mut xs = vec![f32::NAN; n];
            xs[n - 1] = 2.0;
            let (i, _) = argmin(&xs);
            assert!(i < n, "n {n}: {i}");
        }
    }

    #[test]
    fn never_leaves_a_cluster_empty() {
        let dim = 2;
        // 3 distinct points, 3 centroids, many duplicates.
        let mut data = Vec::new();
        for i in 0..300 {
            data.extend_from_slice(&[(i % 3) as f32, 0.0]);
        }
        let c = train(
            &data,
            dim,
            &KMeansParams {
                k: 3,
                iterations: 5,
                seed: 9,
                metric: Metric::L2,
            },
            &mut |_, _| {},
        );
        let blocks = VectorBlocks::from_rows(dim, &c);
        let mut used = [0; 3];
        for a in assign(&data, dim, &blocks, Metric::L2) {
            used[a as usize] += 1;
        }
        assert!(used.iter().all(|&u| u == 100), "{used:?}");
    }
}
