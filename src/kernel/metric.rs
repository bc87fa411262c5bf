//! Distance metrics and how a distance is finished from a dot product and
//! precomputed norms.

use serde::{Deserialize, Serialize};

/// The distance function of a search. Smaller is always nearer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Squared Euclidean distance.
    #[default]
    L2,
    /// `1 − cos(q, x)`; the query is normalised on its own.
    Cosine,
    /// Negative inner product.
    Dot,
}

impl Metric {
    /// Parses `l2`, `cosine` or `dot` (also `euclidean`, `ip`).
    pub fn parse(s: &str) -> Option<Metric> {
        match s.to_ascii_lowercase().as_str() {
            "l2" | "euclidean" => Some(Metric::L2),
            "cosine" | "cos" => Some(Metric::Cosine),
            "dot" | "ip" | "inner_product" => Some(Metric::Dot),
            _ => None,
        }
    }

    /// The metric's name as used in configs, CLI and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Metric::L2 => "l2",
            Metric::Cosine => "cosine",
            Metric::Dot => "dot",
        }
    }

    /// What is wrong with `v` as a stored row or a query under this metric,
    /// or `None` when it can be scored. A vector must be finite, its squared
    /// norm at most [`MAX_NORM_SQ`] (so that no distance, centroid or
    /// residual computed from it overflows float32), and under cosine at
    /// least [`MIN_COSINE_NORM_SQ`] (a zero or near-zero vector has no
    /// direction: its norm underflows and every distance would read 1.0).
    pub fn vector_problem(self, v: &[f32]) -> Option<VectorProblem> {
        if let Some(position) = v.iter().position(|x| !x.is_finite()) {
            return Some(VectorProblem::NonFinite { position });
        }
        // In f64: the check itself must not overflow or underflow.
        let norm_sq: f64 = v.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
        if norm_sq > f64::from(MAX_NORM_SQ) {
            return Some(VectorProblem::TooLarge { norm_sq });
        }
        if self == Metric::Cosine && norm_sq < f64::from(MIN_COSINE_NORM_SQ) {
            return Some(VectorProblem::NoDirection { norm_sq });
        }
        None
    }

    /// Turns a dot product into this metric's distance. `query_norm_sq` is
    /// ‖q‖² of the *prepared* query (see [`PreparedQueries`](crate::kernel::PreparedQueries)), `norm_sq` is
    /// ‖x‖². Every code path finishes distances here, so they agree bit for bit.
    #[inline(always)]
    pub fn finish(self, dot: f32, query_norm_sq: f32, norm_sq: f32) -> f32 {
        match self {
            Metric::L2 => ((query_norm_sq + norm_sq) - 2.0 * dot).max(0.0),
            Metric::Cosine => {
                if norm_sq > 0.0 {
                    1.0 - dot / norm_sq.sqrt()
                } else {
                    1.0
                }
            }
            Metric::Dot => -dot,
        }
    }
}

impl Metric {
    /// `dots[r] = finish(add + dots[r], query_norm_sq, norms[r])` for every
    /// `r` (`add` only when given: adding `+0.0` would turn a `-0.0` dot
    /// into `+0.0`). Compiled for AVX-512 where the kernel runs there —
    /// the same operations, each correctly rounded, 16 rows at a time.
    pub fn finish_all(self, dots: &mut [f32], add: Option<f32>, query_norm_sq: f32, norms: &[f32]) {
        #[cfg(target_arch = "x86_64")]
        if super::Kernel::detect() == super::Kernel::Avx512 {
            // SAFETY: the AVX-512 kernel is only chosen where AVX-512F is.
            unsafe { finish_all_avx512(self, dots, add, query_norm_sq, norms) };
            return;
        }
        finish_all_rows(self, dots, add, query_norm_sq, norms);
    }
}

/// [`Metric::finish_all`] compiled for AVX-512.
///
/// # Safety
/// The CPU supports AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn finish_all_avx512(
    metric: Metric,
    dots: &mut [f32],
    add: Option<f32>,
    query_norm_sq: f32,
    norms: &[f32],
) {
    finish_all_rows(metric, dots, add, query_norm_sq, norms);
}

/// The loops of [`Metric::finish_all`], one per metric so each vectorises.
#[inline(always)]
fn finish_all_rows(
    metric: Metric,
    dots: &mut [f32],
    add: Option<f32>,
    query_norm_sq: f32,
    norms: &[f32],
) {
    #[inline(always)]
    fn each(dots: &mut [f32], add: Option<f32>, norms: &[f32], f: impl Fn(f32, f32) -> f32) {
        match add {
            Some(a) => dots
                .iter_mut()
                .zip(norms)
                .for_each(|(d, &n)| *d = f(a + *d, n)),
            None => dots.iter_mut().zip(norms).for_each(|(d, &n)| *d = f(*d, n)),
        }
    }
    match metric {
        Metric::L2 => each(dots, add, norms, |d, n| {
            Metric::L2.finish(d, query_norm_sq, n)
        }),
        Metric::Cosine => each(dots, add, norms, |d, n| {
            Metric::Cosine.finish(d, query_norm_sq, n)
        }),
        Metric::Dot => each(dots, add, norms, |d, n| {
            Metric::Dot.finish(d, query_norm_sq, n)
        }),
    }
}

