//! Every file kind on disk, damaged (a flipped byte, a truncation, appended
//! bytes, a lying length): opening, counting and every search mode either
//! answer exactly as before (the damaged byte was not needed, e.g. JSON
//! whitespace or header padding) or fail with `Error::Corrupt` naming the
//! damaged file — never another answer, another error, or a panic.

use crate::common::*;
use rand::{Rng, SeedableRng};
use shoal::SearchMode;
use shoal::{Config, Dataset, Error, Metric, Query};
use shoal::{IndexKind, IndexParams};
use std::path::{Path, PathBuf};

const DIM: usize = 8;
const PARTITIONS: usize = 8;

/// What a reader sees of the dataset, each operation on its own (named):
/// an answer (ids and distance bits) or the error it ended in.
type Observed = Vec<(&'static str, Result<String, Error>)>;

/// A named way of searching: shapes a query.
type SearchShape = (&'static str, fn(Query) -> Query);

fn observe(root: &Path, queries: &[Vec<f32>]) -> Observed {
    let ds = match Dataset::open(root) {
        Ok(ds) => ds,
        Err(e) => return vec![("open", Err(e))],
    };
    let mut out = vec![(
        "open",
        Ok(format!(
            "rows {} versions {:?} segments {}",
            ds.count_rows(),
            ds.versions().map(|v| v.len()),
            ds.index_segments().len()
        )),
    )];
    let searches: [SearchShape; 5] = [
        ("exact", |q| q.mode(SearchMode::Exact)),
        ("exact filtered", |q| {
            q.mode(SearchMode::Exact)
                .filter("len < 20 AND category != 'verb'")
        }),
        ("shared, every partition", |q| {
            q.mode(SearchMode::Shared).nprobes(PARTITIONS)
        }),
        ("per query, every partition", |q| {
            q.mode(SearchMode::PerQuery).nprobes(PARTITIONS)
        }),
        ("auto, filtered", |q| q.filter("flag = true")),
    ];
    for (name, shape) in searches {
        for q in queries {
            let answer = ds.search(&shape(Query::new(q.clone(), 7))).map(|r| {
                let hits: Vec<(i64, u32)> = r
                    .hits
                    .iter()
                    .map(|h| (h.id, h.distance.to_bits()))
                    .collect();
                format!("{hits:?}")
            });
            out.push((name, answer));
        }
    }
    out
}

/// A dataset of three fragments with deletions and an index of `kind`,
/// written with `config` (the default, or Arrow IPC fragments).
fn fixture_with(dir: &Path, kind: IndexKind, config: Config) -> Vec<Vec<f32>> {
    let (mut ds, rows) = build_with(dir, &[300, 250, 200], DIM, Metric::L2, 11, config);
    assert!(ds.delete("len = 3 OR id = 400").unwrap().rows > 0);
    ds.create_index(None, IndexParams::new(kind, PARTITIONS))
        .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    random_queries(&mut rng, &rows, 3, DIM)
}

/// The dataset's files by kind.
fn files(root: &Path) -> Vec<(&'static str, PathBuf)> {
    let list = |sub: &str| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(root.join(sub))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file())
            .collect();
        v.sort();
        v
    };
    let mut out = Vec::new();
    let manifest = list("_versions").pop().unwrap();
    out.push(("manifest", manifest));
    for f in list("data") {
        out.push(("fragment", f));
    }
    for f in list("deletions") {
        out.push(("deletion bitmap", f));
    }
    if let Some(seg) = std::fs::read_dir(root.join("indices")).unwrap().next() {
        let seg = seg.unwrap().path();
        out.push(("segment.json", seg.join("segment.json")));
        out.push(("model", seg.join("model.bin")));
        out.push(("partitions", seg.join("partitions.bin")));
    }
    out
}

/// Checks one damaged state against the reference. `allowed` are the
/// files a `Corrupt` may name; `index_file` says the damage is in the index
/// (exact searches never read it, so they must still answer). Returns
/// whether any operation noticed.
fn check(
    root: &Path,
    queries: &[Vec<f32>],
    reference: &Observed,
    allowed: &[&Path],
    index_file: bool,
    what: &str,
) -> bool {
    let seen = observe(root, queries);
    let mut noticed = false;
    if let [(_, Err(e))] = seen.as_slice() {
        assert!(!index_file, "{what}: the dataset did not open: {e}");
        assert_corrupt(e, allowed, what);
        return true;
    }
    assert_eq!(seen.len(), reference.len(), "{what}");
    for ((op, got), (_, want)) in seen.iter().zip(reference) {
        match got {
            Ok(answer) => assert_eq!(
                Some(answer),
                want.as_ref().ok(),
                "{what}: a damaged file changed the answer of {op}"
            ),
            Err(e) => {
                assert!(
                    !(index_file && op.starts_with("exact")),
                    "{what}: {op} needs no index file but failed: {e}"
                );
                assert_corrupt(e, allowed, what);
                noticed = true;
            }
        }
    }
    noticed
}

