//! One session per process: shared bounded caches, projected lazy reads,
//! the scan pool and cancellation.

use crate::common::OwnMut;
use crate::common::*;
use shoal::{BatchQuery, CancelToken, Config, Error, Metric, Query, Session};
use shoal::{IndexKind, IndexParams};
use shoal::{Nprobes, SearchMode};

fn bits(r: &shoal::SearchResults) -> Vec<Vec<(u64, u32)>> {
    r.hits
        .iter()
        .map(|h| h.iter().map(|h| (h.row_id, h.distance.to_bits())).collect())
        .collect()
}

fn indexed_session_dataset(
    session: &Session,
    dir: &std::path::Path,
    rows: usize,
    seed: u64,
) -> (shoal::Dataset, Vec<Row>) {
    use rand::SeedableRng;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut ds = session.create(dir, schema(16, Metric::L2)).unwrap();
    let all = make_rows(&mut rng, 0, rows, 16);
    for chunk in all.chunks(rows / 2) {
        ds.append([Ok(batch_of(chunk, 16))]).unwrap();
    }
    ds.create_index(None, IndexParams::new(IndexKind::IvfFlat, 16))
        .unwrap();
    (ds, all)
}

#[test]
fn two_datasets_in_one_session_share_one_cache_bound() {
    let cap = 24 * 1024;
    let config = Config::from_toml_str(&format!(
        "[cache]\ncapacity_bytes = {cap}\ncolumn_bytes = {cap}\n"
    ))
    .unwrap();
    let session = Session::new(config);
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, rows_a) = indexed_session_dataset(&session, d1.path(), 2000, 1);
    let (b, rows_b) = indexed_session_dataset(&session, d2.path(), 2000, 2);
    // Each index alone is bigger than the bound: 2,000 rows × 16 floats.
    let mut peak = 0;
    for round in 0..20 {
        for (ds, rows) in [(&a, &rows_a), (&b, &rows_b)] {
            let q: Vec<Vec<f32>> = (0..8)
                .map(|i| rows[(round * 97 + i * 31) % rows.len()].vector.clone())
                .collect();
            let mut batch = BatchQuery::new(q, 10);
            batch.own_mut().nprobes = Some(Nprobes::Fixed(4));
            let res = ds.search_batch(&batch).unwrap();
            assert!(res.hits.iter().all(|h| h.len() == 10));
            let held = session.partition_cache().weighted_size();
            assert!(held <= cap, "partitions held {held} > {cap}");
            let cols = session.column_cache().weighted_size();
            assert!(cols <= cap, "columns held {cols} > {cap}");
            peak = peak.max(held);
        }
    }
    assert!(peak > 0, "the cache was used");
    // Both datasets answer from one cache: their partitions have distinct keys.
    let c = session.partition_cache().counters();
    assert!(c.misses > 0 && c.hits + c.misses >= 20 * 2 * 8);
}

#[test]
fn indexed_search_with_projection_never_loads_the_vector_column() {
    let session = Session::new(Config::default());
    let dir = tempfile::tempdir().unwrap();
    let (ds, rows) = indexed_session_dataset(&session, dir.path(), 1200, 3);
    let q: Vec<Vec<f32>> = (0..20).map(|i| rows[i * 13].vector.clone()).collect();
    for mode in [SearchMode::Auto, SearchMode::PerQuery] {
        let mut batch = BatchQuery::new(q.clone(), 5);
        batch.own_mut().nprobes = Some(Nprobes::Fixed(3));
        batch.shared.mode = mode;
        batch.own_mut().projection = vec!["category".into()];
        batch.own_mut().filter = Some("len < 20".into());
        let res = ds.search_batch(&batch).unwrap();
        assert!(res
            .hits
            .iter()
            .all(|h| h.len() == 5 && h[0].values.len() == 1));
    }
    let fragments = ds.fragments().unwrap();
    assert_eq!(fragments.len(), 2);
    let cache = session.column_cache();
    for f in &fragments {
        assert!(!cache.contains(f.path(), "emb"), "vectors were loaded");
        assert!(
            !cache.contains(f.path(), "flag"),
            "an unused column was loaded"
        );
        assert!(
            cache.contains(f.path(), "len"),
            "the filter's column is read"
        );
    }
    // The projected column: the pages of the hits (one page of 2,048
    // strings holds every row of these fragments), not the whole column.
    assert!(fragments
        .iter()
        .any(|f| cache.contains_page(f.path(), "category", 0)));
    assert!(fragments
        .iter()
        .all(|f| !cache.contains(f.path(), "category")));
    // An exact search does read the vectors.
    let mut exact = BatchQuery::new(q, 5);
    exact.shared.mode = SearchMode::Exact;
    ds.search_batch(&exact).unwrap();
    assert!(fragments.iter().all(|f| cache.contains(f.path(), "emb")));
}

