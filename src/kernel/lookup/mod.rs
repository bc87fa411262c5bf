//! Quantized lookup tables for PQ codes: a cheap lower bound per row.
//!
//! An IVF_PQ distance is a sum of `m` float table entries, one per code
//! byte. Summing them for every row costs `m` scalar loads and adds per row.
//! Here a query's float table is quantized to small integers once —
//! `level = ⌊(entry − min_s) / step⌋`, one `step` for all sub-spaces and a
//! minimum per sub-space — and 64 rows at a time are summed in integers
//! with byte permutes (AVX-512 VBMI: a 256-entry table is four registers,
//! two `vpermi2b` and a blend per sub-space for 64 rows). A table given by
//! nibble halves ([`LookupTable::from_halves`], RaBitQ's bit planes) is
//! also summed as two 16-entry tables per byte with AVX2 byte shuffles
//! (`vpshufb`, 32 rows a register); other tables are summed one load per
//! entry where VBMI is missing.
//! Because every level is rounded *down*,
//! `offset + step · Σ levels ≤ Σ entries` (`offset = Σ_s min_s`) holds in
//! exact arithmetic: the integer sum gives a lower bound of the float
//! distance. [`LookupTable::slack`] bounds the float rounding on both sides,
//! so a row whose bound minus the slack is above a heap's threshold cannot
//! enter it, and only the other rows are scored with the float table — the
//! answers are those of the float sum, bit for bit, whatever the screen
//! skipped.
//!
//! Codes are kept for this in [`CodeColumns`]: blocks of 64 rows,
//! sub-space-major, so one 64-byte load holds sub-space `s` of 64 rows.

use super::Kernel;
use std::sync::OnceLock;

/// Rows per block of [`CodeColumns`] (one AVX-512 register of bytes).
pub const LOOKUP_ROWS: usize = 64;

/// Most sub-spaces a table is quantized for (64 levels each); wider codes
/// are scored without the screen.
pub const MAX_SCREENED_M: usize = 1024;

/// Entries per sub-space table (8-bit codes).
const ENTRIES: usize = 256;

/// Unit roundoff of float32.
const U: f32 = f32::EPSILON / 2.0;

/// PQ codes (`m` bytes per row) in blocks of [`LOOKUP_ROWS`] rows; within a
/// block, byte `s · 64 + i` is sub-space `s` of row `i`. The last block is
/// padded with zero codes.
#[derive(Debug, Clone)]
pub struct CodeColumns {
    m: usize,
    rows: usize,
    data: Vec<u8>,
}

impl CodeColumns {
    /// Transposes row-major codes (`m` bytes per row); `None` when the
    /// length is not a multiple of `m` or `m` is zero.
    pub fn from_rows(m: usize, codes: &[u8]) -> Option<CodeColumns> {
        if m == 0 || !codes.len().is_multiple_of(m) {
            return None;
        }
        let rows = codes.len() / m;
        let blocks = rows.div_ceil(LOOKUP_ROWS);
        let mut data = vec![0u8; blocks * m * LOOKUP_ROWS];
        for (r, code) in codes.chunks_exact(m).enumerate() {
            let block = &mut data[(r / LOOKUP_ROWS) * m * LOOKUP_ROWS..];
            for (s, &c) in code.iter().enumerate() {
                block[s * LOOKUP_ROWS + r % LOOKUP_ROWS] = c;
            }
        }
        Some(CodeColumns { m, rows, data })
    }

    /// Rows held.
    pub fn len(&self) -> usize {
        self.rows
    }

    /// True when no rows are held.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Blocks of [`LOOKUP_ROWS`] rows.
    pub fn block_count(&self) -> usize {
        self.rows.div_ceil(LOOKUP_ROWS)
    }

    /// Block `b`: `m × 64` bytes, sub-space-major.
    pub fn block(&self, b: usize) -> &[u8] {
        let len = self.m * LOOKUP_ROWS;
        &self.data[b * len..(b + 1) * len]
    }

    /// Row `r`'s code, row-major (for tests and rebuilding).
    pub fn row(&self, r: usize) -> Vec<u8> {
        let block = self.block(r / LOOKUP_ROWS);
        (0..self.m)
            .map(|s| block[s * LOOKUP_ROWS + r % LOOKUP_ROWS])
            .collect()
    }

