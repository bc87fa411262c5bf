//! RaBitQ's tests: the rotation, the codes, the production screen's
//! losses against exact distances, the levels' kernels, the estimates and
//! the screened scan against scoring every row.

use super::levels::{level_bytes, level_of, levels_dot_lanes, pack_levels};
use super::*;
use crate::demo::clustered_vectors;
use crate::index::pq::Best;

fn dot64(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum()
}

#[test]
fn the_rotation_is_an_isometry_and_seeded() {
    for dim in [5, 64, 100] {
        let rq = RabitQuantizer::new(dim, 1, 3).unwrap();
        assert_eq!(
            rq.rotation_rows,
            RabitQuantizer::new(dim, 1, 3).unwrap().rotation_rows
        );
        assert_ne!(
            rq.rotation_rows,
            RabitQuantizer::new(dim, 1, 4).unwrap().rotation_rows
        );
        let v = clustered_vectors(20, dim, 3, 1);
        let z = rq.rotate(&v);
        for (x, zx) in v.chunks(dim).zip(z.chunks(rq.padded)) {
            let (a, b) = (dot64(x, x), dot64(zx, zx));
            assert!((a - b).abs() <= 1e-4 * a, "{a} vs {b}");
        }
    }
}

/// Codes round-trip through the row records, and the top plane is the
/// sign code whatever the bits.
#[test]
fn codes_split_back_into_planes_and_factors() {
    let dim = 70;
    let v = clustered_vectors(150, dim, 4, 2);
    for bits in [1, 2, 4] {
        let rq = RabitQuantizer::new(dim, bits, 9).unwrap();
        let z = rq.rotate(&v);
        let mut bytes = vec![0u8; 150 * rq.code_len()];
        for (zr, out) in z.chunks(rq.padded).zip(bytes.chunks_mut(rq.code_len())) {
            rq.encode_rotated(zr, out);
        }
        let codes = RabitQuantizer::split_rows(bits, rq.padded, &bytes).unwrap();
        assert_eq!(codes.len(), 150);
        assert_eq!(codes.levels.len(), 150 * level_bytes(bits, rq.padded));
        for (r, zr) in z.chunks(rq.padded).enumerate() {
            let n = dot64(zr, zr).sqrt();
            assert!((f64::from(codes.norm[r]) - n).abs() <= 1e-5 * n);
            let sign = codes.sign.row(r);
            let row = &codes.levels[r * codes.level_bytes..(r + 1) * codes.level_bytes];
            for i in (0..rq.padded).filter(|_| bits > 1) {
                let top = level_of(row, bits <= 4, i) >> (bits - 1);
                assert_eq!(top == 1, zr[i] >= 0.0, "{bits} {r} {i}");
            }
            for (i, &zi) in zr.iter().enumerate() {
                assert_eq!(sign[i / 8] >> (i % 8) & 1 == 1, zi >= 0.0, "{bits} {r} {i}");
            }
            let ip1: f64 = zr.iter().map(|x| f64::from(x.abs()) / n).sum();
            assert!((f64::from(codes.ip1[r]) - ip1).abs() <= 1e-4 * ip1);
        }
        assert!(RabitQuantizer::split_rows(bits, rq.padded, &bytes[1..]).is_none());
    }
}

/// Does the production screen let row `row` of `codes` through to the
/// full estimate, for `query` with the heap's threshold at `t`? (The sink
/// only watches: no row is scored.)
fn screen_passes(
    rq: &RabitQuantizer,
    query: &RqQuery,
    codes: &RqCodes,
    constant: f32,
    t: f32,
    row: usize,
) -> bool {
    struct Watch {
        t: f32,
        row: usize,
        passed: std::cell::Cell<bool>,
    }
    impl ScanSink for Watch {
        fn threshold(&self) -> Option<f32> {
            Some(self.t)
        }
        fn allows(&self, r: usize) -> bool {
            if r == self.row {
                self.passed.set(true);
            }
            false
        }
        fn offer(&mut self, _: usize, _: f32) {}
    }
    let mut sink = Watch {
        t,
        row,
        passed: std::cell::Cell::new(false),
    };
    scan_rq_codes(rq, query, LookupKernel::Scalar, codes, constant, &mut sink);
    sink.passed.get()
}

