//! The `hnsw` index kind against the contract the IVF indexes keep: a
//! query's answer in any batch (any size, mode, mix of filters, k, offset
//! and ef) is its answer alone; distances are the exact scan's; deleted
//! rows never return; appended rows are searched exactly until `optimize`
//! adds a delta graph; a filter admitting few rows is scanned exactly;
//! damaged files are `Corrupt`; bad parameters are refused by name.

use crate::common::*;
use rand::{Rng, SeedableRng};
use shoal::{
    BatchQuery, Dataset, Error, IndexKind, IndexParams, Metric, PerQueryParams, Query, SearchMode,
};

const DIM: usize = 8;

fn hnsw(m: usize, ef_construction: usize) -> IndexParams {
    IndexParams::new(IndexKind::Hnsw { m, ef_construction }, 1)
}

fn alone(ds: &Dataset, batch: &BatchQuery, i: usize) -> Vec<(i64, u32, Vec<shoal::ScalarValue>)> {
    seen(ds, &batch.query(i).unwrap().into_batch()).remove(0)
}

/// Deletes the rows `sql` matches, which `picks` names, in the dataset
/// and in `rows`.
fn delete(ds: &mut Dataset, rows: &mut [Row], sql: &str, picks: impl Fn(&Row) -> bool) {
    ds.delete(sql).unwrap();
    for r in rows.iter_mut().filter(|r| picks(r)) {
        r.deleted = true;
    }
}

#[test]
fn hnsw_batches_answer_each_query_as_it_is_answered_alone() {
    let filters = [
        None,
        Some("category = 'noun'"),
        Some("len < 3"),
        Some("id = 5 OR id = 700 OR id = 1250"),
        Some("flag = true AND category != 'verb'"),
    ];
    for (mi, metric) in [Metric::L2, Metric::Cosine, Metric::Dot]
        .into_iter()
        .enumerate()
    {
        let dir = tempfile::tempdir().unwrap();
        let (mut ds, mut rows) = build(dir.path(), &[700, 500], DIM, metric, 11 + mi as u64);
        delete(&mut ds, &mut rows, "len = 4", |r| r.len == Some(4));
        ds.create_index(Some("emb"), hnsw(6, 40)).unwrap();
        // Rows appended after the build (searched exactly), some deleted.
        let mut rng = rand::rngs::StdRng::seed_from_u64(99 + mi as u64);
        let more = make_rows(&mut rng, rows.len() as i64, 150, DIM);
        ds.append([Ok(batch_of(&more, DIM))]).unwrap();
        rows.extend(more);
        delete(&mut ds, &mut rows, "len = 17", |r| r.len == Some(17));

        let vectors = random_queries(&mut rng, &rows, 48, DIM);
        let n = vectors.len();
        let mut ks = Vec::new();
        let mut offsets = Vec::new();
        let mut each = Vec::new();
        for _ in 0..n {
            let k = rng.random_range(1..=12);
            ks.push(k);
            offsets.push(rng.random_range(0..3));
            each.push(PerQueryParams {
                filter: filters[rng.random_range(0..filters.len())].map(str::to_string),
                filter_mode: if rng.random_range(0..5) == 0 {
                    shoal::FilterMode::Postfilter
                } else {
                    shoal::FilterMode::Prefilter
                },
                ef: [None, Some(k), Some(24), Some(100)][rng.random_range(0..4)],
                projection: vec!["len".into()],
                ..PerQueryParams::default()
            });
        }
        let batch = BatchQuery::new(vectors.clone(), 10)
            .ks(ks.clone())
            .offsets(offsets.clone())
            .each(each.clone());
        let together = seen(&ds, &batch);
        let mut per_query = batch.clone();
        per_query.shared.mode = SearchMode::PerQuery;
        assert_eq!(
            seen(&ds, &per_query),
            together,
            "{metric}: per_query ≡ shared"
        );
        for (i, hits) in together.iter().enumerate() {
            assert_eq!(&alone(&ds, &batch, i), hits, "{metric}: query {i} alone");
        }
        // Batches of 7, in another order: the same rows for each query.
        let order: Vec<usize> = (0..n).rev().collect();
        for chunk in order.chunks(7) {
            let part = BatchQuery::new(chunk.iter().map(|&i| vectors[i].clone()).collect(), 10)
                .ks(chunk.iter().map(|&i| ks[i]).collect())
                .offsets(chunk.iter().map(|&i| offsets[i]).collect())
                .each(chunk.iter().map(|&i| each[i].clone()).collect());
            for (j, hits) in seen(&ds, &part).into_iter().enumerate() {
                assert_eq!(
                    hits, together[chunk[j]],
                    "{metric}: query {} in a chunk",
                    chunk[j]
                );
            }
        }
        // Nothing deleted comes back; the filter that admits three rows
        // is answered exactly (it is below the exact-scan rule).
        for (i, hits) in together.iter().enumerate() {
            for (id, _, _) in hits {
                assert!(
                    !rows[*id as usize].deleted,
                    "{metric}: deleted row {id} returned"
                );
            }
            let spec = &each[i];
            if spec.filter.as_deref() == filters[3]
                && spec.filter_mode == shoal::FilterMode::Prefilter
            {
                let keep = |r: &Row| [5, 700, 1250].contains(&r.id);
                let want = brute_force(&rows, metric, &vectors[i], ks[i], offsets[i], &keep);
                let got: Vec<i64> = hits.iter().map(|h| h.0).collect();
                let want: Vec<i64> = want.iter().map(|w| w.0).collect();
                assert_eq!(got, want, "{metric}: query {i}, three admitted rows");
            }
        }
    }
}

