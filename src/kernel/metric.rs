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