/// Pairs (row, query) whose row the production screen ([`scan_rq_codes`],
/// [`ScreenLimits`]) skips although its exact distance is the heap's
/// threshold — a row that belongs in the answer, lost — and all pairs. A
/// pair is lost only where the 1-bit estimate errs by more than its bound,
/// and towards a larger distance.
fn screen_losses(
    rq: &RabitQuantizer,
    metric: Metric,
    rows: &[Vec<f32>],
    queries: &[Vec<f32>],
) -> (usize, usize) {
    let dim = rq.dim;
    let flat: Vec<f32> = rows.concat();
    let c: Vec<f32> = (0..dim)
        .map(|j| rows.iter().map(|x| x[j]).sum::<f32>() / rows.len() as f32)
        .collect();
    let codes = partition(rq, metric, &flat, &c);
    let (mut lost, mut total) = (0, 0);
    for q in queries {
        let query = rq.query(metric, q);
        let constant = crate::index::pq::ProductQuantizer::query_constant(metric, q, &c);
        for (r, x) in rows.iter().enumerate() {
            let exact = match metric {
                Metric::L2 => x
                    .iter()
                    .zip(q)
                    .map(|(a, b)| (f64::from(*a) - f64::from(*b)).powi(2))
                    .sum(),
                _ => -dot64(x, q),
            };
            total += 1;
            lost += usize::from(!screen_passes(
                rq,
                &query,
                &codes,
                constant,
                exact as f32,
                r,
            ));
        }
    }
    (lost, total)
}

/// The rate at which the bound may fail, as documented: ε₀ = 1.9
/// standard deviations leaves about 6% of pairs outside it, half on each
/// side. The screen loses a row only when the estimate errs above the
/// bound (towards a larger distance): at most half of it. (Measured: 2.5%
/// on the adversarial dot pairs, 0 on l2, 0.7% fuzzed; a bound half as
/// wide loses 17%, 5.7% fuzzed.)
const DOCUMENTED_FAILURE_RATE: f64 = 0.06;
/// The share of rows the screen may lose: one side of the bound.
const SCREEN_LOSS_RATE: f64 = DOCUMENTED_FAILURE_RATE / 2.0;

/// The production screen above one bit loses a row that belongs in the
/// answer no more often than the error bound is documented to fail on
/// that side (3%) — the
/// rotation is random, the data need not be: rows and queries here are
/// adversarial for a quantizer without rotation (one-hot, constant,
/// heavy-tailed, near duplicates of the query, sparse), under four
/// rotations, for l2 and dot.
#[test]
fn the_screen_loses_rows_no_more_often_than_the_bound_fails() {
    let dim = 96;
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let mut rows: Vec<Vec<f32>> = Vec::new();
    for k in 0..dim {
        let mut v = vec![0.0f32; dim];
        v[k] = 1.0;
        rows.push(v);
    }
    rows.push(vec![1.0; dim]);
    for _ in 0..200 {
        // Heavy tails and sparsity.
        rows.push(
            (0..dim)
                .map(|_| {
                    let u: f32 = rng.random();
                    if u < 0.7 {
                        0.0
                    } else {
                        (1.0 / (1.0 - u)).powi(2) * if rng.random() { 1.0 } else { -1.0 }
                    }
                })
                .collect(),
        );
    }
    let queries: Vec<Vec<f32>> = (0..20)
        .map(|i| {
            let base = &rows[(i * 37) % rows.len()];
            base.iter()
                .map(|v| v + rng.random_range(-0.01f32..0.01))
                .collect()
        })
        .collect();
    for bits in [2, 4] {
        for metric in [Metric::L2, Metric::Dot] {
            let (mut lost, mut total) = (0, 0);
            for seed in 0..4 {
                let rq = RabitQuantizer::new(dim, bits, seed).unwrap();
                let (l, t) = screen_losses(&rq, metric, &rows, &queries);
                (lost, total) = (lost + l, total + t);
            }
            let rate = lost as f64 / total as f64;
            eprintln!("{bits} bits {metric}: the screen lost {lost} of {total} pairs ({rate:.4})");
            assert!(
                rate <= SCREEN_LOSS_RATE,
                "{bits} bits {metric}: the screen lost {rate} of the pairs"
            );
        }
    }
}

