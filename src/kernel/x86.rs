//! The AVX-512 and AVX2 + FMA register tiles of the dot kernel (x86_64).
//! Each (query, vector) pair is one FMA chain over the dimensions in one
//! SIMD lane; see the module doc of `kernel`. The tiles are generic over
//! what a block's lanes hold ([`X86Lanes`]): float32 vectors, or 8-bit
//! codes widened to float32 as they are loaded; nothing else differs.

use super::blocks::{Lanes, BLOCK};
use super::codes::CodeLanes;
use std::arch::x86_64::*;

/// One dimension of a 16-row block as the x86 tiles load it: 16 float32
/// values in one AVX-512 register or two AVX2 registers (exactly the
/// lanes' values; codes are widened, which is exact).
pub trait X86Lanes: Sized {
    /// Widest block span a one-query tile uses (two-query tiles use half):
    /// widened codes take registers of their own, so they get less.
    const WIDEST_SPAN: usize;

    /// Whether a tile of several queries may prefetch the next span of
    /// blocks while it scores this one (when the caller asks for it, see
    /// [`dots_avx512`]). Float32 lanes fill a cache line per dimension;
    /// codes fill one per four dimensions and were not measured with it.
    const PREFETCH_NEXT_SPAN: bool;

    /// # Safety
    /// `p` points at one `Self`; the CPU supports AVX-512F.
    unsafe fn load512(p: *const Self) -> __m512;

    /// # Safety
    /// `p` points at one `Self`; the CPU supports AVX2.
    unsafe fn load256(p: *const Self) -> [__m256; 2];
}

impl X86Lanes for Lanes {
    const WIDEST_SPAN: usize = 8;
    const PREFETCH_NEXT_SPAN: bool = true;

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn load512(p: *const Self) -> __m512 {
        // SAFETY: `Lanes` is 64-byte aligned and holds 16 floats (caller:
        // `p` points at one).
        unsafe { _mm512_load_ps(p as *const f32) }
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load256(p: *const Self) -> [__m256; 2] {
        let p = p as *const f32;
        // SAFETY: as above; both halves are 32-byte aligned.
        unsafe { [_mm256_load_ps(p), _mm256_load_ps(p.add(8))] }
    }
}

impl X86Lanes for CodeLanes {
    const WIDEST_SPAN: usize = 4;
    const PREFETCH_NEXT_SPAN: bool = false;

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn load512(p: *const Self) -> __m512 {
        // SAFETY: `CodeLanes` is 16-byte aligned and holds 16 bytes
        // (caller: `p` points at one).
        unsafe { _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_load_si128(p as *const __m128i))) }
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn load256(p: *const Self) -> [__m256; 2] {
        let p = p as *const u8;
        // SAFETY: as above; each half reads 8 of the 16 bytes.
        unsafe {
            let lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(p as *const __m128i));
            let hi = _mm256_cvtepu8_epi32(_mm_loadl_epi64(p.add(8) as *const __m128i));
            [_mm256_cvtepi32_ps(lo), _mm256_cvtepi32_ps(hi)]
        }
    }
}

/// One register tile: `Q` queries × `B` blocks of 16 rows; with
/// `PREFETCH` (and several queries, float32 lanes) it also prefetches the
/// same dimension of the next span's blocks — the arithmetic is the same.
#[target_feature(enable = "avx512f")]
unsafe fn tile512<L: X86Lanes, const Q: usize, const B: usize, const PREFETCH: bool>(
    q: *const f32,
    dim: usize,
    x: *const L,
    out: *mut f32,
    stride: usize,
) {
    // SAFETY: the caller (`dots_avx512`) passes pointers to `Q` query
    // rows of `dim` floats, `B` whole aligned blocks of `dim` lanes, and
    // an output with room for `Q` rows of `stride` floats, `B * 16` of
    // them from `out`; AVX-512F is enabled on this function.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); B]; Q];
        for j in 0..dim {
            let mut xv = [_mm512_setzero_ps(); B];
            for (b, v) in xv.iter_mut().enumerate() {
                *v = L::load512(x.add(b * dim + j));
                if PREFETCH && L::PREFETCH_NEXT_SPAN && Q > 1 {
                    // Past the end near the last span: a prefetch never
                    // faults, and the address is only computed.
                    _mm_prefetch::<_MM_HINT_T0>(x.wrapping_add((B + b) * dim + j) as *const i8);
                }
            }
            for (i, row) in acc.iter_mut().enumerate() {
                let qv = _mm512_set1_ps(*q.add(i * dim + j));
                for (a, v) in row.iter_mut().zip(xv.iter()) {
                    *a = _mm512_fmadd_ps(qv, *v, *a);
                }
            }
        }
        for (i, row) in acc.iter().enumerate() {
            for (b, a) in row.iter().enumerate() {
                _mm512_storeu_ps(out.add(i * stride + b * BLOCK), *a);
            }
        }
    }
}