    /// Bytes held in memory.
    pub fn size_bytes(&self) -> usize {
        self.data.len()
    }
}

/// A query's float table (`m × 256`) quantized to integer levels, with
/// what turns a level sum back into a lower bound of the float sum.
#[derive(Debug, Clone)]
pub struct LookupTable {
    m: usize,
    /// `m × 256` levels, each at most the top level (255; fewer when
    /// `m > 257`).
    levels: Vec<u8>,
    /// `Σ_s min_s`.
    offset: f32,
    /// Float value of one level.
    step: f32,
    /// `Σ_s max_c |entry|`, for the rounding slack.
    magnitude: f32,
    /// Largest level sum of a row, `m · top level`.
    level_sum_max: f32,
    /// For a table built [`from_halves`](Self::from_halves): per sub-space
    /// the 16 low-nibble levels then the 16 high-nibble ones (`m × 32`),
    /// whose sums are `levels`; empty otherwise.
    halves: Vec<u8>,
}

impl LookupTable {
    /// Quantizes `table` (`m × 256` float entries). Levels go up to 255,
    /// fewer when `m > 257` so that a row's sum fits in u16; `None` when `m`
    /// is zero or above [`MAX_SCREENED_M`] (too few levels left to screen
    /// with), or an entry or a derived sum is not finite.
    pub fn quantize(table: &[f32], m: usize) -> Option<LookupTable> {
        if m == 0 || m > MAX_SCREENED_M || table.len() < m * ENTRIES {
            return None;
        }
        // The bound's argument needs finite values; a table that is not
        // (only a damaged model could give one), or whose sums would
        // overflow, is scored without a screen.
        // (As the largest magnitude's bits: an integer max, vectorised,
        // instead of a test per entry with an early exit.)
        let widest_bits = table[..m * ENTRIES]
            .iter()
            .fold(0u32, |a, v| a.max(v.to_bits() & 0x7fff_ffff));
        if widest_bits >= f32::INFINITY.to_bits() {
            return None;
        }
        quantize_rows(table, m, true).finite()
    }

    /// The table, if every derived sum is finite (else no screen).
    fn finite(self) -> Option<LookupTable> {
        [self.offset, self.step, self.magnitude, self.level_sum_max]
            .iter()
            .all(|v| v.is_finite())
            .then_some(self)
    }

