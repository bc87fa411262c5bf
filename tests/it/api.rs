//! The public API's contracts beyond search results: every write answers
//! a `Commit` naming the version it left; progress reaches an optional
//! callback; a cancel token stops a search on every entry point (direct,
//! engine, explicit batch); an engine started over an existing session
//! shares its caches.

use crate::common::*;
use shoal::{
    BatchQuery, CancelToken, Config, Engine, Error, IndexKind, IndexParams, Metric, Progress,
    Query, Session,
};
use std::sync::{Arc, Mutex};

const DIM: usize = 8;

#[test]
fn every_write_answers_the_commit_it_made() {
    let dir = tempfile::tempdir().unwrap();
    let (mut ds, rows) = build(dir.path(), &[200], DIM, Metric::L2, 3);
    let v = ds.version();
    let tail = make_rows(&mut rand::SeedableRng::seed_from_u64(4), 200, 50, DIM);
    let appended = ds.append([batch_of(&tail, DIM)]).unwrap();
    assert_eq!((appended.version, appended.rows), (v + 1, 50));
    assert!(appended.segments.is_empty());
    let deleted = ds.delete("id < 10").unwrap();
    assert_eq!((deleted.version, deleted.rows), (v + 2, 10));
    let nothing = ds.delete("id < 10").unwrap();
    assert_eq!(
        (nothing.version, nothing.rows),
        (v + 2, 0),
        "deleting nothing commits nothing"
    );
    let visible = ds.count_rows();
    let index = ds
        .create_index(None, IndexParams::new(IndexKind::IvfFlat, 4))
        .unwrap();
    assert_eq!(index.version, v + 3);
    assert_eq!(index.segments.len(), 1);
    assert_eq!(index.rows, index.segments[0].rows);
    assert_eq!(index.rows, visible, "the visible rows are indexed");
    assert_eq!(visible, (rows.len() + tail.len() - 10) as u64);
    assert_eq!(
        ds.optimize().unwrap(),
        shoal::Commit {
            version: v + 3,
            rows: 0,
            segments: vec![]
        }
    );
    let more = make_rows(&mut rand::SeedableRng::seed_from_u64(5), 250, 30, DIM);
    ds.append([batch_of(&more, DIM)]).unwrap();
    let delta = ds.optimize().unwrap();
    assert_eq!(
        (delta.version, delta.rows, delta.segments.len()),
        (v + 5, 30, 1)
    );
    let rebuilt = ds.reindex(None).unwrap();
    assert_eq!((rebuilt.version, rebuilt.segments.len()), (v + 6, 1));
    assert_eq!(
        shoal::Dataset::open(dir.path()).unwrap().version(),
        rebuilt.version
    );
}

#[test]
fn progress_is_optional_and_reports_each_stage() {
    let dir = tempfile::tempdir().unwrap();
    let (ds, _) = build(dir.path(), &[400], DIM, Metric::L2, 6);
    let seen: Arc<Mutex<Vec<(String, u64, u64)>>> = Arc::default();
    let log = Arc::clone(&seen);
    let mut ds = ds.with_progress(Progress::new(move |stage, done, total| {
        log.lock().unwrap().push((stage.to_string(), done, total));
    }));
    ds.create_index(None, IndexParams::new(IndexKind::IvfFlat, 4))
        .unwrap();
    let seen = seen.lock().unwrap();
    let stages: std::collections::BTreeSet<&str> = seen.iter().map(|s| s.0.as_str()).collect();
    assert!(stages.len() >= 2, "stages reported: {stages:?}");
    assert!(
        seen.iter().all(|(_, done, total)| done <= total),
        "{seen:?}"
    );
    assert!(
        seen.iter()
            .any(|(_, done, total)| done == total && *total > 0),
        "{seen:?}"
    );
}

#[test]
fn a_cancelled_token_stops_every_search_entry_point() {
    let dir = tempfile::tempdir().unwrap();
    let (ds, rows) = build(&dir.path().join("ds"), &[300], DIM, Metric::L2, 7);
    let token = CancelToken::new();
    token.cancel();
    let query = Query::new(rows[0].vector.clone(), 3).cancel_token(token.clone());
    assert!(matches!(ds.search(&query), Err(Error::Cancelled)));
    let batch = BatchQuery::new(vec![rows[1].vector.clone(); 4], 3).cancel_token(token.clone());
    assert!(matches!(ds.search_batch(&batch), Err(Error::Cancelled)));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let engine = Engine::start(Config::default(), dir.path()).unwrap();
        let handle = engine.dataset("ds").await.unwrap();
        assert!(matches!(handle.search(&query).await, Err(Error::Cancelled)));
        assert!(matches!(
            handle.search_batch(&batch).await,
            Err(Error::Cancelled)
        ));
        // The same query without the token is answered.
        let plain = Query::new(rows[0].vector.clone(), 3);
        assert_eq!(handle.search(&plain).await.unwrap().hits.len(), 3);
        engine.shutdown().await;
    });
}

#[test]
fn an_engine_over_an_existing_session_shares_its_caches() {
    let dir = tempfile::tempdir().unwrap();
    let (mut ds, rows) = build(&dir.path().join("ds"), &[500], DIM, Metric::L2, 8);
    ds.create_index(None, IndexParams::new(IndexKind::IvfFlat, 4))
        .unwrap();
    let session = Session::new(Config::default());
    let direct = session.open(dir.path().join("ds")).unwrap();
    let query = Query::new(rows[2].vector.clone(), 5).nprobes(4);
    let alone = direct.search(&query).unwrap();
    let loads = session.partition_cache().counters().misses;
    let hits = session.partition_cache().counters().hits;
    assert!(loads > 0);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let engine = Engine::with_session(session.clone(), dir.path()).unwrap();
        let handle = engine.dataset("ds").await.unwrap();
        let served = handle.search(&query).await.unwrap();
        assert_eq!(served.hits, alone.hits);
        engine.shutdown().await;
    });
    // A private cache would leave the session's counters as they were;
    // the session's cache answered the engine's four probes.
    let after = session.partition_cache().counters();
    assert_eq!(after.misses, loads, "no partition loaded again");
    assert!(
        after.hits >= hits + 4,
        "the engine's probes hit the session's cache: {} -> {}",
        hits,
        after.hits
    );
}
