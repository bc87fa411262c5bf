//! Hostile input, fuzz-style: random bytes and random mutations (byte
//! flips, truncations, inserted bytes) of valid `.fvecs`, `.npy`, Parquet,
//! JSON Lines and `--meta` files through the public ingest, and random text
//! as search filters. Every call returns (no panic, no abort); a failed
//! ingest is a user error and leaves the dataset as it was, or absent when
//! it was the first ingest.

use crate::common::OwnMut;
use crate::common::{build, vector_tag_batch, write_parquet, Row, CATS};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config as RunnerConfig, TestCaseError, TestRunner};
use shoal::ingest::ingest;
use shoal::ingest::{write_fvecs, IngestOptions};
use shoal::{Config, Dataset, Metric, Query};
use std::path::Path;

/// One edit of a valid file.
#[derive(Clone, Debug)]
enum Edit {
    /// XOR one byte with a non-zero mask.
    Flip(Index, u8),
    /// Cut the file at a position.
    Truncate(Index),
    /// Insert random bytes at a position.
    Insert(Index, Vec<u8>),
    /// Insert a run of one byte (0xFF runs make over-long varints).
    Run(Index, u8, usize),
}

/// What an ingest is fed: a valid file edited, or bytes from nowhere.
#[derive(Clone, Debug)]
enum Hostile {
    Edited(Vec<Edit>),
    Random(Vec<u8>),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        5 => (any::<Index>(), 1..=255u8).prop_map(|(i, x)| Edit::Flip(i, x)),
        1 => any::<Index>().prop_map(Edit::Truncate),
        2 => (any::<Index>(), prop::collection::vec(any::<u8>(), 1..40))
            .prop_map(|(i, b)| Edit::Insert(i, b)),
        2 => (any::<Index>(), prop::sample::select(vec![0x00, 0x7F, 0x80, 0xFF]), 1..64usize)
            .prop_map(|(i, b, n)| Edit::Run(i, b, n)),
    ]
}

fn hostile() -> impl Strategy<Value = Hostile> {
    prop_oneof![
        6 => prop::collection::vec(edit(), 1..5).prop_map(Hostile::Edited),
        1 => prop::collection::vec(any::<u8>(), 0..600).prop_map(Hostile::Random),
    ]
}

fn apply(valid: &[u8], hostile: &Hostile) -> Vec<u8> {
    let edits = match hostile {
        Hostile::Random(bytes) => return bytes.clone(),
        Hostile::Edited(edits) => edits,
    };
    let mut b = valid.to_vec();
    for e in edits {
        match e {
            Edit::Flip(i, x) if !b.is_empty() => {
                let at = i.index(b.len());
                b[at] ^= x;
            }
            Edit::Flip(..) => {}
            Edit::Truncate(i) => b.truncate(i.index(b.len() + 1)),
            Edit::Insert(i, bytes) => {
                let at = i.index(b.len() + 1);
                b.splice(at..at, bytes.iter().copied());
            }
            Edit::Run(i, byte, n) => {
                let at = i.index(b.len() + 1);
                b.splice(at..at, std::iter::repeat_n(*byte, *n));
            }
        }
    }
    b
}

fn quiet() -> IngestOptions {
    IngestOptions::default()
}

/// `(version, rows)` of the dataset at `dir`, `None` when there is none.
fn state(dir: &Path) -> Option<(u64, u64)> {
    let ds = Dataset::open(dir).ok()?;
    Some((ds.version(), ds.count_rows()))
}

