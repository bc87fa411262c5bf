//! IVF indexes: exactness at full probe, recall floors, delta segments,
//! adaptive probing, refine, bad parameters, corruption.

use crate::common::OwnMut;
use crate::common::*;
use rand::SeedableRng;
use shoal::demo::{clustered_vectors, demo_batch, demo_schema};
use shoal::internals::{build_segment, IndexView, LoadedSegment, ValidatedBatch};
use shoal::{BatchQuery, Config, Dataset, Error, Metric, Query};
use shoal::{IndexKind, IndexParams};
use shoal::{Nprobes, PerQuery, SearchMode};
use std::sync::Arc;

fn hits(ds: &Dataset, b: &BatchQuery) -> Vec<Vec<(u64, u32)>> {
    ds.search_batch(b)
        .unwrap()
        .hits
        .iter()
        .map(|h| h.iter().map(|h| (h.row_id, h.distance.to_bits())).collect())
        .collect()
}

fn queries(rows: &[Row], n: usize) -> Vec<Vec<f32>> {
    (0..n)
        .map(|i| {
            rows[(i * 37) % rows.len()]
                .vector
                .iter()
                .map(|x| x + 0.25)
                .collect()
        })
        .collect()
}

#[test]
fn ivf_flat_probing_every_partition_equals_exact_search() {
    for metric in [Metric::L2, Metric::Cosine, Metric::Dot] {
        let dir = tempfile::tempdir().unwrap();
        let (mut ds, rows) = build(dir.path(), &[400, 250, 90], 12, metric, 11);
        ds.delete("len = 4").unwrap();
        ds.create_index(None, IndexParams::new(IndexKind::IvfFlat, 16))
            .unwrap();
        let qs = queries(&rows, 30);
        for filter in [None, Some("category = 'noun' OR len > 20")] {
            let mut exact = BatchQuery::new(qs.clone(), 15);
            exact.own_mut().filter = filter.map(String::from);
            exact.offset = PerQuery::All(2);
            exact.shared.mode = SearchMode::Exact;
            let mut ann = exact.clone();
            ann.shared.mode = SearchMode::PerQuery;
            ann.own_mut().nprobes = Some(Nprobes::Fixed(16));
            assert_eq!(hits(&ds, &ann), hits(&ds, &exact), "{metric} {filter:?}");
        }
    }
}

/// Clustered data, queries drawn from the same clusters.
fn clustered_dataset(dir: &std::path::Path, metric: Metric) -> (Dataset, Vec<Vec<f32>>) {
    let dim = 32;
    let all = clustered_vectors(6000 + 100, dim, 40, 5);
    let mut ds = Dataset::create(
        dir,
        demo_schema("vector", dim, metric).unwrap(),
        Config::default(),
    )
    .unwrap();
    ds.append([demo_batch("vector", dim, &all[..6000 * dim], 0)])
        .unwrap();
    let qs = all[6000 * dim..].chunks(dim).map(|c| c.to_vec()).collect();
    (ds, qs)
}

fn recall(ds: &Dataset, qs: &[Vec<f32>], nprobes: usize, refine: Option<usize>) -> f64 {
    let mut exact = BatchQuery::new(qs.to_vec(), 10);
    exact.shared.mode = SearchMode::Exact;
    let truth = ds.search_batch(&exact).unwrap();
    let mut ann = BatchQuery::new(qs.to_vec(), 10);
    ann.shared.mode = SearchMode::PerQuery;
    ann.own_mut().nprobes = Some(Nprobes::Fixed(nprobes));
    ann.own_mut().refine_factor = refine;
    let got = ds.search_batch(&ann).unwrap();
    let mut hit = 0;
    for (t, g) in truth.hits.iter().zip(&got.hits) {
        let t: std::collections::HashSet<u64> = t.iter().map(|h| h.row_id).collect();
        hit += g.iter().filter(|h| t.contains(&h.row_id)).count();
    }
    hit as f64 / (10 * qs.len()) as f64
}

