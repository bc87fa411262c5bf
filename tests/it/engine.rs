//! The engine: coalesced searches get exactly the rows they get alone; the
//! window, idle flush, full batches, deadlines, the queue bound,
//! cancellation, writes and shutdown behave as documented.
//!
//! Timing-dependent behaviour is tested on tokio's paused clock, where
//! "now" only moves when every task waits on a timer, so the tests state
//! exact waits without measuring anything.

use crate::common::*;
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use shoal::{BlockingEngine, Config, DatasetHandle, Engine, Error, Metric, Query, SearchResponse};
use shoal::{IndexKind, IndexParams};
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

const DIM: usize = 16;

/// An indexed dataset `ds` under a data directory: two fragments in an
/// IVF_FLAT segment, one unindexed, some deletions.
fn make_data_dir(dir: &Path, seed: u64) -> Vec<Row> {
    let (mut ds, mut rows) = build(&dir.join("ds"), &[300, 200], DIM, Metric::L2, seed);
    ds.create_index(None, IndexParams::new(IndexKind::IvfFlat, 8))
        .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed + 1);
    let tail = make_rows(&mut rng, rows.len() as i64, 90, DIM);
    ds.append([Ok(batch_of(&tail, DIM))]).unwrap();
    rows.extend(tail);
    ds.delete("id IN (4, 310, 555)").unwrap();
    for id in [4, 310, 555] {
        rows[id].deleted = true;
    }
    rows
}

/// One shared read-only data directory for the tests that never write.
fn shared_dir() -> &'static (tempfile::TempDir, Vec<Row>) {
    static DIR: OnceLock<(tempfile::TempDir, Vec<Row>)> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let rows = make_data_dir(dir.path(), 21);
        (dir, rows)
    })
}

fn config(window_us: u64, max_batch_size: usize, flush_when_idle: bool) -> Config {
    let mut c = Config::default();
    c.coalescer.window_us = window_us;
    c.coalescer.max_batch_size = max_batch_size;
    c.coalescer.flush_when_idle = flush_when_idle;
    c
}

/// `(row_id, distance bits)` of each hit: equality is bit for bit.
fn bits(hits: &[shoal::Hit]) -> Vec<(u64, u32)> {
    hits.iter()
        .map(|h| (h.row_id, h.distance.to_bits()))
        .collect()
}

/// What `query` gets searched alone on the handle's snapshot of `version`.
fn alone(handle: &DatasetHandle, query: &Query, version: u64) -> Vec<(u64, u32)> {
    let ds = handle.latest().checkout(version).unwrap();
    bits(&ds.search(query).unwrap().hits)
}

/// Waits (yielding) until the coalescer holds `n` searches; fails after
/// 60 s of real time instead of hanging.
async fn until_pending(engine: &Engine, n: u64) {
    let start = std::time::Instant::now();
    while engine.stats().pending != n {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the coalescer never held {n} searches (holds {})",
            engine.stats().pending
        );
        tokio::task::yield_now().await;
    }
}

/// Whether an error is the expected one.
type ErrorCheck = fn(&Error) -> bool;