/// Ingests `bytes` (as `input.{ext}`) into a dataset made from `valid`
/// and into no dataset; `meta` is a `--meta` file's valid text when the
/// mutation is of that file (the input is then `valid`).
fn ingest_hostile(
    ext: &str,
    valid: &[u8],
    bytes: &[u8],
    meta: Option<&[u8]>,
) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join(format!("good.{ext}"));
    std::fs::write(&good, valid).unwrap();
    let (input, opts) = match meta {
        None => {
            let input = dir.path().join(format!("input.{ext}"));
            std::fs::write(&input, bytes).unwrap();
            (input, quiet())
        }
        Some(good_meta) => {
            let meta = dir.path().join("meta.jsonl");
            std::fs::write(&meta, bytes).unwrap();
            let good_meta_path = dir.path().join("good_meta.jsonl");
            std::fs::write(&good_meta_path, good_meta).unwrap();
            let with_good = IngestOptions {
                meta: Some(good_meta_path),
                ..quiet()
            };
            // The existing dataset gets the meta file's columns.
            ingest(
                &dir.path().join("ds"),
                &good,
                &with_good,
                &Config::default(),
            )
            .unwrap();
            let opts = IngestOptions {
                meta: Some(meta),
                ..quiet()
            };
            (good.clone(), opts)
        }
    };
    let existing = dir.path().join("ds");
    if meta.is_none() {
        ingest(&existing, &good, &quiet(), &Config::default()).unwrap();
    }
    let before = state(&existing).unwrap();
    match ingest(&existing, &input, &opts, &Config::default()) {
        Ok(report) => {
            prop_assert_eq!(
                state(&existing),
                Some((report.version, before.1 + report.rows))
            );
        }
        Err(e) => {
            prop_assert!(e.is_user_error(), "not a user error: {}", e);
            prop_assert_eq!(state(&existing), Some(before), "changed by: {}", e);
        }
    }
    let fresh = dir.path().join("fresh");
    match ingest(&fresh, &input, &opts, &Config::default()) {
        Ok(report) => prop_assert_eq!(state(&fresh), Some((report.version, report.rows))),
        Err(e) => {
            prop_assert!(e.is_user_error(), "not a user error: {}", e);
            prop_assert!(
                !fresh.exists(),
                "a failed first ingest left a dataset: {}",
                e
            );
        }
    }
    Ok(())
}

/// A runner of `cases` cases (`PROPTEST_CASES` overrides it for a longer
/// run), without a failure file.
fn runner(cases: u32) -> TestRunner {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(cases);
    TestRunner::new(RunnerConfig {
        cases,
        failure_persistence: None,
        ..RunnerConfig::default()
    })
}

/// Feeds `cases` hostile versions of `valid` to the `ext` reader.
fn fuzz_reader(ext: &str, valid: Vec<u8>, cases: u32) {
    runner(cases)
        .run(&hostile(), |h| {
            ingest_hostile(ext, &valid, &apply(&valid, &h), None)
        })
        .unwrap();
}

fn vectors(n: usize, dim: usize) -> Vec<Vec<f32>> {
    (0..n)
        .map(|i| {
            (0..dim)
                .map(|j| (i * dim + j) as f32 * 0.25 - 3.0)
                .collect()
        })
        .collect()
}

fn fvecs_bytes(n: usize, dim: usize) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.fvecs");
    write_fvecs(&path, &vectors(n, dim)).unwrap();
    std::fs::read(path).unwrap()
}

#[test]
fn hostile_fvecs_never_panic_and_change_nothing() {
    fuzz_reader("fvecs", fvecs_bytes(12, 4), 48);
}

#[test]
fn hostile_npy_never_panic_and_change_nothing() {
    let rows = vectors(12, 4);
    let mut header = "{'descr': '<f4', 'fortran_order': False, 'shape': (12, 4), }".to_string();
    while !(10 + header.len() + 1).is_multiple_of(64) {
        header.push(' ');
    }
    header.push('\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(header.len() as u16).to_le_bytes());
    bytes.extend_from_slice(header.as_bytes());
    for x in rows.iter().flatten() {
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    fuzz_reader("npy", bytes, 48);
}

#[test]
fn hostile_parquet_never_panic_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    for dictionary in [false, true] {
        let path = dir.path().join(format!("{dictionary}.parquet"));
        write_parquet(&path, &vector_tag_batch(12, 4, dictionary));
        fuzz_reader("parquet", std::fs::read(&path).unwrap(), 48);
    }
}

#[test]
fn hostile_jsonl_never_panic_and_change_nothing() {
    let text: String = vectors(12, 4)
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let row =
                serde_json::json!({"vector": v, "tag": CATS[i % 4], "n": i, "ok": i % 2 == 0});
            row.to_string() + "\n"
        })
        .collect();
    fuzz_reader("jsonl", text.into_bytes(), 48);
}

#[test]
fn hostile_meta_never_panic_and_change_nothing() {
    let valid = fvecs_bytes(12, 4);
    let meta: String = (0..12)
        .map(|i| {
            format!(
                "{{\"tag\": \"{}\", \"n\": {i}, \"x\": {}.5}}\n",
                CATS[i % 4],
                i
            )
        })
        .collect();
    runner(48)
        .run(&hostile(), |h| {
            let bytes = apply(meta.as_bytes(), &h);
            ingest_hostile("fvecs", &valid, &bytes, Some(meta.as_bytes()))
        })
        .unwrap();
}

