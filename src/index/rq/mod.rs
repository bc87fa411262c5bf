//! RaBitQ quantization (IVF_RQ): each row's residual to its partition
//! centroid is turned by a seeded random rotation, normalised, and kept as
//! `bits` bits per rotated dimension, with a few floats per row that make
//! the code an estimator of inner products with a known error
//! (Gao & Long, SIGMOD 2024; the multi-bit form, 2025).
//!
//! Notation: `D` is the column's dimension, `D'` the rotation's (`D`
//! rounded up to 64), `P` the `D' × D` rotation (orthonormal columns, so
//! `‖P r‖ = ‖r‖`), `x = P r / ‖r‖` a row's rotated unit residual.
//!
//! * Code: `u_i ∈ [0, 2^bits)` per rotated dimension, standing for the
//!   grid point `y_i = u_i − h` (`h = (2^bits − 1) / 2`), chosen as
//!   `y = clamp(⌊t x⌋ + ½, −h, h)` for the scale `t` (of 64 tried) that
//!   brings `y` closest in angle to `x`. The top bit of `u_i` is the sign
//!   of `x_i`: the first bit plane is the 1-bit RaBitQ code.
//! * Stored per row: the code as `bits` planes of `D'/8` bytes (top bit
//!   first), then `‖r‖`, `⟨2b − 1, x⟩ = Σ|x_i|` and, for more than one
//!   bit, `⟨y, x⟩` (little-endian f32).
//! * Estimator: for any vector `v`, `⟨v, r̂⟩ ≈ ⟨y, P v⟩ / ⟨y, x⟩`. With
//!   `a = ⟨ŷ, x⟩` its error is at most
//!   `‖v‖ · √(1 − a²) / a · ε₀ / √(D' − 1)` with high probability over the
//!   rotation (ε₀ = [`EPSILON`] ≈ 1.9 standard deviations).
//! * Distances, with `κ = 2` for l2 and 1 otherwise:
//!   l2 `‖q − c‖² + ‖r‖² − 2‖r‖⟨q − c, r̂⟩`, dot `−q·c − ‖r‖⟨q, r̂⟩`,
//!   cosine (unit rows and queries) `1 − q·c − ‖r‖⟨q, r̂⟩`.
//!
//! A query is rotated once per segment; `⟨b, P q⟩` for one bit plane `b`
//! is a sum of `D'/8` entries of a 256-entry table per byte of the plane
//! (the sums of `−(P q)_j` over the byte's set bits), which is PQ's
//! lookup shape: the same quantized-table kernel
//! ([`crate::kernel::lookup`]) screens 64 rows at a time, its levels
//! built from each byte's two 16-entry nibble halves
//! ([`LookupTable::from_halves`]). For l2,
//! `⟨y, P c⟩` is a per-row term computed when the partition is loaded.
//! In memory a partition keeps the sign plane (for the screen) and, above
//! one bit, each row's levels packed two a byte (up to 4 bits) for
//! [`levels_dot`].
//!
//! The scan ([`scan_rq_codes`]): the 1-bit estimate's lower bound minus
//! its error bound is screened against the heap's threshold; a row that
//! passes gets the full estimate — one bit: the sign plane's float table
//! sum; more: `Σ u_i (P q)_i` by [`levels_dot`] — each in a fixed order,
//! so every path gives the same bits. With one bit the error bound is not
//! used: the screen only skips rows whose 1-bit estimate could not enter,
//! as PQ's does.

use crate::index::pq::{ScanSink, CODES};
use crate::kernel::lookup::{
    block_candidates, block_sums, CodeColumns, LookupKernel, LookupTable, LOOKUP_ROWS,
};
use crate::kernel::{dot_blocks, fma_dot, Kernel, Metric, VectorBlocks};
use rand::{Rng, SeedableRng};

mod levels;
pub use levels::levels_dot;
use levels::{level_bytes, pack_levels};

/// Most bits per dimension.
pub const MAX_BITS: usize = 8;