/// Clustered data: recall@10 of a walk against brute force, the walk's
/// distances are the exact scan's bit for bit, a filter admitting a third
/// of the rows keeps its recall, and `explain` tells a walk from the exact
/// scan of a few filtered rows.
#[test]
fn hnsw_finds_the_nearest_rows_at_the_exact_scans_distances() {
    let (n, dim, nq) = (4_000, 32, 60);
    let data = shoal::demo::clustered_vectors(n + nq, dim, 24, 5);
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let mut rows = make_rows(&mut rng, 0, n, dim);
    for (r, v) in rows.iter_mut().zip(data.chunks(dim)) {
        r.vector = v.to_vec();
    }
    let queries: Vec<Vec<f32>> = data[n * dim..].chunks(dim).map(<[f32]>::to_vec).collect();
    let dir = tempfile::tempdir().unwrap();
    let mut ds = Dataset::create(
        dir.path(),
        schema(dim, Metric::L2),
        shoal::Config::default(),
    )
    .unwrap();
    ds.append([Ok(batch_of(&rows, dim))]).unwrap();
    ds.create_index(None, hnsw(16, 100)).unwrap();
    for (filter, keep, floor) in [
        (None, &(|_: &Row| true) as &dyn Fn(&Row) -> bool, 0.95),
        (Some("flag = true"), &|r: &Row| r.flag, 0.9),
    ] {
        let (mut hit, mut total) = (0usize, 0usize);
        for q in &queries {
            let mut query = Query::new(q.clone(), 10).ef(64);
            let mut exact = Query::new(q.clone(), 10).mode(SearchMode::Exact);
            if let Some(f) = filter {
                query = query.filter(f);
                exact = exact.filter(f);
            }
            let got = ds.search(&query).unwrap().hits;
            let want = brute_force(&rows, Metric::L2, q, 10, 0, keep);
            hit += got
                .iter()
                .filter(|h| want.iter().any(|w| w.0 == h.id))
                .count();
            total += want.len();
            let exact = ds.search(&exact).unwrap().hits;
            for h in &got {
                assert!(keep(&rows[h.id as usize]), "row {} fails the filter", h.id);
                if let Some(e) = exact.iter().find(|e| e.id == h.id) {
                    assert_eq!(h.distance.to_bits(), e.distance.to_bits(), "row {}", h.id);
                }
            }
        }
        let recall = hit as f64 / total as f64;
        assert!(recall >= floor, "filter {filter:?}: recall@10 {recall}");
    }
    let q = queries[0].clone();
    let (_, walk) = ds.explain(&Query::new(q.clone(), 10).into_batch()).unwrap();
    assert_eq!((walk.graph_walks, walk.graph_exact_scans), (1, 0));
    let few = Query::new(q.clone(), 10).filter("id < 40");
    let (res, scan) = ds.explain(&few.clone().into_batch()).unwrap();
    assert_eq!((scan.graph_walks, scan.graph_exact_scans), (0, 1));
    let exact = ds.search(&few.mode(SearchMode::Exact)).unwrap();
    let ids = |hits: &[shoal::Hit]| -> Vec<(i64, u32)> {
        hits.iter().map(|h| (h.id, h.distance.to_bits())).collect()
    };
    assert_eq!(
        ids(&res.hits[0]),
        ids(&exact.hits),
        "the exact scan of few rows"
    );
    assert!(scan.render().contains("exact scans of filtered rows 1"));
}

