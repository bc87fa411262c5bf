//! Versions, snapshots, crash safety and commit conflicts.

use crate::common::*;
use rand::SeedableRng;
use shoal::{Config, Dataset, Error, Metric, Query};

fn ids(ds: &Dataset, q: &[f32], k: usize) -> Vec<(i64, u32)> {
    ds.search(&Query::new(q.to_vec(), k))
        .unwrap()
        .hits
        .iter()
        .map(|h| (h.id, h.distance.to_bits()))
        .collect()
}

#[test]
fn a_pinned_version_does_not_see_later_appends_or_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let (mut ds, rows) = build(dir.path(), &[200], 6, Metric::L2, 1);
    let pinned = ds.clone();
    let v = pinned.version();
    let q = rows[10].vector.clone();
    let before = ids(&pinned, &q, 15);
    let mut rng = rand::rngs::StdRng::seed_from_u64(2);
    let more = make_rows(&mut rng, 200, 100, 6);
    ds.append([Ok(batch_of(&more, 6))]).unwrap();
    assert!(ds.delete("id < 50").unwrap().rows > 0);
    assert_eq!(ds.version(), v + 2);
    assert_eq!(ids(&pinned, &q, 15), before);
    assert_eq!(pinned.count_rows(), 200);
    assert_eq!(ds.count_rows(), 250);
    // Reopen from disk and check out the old version.
    let reopened = Dataset::open(dir.path()).unwrap();
    assert_eq!(reopened.version(), v + 2);
    assert_eq!(ids(&reopened.checkout(v).unwrap(), &q, 15), before);
    let mut by_version = Query::new(q.clone(), 15);
    by_version.shared.version = Some(v);
    let res = reopened.search(&by_version).unwrap();
    assert_eq!(res.version, v);
    assert_eq!(
        res.hits
            .iter()
            .map(|h| (h.id, h.distance.to_bits()))
            .collect::<Vec<_>>(),
        before
    );
    let history = reopened.versions().unwrap();
    assert_eq!(
        history
            .iter()
            .map(|h| h.operation.as_str())
            .collect::<Vec<_>>(),
        ["create", "append", "append", "delete"]
    );
    assert!(matches!(
        reopened.checkout(99),
        Err(Error::VersionNotFound {
            requested: 99,
            latest: 4
        })
    ));
}

#[test]
fn an_unpublished_commit_leaves_the_previous_version_intact() {
    let dir = tempfile::tempdir().unwrap();
    let (ds, rows) = build(dir.path(), &[100], 5, Metric::L2, 3);
    let q = rows[0].vector.clone();
    let before = ids(&ds, &q, 10);
    let mut rng = rand::rngs::StdRng::seed_from_u64(4);
    let more = make_rows(&mut rng, 100, 50, 5);
    let staged = ds.stage_append([Ok(batch_of(&more, 5))]).unwrap();
    assert_eq!(staged.version(), ds.version() + 1);
    drop(staged); // "crash": data written, manifest never published
                  // A half-written manifest temp file, as a crash mid-write would leave.
    std::fs::write(
        dir.path().join("_versions/.tmp-3-1-deadbeef"),
        b"{\"truncated",
    )
    .unwrap();
    let reopened = Dataset::open(dir.path()).unwrap();
    assert_eq!(reopened.version(), ds.version());
    assert_eq!(reopened.count_rows(), 100);
    assert_eq!(ids(&reopened, &q, 10), before);
    // And the next commit still works.
    let mut w = reopened.clone();
    w.append([Ok(batch_of(&more, 5))]).unwrap();
    assert_eq!(w.count_rows(), 150);
}

#[test]
fn the_loser_of_a_commit_race_gets_a_conflict_and_the_dataset_stays_valid() {
    let dir = tempfile::tempdir().unwrap();
    let (ds, _) = build(dir.path(), &[30], 3, Metric::L2, 5);
    let mut a = Dataset::open(dir.path()).unwrap();
    let mut b = Dataset::open(dir.path()).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(6);
    let rows_a = make_rows(&mut rng, 30, 10, 3);
    let rows_b = make_rows(&mut rng, 30, 20, 3);
    a.append([Ok(batch_of(&rows_a, 3))]).unwrap();
    let err = b.append([Ok(batch_of(&rows_b, 3))]).unwrap_err();
    assert!(
        matches!(err, Error::CommitConflict { version } if version == ds.version() + 1),
        "{err}"
    );
    let latest = Dataset::open(dir.path()).unwrap();
    assert_eq!(latest.count_rows(), 40);
    assert_eq!(b.version(), ds.version(), "the loser's handle is unchanged");
    // Two deletes racing: same rule.
    let mut c = latest.clone();
    let mut d = latest.clone();
    c.delete("id = 1").unwrap();
    assert!(matches!(
        d.delete("id = 2"),
        Err(Error::CommitConflict { .. })
    ));
    assert_eq!(Dataset::open(dir.path()).unwrap().count_rows(), 39);
}