/// The error bound's confidence, in standard deviations (RaBitQ's ε₀).
pub const EPSILON: f32 = 1.9;

/// Scales tried per row when encoding more than one bit.
const SCALES: usize = 64;

/// A segment's rotation and code width.
#[derive(Clone, Debug)]
pub struct RabitQuantizer {
    /// The column's dimension `D`.
    pub dim: usize,
    /// The rotation's dimension `D'` (a multiple of 64).
    pub padded: usize,
    /// Bits per rotated dimension.
    pub bits: usize,
    /// `P`, row-major: `padded` rows of `dim` floats.
    pub rotation_rows: Vec<f32>,
    /// `P`'s rows, block-transposed, for the kernel.
    rotation: VectorBlocks,
}

/// Floats stored per row after the planes for `bits` bits.
fn factors(bits: usize) -> usize {
    if bits == 1 {
        2
    } else {
        3
    }
}

/// `D` rounded up to a multiple of 64.
pub fn padded_dim(dim: usize) -> usize {
    dim.div_ceil(64).max(1) * 64
}

/// Bytes per row of a code of `bits` bits over `padded` dimensions,
/// factors included.
pub fn code_len(bits: usize, padded: usize) -> usize {
    bits * padded / 8 + 4 * factors(bits)
}

impl RabitQuantizer {
    /// A quantizer with a random rotation drawn from `seed`: `D` Gaussian
    /// columns of length `D'`, orthonormalised (Gram–Schmidt, twice, in
    /// float64) — a uniformly random isometry. `None` for a dimension of
    /// zero or bits outside 1 to [`MAX_BITS`].
    pub fn new(dim: usize, bits: usize, seed: u64) -> Option<RabitQuantizer> {
        if dim == 0 || !(1..=MAX_BITS).contains(&bits) {
            return None;
        }
        let padded = padded_dim(dim);
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x5261_4269_7451_0001);
        let mut gauss = || {
            let u1: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
            let u2: f64 = rng.random::<f64>();
            (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
        };
        let mut cols: Vec<Vec<f64>> = (0..dim)
            .map(|_| (0..padded).map(|_| gauss()).collect())
            .collect();
        for j in 0..dim {
            for _ in 0..2 {
                for i in 0..j {
                    let d: f64 = cols[j].iter().zip(&cols[i]).map(|(a, b)| a * b).sum();
                    let (head, tail) = cols.split_at_mut(j);
                    for (a, b) in tail[0].iter_mut().zip(&head[i]) {
                        *a -= d * b;
                    }
                }
            }
            let n = cols[j].iter().map(|a| a * a).sum::<f64>().sqrt();
            cols[j].iter_mut().for_each(|a| *a /= n);
        }
        let mut rows = vec![0.0f32; padded * dim];
        for (j, col) in cols.iter().enumerate() {
            for (i, v) in col.iter().enumerate() {
                rows[i * dim + j] = *v as f32;
            }
        }
        RabitQuantizer::from_parts(dim, bits, rows)
    }

    /// A quantizer from a stored rotation; `None` when the sizes disagree.
    pub fn from_parts(dim: usize, bits: usize, rotation_rows: Vec<f32>) -> Option<RabitQuantizer> {
        let padded = padded_dim(dim);
        if dim == 0 || !(1..=MAX_BITS).contains(&bits) || rotation_rows.len() != padded * dim {
            return None;
        }
        Some(RabitQuantizer {
            dim,
            padded,
            bits,
            rotation: VectorBlocks::from_rows(dim, &rotation_rows),
            rotation_rows,
        })
    }

    /// Bytes of one bit plane of one row.
    pub fn plane_bytes(&self) -> usize {
        self.padded / 8
    }

    /// Bytes per row in a partition file.
    pub fn code_len(&self) -> usize {
        code_len(self.bits, self.padded)
    }

