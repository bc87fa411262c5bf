//! The shared partition scan: identical to the single-query path, explicit
//! fallbacks, cache counters.

use crate::common::OwnMut;
use crate::common::*;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use shoal::{BatchQuery, Dataset, Metric, Query};
use shoal::{IndexKind, IndexParams};
use shoal::{Nprobes, PerQuery, SearchMode};
use std::sync::OnceLock;

struct Fixture {
    _dir: tempfile::TempDir,
    ds: Dataset,
    rows: Vec<Row>,
}

const KINDS: [IndexKind; 4] = [
    IndexKind::IvfFlat,
    IndexKind::IvfPq { sub_vectors: 4 },
    IndexKind::IvfSq,
    IndexKind::IvfRq { bits: 3 },
];
const METRICS: [Metric; 3] = [Metric::L2, Metric::Cosine, Metric::Dot];

/// Fragments 0–1 in a trained segment, 2 in a delta segment, 3 unindexed;
/// deletions in several fragments.
fn fixture(kind: usize, metric: usize) -> &'static Fixture {
    static CELLS: [[OnceLock<Fixture>; 3]; 4] = [const { [const { OnceLock::new() }; 3] }; 4];
    CELLS[kind][metric].get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let dim = 16;
        let (mut ds, mut rows) = build(
            dir.path(),
            &[250, 130],
            dim,
            METRICS[metric],
            40 + kind as u64,
        );
        ds.create_index(None, IndexParams::new(KINDS[kind], 8))
            .unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let delta = make_rows(&mut rng, rows.len() as i64, 120, dim);
        ds.append([Ok(batch_of(&delta, dim))]).unwrap();
        rows.extend(delta);
        ds.optimize().unwrap();
        let tail = make_rows(&mut rng, rows.len() as i64, 70, dim);
        ds.append([Ok(batch_of(&tail, dim))]).unwrap();
        rows.extend(tail);
        ds.delete("len = 9 OR id IN (3, 260, 400, 530)").unwrap();
        assert_eq!(ds.index_segments().len(), 2);
        Fixture {
            _dir: dir,
            ds,
            rows,
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn shared_scan_results_are_bit_identical_to_the_single_query_path(
        kind in 0usize..4,
        metric in 0usize..3,
        seed in any::<u64>(),
        size in 1usize..300,
        nprobes in 1usize..9,
        filter in 0usize..4,
    ) {
        let f = fixture(kind, metric);
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let vectors = random_queries(&mut rng, &f.rows, size, 16);
        let ks: Vec<usize> = (0..size).map(|_| rng.random_range(1..30)).collect();
        let offsets: Vec<usize> = (0..size).map(|_| rng.random_range(0..4)).collect();
        let filter = [None, Some("len = 3"), Some("len > 1000"), Some("category IN ('noun', 'verb')")][filter];
        let mut batch = BatchQuery::new(vectors.clone(), 1);
        batch.k = PerQuery::Each(ks.clone());
        batch.offset = PerQuery::Each(offsets.clone());
        batch.own_mut().filter = filter.map(String::from);
        batch.shared.mode = SearchMode::Shared;
        batch.own_mut().nprobes = Some(Nprobes::Fixed(nprobes));
        let (shared, profile) = f.ds.explain(&batch).unwrap();
        prop_assert_eq!(profile.mode, SearchMode::Shared);
        prop_assert!(profile.distinct_partitions <= profile.pairs_probed);
        for i in 0..size {
            let mut q = Query::new(vectors[i].clone(), ks[i]);
            q.offset = offsets[i];
            q.own_mut().filter = filter.map(String::from);
            q.shared.mode = SearchMode::PerQuery;
            q.own_mut().nprobes = Some(Nprobes::Fixed(nprobes));
            let alone = f.ds.search(&q).unwrap();
            let a: Vec<(u64, u32)> = alone.hits.iter().map(|h| (h.row_id, h.distance.to_bits())).collect();
            let b: Vec<(u64, u32)> = shared.hits[i].iter().map(|h| (h.row_id, h.distance.to_bits())).collect();
            prop_assert_eq!(a, b, "query {} of {}", i, size);
        }
    }
}