#[test]
fn recall_floors_per_index_type_metric_and_nprobes() {
    // Floors sit a little under what these seeded sets give (measured:
    // flat ≥ 0.998, sq ≥ 0.97, pq 0.59 l2 / 0.62 dot / 0.62 cosine), so that
    // a regression in training, encoding or probing shows up. Cosine PQ
    // gave 0.25 while it scored the inner product with the reconstruction
    // against unit centroids (decision 0018): on these tight clusters that
    // error is large next to the tiny cosine gaps between neighbours.
    let cases = [
        (IndexKind::IvfFlat, 2, [0.95, 0.95, 0.95]),
        (IndexKind::IvfFlat, 8, [0.99, 0.99, 0.99]),
        (IndexKind::IvfSq, 8, [0.93, 0.93, 0.93]),
        (IndexKind::IvfPq { sub_vectors: 8 }, 8, [0.5, 0.55, 0.5]),
        // RaBitQ over D' = 64 rotated dimensions (measured: 1 bit 0.49 l2 /
        // 0.22 cosine / 0.54 dot, 2 bits 0.69 / 0.34 / 0.71, 4 bits 0.91 /
        // 0.72 / 0.91). At 32 dimensions PQ's 4-dimensional codebooks beat
        // it byte for byte; on 384-dimensional embeddings the gap closes
        // (docs/PERFORMANCE.md).
        (IndexKind::IvfRq { bits: 1 }, 8, [0.45, 0.18, 0.5]),
        (IndexKind::IvfRq { bits: 2 }, 8, [0.65, 0.3, 0.67]),
        (IndexKind::IvfRq { bits: 4 }, 8, [0.88, 0.68, 0.88]),
    ];
    for (mi, metric) in [Metric::L2, Metric::Cosine, Metric::Dot]
        .into_iter()
        .enumerate()
    {
        let dir = tempfile::tempdir().unwrap();
        let (mut ds, qs) = clustered_dataset(dir.path(), metric);
        for (kind, nprobes, floors) in cases {
            let floor = floors[mi];
            ds.create_index(None, IndexParams::new(kind, 32)).unwrap();
            let r = recall(&ds, &qs, nprobes, None);
            assert!(
                r >= floor,
                "{metric} {} nprobes {nprobes}: recall {r:.3} < {floor}",
                kind.name()
            );
            if matches!(kind, IndexKind::IvfPq { .. } | IndexKind::IvfRq { bits: 4 }) {
                let refined = recall(&ds, &qs, nprobes, Some(10));
                assert!(
                    refined >= 0.9 && refined > r,
                    "{metric} {} refine: {refined:.3} (without {r:.3})",
                    kind.name()
                );
            }
        }
    }
}

/// On 128-dimensional data of many small clusters, RaBitQ beats PQ byte
/// for byte: one bit per dimension (16 bytes a row) against PQ's 16 bytes
/// (m = 16, 8 dimensions a byte), measured 0.637 against 0.583 (on
/// 1,000,000 × 128 of the same generator, 2 bits against m = 32: 0.528
/// against 0.507; docs/PERFORMANCE.md).
#[test]
fn rabitq_recall_passes_a_floor_pq_of_the_same_code_size_does_not_reach() {
    let dim = 128;
    let all = clustered_vectors(20_000 + 200, dim, 1000, 3);
    let dir = tempfile::tempdir().unwrap();
    let mut ds = Dataset::create(
        dir.path(),
        demo_schema("vector", dim, Metric::L2).unwrap(),
        Config::default(),
    )
    .unwrap();
    ds.append([demo_batch("vector", dim, &all[..20_000 * dim], 0)])
        .unwrap();
    // Queries as `shoal bench --mode ivf` makes them: the same clusters,
    // wider noise.
    let qs: Vec<Vec<f32>> =
        shoal::demo::clustered_vectors_with_noise(20_000 + 200, dim, 1000, 0.6, 3)[20_000 * dim..]
            .chunks(dim)
            .map(|c| c.to_vec())
            .collect();
    let mut recall_of = |kind| {
        ds.create_index(None, IndexParams::new(kind, 64)).unwrap();
        recall(&ds, &qs, 8, None)
    };
    let pq = recall_of(IndexKind::IvfPq { sub_vectors: 16 });
    let rq = recall_of(IndexKind::IvfRq { bits: 1 });
    let floor = 0.62;
    assert!(rq >= floor, "ivf_rq 1 bit: recall {rq:.3} < {floor}");
    assert!(
        pq < floor,
        "ivf_pq m 16 reached {pq:.3}: the floor no longer separates them"
    );
}