/// Fuzzed: any dimension, rotation seed, bits above one and mix of
/// adversarial rows (one-hot, constant, sparse heavy-tailed, Gaussian with
/// a large common offset) and queries (near a row, or one-hot): over all
/// cases, the production screen loses rows no more often than the
/// documented rate (3%, one side of the bound). (One case has one rotation, and rows of one family
/// look alike to it, so a single case's rate varies more than independent
/// pairs would; the cases together are held to the rate.)
#[test]
fn the_screen_loses_rows_at_the_documented_rate_on_fuzzed_data() {
    use proptest::strategy::{Strategy, ValueTree};
    let strategy = (
        3usize..200,
        proptest::prelude::any::<u64>(),
        2usize..6,
        0.0f32..50.0,
        proptest::prelude::prop_oneof![
            proptest::strategy::Just(Metric::L2),
            proptest::strategy::Just(Metric::Dot)
        ],
    );
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut lost, mut total) = (0usize, 0usize);
    for _ in 0..48 {
        let (dim, seed, bits, offset, metric) = strategy.new_tree(&mut runner).unwrap().current();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let rows: Vec<Vec<f32>> = (0..40)
            .map(|i| match i % 4 {
                0 => {
                    let mut v = vec![0.0f32; dim];
                    v[rng.random_range(0..dim)] = 1.0;
                    v
                }
                1 => vec![rng.random_range(-2.0f32..2.0); dim],
                2 => (0..dim)
                    .map(|_| {
                        let u: f32 = rng.random();
                        if u < 0.8 {
                            0.0
                        } else {
                            1.0 / (1.0 - u)
                        }
                    })
                    .collect(),
                _ => (0..dim)
                    .map(|_| offset + rng.random_range(-1.0f32..1.0))
                    .collect(),
            })
            .collect();
        let queries: Vec<Vec<f32>> = (0..10)
            .map(|i| {
                if i % 2 == 0 {
                    rows[rng.random_range(0..rows.len())]
                        .iter()
                        .map(|v| v + rng.random_range(-0.05f32..0.05))
                        .collect()
                } else {
                    let mut v = vec![0.0f32; dim];
                    v[rng.random_range(0..dim)] = 3.0;
                    v
                }
            })
            .collect();
        let rq = RabitQuantizer::new(dim, bits, seed).unwrap();
        let (l, t) = screen_losses(&rq, metric, &rows, &queries);
        (lost, total) = (lost + l, total + t);
    }
    let rate = lost as f64 / total as f64;
    eprintln!("fuzzed: the screen lost {lost} of {total} pairs ({rate:.4})");
    assert!(rate <= SCREEN_LOSS_RATE, "lost {rate} of the pairs");
}

/// The levels' dot product has the same bits on every kernel, equals
/// the plain sum of `u_i z_i` closely, and packing round-trips.
#[test]
fn levels_dot_is_one_function_on_every_kernel() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(2);
    for bits in [2, 3, 4, 5, 8] {
        let padded = 128;
        let u: Vec<u8> = (0..padded)
            .map(|_| rng.random_range(0..(1u32 << bits)) as u8)
            .collect();
        let z: Vec<f32> = (0..padded)
            .map(|_| rng.random_range(-1.0f32..1.0))
            .collect();
        let mut row = Vec::new();
        pack_levels(bits, &u, &mut row);
        assert_eq!(row.len(), level_bytes(bits, padded));
        for (i, &ui) in u.iter().enumerate() {
            assert_eq!(level_of(&row, bits <= 4, i), ui);
        }
        let want = levels_dot_lanes(&row, bits <= 4, &z);
        for kernel in Kernel::available() {
            assert_eq!(
                levels_dot(kernel, &row, bits <= 4, &z).to_bits(),
                want.to_bits(),
                "{bits} {kernel:?}"
            );
        }
        let exact: f64 = u
            .iter()
            .zip(&z)
            .map(|(a, b)| f64::from(*a) * f64::from(*b))
            .sum();
        assert!((f64::from(want) - exact).abs() < 1e-3, "{want} vs {exact}");
    }
}