fn assert_corrupt(e: &Error, allowed: &[&Path], what: &str) {
    match e {
        Error::Corrupt { path, .. } => assert!(
            allowed.iter().any(|a| path == a),
            "{what}: Corrupt names {} ({e})",
            path.display()
        ),
        other => panic!("{what}: expected Corrupt, got {other:?}"),
    }
}

fn damage_every_file(kind: IndexKind) {
    damage_every_file_of(kind, Config::default());
}

/// [`damage_every_file`] of a dataset written with `config`.
fn damage_every_file_of(kind: IndexKind, config: Config) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let queries = fixture_with(root, kind, config);
    let reference = observe(root, &queries);
    assert!(reference.iter().all(|(_, r)| r.is_ok()), "{reference:?}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(99);
    for (file_kind, path) in files(root) {
        let original = std::fs::read(&path).unwrap();
        let len = original.len();
        // The segment's files describe each other: a lie in one may be
        // caught as a mismatch in another of the same segment.
        let segment_files: Vec<PathBuf> = ["segment.json", "model.bin", "partitions.bin"]
            .iter()
            .map(|f| path.with_file_name(f))
            .collect();
        let allowed: Vec<&Path> = if file_kind == "segment.json" {
            segment_files.iter().map(|p| p.as_path()).collect()
        } else {
            vec![path.as_path()]
        };
        let must_notice = matches!(file_kind, "fragment" | "deletion bitmap" | "model");
        let mut damages: Vec<(String, Vec<u8>)> = Vec::new();
        let mut positions = vec![0, 7, len / 3, len / 2, len - 1];
        positions.extend((0..12).map(|_| rng.random_range(0..len)));
        for at in positions {
            let mut b = original.clone();
            b[at] ^= 1 << rng.random_range(0..8);
            damages.push((format!("byte {at} flipped"), b));
        }
        for keep in [0, len / 2, len - 1] {
            damages.push((format!("truncated to {keep}"), original[..keep].to_vec()));
        }
        let mut longer = original.clone();
        longer.extend_from_slice(&[0x5a; 16]);
        damages.push(("16 bytes appended".into(), longer));
        for (how, bytes) in damages {
            let what = format!("{} {file_kind} {}: {how}", kind.name(), path.display());
            std::fs::write(&path, &bytes).unwrap();
            let index_file = matches!(file_kind, "segment.json" | "model" | "partitions");
            let noticed = check(root, &queries, &reference, &allowed, index_file, &what);
            // Bytes appended to partitions.bin lie outside every record:
            // harmless, and nothing reads them.
            let harmless_tail = file_kind == "partitions" && how.contains("appended");
            if must_notice || (!how.contains("flipped") && !harmless_tail) {
                assert!(noticed, "{what}: damage went unnoticed");
            }
        }
        std::fs::write(&path, &original).unwrap();
    }
    // Lies about lengths and counts, each a well-formed value.
    let seg = files(root).pop().unwrap().1;
    let seg_dir = seg.parent().unwrap().to_path_buf();
    let partitions = seg_dir.join("partitions.bin");
    let original = std::fs::read(&partitions).unwrap();
    // Header fields of the first record: partition, rows, kind, dim, code
    // length, body length, body CRC (byte offsets 8..40), each off by one —
    // once as a flipped byte (the header's own CRC catches it) and once with
    // the header CRC rewritten to match, so that the field checks against
    // the segment must catch it themselves.
    for (field, at) in [
        ("partition", 8),
        ("rows", 12),
        ("kind", 16),
        ("dim", 20),
        ("code length", 24),
        ("body length", 28),
        ("crc", 36),
    ] {
        for resigned in [false, true] {
            let mut b = original.clone();
            b[at] = b[at].wrapping_add(1);
            if resigned {
                let crc = crc32fast::hash(&b[..40]);
                b[40..44].copy_from_slice(&crc.to_le_bytes());
            }
            std::fs::write(&partitions, &b).unwrap();
            let what = format!(
                "{} partition header {field} + 1 (header CRC rewritten: {resigned})",
                kind.name()
            );
            let allowed = [partitions.as_path()];
            assert!(
                check(root, &queries, &reference, &allowed, true, &what),
                "{what}: unnoticed"
            );
        }
    }
    std::fs::write(&partitions, &original).unwrap();
    let json_path = seg_dir.join("segment.json");
    let json_original = std::fs::read_to_string(&json_path).unwrap();
    for field in ["rows", "len", "offset"] {
        let mut j: serde_json::Value = serde_json::from_str(&json_original).unwrap();
        let v = j["partitions"][1][field].as_u64().unwrap();
        j["partitions"][1][field] = (v + 64).into();
        std::fs::write(&json_path, serde_json::to_string(&j).unwrap()).unwrap();
        let what = format!("{} segment.json partition {field} + 64", kind.name());
        let allowed: Vec<&Path> = vec![json_path.as_path(), partitions.as_path()];
        assert!(
            check(root, &queries, &reference, &allowed, true, &what),
            "{what}: unnoticed"
        );
    }
    std::fs::write(&json_path, &json_original).unwrap();
    assert_eq!(
        format!("{:?}", observe(root, &queries)),
        format!("{reference:?}"),
        "restored files"
    );
}