#[test]
fn appends_split_into_fragments_of_the_configured_size() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::from_toml_str("[ingest]\nrows_per_fragment = 64\n").unwrap();
    let mut ds = Dataset::create(dir.path(), schema(4, Metric::L2), config).unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(8);
    let rows = make_rows(&mut rng, 0, 150, 4);
    ds.append([Ok(batch_of(&rows[..100], 4)), Ok(batch_of(&rows[100..], 4))])
        .unwrap();
    let sizes: Vec<u64> = ds.manifest().fragments.iter().map(|f| f.rows).collect();
    assert_eq!(sizes, vec![64, 64, 22]);
    let hits = ids(&ds, &rows[140].vector, 1);
    assert_eq!(
        ds.search(&Query::new(rows[140].vector.clone(), 1))
            .unwrap()
            .hits[0]
            .distance,
        0.0
    );
    assert_eq!(hits.len(), 1);
}

#[test]
fn kill_dash_nine_during_a_large_ingest_leaves_the_last_committed_version() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("ds");
    let input = dir.path().join("big.fvecs");
    // 1,500,000 × 16 floats ≈ 102 MB: long enough to be killed mid-way.
    let dim = 16;
    let n = 1_500_000usize;
    let mut bytes = Vec::with_capacity(n * (4 + dim * 4));
    for i in 0..n {
        bytes.extend_from_slice(&(dim as i32).to_le_bytes());
        for j in 0..dim {
            bytes.extend_from_slice(&(((i * 31 + j * 7) % 97) as f32).to_le_bytes());
        }
    }
    std::fs::write(&input, &bytes).unwrap();
    let small = dir.path().join("small.fvecs");
    std::fs::write(&small, &bytes[..10 * (4 + dim * 4)]).unwrap();
    let bin = env!("CARGO_BIN_EXE_shoal");
    let ok = std::process::Command::new(bin)
        .args(["ingest", "--dataset"])
        .arg(&data)
        .arg("--vectors")
        .arg(&small)
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let mut child = std::process::Command::new(bin)
        .args(["ingest", "--dataset"])
        .arg(&data)
        .arg("--vectors")
        .arg(&input)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the child has written part of a new fragment, then kill it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let written: u64 = std::fs::read_dir(data.join("data"))
            .unwrap()
            .filter_map(|e| e.ok())
            .filter_map(|e| e.metadata().ok())
            .map(|m| m.len())
            .sum();
        if written > 4_000_000 {
            break;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "ingest finished before it could be killed"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "ingest made no progress"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL on Unix
    child.wait().unwrap();
    let ds = Dataset::open(&data).unwrap();
    assert_eq!(ds.version(), 2, "the killed ingest must not have committed");
    assert_eq!(ds.count_rows(), 10);
    let res = ds.search(&Query::new(vec![0.0; dim], 3)).unwrap();
    assert_eq!(res.hits.len(), 3);
}