#[test]
fn modes_are_the_documented_ones_and_match_the_single_query_path() {
    let f = fixture(0, 0);
    let vectors: Vec<Vec<f32>> = f
        .rows
        .iter()
        .step_by(37)
        .map(|r| r.vector.clone())
        .collect();
    let single = |q: &BatchQuery| -> Vec<Vec<(u64, u32)>> {
        q.vectors
            .iter()
            .map(|v| {
                let mut one = q.clone();
                one.vectors = vec![v.clone()];
                one.shared.mode = SearchMode::PerQuery;
                f.ds.search_batch(&one).unwrap().hits[0]
                    .iter()
                    .map(|h| (h.row_id, h.distance.to_bits()))
                    .collect()
            })
            .collect()
    };
    let ids = |r: &shoal::SearchResults| -> Vec<Vec<(u64, u32)>> {
        r.hits
            .iter()
            .map(|h| h.iter().map(|h| (h.row_id, h.distance.to_bits())).collect())
            .collect()
    };
    let base = BatchQuery::new(vectors.clone(), 10);
    let cases: Vec<(BatchQuery, &str, Option<&str>)> = vec![
        (base.clone(), "shared_scan", None),
        (
            {
                let mut b = base.clone();
                b.own_mut().nprobes = Some(Nprobes::Adaptive { min: 1, max: 4 });
                b
            },
            "shared_scan",
            None,
        ),
        (
            {
                let mut b = base.clone();
                b.own_mut().refine_factor = Some(1);
                b
            },
            "shared_scan",
            None,
        ),
        (
            {
                let mut b = base.clone();
                b.own_mut().refine_factor = Some(3);
                b
            },
            "shared_scan",
            None,
        ),
        (
            {
                let mut b = base.clone();
                b.shared.use_index = false;
                b.shared.mode = SearchMode::Shared;
                b
            },
            "exact",
            Some("use_index = false"),
        ),
    ];
    for (batch, mode, reason) in cases {
        let (res, profile) = f.ds.explain(&batch).unwrap();
        assert_eq!(profile.mode.as_str(), mode, "{batch:?}");
        assert_eq!(profile.fallback_reason.as_deref(), reason);
        if mode != "exact" {
            assert_eq!(ids(&res), single(&batch), "{mode} {reason:?}");
        }
    }
    // No index at all: exact, with the reason when an index mode was asked for.
    let dir = tempfile::tempdir().unwrap();
    let (plain, rows) = build(dir.path(), &[90, 40], 8, Metric::L2, 3);
    let mut b = BatchQuery::new(rows.iter().take(5).map(|r| r.vector.clone()).collect(), 4);
    b.shared.mode = SearchMode::Shared;
    let (res, profile) = plain.explain(&b).unwrap();
    assert_eq!(profile.mode, SearchMode::Exact);
    assert!(profile
        .fallback_reason
        .as_deref()
        .unwrap_or("")
        .contains("no index"));
    b.shared.mode = SearchMode::Exact;
    assert_eq!(ids(&res), ids(&plain.search_batch(&b).unwrap()));
}

#[test]
fn each_distinct_partition_is_read_once_per_batch_and_counters_add_up() {
    let dir = tempfile::tempdir().unwrap();
    let (mut ds, rows) = build(dir.path(), &[800], 8, Metric::L2, 5);
    ds.create_index(None, IndexParams::new(IndexKind::IvfFlat, 16))
        .unwrap();
    // A cold, private cache for this handle.
    let cold = Dataset::open(dir.path()).unwrap();
    let vectors: Vec<Vec<f32>> = rows.iter().step_by(10).map(|r| r.vector.clone()).collect();
    let mut b = BatchQuery::new(vectors.clone(), 5);
    b.own_mut().nprobes = Some(Nprobes::Fixed(6));
    let (_, p) = cold.explain(&b).unwrap();
    assert_eq!(p.mode, SearchMode::Shared);
    assert_eq!(p.pairs_probed, 6 * vectors.len() as u64);
    assert!(p.distinct_partitions <= 16 && p.distinct_partitions < p.pairs_probed);
    assert_eq!(
        p.cache_hits + p.cache_misses,
        p.distinct_partitions,
        "{}",
        p.render()
    );
    assert_eq!(
        p.cache_misses, p.distinct_partitions,
        "a cold cache loads each distinct partition once"
    );
    assert!(p.bytes_read > 0);
    // The bytes scanned are those of the distinct partitions, each once:
    // what the cold cache now holds by its own weigher.
    assert_eq!(
        p.partition_bytes,
        cold.partition_cache().weighted_size(),
        "{}",
        p.render()
    );
    // The scan phase's thread accounting: each share works inside the
    // phase, so the busy time never exceeds shares × wall.
    assert!(p.scan_shares >= 1, "{}", p.render());
    assert!(p.share_busy_ms > 0.0 && p.share_busy_ms <= p.share_capacity_ms);
    assert!(
        p.share_max_ms <= p.scan_parallel_ms
            && p.share_max_ms * 1.000001 >= p.share_busy_ms / p.scan_shares as f64
    );
    assert!(p.thread_utilisation() > 0.0 && p.thread_utilisation() <= 1.0);
    assert!(p.render().contains("scan shares"));
    let (_, again) = cold.explain(&b).unwrap();
    assert_eq!(
        again.cache_misses, 0,
        "the second batch is served from the cache"
    );
    assert_eq!(again.cache_hits, again.distinct_partitions);
    // The per-query path asks the cache once per (query, partition) pair.
    b.shared.mode = SearchMode::PerQuery;
    let (_, pq) = cold.explain(&b).unwrap();
    assert_eq!(pq.cache_hits + pq.cache_misses, pq.pairs_probed);
    // ... and reads a partition through once per query that probes it.
    assert!(pq.partition_bytes > p.partition_bytes, "{}", pq.render());
    let mut one = BatchQuery::new(vec![vectors[0].clone()], 5);
    one.own_mut().nprobes = Some(Nprobes::Fixed(6));
    let (_, shared_one) = cold.explain(&one).unwrap();
    one.shared.mode = SearchMode::PerQuery;
    let (_, alone) = cold.explain(&one).unwrap();
    assert_eq!(shared_one.partition_bytes, alone.partition_bytes);
    let counters = cold.partition_cache().counters();
    assert_eq!(counters.misses, p.cache_misses);
}

