//! Distance kernels: many queries × many vectors, register-tiled SIMD.
//!
//! Vectors are stored block-transposed ([`VectorBlocks`]): a block holds 16
//! vectors dimension-major, so one 16-lane register holds dimension `j` of 16
//! different vectors. A (query, vector) dot product is then accumulated in
//! one SIMD lane by a chain of fused multiply-adds over `j = 0, 1, …, dim-1`,
//! starting from `+0.0`, with no horizontal reduction at the end.
//!
//! That fixed, per-pair accumulation order is what makes results *batch
//! invariant*: the f32 bits of a pair's dot product are the same whatever the
//! tile shape, the tile position, the number of queries in the call, and even
//! the instruction set (AVX-512, AVX2 and the scalar `mul_add` fallback all
//! compute the same correctly rounded FMA chain). Tests check all of this.
//!
//! Norms are precomputed per stored vector (‖x‖², same FMA chain), so l2 is
//! `‖q‖² + ‖x‖² − 2 q·x` and cosine is `1 − q̂·x / ‖x‖`.

use serde::{Deserialize, Serialize};
use std::ops::Range;
use std::sync::OnceLock;

/// Lanes per block: vectors that share one SIMD register row.
pub const BLOCK: usize = 16;

/// One dimension of one block: 16 lanes, 64-byte aligned (one cache line).
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Lanes(pub [f32; BLOCK]);

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
    /// ‖q‖² of the *prepared* query (see [`PreparedQueries`]), `norm_sq` is
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

/// The dot product of two slices as one FMA chain from `+0.0` — the exact
/// per-pair arithmetic of every SIMD kernel, used for norms and tests.
pub fn fma_dot(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        static HAS_FMA: OnceLock<bool> = OnceLock::new();
        if *HAS_FMA.get_or_init(|| std::arch::is_x86_feature_detected!("fma")) {
            // SAFETY: the CPU supports FMA (checked above).
            return unsafe { fma_dot_hw(a, b) };
        }
    }
    fma_dot_chain(a, b)
}

