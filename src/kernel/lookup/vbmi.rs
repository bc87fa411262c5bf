//! The AVX-512 VBMI kernels: 64 rows a step, a 256-entry table as four
//! registers, byte permutes and a blend per sub-space.

use super::{ENTRIES, LOOKUP_ROWS};
use std::arch::x86_64::*;

/// Least and greatest of a sub-space's 256 entries.
///
/// # Safety
/// The CPU supports AVX-512F; `row` holds 256 floats.
#[target_feature(enable = "avx512f")]
pub unsafe fn row_range(row: &[f32]) -> (f32, f32) {
    debug_assert!(row.len() >= ENTRIES);
    let mut lo = _mm512_set1_ps(f32::INFINITY);
    let mut hi = _mm512_set1_ps(f32::NEG_INFINITY);
    for k in 0..ENTRIES / 16 {
        // SAFETY: in bounds (caller).
        let v = unsafe { _mm512_loadu_ps(row.as_ptr().add(k * 16)) };
        lo = _mm512_min_ps(lo, v);
        hi = _mm512_max_ps(hi, v);
    }
    (_mm512_reduce_min_ps(lo), _mm512_reduce_max_ps(hi))
}

/// `out[c] = min((row[c] − lo) · scale, top)` truncated to a byte, as
/// the scalar loop computes it.
///
/// # Safety
/// The CPU supports AVX-512F; `row` holds 256 floats and `out` 256
/// bytes.
#[target_feature(enable = "avx512f")]
pub unsafe fn row_levels(row: &[f32], lo: f32, scale: f32, top: f32, out: &mut [u8]) {
    debug_assert!(row.len() >= ENTRIES && out.len() >= ENTRIES);
    let (lo, scale, top) = (
        _mm512_set1_ps(lo),
        _mm512_set1_ps(scale),
        _mm512_set1_ps(top),
    );
    for k in 0..ENTRIES / 16 {
        // SAFETY: in bounds (caller).
        unsafe {
            let v = _mm512_loadu_ps(row.as_ptr().add(k * 16));
            let x = _mm512_min_ps(_mm512_mul_ps(_mm512_sub_ps(v, lo), scale), top);
            let bytes = _mm512_cvtepi32_epi8(_mm512_cvttps_epu32(x));
            _mm_storeu_si128(out.as_mut_ptr().add(k * 16) as *mut __m128i, bytes);
        }
    }
}

/// [`super::block_candidates`] 16 rows at a time: the same adds and
/// multiply, each rounded alone.
///
/// # Safety
/// The CPU supports AVX-512F; `row_base` holds at most 64 entries.
#[target_feature(enable = "avx512f")]
pub unsafe fn block_candidates(
    sums: &[u16; LOOKUP_ROWS],
    row_base: &[f32],
    constant: f32,
    offset: f32,
    step: f32,
    limit: f32,
) -> u64 {
    let rows = row_base.len();
    debug_assert!(rows <= LOOKUP_ROWS);
    let (constant, offset) = (_mm512_set1_ps(constant), _mm512_set1_ps(offset));
    let (step, limit) = (_mm512_set1_ps(step), _mm512_set1_ps(limit));
    let mut mask = 0u64;
    for k in 0..rows.div_ceil(16) {
        let valid: __mmask16 = if rows >= (k + 1) * 16 {
            0xffff
        } else {
            (1u16 << (rows - k * 16)) - 1
        };
        // SAFETY: the load touches only the `valid` entries of
        // `row_base`; `sums` holds 64 entries.
        unsafe {
            let rb = _mm512_maskz_loadu_ps(valid, row_base.as_ptr().add(k * 16));
            let s = _mm512_cvtepi32_ps(_mm512_cvtepu16_epi32(_mm256_loadu_si256(
                sums.as_ptr().add(k * 16) as *const __m256i,
            )));
            let bound = _mm512_add_ps(
                _mm512_add_ps(_mm512_add_ps(constant, rb), offset),
                _mm512_mul_ps(step, s),
            );
            let keep = _mm512_mask_cmp_ps_mask::<_CMP_LE_OQ>(valid, bound, limit);
            mask |= (keep as u64) << (k * 16);
        }
    }
    mask
}

/// # Safety
/// The CPU supports AVX-512 BW and VBMI; `levels` holds `m × 256` bytes
/// and `block` `m × 64`.
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
pub unsafe fn block_sums(levels: &[u8], block: &[u8], m: usize, out: &mut [u16; LOOKUP_ROWS]) {
    debug_assert!(levels.len() >= m * ENTRIES && block.len() >= m * LOOKUP_ROWS);
    let zero = _mm512_setzero_si512();
    // unpacklo/hi interleave within 128-bit lanes: `lo` holds rows
    // 16j..16j+8 of each lane j, `hi` rows 16j+8..16j+16.
    let mut lo = zero;
    let mut hi = zero;
    let t = levels.as_ptr();
    let c = block.as_ptr();
    for s in 0..m {
        // SAFETY: in bounds by the caller's lengths.
        unsafe {
            let idx = _mm512_loadu_si512(c.add(s * LOOKUP_ROWS) as *const _);
            let base = t.add(s * ENTRIES);
            let t0 = _mm512_loadu_si512(base as *const _);
            let t1 = _mm512_loadu_si512(base.add(64) as *const _);
            let t2 = _mm512_loadu_si512(base.add(128) as *const _);
            let t3 = _mm512_loadu_si512(base.add(192) as *const _);
            // Bits 0..6 pick among 128 entries; bit 7 picks the half.
            let low = _mm512_permutex2var_epi8(t0, idx, t1);
            let high = _mm512_permutex2var_epi8(t2, idx, t3);
            let v = _mm512_mask_blend_epi8(_mm512_movepi8_mask(idx), low, high);
            lo = _mm512_add_epi16(lo, _mm512_unpacklo_epi8(v, zero));
            hi = _mm512_add_epi16(hi, _mm512_unpackhi_epi8(v, zero));
        }
    }
    let mut l = [0u16; 32];
    let mut h = [0u16; 32];
    // SAFETY: 64-byte stores into 32 × u16 arrays.
    unsafe {
        _mm512_storeu_si512(l.as_mut_ptr() as *mut _, lo);
        _mm512_storeu_si512(h.as_mut_ptr() as *mut _, hi);
    }
    for lane in 0..4 {
        for i in 0..8 {
            out[lane * 16 + i] = l[lane * 8 + i];
            out[lane * 16 + 8 + i] = h[lane * 8 + i];
        }
    }
}