    /// `P v` for each row of `rows` (`dim` wide): `padded` floats each,
    /// through the batch-invariant dot kernel (a row's result does not
    /// depend on the others).
    pub fn rotate(&self, rows: &[f32]) -> Vec<f32> {
        let n = rows.len() / self.dim;
        let mut out = vec![0.0f32; n * self.padded];
        if n > 0 {
            let nb = self.rotation.block_count();
            dot_blocks(Kernel::detect(), rows, &self.rotation, 0..nb, &mut out);
        }
        out
    }

    /// Codes of residuals `rows` (`dim` wide, row-major), rotated and
    /// encoded on every core ([`code_len`](Self::code_len) bytes a row, in
    /// order; each row's code depends on that row alone).
    pub fn encode_rows(&self, rows: &[f32]) -> Vec<u8> {
        let len = self.code_len();
        crate::index::kmeans::map_row_parts(rows, self.dim, |part| {
            let z = self.rotate(part);
            let mut out = vec![0u8; part.len() / self.dim * len];
            for (zr, code) in z.chunks_exact(self.padded).zip(out.chunks_exact_mut(len)) {
                self.encode_rotated(zr, code);
            }
            out
        })
    }

    /// Encodes one rotated residual `z = P r` (`padded` floats) into `out`
    /// ([`code_len`](Self::code_len) bytes).
    pub fn encode_rotated(&self, z: &[f32], out: &mut [u8]) {
        let (bits, padded) = (self.bits, self.padded);
        let norm = z.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>().sqrt();
        let x: Vec<f64> = if norm > 0.0 && norm.is_finite() {
            z.iter().map(|v| f64::from(*v) / norm).collect()
        } else {
            vec![0.0; padded]
        };
        let ip1: f64 = x.iter().map(|v| v.abs()).sum();
        let top = (1usize << bits) - 1;
        let h = top as f64 / 2.0;
        let mut u = vec![0usize; padded];
        // ⌊t v⌋ + ½ clamped to ±h, with the floor by truncation (no libm
        // call: this runs 64 × D' times per row).
        let level = |t: f64, v: f64| {
            let x = (t * v).clamp(-h - 1.0, h + 1.0);
            let i = x as i64 as f64;
            let floor = if i > x { i - 1.0 } else { i };
            (floor + 0.5).clamp(-h, h)
        };
        let mut ipb = 0.5 * ip1;
        if bits == 1 {
            for (ui, v) in u.iter_mut().zip(&x) {
                *ui = usize::from(*v >= 0.0);
            }
        } else {
            let widest = x.iter().fold(0.0f64, |a, v| a.max(v.abs()));
            // t = s (h + ½) / max|x| for s from 0.3 to 2.5: from no
            // dimension at the top level to a few clipped there.
            let mut best = (f64::NEG_INFINITY, 1.0);
            if widest > 0.0 {
                for k in 0..SCALES {
                    let s = 0.3 + 2.2 * k as f64 / (SCALES - 1) as f64;
                    let t = s * (h + 0.5) / widest;
                    let (mut ip, mut sq) = (0.0, 0.0);
                    for v in &x {
                        let y = level(t, *v);
                        ip += y * v;
                        sq += y * y;
                    }
                    let cos = ip / sq.sqrt();
                    if cos > best.0 {
                        best = (cos, t);
                    }
                }
            }
            ipb = 0.0;
            for (ui, v) in u.iter_mut().zip(&x) {
                let y = level(best.1, *v);
                ipb += y * v;
                *ui = (y + h).round() as usize;
            }
        }
        let pb = self.plane_bytes();
        out[..bits * pb].fill(0);
        for (i, &ui) in u.iter().enumerate() {
            for b in 0..bits {
                if (ui >> (bits - 1 - b)) & 1 == 1 {
                    out[b * pb + i / 8] |= 1 << (i % 8);
                }
            }
        }
        let mut at = bits * pb;
        let mut put = |v: f64| {
            out[at..at + 4].copy_from_slice(&(v as f32).to_le_bytes());
            at += 4;
        };
        put(norm);
        // A zero residual has no direction: its estimate is 0 whatever the
        // divisor, which must not be zero.
        put(if ip1 > 0.0 { ip1 } else { 1.0 });
        if bits > 1 {
            put(if ipb > 0.0 { ipb } else { 1.0 });
        }
    }