fn query(rows: &[Row], i: usize, k: usize) -> Query {
    Query::new(rows[i].vector.clone(), k)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_callers_share_one_batch_and_each_gets_its_own_rows() {
    let (dir, rows) = shared_dir();
    // A long window, no idle flush: the batch leaves when it is full.
    let engine = Engine::start(config(10_000_000, 24, false), dir.path()).unwrap();
    let ds = engine.dataset("ds").await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..24 {
        let ds = ds.clone();
        let q = query(rows, i * 17, 1 + i % 9).offset(i % 3);
        tasks.push(tokio::spawn(
            async move { (q.clone(), ds.search(&q).await) },
        ));
    }
    let mut batch_ids = std::collections::HashSet::new();
    for task in tasks {
        let (q, response) = task.await.unwrap();
        let response = response.unwrap();
        assert_eq!(response.batch.size, 24);
        assert_eq!(response.batch.mode, shoal::SearchMode::Shared);
        batch_ids.insert(response.batch.id);
        assert_eq!(bits(&response.hits), alone(&ds, &q, response.version));
    }
    assert_eq!(batch_ids.len(), 1, "24 callers, one scan");
    let stats = engine.stats();
    assert_eq!(stats.batches, 1);
    assert_eq!(stats.requests, 24);
    assert_eq!(stats.batch_size.count(), 1);
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_with_sixteen_different_filters_share_one_batch() {
    let (dir, rows) = shared_dir();
    let engine = Engine::start(config(10_000_000, 32, false), dir.path()).unwrap();
    let ds = engine.dataset("ds").await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..32 {
        let ds = ds.clone();
        let mut q = query(rows, i * 13, 10).filter(format!("len < {}", 15 + i % 16));
        if i % 5 == 0 {
            q = q.adaptive_nprobes(1, 6);
        }
        if i % 7 == 0 {
            q = q.refine_factor(2).select(["len"]);
        }
        tasks.push(tokio::spawn(
            async move { (q.clone(), ds.search(&q).await) },
        ));
    }
    for task in tasks {
        let (q, response) = task.await.unwrap();
        let response = response.unwrap();
        assert_eq!(response.batch.size, 32, "one batch for every filter");
        assert_eq!(response.batch.mode, shoal::SearchMode::Shared);
        assert_eq!(bits(&response.hits), alone(&ds, &q, response.version));
        assert_eq!(response.projection, q.own.projection);
    }
    let stats = engine.stats();
    assert_eq!(stats.batches, 1);
    // The batch is counted in the 16-filter bucket.
    let bucket = stats
        .batch_filters
        .bounds
        .iter()
        .position(|&b| b == 16)
        .unwrap();
    assert_eq!(stats.batch_filters.counts[bucket], 1);
    assert_eq!(stats.batch_filters.sum, 16);
    engine.shutdown().await;
}

/// Callers with different filters share batches, so one caller's failure
/// must not become the others': a fragment file is damaged that only a
/// filtered caller's filter reads; that caller gets the corruption error,
/// its batch-mate its rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_one_caller_causes_is_not_the_batch_mates() {
    let dir = tempfile::tempdir().unwrap();
    let rows = make_data_dir(dir.path(), 31);
    // Fragments of 300 rows, 200 rows (indexed), 90 rows (unindexed).
    // Damage the `len` column of the 200-row one, which only a filter
    // evaluated on the partitions (or a row returned from it) reads.
    let manifest = shoal::Dataset::open(dir.path().join("ds"))
        .unwrap()
        .manifest()
        .clone();
    let meta = manifest.fragments.iter().find(|f| f.rows == 200).unwrap();
    let target = dir.path().join("ds/data").join(&meta.file);
    let mut bytes = std::fs::read(&target).unwrap();
    // Schema columns: id, emb, category, len, flag.
    let len_page = directory_of(meta, &bytes).columns[3].1[0].clone();
    let middle = ((len_page.start + len_page.end) / 2) as usize;
    bytes[middle] ^= 0x55;
    std::fs::write(&target, bytes).unwrap();

    let engine = Engine::start(config(10_000_000, 2, false), dir.path()).unwrap();
    let ds = engine.dataset("ds").await.unwrap();
    let clean = query(&rows, 5, 1).nprobes(8);
    let filtered = query(&rows, 5, 5).nprobes(8).filter("len < 100");
    let (a, b) = tokio::join!(ds.search(&clean), ds.search(&filtered));
    let a = a.unwrap();
    assert_eq!(bits(&a.hits), alone(&ds, &clean, a.version));
    assert_eq!(
        a.hits[0].row_id, 5,
        "row 5 of fragment 0 is its own nearest"
    );
    let err = b.unwrap_err();
    assert_eq!(err.kind(), shoal::ErrorKind::Internal, "{err}");
    assert!(err.to_string().contains("corrupt"), "{err}");
    let stats = engine.stats();
    assert_eq!(stats.failed_batches, 1, "{stats:?}");
    engine.shutdown().await;
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random concurrent callers — repeated vectors, copies of data rows,
    /// each with its own filter (or none, selective or not, admitting
    /// fewer than k rows or none), filter mode, k, offset, fixed or
    /// adaptive nprobes, refine factor and projection, all sharing batches
    /// — each get the rows, order and f32 distances of `Dataset::search`
    /// alone.
    #[test]
    fn coalesced_results_are_bit_identical_to_searching_alone(
        seed in any::<u64>(),
        callers in 1usize..80,
        max_batch in 1usize..40,
        window_us in 0u64..3000,
        idle in any::<bool>(),
    ) {
        let (dir, rows) = shared_dir();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let engine = Engine::start(config(window_us, max_batch, idle), dir.path()).unwrap();
            let ds = engine.dataset("ds").await.unwrap();
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let vectors = random_queries(&mut rng, rows, callers, DIM);
            let filters = [
                None,
                Some("len < 12"),
                Some("category = 'noun' OR flag"),
                Some("len > 1000"),
                Some("id = 77"),
                Some("len = 4 AND NOT flag"),
                Some("id >= 500"),
            ];
            let mut tasks = Vec::new();
            for v in vectors {
                let mut q = Query::new(v, rng.random_range(1..25)).offset(rng.random_range(0..4));
                if let Some(f) = filters[rng.random_range(0..filters.len())] {
                    q = q.filter(f);
                    if rng.random_bool(0.2) {
                        q = q.postfilter();
                    }
                }
                if rng.random_bool(0.2) {
                    q = q.select(["category", "len"]);
                }
                q = match rng.random_range(0..3) {
                    0 => q,
                    1 => q.nprobes(rng.random_range(1..9)),
                    _ => {
                        let min = rng.random_range(1..4);
                        q.adaptive_nprobes(min, rng.random_range(min..9))
                    }
                };
                if rng.random_bool(0.25) {
                    q = q.refine_factor(rng.random_range(1..4));
                }
                let ds = ds.clone();
                tasks.push(tokio::spawn(async move { (q.clone(), ds.search(&q).await) }));
            }
            for task in tasks {
                let (q, response) = task.await.unwrap();
                let response = response.unwrap();
                assert!(response.batch.size <= max_batch);
                assert_eq!(bits(&response.hits), alone(&ds, &q, response.version), "{q:?}");
                let single = ds.latest().search(&q).unwrap();
                assert_eq!(response.projection, single.projection);
                let values: Vec<_> = response.hits.iter().map(|h| h.values.clone()).collect();
                let expected: Vec<_> = single.hits.iter().map(|h| h.values.clone()).collect();
                assert_eq!(values, expected);
            }
            let stats = engine.stats();
            assert!(stats.batches <= callers as u64);
            assert_eq!(stats.batch_size.sum, callers as u64, "every caller scanned exactly once");
            engine.shutdown().await;
            assert_eq!(engine.stats().budget_in_use, 0);
        });
    }
}

