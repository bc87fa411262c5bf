//! What the C ABI adds to a search: `shoal_search` (query matrix copied in,
//! rows converted to an Arrow record batch, exported as a C stream, read
//! back and released, as a C caller would) against `Dataset::search_batch`
//! on the same batch, alternating, median of the passes, in µs per call.
//!
//! `shoal-c-overhead DATASET QUERIES.f32 DIM [BATCH...]`

use shoal_c::{
    shoal_dataset_close, shoal_dataset_open, shoal_search, shoal_search_options_default,
    shoal_session_close, shoal_session_open, ArrowArrayStream, ShoalStatus,
};
use std::ffi::CString;
use std::time::Instant;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: shoal-c-overhead DATASET QUERIES.f32 DIM [BATCH...]");
        std::process::exit(2);
    }
    let dim: usize = args[3].parse().expect("DIM");
    let bytes = std::fs::read(&args[2]).expect("queries");
    let all: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let batches: Vec<usize> = if args.len() > 4 {
        args[4..]
            .iter()
            .map(|b| b.parse().expect("BATCH"))
            .collect()
    } else {
        vec![1, 64]
    };
    let dataset = shoal::Dataset::open(&args[1]).expect("open");
    let uri = CString::new(args[1].as_str()).expect("path");
    let (mut session, mut ds) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: valid pointers, handles closed below.
    unsafe {
        assert_eq!(
            shoal_session_open(std::ptr::null(), &mut session),
            ShoalStatus::Ok
        );
        assert_eq!(
            shoal_dataset_open(session, uri.as_ptr(), -1, &mut ds),
            ShoalStatus::Ok
        );
    }
    let options = shoal_search_options_default();
    println!(
        "| batch | Rust search_batch µs/call | C ABI shoal_search µs/call | overhead µs/call |"
    );
    println!("|---:|---:|---:|---:|");
    for &n in &batches {
        let vectors: Vec<Vec<f32>> = (0..n)
            .map(|i| {
                let q = i % (all.len() / dim);
                all[q * dim..(q + 1) * dim].to_vec()
            })
            .collect();
        let flat: Vec<f32> = vectors.concat();
        let batch = shoal::BatchQuery::new(vectors, 10);
        let calls = (20_000 / n).max(50);
        let (mut rust, mut abi) = (Vec::new(), Vec::new());
        for _ in 0..7 {
            let t = Instant::now();
            for _ in 0..calls {
                std::hint::black_box(dataset.search_batch(&batch).expect("search"));
            }
            rust.push(t.elapsed().as_secs_f64() * 1e6 / calls as f64);
            let t = Instant::now();
            for _ in 0..calls {
                let mut stream = std::mem::MaybeUninit::<
                    arrow_array::ffi_stream::FFI_ArrowArrayStream,
                >::uninit();
                // SAFETY: `flat` holds n × dim floats; the stream is read
                // and released as a C caller would.
                unsafe {
                    let status = shoal_search(
                        ds,
                        flat.as_ptr(),
                        n,
                        dim,
                        &options,
                        stream.as_mut_ptr().cast::<ArrowArrayStream>(),
                        std::ptr::null_mut(),
                    );
                    assert_eq!(status, ShoalStatus::Ok);
                    let reader = arrow_array::ffi_stream::RecordBatchStreamReader::try_new(
                        stream.assume_init(),
                    )
                    .expect("stream");
                    for b in reader {
                        std::hint::black_box(b.expect("batch"));
                    }
                }
            }
            abi.push(t.elapsed().as_secs_f64() * 1e6 / calls as f64);
        }
        let (r, a) = (median(rust), median(abi));
        println!("| {n} | {r:.1} | {a:.1} | {:.1} |", a - r);
    }
    // SAFETY: opened above, closed once.
    unsafe {
        shoal_dataset_close(ds);
        shoal_session_close(session);
    }
}