#[test]
fn damaged_files_of_a_flat_index_dataset_are_corrupt_or_harmless() {
    damage_every_file(IndexKind::IvfFlat);
}

/// The same with the fragments of datasets written before format 4.
#[test]
fn damaged_arrow_ipc_fragments_are_corrupt_or_harmless() {
    damage_every_file_of(IndexKind::IvfFlat, arrow_ipc_config());
}

#[test]
fn damaged_files_of_an_sq_index_dataset_are_corrupt_or_harmless() {
    damage_every_file(IndexKind::IvfSq);
}

#[test]
fn damaged_files_of_a_pq_index_dataset_are_corrupt_or_harmless() {
    damage_every_file(IndexKind::IvfPq { sub_vectors: 4 });
}

#[test]
fn damaged_files_of_an_rq_index_dataset_are_corrupt_or_harmless() {
    damage_every_file(IndexKind::IvfRq { bits: 2 });
}

/// Format 1 manifests (written before checksums) still open, and their
/// fragments are read unchecked — the one case a damaged byte can pass.
#[test]
fn a_format_1_manifest_still_opens() {
    let dir = tempfile::tempdir().unwrap();
    // Format 1 knew only Arrow IPC fragments.
    let queries = fixture_with(dir.path(), IndexKind::IvfFlat, arrow_ipc_config());
    let reference = observe(dir.path(), &queries);
    let (_, manifest) = files(dir.path()).remove(0);
    let mut j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    j["format"] = 1.into();
    j.as_object_mut().unwrap().remove("crc32");
    for f in j["fragments"].as_array_mut().unwrap() {
        f.as_object_mut().unwrap().remove("checksum");
        f.as_object_mut().unwrap().remove("deletion_checksum");
    }
    std::fs::write(&manifest, serde_json::to_string_pretty(&j).unwrap()).unwrap();
    assert_eq!(
        format!("{:?}", observe(dir.path(), &queries)),
        format!("{reference:?}")
    );
}

/// The case: one float of a fragment turned into NaN used to come
/// back as every query's top hit at distance 0; now the search is Corrupt.
#[test]
fn a_nan_written_into_a_fragment_never_reaches_a_result() {
    let dir = tempfile::tempdir().unwrap();
    let (ds, rows) = build(dir.path(), &[200], DIM, Metric::L2, 3);
    let frag = files(dir.path())
        .into_iter()
        .find(|(k, _)| *k == "fragment")
        .unwrap()
        .1;
    let mut bytes = std::fs::read(&frag).unwrap();
    // Find row 17's vector by its exact float bytes and overwrite its first
    // coordinate with NaN.
    let needle: Vec<u8> = rows[17]
        .vector
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let at = bytes
        .windows(needle.len())
        .position(|w| w == needle.as_slice())
        .expect("row 17's vector in the file");
    bytes[at..at + 4].copy_from_slice(&f32::NAN.to_le_bytes());
    std::fs::write(&frag, &bytes).unwrap();
    drop(ds);
    let ds = Dataset::open(dir.path()).unwrap();
    let err = ds
        .search(&Query::new(rows[3].vector.clone(), 5).mode(SearchMode::Exact))
        .unwrap_err();
    assert!(
        matches!(&err, Error::Corrupt { path, .. } if path == &frag),
        "{err:?}"
    );
}
