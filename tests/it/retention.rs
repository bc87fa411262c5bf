//! Retention: old versions and the files only they name are removed; kept
//! versions (the newest, those a handle holds, the young) answer as before,
//! and no file a kept version names is ever deleted.

use crate::common::*;
use rand::SeedableRng;
use shoal::{BatchQuery, Config, Dataset, Engine, IndexKind, IndexParams, Metric, SearchMode};
use std::time::Duration;

const DIM: usize = 8;

fn files_under(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

fn answers(ds: &Dataset, rows: &[Row]) -> Vec<Vec<(i64, u32)>> {
    let queries: Vec<Vec<f32>> = (0..16).map(|i| rows[i * 13].vector.clone()).collect();
    [
        BatchQuery::new(queries.clone(), 10).mode(SearchMode::Exact),
        BatchQuery::new(queries, 10).nprobes(2).filter("len < 20"),
    ]
    .iter()
    .flat_map(|b| ds.search_batch(b).unwrap().hits)
    .map(|hits| hits.iter().map(|h| (h.id, h.distance.to_bits())).collect())
    .collect()
}

/// `version` read cold: opened by a fresh session, whose caches are empty,
/// so that its searches read the files cleanup left (a handle of the
/// session that searched before cleanup answers from its column cache).
/// Every file its manifest names must still be there.
fn cold(dir: &std::path::Path, version: u64) -> Dataset {
    let ds = Dataset::open(dir).unwrap().checkout(version).unwrap();
    for file in ds.manifest().files() {
        assert!(
            dir.join(&file).exists(),
            "version {version} names {file}, which is gone"
        );
    }
    ds
}

#[test]
fn cleanup_keeps_the_newest_and_held_versions_and_removes_only_their_files() {
    let dir = tempfile::tempdir().unwrap();
    let (mut ds, mut rows) = build(dir.path(), &[200, 100], DIM, Metric::L2, 41);
    ds.create_index(None, IndexParams::new(IndexKind::IvfFlat, 4))
        .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    for _ in 0..6 {
        let more = make_rows(&mut rng, rows.len() as i64, 20, DIM);
        ds.append([batch_of(&more, DIM)]).unwrap();
        rows.extend(more);
    }
    ds.delete("len = 5").unwrap();
    let held = ds.checkout(5).unwrap(); // an older version a search holds
    let held_answers = answers(&held, &rows[..300]);
    ds.compact().unwrap();
    ds.create_index(None, IndexParams::new(IndexKind::IvfFlat, 4))
        .unwrap();
    let latest_answers = answers(&ds, &rows);
    let kept_old = ds.version() - 1; // kept by keep_versions = 2
    let kept_old_answers = answers(&ds.checkout(kept_old).unwrap(), &rows);
    let versions = ds.versions().unwrap().len();
    assert_eq!(versions, ds.version() as usize);

    let report = ds.cleanup(2, Duration::ZERO).unwrap();
    let mut expected: Vec<u64> = (1..ds.version() - 1).filter(|&v| v != 5).collect();
    expected.sort();
    assert_eq!(report.versions_removed, expected);
    assert!(report.files_removed > 0 && report.bytes_removed > 0);
    let left: Vec<u64> = ds.versions().unwrap().iter().map(|v| v.version).collect();
    assert_eq!(left, vec![5, ds.version() - 1, ds.version()]);
    // Kept versions answer as before, read cold from their files, which
    // are all there.
    assert_eq!(answers(&ds, &rows), latest_answers);
    assert_eq!(answers(&held, &rows[..300]), held_answers);
    assert_eq!(
        answers(&cold(dir.path(), ds.version()), &rows),
        latest_answers
    );
    assert_eq!(
        answers(&cold(dir.path(), kept_old), &rows),
        kept_old_answers
    );
    assert_eq!(answers(&cold(dir.path(), 5), &rows[..300]), held_answers);
    assert!(matches!(
        ds.checkout(3),
        Err(shoal::Error::VersionNotFound { .. })
    ));
    // Once the old handle is gone, its version goes too.
    drop(held);
    let report = ds.cleanup(1, Duration::ZERO).unwrap();
    assert_eq!(report.versions_removed, vec![5, ds.version() - 1]);
    assert_eq!(
        answers(&cold(dir.path(), ds.version()), &rows),
        latest_answers
    );
    // Only the latest version's files remain: one fragment per kept
    // fragment, one deletion file at most, its index segment.
    let m = ds.manifest();
    assert_eq!(files_under(&dir.path().join("data")), m.fragments.len());
    assert_eq!(files_under(&dir.path().join("indices")), m.indices.len());
    let deletion_files = m
        .fragments
        .iter()
        .filter(|f| f.deletion_file.is_some())
        .count();
    assert_eq!(files_under(&dir.path().join("deletions")), deletion_files);
    assert_eq!(
        ds.cleanup(1, Duration::ZERO).unwrap().versions_removed,
        Vec::<u64>::new()
    );
}

#[test]
fn young_versions_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let (ds, _) = build(dir.path(), &[10, 10, 10], DIM, Metric::L2, 43);
    let report = ds.cleanup(1, Duration::from_secs(3600)).unwrap();
    assert!(report.versions_removed.is_empty());
    assert_eq!(ds.versions().unwrap().len(), 4);
}

