//! Mixed batches: queries with their own filters, filter modes, k, offset,
//! nprobes (fixed and adaptive), refine factors and projections share one
//! scan, and each gets, bit for bit, what it gets alone.

use crate::common::*;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use shoal::{BatchQuery, Config, Dataset, Metric, Session};
use shoal::{FilterMode, Nprobes, PerQueryParams, SearchMode};
use shoal::{IndexKind, IndexParams};
use std::sync::OnceLock;

const DIM: usize = 16;
const KINDS: [IndexKind; 4] = [
    IndexKind::IvfFlat,
    IndexKind::IvfPq { sub_vectors: 4 },
    IndexKind::IvfSq,
    IndexKind::IvfRq { bits: 1 },
];
const METRICS: [Metric; 3] = [Metric::L2, Metric::Cosine, Metric::Dot];

/// Filters of every kind of selectivity: most rows, some, one row, none,
/// nulls, several columns.
const FILTERS: [&str; 9] = [
    "len < 20",
    "len = 3",
    "category IN ('noun', 'verb')",
    "id = 17",
    "len > 1000",
    "len < 5 AND flag",
    "category = 'adj' OR len IS NULL",
    "NOT flag",
    "id >= 400",
];

struct Fixture {
    _dir: tempfile::TempDir,
    ds: Dataset,
    rows: Vec<Row>,
}

/// Fragments 0–1 in a trained segment, 2 in a delta segment, 3 unindexed;
/// deletions in several fragments.
fn fixture(kind: usize, metric: usize) -> &'static Fixture {
    static CELLS: [[OnceLock<Fixture>; 3]; 4] = [const { [const { OnceLock::new() }; 3] }; 4];
    CELLS[kind][metric].get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let (mut ds, mut rows) = build(
            dir.path(),
            &[240, 140],
            DIM,
            METRICS[metric],
            90 + kind as u64,
        );
        ds.create_index(None, IndexParams::new(KINDS[kind], 8))
            .unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let delta = make_rows(&mut rng, rows.len() as i64, 110, DIM);
        ds.append([Ok(batch_of(&delta, DIM))]).unwrap();
        rows.extend(delta);
        ds.optimize().unwrap();
        let tail = make_rows(&mut rng, rows.len() as i64, 60, DIM);
        ds.append([Ok(batch_of(&tail, DIM))]).unwrap();
        rows.extend(tail);
        ds.delete("len = 7 OR id IN (17, 260, 401, 530)").unwrap();
        Fixture {
            _dir: dir,
            ds,
            rows,
        }
    })
}

/// A random query's own choices.
fn random_own(rng: &mut rand::rngs::StdRng) -> PerQueryParams {
    let columns = ["len", "category", "flag", "id"];
    PerQueryParams {
        filter: rng
            .random_bool(0.8)
            .then(|| FILTERS[rng.random_range(0..FILTERS.len())].to_string()),
        filter_mode: if rng.random_bool(0.2) {
            FilterMode::Postfilter
        } else {
            FilterMode::Prefilter
        },
        projection: columns
            .iter()
            .filter(|_| rng.random_bool(0.3))
            .map(|c| c.to_string())
            .collect(),
        nprobes: if rng.random_bool(0.4) {
            let min = rng.random_range(1..4);
            Some(Nprobes::Adaptive {
                min,
                max: rng.random_range(min..10),
            })
        } else {
            Some(Nprobes::Fixed(rng.random_range(1..10)))
        },
        ef: None,
        refine_factor: rng.random_bool(0.3).then(|| rng.random_range(1..4)),
    }
}

/// `query`'s rows as `(row_id, distance bits, values)`.
type Rows = Vec<(u64, u32, Vec<shoal::ScalarValue>)>;

fn rows_of(hits: &[shoal::Hit]) -> Rows {
    hits.iter()
        .map(|h| (h.row_id, h.distance.to_bits(), h.values.clone()))
        .collect()
}

