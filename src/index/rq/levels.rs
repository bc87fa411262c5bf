//! A RaBitQ row's levels above one bit: packed two a byte up to four bits
//! (a byte each above), and their dot product with a rotated query in a
//! fixed order, the same bits on every kernel.

use crate::kernel::Kernel;

/// Bytes per row of packed levels: none for one bit, two levels a byte up
/// to four bits, a byte each above.
pub(super) fn level_bytes(bits: usize, padded: usize) -> usize {
    match bits {
        1 => 0,
        2..=4 => padded / 2,
        _ => padded,
    }
}

/// Appends one row's levels `u` (`D'` of them) packed for [`levels_dot`]:
/// up to four bits, per 32 dimensions 16 bytes, byte `k` holding level `k`
/// in its low nibble and level `k + 16` in its high one; above, one byte
/// each in order.
pub(super) fn pack_levels(bits: usize, u: &[u8], out: &mut Vec<u8>) {
    if bits > 4 {
        out.extend_from_slice(u);
        return;
    }
    for chunk in u.chunks_exact(32) {
        out.extend((0..16).map(|k| chunk[k] | (chunk[k + 16] << 4)));
    }
}

/// Level `i` of a row packed by [`pack_levels`].
#[cfg(test)]
pub(super) fn level_of(row: &[u8], nibbles: bool, i: usize) -> u8 {
    if !nibbles {
        return row[i];
    }
    let b = row[(i / 32) * 16 + i % 16];
    if i % 32 < 16 {
        b & 15
    } else {
        b >> 4
    }
}

/// `Σ_i u_i z_i` over a row's packed levels: 16 lanes, lane `j` taking
/// dimensions `32c + j` then `32c + 16 + j` for each chunk `c` by fused
/// multiply-adds, the lanes added in a fixed tree — the same bits on the
/// AVX-512 path and the scalar one (levels are exact in f32, an FMA is
/// correctly rounded on both).
#[inline]
pub fn levels_dot(kernel: Kernel, row: &[u8], nibbles: bool, z: &[f32]) -> f32 {
    // The SIMD path reads whole chunks: hold the sizes to that here.
    assert!(
        z.len().is_multiple_of(32) && row.len() >= z.len() / if nibbles { 2 } else { 1 },
        "levels_dot: {} level bytes for {} dimensions",
        row.len(),
        z.len()
    );
    #[cfg(target_arch = "x86_64")]
    if kernel == Kernel::Avx512 {
        // SAFETY: the AVX-512 kernel is only chosen where AVX-512F is; the
        // row holds the levels of `z.len()` dimensions (a multiple of 32).
        return unsafe { levels_dot_avx512(row, nibbles, z) };
    }
    let _ = kernel;
    levels_dot_fma(row, nibbles, z)
}

/// The scalar lanes, with hardware FMA where the CPU has it (the same
/// result either way; `mul_add` is exact without it, only slower).
fn levels_dot_fma(row: &[u8], nibbles: bool, z: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        static AVX2: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let fma = crate::kernel::has_fma();
        let avx2 = *AVX2.get_or_init(|| std::arch::is_x86_feature_detected!("avx2"));
        if fma && avx2 {
            // SAFETY: the CPU supports FMA and AVX2 (checked above).
            return unsafe { levels_dot_avx2(row, nibbles, z) };
        }
        if fma {
            // SAFETY: the CPU supports FMA (checked above).
            return unsafe { levels_dot_fma_hw(row, nibbles, z) };
        }
    }
    levels_dot_lanes(row, nibbles, z)
}

