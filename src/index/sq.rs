//! 8-bit scalar quantization: each dimension is mapped linearly from its
//! trained [min, max] range onto 0..=255.

/// Trained per-dimension ranges.
#[derive(Clone, Debug, PartialEq)]
pub struct ScalarQuantizer {
    /// Minimum per dimension.
    pub min: Vec<f32>,
    /// Step per code per dimension: (max − min) / 255.
    pub step: Vec<f32>,
}

impl ScalarQuantizer {
    /// Trains ranges on `sample` (row-major, `dim` wide).
    pub fn train(sample: &[f32], dim: usize) -> Self {
        let mut min = vec![f32::INFINITY; dim];
        let mut max = vec![f32::NEG_INFINITY; dim];
        for row in sample.chunks_exact(dim) {
            for j in 0..dim {
                min[j] = min[j].min(row[j]);
                max[j] = max[j].max(row[j]);
            }
        }
        let step = min
            .iter()
            .zip(&max)
            .map(|(lo, hi)| if hi > lo { (hi - lo) / 255.0 } else { 0.0 })
            .collect();
        ScalarQuantizer { min, step }
    }

    /// Codes of one vector (values outside the range are clamped).
    pub fn encode(&self, x: &[f32], out: &mut [u8]) {
        for j in 0..x.len() {
            out[j] = if self.step[j] > 0.0 {
                ((x[j] - self.min[j]) / self.step[j])
                    .round()
                    .clamp(0.0, 255.0) as u8
            } else {
                0
            };
        }
    }

    /// The vector a code stands for.
    pub fn decode(&self, code: &[u8], out: &mut [f32]) {
        for j in 0..code.len() {
            out[j] = self.min[j] + code[j] as f32 * self.step[j];
        }
    }

    /// Largest per-dimension error for values inside the trained range.
    pub fn max_error(&self) -> f32 {
        self.step.iter().fold(0.0f32, |a, s| a.max(s / 2.0)) * 1.0001
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_error_is_at_most_half_a_step() {
        let dim = 5;
        let data: Vec<f32> = (0..500)
            .map(|i| ((i * 37) % 101) as f32 / 7.0 - 3.0)
            .collect();
        let sq = ScalarQuantizer::train(&data, dim);
        let mut code = vec![0u8; dim];
        let mut dec = vec![0f32; dim];
        for x in data.chunks(dim) {
            sq.encode(x, &mut code);
            sq.decode(&code, &mut dec);
            for j in 0..dim {
                assert!(
                    (x[j] - dec[j]).abs() <= sq.step[j] / 2.0 + 1e-5,
                    "{} vs {}",
                    x[j],
                    dec[j]
                );
            }
        }
        assert!(sq.max_error() > 0.0);
    }
}