#[test]
fn concurrent_loads_of_one_partition_load_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let (mut ds, rows) = build(dir.path(), &[600], 8, Metric::L2, 6);
    ds.create_index(None, IndexParams::new(IndexKind::IvfFlat, 4))
        .unwrap();
    let cold = Dataset::open(dir.path()).unwrap();
    let mut q = Query::new(rows[0].vector.clone(), 3);
    q.own_mut().nprobes = Some(Nprobes::Fixed(4));
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| cold.search(&q).unwrap());
        }
    });
    let c = cold.partition_cache().counters();
    assert_eq!(c.misses, 4, "{c:?}");
    assert_eq!(c.hits + c.misses, 8 * 4);
}

/// A dataset of `fragments` (`dim`-wide rows, seeded), indexed with `kind`
/// in `partitions` partitions, rows with `len = 4` deleted, opened twice:
/// with one scan thread and with four.
fn indexed_on_one_and_four_threads(
    fragments: &[usize],
    dim: usize,
    kind: IndexKind,
    partitions: usize,
    metric: Metric,
    seed: u64,
) -> (tempfile::TempDir, Vec<Row>, Dataset, Dataset) {
    let dir = tempfile::tempdir().unwrap();
    let (mut ds, rows) = build(dir.path(), fragments, dim, metric, seed);
    ds.create_index(None, IndexParams::new(kind, partitions))
        .unwrap();
    ds.delete("len = 4").unwrap();
    let open = |threads: usize| {
        let mut config = shoal::Config::default();
        config.search.threads = threads;
        Dataset::open_with_config(dir.path(), config).unwrap()
    };
    let (one, four) = (open(1), open(4));
    (dir, rows, one, four)
}