    /// Splits a partition's row-major records (`code_len` bytes each)
    /// into bit planes and factors; `None` when the length is not whole
    /// rows.
    pub fn split_rows(bits: usize, padded: usize, bytes: &[u8]) -> Option<RqCodes> {
        let len = code_len(bits, padded);
        if !bytes.len().is_multiple_of(len) {
            return None;
        }
        let pb = padded / 8;
        let rows = bytes.len() / len;
        let sign: Vec<u8> = bytes
            .chunks_exact(len)
            .flat_map(|r| r[..pb].iter().copied())
            .collect();
        let sign = CodeColumns::from_rows(pb, &sign)?;
        // Above one bit: each row's levels, packed for `levels_dot`.
        let level_bytes = level_bytes(bits, padded);
        let mut levels = Vec::with_capacity(rows * level_bytes);
        let mut u = vec![0u8; padded];
        for r in bytes.chunks_exact(len).filter(|_| bits > 1) {
            u.fill(0);
            for b in 0..bits {
                let plane = &r[b * pb..(b + 1) * pb];
                for (i, ui) in u.iter_mut().enumerate() {
                    *ui |= ((plane[i / 8] >> (i % 8)) & 1) << (bits - 1 - b);
                }
            }
            pack_levels(bits, &u, &mut levels);
        }
        let float = |r: &[u8], k: usize| {
            let at = bits * pb + 4 * k;
            f32::from_le_bytes([r[at], r[at + 1], r[at + 2], r[at + 3]])
        };
        let column = |k: usize| bytes.chunks_exact(len).map(|r| float(r, k)).collect();
        Some(RqCodes {
            sign,
            levels,
            level_bytes,
            norm: column(0),
            ip1: column(1),
            ipb: if bits > 1 { column(2) } else { Vec::new() },
            c1: Vec::new(),
            cb: Vec::new(),
            screen: ScreenTerms::default(),
        })
    }

    /// The negated plane table of a rotated vector `z`: entry `(g, v)` is
    /// `−Σ z_{8g+j}` over the set bits `j` of byte value `v`, computed as
    /// the low nibble's sum plus the high nibble's (each a 16-entry table
    /// built entry from entry): one rounding order for every path, and an
    /// inner loop of 16 independent adds.
    fn plane_table(&self, z: &[f32]) -> Vec<f32> {
        let (low, high) = self.nibble_tables(z);
        let mut table = vec![0.0f32; self.plane_bytes() * CODES];
        for (g, out) in table.chunks_exact_mut(CODES).enumerate() {
            let (low, high) = (&low[g * 16..(g + 1) * 16], &high[g * 16..(g + 1) * 16]);
            for (row, h) in out.chunks_exact_mut(16).zip(high) {
                for (o, l) in row.iter_mut().zip(low) {
                    *o = l + h;
                }
            }
        }
        table
    }

    /// The halves of [`plane_table`](Self::plane_table)'s entries: per
    /// byte `g`, the 16 sums over the low nibble's set bits and the 16 over
    /// the high one's (`D'/8 × 16` each); entry `(g, v)` is
    /// `low[v & 15] + high[v >> 4]`.
    fn nibble_tables(&self, z: &[f32]) -> (Vec<f32>, Vec<f32>) {
        let groups = self.plane_bytes();
        let nibble = |z4: &[f32], t: &mut [f32]| {
            t[0] = 0.0;
            for v in 1..16 {
                t[v] = t[v & (v - 1)] - z4[v.trailing_zeros() as usize];
            }
        };
        let (mut low, mut high) = (vec![0.0f32; groups * 16], vec![0.0f32; groups * 16]);
        for g in 0..groups {
            nibble(&z[g * 8..g * 8 + 4], &mut low[g * 16..(g + 1) * 16]);
            nibble(&z[g * 8 + 4..g * 8 + 8], &mut high[g * 16..(g + 1) * 16]);
        }
        (low, high)
    }