/// Appended rows are found before and after `optimize` (which adds a
/// delta graph), a deleted nearest row is never returned, and `reindex`
/// folds everything into one graph.
#[test]
fn appended_rows_deletions_optimize_and_reindex() {
    let dir = tempfile::tempdir().unwrap();
    let (mut ds, mut rows) = build(dir.path(), &[600], DIM, Metric::L2, 21);
    ds.create_index(None, hnsw(8, 50)).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let mut more = make_rows(&mut rng, 600, 200, DIM);
    // A vector far from every other row: only an appended row matches it.
    more[17].vector = vec![9.0; DIM];
    ds.append([Ok(batch_of(&more, DIM))]).unwrap();
    rows.extend(more);
    let far = vec![9.0f32; DIM];
    let top = |ds: &Dataset| ds.search(&Query::new(far.clone(), 3)).unwrap().hits[0].clone();
    assert_eq!(
        (top(&ds).id, top(&ds).distance),
        (617, 0.0),
        "searched exactly"
    );
    let commit = ds.optimize().unwrap();
    assert_eq!(commit.segments.len(), 1, "one delta graph");
    assert_eq!(commit.segments[0].params.kind.name(), "hnsw");
    assert_eq!(ds.index_segments().len(), 2);
    assert_eq!(top(&ds).id, 617, "found through the delta graph");
    let (_, p) = ds
        .explain(&Query::new(far.clone(), 3).into_batch())
        .unwrap();
    assert_eq!(p.graph_walks, 2, "one walk per graph");
    delete(&mut ds, &mut rows, "id = 617", |r| r.id == 617);
    let after = ds.search(&Query::new(far.clone(), 3)).unwrap().hits;
    assert!(after.iter().all(|h| h.id != 617), "a deleted row is masked");
    let want = brute_force(&rows, Metric::L2, &far, 3, 0, &|_| true);
    assert_eq!(after[0].id, want[0].0, "the next nearest");
    ds.reindex(None).unwrap();
    assert_eq!(ds.index_segments().len(), 1);
    assert_eq!(ds.index_segments()[0].rows, 799);
    assert_eq!(
        ds.search(&Query::new(far, 3)).unwrap().hits[0].id,
        want[0].0
    );
}

#[test]
fn bad_hnsw_parameters_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let (mut ds, _) = build(dir.path(), &[300], DIM, Metric::L2, 1);
    let message = |e: Error| e.to_string();
    let e = message(ds.create_index(None, hnsw(0, 100)).unwrap_err());
    assert!(e.contains("m must be 2 to"), "{e}");
    let e = message(ds.create_index(None, hnsw(16, 8)).unwrap_err());
    assert!(e.contains("ef_construction must be at least m"), "{e}");
    assert_eq!(ds.index_segments().len(), 0, "nothing built");
    ds.create_index(None, hnsw(8, 32)).unwrap();
    let q = vec![0.5f32; DIM];
    let e = message(ds.search(&Query::new(q.clone(), 10).ef(5)).unwrap_err());
    assert!(e.contains("ef (5) must be at least k (10)"), "{e}");
    let e = message(
        ds.search(&Query::new(q.clone(), 10).nprobes(4))
            .unwrap_err(),
    );
    assert!(
        e.contains("nprobes applies to IVF indexes") && e.contains("is hnsw"),
        "{e}"
    );
    let e = message(
        ds.search(&Query::new(q.clone(), 10).ef(100_000))
            .unwrap_err(),
    );
    assert!(e.contains("ef"), "{e}");
    // An exact search takes either.
    assert_eq!(
        ds.search(&Query::new(q.clone(), 10).nprobes(4).mode(SearchMode::Exact))
            .unwrap()
            .hits
            .len(),
        10
    );
    ds.create_index(None, IndexParams::new(IndexKind::IvfFlat, 4))
        .unwrap();
    let e = message(ds.search(&Query::new(q.clone(), 10).ef(50)).unwrap_err());
    assert!(
        e.contains("ef applies to hnsw indexes") && e.contains("ivf_flat"),
        "{e}"
    );
    let batch = BatchQuery::new(vec![q.clone(), q], 10).each(vec![
        PerQueryParams::default(),
        PerQueryParams {
            ef: Some(20),
            ..PerQueryParams::default()
        },
    ]);
    let e = message(ds.search_batch(&batch).unwrap_err());
    assert!(
        e.starts_with("invalid argument: query 1: ef applies"),
        "{e}"
    );
}

/// Each file of an hnsw segment damaged: the indexed search fails with
/// `Corrupt` naming the file; an exact search still answers.
#[test]
fn a_damaged_hnsw_segment_is_corrupt_and_exact_search_still_answers() {
    for (file, damage) in [
        ("graph.bin", 0usize),
        ("vectors.bin", 1),
        ("hnsw.json", 2),
        ("graph.bin", 3),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (mut ds, _) = build(dir.path(), &[400], DIM, Metric::L2, 8);
        ds.create_index(None, hnsw(6, 30)).unwrap();
        let id = ds.index_segments()[0].id.clone();
        let path = dir.path().join("indices").join(&id).join(file);
        let mut bytes = std::fs::read(&path).unwrap();
        match damage {
            0 => {
                let at = bytes.len() / 2;
                bytes[at] ^= 0x40;
            }
            1 => bytes.truncate(bytes.len() - 4),
            2 => bytes = b"{ not json".to_vec(),
            _ => bytes.extend_from_slice(&[0, 0, 0, 0]),
        }
        std::fs::write(&path, bytes).unwrap();
        let ds = Dataset::open(dir.path()).unwrap();
        let q = vec![0.5f32; DIM];
        match ds.search(&Query::new(q.clone(), 5)) {
            Err(Error::Corrupt { path: p, .. }) => {
                assert!(p.ends_with(file), "{file}: names {}", p.display())
            }
            other => panic!("{file} damage {damage}: {other:?}"),
        }
        assert_eq!(
            ds.search(&Query::new(q, 5).mode(SearchMode::Exact))
                .unwrap()
                .hits
                .len(),
            5
        );
    }
}