    /// Quantizes a table given by halves: entry `(s, v)` is
    /// `low[16 s + (v & 15)] + high[16 s + (v >> 4)]` (`m × 16` each).
    /// Each half is quantized on its own, down, to at most half the top
    /// level, and an entry's level is the sum of its halves' levels: with
    /// `min_s` the sum of the halves' minima, `min_s + step · level` stays
    /// at or below the entry, so the bound and [`slack`](Self::slack) hold
    /// as for [`quantize`](Self::quantize) (the halves' sums round like the
    /// entries themselves). 32 values a sub-space to quantize instead of
    /// 256; the levels are coarser (half the range each). `None` as for
    /// `quantize`.
    pub fn from_halves(low: &[f32], high: &[f32], m: usize) -> Option<LookupTable> {
        const HALF: usize = 16;
        if m == 0 || m > MAX_SCREENED_M || low.len() < m * HALF || high.len() < m * HALF {
            return None;
        }
        let (low, high) = (&low[..m * HALF], &high[..m * HALF]);
        if !low.iter().chain(high).all(|v| v.is_finite()) {
            return None;
        }
        let half_top = ((u16::MAX as usize / m).min(255) / 2) as f32;
        let range = |t: &[f32]| {
            t.iter()
                .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| {
                    (lo.min(v), hi.max(v))
                })
        };
        let (mut offset, mut widest, mut magnitude) = (0.0f32, 0.0f32, 0.0f32);
        let mut mins = Vec::with_capacity(2 * m);
        for (l, h) in low.chunks_exact(HALF).zip(high.chunks_exact(HALF)) {
            let ((l_lo, l_hi), (h_lo, h_hi)) = (range(l), range(h));
            mins.push((l_lo, h_lo));
            offset += l_lo + h_lo;
            widest = widest.max(l_hi - l_lo).max(h_hi - h_lo);
            magnitude += (l_lo + h_lo).abs().max((l_hi + h_hi).abs());
        }
        let step = (widest / half_top).max(1e-30);
        // As in `quantize_rows`: shrunk by 4u so truncation never rounds a
        // level up past the exact quotient.
        let scale = (1.0 / step) * (1.0 - 4.0 * U);
        let mut levels = vec![0u8; m * ENTRIES];
        let mut halves = vec![0u8; m * 2 * HALF];
        for (s, ((&(l_lo, h_lo), out), pair)) in mins
            .iter()
            .zip(levels.chunks_exact_mut(ENTRIES))
            .zip(halves.chunks_exact_mut(2 * HALF))
            .enumerate()
        {
            let (lo_levels, hi_levels) = pair.split_at_mut(HALF);
            for (k, (lv, hv)) in lo_levels.iter_mut().zip(hi_levels.iter_mut()).enumerate() {
                *lv = ((low[s * HALF + k] - l_lo) * scale).min(half_top) as u8;
                *hv = ((high[s * HALF + k] - h_lo) * scale).min(half_top) as u8;
            }
            for (row, &hv) in out.chunks_exact_mut(HALF).zip(&*hi_levels) {
                for (o, &lv) in row.iter_mut().zip(&*lo_levels) {
                    *o = lv + hv;
                }
            }
        }
        LookupTable {
            m,
            levels,
            offset,
            step,
            magnitude,
            level_sum_max: step * (2.0 * half_top) * m as f32,
            halves,
        }
        .finite()
    }

    /// `Σ_s min_s`: the bound of a row whose levels are all zero.
    pub fn offset(&self) -> f32 {
        self.offset
    }

    /// Float value of one level.
    pub fn step(&self) -> f32 {
        self.step
    }

    /// How far the float computations may stray from exact arithmetic, for
    /// rows whose distance is `base + Σ_s entry` with `|base| ≤ base_max`:
    /// the float sum of `m + 2` terms (at most `(m + 1) u` times the sum of
    /// magnitudes) plus the few roundings of the bound
    /// `(base + offset) + step · levels`. Doubled, to spare the proof its
    /// second-order terms.
    pub fn slack(&self, base_max: f32) -> f32 {
        let magnitude = base_max + self.magnitude + self.offset.abs() + self.level_sum_max;
        2.0 * (self.m as f32 + 8.0) * U * magnitude
    }
}

/// The body of [`LookupTable::quantize`]; `wide` uses AVX-512 (16
/// entries at a time) or AVX2 (8) for the per-row ranges and levels where
/// the CPU has it — the same arithmetic, the same levels.
fn quantize_rows(table: &[f32], m: usize, wide: bool) -> LookupTable {
    enum Path {
        Avx512,
        Avx2,
        Scalar,
    }
    let path = match () {
        () if wide && use_vbmi() => Path::Avx512,
        () if wide && use_avx2() => Path::Avx2,
        () => Path::Scalar,
    };
    let top = (u16::MAX as usize / m).min(255) as f32;
    let mut mins = Vec::with_capacity(m);
    let (mut offset, mut widest, mut magnitude) = (0.0f32, 0.0f32, 0.0f32);
    for row in table.chunks_exact(ENTRIES).take(m) {
        let (lo, hi) = match path {
            // SAFETY: AVX-512 F and BW are present (VBMI check); the row
            // holds 256 entries.
            #[cfg(target_arch = "x86_64")]
            Path::Avx512 => unsafe { vbmi::row_range(row) },
            // SAFETY: AVX2 is present (checked); the row holds 256 entries.
            #[cfg(target_arch = "x86_64")]
            Path::Avx2 => unsafe { avx2::row_range(row) },
            _ => row
                .iter()
                .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| {
                    (lo.min(v), hi.max(v))
                }),
        };
        mins.push(lo);
        offset += lo;
        widest = widest.max(hi - lo);
        magnitude += lo.abs().max(hi.abs());
    }
    // Positive and normal, so that dividing by it stays in range.
    let step = (widest / top).max(1e-30);
    // (v − min) and the products are each within a factor (1 ± u) of the
    // exact values; shrinking by 4u keeps the result at or below the exact
    // quotient `(v − min) / step`, so truncating (v − min ≥ 0: a floor)
    // never rounds a level up past it.
    let scale = (1.0 / step) * (1.0 - 4.0 * U);
    let mut levels = vec![0u8; m * ENTRIES];
    for ((row, out), &lo) in table
        .chunks_exact(ENTRIES)
        .zip(levels.chunks_exact_mut(ENTRIES))
        .zip(&mins)
    {
        match path {
            // SAFETY: as above; `out` holds 256 bytes.
            #[cfg(target_arch = "x86_64")]
            Path::Avx512 => unsafe { vbmi::row_levels(row, lo, scale, top, out) },
            // SAFETY: as above; `out` holds 256 bytes.
            #[cfg(target_arch = "x86_64")]
            Path::Avx2 => unsafe { avx2::row_levels(row, lo, scale, top, out) },
            _ => {
                for (v, l) in row.iter().zip(out) {
                    *l = ((v - lo) * scale).min(top) as u8;
                }
            }
        }
    }
    LookupTable {
        m,
        levels,
        offset,
        step,
        magnitude,
        level_sum_max: step * top * m as f32,
        halves: Vec::new(),
    }
}