/// A manifest that names a file outside the dataset, or counts more
/// deleted rows than rows, is corrupt: opening it fails naming the
/// manifest, and nothing outside the dataset is read.
#[test]
fn a_manifest_naming_files_outside_the_dataset_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    // Arrow IPC fragments: the test turns the manifest back into format 1.
    let (mut ds, _) = build_with(dir.path(), &[50], 4, Metric::L2, 1, arrow_ipc_config());
    assert!(ds.delete("id < 5").unwrap().rows > 0);
    let v = ds.version();
    // The newest manifest: `_versions/` names sort by version.
    let mut names: Vec<_> = std::fs::read_dir(dir.path().join("_versions"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    let path = names.pop().unwrap();
    assert!(path.to_string_lossy().contains(&format!("{v:020}")));
    let original = std::fs::read_to_string(&path).unwrap();
    let json: serde_json::Value = serde_json::from_str(&original).unwrap();
    // Format 1 manifests carry no checksum: the checks below must hold on
    // their own. (A format 2 manifest edited the same way fails its
    // checksum first, checked at the end.)
    let legacy = |mut j: serde_json::Value| {
        j["format"] = 1.into();
        j.as_object_mut().unwrap().remove("crc32");
        for f in j["fragments"].as_array_mut().unwrap() {
            f.as_object_mut().unwrap().remove("checksum");
            f.as_object_mut().unwrap().remove("deletion_checksum");
        }
        j
    };
    let edited = |field: &str, value: serde_json::Value| {
        let mut j = json.clone();
        j["fragments"][0][field] = value;
        serde_json::to_string_pretty(&legacy(j)).unwrap()
    };
    let rows = json["fragments"][0]["rows"].as_u64().unwrap();
    let lies = [
        edited("file", "../../../../etc/passwd".into()),
        edited("file", "/etc/passwd".into()),
        edited("deletion_file", "../x.bin".into()),
        edited("deleted_rows", (rows + 1).into()),
    ];
    for lie in lies {
        assert_ne!(lie, original, "the edit must change the manifest");
        std::fs::write(&path, &lie).unwrap();
        match Dataset::open(dir.path()) {
            Err(Error::Corrupt { path: named, .. }) => assert_eq!(named, path),
            other => panic!("expected Corrupt naming the manifest, got {other:?}"),
        }
    }
    // A vector dimension of 2^32 - 1: refused before anything is sized by it.
    let mut huge = legacy(json.clone());
    for col in huge["schema"]["columns"].as_array_mut().unwrap() {
        if col["type"] == "vector" {
            col["dim"] = u32::MAX.into();
        }
    }
    std::fs::write(&path, serde_json::to_string_pretty(&huge).unwrap()).unwrap();
    let err = Dataset::open(dir.path()).unwrap_err();
    assert!(matches!(err, Error::LimitExceeded { .. }), "{err}");
    // A format number turned back to 1 while the checksums remain: damage.
    let mut downgraded = json.clone();
    downgraded["format"] = 1.into();
    std::fs::write(&path, serde_json::to_string_pretty(&downgraded).unwrap()).unwrap();
    let err = Dataset::open(dir.path()).unwrap_err();
    assert!(
        err.to_string()
            .contains("format 1 manifest carries checksums"),
        "{err}"
    );
    // The same edit in the format 2 manifest as written: its checksum.
    let mut signed_lie = json.clone();
    signed_lie["fragments"][0]["deleted_rows"] = (rows + 1).into();
    std::fs::write(&path, serde_json::to_string_pretty(&signed_lie).unwrap()).unwrap();
    let err = Dataset::open(dir.path()).unwrap_err();
    assert!(err.to_string().contains("checksum mismatch"), "{err}");
    std::fs::write(&path, &original).unwrap();
    assert_eq!(Dataset::open(dir.path()).unwrap().count_rows(), 45);
}

/// A dataset written before format 3 (a format 2 manifest, checksummed,
/// without a commit nonce, Arrow IPC fragments) still opens and answers,
/// and its next commit writes this build's format with a nonce of its own.
#[test]
fn a_format_2_manifest_without_a_commit_nonce_still_opens() {
    let dir = tempfile::tempdir().unwrap();
    // Fragments as format 2 wrote them: Arrow IPC files.
    let (ds, rows) = build_with(dir.path(), &[40], 8, Metric::L2, 12, arrow_ipc_config());
    let path = dir
        .path()
        .join("_versions")
        .join(format!("{:020}.manifest", ds.version()));
    let mut m: shoal::Manifest =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(m.format, 4);
    assert!(
        m.commit_nonce.is_some(),
        "format 3 on records the commit's nonce"
    );
    // As format 2 wrote it: no nonce, its CRC-32 over the compact JSON
    // without the crc32 field.
    m.format = 2;
    m.commit_nonce = None;
    m.crc32 = None;
    m.crc32 = Some(crc32fast::hash(&serde_json::to_vec(&m).unwrap()));
    std::fs::write(&path, serde_json::to_string_pretty(&m).unwrap()).unwrap();
    let mut old = Dataset::open(dir.path()).unwrap();
    let q = rows[3].vector.clone();
    assert_eq!(ids(&old, &q, 5), ids(&ds, &q, 5));
    let mut rng = rand::rngs::StdRng::seed_from_u64(13);
    old.append([batch_of(&make_rows(&mut rng, 40, 5, 8), 8)])
        .unwrap();
    let next: shoal::Manifest = serde_json::from_str(
        &std::fs::read_to_string(
            dir.path()
                .join("_versions")
                .join(format!("{:020}.manifest", old.version())),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!((next.format, next.commit_nonce.is_some()), (4, true));
    assert_eq!(Dataset::open(dir.path()).unwrap().count_rows(), 45);
}
