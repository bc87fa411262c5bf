//! What an `hnsw` walk reads: each node's 8-bit scalar-quantized code
//! (the IVF_SQ quantizer, trained on the segment's own rows), a quarter of
//! the float32 vector's bytes.
//!
//! A walk scores a few thousand nodes per query, each at an address it
//! learns as it goes, so it waits on memory once the vectors outgrow the
//! caches. Reading codes instead moves a quarter of the bytes; the
//! candidates the walk keeps are then reranked on the float32 vectors,
//! exactly, so the codes decide only which rows are reranked, never a
//! reported distance. (The choice is measured in `docs/PERFORMANCE.md`;
//! `SHOAL_HNSW_WALK=f32` walks the float32 vectors instead, for
//! comparison.)
//!
//! With `x̂ = min + step ⊙ code`, `q · x̂ = q · min + (q ⊙ step) · code`;
//! a query is prepared once per segment ([`PreparedCodes`]) and each node
//! costs one [`CodeDot`] over its codes, finished by the metric with the
//! decoded row's norm.

use super::segment::walk_finish;
use crate::index::sq::ScalarQuantizer;
use crate::kernel::pair::{in_fours, prefetch};
use crate::kernel::pair_codes::CodeDot;
use crate::kernel::{fma_dot, Metric};
use std::sync::OnceLock;

/// The segment's rows as 8-bit codes.
#[derive(Debug)]
pub struct WalkCodes {
    dim: usize,
    /// Per-dimension ranges, trained on every row of the segment.
    quantizer: ScalarQuantizer,
    /// Row-major codes, node `i` at `i × dim`.
    codes: Vec<u8>,
    /// Per node: ‖x̂‖² under l2 (and dot, unused), `1/‖x̂‖` under cosine
    /// (0 for a zero row).
    scale: Vec<f32>,
}

impl WalkCodes {
    /// Quantizes `vectors` (row-major, `dim` wide): one pass for the
    /// ranges, one for the codes.
    pub fn encode(vectors: &[f32], dim: usize, metric: Metric) -> WalkCodes {
        let quantizer = ScalarQuantizer::train(vectors, dim);
        let rows = vectors.len().checked_div(dim).unwrap_or(0);
        let mut codes = vec![0u8; rows * dim];
        let mut scale = Vec::with_capacity(rows);
        let mut decoded = vec![0.0f32; dim];
        for (x, code) in vectors.chunks_exact(dim).zip(codes.chunks_exact_mut(dim)) {
            quantizer.encode(x, code);
            quantizer.decode(code, &mut decoded);
            let norm_sq = fma_dot(&decoded, &decoded);
            scale.push(match metric {
                Metric::Cosine if norm_sq > 0.0 => 1.0 / norm_sq.sqrt(),
                Metric::Cosine => 0.0,
                _ => norm_sq,
            });
        }
        WalkCodes {
            dim,
            quantizer,
            codes,
            scale,
        }
    }

    /// Node `i`'s code.
    #[inline(always)]
    fn code(&self, i: u32) -> &[u8] {
        let at = i as usize * self.dim;
        &self.codes[at..at + self.dim]
    }

    /// Bytes held in memory.
    pub fn size_bytes(&self) -> usize {
        self.codes.len() + 4 * (self.scale.len() + 2 * self.quantizer.min.len())
    }

    /// A prepared query (normalised for cosine, `qn = ‖q‖²`) against these
    /// codes.
    pub fn prepare(&self, metric: Metric, q: &[f32], qn: f32) -> PreparedCodes<'_> {
        let weights: Vec<f32> = q
            .iter()
            .zip(&self.quantizer.step)
            .map(|(x, s)| x * s)
            .collect();
        PreparedCodes {
            codes: self,
            metric,
            offset: fma_dot(q, &self.quantizer.min),
            weights,
            qn,
            dot: code_dot(),
        }
    }
}

/// Whether walks read codes (the default) or float32 vectors
/// (`SHOAL_HNSW_WALK=f32`), read once.
pub fn walk_reads_codes() -> bool {
    static CODES: OnceLock<bool> = OnceLock::new();
    *CODES.get_or_init(|| match std::env::var("SHOAL_HNSW_WALK").ok().as_deref() {
        None | Some("sq8") => true,
        Some("f32") => false,
        Some(other) => {
            tracing::warn!("SHOAL_HNSW_WALK={other:?} is neither sq8 nor f32; walking codes");
            true
        }
    })
}

/// The CPU's [`CodeDot`], detected once.
fn code_dot() -> CodeDot {
    static DOT: OnceLock<CodeDot> = OnceLock::new();
    *DOT.get_or_init(CodeDot::detect)
}

/// One query prepared against one segment's codes.
pub struct PreparedCodes<'a> {
    codes: &'a WalkCodes,
    metric: Metric,
    /// `q · min`.
    offset: f32,
    /// `q ⊙ step`.
    weights: Vec<f32>,
    qn: f32,
    dot: CodeDot,
}