#[test]
fn refine_reranks_with_exact_distances() {
    let dir = tempfile::tempdir().unwrap();
    let (mut ds, qs) = clustered_dataset(dir.path(), Metric::L2);
    ds.create_index(
        None,
        IndexParams::new(IndexKind::IvfPq { sub_vectors: 4 }, 16),
    )
    .unwrap();
    let mut exact = BatchQuery::new(qs[..20].to_vec(), 5);
    exact.shared.mode = SearchMode::Exact;
    let truth = ds.search_batch(&exact).unwrap();
    let exact_of: std::collections::HashMap<u64, u32> = {
        // Exact distances of every row these queries could return.
        let mut wide = exact.clone();
        wide.k = PerQuery::All(6000);
        let mut m = std::collections::HashMap::new();
        for (qi, hs) in ds.search_batch(&wide).unwrap().hits.iter().enumerate() {
            for h in hs {
                m.insert(h.row_id ^ ((qi as u64) << 48), h.distance.to_bits());
            }
        }
        m
    };
    for refine in [1usize, 4] {
        let mut ann = BatchQuery::new(qs[..20].to_vec(), 5);
        ann.own_mut().refine_factor = Some(refine);
        ann.own_mut().nprobes = Some(Nprobes::Fixed(16));
        let got = ds.search_batch(&ann).unwrap();
        for (qi, hs) in got.hits.iter().enumerate() {
            for h in hs {
                assert_eq!(
                    Some(&h.distance.to_bits()),
                    exact_of.get(&(h.row_id ^ ((qi as u64) << 48))),
                    "refined distance is exact"
                );
            }
        }
        if refine == 4 {
            assert_eq!(
                got.hits.iter().map(|h| h.len()).sum::<usize>(),
                truth.hits.iter().map(|h| h.len()).sum::<usize>()
            );
        }
    }
}

#[test]
fn delta_segments_match_a_fresh_index_with_the_same_model() {
    for kind in [
        IndexKind::IvfFlat,
        IndexKind::IvfSq,
        IndexKind::IvfPq { sub_vectors: 4 },
        IndexKind::IvfRq { bits: 2 },
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (mut ds, rows) = build(dir.path(), &[600], 16, Metric::L2, 3);
        ds.create_index(None, IndexParams::new(kind, 8)).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(4);
        let more = make_rows(&mut rng, 600, 300, 16);
        ds.append([Ok(batch_of(&more, 16))]).unwrap();
        let qs = queries(&rows, 25);
        let mut b = BatchQuery::new(qs.clone(), 12);
        b.own_mut().nprobes = Some(Nprobes::Fixed(3));
        b.shared.mode = SearchMode::PerQuery;
        // Before optimize the new fragment is scanned exactly; with
        // fast_search it is skipped.
        let mut fast = b.clone();
        fast.shared.fast_search = true;
        assert!(ds
            .search_batch(&fast)
            .unwrap()
            .hits
            .iter()
            .flatten()
            .all(|h| h.id < 600));
        let built = ds.optimize().unwrap().segments;
        assert_eq!(built.len(), 1);
        assert_eq!(built[0].fragments, vec![1]);
        assert!(
            ds.optimize().unwrap().segments.is_empty(),
            "nothing left to index"
        );
        assert_eq!(ds.delete("id < 100").unwrap().rows, 100);
        let after = hits(&ds, &b);
        // A fresh single segment over both fragments with the same model.
        let base = ds
            .segments("emb")
            .unwrap()
            .into_iter()
            .find(|s| s.meta.trained_in == s.meta.id)
            .unwrap();
        let fragments = ds.fragments().unwrap();
        let (meta, _) = build_segment(
            &shoal::internals::DatasetRoot::local(ds.root()),
            "emb",
            16,
            Metric::L2,
            &base.meta.params,
            &fragments,
            Some((&base.model, &base.meta.id)),
            &mut |_: &str, _: usize, _: usize| {},
        )
        .unwrap();
        let fresh = Arc::new(
            LoadedSegment::open(&shoal::internals::DatasetRoot::local(ds.root()), &meta, 16)
                .unwrap(),
        );
        let view = IndexView {
            fragments: &fragments,
            indexed: true,
            segments: vec![fresh],
            graphs: Vec::new(),
            cache: ds.partition_cache(),
            threads: 2,
            pool: ds.session().pool(),
            cancel: &shoal::CancelToken::new(),
            filters: ds.session().filter_cache(),
        };
        let validated = ValidatedBatch::new(&b, ds.schema(), &Config::default().limits).unwrap();
        let (cands, _) = shoal::internals::execute(&view, &validated).unwrap();
        let fresh_hits: Vec<Vec<(u64, u32)>> = cands
            .iter()
            .map(|c| c.iter().map(|c| (c.row_id, c.distance.to_bits())).collect())
            .collect();
        assert_eq!(after, fresh_hits, "{}", kind.name());
        // Deleted rows never come back; a reopened dataset answers the same.
        assert!(ds
            .search_batch(&b)
            .unwrap()
            .hits
            .iter()
            .flatten()
            .all(|h| h.id >= 100));
        let reopened = Dataset::open(dir.path()).unwrap();
        assert_eq!(hits(&reopened, &b), after);
    }
}

