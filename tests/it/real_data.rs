//! Recall on real sentence embeddings (`minilm-gcide`: 20,000 × 384,
//! cosine). Its texts are GPL, so the data set is never in the repository:
//! the test is `#[ignore]`d and runs where `$SHOAL_DATA_DIR` names a folder
//! holding `minilm-gcide/` (`.ci/run` sets it when the data is beside the
//! checkout and runs the ignored tests); run it by hand with
//! `SHOAL_DATA_DIR=… cargo test --test it real_data -- --ignored`. Asked to
//! run without the data, it fails rather than passing unseen.

use crate::common::OwnMut;
use shoal::demo::{demo_batch, demo_schema};
use shoal::{BatchQuery, Config, Dataset, Metric, PerQueryParams};
use shoal::{IndexKind, IndexParams};
use shoal::{Nprobes, SearchMode};
use std::collections::HashSet;
use std::path::PathBuf;

/// `$SHOAL_DATA_DIR/minilm-gcide`; a failure naming what is missing.
fn data_dir() -> PathBuf {
    let root = std::env::var_os("SHOAL_DATA_DIR")
        .map(PathBuf::from)
        .expect("set SHOAL_DATA_DIR to a folder holding minilm-gcide/ to run this test");
    let dir = root.join("minilm-gcide");
    assert!(
        dir.join("base.fvecs").is_file() && dir.join("query.fvecs").is_file(),
        "{} holds no base.fvecs and query.fvecs",
        dir.display()
    );
    dir
}

/// `.fvecs`: each row is its dimension (u32) then that many f32.
fn read_fvecs(path: &std::path::Path) -> (usize, Vec<f32>) {
    let bytes = std::fs::read(path).unwrap();
    let dim = u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize;
    let mut out = Vec::new();
    for row in bytes.chunks_exact(4 + 4 * dim) {
        out.extend(
            row[4..]
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap())),
        );
    }
    (dim, out)
}

/// The bar: cosine IVF_PQ (256 partitions, m = 48, nprobes 16)
/// at least FAISS's best form − 0.005 on this set (FAISS 1.15.1
/// `IndexIVFPQ`: inner-product ADC 0.674, L2 on normalised vectors 0.664);
/// shoal measured 0.717 with the normalised reconstruction (decision 0018),
/// and the floor, 0.705, keeps that gain. Against shoal's own exact
/// search; the shared scan and the single-query path agree on every hit.
#[test]
#[ignore = "needs minilm-gcide under $SHOAL_DATA_DIR; .ci/run runs it where the data is"]
fn cosine_ivf_pq_recall_on_minilm_gcide_meets_the_floor() {
    let tmp = tempfile::tempdir().unwrap();
    let (ds, qs) = gcide_indexed(tmp.path(), IndexKind::IvfPq { sub_vectors: 48 });
    assert_recall_on_both_paths(&ds, &qs, "ivf_pq m 48", 0.705);
    // Real embeddings, callers with their own filters and options in one
    // batch: each query as the single-query path answers it.
    let each: Vec<PerQueryParams> = (0..qs.len())
        .map(|i| PerQueryParams {
            filter: Some(format!("len < {}", 8 + i % 16)),
            nprobes: if i % 3 == 0 {
                Some(Nprobes::Adaptive { min: 4, max: 32 })
            } else {
                Some(Nprobes::Fixed(16))
            },
            refine_factor: (i % 5 == 0).then_some(3),
            ..PerQueryParams::default()
        })
        .collect();
    let mixed = BatchQuery::new(qs.clone(), 10).each(each);
    let (shared, profile) = ds.explain(&mixed).unwrap();
    assert_eq!(profile.mode, SearchMode::Shared);
    assert_eq!(profile.distinct_filters, 16);
    let mut alone = mixed.clone();
    alone.shared.mode = SearchMode::PerQuery;
    assert_eq!(shared.hits, ds.search_batch(&alone).unwrap().hits);
}

/// The RaBitQ bar (issue 29): cosine IVF_RQ at 4 bits (256 partitions,
/// nprobes 16) reaches recall@10 0.85 on this set (measured 0.877; FAISS
/// 1.15.1 `IndexIVFRaBitQ` at 4 bits 0.875), and the shared scan, whose
/// bound-based skips depend on each query's heap, answers every query
/// exactly as the single-query path does.
#[test]
#[ignore = "needs minilm-gcide under $SHOAL_DATA_DIR; .ci/run runs it where the data is"]
fn cosine_ivf_rq_recall_on_minilm_gcide_meets_the_floor() {
    let tmp = tempfile::tempdir().unwrap();
    let (ds, qs) = gcide_indexed(tmp.path(), IndexKind::IvfRq { bits: 4 });
    assert_recall_on_both_paths(&ds, &qs, "ivf_rq 4 bits", 0.85);
}

/// minilm-gcide's base rows in a new cosine dataset under `dir`, indexed
/// with `kind` over 256 partitions; with the query vectors.
fn gcide_indexed(dir: &std::path::Path, kind: IndexKind) -> (Dataset, Vec<Vec<f32>>) {
    let data = data_dir();
    let (dim, base) = read_fvecs(&data.join("base.fvecs"));
    let (qdim, queries) = read_fvecs(&data.join("query.fvecs"));
    assert_eq!(dim, qdim);
    let mut ds = Dataset::create(
        dir,
        demo_schema("vector", dim, Metric::Cosine).unwrap(),
        Config::default(),
    )
    .unwrap();
    ds.append([demo_batch("vector", dim, &base, 0)]).unwrap();
    ds.create_index(None, IndexParams::new(kind, 256)).unwrap();
    let qs = queries.chunks(dim).map(|q| q.to_vec()).collect();
    (ds, qs)
}

/// Recall@10 at nprobes 16 against shoal's exact search, for the shared
/// scan and for the single-query path: each at least `floor`, and the two
/// the same hit for hit (rows and distance bits).
fn assert_recall_on_both_paths(ds: &Dataset, qs: &[Vec<f32>], label: &str, floor: f64) {
    let mut exact = BatchQuery::new(qs.to_vec(), 10);
    exact.shared.mode = SearchMode::Exact;
    let truth = ds.search_batch(&exact).unwrap();
    let mut hits_of = Vec::new();
    for mode in [SearchMode::Shared, SearchMode::PerQuery] {
        let mut ann = BatchQuery::new(qs.to_vec(), 10);
        ann.shared.mode = mode;
        ann.own_mut().nprobes = Some(Nprobes::Fixed(16));
        let got = ds.search_batch(&ann).unwrap();
        let mut hit = 0;
        for (t, g) in truth.hits.iter().zip(&got.hits) {
            let t: HashSet<u64> = t.iter().map(|h| h.row_id).collect();
            hit += g.iter().filter(|h| t.contains(&h.row_id)).count();
        }
        let recall = hit as f64 / (10 * qs.len()) as f64;
        eprintln!("minilm-gcide cosine {label} nprobes 16 {mode:?}: recall@10 {recall:.3}");
        assert!(
            recall >= floor,
            "{label} {mode:?}: recall@10 {recall:.3} < {floor}"
        );
        hits_of.push(
            got.hits
                .iter()
                .map(|h| {
                    h.iter()
                        .map(|h| (h.row_id, h.distance.to_bits()))
                        .collect::<Vec<_>>()
                })
                .collect::<Vec<_>>(),
        );
    }
    assert_eq!(
        hits_of[0], hits_of[1],
        "{label}: shared scan and single-query path differ"
    );
}
