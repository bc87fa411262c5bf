//! A replica on object storage that prewarms at start (`storage.prewarm`):
//! `/readyz` answers 503 until the prewarm has filled the disk cache, and
//! once it answers 200 a search sends no GET to the store; the prewarm
//! endpoint reports what it fetched and refuses bad arguments. The store
//! waits before every request, as a real one does, so the prewarm takes
//! long enough to be seen.

use crate::common::*;
use rand::SeedableRng;
use shoal::object_store::memory::InMemory;
use shoal::object_store::throttle::{ThrottleConfig, ThrottledStore};
use shoal::object_store::ObjectStore;
use shoal::{Config, Engine, IndexKind, IndexParams, Metric, Session};
use std::sync::Arc;
use std::time::{Duration, Instant};

const DIM: usize = 16;

fn session(cache: &std::path::Path, store: &Arc<dyn ObjectStore>, prewarm: bool) -> Session {
    let mut config = Config::default();
    config.cache.disk_dir = cache.display().to_string();
    config.storage.prewarm = prewarm;
    let session = Session::new(config);
    session
        .register_object_store("memory:///bucket", store.clone())
        .unwrap();
    session
}

fn get(url: &str) -> (u16, String) {
    let mut r = agent().get(url).call().unwrap();
    (r.status().as_u16(), r.body_mut().read_to_string().unwrap())
}

fn post(url: &str, body: &str) -> (u16, serde_json::Value) {
    let mut r = agent()
        .post(url)
        .header("content-type", "application/json")
        .send(body)
        .unwrap();
    let status = r.status().as_u16();
    (status, r.body_mut().read_json().unwrap())
}

/// The value of the Prometheus counter `name` in `/metrics`.
fn counter(base: &str, name: &str) -> u64 {
    let (status, text) = get(&format!("{base}/metrics"));
    assert_eq!(status, 200);
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("{name} not in /metrics:\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn readyz_is_503_until_the_start_up_prewarm_ends_then_searches_send_no_get() {
    let store: Arc<dyn ObjectStore> = Arc::new(ThrottledStore::new(
        InMemory::new(),
        ThrottleConfig {
            wait_get_per_call: Duration::from_millis(40),
            wait_list_per_call: Duration::from_millis(40),
            wait_list_with_delimiter_per_call: Duration::from_millis(40),
            ..ThrottleConfig::default()
        },
    ));
    let writer_cache = tempfile::tempdir().unwrap();
    let writer = session(writer_cache.path(), &store, false);
    let mut ds = writer
        .create("memory:///bucket/data/ds", schema(DIM, Metric::L2))
        .unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(21);
    let rows = make_rows(&mut rng, 0, 1_500, DIM);
    ds.append([Ok(batch_of(&rows, DIM))]).unwrap();
    ds.create_index(None, IndexParams::new(IndexKind::IvfFlat, 16))
        .unwrap();

    // A new replica with an empty disk cache.
    let cache = tempfile::tempdir().unwrap();
    let replica = session(cache.path(), &store, true);
    let started = Instant::now();
    let server =
        Server::serving(move || Engine::with_session(replica, "memory:///bucket/data").unwrap());
    let base = server.url.clone();
    let (status, body) = get(&format!("{base}/readyz"));
    assert_eq!(status, 503, "ready before the prewarm could end: {body}");
    assert!(body.contains("prewarming"), "{body}");
    assert_eq!(
        get(&format!("{base}/healthz")).0,
        200,
        "alive while warming"
    );
    loop {
        let (status, _) = get(&format!("{base}/readyz"));
        if status == 200 {
            break;
        }
        assert_eq!(status, 503);
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the prewarm never ended"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let gets = counter(&base, "shoal_storage_get_requests_total");
    assert!(gets > 0, "a cold replica prewarmed without a GET");
    assert!(counter(&base, "shoal_storage_get_bytes_total") > 0);

    // Everything a search reads is on local disk now: no GET.
    for (i, row) in rows.iter().step_by(97).enumerate() {
        let body = serde_json::json!({
            "vector": row.vector,
            "k": 5,
            "nprobes": 1 + i % 16,
        });
        let (status, answer) = post(&format!("{base}/v1/datasets/ds/search"), &body.to_string());
        assert_eq!(status, 200, "{answer}");
        // The row itself, or an exact copy of it (every 7th row is one).
        assert_eq!(answer["hits"][0]["distance"], 0.0, "{answer}");
    }
    assert_eq!(
        counter(&base, "shoal_storage_get_requests_total"),
        gets,
        "a search after the prewarm went to the store"
    );

    // The endpoint: a second prewarm finds everything there.
    let (status, report) = post(&format!("{base}/v1/datasets/ds/prewarm"), "{}");
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["partitions"], 16);
    assert_eq!(report["gets"], 0, "{report}");
    let (status, report) = post(
        &format!("{base}/v1/datasets/ds/prewarm"),
        r#"{"column": "emb", "partitions": [0, 15]}"#,
    );
    assert_eq!(
        (status, &report["partitions"]),
        (200, &serde_json::json!(2))
    );
    for bad in [
        r#"{"partitions": [16]}"#,
        r#"{"column": "nope"}"#,
        r#"{"column": "category"}"#,
        r#"{"partition": [1]}"#,
        r#"{"partitions": "all"}"#,
    ] {
        let (status, answer) = post(&format!("{base}/v1/datasets/ds/prewarm"), bad);
        assert_eq!(status, 400, "{bad}: {answer}");
    }
    drop(server);
}
