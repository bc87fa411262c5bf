//! The FMA-peak probe: this CPU's peak single-thread FMA throughput, to
//! quote kernels as a fraction of it in benchmarks.

use shoal::kernel::Kernel;

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