/// The largest squared norm of a vector shoal stores or searches with:
/// 2^120 (a norm of 2^60 ≈ 1.15e18). Distances between such vectors, sums
/// of them in k-means and residuals in PQ stay far below float32's maximum
/// (≈ 3.4e38 ≈ 2^128).
pub const MAX_NORM_SQ: f32 = 1.329_228e36; // 2^120

/// The smallest squared norm of a vector under cosine: 2^-100 (≈ 7.9e-31).
/// Below it the norm's square root and the dot products lose their
/// precision to float32's subnormal range.
pub const MIN_COSINE_NORM_SQ: f32 = 7.888_609e-31; // 2^-100

/// Why a vector cannot be stored or searched (see [`Metric::vector_problem`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum VectorProblem {
    /// NaN or an infinity at `position`.
    NonFinite {
        /// Index of the first non-finite value.
        position: usize,
    },
    /// Squared norm above [`MAX_NORM_SQ`].
    TooLarge {
        /// The vector's squared norm (in f64).
        norm_sq: f64,
    },
    /// Cosine only: squared norm below [`MIN_COSINE_NORM_SQ`].
    NoDirection {
        /// The vector's squared norm (in f64).
        norm_sq: f64,
    },
}

impl std::fmt::Display for VectorProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VectorProblem::NonFinite { position } => {
                write!(
                    f,
                    "has a non-finite value (NaN or infinity) at position {position}"
                )
            }
            VectorProblem::TooLarge { norm_sq } => write!(
                f,
                "is too large: its squared norm {norm_sq:.3e} is above 2^120 (≈1.3e36), \
                 where float32 distances would overflow; scale the vectors down"
            ),
            VectorProblem::NoDirection { norm_sq } => write!(
                f,
                "is zero or too small for cosine: its squared norm {norm_sq:.3e} is below \
                 2^-100 (≈7.9e-31), so it has no reliable direction; scale it up or leave it out"
            ),
        }
    }
}

impl std::fmt::Display for Metric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod magnitude_tests {
    use super::*;

    #[test]
    fn the_bounds_are_the_powers_of_two_they_claim() {
        assert_eq!(MAX_NORM_SQ, 2f32.powi(120));
        assert_eq!(MIN_COSINE_NORM_SQ, 2f32.powi(-100));
    }

    #[test]
    fn huge_tiny_and_non_finite_vectors_are_named() {
        let ok = [0.5f32, -1.0, 2.0];
        for m in [Metric::L2, Metric::Cosine, Metric::Dot] {
            assert_eq!(m.vector_problem(&ok), None);
            assert!(matches!(
                m.vector_problem(&[1.0, f32::NAN]),
                Some(VectorProblem::NonFinite { position: 1 })
            ));
            assert!(matches!(
                m.vector_problem(&[1e19, 0.0]),
                Some(VectorProblem::TooLarge { .. })
            ));
            // Squares overflow f32 here, but the check runs in f64.
            assert!(m.vector_problem(&[1e30; 4]).is_some());
        }
        assert!(matches!(
            Metric::Cosine.vector_problem(&[1e-20; 384]),
            Some(VectorProblem::NoDirection { .. })
        ));
        assert!(Metric::Cosine.vector_problem(&[0.0; 3]).is_some());
        // Tiny or zero vectors are fine where there is no direction to take.
        assert_eq!(Metric::L2.vector_problem(&[1e-20; 384]), None);
        assert_eq!(Metric::Dot.vector_problem(&[0.0; 3]), None);
        // Just inside both bounds.
        assert_eq!(Metric::L2.vector_problem(&[1.1e18]), None);
        assert_eq!(Metric::Cosine.vector_problem(&[1e-15]), None);
    }
}

#[cfg(test)]
mod finish_tests {
    use super::*;

    /// `finish_all` gives `finish` bit for bit on every row, with and
    /// without an added term, including zero norms, -0.0 dots and lengths
    /// that are not a multiple of 16.
    #[test]
    fn finish_all_equals_finish_row_by_row() {
        let n = 37;
        let dots: Vec<f32> = (0..n)
            .map(|i| match i % 7 {
                0 => -0.0,
                1 => 0.0,
                _ => (i as f32 * 0.731).sin() * 3.0,
            })
            .collect();
        let norms: Vec<f32> = (0..n)
            .map(|i| {
                if i % 5 == 0 {
                    0.0
                } else {
                    1.0 + i as f32 * 0.1
                }
            })
            .collect();
        for metric in [Metric::L2, Metric::Cosine, Metric::Dot] {
            for add in [None, Some(0.25f32), Some(-0.0)] {
                let mut got = dots.clone();
                metric.finish_all(&mut got, add, 2.5, &norms);
                for r in 0..n {
                    let d = add.map_or(dots[r], |a| a + dots[r]);
                    let want = metric.finish(d, 2.5, norms[r]);
                    assert_eq!(got[r].to_bits(), want.to_bits(), "{metric} {add:?} row {r}");
                }
            }
        }
    }
}
