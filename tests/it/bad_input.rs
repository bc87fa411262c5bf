//! Every bad search input gets a clear error and changes nothing.

use crate::common::OwnMut;
use crate::common::*;
use shoal::PerQuery;
use shoal::{BatchQuery, Config, Dataset, Error, Metric, Query};

#[test]
fn bad_queries_are_rejected_with_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (_, rows) = build(dir.path(), &[50], 4, Metric::Cosine, 1);
    let config = Config::from_toml_str("[limits]\nmax_k = 100\nmax_batch_size = 8\n").unwrap();
    let ds = Dataset::open_with_config(dir.path(), config).unwrap();
    let v = rows[0].vector.clone();
    let err = |q: Query| ds.search(&q).unwrap_err();
    let msg = |q: Query| err(q).to_string();

    assert!(matches!(
        err(Query::new(vec![1.0; 3], 5)),
        Error::DimensionMismatch {
            expected: 4,
            got: 3,
            ..
        }
    ));
    assert!(msg(Query::new(vec![1.0, f32::NAN, 0.0, 0.0], 5)).contains("position 1"));
    assert!(msg(Query::new(vec![1.0, 0.0, f32::INFINITY, 0.0], 5)).contains("non-finite"));
    assert!(msg(Query::new(vec![], 5)).contains("empty"));
    assert!(msg(Query::new(v.clone(), 0)).contains("k must be at least 1"));
    assert!(matches!(
        err(Query::new(v.clone(), 101)),
        Error::LimitExceeded { what: "k", .. }
    ));
    assert!(msg(Query::new(vec![0.0; 4], 5)).contains("zero or too small for cosine"));
    assert!(msg(Query::new(vec![1e-20; 4], 5)).contains("no reliable direction"));
    assert!(msg(Query::new(vec![1e19, 0.0, 0.0, 0.0], 5)).contains("too large"));
    let mut q = Query::new(v.clone(), 5);
    q.shared.column = Some("nope".into());
    assert!(matches!(err(q), Error::UnknownColumn { .. }));
    let mut q = Query::new(v.clone(), 5);
    q.shared.column = Some("len".into());
    assert!(matches!(err(q), Error::WrongColumnType { .. }));
    let mut q = Query::new(v.clone(), 5);
    q.own_mut().filter = Some("len >".into());
    assert!(matches!(err(q), Error::Filter { .. }));
    let mut q = Query::new(v.clone(), 5);
    q.own_mut().filter = Some("colour = 'red'".into());
    assert!(msg(q).contains("unknown column 'colour'"));
    let mut q = Query::new(v.clone(), 5);
    q.own_mut().projection = vec!["nope".into()];
    assert!(matches!(err(q), Error::UnknownColumn { .. }));
    let mut q = Query::new(v.clone(), 5);
    q.shared.version = Some(42);
    assert!(matches!(
        err(q),
        Error::VersionNotFound { requested: 42, .. }
    ));

    let empty = BatchQuery::new(vec![], 5);
    assert!(ds
        .search_batch(&empty)
        .unwrap_err()
        .to_string()
        .contains("no query vectors"));
    let big = BatchQuery::new(vec![v.clone(); 9], 5);
    assert!(matches!(
        ds.search_batch(&big),
        Err(Error::LimitExceeded {
            what: "batch size",
            value: 9,
            max: 8
        })
    ));
    let mut mixed = BatchQuery::new(vec![v.clone(), vec![1.0; 5]], 5);
    assert!(matches!(
        ds.search_batch(&mixed),
        Err(Error::DimensionMismatch { got: 5, .. })
    ));
    mixed.vectors[1] = v.clone();
    mixed.k = PerQuery::Each(vec![1, 2, 3]);
    assert!(ds
        .search_batch(&mixed)
        .unwrap_err()
        .to_string()
        .contains("3 values for 2 queries"));
    // All of the above are user errors, and the dataset is unchanged.
    assert_eq!(Dataset::open(dir.path()).unwrap().version(), ds.version());
    assert!(ds.search(&Query::new(v, 5)).is_ok());
}