#[test]
fn adaptive_probing_is_bounded_and_fills_k_under_selective_filters() {
    let dir = tempfile::tempdir().unwrap();
    let (mut ds, qs) = clustered_dataset(dir.path(), Metric::L2);
    ds.create_index(None, IndexParams::new(IndexKind::IvfFlat, 32))
        .unwrap();
    // 1 row in 40 matches (150 of 6,000; the filter this test had before,
    // `len = 7 AND category = 'verb'`, matched none, so its check below
    // never ran: it now counts that it did).
    let filter = "len = 7";
    for max in [4usize, 12] {
        let mut adaptive = BatchQuery::new(qs[..30].to_vec(), 10);
        adaptive.own_mut().filter = Some(filter.into());
        adaptive.own_mut().nprobes = Some(Nprobes::Adaptive { min: 2, max });
        let (res, profile) = ds.explain(&adaptive).unwrap();
        assert!(
            profile.pairs_probed <= (30 * max) as u64,
            "{}",
            profile.render()
        );
        assert!(profile.pairs_probed >= 30 * 2);
        let mut fixed = adaptive.clone();
        fixed.own_mut().nprobes = Some(Nprobes::Fixed(max));
        let within_max = ds.search_batch(&fixed).unwrap();
        let mut full = 0;
        for (a, f) in res.hits.iter().zip(&within_max.hits) {
            if f.len() == 10 {
                full += 1;
                assert_eq!(a.len(), 10, "k matching rows exist within max partitions");
            }
        }
        assert!(
            full > 0,
            "no query had k matching rows within max partitions"
        );
    }
}

#[test]
fn bad_index_parameters_and_options_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (mut ds, rows) = build(dir.path(), &[100], 12, Metric::L2, 1);
    let v = ds.version();
    let err = |r: Result<shoal::Commit, Error>| r.unwrap_err().to_string();
    assert!(
        err(ds.create_index(None, IndexParams::new(IndexKind::IvfFlat, 0))).contains("at least 1")
    );
    assert!(
        err(ds.create_index(None, IndexParams::new(IndexKind::IvfFlat, 101)))
            .contains("101 partitions for 100 rows")
    );
    assert!(err(ds.create_index(
        None,
        IndexParams::new(IndexKind::IvfPq { sub_vectors: 5 }, 4)
    ))
    .contains("divide"));
    assert!(matches!(
        ds.create_index(Some("len"), IndexParams::new(IndexKind::IvfFlat, 4)),
        Err(Error::WrongColumnType { .. })
    ));
    assert_eq!(ds.version(), v, "failed builds commit nothing");
    ds.create_index(None, IndexParams::new(IndexKind::IvfFlat, 4))
        .unwrap();
    let q = rows[0].vector.clone();
    let bad = |f: &dyn Fn(&mut Query)| {
        let mut query = Query::new(q.clone(), 5);
        f(&mut query);
        ds.search(&query).unwrap_err().to_string()
    };
    assert!(bad(&|q| q.own_mut().nprobes = Some(Nprobes::Fixed(0))).contains("nprobes"));
    assert!(
        bad(&|q| q.own_mut().nprobes = Some(Nprobes::Adaptive { min: 5, max: 2 })).contains("min")
    );
    assert!(bad(&|q| q.own_mut().refine_factor = Some(0)).contains("refine"));
    assert!(bad(&|q| q.shared.metric = Some(Metric::Cosine)).contains("built for metric l2"));
    // The same metric mismatch searched exactly is fine.
    let mut exact = Query::new(q.clone(), 5);
    exact.shared.metric = Some(Metric::Cosine);
    exact.shared.use_index = false;
    let (_, profile) = ds.explain(&exact.into_batch()).unwrap();
    assert_eq!(profile.mode, SearchMode::Exact);
}