    /// What a query needs to scan this segment's codes: its rotation, the
    /// plane table and the table's quantized screen.
    pub fn query(&self, metric: Metric, q: &[f32]) -> RqQuery {
        self.query_rotated(metric, q, self.rotate(q))
    }

    /// [`query`](Self::query) for a query already rotated (`z = P q`, as
    /// [`rotate`](Self::rotate) gives it for a batch: the same bits).
    pub fn query_rotated(&self, metric: Metric, q: &[f32], z: Vec<f32>) -> RqQuery {
        // The screen's levels from the nibble halves (32 entries a byte to
        // quantize, not 256); the float table only where a 1-bit estimate
        // sums it.
        let (low, high) = self.nibble_tables(&z);
        let screen = LookupTable::from_halves(&low, &high, self.plane_bytes());
        let table = if self.bits == 1 {
            self.plane_table(&z)
        } else {
            Vec::new()
        };
        RqQuery {
            sum: z.iter().sum(),
            norm: fma_dot(q, q).sqrt(),
            metric,
            table,
            screen,
            z,
        }
    }

    /// Readies a loaded partition with centroid `c` for scans under
    /// `metric`: the l2 per-row terms `⟨2b − 1, P c⟩` and `⟨y, P c⟩`, and
    /// the screen's per-row terms (see [`scan_rq_codes`]).
    pub fn prepare(&self, metric: Metric, c: &[f32], codes: &mut RqCodes) {
        let l2 = metric == Metric::L2;
        let kappa = if l2 { 2.0f64 } else { 1.0 };
        if l2 {
            let z = self.rotate(c);
            let table = self.plane_table(&z);
            let sum: f32 = z.iter().sum();
            let (mut c1, mut cb) = (Vec::with_capacity(codes.len()), Vec::new());
            for r in 0..codes.len() {
                let (b, i) = (r / LOOKUP_ROWS, r % LOOKUP_ROWS);
                c1.push(sign_dot(
                    plane_sum(&table, codes.sign.block(b), i, 0.0),
                    sum,
                ));
                if self.bits > 1 {
                    cb.push(self.grid_dot(&z, codes, r, sum));
                }
            }
            codes.c1 = c1;
            codes.cb = cb;
        }
        let root = (self.padded as f64).sqrt();
        let rows = codes.len();
        let mut screen = ScreenTerms {
            inv_beta: Vec::with_capacity(rows),
            err_unit: Vec::with_capacity(rows),
            norm_sq: Vec::with_capacity(rows),
            half_c1: Vec::with_capacity(rows),
            magnitude: 0.0,
        };
        for r in 0..rows {
            let n = f64::from(codes.norm[r]);
            let ip1 = f64::from(codes.ip1[r]);
            let cos = (ip1 / root).clamp(1e-6, 1.0);
            // A row at its centroid: its distance does not depend on the
            // sum, a huge 1/β puts its limit at ±∞ by the sign of the rest.
            screen.inv_beta.push(if n > 0.0 {
                (ip1 / (2.0 * kappa * n)) as f32
            } else {
                1e20
            });
            screen
                .err_unit
                .push((n * (1.0 - cos * cos).sqrt() / cos) as f32);
            screen.norm_sq.push(if l2 { (n * n) as f32 } else { 0.0 });
            screen
                .half_c1
                .push(if l2 { codes.c1[r] / 2.0 } else { 0.0 });
            screen.magnitude = screen
                .magnitude
                .max((if l2 { n * n } else { 0.0 } + kappa * n * root / ip1) as f32);
        }
        codes.screen = screen;
    }

    /// `⟨y, z⟩` of row `r` (more than one bit) from its levels, `z` and
    /// `Σ z`: `Σ_i u_i z_i − h Σ z` ([`levels_dot`]).
    #[inline]
    fn grid_dot(&self, z: &[f32], codes: &RqCodes, r: usize, sum: f32) -> f32 {
        let row = &codes.levels[r * codes.level_bytes..(r + 1) * codes.level_bytes];
        let h = ((1u32 << self.bits) - 1) as f32 / 2.0;
        levels_dot(Kernel::detect(), row, self.bits <= 4, z) - h * sum
    }
}