/// Query `i` of `batch` on its own, in `mode`.
fn alone(ds: &Dataset, batch: &BatchQuery, i: usize, mode: SearchMode) -> (Rows, Vec<String>) {
    let q = batch.query(i).unwrap().mode(mode);
    let r = ds.search(&q).unwrap();
    (rows_of(&r.hits), r.projection.clone())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    /// Every query of a mixed batch — its own filter (or none), filter mode,
    /// k, offset, fixed or adaptive nprobes, refine factor and projection —
    /// gets the rows, order, f32 distances and values of `Dataset::search`
    /// alone and of the single-query path, over every index type and
    /// metric with trained and delta segments, unindexed fragments and
    /// deletions; exact batches likewise.
    #[test]
    fn each_query_of_a_mixed_batch_gets_what_it_gets_alone(
        kind in 0usize..4,
        metric in 0usize..3,
        seed in any::<u64>(),
        size in 1usize..90,
        exact in proptest::bool::weighted(0.15),
    ) {
        let f = fixture(kind, metric);
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let vectors = random_queries(&mut rng, &f.rows, size, DIM);
        let ks: Vec<usize> = (0..size).map(|_| rng.random_range(1..25)).collect();
        let offsets: Vec<usize> = (0..size).map(|_| rng.random_range(0..4)).collect();
        let each: Vec<PerQueryParams> = (0..size).map(|_| random_own(&mut rng)).collect();
        let mut batch = BatchQuery::new(vectors, 1).ks(ks).offsets(offsets).each(each);
        if exact {
            batch.shared.mode = SearchMode::Exact;
        }
        let (mixed, profile) = f.ds.explain(&batch).unwrap();
        prop_assert_eq!(profile.mode, if exact { SearchMode::Exact } else { SearchMode::Shared });
        prop_assert!(profile.fallback_reason.is_none());
        let shoal::PerQuery::Each(each) = &batch.own else { unreachable!("built with each") };
        let distinct: std::collections::HashSet<_> =
            each.iter().filter_map(|e| e.filter.clone()).collect();
        prop_assert_eq!(profile.distinct_filters, distinct.len());
        for i in 0..size {
            let (rows, projection) = alone(&f.ds, &batch, i, batch.shared.mode);
            prop_assert_eq!(mixed.projection_of(i), projection.as_slice());
            prop_assert_eq!(&rows_of(&mixed.hits[i]), &rows, "query {} of {} (alone)", i, size);
            if !exact {
                let (reference, _) = alone(&f.ds, &batch, i, SearchMode::PerQuery);
                prop_assert_eq!(&rows, &reference, "query {} of {} (single-query path)", i, size);
            }
        }
    }
}

/// A batch of queries that each bring another filter is one shared scan,
/// and the profile says how many filters it held and what they cost.
#[test]
fn queries_with_sixteen_filters_share_one_scan() {
    let f = fixture(0, 0);
    let vectors: Vec<Vec<f32>> = f
        .rows
        .iter()
        .step_by(11)
        .take(32)
        .map(|r| r.vector.clone())
        .collect();
    let each: Vec<PerQueryParams> = (0..32)
        .map(|i| PerQueryParams {
            filter: Some(format!("len < {}", 15 + i % 16)),
            nprobes: Some(Nprobes::Fixed(2)),
            ..PerQueryParams::default()
        })
        .collect();
    let batch = BatchQuery::new(vectors, 10).each(each);
    // A fresh session: nothing cached yet.
    let ds = Session::new(Config::default()).open(f.ds.root()).unwrap();
    let (_, first) = ds.explain(&batch).unwrap();
    assert_eq!(first.mode, SearchMode::Shared);
    assert_eq!(first.queries, 32);
    assert_eq!(first.distinct_filters, 16);
    assert!(
        first.prefilter_builds > 0 && first.filter_rows_tested > 0,
        "{first:?}"
    );
    // Filters are tested on the probed partitions' rows (16 filters, each
    // on its own partitions) and on the unindexed fragment, never on every
    // row once per filter and query.
    let rows: u64 = f.rows.len() as u64;
    assert!(first.filter_rows_tested < 16 * rows, "{first:?}");
    // The same filters again: every result comes from the filter cache.
    let (_, again) = ds.explain(&batch).unwrap();
    assert_eq!(again.prefilter_builds, 0, "{again:?}");
    assert_eq!(again.filter_rows_tested, 0);
    assert!(again.filter_cache_hits > 0);
}

