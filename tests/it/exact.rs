//! Exact search against brute force, and batch invariance.

use crate::common::OwnMut;
use crate::common::*;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use shoal::PerQuery;
use shoal::{BatchQuery, Dataset, FilterMode, Metric, Query};
use std::sync::OnceLock;

type Keep = Box<dyn Fn(&Row) -> bool>;

fn filters() -> Vec<(Option<&'static str>, Keep)> {
    vec![
        (None, Box::new(|_: &Row| true)),
        (Some("len > 1000"), Box::new(|_: &Row| false)),
        (Some("id >= 0"), Box::new(|_: &Row| true)),
        (
            Some("category = 'verb' AND len < 5"),
            Box::new(|r: &Row| {
                r.category.as_deref() == Some("verb") && r.len.is_some_and(|l| l < 5)
            }),
        ),
        (
            Some("NOT flag OR category IS NULL"),
            Box::new(|r: &Row| !r.flag || r.category.is_none()),
        ),
    ]
}

#[test]
fn exact_search_equals_float64_brute_force() {
    for metric in [Metric::L2, Metric::Cosine, Metric::Dot] {
        let dir = tempfile::tempdir().unwrap();
        let dim = 19;
        let (mut ds, mut rows) = build(dir.path(), &[300, 1, 517, 40], dim, metric, 5);
        // Deletions: a filter, recorded in the reference too.
        let n = ds.delete("len = 7 OR id = 300").unwrap().rows;
        let mut expected = 0;
        for r in rows.iter_mut() {
            if r.len == Some(7) || r.id == 300 {
                r.deleted = true;
                expected += 1;
            }
        }
        assert_eq!(n, expected);
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        let mut queries: Vec<Vec<f32>> = (0..12)
            .map(|_| (0..dim).map(|_| rng.random_range(-2.0f32..2.0)).collect())
            .collect();
        // Queries equal to data rows (many exact ties with duplicated rows).
        queries.push(rows[6].vector.clone());
        queries.push(rows[13].vector.clone());
        queries.push(rows[13].vector.clone());
        for (sql, keep) in filters() {
            for &(k, offset) in &[(1usize, 0usize), (10, 0), (10, 5), (2000, 0), (3, 850)] {
                let mut b = BatchQuery::new(queries.clone(), k);
                b.offset = PerQuery::All(offset);
                b.own_mut().filter = sql.map(String::from);
                let res = ds.search_batch(&b).unwrap();
                for (qi, q) in queries.iter().enumerate() {
                    let reference = brute_force(&rows, metric, q, k, offset, keep.as_ref());
                    let ctx = format!("{metric} filter {sql:?} k {k} offset {offset} query {qi}");
                    assert_matches_reference(
                        &res.hits[qi],
                        &reference,
                        &rows,
                        metric,
                        q,
                        keep.as_ref(),
                        &ctx,
                    );
                }
            }
        }
    }
}

#[test]
fn postfilter_filters_after_the_search() {
    let dir = tempfile::tempdir().unwrap();
    let (ds, rows) = build(dir.path(), &[400], 8, Metric::L2, 21);
    let q = rows[3].vector.clone();
    let mut query = Query::new(q.clone(), 20);
    query.own_mut().filter = Some("category = 'noun'".into());
    query.own_mut().filter_mode = FilterMode::Postfilter;
    let post = ds.search(&query).unwrap();
    let unfiltered = brute_force(&rows, Metric::L2, &q, 20, 0, &|_| true);
    let allowed: Vec<i64> = unfiltered
        .iter()
        .filter(|(id, _)| rows[*id as usize].category.as_deref() == Some("noun"))
        .map(|(id, _)| *id)
        .collect();
    let got: Vec<i64> = post.hits.iter().map(|h| h.id).collect();
    // Near-ties at the 20th place could swap; compare sets of the top rows.
    assert!(
        got.len() < 20,
        "postfilter over 4 categories should return fewer than k"
    );
    assert_eq!(got.len(), allowed.len());
    query.own_mut().filter_mode = FilterMode::Prefilter;
    let pre = ds.search(&query).unwrap();
    assert_eq!(pre.hits.len(), 20);
}

#[test]
fn projection_returns_the_rows_values() {
    let dir = tempfile::tempdir().unwrap();
    let (ds, rows) = build(dir.path(), &[50, 50], 4, Metric::L2, 2);
    let mut q = Query::new(rows[60].vector.clone(), 3);
    q.own_mut().projection = vec!["category".into(), "len".into(), "flag".into(), "emb".into()];
    let res = ds.search(&q).unwrap();
    for h in &res.hits {
        let r = &rows[h.id as usize];
        let expect_cat = r
            .category
            .clone()
            .map_or(shoal::ScalarValue::Null, shoal::ScalarValue::Utf8);
        assert_eq!(h.values[0], expect_cat);
        assert_eq!(
            h.values[1],
            r.len
                .map_or(shoal::ScalarValue::Null, shoal::ScalarValue::Int64)
        );
        assert_eq!(h.values[2], shoal::ScalarValue::Bool(r.flag));
        assert_eq!(h.values[3], shoal::ScalarValue::Vector(r.vector.clone()));
        assert_eq!(h.row_id >> 32, if h.id < 50 { 0 } else { 1 });
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    ds: Dataset,
    rows: Vec<super::common::Row>,
}

fn fixture(metric: Metric) -> &'static Fixture {
    static L2: OnceLock<Fixture> = OnceLock::new();
    static COS: OnceLock<Fixture> = OnceLock::new();
    static DOT: OnceLock<Fixture> = OnceLock::new();
    let cell = match metric {
        Metric::L2 => &L2,
        Metric::Cosine => &COS,
        Metric::Dot => &DOT,
    };
    cell.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let (mut ds, rows) = build(dir.path(), &[700, 33, 260], 24, metric, 77);
        ds.delete("len = 3").unwrap();
        Fixture {
            _dir: dir,
            ds,
            rows,
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Every query of a batch returns exactly — rows, order, f32 bits — what
    /// it returns alone.
    #[test]
    fn batch_results_are_identical_to_single_query_results(
        metric_i in 0usize..3,
        seed in any::<u64>(),
        size in 1usize..200,
        use_filter in any::<bool>(),
    ) {
        let metric = [Metric::L2, Metric::Cosine, Metric::Dot][metric_i];
        let f = fixture(metric);
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let vectors = random_queries(&mut rng, &f.rows, size, 24);
        let ks: Vec<usize> = (0..size).map(|_| rng.random_range(1..40)).collect();
        let offsets: Vec<usize> = (0..size).map(|_| rng.random_range(0..5)).collect();
        let filter = use_filter.then(|| "category IN ('noun', 'adj') AND len >= 2".to_string());
        let mut batch = BatchQuery::new(vectors.clone(), 1);
        batch.k = PerQuery::Each(ks.clone());
        batch.offset = PerQuery::Each(offsets.clone());
        batch.own_mut().filter = filter.clone();
        let together = f.ds.search_batch(&batch).unwrap();
        prop_assert_eq!(together.hits.len(), size);
        for i in 0..size {
            let mut q = Query::new(vectors[i].clone(), ks[i]);
            q.offset = offsets[i];
            q.own_mut().filter = filter.clone();
            let alone = f.ds.search(&q).unwrap();
            let a: Vec<(u64, u32)> = alone.hits.iter().map(|h| (h.row_id, h.distance.to_bits())).collect();
            let b: Vec<(u64, u32)> = together.hits[i].iter().map(|h| (h.row_id, h.distance.to_bits())).collect();
            prop_assert_eq!(a, b, "query {} of {}", i, size);
        }
    }
}