/// Uses the VBMI screen: AVX-512 chosen by [`Kernel::detect`] and VBMI and
/// BW present.
fn use_vbmi() -> bool {
    static VBMI: OnceLock<bool> = OnceLock::new();
    *VBMI.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            Kernel::detect() == Kernel::Avx512
                && std::arch::is_x86_feature_detected!("avx512vbmi")
                && std::arch::is_x86_feature_detected!("avx512bw")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// Uses the AVX2 nibble screen: AVX2 or AVX-512 chosen by
/// [`Kernel::detect`] (so `SHOAL_KERNEL=scalar` turns it off).
fn use_avx2() -> bool {
    static AVX2: OnceLock<bool> = OnceLock::new();
    *AVX2.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            Kernel::detect() != Kernel::Scalar && std::arch::is_x86_feature_detected!("avx2")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    })
}

/// How level sums are computed; the sums are the same either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LookupKernel {
    /// AVX-512 VBMI byte permutes, 64 rows per instruction.
    Vbmi,
    /// AVX2 byte shuffles for tables given by nibble halves, 32 rows per
    /// instruction; other tables as [`Scalar`](Self::Scalar).
    Avx2,
    /// One table load per (row, sub-space).
    Scalar,
}

impl LookupKernel {
    /// The best this CPU supports (`SHOAL_KERNEL=avx2` leaves out VBMI,
    /// `scalar` both).
    pub fn detect() -> LookupKernel {
        if use_vbmi() {
            LookupKernel::Vbmi
        } else if use_avx2() {
            LookupKernel::Avx2
        } else {
            LookupKernel::Scalar
        }
    }

    /// Every lookup kernel this CPU supports, best first (for tests).
    pub fn available() -> Vec<LookupKernel> {
        let mut out = Vec::new();
        if use_vbmi() {
            out.push(LookupKernel::Vbmi);
        }
        if use_avx2() {
            out.push(LookupKernel::Avx2);
        }
        out.push(LookupKernel::Scalar);
        out
    }
}

/// Level sums of block `b`'s 64 rows (padding rows included) into `out`.
pub fn block_sums(
    kernel: LookupKernel,
    table: &LookupTable,
    codes: &CodeColumns,
    b: usize,
    out: &mut [u16; LOOKUP_ROWS],
) {
    assert_eq!(table.m, codes.m, "table and codes disagree on m");
    let block = codes.block(b);
    match kernel {
        #[cfg(target_arch = "x86_64")]
        LookupKernel::Vbmi if use_vbmi() => {
            // SAFETY: VBMI and BW are present (checked); `block` holds
            // m × 64 bytes and the levels m × 256 (asserted above).
            unsafe { vbmi::block_sums(&table.levels, block, table.m, out) }
        }
        #[cfg(target_arch = "x86_64")]
        LookupKernel::Avx2 if use_avx2() && !table.halves.is_empty() => {
            // SAFETY: AVX2 is present (checked); `block` holds m × 64
            // bytes and the halves m × 32 (built so by `from_halves`).
            unsafe { avx2::block_sums(&table.halves, block, table.m, out) }
        }
        _ => scalar_block_sums(&table.levels, block, table.m, out),
    }
}