/// Filter text: anything printable, or a soup of the filter language's
/// own tokens (which reaches deeper into the parser and type checks).
fn filter_text() -> impl Strategy<Value = String> {
    let tokens = vec![
        "len",
        "category",
        "flag",
        "id",
        "emb",
        "nope",
        "=",
        "!=",
        "<>",
        "<",
        "<=",
        ">",
        ">=",
        "AND",
        "OR",
        "NOT",
        "(",
        ")",
        "IS",
        "NULL",
        "IN",
        "LIKE",
        "BETWEEN",
        ",",
        "'noun'",
        "'%n%'",
        "'",
        "''",
        "\"",
        "1",
        "-1",
        "2.5",
        "1e308",
        "9223372036854775808",
        "TRUE",
        "FALSE",
        "+",
        "-",
        "*",
        "/",
        "%",
        ";",
        "SELECT",
        "--",
        "/*",
        "[",
        "]",
        ".",
        "::",
    ];
    prop_oneof![
        "\\PC{0,80}",
        prop::collection::vec(prop::sample::select(tokens), 0..40).prop_map(|t| t.join(" ")),
    ]
}

fn searchable(dir: &Path) -> (Dataset, Vec<Row>) {
    let (_, rows) = build(dir, &[60], 4, Metric::L2, 11);
    // One scan thread: the filter is evaluated on the caller's thread.
    let config = Config::from_toml_str("[search]\nthreads = 1\n").unwrap();
    (Dataset::open_with_config(dir, config).unwrap(), rows)
}

#[test]
fn random_filters_are_answered_or_rejected_never_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let (ds, _) = searchable(dir.path());
    runner(256)
        .run(&filter_text(), |sql| {
            let mut q = Query::new(vec![1.0, 0.5, -0.5, 0.0], 5);
            q.own_mut().filter = Some(sql.clone());
            if let Err(e) = ds.search(&q) {
                prop_assert!(e.is_user_error(), "{:?}: {}", sql, e);
            }
            Ok(())
        })
        .unwrap();
}

/// A random filter the test can evaluate itself.
#[derive(Clone, Debug)]
enum Cond {
    LenLt(i64),
    LenEq(i64),
    LenIsNull,
    LenBetween(i64, i64),
    Category(usize),
    CategoryIn(usize, usize),
    CategoryLikeN,
    Flag,
    Not(Box<Cond>),
    And(Vec<Cond>),
    Or(Vec<Cond>),
}

impl Cond {
    fn sql(&self) -> String {
        let join = |cs: &[Cond], op: &str| {
            cs.iter()
                .map(|c| format!("({})", c.sql()))
                .collect::<Vec<_>>()
                .join(op)
        };
        match self {
            Cond::LenLt(k) => format!("len < {k}"),
            Cond::LenEq(k) => format!("{k} = len"),
            Cond::LenIsNull => "len IS NULL".into(),
            Cond::LenBetween(a, b) => format!("len BETWEEN {a} AND {b}"),
            Cond::Category(c) => format!("category = '{}'", CATS[*c]),
            Cond::CategoryIn(a, b) => format!("category IN ('{}', '{}')", CATS[*a], CATS[*b]),
            Cond::CategoryLikeN => "category LIKE 'n%'".into(),
            Cond::Flag => "flag".into(),
            Cond::Not(c) => format!("NOT ({})", c.sql()),
            Cond::And(cs) => join(cs, " AND "),
            Cond::Or(cs) => join(cs, " OR "),
        }
    }

    /// SQL's three-valued truth of the filter on `row` (`None`: unknown).
    fn truth(&self, row: &Row) -> Option<bool> {
        let cat = row.category.as_deref();
        match self {
            Cond::LenLt(k) => row.len.map(|l| l < *k),
            Cond::LenEq(k) => row.len.map(|l| l == *k),
            Cond::LenIsNull => Some(row.len.is_none()),
            Cond::LenBetween(a, b) => row.len.map(|l| *a <= l && l <= *b),
            Cond::Category(c) => cat.map(|v| v == CATS[*c]),
            Cond::CategoryIn(a, b) => cat.map(|v| v == CATS[*a] || v == CATS[*b]),
            Cond::CategoryLikeN => cat.map(|v| v.starts_with('n')),
            Cond::Flag => Some(row.flag),
            Cond::Not(c) => c.truth(row).map(|t| !t),
            Cond::And(cs) | Cond::Or(cs) => {
                let (decides, rest) = match self {
                    Cond::And(_) => (false, true),
                    _ => (true, false),
                };
                let truths: Vec<Option<bool>> = cs.iter().map(|c| c.truth(row)).collect();
                if truths.contains(&Some(decides)) {
                    Some(decides)
                } else if truths.iter().all(|t| *t == Some(rest)) {
                    Some(rest)
                } else {
                    None
                }
            }
        }
    }
}