#[test]
fn a_search_cancelled_mid_scan_stops_and_releases_everything() {
    let config = Config::from_toml_str("[cache]\ncapacity_bytes = 65536\n").unwrap();
    let session = Session::new(config);
    let dir = tempfile::tempdir().unwrap();
    let (ds, rows) = indexed_session_dataset(&session, dir.path(), 20_000, 4);
    let q: Vec<Vec<f32>> = (0..256).map(|i| rows[i * 71].vector.clone()).collect();
    let mut batch = BatchQuery::new(q, 10);
    batch.own_mut().nprobes = Some(Nprobes::Fixed(16));
    let before = ds.search_batch(&batch).unwrap();
    // Cancelled before it starts: nothing runs.
    let token = CancelToken::new();
    token.cancel();
    assert!(matches!(
        ds.search_batch(&batch.clone().cancel_token(token)),
        Err(Error::Cancelled)
    ));
    // Cancelled from another thread while scanning, for every mode.
    for mode in [SearchMode::Auto, SearchMode::PerQuery, SearchMode::Exact] {
        let mut b = batch.clone();
        b.shared.mode = mode;
        let mut cancelled = false;
        for delay_us in [2000u64, 500, 100, 10, 0] {
            let token = CancelToken::new();
            let outcome = std::thread::scope(|s| {
                s.spawn(|| {
                    std::thread::sleep(std::time::Duration::from_micros(delay_us));
                    token.cancel();
                });
                ds.search_batch(&b.clone().cancel_token(token.clone()))
            });
            match outcome {
                Err(Error::Cancelled) => {
                    cancelled = true;
                    break;
                }
                Ok(_) => continue, // finished before the cancel: try sooner
                Err(e) => panic!("{e}"),
            }
        }
        assert!(cancelled, "{mode:?}: never observed a cancellation");
        assert_eq!(session.partition_cache().loads_in_flight(), 0);
    }
    let after = ds.search_batch(&batch).unwrap();
    assert_eq!(
        bits(&before),
        bits(&after),
        "same answer after cancellations"
    );
    let one = ds.search(&Query::new(rows[5].vector.clone(), 3)).unwrap();
    assert_eq!(one.hits.len(), 3);
}

#[test]
fn builder_methods_set_the_same_fields_as_the_struct() {
    let q = Query::new(vec![1.0; 16], 5)
        .filter("len < 12")
        .postfilter()
        .select(["category"])
        .column("emb")
        .nprobes(3)
        .fast_search()
        .version(2)
        .metric(Metric::L2)
        .offset(1);
    let mut by_hand = Query::new(vec![1.0; 16], 5);
    by_hand.own_mut().filter = Some("len < 12".into());
    by_hand.own_mut().filter_mode = shoal::FilterMode::Postfilter;
    by_hand.own_mut().projection = vec!["category".into()];
    by_hand.shared.column = Some("emb".into());
    by_hand.own_mut().nprobes = Some(Nprobes::Fixed(3));
    by_hand.shared.fast_search = true;
    by_hand.shared.version = Some(2);
    by_hand.shared.metric = Some(Metric::L2);
    by_hand.offset = 1;
    assert_eq!(q, by_hand);
    // The shared fields are one hashable key (what a coalescer groups by);
    // k, offset and the vector are not part of it.
    let keys: std::collections::HashSet<shoal::SharedParams> = [
        q.shared.clone(),
        Query::new(vec![2.0; 16], 9).filter("len < 12").shared,
        q.clone().into_batch().shared,
    ]
    .into_iter()
    .collect();
    assert_eq!(keys.len(), 2);
    assert!(keys.contains(&by_hand.shared));
    assert_eq!(
        Query::new(vec![2.0; 16], 9).shared,
        Query::new(vec![2.0; 16], 9)
            .filter("len < 12")
            .nprobes(3)
            .shared,
        "a query's own filter and probing are not part of the shared key"
    );
    let b = BatchQuery::new(vec![vec![0.0; 16]; 2], 4)
        .ks(vec![1, 2])
        .offsets(vec![0, 3])
        .adaptive_nprobes(2, 8)
        .refine_factor(2)
        .mode(SearchMode::PerQuery);
    assert_eq!(b.k, shoal::PerQuery::Each(vec![1, 2]));
    assert_eq!(b.offset, shoal::PerQuery::Each(vec![0, 3]));
    assert_eq!(
        b.params_of(1).nprobes,
        Some(Nprobes::Adaptive { min: 2, max: 8 })
    );
    assert_eq!(b.params_of(0).refine_factor, Some(2));
    assert_eq!(b.shared.mode, SearchMode::PerQuery);
    // The built query searches like the hand-made one.
    let session = Session::new(Config::default());
    let dir = tempfile::tempdir().unwrap();
    let (ds, rows) = indexed_session_dataset(&session, dir.path(), 600, 5);
    let built = Query::new(rows[3].vector.clone(), 4)
        .filter("len < 20")
        .select(["len"])
        .nprobes(5);
    let mut hand = Query::new(rows[3].vector.clone(), 4);
    hand.own_mut().filter = Some("len < 20".into());
    hand.own_mut().projection = vec!["len".into()];
    hand.own_mut().nprobes = Some(Nprobes::Fixed(5));
    let (built, hand) = (ds.search(&built).unwrap(), ds.search(&hand).unwrap());
    assert_eq!((built.hits, built.projection), (hand.hits, hand.projection));
}