/// Rows `i < row_base.len()` of a block whose lower bound
/// `((constant + row_base[i]) + offset) + step · sums[i]` is not above
/// `limit`, as bit `i` of the result: the rows the screen cannot rule out.
pub fn block_candidates(
    kernel: LookupKernel,
    table: &LookupTable,
    sums: &[u16; LOOKUP_ROWS],
    constant: f32,
    row_base: &[f32],
    limit: f32,
) -> u64 {
    let rows = row_base.len().min(LOOKUP_ROWS);
    match kernel {
        #[cfg(target_arch = "x86_64")]
        LookupKernel::Vbmi if use_vbmi() => {
            // SAFETY: AVX-512F is present (part of the VBMI check); loads
            // of `row_base` are masked to its first `rows` entries.
            unsafe {
                vbmi::block_candidates(
                    sums,
                    &row_base[..rows],
                    constant,
                    table.offset,
                    table.step,
                    limit,
                )
            }
        }
        _ => {
            let mut mask = 0u64;
            for (i, (&rb, &sum)) in row_base.iter().zip(sums).take(rows).enumerate() {
                let bound = ((constant + rb) + table.offset) + table.step * sum as f32;
                if bound <= limit {
                    mask |= 1 << i;
                }
            }
            mask
        }
    }
}

fn scalar_block_sums(levels: &[u8], block: &[u8], m: usize, out: &mut [u16; LOOKUP_ROWS]) {
    out.fill(0);
    for s in 0..m {
        let t = &levels[s * ENTRIES..(s + 1) * ENTRIES];
        let codes = &block[s * LOOKUP_ROWS..(s + 1) * LOOKUP_ROWS];
        for (o, &c) in out.iter_mut().zip(codes) {
            *o += t[c as usize] as u16;
        }
    }
}

/// The AVX2 kernels: sums of tables given by nibble halves, and the
/// quantizer's per-row range and levels.
#[cfg(target_arch = "x86_64")]
mod avx2;

