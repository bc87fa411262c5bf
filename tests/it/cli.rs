//! The `shoal` binary end to end.

use shoal::storage::ingest::{read_ivecs, write_fvecs};
use std::process::Command;

fn shoal(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn ingest_info_search_delete_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let d = |p: &str| dir.path().join(p).to_string_lossy().to_string();
    let rows: Vec<Vec<f32>> = (0..300)
        .map(|i| (0..8).map(|j| ((i * 5 + j) % 13) as f32).collect())
        .collect();
    write_fvecs(&dir.path().join("base.fvecs"), &rows).unwrap();
    write_fvecs(&dir.path().join("q.fvecs"), &rows[10..14]).unwrap();
    std::fs::write(
        dir.path().join("meta.jsonl"),
        (0..300)
            .map(|i| format!("{{\"category\": \"{}\"}}\n", ["a", "b"][i % 2]))
            .collect::<String>(),
    )
    .unwrap();
    let out = shoal(&[
        "ingest",
        "--dataset",
        &d("ds"),
        "--vectors",
        &d("base.fvecs"),
        "--meta",
        &d("meta.jsonl"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("300 rows"));
    let out = shoal(&[
        "search",
        "--dataset",
        &d("ds"),
        "--queries",
        &d("q.fvecs"),
        "--k",
        "3",
        "--batch",
        "3",
        "--output",
        &d("r.ivecs"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ids = read_ivecs(&dir.path().join("r.ivecs")).unwrap();
    assert_eq!(ids.len(), 4);
    for (i, r) in ids.iter().enumerate() {
        assert_eq!(r.len(), 3);
        // The query is row 10 + i; rows repeat every 13, so the nearest ties
        // at distance 0 come in id order.
        assert_eq!(r[0] as usize % 13, (10 + i) % 13);
    }
    let out = shoal(&[
        "search",
        "--dataset",
        &d("ds"),
        "--queries",
        &d("q.fvecs"),
        "--k",
        "2",
        "--filter",
        "category = 'b'",
        "--project",
        "category",
        "--output",
        &d("r.jsonl"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(dir.path().join("r.jsonl")).unwrap();
    assert_eq!(text.lines().count(), 4);
    assert!(text
        .lines()
        .all(|l| !l.contains("\"a\"") && l.contains("\"b\"")));
    let out = shoal(&[
        "delete",
        "--dataset",
        &d("ds"),
        "--filter",
        "category = 'a'",
    ]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("deleted 150 rows"));
    let out = shoal(&["info", "--dataset", &d("ds")]);
    let info = String::from_utf8_lossy(&out.stdout);
    assert!(
        info.contains("rows 150") && info.contains("vector[8]") && info.contains("delete"),
        "{info}"
    );
}

#[test]
fn errors_print_one_line_and_exit_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope").to_string_lossy().to_string();
    let out = shoal(&["info", "--dataset", &missing]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.starts_with("error: no dataset at"), "{err}");
    let out = shoal(&[
        "search",
        "--dataset",
        &missing,
        "--queries",
        "x.fvecs",
        "--k",
        "0",
    ]);
    assert!(!out.status.success());
}