#[tokio::test(start_paused = true)]
async fn a_lone_caller_does_not_wait_for_the_window_when_the_scanner_is_idle() {
    let (dir, rows) = shared_dir();
    let engine = Engine::start(config(5_000_000, 64, true), dir.path()).unwrap();
    let ds = engine.dataset("ds").await.unwrap();
    let response = ds.search(&query(rows, 3, 5)).await.unwrap();
    // The clock is paused: waiting out the window would show as 5 s exactly.
    assert_eq!(response.batch.queue_wait_us, 0);
    assert_eq!(response.batch.size, 1);
    engine.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn without_idle_flush_a_group_leaves_when_its_oldest_search_has_waited_the_window() {
    let (dir, rows) = shared_dir();
    // Whole milliseconds: tokio's timer wheel ticks in ms, and the paused
    // clock jumps tick to tick.
    let engine = Engine::start(config(20_000, 64, false), dir.path()).unwrap();
    let ds = engine.dataset("ds").await.unwrap();
    let a = tokio::spawn({
        let ds = ds.clone();
        let q = query(rows, 1, 3);
        async move { ds.search(&q).await }
    });
    until_pending(&engine, 1).await;
    tokio::time::advance(Duration::from_millis(7)).await;
    // A filter of its own does not split the group...
    let b = tokio::spawn({
        let ds = ds.clone();
        let q = query(rows, 2, 3).filter("len < 5");
        async move { ds.search(&q).await }
    });
    // ...but another mode is a different group with its own window.
    let c = tokio::spawn({
        let ds = ds.clone();
        let q = query(rows, 2, 3).mode(shoal::SearchMode::Exact);
        async move { ds.search(&q).await }
    });
    let (a, b) = (a.await.unwrap().unwrap(), b.await.unwrap().unwrap());
    let c = c.await.unwrap().unwrap();
    assert_eq!(a.batch.id, b.batch.id);
    assert_eq!(a.batch.size, 2);
    assert_eq!(
        a.batch.queue_wait_us, 20_000,
        "the oldest waited the window"
    );
    assert_eq!(b.batch.queue_wait_us, 13_000, "a later one leaves with it");
    assert_ne!(c.batch.id, a.batch.id);
    assert_eq!(c.batch.queue_wait_us, 20_000);
    engine.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_rejects_at_once_and_a_passed_deadline_is_reported() {
    let (dir, rows) = shared_dir();
    let mut c = config(10_000, 64, false);
    c.coalescer.max_pending = 2;
    let engine = Engine::start(c, dir.path()).unwrap();
    let ds = engine.dataset("ds").await.unwrap();
    let first = tokio::spawn({
        let ds = ds.clone();
        let q = query(rows, 1, 3);
        async move { ds.search(&q).await }
    });
    let late = tokio::spawn({
        let ds = ds.clone();
        let q = query(rows, 2, 3);
        async move { ds.search(&q.timeout(Duration::from_millis(4))).await }
    });
    until_pending(&engine, 2).await;
    let rejected = ds.search(&query(rows, 5, 3)).await.unwrap_err();
    assert!(matches!(rejected, Error::Overloaded(_)), "{rejected}");
    assert_eq!(rejected.kind(), shoal::ErrorKind::Overloaded);
    // The 4 ms deadline passes before the 10 ms window ends.
    match late.await.unwrap() {
        Err(Error::DeadlineExceeded {
            waited_ms: 4,
            deadline_ms: 4,
        }) => {}
        other => panic!("expected DeadlineExceeded, got {other:?}"),
    }
    let first = first.await.unwrap().unwrap();
    assert_eq!(first.batch.size, 1, "the expired search left the batch");
    assert_eq!(first.batch.queue_wait_us, 10_000);
    let stats = engine.stats();
    assert_eq!(stats.rejected_overloaded, 1);
    assert_eq!(stats.deadline_exceeded, 1);
    engine.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn bad_input_is_rejected_alone_and_never_fails_the_batch_it_would_have_joined() {
    let (dir, rows) = shared_dir();
    let engine = Engine::start(config(3_000, 64, false), dir.path()).unwrap();
    let ds = engine.dataset("ds").await.unwrap();
    let good: Vec<_> = (0..3)
        .map(|i| {
            let ds = ds.clone();
            let q = query(rows, 40 + i, 4);
            tokio::spawn(async move { (q.clone(), ds.search(&q).await) })
        })
        .collect();
    until_pending(&engine, 3).await;
    let mut nan = rows[0].vector.clone();
    nan[3] = f32::NAN;
    let bad: Vec<(Query, ErrorCheck)> = vec![
        (Query::new(vec![0.5; DIM - 1], 4), |e| {
            matches!(e, Error::DimensionMismatch { .. })
        }),
        (Query::new(nan, 4), |e| matches!(e, Error::NonFinite { .. })),
        (query(rows, 0, 0), |e| {
            e.kind() == shoal::ErrorKind::InvalidInput
        }),
        (query(rows, 0, 4).column("nope"), |e| {
            matches!(e, Error::UnknownColumn { .. })
        }),
        (query(rows, 0, 4).filter("len <<< 3"), |e| {
            matches!(e, Error::Filter { .. })
        }),
        (query(rows, 0, 4).filter("missing = 1"), |e| {
            e.kind() == shoal::ErrorKind::InvalidInput
        }),
        (query(rows, 0, 4).version(999), |e| {
            matches!(e, Error::VersionNotFound { .. })
        }),
    ];
    for (q, expected) in bad {
        let err = ds.search(&q.clone()).await.unwrap_err();
        assert!(expected(&err), "{q:?}: {err}");
    }
    assert_eq!(engine.stats().pending, 3, "nothing bad joined the queue");
    for task in good {
        let (q, response) = task.await.unwrap();
        let response = response.unwrap();
        assert_eq!(response.batch.size, 3);
        assert_eq!(bits(&response.hits), alone(&ds, &q, response.version));
    }
    engine.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_queued_search_keeps_the_version_it_resolved_and_a_later_one_sees_the_write() {
    let dir = tempfile::tempdir().unwrap();
    let rows = make_data_dir(dir.path(), 33);
    let engine = Engine::start(config(50_000, 64, false), dir.path()).unwrap();
    let ds = engine.dataset("ds").await.unwrap();
    let before = ds.version();
    let target = rows[10].vector.clone();
    let queued = tokio::spawn({
        let ds = ds.clone();
        let q = Query::new(target.clone(), 8);
        async move { ds.search(&q).await }
    });
    until_pending(&engine, 1).await;
    // Append exact copies of the target: they would be its nearest rows.
    let copies: Vec<Row> = (0..3)
        .map(|i| Row {
            id: 10_000 + i,
            vector: target.clone(),
            category: None,
            len: Some(1),
            flag: false,
            deleted: false,
        })
        .collect();
    assert_eq!(
        ds.append(vec![batch_of(&copies, DIM)]).await.unwrap().rows,
        3
    );
    assert_eq!(ds.version(), before + 1);
    let after = ds.search(&Query::new(target.clone(), 8)).await.unwrap();
    let queued = queued.await.unwrap().unwrap();
    assert_eq!(queued.version, before);
    assert_eq!(after.version, before + 1);
    assert_ne!(
        queued.batch.id, after.batch.id,
        "versions never share a batch"
    );
    let q = Query::new(target, 8);
    assert_eq!(bits(&queued.hits), alone(&ds, &q, before));
    assert_eq!(bits(&after.hits), alone(&ds, &q, before + 1));
    let new_rows = |r: &SearchResponse| r.hits.iter().filter(|h| h.id >= 10_000).count();
    assert_eq!(new_rows(&queued), 0, "queued before the append");
    assert_eq!(new_rows(&after), 3, "the copies are at distance 0");
    // Deletes and index builds go through the handle too.
    assert_eq!(ds.delete("id >= 10000").await.unwrap().rows, 3);
    let gone = ds
        .search(&Query::new(rows[10].vector.clone(), 8))
        .await
        .unwrap();
    assert!(gone.hits.iter().all(|h| h.id < 10_000));
    ds.optimize().await.unwrap();
    assert_eq!(ds.version(), before + 3);
    // A handle opened later sees the same latest version.
    assert_eq!(engine.dataset("ds").await.unwrap().version(), before + 3);
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_that_leave_at_random_points_release_everything_and_the_engine_still_answers() {
    let (dir, rows) = shared_dir();
    let mut c = config(300, 16, true);
    c.scan.max_concurrent_batches = 2;
    let engine = Engine::start(c, dir.path()).unwrap();
    let ds = engine.dataset("ds").await.unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let mut tasks = Vec::new();
    for i in 0..300 {
        let ds = ds.clone();
        let q = query(rows, (i * 7) % rows.len(), 1 + i % 20);
        let patience = Duration::from_micros(rng.random_range(0..3_000));
        let abort = rng.random_bool(0.3);
        let task = tokio::spawn(async move {
            let _ = tokio::time::timeout(patience, ds.search(&q)).await;
        });
        if abort {
            task.abort();
        }
        tasks.push(task);
    }
    for task in tasks {
        let _ = task.await;
    }
    // Still serving, with correct rows.
    let q = query(rows, 77, 6);
    let response = ds.search(&q.clone()).await.unwrap();
    assert_eq!(bits(&response.hits), alone(&ds, &q, response.version));
    engine.shutdown().await;
    let stats = engine.stats();
    assert_eq!(stats.budget_in_use, 0, "every batch gave its bytes back");
    assert_eq!(stats.pending, 0);
    assert!(stats.cancelled > 0, "some callers left before their answer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_answers_every_search_in_flight_and_refuses_new_ones() {
    let (dir, rows) = shared_dir();
    // The longest window (10 s) and no idle flush: the searches wait in
    // the coalescer until shutdown, which must scan them all.
    let engine = Engine::start(config(10_000_000, 1_000, false), dir.path()).unwrap();
    let ds = engine.dataset("ds").await.unwrap();
    let tasks: Vec<_> = (0..100)
        .map(|i| {
            let ds = ds.clone();
            let q = query(rows, i * 3, 5);
            tokio::spawn(async move { (q.clone(), ds.search(&q).await) })
        })
        .collect();
    let started = std::time::Instant::now();
    while engine.stats().pending < 100 {
        assert!(started.elapsed() < Duration::from_secs(5), "not queued");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(engine.stats().batches, 0, "all still queued");
    engine.shutdown().await;
    assert_eq!(tasks.len(), 100);
    for task in tasks {
        let (q, response) = task.await.unwrap();
        let r = response.expect("a search queued before shutdown is answered");
        assert_eq!(bits(&r.hits), alone(&ds, &q, r.version));
    }
    assert!(matches!(
        ds.search(&query(rows, 0, 3)).await,
        Err(Error::ShuttingDown)
    ));
    assert!(matches!(
        ds.delete("id = 1").await,
        Err(Error::ShuttingDown)
    ));
    assert_eq!(engine.stats().budget_in_use, 0);
    engine.shutdown().await; // a second call returns at once
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_batches_run_at_once_and_match_the_dataset() {
    let (dir, rows) = shared_dir();
    let engine = Engine::start(config(10_000_000, 64, false), dir.path()).unwrap();
    let ds = engine.dataset("ds").await.unwrap();
    let vectors: Vec<Vec<f32>> = rows.iter().step_by(29).map(|r| r.vector.clone()).collect();
    let queries = vectors.len();
    let batch = shoal::BatchQuery::new(vectors, 7).filter("len < 20");
    let (results, profile) = ds.explain(&batch).await.unwrap();
    assert_eq!(profile.mode, shoal::SearchMode::Shared);
    let direct = ds.latest().search_batch(&batch).unwrap();
    assert_eq!(results.hits.len(), queries, "one answer per query");
    assert_eq!(direct.hits.len(), queries);
    for (a, b) in results.hits.iter().zip(&direct.hits) {
        assert_eq!(bits(a), bits(b));
    }
    assert_eq!(
        ds.search_batch(&shoal::BatchQuery::new(vec![vec![1.0; 3]], 7))
            .await
            .unwrap_err()
            .kind(),
        shoal::ErrorKind::InvalidInput
    );
    assert_eq!(engine.stats().explicit_batches, 2);
    assert!(matches!(
        engine.dataset("missing").await,
        Err(Error::DatasetNotFound(_))
    ));
    assert!(engine.dataset("../etc").await.is_err());
    assert_eq!(
        engine.dataset_names().await.unwrap(),
        vec!["ds".to_string()]
    );
    engine.shutdown().await;
}

#[test]
fn the_blocking_wrapper_serves_callers_without_a_runtime() {
    let (dir, rows) = shared_dir();
    let engine = BlockingEngine::start(config(500, 64, true), dir.path()).unwrap();
    let ds = engine.dataset("ds").unwrap();
    let results: Vec<(Query, SearchResponse)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let ds = &ds;
                s.spawn(move || {
                    let q = query(rows, i * 11, 4);
                    (q.clone(), ds.search(&q).unwrap())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (q, response) in results {
        assert_eq!(
            bits(&response.hits),
            alone(ds.handle(), &q, response.version)
        );
    }
    assert_eq!(engine.stats().batch_size.sum, 8);
    engine.shutdown();
}

#[tokio::test]
async fn starting_outside_a_runtime_or_with_a_bad_config_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Config::default();
    c.coalescer.max_batch_size = 0;
    assert!(Engine::start(c, dir.path()).is_err());
    let err = std::thread::spawn({
        let path = dir.path().to_path_buf();
        move || Engine::start(Config::default(), path).map(|_| ())
    })
    .join()
    .unwrap()
    .unwrap_err();
    assert!(err.to_string().contains("tokio runtime"), "{err}");
}