/// Filters admitting no row, one row, k − 1 and k rows: with every
/// partition probed, a prefilter returns exactly the admitted visible
/// rows, nearest first, as brute force says; shared, alone and per-query
/// agree.
#[test]
fn filters_admitting_zero_one_k_minus_one_and_k_rows() {
    let f = fixture(0, 0);
    let k = 6;
    let visible: Vec<&Row> = f
        .rows
        .iter()
        .filter(|r| r.len != Some(7) && ![17, 260, 401, 530].contains(&r.id))
        .collect();
    let ids = |n: usize| -> String {
        visible
            .iter()
            .step_by(53)
            .take(n)
            .map(|r| r.id.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let filters = [
        ("len > 1000".to_string(), 0),
        (format!("id IN ({})", ids(1)), 1),
        (format!("id IN ({})", ids(k - 1)), k - 1),
        (format!("id IN ({})", ids(k)), k),
        (format!("id IN ({})", ids(k + 3)), k),
    ];
    let vectors: Vec<Vec<f32>> = f
        .rows
        .iter()
        .step_by(41)
        .take(filters.len())
        .map(|r| r.vector.clone())
        .collect();
    let each: Vec<PerQueryParams> = filters
        .iter()
        .map(|(sql, _)| PerQueryParams {
            filter: Some(sql.clone()),
            nprobes: Some(Nprobes::Fixed(8)),
            ..PerQueryParams::default()
        })
        .collect();
    let batch = BatchQuery::new(vectors.clone(), k).each(each);
    let res = f.ds.search_batch(&batch).unwrap();
    for (i, (sql, expected)) in filters.iter().enumerate() {
        assert_eq!(res.hits[i].len(), *expected, "{sql}");
        let (alone_rows, _) = alone(&f.ds, &batch, i, SearchMode::Auto);
        assert_eq!(rows_of(&res.hits[i]), alone_rows, "{sql}");
        let (per_query, _) = alone(&f.ds, &batch, i, SearchMode::PerQuery);
        assert_eq!(alone_rows, per_query, "{sql}");
        let mut exact = batch.clone();
        exact.shared.mode = SearchMode::Exact;
        let (exact_rows, _) = alone(&f.ds, &exact, i, SearchMode::Exact);
        let ids: Vec<u64> = res.hits[i].iter().map(|h| h.row_id).collect();
        let exact_ids: Vec<u64> = exact_rows.iter().map(|r| r.0).collect();
        assert_eq!(ids, exact_ids, "{sql}: every partition probed is exact");
    }
}

/// Filter results are cached per partition and fragment; appends and
/// deletes of later versions must not leak through: after a filter was
/// cached, rows matching it are appended and others deleted, and every
/// search equals the same search in a fresh session (nothing cached).
#[test]
fn cached_filter_results_follow_appends_deletes_and_optimize() {
    let dir = tempfile::tempdir().unwrap();
    let (mut ds, mut rows) = build(dir.path(), &[300, 150], DIM, Metric::L2, 5);
    ds.create_index(None, IndexParams::new(IndexKind::IvfFlat, 8))
        .unwrap();
    let vectors: Vec<Vec<f32>> = rows
        .iter()
        .step_by(23)
        .take(12)
        .map(|r| r.vector.clone())
        .collect();
    let each: Vec<PerQueryParams> = (0..12)
        .map(|i| PerQueryParams {
            filter: Some(["len < 6", "category = 'noun'", "flag AND len > 20"][i % 3].into()),
            nprobes: if i % 2 == 0 {
                Some(Nprobes::Fixed(3))
            } else {
                Some(Nprobes::Adaptive { min: 1, max: 6 })
            },
            ..PerQueryParams::default()
        })
        .collect();
    let batch = BatchQuery::new(vectors, 8).each(each);
    let check = |ds: &Dataset, what: &str| {
        let fresh = Session::new(Config::default()).open(ds.root()).unwrap();
        let expected = fresh.search_batch(&batch).unwrap();
        assert_eq!(
            ds.search_batch(&batch).unwrap().hits,
            expected.hits,
            "{what}"
        );
    };
    check(&ds, "first search");
    let mut rng = rand::rngs::StdRng::seed_from_u64(99);
    let more = make_rows(&mut rng, rows.len() as i64, 120, DIM);
    ds.append([Ok(batch_of(&more, DIM))]).unwrap();
    rows.extend(more);
    check(&ds, "after an append (unindexed fragment)");
    ds.delete("len < 3 OR category = 'noun'").unwrap();
    check(&ds, "after a delete");
    ds.optimize().unwrap();
    check(&ds, "after optimize (delta segment)");
    ds.delete("id >= 400").unwrap();
    check(&ds, "after a second delete");
}

/// Adaptive probing in the shared scan: rounds of shared loads; the
/// profile reports them, and a filter admitting few rows makes its query
/// probe more partitions than one admitting many.
#[test]
fn shared_adaptive_probing_reports_its_rounds() {
    let f = fixture(1, 0);
    let vectors: Vec<Vec<f32>> = f
        .rows
        .iter()
        .step_by(13)
        .take(20)
        .map(|r| r.vector.clone())
        .collect();
    let each: Vec<PerQueryParams> = (0..20)
        .map(|i| PerQueryParams {
            filter: Some(if i % 2 == 0 { "len = 3" } else { "len < 25" }.into()),
            nprobes: Some(Nprobes::Adaptive { min: 1, max: 8 }),
            refine_factor: (i % 4 == 1).then_some(2),
            ..PerQueryParams::default()
        })
        .collect();
    let batch = BatchQuery::new(vectors, 10).each(each);
    let (res, profile) = f.ds.explain(&batch).unwrap();
    assert_eq!(profile.mode, SearchMode::Shared);
    assert!(profile.adaptive_rounds >= 2, "{profile:?}");
    assert_eq!(profile.adaptive_loads.len() as u64, profile.adaptive_rounds);
    assert!(profile.refine_rows_read > 0);
    for i in 0..20 {
        let (rows, _) = alone(&f.ds, &batch, i, SearchMode::PerQuery);
        assert_eq!(rows_of(&res.hits[i]), rows, "query {i}");
    }
}

/// A query's own bad filter or option fails the batch with an error naming
/// that query, before anything is scanned; `each` must have one entry per
/// query.
#[test]
fn bad_per_query_input_is_refused_naming_the_query() {
    let f = fixture(0, 0);
    let vectors: Vec<Vec<f32>> = f.rows.iter().take(3).map(|r| r.vector.clone()).collect();
    let good = PerQueryParams::default();
    let cases: Vec<(PerQueryParams, &str)> = vec![
        (
            PerQueryParams {
                filter: Some("nope = 1".into()),
                ..good.clone()
            },
            "unknown column 'nope'",
        ),
        (
            PerQueryParams {
                filter: Some("len <<< 3".into()),
                ..good.clone()
            },
            "query 2",
        ),
        (
            PerQueryParams {
                nprobes: Some(Nprobes::Adaptive { min: 5, max: 2 }),
                ..good.clone()
            },
            "query 2: adaptive nprobes needs 1 <= min <= max",
        ),
        (
            PerQueryParams {
                refine_factor: Some(0),
                ..good.clone()
            },
            "query 2: refine factor must be at least 1",
        ),
        (
            PerQueryParams {
                projection: vec!["missing".into()],
                ..good.clone()
            },
            "unknown column 'missing'",
        ),
    ];
    for (bad, expected) in cases {
        let batch = BatchQuery::new(vectors.clone(), 5).each(vec![good.clone(), good.clone(), bad]);
        let err = f.ds.search_batch(&batch).unwrap_err();
        assert_eq!(err.kind(), shoal::ErrorKind::InvalidInput, "{err}");
        assert!(err.to_string().contains(expected), "{err}");
    }
    let huge = PerQueryParams {
        refine_factor: Some(65),
        ..good.clone()
    };
    let batch = BatchQuery::new(vectors.clone(), 5).each(vec![good.clone(), good.clone(), huge]);
    let err = f.ds.search_batch(&batch).unwrap_err();
    assert!(err.to_string().contains("refine factor"), "{err}");
    let short = BatchQuery::new(vectors, 5).each(vec![good]);
    let err = f.ds.search_batch(&short).unwrap_err();
    assert!(
        err.to_string().contains("each has 1 entries for 3 queries"),
        "{err}"
    );
}