/// The AVX-512 VBMI kernels.
#[cfg(target_arch = "x86_64")]
mod vbmi;

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: &mut u64) -> u64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *seed >> 33
    }

    #[test]
    fn columns_round_trip_rows() {
        let mut seed = 7;
        for (m, rows) in [(1, 1), (3, 63), (8, 64), (5, 65), (48, 200)] {
            let codes: Vec<u8> = (0..m * rows).map(|_| lcg(&mut seed) as u8).collect();
            let cols = CodeColumns::from_rows(m, &codes).unwrap();
            assert_eq!(cols.len(), rows);
            for r in 0..rows {
                assert_eq!(cols.row(r), codes[r * m..(r + 1) * m]);
            }
        }
        assert!(CodeColumns::from_rows(3, &[0; 4]).is_none());
        assert!(CodeColumns::from_rows(0, &[]).is_none());
    }

    /// Every kernel gives the same sums, equal to summing levels row by
    /// row, for full tables and tables given by nibble halves.
    #[test]
    fn kernels_agree_with_a_row_by_row_sum() {
        let mut seed = 11;
        for (m, rows) in [(1, 10), (4, 64), (16, 130), (48, 100), (300, 70), (1024, 3)] {
            let codes: Vec<u8> = (0..m * rows).map(|_| lcg(&mut seed) as u8).collect();
            let table: Vec<f32> = (0..m * ENTRIES)
                .map(|_| (lcg(&mut seed) % 10_000) as f32 / 37.0 - 100.0)
                .collect();
            let mut half = || -> Vec<f32> {
                (0..m * 16)
                    .map(|_| (lcg(&mut seed) % 10_000) as f32 / 91.0 - 50.0)
                    .collect()
            };
            let (low, high) = (half(), half());
            let full = LookupTable::quantize(&table, m).unwrap();
            let halved = LookupTable::from_halves(&low, &high, m).unwrap();
            assert!(full.halves.is_empty());
            // The halves' levels add up to the table's.
            for (s, pair) in halved.halves.chunks_exact(32).enumerate() {
                for c in 0..ENTRIES {
                    let sum = pair[c & 15] + pair[16 + (c >> 4)];
                    assert_eq!(halved.levels[s * ENTRIES + c], sum, "m {m} s {s} c {c}");
                }
            }
            let cols = CodeColumns::from_rows(m, &codes).unwrap();
            for (lut, kernel) in [&full, &halved]
                .into_iter()
                .flat_map(|l| LookupKernel::available().into_iter().map(move |k| (l, k)))
            {
                let mut sums = [0u16; LOOKUP_ROWS];
                for b in 0..cols.block_count() {
                    block_sums(kernel, lut, &cols, b, &mut sums);
                    for (i, &got) in sums.iter().enumerate() {
                        let r = b * LOOKUP_ROWS + i;
                        let want: u32 = if r < rows {
                            codes[r * m..(r + 1) * m]
                                .iter()
                                .enumerate()
                                .map(|(s, &c)| lut.levels[s * ENTRIES + c as usize] as u32)
                                .sum()
                        } else {
                            (0..m).map(|s| lut.levels[s * ENTRIES] as u32).sum()
                        };
                        assert_eq!(got as u32, want, "{kernel:?} m {m} row {r}");
                    }
                }
            }
        }
    }

    /// The AVX-512 or AVX2 quantizer gives the scalar one's levels, and both
    /// candidate kernels the scalar bound's rows, for partial blocks too.
    #[test]
    fn wide_and_scalar_quantizers_and_bounds_agree() {
        let mut seed = 3;
        for m in [1usize, 5, 48, 300] {
            let table: Vec<f32> = (0..m * ENTRIES)
                .map(|_| (lcg(&mut seed) % 100_000) as f32 / 77.0 - 600.0)
                .collect();
            let narrow = quantize_rows(&table, m, false);
            if use_vbmi() || use_avx2() {
                let wide = quantize_rows(&table, m, true);
                assert_eq!(wide.levels, narrow.levels, "m {m}");
                assert_eq!(wide.offset.to_bits(), narrow.offset.to_bits());
                assert_eq!(wide.step.to_bits(), narrow.step.to_bits());
            }
            let mut sums = [0u16; LOOKUP_ROWS];
            for s in sums.iter_mut() {
                *s = (lcg(&mut seed) % (m as u64 * 255 + 1)) as u16;
            }
            let bases: Vec<f32> = (0..LOOKUP_ROWS)
                .map(|_| (lcg(&mut seed) % 1000) as f32 / 9.0)
                .collect();
            for rows in [1, 15, 16, 17, 40, 64] {
                let limit = narrow.offset + narrow.step * (m as f32 * 128.0) + 50.0;
                let want = block_candidates(
                    LookupKernel::Scalar,
                    &narrow,
                    &sums,
                    -3.0,
                    &bases[..rows],
                    limit,
                );
                if rows == LOOKUP_ROWS {
                    // The limit splits the block: both outcomes are tested.
                    assert!(want != 0 && want != u64::MAX, "m {m}: {want:x}");
                }
                assert_eq!(want.checked_shr(rows as u32).unwrap_or(0), 0);
                for kernel in LookupKernel::available() {
                    let got = block_candidates(kernel, &narrow, &sums, -3.0, &bases[..rows], limit);
                    assert_eq!(got, want, "{kernel:?} m {m} rows {rows}");
                }
            }
        }
    }

    /// `offset + step · Σ levels` never exceeds the exact sum of entries,
    /// and the gap is at most `m` steps.
    #[test]
    fn level_sums_bound_the_float_sum_from_below() {
        let mut seed = 5;
        for m in [1usize, 7, 32, 48] {
            let table: Vec<f32> = (0..m * ENTRIES)
                .map(|_| {
                    let x = (lcg(&mut seed) % 1_000_000) as f32 / 1e3 - 500.0;
                    if lcg(&mut seed).is_multiple_of(5) {
                        x * 1e-3
                    } else {
                        x
                    }
                })
                .collect();
            let lut = LookupTable::quantize(&table, m).unwrap();
            for _ in 0..2_000 {
                let code: Vec<usize> = (0..m).map(|_| (lcg(&mut seed) % 256) as usize).collect();
                let exact: f64 = code
                    .iter()
                    .enumerate()
                    .map(|(s, &c)| table[s * ENTRIES + c] as f64)
                    .sum();
                let levels: u64 = code
                    .iter()
                    .enumerate()
                    .map(|(s, &c)| lut.levels[s * ENTRIES + c] as u64)
                    .sum();
                let mins: f64 = (0..m)
                    .map(|s| {
                        table[s * ENTRIES..(s + 1) * ENTRIES]
                            .iter()
                            .fold(f64::INFINITY, |a, &v| a.min(v as f64))
                    })
                    .sum();
                let bound = mins + lut.step as f64 * levels as f64;
                assert!(bound <= exact, "m {m}: bound {bound} above {exact}");
                assert!(exact - bound <= m as f64 * lut.step as f64 * 1.001 + 1e-3);
            }
        }
    }

    /// Levels built from halves bound their entries (the float sums of
    /// the halves) from below, by no more than two steps a sub-space, and
    /// the float bound the screen computes stays within the slack of the
    /// float sum.
    #[test]
    fn level_sums_from_halves_bound_the_float_sum_from_below() {
        let mut seed = 9;
        for m in [1usize, 6, 48, 96] {
            let mut half = || -> Vec<f32> {
                (0..m * 16)
                    .map(|i| {
                        let x = (lcg(&mut seed) % 1_000_000) as f32 / 1e4 - 50.0;
                        if i % 16 == 0 {
                            0.0
                        } else {
                            x
                        }
                    })
                    .collect()
            };
            let (low, high) = (half(), half());
            let entry = |s: usize, c: usize| low[s * 16 + (c & 15)] + high[s * 16 + (c >> 4)];
            let lut = LookupTable::from_halves(&low, &high, m).unwrap();
            let mins: f64 = (0..m)
                .map(|s| (0..ENTRIES).fold(f64::INFINITY, |a, c| a.min(entry(s, c) as f64)))
                .sum();
            for _ in 0..2_000 {
                let code: Vec<usize> = (0..m).map(|_| (lcg(&mut seed) % 256) as usize).collect();
                let exact: f64 = code
                    .iter()
                    .enumerate()
                    .map(|(s, &c)| entry(s, c) as f64)
                    .sum();
                let float_sum: f32 = code.iter().enumerate().map(|(s, &c)| entry(s, c)).sum();
                let levels: u64 = code
                    .iter()
                    .enumerate()
                    .map(|(s, &c)| lut.levels[s * ENTRIES + c] as u64)
                    .sum();
                let bound = mins + lut.step as f64 * levels as f64;
                assert!(bound <= exact + 1e-3, "m {m}: bound {bound} above {exact}");
                assert!(exact - bound <= 2.0 * m as f64 * lut.step as f64 * 1.001 + 1e-3);
                let float_bound = lut.offset + lut.step * levels as f32;
                assert!(
                    float_bound <= float_sum + lut.slack(0.0),
                    "m {m}: float bound {float_bound} above {float_sum} + slack"
                );
            }
        }
    }

    /// A table holding a non-finite entry gets no screen (its rows are
    /// all scored), nor does an empty or too wide one.
    #[test]
    fn tables_that_cannot_be_bounded_get_no_screen() {
        let mut table = vec![1.0f32; 3 * ENTRIES];
        table[300] = f32::INFINITY;
        assert!(LookupTable::quantize(&table, 3).is_none());
        table[300] = f32::NAN;
        assert!(LookupTable::quantize(&table, 3).is_none());
        assert!(LookupTable::quantize(&[], 0).is_none());
        let wide = vec![0.5f32; (MAX_SCREENED_M + 1) * ENTRIES];
        assert!(LookupTable::quantize(&wide, MAX_SCREENED_M + 1).is_none());
    }

    /// A table whose sub-spaces are constant quantizes to level zero.
    #[test]
    fn flat_tables_quantize_to_zero() {
        let table = vec![3.5f32; 2 * ENTRIES];
        let lut = LookupTable::quantize(&table, 2).unwrap();
        assert!(lut.levels.iter().all(|&l| l == 0));
        assert_eq!(lut.offset(), 7.0);
        assert!(lut.step() > 0.0);
    }
}