#[test]
fn a_corrupt_or_missing_partition_file_is_reported_never_scored() {
    let dir = tempfile::tempdir().unwrap();
    let (mut ds, rows) = build(dir.path(), &[300], 8, Metric::L2, 1);
    let meta = ds
        .create_index(None, IndexParams::new(IndexKind::IvfFlat, 4))
        .unwrap();
    let path = dir
        .path()
        .join("indices")
        .join(&meta.segments[0].id)
        .join("partitions.bin");
    let mut bytes = std::fs::read(&path).unwrap();
    let n = bytes.len();
    for b in &mut bytes[n / 2..n / 2 + 8] {
        *b ^= 0xff;
    }
    std::fs::write(&path, &bytes).unwrap();
    let reopened = Dataset::open(dir.path()).unwrap();
    let mut q = Query::new(rows[0].vector.clone(), 5);
    q.own_mut().nprobes = Some(Nprobes::Fixed(4));
    let err = reopened.search(&q).unwrap_err();
    assert!(
        matches!(err, Error::Corrupt { .. }) && !err.is_user_error(),
        "{err}"
    );
    std::fs::remove_file(
        dir.path()
            .join("indices")
            .join(&meta.segments[0].id)
            .join("model.bin"),
    )
    .unwrap();
    let err = Dataset::open(dir.path()).unwrap().search(&q).unwrap_err();
    assert!(err.to_string().contains("missing"), "{err}");
}

#[test]
fn a_cache_smaller_than_one_partition_still_answers_correctly() {
    let dir = tempfile::tempdir().unwrap();
    let (mut ds, rows) = build(dir.path(), &[500], 8, Metric::L2, 2);
    ds.create_index(None, IndexParams::new(IndexKind::IvfFlat, 4))
        .unwrap();
    let tiny = Dataset::open_with_config(
        dir.path(),
        Config::from_toml_str("[cache]\ncapacity_bytes = 64\n").unwrap(),
    )
    .unwrap();
    let mut b = BatchQuery::new(queries(&rows, 10), 7);
    b.own_mut().nprobes = Some(Nprobes::Fixed(4));
    let mut exact = b.clone();
    exact.shared.mode = SearchMode::Exact;
    assert_eq!(hits(&tiny, &b), hits(&tiny, &exact));
    let (_, p) = tiny.explain(&b).unwrap();
    assert_eq!(p.mode, SearchMode::Shared);
    assert_eq!(
        p.cache_hits + p.cache_misses,
        p.distinct_partitions,
        "{}",
        p.render()
    );
    b.shared.mode = SearchMode::PerQuery;
    assert_eq!(hits(&tiny, &b), hits(&tiny, &exact));
    let (_, p) = tiny.explain(&b).unwrap();
    assert_eq!(
        p.cache_hits + p.cache_misses,
        p.pairs_probed,
        "{}",
        p.render()
    );
    assert!(tiny.partition_cache().counters().misses > 0);
}