/// The table entries of row `i` of one plane's block (`D'/8 × 64` bytes,
/// byte-major), summed in eight interleaved partial sums added up in a
/// fixed tree at the end: the same bits on every path, without one long
/// chain of dependent adds (a survivor's estimate sums `bits × D'/8`
/// entries).
#[inline]
fn plane_sum(table: &[f32], block: &[u8], i: usize, base: f32) -> f32 {
    // D'/8 bytes per row, a multiple of 8 (D' is a multiple of 64).
    let mut acc = [0.0f32; 8];
    for (k, eight) in block.chunks_exact(8 * LOOKUP_ROWS).enumerate() {
        let t = &table[k * 8 * CODES..(k + 1) * 8 * CODES];
        for (j, a) in acc.iter_mut().enumerate() {
            *a += t[j * CODES + eight[j * LOOKUP_ROWS + i] as usize];
        }
    }
    base + (((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])))
}

/// `⟨2b − 1, z⟩` from a plane's negated table sum `s = −Σ_{bits} z` and
/// `Σ z`.
#[inline]
fn sign_dot(s: f32, sum: f32) -> f32 {
    -2.0 * s - sum
}

/// One partition's RaBitQ codes, as loaded.
#[derive(Clone, Debug)]
pub struct RqCodes {
    /// The top bit plane (the sign code), in blocks of 64 rows, for the
    /// screen.
    pub sign: CodeColumns,
    /// Above one bit: each row's levels `u_i`, packed (see `pack_levels`),
    /// for the full estimate.
    pub levels: Vec<u8>,
    /// Bytes of `levels` per row.
    pub level_bytes: usize,
    /// `‖r‖` per row.
    pub norm: Vec<f32>,
    /// `Σ|x_i|` per row.
    pub ip1: Vec<f32>,
    /// `⟨y, x⟩` per row (more than one bit).
    pub ipb: Vec<f32>,
    /// l2: `⟨2b − 1, P c⟩` per row (computed at load).
    pub c1: Vec<f32>,
    /// l2, more than one bit: `⟨y, P c⟩` per row (computed at load).
    pub cb: Vec<f32>,
    /// The screen's per-row terms (computed at load).
    pub screen: ScreenTerms,
}

/// Per-row terms of the screen's limits, computed when a partition is
/// loaded (with `κ = 2` for l2, 1 otherwise, `a = Σ|x_i| / √D'`).
#[derive(Clone, Debug, Default)]
pub struct ScreenTerms {
    /// `1/β = Σ|x_i| / (2κ‖r‖)`: the 1-bit distance is `α + β s` in the
    /// plane-0 table sum `s`; 1e20 for a row at its centroid.
    pub inv_beta: Vec<f32>,
    /// `‖r‖ √(1 − a²) / a`: the error bound over `κ ‖q_x‖ ε₀ / √(D' − 1)`.
    pub err_unit: Vec<f32>,
    /// l2: `‖r‖²`; zeros otherwise.
    pub norm_sq: Vec<f32>,
    /// l2: `⟨2b − 1, P c⟩ / 2`; zeros otherwise.
    pub half_c1: Vec<f32>,
    /// The largest `‖r‖²` (l2) `+ κ ‖r‖ √D' / Σ|x_i|`, sizing the margin.
    pub magnitude: f32,
}

impl RqCodes {
    /// Rows held.
    pub fn len(&self) -> usize {
        self.norm.len()
    }

    /// True when no rows are held.
    pub fn is_empty(&self) -> bool {
        self.norm.is_empty()
    }