fn cond() -> impl Strategy<Value = Cond> {
    let leaf = prop_oneof![
        (-2i64..32).prop_map(Cond::LenLt),
        (-2i64..32).prop_map(Cond::LenEq),
        Just(Cond::LenIsNull),
        (-2i64..32, -2i64..32).prop_map(|(a, b)| Cond::LenBetween(a, b)),
        (0..CATS.len()).prop_map(Cond::Category),
        (0..CATS.len(), 0..CATS.len()).prop_map(|(a, b)| Cond::CategoryIn(a, b)),
        Just(Cond::CategoryLikeN),
        Just(Cond::Flag),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            inner.clone().prop_map(|c| Cond::Not(Box::new(c))),
            prop::collection::vec(inner.clone(), 2..5).prop_map(Cond::And),
            prop::collection::vec(inner, 2..5).prop_map(Cond::Or),
        ]
    })
}

/// Random filters over every supported predicate, nested in AND, OR and
/// NOT, select exactly the rows SQL's three-valued logic selects, as
/// prefilter and as postfilter.
#[test]
fn random_filters_select_the_rows_three_valued_logic_selects() {
    let dir = tempfile::tempdir().unwrap();
    let (ds, rows) = searchable(dir.path());
    runner(128)
        .run(&cond(), |c| {
            let sql = c.sql();
            let want: Vec<i64> = rows
                .iter()
                .filter(|r| c.truth(r) == Some(true))
                .map(|r| r.id)
                .collect();
            prop_assert_eq!(&matching(&ds, &sql), &want, "{}", sql);
            let mut q = Query::new(vec![1.0, 0.5, -0.5, 0.0], 1000);
            q.own_mut().filter = Some(sql.clone());
            q.own_mut().filter_mode = shoal::FilterMode::Postfilter;
            let mut post: Vec<i64> = ds.search(&q).unwrap().hits.iter().map(|h| h.id).collect();
            post.sort();
            prop_assert_eq!(&post, &want, "postfilter {}", sql);
            Ok(())
        })
        .unwrap();
}

/// Ids of all rows matching `filter`, sorted.
fn matching(ds: &Dataset, filter: &str) -> Vec<i64> {
    let mut q = Query::new(vec![1.0, 0.5, -0.5, 0.0], 1000);
    q.own_mut().filter = Some(filter.into());
    let mut ids: Vec<i64> = ds.search(&q).unwrap().hits.iter().map(|h| h.id).collect();
    ids.sort();
    ids
}

/// 100,000-term AND, OR and mixed chains as search filters, parsed and
/// evaluated on a thread with a 2 MiB stack (the filter's own unit test
/// does the same for `Filter` alone): the rows an independent reference
/// picks, no stack overflow.
#[test]
fn filter_chains_of_100k_terms_search_on_a_2_mib_stack() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            let (ds, rows) = searchable(&path);
            let reference = |keep: &dyn Fn(&Row) -> bool| -> Vec<i64> {
                rows.iter().filter(|r| keep(r)).map(|r| r.id).collect()
            };
            let and = vec!["len != -1"; 100_000].join(" AND ") + " AND len < 20";
            let short = reference(&|r| r.len.is_some_and(|l| l < 20));
            assert!(!short.is_empty() && short.len() < rows.len());
            assert_eq!(matching(&ds, &and), short);
            let or = vec!["len = -1"; 100_000].join(" OR ") + " OR category = 'noun'";
            let nouns = reference(&|r| r.category.as_deref() == Some("noun"));
            assert_eq!(matching(&ds, &or), nouns);
            // a AND b OR a AND b OR ...: an OR of 50,000 two-term ANDs.
            let mixed = vec!["flag AND len = 3"; 50_000].join(" OR ");
            let flagged = reference(&|r| r.flag && r.len == Some(3));
            assert_eq!(matching(&ds, &mixed), flagged);
            // A long chain ending in garbage is an error, not a crash.
            let bad = vec!["len = 1"; 100_000].join(" AND ") + " AND";
            let mut q = Query::new(vec![1.0, 0.5, -0.5, 0.0], 5);
            q.own_mut().filter = Some(bad);
            assert!(matches!(ds.search(&q), Err(shoal::Error::Filter { .. })));
        })
        .unwrap()
        .join()
        .unwrap();
}