#[test]
fn the_engine_keeps_only_its_configured_versions() {
    let dir = tempfile::tempdir().unwrap();
    let (ds, mut rows) = build(&dir.path().join("ds"), &[30], DIM, Metric::L2, 44);
    drop(ds);
    let mut config = Config::default();
    config.retention.keep_versions = 3;
    config.retention.min_age_ms = 0;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let engine = Engine::start(config, dir.path()).unwrap();
        let handle = engine.dataset("ds").await.unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(45);
        for _ in 0..10 {
            let more = make_rows(&mut rng, rows.len() as i64, 5, DIM);
            handle.append(vec![batch_of(&more, DIM)]).await.unwrap();
            rows.extend(more);
        }
        let latest = handle.latest();
        let versions = latest.versions().unwrap();
        assert_eq!(versions.len(), 3, "{versions:?}");
        assert_eq!(latest.count_rows(), rows.len() as u64);
        assert_eq!(
            files_under(&dir.path().join("ds").join("data")),
            latest.manifest().fragments.len()
        );
        engine.shutdown().await;
    });
}

#[test]
fn a_writer_on_a_removed_version_number_conflicts_instead_of_vanishing() {
    let dir = tempfile::tempdir().unwrap();
    let (mut ds, mut rows) = build(dir.path(), &[20], DIM, Metric::L2, 46);
    let mut stale = ds.clone(); // holds version 2
    let mut rng = rand::rngs::StdRng::seed_from_u64(47);
    for _ in 0..5 {
        let more = make_rows(&mut rng, rows.len() as i64, 4, DIM);
        ds.append([batch_of(&more, DIM)]).unwrap();
        rows.extend(more);
    }
    // Versions 3..6 are gone; the stale handle would commit version 3.
    let report = ds.cleanup(1, Duration::ZERO).unwrap();
    assert_eq!(report.versions_removed, vec![1, 3, 4, 5, 6]);
    let late = make_rows(&mut rng, 1_000, 4, DIM);
    assert!(matches!(
        stale.append([batch_of(&late, DIM)]),
        Err(shoal::Error::CommitConflict { version: 3 })
    ));
    assert!(matches!(
        stale.delete("id >= 0"),
        Err(shoal::Error::CommitConflict { .. })
    ));
    let latest = Dataset::open(dir.path()).unwrap();
    assert_eq!(latest.version(), 7);
    assert_eq!(latest.count_rows(), rows.len() as u64);
    let left: Vec<u64> = latest
        .versions()
        .unwrap()
        .iter()
        .map(|v| v.version)
        .collect();
    assert_eq!(
        left,
        vec![2, 7],
        "the stale writer's manifest was not left behind"
    );
}

#[test]
fn a_version_is_young_while_it_was_recently_the_latest() {
    let dir = tempfile::tempdir().unwrap();
    let (mut ds, rows) = build(dir.path(), &[10], DIM, Metric::L2, 48);
    // Ages are wall-clock (a version's age is what is tested), with wide
    // margins: version 2, committed 1.5 s ago, was the latest until now.
    std::thread::sleep(Duration::from_millis(1_500));
    let more = make_rows(
        &mut rand::rngs::StdRng::seed_from_u64(49),
        rows.len() as i64,
        3,
        DIM,
    );
    ds.append([batch_of(&more, DIM)]).unwrap();
    let report = ds.cleanup(1, Duration::from_millis(200)).unwrap();
    assert_eq!(
        report.versions_removed,
        vec![1],
        "version 2 was replaced just now"
    );
    std::thread::sleep(Duration::from_millis(250));
    let report = ds.cleanup(1, Duration::from_millis(200)).unwrap();
    assert_eq!(report.versions_removed, vec![2]);
}

#[test]
fn files_no_version_names_are_removed_once_an_hour_old() {
    let dir = tempfile::tempdir().unwrap();
    let (mut ds, rows) = build(dir.path(), &[120, 80], 6, Metric::L2, 41);
    ds.create_index(None, IndexParams::new(IndexKind::IvfFlat, 4))
        .unwrap();
    let before = answers(&ds, &rows);
    // What failed writes leave: a fragment file, a deletion file and a
    // segment directory no manifest names; two of them old, one fresh.
    let hours_ago = std::time::SystemTime::now() - Duration::from_secs(2 * 3600);
    let old_fragment = dir.path().join("data/99-00000000deadbeef.arrow");
    let old_segment = dir.path().join("indices/ivf_flat-00000000deadbeef");
    let fresh_deletion = dir.path().join("deletions/0-9-00000000deadbeef.bin");
    // A paged fragment's column spools, left by a writer that crashed: one
    // old, one fresh (a write in flight).
    let old_spool = dir.path().join("data/.spool-00000000deadbeef-1");
    let fresh_spool = dir.path().join("data/.spool-00000000feedbeef-0");
    std::fs::write(&old_spool, b"spool").unwrap();
    std::fs::write(&fresh_spool, b"spool").unwrap();
    std::fs::write(&old_fragment, b"orphan").unwrap();
    std::fs::create_dir(&old_segment).unwrap();
    std::fs::write(old_segment.join("model.bin"), b"orphan").unwrap();
    std::fs::write(&fresh_deletion, b"orphan").unwrap();
    for path in [
        &old_fragment,
        &old_segment.join("model.bin"),
        &old_segment,
        &old_spool,
    ] {
        std::fs::File::open(path)
            .unwrap()
            .set_modified(hours_ago)
            .unwrap();
    }
    let report = ds.cleanup(1, Duration::ZERO).unwrap();
    assert_eq!(report.orphans_removed, 3, "{report:?}");
    assert!(!old_fragment.exists() && !old_segment.exists() && !old_spool.exists());
    assert!(
        fresh_deletion.exists() && fresh_spool.exists(),
        "a fresh file may be a write in flight"
    );
    // The dataset's own files are all still there and answer alike.
    assert_eq!(answers(&ds, &rows), before);
    let reopened = Dataset::open(dir.path()).unwrap();
    assert_eq!(answers(&reopened, &rows), before);
}