    /// Bytes held (the partition cache's weight).
    pub fn size_bytes(&self) -> usize {
        self.sign.size_bytes()
            + self.levels.len()
            + 4 * (self.norm.len()
                + self.ip1.len()
                + self.ipb.len()
                + self.c1.len()
                + self.cb.len())
            + 4 * (self.screen.inv_beta.len()
                + self.screen.err_unit.len()
                + self.screen.norm_sq.len()
                + self.screen.half_c1.len())
    }
}

/// A query's tables for one RaBitQ segment.
pub struct RqQuery {
    /// `Σ (P q)_i`.
    sum: f32,
    /// `‖q‖`.
    norm: f32,
    metric: Metric,
    /// Negated plane table of `P q` (`D'/8 × 256`).
    table: Vec<f32>,
    /// Its quantized screen.
    screen: Option<LookupTable>,
    /// `P q`, for the full estimate.
    z: Vec<f32>,
}

/// What one query's scan of a code partition did, for the profile (PQ's
/// scan reports the first count; its skips are the other rows).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScanCounts {
    /// Rows given the full estimate (PQ: the float table).
    pub rescored: usize,
    /// RaBitQ: rows the screen (lower bound and error bound) skipped.
    pub bound_skipped: usize,
}

/// Scans one partition's codes for one query into `sink`. `constant` is
/// `‖q − c‖²` for l2 and `−q·c` for dot and cosine
/// ([`ProductQuantizer::query_constant`](crate::index::pq::ProductQuantizer::query_constant)).
pub fn scan_rq_codes(
    quantizer: &RabitQuantizer,
    query: &RqQuery,
    kernel: LookupKernel,
    codes: &RqCodes,
    constant: f32,
    sink: &mut impl ScanSink,
) -> ScanCounts {
    let metric = query.metric;
    let kappa = if metric == Metric::L2 { 2.0f32 } else { 1.0 };
    let l2 = metric == Metric::L2;
    // ‖q_x‖: the vector whose inner product with r̂ is estimated.
    let qx = match metric {
        Metric::L2 => constant.max(0.0).sqrt(),
        Metric::Dot => query.norm,
        Metric::Cosine => 1.0,
    };
    let a_query = if metric == Metric::Cosine {
        1.0 + constant
    } else {
        constant
    };
    let distance_of = |r: usize| -> f32 {
        let n = codes.norm[r];
        let a = if l2 { n * n + a_query } else { a_query };
        let est = if quantizer.bits == 1 {
            let (b, i) = (r / LOOKUP_ROWS, r % LOOKUP_ROWS);
            let s = plane_sum(&query.table, codes.sign.block(b), i, 0.0);
            let c = if l2 { codes.c1[r] } else { 0.0 };
            (sign_dot(s, query.sum) - c) / codes.ip1[r]
        } else {
            let c = if l2 { codes.cb[r] } else { 0.0 };
            (quantizer.grid_dot(&query.z, codes, r, query.sum) - c) / codes.ipb[r]
        };
        a - kappa * n * est
    };
    let d_padded = quantizer.padded as f64;
    let spread = f64::from(EPSILON) / (d_padded - 1.0).max(1.0).sqrt();
    let mut counts = ScanCounts::default();
    let mut sums = [0u16; LOOKUP_ROWS];
    let mut shifts = [0.0f32; LOOKUP_ROWS];
    let plane0 = &codes.sign;
    let terms = &codes.screen;
    for blk in 0..plane0.block_count() {
        let first = blk * LOOKUP_ROWS;
        let in_block = (codes.len() - first).min(LOOKUP_ROWS);
        let mut candidates = match (&query.screen, sink.threshold()) {
            (Some(lut), Some(t)) => {
                block_sums(kernel, lut, plane0, blk, &mut sums);
                let limits = ScreenLimits::new(
                    t,
                    a_query,
                    kappa,
                    qx,
                    query.sum,
                    (quantizer.bits > 1).then_some(spread as f32),
                    d_padded as f32,
                    terms.magnitude,
                );
                let widest = limits.shifts(terms, first, &mut shifts[..in_block]);
                let slack = lut.slack(widest);
                block_candidates(kernel, lut, &sums, 0.0, &shifts[..in_block], slack)
            }
            _ => u64::MAX >> (LOOKUP_ROWS - in_block),
        };
        counts.bound_skipped += in_block - candidates.count_ones() as usize;
        while candidates != 0 {
            let i = candidates.trailing_zeros() as usize;
            candidates &= candidates - 1;
            let r = first + i;
            if !sink.allows(r) {
                continue;
            }
            let d = distance_of(r);
            counts.rescored += 1;
            if sink.threshold().is_none_or(|t| d.total_cmp(&t).is_le()) {
                sink.offer(r, d);
            }
        }
    }
    counts
}