/// The chain itself; `mul_add` is a hardware FMA where the caller enables
/// it and a (slower, equally exact) library call elsewhere.
#[inline(always)]
fn fma_dot_chain(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = 0.0f32;
    for (x, y) in a.iter().zip(b) {
        acc = x.mul_add(*y, acc);
    }
    acc
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
unsafe fn fma_dot_hw(a: &[f32], b: &[f32]) -> f32 {
    fma_dot_chain(a, b)
}

/// ‖x‖² of the 16 vectors of one block (`dim` lanes), each as the FMA chain
/// of [`fma_dot`] — vectorised across the block's vectors.
fn block_norms(block: &[Lanes]) -> [f32; BLOCK] {
    #[cfg(target_arch = "x86_64")]
    {
        if Kernel::detect() == Kernel::Avx512 {
            // SAFETY: AVX-512F was detected.
            return unsafe { x86::block_norms_avx512(block) };
        }
    }
    let mut acc = [0.0f32; BLOCK];
    for lanes in block {
        for (a, x) in acc.iter_mut().zip(lanes.0) {
            *a = x.mul_add(x, *a);
        }
    }
    acc
}

/// Queries made ready for a metric: cosine queries are normalised, and
/// ‖q‖² is precomputed. Single and batch searches both go through this.
#[derive(Clone, Debug)]
pub struct PreparedQueries {
    /// Number of dimensions.
    pub dim: usize,
    /// Row-major `len × dim` query matrix.
    pub data: Vec<f32>,
    /// ‖q‖² per prepared query.
    pub norms_sq: Vec<f32>,
}

impl PreparedQueries {
    /// Prepares `rows` (row-major, `dim` wide) for `metric`.
    /// Callers validate first: cosine queries must have a non-zero norm.
    pub fn new(metric: Metric, dim: usize, rows: &[f32]) -> Self {
        let mut data = rows.to_vec();
        if metric == Metric::Cosine {
            for q in data.chunks_exact_mut(dim) {
                let norm = fma_dot(q, q).sqrt();
                if norm > 0.0 {
                    q.iter_mut().for_each(|v| *v /= norm);
                }
            }
        }
        let norms_sq = data.chunks_exact(dim).map(|q| fma_dot(q, q)).collect();
        PreparedQueries {
            dim,
            data,
            norms_sq,
        }
    }

    /// Number of queries.
    pub fn len(&self) -> usize {
        self.norms_sq.len()
    }

    /// True when there are no queries.
    pub fn is_empty(&self) -> bool {
        self.norms_sq.is_empty()
    }

    /// Query `i` as a slice.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }
}

/// Vectors in block-transposed layout with precomputed squared norms.
#[derive(Clone, Debug, Default)]
pub struct VectorBlocks {
    dim: usize,
    len: usize,
    blocks: Vec<Lanes>,
    norms_sq: Vec<f32>,
}

impl VectorBlocks {
    /// An empty set of `dim`-dimensional vectors.
    pub fn new(dim: usize) -> Self {
        VectorBlocks {
            dim,
            len: 0,
            blocks: Vec::new(),
            norms_sq: Vec::new(),
        }
    }

    /// Builds from row-major vectors (`rows.len()` must be a multiple of `dim`).
    pub fn from_rows(dim: usize, rows: &[f32]) -> Self {
        let mut out = VectorBlocks::new(dim);
        out.extend_from_rows(rows);
        out
    }

    /// Appends row-major vectors.
    pub fn extend_from_rows(&mut self, rows: &[f32]) {
        assert!(self.dim > 0 && rows.len().is_multiple_of(self.dim));
        let n = rows.len() / self.dim;
        self.blocks
            .resize((self.len + n).div_ceil(BLOCK) * self.dim, Lanes::default());
        for (r, v) in rows.chunks_exact(self.dim).enumerate() {
            let i = self.len + r;
            let (b, lane) = (i / BLOCK, i % BLOCK);
            for (j, x) in v.iter().enumerate() {
                self.blocks[b * self.dim + j].0[lane] = *x;
            }
        }
        let first_block = self.len / BLOCK;
        self.len += n;
        // Norms of every block touched, 16 vectors at a time: lane by lane
        // the same FMA chain as `fma_dot(v, v)`, so the same bits.
        self.norms_sq.truncate(first_block * BLOCK);
        for b in first_block..self.block_count() {
            let lanes = block_norms(&self.blocks[b * self.dim..(b + 1) * self.dim]);
            let live = (self.len - b * BLOCK).min(BLOCK);
            self.norms_sq.extend_from_slice(&lanes[..live]);
        }
    }

    /// Number of dimensions.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Number of vectors.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of 16-vector blocks (the last may be padded with zeros).
    pub fn block_count(&self) -> usize {
        self.len.div_ceil(BLOCK)
    }

    /// ‖x‖² per vector.
    pub fn norms_sq(&self) -> &[f32] {
        &self.norms_sq
    }

    /// Vector `i`, copied out of the transposed layout.
    pub fn vector(&self, i: usize) -> Vec<f32> {
        let (b, lane) = (i / BLOCK, i % BLOCK);
        (0..self.dim)
            .map(|j| self.blocks[b * self.dim + j].0[lane])
            .collect()
    }

    /// Bytes held (for memory accounting).
    pub fn size_bytes(&self) -> usize {
        self.blocks.len() * std::mem::size_of::<Lanes>() + self.norms_sq.len() * 4
    }

    /// Rebuilds from the raw parts written by [`VectorBlocks::raw_blocks`]
    /// and [`VectorBlocks::norms_sq`]; `None` if the sizes disagree.
    pub fn from_parts(
        dim: usize,
        len: usize,
        blocks: Vec<Lanes>,
        norms_sq: Vec<f32>,
    ) -> Option<Self> {
        (dim > 0 && blocks.len() == len.div_ceil(BLOCK) * dim && norms_sq.len() == len).then_some(
            VectorBlocks {
                dim,
                len,
                blocks,
                norms_sq,
            },
        )
    }

    /// The block-transposed storage, `block_count() × dim` lanes.
    pub fn raw_blocks(&self) -> &[Lanes] {
        &self.blocks
    }

    fn block_slice(&self, blocks: Range<usize>) -> &[Lanes] {
        &self.blocks[blocks.start * self.dim..blocks.end * self.dim]
    }
}

/// The instruction set a kernel runs on. Chosen once per process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// AVX-512F, 8 queries × 32 vectors per register tile.
    Avx512,
    /// AVX2 + FMA, 4 queries × 16 vectors per register tile.
    Avx2,
    /// Portable `f32::mul_add`, bit-identical to the SIMD kernels.
    Scalar,
}