fn partition(rq: &RabitQuantizer, metric: Metric, rows: &[f32], c: &[f32]) -> RqCodes {
    let dim = rq.dim;
    let residuals: Vec<f32> = rows
        .chunks(dim)
        .flat_map(|x| x.iter().zip(c).map(|(a, b)| a - b).collect::<Vec<_>>())
        .collect();
    let z = rq.rotate(&residuals);
    let mut bytes = vec![0u8; z.len() / rq.padded * rq.code_len()];
    for (zr, out) in z.chunks(rq.padded).zip(bytes.chunks_mut(rq.code_len())) {
        rq.encode_rotated(zr, out);
    }
    let mut codes = RabitQuantizer::split_rows(rq.bits, rq.padded, &bytes).unwrap();
    rq.prepare(metric, c, &mut codes);
    codes
}

/// The estimated distances are close to the true ones (within a few
/// error bounds), for every metric.
#[test]
fn estimated_distances_track_the_true_distances() {
    let dim = 48;
    let data = clustered_vectors(600, dim, 4, 5);
    let c: Vec<f32> = (0..dim).map(|j| data[j] * 0.9).collect();
    for bits in [1, 3] {
        let rq = RabitQuantizer::new(dim, bits, 1).unwrap();
        for metric in [Metric::L2, Metric::Dot] {
            let codes = partition(&rq, metric, &data, &c);
            let q = clustered_vectors(1, dim, 4, 8);
            let query = rq.query(metric, &q);
            let constant = crate::index::pq::ProductQuantizer::query_constant(metric, &q, &c);
            let mut sink = Best {
                k: 600,
                kept: Vec::new(),
                refused: |_| false,
            };
            scan_rq_codes(
                &rq,
                &query,
                LookupKernel::Scalar,
                &codes,
                constant,
                &mut sink,
            );
            // Each error against the scale of the estimated term,
            // κ ‖r‖ ‖q_x‖ (q_x = q − c for l2, q for dot).
            let qx: Vec<f32> = match metric {
                Metric::L2 => q.iter().zip(&c).map(|(a, b)| a - b).collect(),
                _ => q.clone(),
            };
            let kappa = if metric == Metric::L2 { 2.0 } else { 1.0 };
            let mut rel = 0.0;
            for &(d, r) in &sink.kept {
                let x = &data[r * dim..(r + 1) * dim];
                let truth = match metric {
                    Metric::L2 => x
                        .iter()
                        .zip(&q)
                        .map(|(a, b)| f64::from(a - b).powi(2))
                        .sum(),
                    _ => -dot64(x, &q),
                };
                let res: Vec<f32> = x.iter().zip(&c).map(|(a, b)| a - b).collect();
                let scale = kappa * dot64(&res, &res).sqrt() * dot64(&qx, &qx).sqrt();
                rel += (f64::from(d) - truth).abs() / scale / sink.kept.len() as f64;
            }
            // One bit over D' = 64: about 0.8 · 0.75 / √64 ≈ 0.075 on
            // average; three bits a quarter of that.
            assert!(rel < [0.0, 0.1, 0.03, 0.03][bits], "{metric} {bits}: {rel}");
        }
    }
}

