//! The AVX2 kernels: sums of tables given by nibble halves, and the
//! quantizer's per-row range and levels.

use super::{ENTRIES, LOOKUP_ROWS};
use std::arch::x86_64::*;

/// Least and greatest of a sub-space's 256 entries.
///
/// # Safety
/// The CPU supports AVX2; `row` holds 256 floats.
#[target_feature(enable = "avx2")]
pub unsafe fn row_range(row: &[f32]) -> (f32, f32) {
    assert!(row.len() >= ENTRIES);
    let mut lo = _mm256_set1_ps(f32::INFINITY);
    let mut hi = _mm256_set1_ps(f32::NEG_INFINITY);
    for k in 0..ENTRIES / 8 {
        // SAFETY: in bounds (asserted).
        let v = unsafe { _mm256_loadu_ps(row.as_ptr().add(k * 8)) };
        lo = _mm256_min_ps(lo, v);
        hi = _mm256_max_ps(hi, v);
    }
    let (mut l, mut h) = ([0.0f32; 8], [0.0f32; 8]);
    // SAFETY: 8-float stores.
    unsafe {
        _mm256_storeu_ps(l.as_mut_ptr(), lo);
        _mm256_storeu_ps(h.as_mut_ptr(), hi);
    }
    (
        l.iter().fold(f32::INFINITY, |a, &b| a.min(b)),
        h.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)),
    )
}

/// `out[c] = min((row[c] − lo) · scale, top)` truncated to a byte, as
/// the scalar loop computes it (the values are in `[0, top]`, so the
/// signed conversion and the saturating packs keep them).
///
/// # Safety
/// The CPU supports AVX2; `row` holds 256 floats and `out` 256 bytes.
#[target_feature(enable = "avx2")]
pub unsafe fn row_levels(row: &[f32], lo: f32, scale: f32, top: f32, out: &mut [u8]) {
    assert!(row.len() >= ENTRIES && out.len() >= ENTRIES);
    let (lo, scale, top) = (
        _mm256_set1_ps(lo),
        _mm256_set1_ps(scale),
        _mm256_set1_ps(top),
    );
    // The packs interleave 128-bit lanes; this puts the dwords back
    // in row order.
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for k in 0..ENTRIES / 32 {
        // SAFETY: in bounds (asserted): 32 floats in, 32 bytes out.
        unsafe {
            let level = |j: usize| {
                let v = _mm256_loadu_ps(row.as_ptr().add(k * 32 + j * 8));
                let x = _mm256_min_ps(_mm256_mul_ps(_mm256_sub_ps(v, lo), scale), top);
                _mm256_cvttps_epi32(x)
            };
            let (a, b, c, d) = (level(0), level(1), level(2), level(3));
            let bytes = _mm256_packus_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
            let bytes = _mm256_permutevar8x32_epi32(bytes, order);
            _mm256_storeu_si256(out.as_mut_ptr().add(k * 32) as *mut __m256i, bytes);
        }
    }
}

/// Level sums of one block's 64 rows: per sub-space, each code byte's
/// low nibble picks among the 16 low levels and its high nibble among
/// the 16 high ones (`vpshufb` on both 128-bit lanes), their byte sum
/// (at most 254: each half is at most half the top level) is widened
/// and added into 16-bit lanes.
///
/// # Safety
/// The CPU supports AVX2; `halves` holds `m × 32` bytes and `block`
/// `m × 64`.
#[target_feature(enable = "avx2")]
pub unsafe fn block_sums(halves: &[u8], block: &[u8], m: usize, out: &mut [u16; LOOKUP_ROWS]) {
    assert!(halves.len() >= m * 32 && block.len() >= m * LOOKUP_ROWS);
    let zero = _mm256_setzero_si256();
    let nibble = _mm256_set1_epi8(15);
    // unpacklo/hi interleave within 128-bit lanes: for rows 32h..32h+32
    // `acc[2h]` holds rows +0..8 and +16..24, `acc[2h + 1]` rows +8..16
    // and +24..32.
    let mut acc = [zero; 4];
    let (t, c) = (halves.as_ptr(), block.as_ptr());
    for s in 0..m {
        // SAFETY: in bounds by the caller's lengths.
        unsafe {
            let low = _mm256_broadcastsi128_si256(_mm_loadu_si128(t.add(s * 32) as *const _));
            let high = _mm256_broadcastsi128_si256(_mm_loadu_si128(t.add(s * 32 + 16) as *const _));
            for h in 0..2 {
                let codes = _mm256_loadu_si256(c.add(s * LOOKUP_ROWS + 32 * h) as *const _);
                let lo = _mm256_and_si256(codes, nibble);
                let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(codes), nibble);
                let v =
                    _mm256_add_epi8(_mm256_shuffle_epi8(low, lo), _mm256_shuffle_epi8(high, hi));
                acc[2 * h] = _mm256_add_epi16(acc[2 * h], _mm256_unpacklo_epi8(v, zero));
                acc[2 * h + 1] = _mm256_add_epi16(acc[2 * h + 1], _mm256_unpackhi_epi8(v, zero));
            }
        }
    }
    let mut lanes = [[0u16; 16]; 4];
    for (l, a) in lanes.iter_mut().zip(&acc) {
        // SAFETY: a 32-byte store into 16 × u16.
        unsafe { _mm256_storeu_si256(l.as_mut_ptr() as *mut _, *a) };
    }
    for h in 0..2 {
        let (lo, hi) = (&lanes[2 * h], &lanes[2 * h + 1]);
        for lane in 0..2 {
            for i in 0..8 {
                out[32 * h + 16 * lane + i] = lo[8 * lane + i];
                out[32 * h + 16 * lane + 8 + i] = hi[8 * lane + i];
            }
        }
    }
}