impl PreparedCodes<'_> {
    /// The walk's estimated distance to each of `nodes`, four at a time
    /// after a prefetch of all; a node's estimate is the same in any
    /// group.
    pub fn to_nodes(&self, nodes: &[u32], out: &mut [f32]) {
        let c = self.codes;
        for &i in nodes {
            prefetch(c.code(i));
        }
        let finish = |d: f32, i: u32| {
            walk_finish(self.metric, self.offset + d, self.qn, c.scale[i as usize])
        };
        in_fours(
            nodes,
            out,
            |g| {
                let d = self.dot.dot4(&self.weights, g.map(|i| c.code(i)));
                [0, 1, 2, 3].map(|j| finish(d[j], g[j]))
            },
            |i| finish(self.dot.dot(&self.weights, c.code(i)), i),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn code_distances_estimate_the_float_distances_closely() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let dim = 48;
        let rows: Vec<f32> = (0..200 * dim)
            .map(|_| rng.random_range(-1.0f32..1.0))
            .collect();
        let q: Vec<f32> = (0..dim).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let qn = fma_dot(&q, &q);
        for metric in [Metric::L2, Metric::Dot] {
            let codes = WalkCodes::encode(&rows, dim, metric);
            let prepared = codes.prepare(metric, &q, qn);
            let nodes: Vec<u32> = (0..200).collect();
            let mut got = vec![0.0; 200];
            prepared.to_nodes(&nodes, &mut got);
            for (i, x) in rows.chunks_exact(dim).enumerate() {
                let want = metric.finish(fma_dot(&q, x), qn, fma_dot(x, x));
                // Each coordinate is off by at most half a step (1/255),
                // against coordinates and query entries within ±1.
                assert!(
                    (got[i] - want).abs() <= 4.5 * dim as f32 / 255.0,
                    "{metric:?} row {i}: {} vs {want}",
                    got[i]
                );
            }
            // Alone and in groups of four, the same bits.
            for i in 0..200u32 {
                let mut one = [0.0];
                prepared.to_nodes(&[i], &mut one);
                assert_eq!(one[0].to_bits(), got[i as usize].to_bits());
            }
        }
    }

    /// A walk on codes, its candidates reranked on the floats, finds the
    /// nearest rows as well as a walk on the floats does.
    #[test]
    fn a_walk_on_codes_reranked_finds_what_a_float_walk_finds() {
        use crate::demo::clustered_vectors;
        use crate::index::hnsw::graph::{HnswGraph, HnswParams};
        let (n, dim, k, ef) = (3_000, 32, 10, 32);
        let mut data = clustered_vectors(n + 100, dim, 12, 9);
        let queries = data.split_off(n * dim);
        let row = |i: u32| &data[i as usize * dim..(i as usize + 1) * dim];
        let l2 =
            |a: &[f32], b: &[f32]| -> f32 { a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum() };
        let in_turn = |shares: usize, task: &(dyn Fn(usize) + Sync)| (0..shares).for_each(task);
        let params = HnswParams {
            m: 12,
            ef_construction: 100,
            seed: 1,
        };
        let g =
            HnswGraph::build(n, params, &in_turn, &mut |_| {}, |a, b| l2(row(a), row(b))).unwrap();
        let codes = WalkCodes::encode(&data, dim, Metric::L2);
        let (mut by_codes, mut by_floats) = (0, 0);
        for q in queries.chunks_exact(dim) {
            let mut truth: Vec<(f32, u32)> = (0..n as u32).map(|i| (l2(q, row(i)), i)).collect();
            truth.sort_by(|a, b| a.partial_cmp(b).unwrap());
            let truth: Vec<u32> = truth[..k].iter().map(|t| t.1).collect();
            let reranked = |found: Vec<(f32, u32)>| -> Vec<u32> {
                let mut exact: Vec<(f32, u32)> =
                    found.iter().map(|&(_, i)| (l2(q, row(i)), i)).collect();
                exact.sort_by(|a, b| a.partial_cmp(b).unwrap());
                exact.truncate(k);
                exact.into_iter().map(|e| e.1).collect()
            };
            let prepared = codes.prepare(Metric::L2, q, fma_dot(q, q));
            let found = g.search(|nodes, out| prepared.to_nodes(nodes, out), ef, ef, &|_| {
                true
            });
            by_codes += reranked(found).iter().filter(|i| truth.contains(i)).count();
            let found = g.search(
                |nodes, out| {
                    for (o, &i) in out.iter_mut().zip(nodes) {
                        *o = l2(q, row(i));
                    }
                },
                ef,
                ef,
                &|_| true,
            );
            by_floats += reranked(found).iter().filter(|i| truth.contains(i)).count();
        }
        let total = (queries.len() / dim * k) as f64;
        let (codes_recall, floats_recall) = (by_codes as f64 / total, by_floats as f64 / total);
        assert!(codes_recall >= 0.95, "recall on codes {codes_recall}");
        assert!(
            codes_recall >= floats_recall - 0.01,
            "codes {codes_recall} against floats {floats_recall}"
        );
    }
}