impl Kernel {
    /// The best kernel this CPU supports, unless `SHOAL_KERNEL`
    /// (`avx512`, `avx2`, `scalar`) asks for a lesser one.
    pub fn detect() -> Kernel {
        static CHOSEN: OnceLock<Kernel> = OnceLock::new();
        *CHOSEN.get_or_init(|| {
            let best = Kernel::available()
                .into_iter()
                .next()
                .unwrap_or(Kernel::Scalar);
            match std::env::var("SHOAL_KERNEL").ok().as_deref() {
                Some(name) => Kernel::available()
                    .into_iter()
                    .find(|k| k.name() == name)
                    .unwrap_or(best),
                None => best,
            }
        })
    }

    /// Every kernel this CPU can run, best first.
    pub fn available() -> Vec<Kernel> {
        let mut out = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                out.push(Kernel::Avx512);
            }
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                out.push(Kernel::Avx2);
            }
        }
        out.push(Kernel::Scalar);
        out
    }

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Avx512 => "avx512",
            Kernel::Avx2 => "avx2",
            Kernel::Scalar => "scalar",
        }
    }
}

/// Dot products of every query with every vector of `blocks` (a range of
/// block indices of `xs`). `out` is row-major: `out[qi * stride + v]` for the
/// `v`-th vector of the range, `stride = blocks.len() * BLOCK`. Padding lanes
/// of a partial last block get dot products with zeros.
pub fn dot_blocks(
    kernel: Kernel,
    queries: &[f32],
    xs: &VectorBlocks,
    blocks: Range<usize>,
    out: &mut [f32],
) {
    let dim = xs.dim;
    assert!(dim > 0 && queries.len().is_multiple_of(dim));
    assert!(blocks.end <= xs.block_count());
    let nq = queries.len() / dim;
    let stride = blocks.len() * BLOCK;
    assert!(out.len() >= nq * stride);
    let x = xs.block_slice(blocks);
    match kernel {
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx512 => {
            assert!(std::arch::is_x86_feature_detected!("avx512f"));
            // SAFETY: the CPU supports AVX-512F (checked above); slices were
            // bounds-checked against nq, dim and stride.
            unsafe { x86::dots_avx512(queries, nq, dim, x, out, stride) }
        }
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => {
            assert!(
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
            );
            // SAFETY: as above, for AVX2 + FMA.
            unsafe { x86::dots_avx2(queries, nq, dim, x, out, stride) }
        }
        _ => dots_scalar(queries, nq, dim, x, out, stride),
    }
}