/// Two vector columns, each with its own index: `optimize` adds exactly one
/// delta segment per column per run, and no row is ever returned twice.
#[test]
fn optimize_with_two_indexed_columns_builds_one_delta_per_column() {
    use arrow_array::{ArrayRef, FixedSizeListArray, Float32Array, Int64Array, RecordBatch};
    use arrow_schema::{DataType, Field};
    use shoal::{ColumnType, Schema};
    let dim = 8;
    let schema = Schema::new(vec![
        (
            "a",
            ColumnType::Vector {
                dim,
                metric: Metric::L2,
            },
        ),
        (
            "b",
            ColumnType::Vector {
                dim,
                metric: Metric::L2,
            },
        ),
    ])
    .unwrap();
    let list = |rows: &[Vec<f32>]| -> ArrayRef {
        Arc::new(
            FixedSizeListArray::try_new(
                Arc::new(Field::new("item", DataType::Float32, false)),
                dim as i32,
                Arc::new(Float32Array::from(rows.concat())),
                None,
            )
            .unwrap(),
        )
    };
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let mut batch = |first: i64, n: usize| {
        let a: Vec<Vec<f32>> = make_rows(&mut rng, first, n, dim)
            .into_iter()
            .map(|r| r.vector)
            .collect();
        let b: Vec<Vec<f32>> = a.iter().map(|v| v.iter().map(|x| -x).collect()).collect();
        RecordBatch::try_from_iter(vec![
            (
                "id",
                Arc::new(Int64Array::from_iter_values(first..first + n as i64)) as ArrayRef,
            ),
            ("a", list(&a)),
            ("b", list(&b)),
        ])
        .unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let mut ds = Dataset::create(dir.path(), schema, Config::default()).unwrap();
    ds.append([Ok(batch(0, 300))]).unwrap();
    for column in ["a", "b"] {
        ds.create_index(Some(column), IndexParams::new(IndexKind::IvfFlat, 4))
            .unwrap();
    }
    let mut next = 300;
    for round in 1..=2 {
        ds.append([Ok(batch(next, 100))]).unwrap();
        next += 100;
        let built = ds.optimize().unwrap().segments;
        let mut columns: Vec<&str> = built.iter().map(|m| m.column.as_str()).collect();
        columns.sort();
        assert_eq!(columns, ["a", "b"], "round {round}: one delta per column");
        assert!(ds.optimize().unwrap().segments.is_empty());
    }
    for column in ["a", "b"] {
        let segments: Vec<_> = ds
            .index_segments()
            .iter()
            .filter(|m| m.column == column)
            .collect();
        assert_eq!(segments.len(), 3, "base + two deltas on '{column}'");
        let mut covered: Vec<u32> = segments.iter().flat_map(|m| m.fragments.clone()).collect();
        covered.sort();
        assert_eq!(
            covered,
            vec![0, 1, 2],
            "each fragment indexed once on '{column}'"
        );
        let q = vec![vec![0.5f32; dim]; 3];
        let mut indexed = BatchQuery::new(q.clone(), 500);
        indexed.shared.column = Some(column.into());
        indexed.own_mut().nprobes = Some(Nprobes::Fixed(4));
        let res = ds.search_batch(&indexed).unwrap();
        for hits in &res.hits {
            let mut ids: Vec<u64> = hits.iter().map(|h| h.row_id).collect();
            assert_eq!(ids.len(), 500, "every row once");
            ids.sort();
            ids.dedup();
            assert_eq!(ids.len(), 500, "no row twice on '{column}'");
        }
        let mut exact = indexed.clone();
        exact.shared.mode = SearchMode::Exact;
        assert_eq!(hits(&ds, &indexed), hits(&ds, &exact), "full probe = exact");
    }
}

/// Lengths and counts read from an index's files are checked before use: a
/// segment.json partition length past the end of partitions.bin, or a
/// partition header whose row count (outside the body's CRC) disagrees
/// with segment.json, is `Corrupt` — never a huge allocation, never rows
/// silently dropped from results.
#[test]
fn lying_partition_lengths_and_row_counts_are_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let (mut ds, rows) = build(dir.path(), &[300], 8, Metric::L2, 1);
    let meta = ds
        .create_index(None, IndexParams::new(IndexKind::IvfFlat, 4))
        .unwrap();
    let seg = dir.path().join("indices").join(&meta.segments[0].id);
    let mut q = Query::new(rows[0].vector.clone(), 5);
    q.own_mut().nprobes = Some(Nprobes::Fixed(4));
    let search = || Dataset::open(dir.path()).unwrap().search(&q);
    let good = search().unwrap();

    let directory_path = seg.join("segment.json");
    let original = std::fs::read_to_string(&directory_path).unwrap();
    let mut directory: serde_json::Value = serde_json::from_str(&original).unwrap();
    directory["partitions"][0]["len"] = 1_000_000_000_000_000u64.into();
    std::fs::write(&directory_path, directory.to_string()).unwrap();
    let err = search().unwrap_err();
    assert!(
        matches!(&err, Error::Corrupt { path, .. } if path.ends_with("partitions.bin"))
            && err.to_string().contains("segment.json places partition 0"),
        "{err}"
    );
    std::fs::write(&directory_path, &original).unwrap();
    assert_eq!(search().unwrap().hits, good.hits);

    // Lower one partition header's row count by one.
    let directory: serde_json::Value = serde_json::from_str(&original).unwrap();
    let (p, entry) = directory["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .find(|(_, e)| e["rows"].as_u64().unwrap() > 1)
        .unwrap();
    let at = entry["offset"].as_u64().unwrap() as usize + 12;
    let parts_path = seg.join("partitions.bin");
    let mut bytes = std::fs::read(&parts_path).unwrap();
    let header_rows = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    assert_eq!(
        u64::from(header_rows),
        entry["rows"].as_u64().unwrap(),
        "partition {p}"
    );
    bytes[at..at + 4].copy_from_slice(&(header_rows - 1).to_le_bytes());
    std::fs::write(&parts_path, &bytes).unwrap();
    let err = search().unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
}