/// [`levels_dot`] on AVX2: the 16 lanes as two registers of 8, the same
/// FMAs in the same order per lane, so the same bits.
///
/// # Safety
/// The CPU supports AVX2 and FMA; `row` holds the packed levels of
/// `z.len()` dimensions, a multiple of 32.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn levels_dot_avx2(row: &[u8], nibbles: bool, z: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let chunks = z.len() / 32;
    debug_assert!(row.len() >= chunks * if nibbles { 16 } else { 32 });
    let (r, zp) = (row.as_ptr(), z.as_ptr());
    let widen = |p: *const u8| {
        // SAFETY: 8 bytes at `p`, in bounds (caller).
        unsafe { _mm256_cvtepu8_epi32(_mm_loadl_epi64(p as *const __m128i)) }
    };
    let low = _mm256_set1_epi32(15);
    let (mut acc0, mut acc1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    for c in 0..chunks {
        // Lanes 0..8 and 8..16: the level of dimension 32c + j, then of
        // 32c + 16 + j.
        let (lo0, lo1, hi0, hi1) = if nibbles {
            // SAFETY: 16 level bytes of chunk `c`.
            let (w0, w1) = unsafe { (widen(r.add(c * 16)), widen(r.add(c * 16 + 8))) };
            (
                _mm256_and_si256(w0, low),
                _mm256_and_si256(w1, low),
                _mm256_srli_epi32::<4>(w0),
                _mm256_srli_epi32::<4>(w1),
            )
        } else {
            // SAFETY: 32 level bytes of chunk `c`.
            unsafe {
                (
                    widen(r.add(c * 32)),
                    widen(r.add(c * 32 + 8)),
                    widen(r.add(c * 32 + 16)),
                    widen(r.add(c * 32 + 24)),
                )
            }
        };
        // SAFETY: 32 floats of chunk `c`.
        unsafe {
            let zc = zp.add(c * 32);
            acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo0), _mm256_loadu_ps(zc), acc0);
            acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi0), _mm256_loadu_ps(zc.add(16)), acc0);
            acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo1), _mm256_loadu_ps(zc.add(8)), acc1);
            acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi1), _mm256_loadu_ps(zc.add(24)), acc1);
        }
    }
    let mut lanes = [0.0f32; 16];
    // SAFETY: 8 + 8 floats.
    unsafe {
        _mm256_storeu_ps(lanes.as_mut_ptr(), acc0);
        _mm256_storeu_ps(lanes.as_mut_ptr().add(8), acc1);
    }
    lane_tree(lanes)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn levels_dot_fma_hw(row: &[u8], nibbles: bool, z: &[f32]) -> f32 {
    levels_dot_lanes(row, nibbles, z)
}

#[inline(always)]
pub(super) fn levels_dot_lanes(row: &[u8], nibbles: bool, z: &[f32]) -> f32 {
    let mut acc = [0.0f32; 16];
    for (c, z32) in z.chunks_exact(32).enumerate() {
        for (j, a) in acc.iter_mut().enumerate() {
            let (lo, hi) = if nibbles {
                let b = row[c * 16 + j];
                (b & 15, b >> 4)
            } else {
                (row[c * 32 + j], row[c * 32 + 16 + j])
            };
            *a = f32::from(lo).mul_add(z32[j], *a);
            *a = f32::from(hi).mul_add(z32[16 + j], *a);
        }
    }
    lane_tree(acc)
}

/// Adds 16 lanes in a fixed tree: halves, quarters, eighths, pairs.
#[inline(always)]
fn lane_tree(mut acc: [f32; 16]) -> f32 {
    for width in [8, 4, 2, 1] {
        for j in 0..width {
            acc[j] += acc[j + width];
        }
    }
    acc[0]
}

/// [`levels_dot`] on AVX-512: the same FMAs in the same lanes.
///
/// # Safety
/// The CPU supports AVX-512F; `row` holds the packed levels of `z.len()`
/// dimensions, a multiple of 32.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn levels_dot_avx512(row: &[u8], nibbles: bool, z: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let chunks = z.len() / 32;
    debug_assert!(row.len() >= chunks * if nibbles { 16 } else { 32 });
    let mut acc = _mm512_setzero_ps();
    let low = _mm512_set1_epi32(15);
    for c in 0..chunks {
        // SAFETY: in bounds (caller): 16 or 32 level bytes and 32 floats
        // of chunk `c`.
        unsafe {
            let (lo, hi) = if nibbles {
                let w = _mm512_cvtepu8_epi32(_mm_loadu_si128(
                    row.as_ptr().add(c * 16) as *const __m128i
                ));
                (_mm512_and_si512(w, low), _mm512_srli_epi32::<4>(w))
            } else {
                (
                    _mm512_cvtepu8_epi32(_mm_loadu_si128(
                        row.as_ptr().add(c * 32) as *const __m128i
                    )),
                    _mm512_cvtepu8_epi32(_mm_loadu_si128(
                        row.as_ptr().add(c * 32 + 16) as *const __m128i
                    )),
                )
            };
            let z0 = _mm512_loadu_ps(z.as_ptr().add(c * 32));
            let z1 = _mm512_loadu_ps(z.as_ptr().add(c * 32 + 16));
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), z0, acc);
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), z1, acc);
        }
    }
    let mut lanes = [0.0f32; 16];
    // SAFETY: 16 floats.
    unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), acc) };
    lane_tree(lanes)
}
