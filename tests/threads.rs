//! The scan pool: a process's OS threads do not grow with the number of
//! searches. A test binary of its own, so that no other test's threads are
//! counted.

use shoal::demo::{clustered_vectors, demo_batch, demo_schema};
use shoal::SearchMode;
use shoal::{BatchQuery, Config, Metric, Session};
use shoal::{IndexKind, IndexParams};

/// Thread ids of this process. A thread spawned (even if joined again)
/// gets a new id, so a search that makes threads shows up here.
fn os_threads() -> std::collections::BTreeSet<String> {
    std::fs::read_dir("/proc/self/task")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn os_threads_do_not_grow_over_a_thousand_searches_of_every_mode() {
    let config = Config::from_toml_str("[search]\nthreads = 2\n").unwrap();
    let session = Session::new(config);
    let dir = tempfile::tempdir().unwrap();
    let dim = 16;
    let vectors = clustered_vectors(4000, dim, 20, 9);
    let mut ds = session
        .create(dir.path(), demo_schema("vector", dim, Metric::L2).unwrap())
        .unwrap();
    ds.append([demo_batch("vector", dim, &vectors[..2000 * dim], 0)])
        .unwrap();
    ds.create_index(
        None,
        IndexParams::new(IndexKind::IvfPq { sub_vectors: 4 }, 16),
    )
    .unwrap();
    // An unindexed fragment too, so that indexed modes also scan exactly.
    ds.append([demo_batch("vector", dim, &vectors[2000 * dim..], 2000)])
        .unwrap();
    let queries: Vec<Vec<f32>> = (0..64)
        .map(|i| vectors[i * 50 * dim..(i * 50 + 1) * dim].to_vec())
        .collect();
    let search = |i: usize| {
        let mut b = BatchQuery::new(queries[i % 56..i % 56 + 1 + i % 8].to_vec(), 10)
            .mode([SearchMode::Auto, SearchMode::PerQuery, SearchMode::Exact][i % 3])
            .nprobes(8);
        if i.is_multiple_of(5) {
            b = b.filter("len < 30");
        }
        let res = ds.search_batch(&b).unwrap();
        assert!(res.hits.iter().all(|h| h.len() == 10));
    };
    for i in 0..30 {
        search(i);
    }
    let warm = os_threads();
    assert!(!warm.is_empty(), "/proc/self/task is readable");
    for i in 0..1000 {
        search(i);
        let now = os_threads();
        assert!(
            now.is_subset(&warm),
            "search {i} made threads: {:?} not in {warm:?}",
            now.difference(&warm).collect::<Vec<_>>()
        );
    }
}
