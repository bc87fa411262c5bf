//! Compaction: the small unindexed fragments many appends leave are merged
//! into a few, as a new version, with every search answering exactly as
//! before (ids, distances, values and order, ties included), index
//! coverage untouched, older versions still readable, and the engine
//! compacting by itself past its threshold.

use crate::common::*;
use rand::SeedableRng;
use shoal::{BatchQuery, Config, Engine, IndexKind, IndexParams, Metric, Query, SearchMode};

const DIM: usize = 8;

fn searches(rows: &[Row]) -> Vec<BatchQuery> {
    let queries: Vec<Vec<f32>> = (0..24)
        .map(|i| rows[i * 37 % rows.len()].vector.clone())
        .collect();
    vec![
        BatchQuery::new(queries.clone(), 10).mode(SearchMode::Exact),
        BatchQuery::new(queries.clone(), 25)
            .mode(SearchMode::Exact)
            .filter("len < 9")
            .select(["category", "len"]),
        BatchQuery::new(queries.clone(), 10).nprobes(3),
        BatchQuery::new(queries.clone(), 7)
            .nprobes(4)
            .filter("category = 'noun'")
            .select(["len"]),
        BatchQuery::new(queries, 10)
            .mode(SearchMode::PerQuery)
            .nprobes(2),
    ]
}

#[test]
fn a_thousand_small_appends_compact_to_a_handful_with_identical_answers() {
    let dir = tempfile::tempdir().unwrap();
    let (mut ds, mut rows) = build(dir.path(), &[400, 300], DIM, Metric::L2, 31);
    ds.create_index(None, IndexParams::new(IndexKind::IvfFlat, 8))
        .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(32);
    for _ in 0..1_000 {
        let more = make_rows(&mut rng, rows.len() as i64, 3, DIM);
        ds.append([batch_of(&more, DIM)]).unwrap();
        rows.extend(more);
    }
    ds.delete("len = 3").unwrap();
    assert_eq!(ds.manifest().fragments.len(), 1_002);
    let visible = ds.count_rows();
    let old = ds.clone();
    let before: Vec<_> = searches(&rows).iter().map(|b| seen(&ds, b)).collect();

    let commit = ds.compact().unwrap();
    assert_eq!(commit.version, old.version() + 1);
    let tail_visible = rows[700..].iter().filter(|r| r.len != Some(3)).count() as u64;
    assert_eq!(commit.rows, tail_visible);
    assert_eq!(
        ds.manifest().fragments.len(),
        3,
        "two indexed fragments and one merged"
    );
    assert_eq!(ds.count_rows(), visible);
    assert_eq!(
        ds.index_segments(),
        old.index_segments(),
        "index coverage untouched"
    );
    let after: Vec<_> = searches(&rows).iter().map(|b| seen(&ds, b)).collect();
    assert_eq!(before, after);
    // The older version still reads its own files, answering as before.
    let pinned: Vec<_> = searches(&rows).iter().map(|b| seen(&old, b)).collect();
    assert_eq!(pinned, before);
    let reopened = shoal::Dataset::open(dir.path()).unwrap();
    assert_eq!(reopened.version(), commit.version);
    assert_eq!(
        searches(&rows)
            .iter()
            .map(|b| seen(&reopened, b))
            .collect::<Vec<_>>(),
        before
    );
    // Nothing left to merge: no commit.
    assert_eq!(ds.compact().unwrap().rows, 0);
    assert_eq!(ds.version(), commit.version);
    // The merged rows index like any appended fragment.
    let delta = ds.optimize().unwrap();
    assert_eq!(delta.rows, commit.rows);
}

#[test]
fn only_a_tail_of_small_unindexed_fragments_is_merged() {
    let dir = tempfile::tempdir().unwrap();
    let (mut ds, _) = build(dir.path(), &[5, 5, 5], DIM, Metric::L2, 33);
    ds.create_index(None, IndexParams::new(IndexKind::IvfFlat, 2))
        .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(34);
    let one = make_rows(&mut rng, 15, 5, DIM);
    ds.append([batch_of(&one, DIM)]).unwrap();
    // A single unindexed fragment: nothing to merge.
    assert_eq!(ds.compact().unwrap().rows, 0);
    let two = make_rows(&mut rng, 20, 5, DIM);
    ds.append([batch_of(&two, DIM)]).unwrap();
    let commit = ds.compact().unwrap();
    assert_eq!(commit.rows, 10);
    assert_eq!(
        ds.manifest().fragments.len(),
        4,
        "three indexed fragments kept, two merged"
    );
}

#[test]
fn the_engine_compacts_past_its_threshold() {
    let dir = tempfile::tempdir().unwrap();
    let (ds, mut rows) = build(&dir.path().join("ds"), &[50], DIM, Metric::L2, 35);
    drop(ds);
    let mut config = Config::default();
    config.ingest.compact_after_fragments = 8;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let engine = Engine::start(config, dir.path()).unwrap();
        let handle = engine.dataset("ds").await.unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(36);
        for _ in 0..30 {
            let more = make_rows(&mut rng, rows.len() as i64, 2, DIM);
            let commit = handle.append(vec![batch_of(&more, DIM)]).await.unwrap();
            assert_eq!(commit.rows, 2);
            assert_eq!(commit.version, handle.version());
            rows.extend(more);
        }
        let latest = handle.latest();
        assert!(
            latest.manifest().fragments.len() < 8,
            "{} fragments",
            latest.manifest().fragments.len()
        );
        assert_eq!(latest.count_rows(), rows.len() as u64);
        let q = Query::new(rows[77].vector.clone(), 1).mode(SearchMode::Exact);
        assert_eq!(handle.search(&q).await.unwrap().hits[0].distance, 0.0);
        engine.shutdown().await;
    });
}

#[test]
fn repeated_compaction_rewrites_a_bounded_tail() {
    // rows_per_fragment 640: a fragment of 10 rows or more is no longer
    // small, so a merged fragment is not rewritten again.
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.ingest.rows_per_fragment = 640;
    let mut ds = shoal::Dataset::create(dir.path(), schema(DIM, Metric::L2), config).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(37);
    let mut rows = Vec::new();
    let mut rewritten = Vec::new();
    for round in 0..4 {
        for _ in 0..6 {
            let more = make_rows(&mut rng, rows.len() as i64, 2, DIM);
            ds.append([batch_of(&more, DIM)]).unwrap();
            rows.extend(more);
        }
        rewritten.push(ds.compact().unwrap().rows);
        assert_eq!(ds.manifest().fragments.len(), round + 1);
    }
    assert_eq!(
        rewritten,
        vec![12, 12, 12, 12],
        "each compaction rewrote only the new rows"
    );
    assert_eq!(ds.count_rows(), rows.len() as u64);
}
