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

impl std::fmt::Display for Metric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