fn dots_scalar(q: &[f32], nq: usize, dim: usize, x: &[Lanes], out: &mut [f32], stride: usize) {
    let nblocks = x.len() / dim;
    for i in 0..nq {
        let qrow = &q[i * dim..(i + 1) * dim];
        for b in 0..nblocks {
            let mut acc = [0.0f32; BLOCK];
            for (j, qj) in qrow.iter().enumerate() {
                let xl = &x[b * dim + j].0;
                for lane in 0..BLOCK {
                    acc[lane] = qj.mul_add(xl[lane], acc[lane]);
                }
            }
            out[i * stride + b * BLOCK..i * stride + (b + 1) * BLOCK].copy_from_slice(&acc);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Lanes, BLOCK};
    use std::arch::x86_64::*;

    /// One register tile: `Q` queries × `B` blocks of 16 vectors.
    #[target_feature(enable = "avx512f")]
    unsafe fn tile512<const Q: usize, const B: usize>(
        q: *const f32,
        dim: usize,
        x: *const Lanes,
        out: *mut f32,
        stride: usize,
    ) {
        // SAFETY: the caller (`dots_avx512`) passes pointers to `Q` query
        // rows of `dim` floats, `B` whole 64-byte-aligned blocks of `dim`
        // lanes, and an output with room for `Q` rows of `stride` floats,
        // `B * 16` of them from `out`; AVX-512F is enabled on this function.
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); B]; Q];
            for j in 0..dim {
                let mut xv = [_mm512_setzero_ps(); B];
                for (b, v) in xv.iter_mut().enumerate() {
                    *v = _mm512_load_ps(x.add(b * dim + j) as *const f32);
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
    unsafe fn tile256<const Q: usize>(
        q: *const f32,
        dim: usize,
        x: *const Lanes,
        out: *mut f32,
        stride: usize,
    ) {
        // SAFETY: the caller (`dots_avx2`) passes pointers to `Q` query rows
        // of `dim` floats, one whole 64-byte-aligned block of `dim` lanes and
        // an output with room for `Q` rows of `stride` floats, 16 of them
        // from `out`; AVX2 and FMA are enabled on this function.
        unsafe {
            let mut acc = [[_mm256_setzero_ps(); 2]; Q];
            for j in 0..dim {
                let p = x.add(j) as *const f32;
                let xv = [_mm256_load_ps(p), _mm256_load_ps(p.add(8))];
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
        ($f:ident, $rem:expr, $($args:tt)*) => {
            match $rem {
                1 => $f::<1, $($args)*>,
                2 => $f::<2, $($args)*>,
                3 => $f::<3, $($args)*>,
                4 => $f::<4, $($args)*>,
                5 => $f::<5, $($args)*>,
                6 => $f::<6, $($args)*>,
                7 => $f::<7, $($args)*>,
                _ => $f::<8, $($args)*>,
            }
        };
    }

    /// # Safety
    /// The CPU must support AVX-512F; `q` holds `nq × dim` floats, `x` whole
    /// blocks of `dim` lanes, and `out` at least `nq × stride` floats.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn dots_avx512(
        q: &[f32],
        nq: usize,
        dim: usize,
        x: &[Lanes],
        out: &mut [f32],
        stride: usize,
    ) {
        const QT: usize = 8;
        let nblocks = x.len() / dim;
        let (qp, xp, op) = (q.as_ptr(), x.as_ptr(), out.as_mut_ptr());
        // Few queries: wider tiles (up to 8 blocks for one query, 4 for
        // two) so that enough independent FMA chains are in flight to hide
        // the FMA latency.
        let widest = match nq {
            1 => 8,
            2 => 4,
            _ => 2,
        };
        let mut b = 0;
        while b < nblocks {
            let left = nblocks - b;
            let span = [8, 4, 2, 1]
                .into_iter()
                .find(|&s| s <= widest && s <= left)
                .unwrap_or(1);
            let mut i = 0;
            while i < nq {
                let rows = (nq - i).min(QT);
                let f: unsafe fn(*const f32, usize, *const Lanes, *mut f32, usize) =
                    match (rows, span) {
                        (1, 8) => tile512::<1, 8>,
                        (1, 4) => tile512::<1, 4>,
                        (2, 4) => tile512::<2, 4>,
                        (_, 1) => tile_rows!(tile512, rows, 1),
                        _ => tile_rows!(tile512, rows, 2),
                    };
                // SAFETY: rows `i..i + rows` < nq, blocks `b..b + span` <=
                // nblocks, and `out` holds nq × stride floats (this
                // function's contract), so every pointer the tile touches is
                // in bounds; AVX-512F is enabled here.
                unsafe {
                    f(
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

    /// # Safety
    /// The CPU must support AVX2 and FMA; bounds as for [`dots_avx512`].
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dots_avx2(
        q: &[f32],
        nq: usize,
        dim: usize,
        x: &[Lanes],
        out: &mut [f32],
        stride: usize,
    ) {
        const QT: usize = 4;
        let nblocks = x.len() / dim;
        let (qp, xp, op) = (q.as_ptr(), x.as_ptr(), out.as_mut_ptr());
        for b in 0..nblocks {
            let mut i = 0;
            while i < nq {
                let rows = (nq - i).min(QT);
                let f = match rows {
                    1 => tile256::<1>,
                    2 => tile256::<2>,
                    3 => tile256::<3>,
                    _ => tile256::<4>,
                };
                // SAFETY: rows `i..i + rows` < nq, block `b` < nblocks, and
                // `out` holds nq × stride floats (this function's contract);
                // AVX2 and FMA are enabled here.
                unsafe {
                    f(
                        qp.add(i * dim),
                        dim,
                        xp.add(b * dim),
                        op.add(i * stride + b * BLOCK),
                        stride,
                    )
                };
                i += rows;
            }
        }
    }
}

/// Peak single-thread FMA throughput of this CPU in GFLOP/s, measured with a
/// register-only loop of independent FMAs (for quoting kernels as a fraction
/// of it). Returns `None` without AVX-512 or AVX2.
pub fn measure_fma_peak_gflops(seconds: f64) -> Option<f64> {
    #[cfg(target_arch = "x86_64")]
    {
        let kernel = Kernel::available()[0];
        let start = std::time::Instant::now();
        let mut flops = 0u64;
        let mut sink = 0.0f32;
        while start.elapsed().as_secs_f64() < seconds {
            // SAFETY: the kernel was detected on this CPU.
            let (f, s) = unsafe {
                match kernel {
                    Kernel::Avx512 => peak::avx512(1 << 20),
                    Kernel::Avx2 => peak::avx2(1 << 20),
                    Kernel::Scalar => return None,
                }
            };
            flops += f;
            sink += s;
        }
        std::hint::black_box(sink);
        Some(flops as f64 / start.elapsed().as_secs_f64() / 1e9)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = seconds;
        None
    }
}

#[cfg(target_arch = "x86_64")]
mod peak {
    use std::arch::x86_64::*;

    /// 12 independent FMA chains of 16 lanes; returns (flops, checksum).
    #[target_feature(enable = "avx512f")]
    pub unsafe fn avx512(iters: u64) -> (u64, f32) {
        let a = _mm512_set1_ps(std::hint::black_box(0.999_999));
        let b = _mm512_set1_ps(std::hint::black_box(1e-7));
        let mut acc = [_mm512_set1_ps(std::hint::black_box(1.0)); 12];
        for _ in 0..iters {
            for v in acc.iter_mut() {
                *v = _mm512_fmadd_ps(*v, a, b);
            }
        }
        let mut s = _mm512_setzero_ps();
        for v in acc {
            s = _mm512_add_ps(s, v);
        }
        (iters * 12 * 16 * 2, _mm512_reduce_add_ps(s))
    }

    /// 12 independent FMA chains of 8 lanes; returns (flops, checksum).
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn avx2(iters: u64) -> (u64, f32) {
        let a = _mm256_set1_ps(std::hint::black_box(0.999_999));
        let b = _mm256_set1_ps(std::hint::black_box(1e-7));
        let mut acc = [_mm256_set1_ps(std::hint::black_box(1.0)); 12];
        for _ in 0..iters {
            for v in acc.iter_mut() {
                *v = _mm256_fmadd_ps(*v, a, b);
            }
        }
        let mut buf = [0.0f32; 8];
        let mut s = _mm256_setzero_ps();
        for v in acc {
            s = _mm256_add_ps(s, v);
        }
        // SAFETY: `buf` holds 8 floats, the width of one store.
        unsafe { _mm256_storeu_ps(buf.as_mut_ptr(), s) };
        (iters * 12 * 8 * 2, buf.iter().sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn random_rows(rng: &mut rand::rngs::StdRng, n: usize, dim: usize) -> Vec<f32> {
        (0..n * dim).map(|_| rng.random_range(-1.0..1.0)).collect()
    }

    #[test]
    fn every_kernel_matches_the_scalar_fma_chain_bit_for_bit() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for &(nq, n, dim) in &[
            (1, 1, 1),
            (1, 100, 7),
            (1, 300, 5),
            (2, 90, 9),
            (2, 50, 3),
            (3, 17, 5),
            (8, 32, 16),
            (13, 70, 33),
            (64, 50, 128),
        ] {
            let q = random_rows(&mut rng, nq, dim);
            let rows = random_rows(&mut rng, n, dim);
            let xs = VectorBlocks::from_rows(dim, &rows);
            let stride = xs.block_count() * BLOCK;
            for kernel in Kernel::available() {
                let mut out = vec![f32::NAN; nq * stride];
                dot_blocks(kernel, &q, &xs, 0..xs.block_count(), &mut out);
                for i in 0..nq {
                    for v in 0..n {
                        let expect =
                            fma_dot(&q[i * dim..(i + 1) * dim], &rows[v * dim..(v + 1) * dim]);
                        assert_eq!(
                            out[i * stride + v].to_bits(),
                            expect.to_bits(),
                            "kernel {kernel:?} q{i} v{v} nq={nq} n={n} dim={dim}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_pair_is_identical_alone_and_inside_a_large_tile_at_any_position() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let dim = 37;
        let q = random_rows(&mut rng, 64, dim);
        let rows = random_rows(&mut rng, 100, dim);
        let xs = VectorBlocks::from_rows(dim, &rows);
        let nb = xs.block_count();
        for kernel in Kernel::available() {
            let mut all = vec![0.0; 64 * nb * BLOCK];
            dot_blocks(kernel, &q, &xs, 0..nb, &mut all);
            for i in [0usize, 5, 31, 63] {
                for b in 0..nb {
                    let mut one = vec![0.0; BLOCK];
                    dot_blocks(kernel, &q[i * dim..(i + 1) * dim], &xs, b..b + 1, &mut one);
                    for lane in 0..BLOCK {
                        assert_eq!(
                            one[lane].to_bits(),
                            all[i * nb * BLOCK + b * BLOCK + lane].to_bits()
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn blocks_round_trip_vectors_and_norms() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let rows = random_rows(&mut rng, 21, 7);
        let mut xs = VectorBlocks::from_rows(7, &rows[..7 * 10]);
        xs.extend_from_rows(&rows[7 * 10..]);
        assert_eq!(xs.len(), 21);
        for i in 0..21 {
            assert_eq!(xs.vector(i), rows[i * 7..(i + 1) * 7].to_vec());
            let r = &rows[i * 7..(i + 1) * 7];
            assert_eq!(xs.norms_sq()[i], fma_dot(r, r));
        }
    }

    #[test]
    fn metric_finish_matches_definitions() {
        let q = [3.0f32, 4.0];
        let x = [1.0f32, 0.0];
        let d = fma_dot(&q, &x);
        assert_eq!(Metric::L2.finish(d, 25.0, 1.0), 20.0);
        assert_eq!(Metric::Dot.finish(d, 25.0, 1.0), -3.0);
        let p = PreparedQueries::new(Metric::Cosine, 2, &q);
        let dc = fma_dot(p.row(0), &x);
        assert!((Metric::Cosine.finish(dc, p.norms_sq[0], 1.0) - 0.4).abs() < 1e-6);
        assert_eq!(Metric::Cosine.finish(0.0, 1.0, 0.0), 1.0);
    }
}
