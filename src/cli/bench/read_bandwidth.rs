//! The memory read-bandwidth probe: how many bytes per second `threads`
//! threads can stream from main memory, to tell whether a scan is
//! memory-bound (its partition bytes per second against this figure).

use std::time::Instant;

/// Largest buffer the probe streams: several times the last-level cache
/// of the servers it is run on (300–480 MiB), so reads come from memory.
const MAX_BUFFER_BYTES: u64 = 2 << 30;

/// Floats summed per step of a thread's loop (independent accumulators,
/// so the adds do not limit the loads).
const LANES: usize = 64;

/// Read bandwidth of `threads` threads together, GB/s: each thread sums
/// its own slice of one buffer of up to 2 GiB (at most a quarter of the
/// available memory), over and over for `seconds`; bytes summed over the
/// time the threads took. The buffer is written once before timing.
pub fn measure_read_bandwidth_gbs(threads: usize, seconds: f64) -> f64 {
    let threads = threads.max(1);
    let mut sys = sysinfo::System::new();
    sys.refresh_memory();
    let bytes = (sys.available_memory() / 4).clamp(64 << 20, MAX_BUFFER_BYTES);
    let per_thread = (bytes as usize / 4 / threads / LANES).max(1) * LANES;
    let buffer: Vec<f32> = (0..per_thread * threads)
        .map(|i| (i % 1024) as f32 * 1e-3)
        .collect();
    let start = Instant::now();
    let streamed: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = buffer
            .chunks(per_thread)
            .map(|slice| {
                s.spawn(move || {
                    let mut passes = 0u64;
                    let mut sums = [0.0f32; LANES];
                    while passes == 0 || start.elapsed().as_secs_f64() < seconds {
                        for block in slice.chunks_exact(LANES) {
                            for (s, x) in sums.iter_mut().zip(block) {
                                *s += x;
                            }
                        }
                        passes += 1;
                    }
                    std::hint::black_box(sums);
                    passes * (slice.len() * 4) as u64
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or(0)).sum()
    });
    streamed as f64 / start.elapsed().as_secs_f64() / 1e9
}
