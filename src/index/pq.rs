//! Product quantization: a vector's residual to its partition centroid is
//! cut into `m` sub-vectors, each replaced by the index (one byte) of its
//! nearest of 256 sub-centroids. A query scores codes through a lookup table
//! of `m × 256` partial distances (asymmetric distance computation, ADC).

use crate::index::kmeans::{self, KMeansParams};
use crate::kernel::lookup::{
    block_candidates, block_sums, CodeColumns, LookupKernel, LookupTable, LOOKUP_ROWS,
};
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
    /// [`row_terms`](Self::row_terms) and [`query_constant`](Self::query_constant)
    /// it gives ADC distances without a table per (query, partition) —
    /// FAISS's "precomputed tables":
    ///
    /// * l2: `‖q − c − y‖² = ‖q − c‖² + Σ_s (‖y_s‖² + 2 c_s·y_s) + Σ_s (−2 q_s·y_s)`
    /// * dot: `−q·(c + y) = −q·c + Σ_s (−q_s·y_s)`
    /// * cosine: the cosine distance to the reconstruction itself,
    ///   `1 − q̂·(c + y) / ‖c + y‖`: the dot sum, divided by the row's
    ///   reconstruction norm (kept per row), plus one
    ///   ([`cosine_distance`]). Dividing by the norm counts how far the
    ///   reconstruction strays from the unit sphere, which the plain inner
    ///   product ignores and L2 on normalised vectors counts only half
    ///   way; it beats both on real and synthetic embeddings (see
    ///   `docs/decisions/0018-cosine-pq-normalised-reconstruction.md`).
    pub fn query_table(&self, metric: Metric, q: &[f32], out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if crate::kernel::Kernel::detect() == crate::kernel::Kernel::Avx512 {
            // SAFETY: the AVX-512 kernel is only chosen where AVX-512F is.
            unsafe { self.query_table_avx512(metric, q, out) };
            return;
        }
        self.query_table_rows(metric, q, out);
    }

    /// [`query_table`](Self::query_table) compiled for AVX-512: the same
    /// multiplies and adds, each rounded alone, 16 entries at a time.
    ///
    /// # Safety
    /// The CPU supports AVX-512F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn query_table_avx512(&self, metric: Metric, q: &[f32], out: &mut [f32]) {
        self.query_table_rows(metric, q, out);
    }

    #[inline(always)]
    fn query_table_rows(&self, metric: Metric, q: &[f32], out: &mut [f32]) {
        // 64 entries at a time held in registers across the sub-vector's
        // dimensions; each entry is still `((0 + q_0 y_0) + q_1 y_1) + …`
        // times the scale, multiplies and adds rounded alone.
        const CHUNK: usize = 64;
        let dsub = self.dsub();
        let scale = if metric == Metric::L2 { -2.0 } else { -1.0 };
        for s in 0..self.m {
            let qs = &q[s * dsub..(s + 1) * dsub];
            let cbs = &self.codebook[s * dsub * CODES..(s + 1) * dsub * CODES];
            for c0 in (0..CODES).step_by(CHUNK) {
                let mut acc = [0.0f32; CHUNK];
                for (t, &qt) in qs.iter().enumerate() {
                    let cb = &cbs[t * CODES + c0..t * CODES + c0 + CHUNK];
                    for (a, y) in acc.iter_mut().zip(cb) {
                        *a += qt * y;
                    }
                }
                for (o, a) in out[s * CODES + c0..s * CODES + c0 + CHUNK]
                    .iter_mut()
                    .zip(&acc)
                {
                    *o = a * scale;
                }
            }
        }
    }

    /// What each row of the partition with centroid `c` adds to a query's
    /// table sum, computed once when the partition is loaded: for l2 the
    /// query-independent part `Σ_s (‖y_s‖² + 2 c_s·y_s)`; for cosine the
    /// norm of each row's reconstruction, `‖c + y‖`; nothing for dot.
    pub fn row_terms(&self, metric: Metric, c: &[f32], codes: &CodeColumns) -> RowTerms {
        let rows = codes.len();
        if metric == Metric::Dot {
            return RowTerms::zero(rows);
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
        let sums = (0..rows)
            .map(|r| score_in_block(&table, codes.block(r / LOOKUP_ROWS), r % LOOKUP_ROWS, 0.0));
        if metric == Metric::L2 {
            let base: Vec<f32> = sums.collect();
            let base_max = base.iter().fold(0.0f32, |a, b| a.max(b.abs()));
            return RowTerms {
                base,
                base_max,
                ..RowTerms::zero(0)
            };
        }
        // ‖c + y‖² = ‖c‖² + Σ_s (‖y_s‖² + 2 c_s·y_s); rounding may take a
        // (near) zero reconstruction below zero.
        let c_norm_sq = lane_sum(c, c, |a, b| a * b);
        let norm: Vec<f32> = sums.map(|s| (c_norm_sq + s).max(0.0).sqrt()).collect();
        RowTerms {
            norm_max: norm.iter().fold(0.0f32, |a, b| a.max(*b)),
            norm,
            ..RowTerms::zero(rows)
        }
    }

    /// The (query, partition) constant: `‖q − c‖²` for l2, `−q·c` for dot
    /// and cosine (whose sum [`cosine_distance`] then finishes).
    pub fn query_constant(metric: Metric, q: &[f32], c: &[f32]) -> f32 {
        match metric {
            Metric::L2 => lane_sum(q, c, |a, b| (a - b) * (a - b)),
            Metric::Dot | Metric::Cosine => -lane_sum(q, c, |a, b| a * b),
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

/// Per-row terms of a PQ partition's distances (see
/// [`ProductQuantizer::row_terms`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RowTerms {
    /// Added to every row's table sum (l2); zeros otherwise.
    pub base: Vec<f32>,
    /// The largest `|base|`, for the screen's rounding slack.
    pub base_max: f32,
    /// Cosine: each row's reconstruction norm `‖c + y‖`, which the table
    /// sum is divided by ([`cosine_distance`]); empty for l2 and dot.
    pub norm: Vec<f32>,
    /// At least every `norm`, for the screen's rounding slack (a smaller
    /// value would break the screen's promise).
    pub norm_max: f32,
}

impl RowTerms {
    /// Terms that add nothing, for `rows` rows.
    pub fn zero(rows: usize) -> RowTerms {
        RowTerms {
            base: vec![0.0; rows],
            base_max: 0.0,
            norm: Vec::new(),
            norm_max: 0.0,
        }
    }

    /// Bytes held (the partition cache's weight).
    pub fn size_bytes(&self) -> usize {
        (self.base.len() + self.norm.len()) * 4
    }
}

/// A cosine PQ row's distance from its table sum `s = −q̂·(c + y)` and
/// reconstruction norm: `1 + s / norm`, the cosine distance between the
/// query and the reconstruction; 1 (no similarity) for a reconstruction of
/// norm zero, as for an exact zero vector.
#[inline]
pub fn cosine_distance(s: f32, norm: f32) -> f32 {
    if norm > 0.0 {
        1.0 + s / norm
    } else {
        1.0
    }
}

/// `Σ_j f(a_j, b_j)` in 16 interleaved partial sums added up in lane
/// order at the end: a fixed order (the same bits on every path), without
/// one long chain of dependent adds.
#[inline(always)]
fn lane_sum(a: &[f32], b: &[f32], f: impl Fn(f32, f32) -> f32) -> f32 {
    const LANES: usize = 16;
    let mut acc = [0.0f32; LANES];
    let whole = a.len().min(b.len()) / LANES * LANES;
    for (x, y) in a[..whole]
        .chunks_exact(LANES)
        .zip(b[..whole].chunks_exact(LANES))
    {
        for j in 0..LANES {
            acc[j] += f(x[j], y[j]);
        }
    }
    for (j, (x, y)) in a[whole..].iter().zip(&b[whole..]).enumerate() {
        acc[j] += f(*x, *y);
    }
    acc.iter().sum()
}

/// Sums the table entries of row `i` of a [`CodeColumns`] block in
/// sub-space order, starting at `base`: the same additions, in the same
/// order, as [`ProductQuantizer::score`] on the row's code.
#[inline]
pub fn score_in_block(table: &[f32], block: &[u8], i: usize, base: f32) -> f32 {
    let mut acc = base;
    for (s, codes) in block.chunks_exact(LOOKUP_ROWS).enumerate() {
        acc += table[s * CODES + codes[i] as usize];
    }
    acc
}

/// Where a PQ scan sends rows: one query's heap, behind the row filter.
pub trait ScanSink {
    /// The distance a row must not exceed to enter, once there is one.
    fn threshold(&self) -> Option<f32>;
    /// May row `r` (position in the partition) be returned at all?
    fn allows(&self, r: usize) -> bool;
    /// Row `r` at `distance` (allowed, and not above the threshold).
    fn offer(&mut self, r: usize, distance: f32);
}

/// One query's scan of a partition's codes: ADC distance
/// `score(table, code, constant + terms.base[r])` for every row the sink
/// could take, finished by [`cosine_distance`] where `terms` hold
/// reconstruction norms. With a quantized `screen` of `table`, each block
/// of 64 rows first gets a lower bound per row from the level sums
/// ([`crate::kernel::lookup`]); rows whose bound is above the sink's
/// threshold by more than the rounding slack cannot enter and are not
/// scored. The sink receives exactly the rows (and float distances) that
/// scoring every row would give it; returns how many rows were scored.
/// `terms.base_max` must be at least every `|terms.base[r]|` (the slack is
/// sized from it; a smaller value would break that promise).
pub fn scan_codes(
    table: &[f32],
    screen: Option<&LookupTable>,
    kernel: LookupKernel,
    codes: &CodeColumns,
    constant: f32,
    terms: &RowTerms,
    sink: &mut impl ScanSink,
) -> usize {
    let rows = codes.len();
    let cosine = !terms.norm.is_empty();
    let mut sums = [0u16; LOOKUP_ROWS];
    let mut shifts = [0.0f32; LOOKUP_ROWS];
    let slack = screen.map_or(0.0, |l| l.slack(constant.abs() + terms.base_max));
    // A row is skipped when its bound is above `t + slack + 4u|t|` (the
    // last term covers rounding the sum `t + slack`).
    let limit_of = |t: f32| t + (slack + 2.0 * f32::EPSILON * t.abs());
    let mut scored = 0;
    for b in 0..codes.block_count() {
        let block = codes.block(b);
        let first = b * LOOKUP_ROWS;
        let in_block = (rows - first).min(LOOKUP_ROWS);
        let bases = &terms.base[first..first + in_block];
        // Rows the screen cannot rule out, by bit; all of them until the
        // sink has a threshold. The limit is the threshold when the block
        // starts; rows scored here may lower it, which only the exact
        // compare below then sees.
        let mut candidates = match (screen, sink.threshold()) {
            (Some(lut), Some(t)) if cosine => {
                // `1 + s/n ≤ t` ⟺ `s + shift ≤ 0`: the bound of `s` is
                // screened against zero with each row's shift as its base.
                block_sums(kernel, lut, codes, b, &mut sums);
                let shifts = &mut shifts[..in_block];
                let shift_max = cosine_shifts(
                    t,
                    &terms.norm[first..first + in_block],
                    terms.norm_max,
                    shifts,
                );
                let slack = lut.slack(constant.abs() + shift_max);
                block_candidates(kernel, lut, &sums, constant, shifts, slack)
            }
            (Some(lut), Some(t)) => {
                block_sums(kernel, lut, codes, b, &mut sums);
                block_candidates(kernel, lut, &sums, constant, bases, limit_of(t))
            }
            _ => u64::MAX >> (LOOKUP_ROWS - in_block),
        };
        while candidates != 0 {
            let i = candidates.trailing_zeros() as usize;
            candidates &= candidates - 1;
            let r = first + i;
            if !sink.allows(r) {
                continue;
            }
            let sum = score_in_block(table, block, i, constant + bases[i]);
            let d = if cosine {
                cosine_distance(sum, terms.norm[r])
            } else {
                sum
            };
            scored += 1;
            if sink.threshold().is_none_or(|t| d.total_cmp(&t).is_le()) {
                sink.offer(r, d);
            }
        }
    }
    scored
}

/// The screen's per-row addends for cosine rows under threshold `t`: a row
/// of reconstruction norm `n` can enter only if `1 + s/n ≤ t`, that is
/// `s − (t − 1)·n ≤ 0`, so its shift is `−(t − 1 + μ)·n`. The margin
/// `μ = 16u(|t| + 2)` (`u = 2⁻²⁴`) covers the roundings of the shift (two:
/// `t − 1 + μ` to f32, the product), the division and the final addition:
/// a row whose bound the screen puts above zero has a float distance above
/// `t`. A row of norm zero (distance exactly 1) gets a shift that keeps it
/// (`t ≥ 1`) or skips it. Returns a bound of every finite `|shift|` (from
/// `norm_max`, at least every norm), for the slack.
fn cosine_shifts(t: f32, norms: &[f32], norm_max: f32, out: &mut [f32]) -> f32 {
    const FAR: f32 = 1e30;
    let u = f64::from(f32::EPSILON) / 2.0;
    let a = ((f64::from(t) - 1.0) + 16.0 * u * (f64::from(t).abs() + 2.0)) as f32;
    let zero_norm = if t >= 1.0 { -FAR } else { FAR };
    // One multiply and a select per row: vectorised.
    for (o, &n) in out.iter_mut().zip(norms) {
        *o = if n > 0.0 { -(a * n) } else { zero_norm };
    }
    a.abs() * norm_max * (1.0 + 2.0 * f32::EPSILON)
}

/// A [`ScanSink`] for the scan tests (PQ's and RaBitQ's): keeps the k best
/// (distance, row) pairs, like a heap with ties to the lower row;
/// optionally refuses some rows.
#[cfg(test)]
pub(crate) struct Best {
    pub(crate) k: usize,
    pub(crate) kept: Vec<(f32, usize)>,
    pub(crate) refused: fn(usize) -> bool,
}

#[cfg(test)]
impl ScanSink for Best {
    fn threshold(&self) -> Option<f32> {
        (self.kept.len() == self.k).then(|| self.kept[self.k - 1].0)
    }
    fn allows(&self, r: usize) -> bool {
        !(self.refused)(r)
    }
    fn offer(&mut self, r: usize, d: f32) {
        self.kept.push((d, r));
        self.kept
            .sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        self.kept.truncate(self.k);
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
                let terms = pq.row_terms(metric, &c, &CodeColumns::from_rows(4, &code).unwrap());
                let adc = adc_of(&table, &code, constant, &terms, 0) as f64;
                let x: Vec<f64> = pq
                    .decode(&code)
                    .iter()
                    .zip(&c)
                    .map(|(y, c)| (*y + *c) as f64)
                    .collect();
                let qx: f64 = q.iter().zip(&x).map(|(a, b)| *a as f64 * b).sum();
                let x_norm = x.iter().map(|v| v * v).sum::<f64>().sqrt();
                let direct = match metric {
                    Metric::L2 => q.iter().zip(&x).map(|(a, b)| (*a as f64 - b).powi(2)).sum(),
                    Metric::Dot => -qx,
                    Metric::Cosine => 1.0 - qx / x_norm,
                };
                assert!(
                    (adc - direct).abs() <= 1e-4 * (1.0 + direct.abs()),
                    "{metric}: {adc} vs {direct}"
                );
            }
        }
    }

    /// Row `r`'s distance, scored alone: its table sum from the row's base,
    /// finished for cosine.
    fn adc_of(table: &[f32], code: &[u8], constant: f32, terms: &RowTerms, r: usize) -> f32 {
        let sum = ProductQuantizer::score(table, code, constant + terms.base[r]);
        match terms.norm.get(r) {
            Some(&n) => cosine_distance(sum, n),
            None => sum,
        }
    }

    /// The screened scan returns exactly the rows and distance bits of
    /// scoring every row, for every lookup kernel, metric, k (up to more
    /// than the partition holds), with many tied rows and a row filter.
    #[test]
    fn screened_scan_equals_scoring_every_row() {
        for (dim, m) in [(16, 8), (64, 32)] {
            screened_scan_equals_scoring_every_row_at(dim, m);
        }
    }

    fn screened_scan_equals_scoring_every_row_at(dim: usize, m: usize) {
        let data = clustered_vectors(3000, dim, 12, 3);
        let pq = ProductQuantizer::train(&data, dim, m, 8, 1, &mut |_, _| {});
        let c: Vec<f32> = (0..dim).map(|j| j as f32 * 0.05).collect();
        let mut code = vec![0u8; m];
        let mut rows: Vec<u8> = Vec::new();
        for (i, x) in data.chunks(dim).take(700).enumerate() {
            pq.encode(x, &mut code);
            rows.extend_from_slice(&code);
            // Every fifth row repeats an earlier code: exact ties.
            if i % 5 == 4 {
                let earlier = rows[(i / 2) * m..(i / 2 + 1) * m].to_vec();
                rows.extend_from_slice(&earlier);
            }
        }
        let codes = CodeColumns::from_rows(m, &rows).unwrap();
        let n = codes.len();
        let refusals: [fn(usize) -> bool; 2] = [|_| false, |r| r % 3 == 1];
        for metric in [Metric::L2, Metric::Dot, Metric::Cosine] {
            let mut term_sets = vec![pq.row_terms(metric, &c, &codes)];
            if metric == Metric::Cosine {
                // Norms the codes cannot give: zero (distance exactly 1,
                // kept or skipped by the threshold's side of 1) and far
                // apart within a block.
                let mut odd = term_sets[0].clone();
                for (r, n) in odd.norm.iter_mut().enumerate() {
                    if r % 7 == 3 {
                        *n = 0.0;
                    } else if r % 11 == 5 {
                        *n *= 3.0;
                    }
                }
                odd.norm_max = odd.norm.iter().fold(0.0f32, |a, b| a.max(*b));
                term_sets.push(odd);
            }
            for (ti, terms) in term_sets.iter().enumerate() {
                for (qi, q) in clustered_vectors(6, dim, 12, 9).chunks(dim).enumerate() {
                    let mut table = vec![0.0; m * CODES];
                    pq.query_table(metric, q, &mut table);
                    let constant = ProductQuantizer::query_constant(metric, q, &c);
                    let lut = LookupTable::quantize(&table, m).unwrap();
                    for k in [1, 10, 100, n + 5] {
                        for refused in refusals {
                            let mut want: Vec<(f32, usize)> = (0..n)
                                .filter(|&r| !refused(r))
                                .map(|r| (adc_of(&table, &codes.row(r), constant, terms, r), r))
                                .collect();
                            want.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                            want.truncate(k);
                            for kernel in LookupKernel::available() {
                                for screen in [None, Some(&lut)] {
                                    let mut sink = Best {
                                        k,
                                        kept: Vec::new(),
                                        refused,
                                    };
                                    let scored = scan_codes(
                                        &table, screen, kernel, &codes, constant, terms, &mut sink,
                                    );
                                    let bits = |v: &[(f32, usize)]| {
                                        v.iter().map(|(d, r)| (d.to_bits(), *r)).collect::<Vec<_>>()
                                    };
                                    assert_eq!(
                                        bits(&sink.kept),
                                        bits(&want),
                                        "{metric} terms {ti} query {qi} k {k} {kernel:?} screen {}",
                                        screen.is_some()
                                    );
                                    if screen.is_some() && k == 10 && qi == 0 {
                                        // The screen must actually skip rows.
                                        assert!(
                                            scored < n / 2,
                                            "{metric} terms {ti}: scored {scored} of {n}"
                                        );
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// Each table entry is `((0 + q_0 y_0) + q_1 y_1 + …) · scale`, bit for
    /// bit, whichever instruction set builds the table.
    #[test]
    fn query_table_entries_are_the_plain_sum() {
        let (dim, m) = (24, 3);
        let pq = ProductQuantizer::train(
            &clustered_vectors(2000, dim, 8, 4),
            dim,
            m,
            6,
            1,
            &mut |_, _| {},
        );
        let q = clustered_vectors(1, dim, 8, 5);
        let dsub = dim / m;
        for metric in [Metric::L2, Metric::Dot] {
            let mut table = vec![0.0; m * CODES];
            pq.query_table(metric, &q, &mut table);
            let mut plain = vec![0.0; m * CODES];
            pq.query_table_rows(metric, &q, &mut plain);
            let scale = if metric == Metric::L2 { -2.0 } else { -1.0 };
            for s in 0..m {
                for c in 0..CODES {
                    let mut acc = 0.0f32;
                    for t in 0..dsub {
                        acc += q[s * dsub + t] * pq.codebook[(s * dsub + t) * CODES + c];
                    }
                    let want = (acc * scale).to_bits();
                    assert_eq!(table[s * CODES + c].to_bits(), want, "{metric} {s} {c}");
                    assert_eq!(plain[s * CODES + c].to_bits(), want, "{metric} {s} {c}");
                }
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