/// The screen's limits under one threshold, for one (query, partition).
///
/// Row `r`'s 1-bit distance is `α + β s` in its plane-0 table sum `s`
/// (negated, see [`RabitQuantizer::query`]), with `β = 2κ‖r‖ / Σ|x_i| ≥ 0`
/// and `α = a + β (Σ(P q) + ⟨2b − 1, P c⟩) / 2`, `a` the distance's
/// constant part (`‖q − c‖² + ‖r‖²` for l2). It can be at most `t` plus
/// its error bound `err` only if `s ≤ (t + err − a) / β − (Σ(P q) +
/// ⟨2b − 1, P c⟩) / 2`. The limit is computed in float32 with a margin of
/// 2⁻¹⁶ of the magnitudes involved — far above the few roundings of the
/// limit and of the distance itself, so that with one bit (no error
/// bound) a row the screen skips could not have entered the heap.
struct ScreenLimits {
    /// `t + margin − (‖q − c‖² | −q·c | 1 − q·c)`.
    top: f32,
    /// `κ ‖q_x‖ ε₀ / √(D' − 1)`, zero for one bit.
    err_scale: f32,
    /// `Σ(P q) / 2` plus the margin in sum units.
    half_qsum: f32,
}

impl ScreenLimits {
    #[allow(clippy::too_many_arguments)]
    fn new(
        t: f32,
        a_query: f32,
        kappa: f32,
        qx: f32,
        qsum: f32,
        spread: Option<f32>,
        d_padded: f32,
        magnitude: f32,
    ) -> ScreenLimits {
        let margin = (t.abs() + a_query.abs() + magnitude * qx.max(1.0)) / 65536.0;
        ScreenLimits {
            top: t + margin - a_query,
            err_scale: spread.map_or(0.0, |s| kappa * qx * s),
            half_qsum: qsum / 2.0 - (qsum.abs() + d_padded * qx) / 65536.0,
        }
    }

    /// Each row's shift `−limit` into `out` (rows `first..` of `terms`);
    /// returns the largest `|shift|` below 1e19 (rows at their centroid
    /// get far shifts, which must not widen the slack of the rest).
    fn shifts(&self, terms: &ScreenTerms, first: usize, out: &mut [f32]) -> f32 {
        let n = out.len();
        let range = first..first + n;
        for ((((o, &ib), &e), &n2), &hc) in out
            .iter_mut()
            .zip(&terms.inv_beta[range.clone()])
            .zip(&terms.err_unit[range.clone()])
            .zip(&terms.norm_sq[range.clone()])
            .zip(&terms.half_c1[range])
        {
            let limit = (self.top + self.err_scale * e - n2) * ib - (self.half_qsum + hc);
            // Not `clamp`: a NaN limit must become a kept row (−1e30),
            // not a NaN shift that no bound is below.
            #[allow(clippy::manual_clamp)]
            {
                *o = (-limit).max(-1e30).min(1e30);
            }
        }
        // In 16 lanes, so that the loop vectorises.
        let mut lanes = [0.0f32; 16];
        for chunk in out.chunks(16) {
            for (l, &shift) in lanes.iter_mut().zip(chunk) {
                let a = shift.abs();
                *l = l.max(if a < 1e19 { a } else { 0.0 });
            }
        }
        let widest = lanes.iter().fold(0.0f32, |a, &b| a.max(b));
        widest
    }
}

#[cfg(test)]
mod tests;