#[test]
fn bad_dataset_paths_and_deletes() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        Dataset::open(dir.path().join("missing")),
        Err(Error::DatasetNotFound(_))
    ));
    std::fs::create_dir(dir.path().join("plain")).unwrap();
    assert!(matches!(
        Dataset::open(dir.path().join("plain")),
        Err(Error::NotADataset(_))
    ));
    let (mut ds, _) = build(&dir.path().join("ds"), &[20], 3, Metric::L2, 1);
    let v = ds.version();
    assert!(matches!(ds.delete("nope = 1"), Err(Error::Filter { .. })));
    assert_eq!(ds.delete("len > 1000").unwrap().rows, 0);
    assert_eq!(Dataset::open(dir.path().join("ds")).unwrap().version(), v);
    assert!(matches!(
        Dataset::create(
            dir.path().join("ds"),
            schema(3, Metric::L2),
            Config::default()
        ),
        Err(Error::DatasetExists(_))
    ));
    // A corrupt manifest is reported as corruption, not as garbage.
    let (ds2, _) = build(&dir.path().join("ds2"), &[5], 3, Metric::L2, 1);
    let path = dir
        .path()
        .join("ds2/_versions")
        .join(format!("{:020}.manifest", ds2.version()));
    std::fs::write(&path, b"{ not json").unwrap();
    let err = Dataset::open(dir.path().join("ds2")).unwrap_err();
    assert!(
        matches!(err, Error::Corrupt { .. }) && !err.is_user_error(),
        "{err}"
    );
}

/// Vectors at the edges of float32: rows whose squared norm would overflow
/// distances (values around 1e19), and under cosine rows too small to have
/// a direction (1e-20), are refused at ingest with a message saying why,
/// and the dataset is unchanged; queries likewise. Rows scaled just inside
/// the bounds ingest, build an IVF_PQ index (whose k-means used to panic at
/// 1e19) and search with finite distances, each row finding itself.
#[test]
fn huge_and_directionless_vectors_are_refused_at_ingest() {
    use shoal::{IndexKind, IndexParams};
    let dim = 8;
    for (metric, bad_scale, want, ok_scale) in [
        (Metric::L2, 1e19f32, "too large", 1e16f32),
        (Metric::Cosine, 1e19, "too large", 1e16),
        (Metric::Cosine, 1e-20, "no reliable direction", 1e-14),
    ] {
        let what = format!("{metric:?} {bad_scale:e}");
        let dir = tempfile::tempdir().unwrap();
        let mut rng = rand::SeedableRng::seed_from_u64(4);
        let mut rows = make_rows(&mut rng, 0, 600, dim);
        for r in &mut rows {
            // No zero rows: cosine refuses them too.
            r.vector[0] = 3.0 + r.id as f32 % 5.0;
            r.vector.iter_mut().for_each(|x| *x *= ok_scale);
        }
        let mut ds = Dataset::create(dir.path(), schema(dim, metric), Config::default()).unwrap();
        ds.append([Ok(batch_of(&rows, dim))]).unwrap();
        let before = (ds.version(), ds.count_rows());

        let mut bad = rows[..40].to_vec();
        for (i, r) in bad.iter_mut().enumerate() {
            r.id = 1000 + i as i64;
            r.vector = (0..dim).map(|d| bad_scale * (1.0 + d as f32)).collect();
        }
        let err = ds
            .append([Ok(batch_of(&bad, dim))])
            .unwrap_err()
            .to_string();
        assert!(err.contains(want) && err.contains("row 0"), "{what}: {err}");
        assert_eq!((ds.version(), ds.count_rows()), before, "{what}");
        let reopened = Dataset::open(dir.path()).unwrap();
        assert_eq!((reopened.version(), reopened.count_rows()), before);
        let err = ds
            .search(&Query::new(bad[0].vector.clone(), 5))
            .unwrap_err();
        assert!(err.to_string().contains(want), "{what}: {err}");

        ds.create_index(
            None,
            IndexParams::new(IndexKind::IvfPq { sub_vectors: 4 }, 8),
        )
        .unwrap();
        for r in [&rows[1], &rows[200]] {
            let ann = ds.search(&Query::new(r.vector.clone(), 5)).unwrap();
            assert!(ann.hits.iter().all(|h| h.distance.is_finite()), "{what}");
            let exact = ds
                .search(&Query::new(r.vector.clone(), 1).mode(shoal::SearchMode::Exact))
                .unwrap();
            assert_eq!(exact.hits[0].id, r.id, "{what}");
        }
    }
}