/// With one bit the screen is exact: the scan returns the rows and
/// distance bits of scoring every row, for each lookup kernel, metric,
/// k, with tied rows and a row filter. With more bits the screen is the
/// error bound's: the same rows on every kernel, most rows skipped, and
/// the rows of scoring every row but for at most the documented rate of
/// the bound's failures on that side (3%; none lost here).
#[test]
fn the_screened_scan_matches_scoring_every_row() {
    let dim = 40;
    let mut data = clustered_vectors(700, dim, 6, 3);
    // Exact ties: every seventh row repeats an earlier one.
    for r in (6..700).step_by(7) {
        let earlier = data[(r / 2) * dim..(r / 2 + 1) * dim].to_vec();
        data[r * dim..(r + 1) * dim].copy_from_slice(&earlier);
    }
    let refusals: [fn(usize) -> bool; 2] = [|_| false, |r| r % 3 == 1];
    // Above one bit: rows of scoring every row that the screen lost, and
    // rows of scoring every row, over every case.
    let mut multi_bit = (0usize, 0usize);
    for bits in [1, 2] {
        let rq = RabitQuantizer::new(dim, bits, 5).unwrap();
        for metric in [Metric::L2, Metric::Dot, Metric::Cosine] {
            let rows = if metric == Metric::Cosine {
                crate::kernel::PreparedQueries::new(Metric::Cosine, dim, &data).data
            } else {
                data.clone()
            };
            // The partition's mean as its centroid.
            let c: Vec<f32> = (0..dim)
                .map(|j| rows.chunks(dim).map(|x| x[j]).sum::<f32>() / 700.0)
                .collect();
            let codes = partition(&rq, metric, &rows, &c);
            for q in clustered_vectors(4, dim, 6, 9).chunks(dim) {
                let q = if metric == Metric::Cosine {
                    crate::kernel::PreparedQueries::new(Metric::Cosine, dim, q).data
                } else {
                    q.to_vec()
                };
                let query = rq.query(metric, &q);
                let constant = crate::index::pq::ProductQuantizer::query_constant(metric, &q, &c);
                for k in [1, 10, 100] {
                    for refused in refusals {
                        let run = |kernel, screen: bool| {
                            let mut sink = Best {
                                k,
                                kept: Vec::new(),
                                refused,
                            };
                            let unscreened = RqQuery {
                                screen: None,
                                table: query.table.clone(),
                                z: query.z.clone(),
                                ..query
                            };
                            let counts = scan_rq_codes(
                                &rq,
                                if screen { &query } else { &unscreened },
                                kernel,
                                &codes,
                                constant,
                                &mut sink,
                            );
                            let bits: Vec<(u32, usize)> =
                                sink.kept.iter().map(|(d, r)| (d.to_bits(), *r)).collect();
                            (bits, counts)
                        };
                        let (all, _) = run(LookupKernel::Scalar, false);
                        let mut seen = Vec::new();
                        for kernel in LookupKernel::available() {
                            let (got, counts) = run(kernel, true);
                            if bits == 1 {
                                assert_eq!(got, all, "{metric} k {k} {kernel:?}");
                            } else {
                                let same = got.iter().filter(|g| all.contains(g)).count();
                                multi_bit.0 += all.len() - same;
                                multi_bit.1 += all.len();
                            }
                            if k == 10 {
                                // The error bound keeps more rows.
                                let at_least = codes.len() / if bits == 1 { 2 } else { 4 };
                                assert!(
                                    counts.bound_skipped > at_least,
                                    "{metric} {bits}: skipped {counts:?}"
                                );
                            }
                            seen.push(got);
                        }
                        assert!(seen.windows(2).all(|w| w[0] == w[1]));
                    }
                }
            }
        }
    }
    let rate = multi_bit.0 as f64 / multi_bit.1 as f64;
    eprintln!(
        "2 bits: the screen lost {} of {} rows",
        multi_bit.0, multi_bit.1
    );
    assert!(
        rate <= SCREEN_LOSS_RATE,
        "2 bits: the screen lost {rate} of the rows of scoring every row"
    );
}