/// One register tile for AVX2: `Q` queries × one block (two 8-lane halves).
#[target_feature(enable = "avx2,fma")]
unsafe fn tile256<L: X86Lanes, const Q: usize>(
    q: *const f32,
    dim: usize,
    x: *const L,
    out: *mut f32,
    stride: usize,
) {
    // SAFETY: the caller (`dots_avx2`) passes pointers to `Q` query rows
    // of `dim` floats, one whole aligned block of `dim` lanes and an
    // output with room for `Q` rows of `stride` floats, 16 of them from
    // `out`; AVX2 and FMA are enabled on this function.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); 2]; Q];
        for j in 0..dim {
            let xv = L::load256(x.add(j));
            for (i, row) in acc.iter_mut().enumerate() {
                let qv = _mm256_set1_ps(*q.add(i * dim + j));
                row[0] = _mm256_fmadd_ps(qv, xv[0], row[0]);
                row[1] = _mm256_fmadd_ps(qv, xv[1], row[1]);
            }
        }
        for (i, row) in acc.iter().enumerate() {
            _mm256_storeu_ps(out.add(i * stride), row[0]);
            _mm256_storeu_ps(out.add(i * stride + 8), row[1]);
        }
    }
}

/// Lane-wise FMA chain of squares over one block.
#[target_feature(enable = "avx512f")]
pub unsafe fn block_norms_avx512(block: &[Lanes]) -> [f32; BLOCK] {
    let mut acc = _mm512_setzero_ps();
    for lanes in block {
        // SAFETY: `Lanes` is 64-byte aligned and holds 16 floats.
        let v = unsafe { _mm512_load_ps(lanes.0.as_ptr()) };
        acc = _mm512_fmadd_ps(v, v, acc);
    }
    let mut out = [0.0f32; BLOCK];
    // SAFETY: `out` holds 16 floats.
    unsafe { _mm512_storeu_ps(out.as_mut_ptr(), acc) };
    out
}

macro_rules! tile_rows {
    ($f:ident, $l:ty, $rem:expr, $($args:tt)*) => {
        match $rem {
            1 => $f::<$l, 1, $($args)*>,
            2 => $f::<$l, 2, $($args)*>,
            3 => $f::<$l, 3, $($args)*>,
            4 => $f::<$l, 4, $($args)*>,
            5 => $f::<$l, 5, $($args)*>,
            6 => $f::<$l, 6, $($args)*>,
            7 => $f::<$l, 7, $($args)*>,
            _ => $f::<$l, 8, $($args)*>,
        }
    };
}

/// A register tile: `Q` query rows from `q` (`dim` floats each) against
/// `B` blocks from `x`, written at `out` with row stride `stride`.
type Tile<L> = unsafe fn(*const f32, usize, *const L, *mut f32, usize);