/// A lone query over enough rows is scanned on several threads (its
/// partitions shared out, one heap per share, merged): the rows and the
/// distance bits are exactly those of a one-thread scan, ties, filters and
/// deletions included, for every metric and index kind.
#[test]
fn a_lone_query_split_over_threads_answers_bit_for_bit_as_one_thread() {
    // 24,000 rows in 8 partitions: a query probing 4 scores ~12,000 rows,
    // well above the one-thread threshold. PQ and one-bit RaBitQ split a
    // lone query only from 131,072 code rows: 160,000 rows, all 8
    // partitions probed. RaBitQ above one bit keeps a lone query's walk on
    // one thread (checked below on the same large data, so that a split
    // would be tried).
    let small: (&[usize], usize) = (&[12_000, 12_000], 4);
    let large: (&[usize], usize) = (&[80_000, 80_000], 8);
    for (kind, metric, (fragments, nprobes)) in [
        (IndexKind::IvfFlat, Metric::L2, small),
        (IndexKind::IvfFlat, Metric::Cosine, small),
        (IndexKind::IvfSq, Metric::Dot, small),
        (IndexKind::IvfPq { sub_vectors: 4 }, Metric::L2, large),
        (IndexKind::IvfPq { sub_vectors: 4 }, Metric::Cosine, large),
        (IndexKind::IvfRq { bits: 2 }, Metric::L2, large),
        (IndexKind::IvfRq { bits: 4 }, Metric::Dot, large),
        (IndexKind::IvfRq { bits: 1 }, Metric::Cosine, large),
    ] {
        let (_dir, rows, one, four) =
            indexed_on_one_and_four_threads(fragments, 8, kind, 8, metric, 77);
        for i in (0..rows.len()).step_by(rows.len() / 24) {
            for filter in [None, Some("len < 9"), Some("category = 'noun'")] {
                let mut q = Query::new(rows[i].vector.clone(), 25).nprobes(nprobes);
                if let Some(f) = filter {
                    q = q.filter(f);
                }
                let seen = |ds: &Dataset| -> Vec<(i64, u32)> {
                    ds.search(&q)
                        .unwrap()
                        .hits
                        .iter()
                        .map(|h| (h.id, h.distance.to_bits()))
                        .collect()
                };
                let what = format!("{kind:?} {metric:?} row {i} {filter:?}");
                assert_eq!(seen(&four), seen(&one), "{what}");
                // And the four-thread scan did split (else this compared
                // one thread with one thread): shares are counted on
                // every split path.
                let shares =
                    |ds: &Dataset| ds.explain(&q.clone().into_batch()).unwrap().1.scan_shares;
                if let IndexKind::IvfRq { bits: 2.. } = kind {
                    assert_eq!(shares(&four), 0, "{what}: a walk of its own");
                } else {
                    assert!(shares(&four) > 1, "{what}: split into {}", shares(&four));
                    assert!(shares(&one) <= 1, "{what}");
                }
                // Above one bit RaBitQ's screen skips by an error bound,
                // not an exact one, so a split into heaps of their own
                // could keep other rows; the walk must be the one-thread
                // walk, which the screen's skips show (such a split skips
                // fewer: a mutation check failed here).
                if let IndexKind::IvfRq { bits: 2.. } = kind {
                    let mut batch =
                        BatchQuery::new(vec![rows[i].vector.clone()], 25).nprobes(nprobes);
                    if let Some(f) = filter {
                        batch = batch.filter(f);
                    }
                    batch.shared.mode = SearchMode::Shared;
                    let skipped = |ds: &Dataset| ds.explain(&batch).unwrap().1.rows_bound_skipped;
                    let (on_four, on_one) = (skipped(&four), skipped(&one));
                    assert!(on_one > 0, "{what}");
                    assert_eq!(on_four, on_one, "{what}");
                }
            }
        }
    }
}

/// A large batch on four threads: centroid ranking split into groups of
/// queries, partitions handed out largest first, the threads' heaps merged
/// in groups — each query's rows and distance bits still equal the query
/// searched alone on one thread (with ties, deletions, filters, per-query
/// k and offset, and repeated query vectors).
#[test]
fn a_large_batch_on_four_threads_answers_each_query_as_alone_on_one_thread() {
    for (kind, metric) in [
        (IndexKind::IvfFlat, Metric::L2),
        (IndexKind::IvfSq, Metric::Cosine),
        (IndexKind::IvfPq { sub_vectors: 4 }, Metric::Dot),
    ] {
        let (_dir, rows, one, four) =
            indexed_on_one_and_four_threads(&[3_000, 3_000], 16, kind, 64, metric, 91);
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let size = 200;
        let mut vectors = random_queries(&mut rng, &rows, size, 16);
        // Repeated vectors keep their own query index and answer.
        for i in (0..size).step_by(17) {
            vectors[i] = vectors[0].clone();
        }
        let ks: Vec<usize> = (0..size).map(|_| rng.random_range(1..40)).collect();
        let offsets: Vec<usize> = (0..size).map(|_| rng.random_range(0..3)).collect();
        let filters = [None, Some("len < 9"), Some("category = 'noun'")];
        let mut batch = BatchQuery::new(vectors.clone(), 1);
        batch.k = PerQuery::Each(ks.clone());
        batch.offset = PerQuery::Each(offsets.clone());
        let own: Vec<_> = (0..size)
            .map(|i| shoal::PerQueryParams {
                filter: filters[i % 3].map(String::from),
                nprobes: Some(Nprobes::Fixed(6)),
                ..Default::default()
            })
            .collect();
        batch.own = PerQuery::Each(own);
        batch.shared.mode = SearchMode::Shared;
        let (shared, profile) = four.explain(&batch).unwrap();
        assert_eq!(profile.mode, SearchMode::Shared);
        for i in 0..size {
            let mut q = Query::new(vectors[i].clone(), ks[i]).nprobes(6);
            q.offset = offsets[i];
            if let Some(f) = filters[i % 3] {
                q = q.filter(f);
            }
            let seen = |hits: &[shoal::Hit]| -> Vec<(u64, u32)> {
                hits.iter()
                    .map(|h| (h.row_id, h.distance.to_bits()))
                    .collect()
            };
            assert_eq!(
                seen(&shared.hits[i]),
                seen(&one.search(&q).unwrap().hits),
                "{kind:?} {metric:?} query {i}"
            );
        }
    }
}
