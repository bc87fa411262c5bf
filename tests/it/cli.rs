//! The `shoal` binary end to end.

use shoal::ingest::{read_ivecs, write_fvecs};
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

#[test]
fn index_optimize_and_search_modes_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = |p: &str| dir.path().join(p).to_string_lossy().to_string();
    let all = shoal::demo::clustered_vectors(1200, 16, 10, 4);
    let rows: Vec<Vec<f32>> = all.chunks(16).map(|c| c.to_vec()).collect();
    write_fvecs(&dir.path().join("a.fvecs"), &rows[..1000]).unwrap();
    write_fvecs(&dir.path().join("b.fvecs"), &rows[1000..1190]).unwrap();
    write_fvecs(&dir.path().join("q.fvecs"), &rows[1190..]).unwrap();
    let ok = |args: &[&str]| {
        let out = shoal(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    ok(&["ingest", "--dataset", &d("ds"), "--vectors", &d("a.fvecs")]);
    let (out, _) = ok(&[
        "index",
        "--dataset",
        &d("ds"),
        "--type",
        "ivf-pq",
        "--partitions",
        "8",
        "--sub-vectors",
        "4",
    ]);
    assert!(out.contains("built ivf_pq"), "{out}");
    ok(&["ingest", "--dataset", &d("ds"), "--vectors", &d("b.fvecs")]);
    let (out, _) = ok(&["compact", "--dataset", &d("ds")]);
    assert!(
        out.contains("nothing to compact"),
        "one unindexed fragment: {out}"
    );
    ok(&["ingest", "--dataset", &d("ds"), "--vectors", &d("b.fvecs")]);
    let (out, _) = ok(&["compact", "--dataset", &d("ds")]);
    assert!(
        out.contains("compacted") && out.contains("fragments ->"),
        "{out}"
    );
    let (out, _) = ok(&["optimize", "--dataset", &d("ds")]);
    assert!(out.contains("delta segment"), "{out}");
    let (out, _) = ok(&[
        "cleanup",
        "--dataset",
        &d("ds"),
        "--keep",
        "2",
        "--min-age-ms",
        "0",
    ]);
    assert!(
        out.contains("removed ") && out.contains(" versions and "),
        "{out}"
    );
    let (info, _) = ok(&["info", "--dataset", &d("ds")]);
    assert!(
        info.contains("ivf_pq") && info.contains("(delta; model of"),
        "{info}"
    );
    let (_, explain) = ok(&[
        "search",
        "--dataset",
        &d("ds"),
        "--queries",
        &d("q.fvecs"),
        "--k",
        "5",
        "--nprobes",
        "3",
        "--explain",
    ]);
    assert!(explain.contains("mode shared_scan"), "{explain}");
    let (_, explain) = ok(&[
        "search",
        "--dataset",
        &d("ds"),
        "--queries",
        &d("q.fvecs"),
        "--k",
        "5",
        "--refine-factor",
        "2",
        "--explain",
    ]);
    assert!(
        explain.contains("mode shared_scan") && !explain.contains("fallback"),
        "{explain}"
    );
    assert!(explain.contains("refine rows read 100"), "{explain}");
    let (a, _) = ok(&[
        "search",
        "--dataset",
        &d("ds"),
        "--queries",
        &d("q.fvecs"),
        "--k",
        "5",
        "--nprobes",
        "8",
        "--mode",
        "shared",
    ]);
    let (b, _) = ok(&[
        "search",
        "--dataset",
        &d("ds"),
        "--queries",
        &d("q.fvecs"),
        "--k",
        "5",
        "--nprobes",
        "8",
        "--mode",
        "per-query",
    ]);
    assert_eq!(a, b, "shared and per-query print the same rows");
    let (_, _) = ok(&["reindex", "--dataset", &d("ds")]);
    let out = shoal(&[
        "search",
        "--dataset",
        &d("ds"),
        "--queries",
        &d("q.fvecs"),
        "--nprobes",
        "0",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nprobes must be at least 1"));
    let out = shoal(&[
        "index",
        "--dataset",
        &d("ds"),
        "--type",
        "ivf-pq",
        "--sub-vectors",
        "5",
        "--partitions",
        "4",
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("sub-vectors must divide"));
}

#[cfg(unix)]
#[test]
fn serve_answers_http_and_stops_cleanly_on_sigint() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let (mut ds, _) =
        crate::common::build(&dir.path().join("small"), &[120], 8, shoal::Metric::L2, 4);
    ds.create_index(None, shoal::IndexParams::new(shoal::IndexKind::IvfFlat, 4))
        .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.contains("(small)"), "{first}");
    let url = first.split("on ").last().unwrap().trim().to_string();
    let mut response = ureq::get(format!("{url}/v1/datasets")).call().unwrap();
    let body = response.body_mut().read_to_string().unwrap();
    assert_eq!(body, r#"{"datasets":["small"]}"#);
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    // A server that missed the signal must fail the test, not hang it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("shoal serve did not stop within 60 s of SIGINT");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(status.success(), "exit status {status:?}");
    let rest: Vec<String> = lines.map_while(|l| l.ok()).collect();
    assert!(rest.iter().any(|l| l == "shoal stopped"), "{rest:?}");
}

/// A command whose stdout cannot be written fails with `error:` (a write
/// says that it committed, so a retrying script does not apply it twice);
/// a reader that closed the pipe ends the command quietly. Never a panic.
#[test]
fn stdout_failures_are_errors_not_panics() {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full (Linux) is needed to make stdout fail");
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    let input = dir.path().join("v.fvecs");
    let vectors: Vec<Vec<f32>> = (0..50).map(|i| vec![i as f32, 1.0, 2.0, 3.0]).collect();
    write_fvecs(&input, &vectors).unwrap();
    let ingest = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["ingest", "--dataset", ds.to_str().unwrap()])
        .args(["--vectors", input.to_str().unwrap()])
        .stdout(full.try_clone().unwrap())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&ingest.stderr);
    assert_eq!(ingest.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("error: ") && stderr.contains("version 2 was committed"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    let info = shoal(&["info", "--dataset", ds.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&info.stdout).contains("version 2  rows 50"));

    let to_full = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["info", "--dataset", ds.to_str().unwrap()])
        .stdout(full)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&to_full.stderr);
    assert_eq!(to_full.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("<stdout>"), "{stderr}");

    let mut closed = Command::new(env!("CARGO_BIN_EXE_shoal"))
        .args(["info", "--dataset", ds.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(closed.stdout.take());
    let done = closed.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert_eq!(done.status.code(), Some(0), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}

/// Hostile ingest inputs end in exit code 1 and one `error:` line that
/// names the right file and says what is wrong (never a panic, exit 101).
#[test]
fn hostile_ingest_inputs_exit_1_with_one_error_line() {
    use crate::common::{first_data_page, vector_tag_batch, with_inserted, write_parquet};
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    let path = |name: &str| dir.path().join(name);
    // `shoal ingest --dataset ds --vectors <input> <extra...>`
    let ingest = |input: &str, extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_shoal"))
            .args(["ingest", "--dataset"])
            .arg(&ds)
            .arg("--vectors")
            .arg(path(input))
            .args(extra)
            .output()
            .unwrap()
    };
    let fails = |out: std::process::Output, needles: &[&str]| {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with("error: "), "{stderr}");
        for needle in needles {
            assert!(stderr.contains(needle), "expected '{needle}' in: {stderr}");
        }
    };
    // Parquet with 31 bytes inserted into its first data page: find an
    // insertion that reaches the decoder's panic through the library.
    let good = path("good.parquet");
    write_parquet(&good, &vector_tag_batch(200, 8, false));
    let bytes = std::fs::read(&good).unwrap();
    let page = first_data_page(&good);
    let opts = shoal::ingest::IngestOptions::default();
    let panicking = (page..page + 48).find(|&at| {
        std::fs::write(path("bad.parquet"), with_inserted(&bytes, at, 31, 0xFF)).unwrap();
        let probe = path("probe");
        shoal::ingest::ingest(&probe, &path("bad.parquet"), &opts, &Default::default())
            .is_err_and(|e| e.to_string().contains("the decoder failed"))
    });
    assert!(
        panicking.is_some(),
        "no insertion reached the decoder's panic"
    );
    fails(
        ingest("bad.parquet", &[]),
        &["bad.parquet: after row 0: the decoder failed"],
    );
    assert!(!ds.exists());
    // A dictionary-encoded string column is read.
    write_parquet(&path("dict.parquet"), &vector_tag_batch(20, 4, true));
    let out = ingest("dict.parquet", &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let info = shoal(&["info", "--dataset", ds.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&info.stdout).contains("tag              utf8"));
    // --meta errors name the meta file and line, a meta field that sets
    // the vector column says so, and so does --column naming a scalar.
    write_fvecs(&path("v.fvecs"), &vec![vec![1.0, 2.0, 3.0, 4.0]; 3]).unwrap();
    std::fs::write(path("m.jsonl"), "{\"tag\": \"a\"}\n{\"tag\": 5}\n{}\n").unwrap();
    std::fs::write(path("v.jsonl"), "{\"vector\": [1, 2, 3, 4]}\n{}\n{}\n").unwrap();
    let meta = |file: &str| path(file).to_string_lossy().to_string();
    fails(
        ingest("v.fvecs", &["--meta", &meta("m.jsonl")]),
        &["m.jsonl: line 2: field 'tag' should be a string"],
    );
    fails(
        ingest("v.fvecs", &["--meta", &meta("v.jsonl")]),
        &[
            "v.jsonl: line 1: field 'vector' is the vector column",
            "v.fvecs",
        ],
    );
    fails(
        ingest("v.fvecs", &["--column", "tag"]),
        &["column 'tag' is utf8, expected a vector column"],
    );
    let info = shoal(&["info", "--dataset", ds.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&info.stdout).contains("version 2  rows 20"));
}