/// Walks the grid of `nq` queries × `x.len() / dim` blocks in register
/// tiles: blocks in spans (the widest of `spans` that is at most `widest`
/// and fits), queries in rows of at most `max_rows`; `pick(rows, span)` is
/// the tile for that shape.
///
/// # Safety
/// `q` holds `nq × dim` floats, `x` whole blocks of `dim` lanes and `out`
/// at least `nq × stride` floats with `stride ≥ blocks × 16`; every tile
/// `pick` returns computes exactly `rows` queries × `span` blocks and runs
/// on this CPU.
#[allow(clippy::too_many_arguments)]
unsafe fn walk_tiles<L>(
    q: &[f32],
    nq: usize,
    dim: usize,
    x: &[L],
    out: &mut [f32],
    stride: usize,
    (max_rows, spans, widest): (usize, &[usize], usize),
    pick: impl Fn(usize, usize) -> Tile<L>,
) {
    let nblocks = x.len() / dim;
    let (qp, xp, op) = (q.as_ptr(), x.as_ptr(), out.as_mut_ptr());
    let mut b = 0;
    while b < nblocks {
        let left = nblocks - b;
        let span = spans
            .iter()
            .copied()
            .find(|&s| s <= widest && s <= left)
            .unwrap_or(1);
        let mut i = 0;
        while i < nq {
            let rows = (nq - i).min(max_rows);
            // SAFETY: rows `i..i + rows` <= nq and blocks `b..b + span` <=
            // nblocks, so with this function's contract every pointer the
            // tile touches is in bounds, and the tile runs on this CPU.
            unsafe {
                pick(rows, span)(
                    qp.add(i * dim),
                    dim,
                    xp.add(b * dim),
                    op.add(i * stride + b * BLOCK),
                    stride,
                )
            };
            i += rows;
        }
        b += span;
    }
}

/// `PREFETCH`: tiles of several queries prefetch the next span of blocks
/// as they score this one, for blocks streamed from memory: with a few
/// queries per row a tile asks for lines faster than the hardware
/// prefetcher alone brings them (shared scans of batch 64 and 256 on a
/// 488 MiB segment: +7–13% on one and two threads), but where they sit in
/// cache the extra instructions cost 5–8% (docs/PERFORMANCE.md,
/// 2026-12-07). One-query tiles never prefetch.
///
/// # Safety
/// The CPU must support AVX-512F; `q` holds `nq × dim` floats, `x` whole
/// blocks of `dim` lanes, `stride ≥ blocks × 16`, and `out` at least
/// `nq × stride` floats.
#[target_feature(enable = "avx512f")]
pub unsafe fn dots_avx512<L: X86Lanes, const PREFETCH: bool>(
    q: &[f32],
    nq: usize,
    dim: usize,
    x: &[L],
    out: &mut [f32],
    stride: usize,
) {
    // Few queries: wider tiles (up to `WIDEST_SPAN` blocks for one query,
    // half that for two) so that enough independent FMA chains are in
    // flight to hide the FMA latency.
    let widest = match nq {
        1 => L::WIDEST_SPAN,
        2 => L::WIDEST_SPAN / 2,
        _ => 2,
    };
    // SAFETY: this function's contract; every tile is AVX-512F, enabled
    // here, and computes the shape it is picked for.
    unsafe {
        walk_tiles(
            q,
            nq,
            dim,
            x,
            out,
            stride,
            (8, &[8, 4, 2, 1], widest),
            |rows, span| match (rows, span) {
                (1, 8) => tile512::<L, 1, 8, PREFETCH>,
                (1, 4) => tile512::<L, 1, 4, PREFETCH>,
                (2, 4) => tile512::<L, 2, 4, PREFETCH>,
                (_, 1) => tile_rows!(tile512, L, rows, 1, PREFETCH),
                (_, 2) => tile_rows!(tile512, L, rows, 2, PREFETCH),
                _ => unreachable!("no {rows} x {span} tile (widest {widest})"),
            },
        )
    }
}

/// # Safety
/// The CPU must support AVX2 and FMA; bounds as for [`dots_avx512`].
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dots_avx2<L: X86Lanes>(
    q: &[f32],
    nq: usize,
    dim: usize,
    x: &[L],
    out: &mut [f32],
    stride: usize,
) {
    // SAFETY: this function's contract; the tiles are AVX2 + FMA, enabled
    // here, one block and `rows` queries each.
    unsafe {
        walk_tiles(
            q,
            nq,
            dim,
            x,
            out,
            stride,
            (4, &[1], 1),
            |rows, _| match rows {
                1 => tile256::<L, 1>,
                2 => tile256::<L, 2>,
                3 => tile256::<L, 3>,
                _ => tile256::<L, 4>,
            },
        )
    }
}
