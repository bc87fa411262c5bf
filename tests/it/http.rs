//! The HTTP service over real TCP on 127.0.0.1 with a real HTTP client:
//! searches answer what the in-process path answers, coalescing happens,
//! bad requests get a 4xx JSON error and change nothing, shutdown is clean.

use crate::common::*;
use shoal::index::{IndexKind, IndexParams};
use shoal::{Config, Engine, Metric, Query};
use std::path::{Path, PathBuf};
use tokio::sync::oneshot;

const DIM: usize = 16;

/// A running server on an ephemeral port, stopped on drop.
struct Server {
    url: String,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    fn start(data: &Path, config: Config) -> Server {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let data = data.to_path_buf();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let address = listener.local_addr().unwrap();
                let engine = Engine::start(config, &data).unwrap();
                ready_tx.send(address).unwrap();
                shoal::http::serve(listener, engine, async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
            });
        });
        let address = ready_rx.recv().unwrap();
        Server {
            url: format!("http://{address}"),
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

/// POSTs `body` as JSON; returns the status and the parsed JSON answer.
fn post(url: &str, body: &str) -> (u16, serde_json::Value) {
    let mut response = agent()
        .post(url)
        .header("content-type", "application/json")
        .send(body)
        .unwrap();
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    )
}

fn get(url: &str) -> (u16, serde_json::Value) {
    let mut response = agent().get(url).call().unwrap();
    let status = response.status().as_u16();
    let text = response.body_mut().read_to_string().unwrap();
    (status, serde_json::from_str(&text).unwrap())
}

fn data_dir() -> (tempfile::TempDir, PathBuf, Vec<Row>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds");
    let (mut ds, rows) = build(&path, &[300, 200], DIM, Metric::L2, 9);
    ds.create_index_with_progress(
        None,
        IndexParams::new(IndexKind::IvfFlat, 8),
        &mut |_, _, _| {},
    )
    .unwrap();
    let root = dir.path().to_path_buf();
    (dir, root, rows)
}

/// (id, distance) pairs of an in-process answer's first query.
fn pairs(results: &shoal::SearchResults) -> Vec<(i64, f32)> {
    results.hits[0].iter().map(|h| (h.id, h.distance)).collect()
}

fn json_vector(v: &[f32]) -> String {
    serde_json::to_string(v).unwrap()
}

/// (id, distance) pairs of a JSON hit list.
fn hits_of(value: &serde_json::Value) -> Vec<(i64, f32)> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["id"].as_i64().unwrap(),
                h["distance"].as_f64().unwrap() as f32,
            )
        })
        .collect()
}

#[test]
fn searches_over_http_answer_what_the_in_process_path_answers() {
    let (_dir, root, rows) = data_dir();
    let server = Server::start(&root, Config::default());
    let (status, list) = get(&format!("{}/v1/datasets", server.url));
    assert_eq!(status, 200);
    assert_eq!(list["datasets"], serde_json::json!(["ds"]));
    let (status, info) = get(&format!("{}/v1/datasets/ds", server.url));
    assert_eq!(status, 200);
    assert_eq!(info["rows"], 500);
    let ds = shoal::Dataset::open(root.join("ds")).unwrap();
    for i in [0usize, 17, 250, 499] {
        let v = &rows[i].vector;
        let body = format!(
            r#"{{"vector": {}, "k": 7, "offset": 1, "filter": "len < 20", "select": ["category", "len"], "nprobes": 3}}"#,
            json_vector(v)
        );
        let (status, answer) = post(&format!("{}/v1/datasets/ds/search", server.url), &body);
        assert_eq!(status, 200, "{answer}");
        let expected = ds
            .search(
                &Query::new(v.clone(), 7)
                    .offset(1)
                    .filter("len < 20")
                    .select(["category", "len"])
                    .nprobes(3),
            )
            .unwrap();
        let want = pairs(&expected);
        assert_eq!(hits_of(&answer["hits"]), want);
        let first = &answer["hits"][0]["columns"];
        assert!(first["len"].as_i64().unwrap() < 20);
        assert!(first.get("category").is_some());
    }
    // An explicit batch with per-query k.
    let vectors: Vec<Vec<f32>> = rows.iter().step_by(50).map(|r| r.vector.clone()).collect();
    let body =
        serde_json::json!({ "vectors": vectors, "ks": (1..=vectors.len()).collect::<Vec<_>>() });
    let (status, answer) = post(
        &format!("{}/v1/datasets/ds/search/batch", server.url),
        &body.to_string(),
    );
    assert_eq!(status, 200, "{answer}");
    let results = answer["results"].as_array().unwrap();
    assert_eq!(results.len(), vectors.len());
    for (i, r) in results.iter().enumerate() {
        let expected = ds.search(&Query::new(vectors[i].clone(), i + 1)).unwrap();
        let want = pairs(&expected);
        assert_eq!(hits_of(&r["hits"]), want, "query {i}");
    }
    let (status, explained) = post(
        &format!("{}/v1/datasets/ds/explain", server.url),
        &serde_json::json!({ "vectors": [rows[3].vector], "k": 2 }).to_string(),
    );
    assert_eq!(status, 200);
    assert_eq!(explained["profile"]["mode"], "shared_scan");
    let (status, health) = get(&format!("{}/healthz", server.url));
    assert_eq!((status, health["status"].as_str()), (200, Some("ok")));
}

#[test]
fn concurrent_http_clients_share_a_batch() {
    let (_dir, root, rows) = data_dir();
    let mut config = Config::default();
    config.coalescer.window_us = 10_000_000;
    config.coalescer.flush_when_idle = false;
    config.coalescer.max_batch_size = 12;
    let server = Server::start(&root, config);
    let ds = shoal::Dataset::open(root.join("ds")).unwrap();
    let answers: Vec<(usize, serde_json::Value)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..12)
            .map(|i| {
                let url = format!("{}/v1/datasets/ds/search", server.url);
                let v = rows[i * 13].vector.clone();
                s.spawn(move || {
                    let body = format!(r#"{{"vector": {}, "k": {}}}"#, json_vector(&v), 2 + i);
                    let (status, answer) = post(&url, &body);
                    assert_eq!(status, 200, "{answer}");
                    (i, answer)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, answer) in answers {
        assert_eq!(answer["batch"]["size"], 12, "one batch for all twelve");
        let expected = ds
            .search(&Query::new(rows[i * 13].vector.clone(), 2 + i))
            .unwrap();
        let want = pairs(&expected);
        assert_eq!(hits_of(&answer["hits"]), want);
    }
    let (_, stats) = get(&format!("{}/v1/stats", server.url));
    assert_eq!(stats["batches"], 1);
    assert_eq!(stats["requests"], 12);
    assert_eq!(stats["budget_in_use"], 0);
    // The same figures in the Prometheus text format.
    let mut response = agent()
        .get(format!("{}/metrics", server.url))
        .call()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let text = response.body_mut().read_to_string().unwrap();
    let value = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("{name} missing from:\n{text}"))
            .parse()
            .unwrap()
    };
    assert_eq!(value("shoal_requests_total"), 12.0);
    assert_eq!(value("shoal_batches_total"), 1.0, "12 requests, 1 batch");
    assert_eq!(value("shoal_batch_size_count"), 1.0);
    assert_eq!(value("shoal_batch_size_sum"), 12.0);
    assert_eq!(value("shoal_batch_size_bucket{le=\"8.0\"}"), 0.0);
    assert_eq!(value("shoal_batch_size_bucket{le=\"16.0\"}"), 1.0);
    assert_eq!(value("shoal_batch_size_bucket{le=\"+Inf\"}"), 1.0);
    assert_eq!(value("shoal_budget_in_use_bytes"), 0.0);
    assert_eq!(value("shoal_queue_wait_seconds_count"), 12.0);
}

#[test]
fn bad_requests_get_a_json_error_with_the_right_status_and_change_nothing() {
    let (_dir, root, rows) = data_dir();
    let mut config = Config::default();
    config.server.max_body_bytes = 64 * 1024;
    config.limits.max_k = 50;
    config.limits.max_batch_size = 4;
    let before = shoal::Dataset::open(root.join("ds")).unwrap().version();
    let server = Server::start(&root, config);
    let v = json_vector(&rows[0].vector);
    let search = format!("{}/v1/datasets/ds/search", server.url);
    let batch = format!("{}/v1/datasets/ds/search/batch", server.url);
    let cases: Vec<(&str, String, u16, &str)> = vec![
        (search.as_str(), String::new(), 400, "malformed_json"),
        (
            search.as_str(),
            r#"{"vector": [1, 2"#.into(),
            400,
            "malformed_json",
        ),
        (
            search.as_str(),
            r#"{"vector": "NaN", "k": 3}"#.into(),
            400,
            "malformed_json",
        ),
        (
            search.as_str(),
            r#"{"vector": [NaN], "k": 3}"#.into(),
            400,
            "malformed_json",
        ),
        (
            search.as_str(),
            format!(r#"{{"vector": {v}, "k": 3, "kk": 1}}"#),
            400,
            "malformed_json",
        ),
        (
            search.as_str(),
            r#"{"vector": [1.0, 2.0], "k": 3}"#.into(),
            400,
            "dimension_mismatch",
        ),
        (
            search.as_str(),
            format!(r#"{{"vector": {v}, "k": 0}}"#),
            400,
            "invalid_argument",
        ),
        (
            search.as_str(),
            format!(r#"{{"vector": {v}, "k": 51}}"#),
            400,
            "limit_exceeded",
        ),
        (
            search.as_str(),
            format!(r#"{{"vector": {v}, "k": 3, "offset": 99999999}}"#),
            400,
            "limit_exceeded",
        ),
        (
            search.as_str(),
            format!(r#"{{"vector": {v}, "k": 3, "filter": "len = 1; DROP TABLE x"}}"#),
            400,
            "bad_filter",
        ),
        (
            search.as_str(),
            format!(r#"{{"vector": {v}, "k": 3, "filter": "nope = 1"}}"#),
            400,
            "bad_filter",
        ),
        (
            search.as_str(),
            format!(r#"{{"vector": {v}, "k": 3, "column": "nope"}}"#),
            400,
            "unknown_column",
        ),
        (
            search.as_str(),
            format!(r#"{{"vector": {v}, "k": 3, "version": 99}}"#),
            404,
            "version_not_found",
        ),
        (
            search.as_str(),
            format!(r#"{{"vector": [1e39{}], "k": 3}}"#, ", 0.0".repeat(DIM - 1)),
            400,
            "non_finite",
        ),
        (
            batch.as_str(),
            format!(r#"{{"vectors": [{v}, {v}, {v}, {v}, {v}], "k": 3}}"#),
            413,
            "limit_exceeded",
        ),
        (
            search.as_str(),
            format!(
                r#"{{"vector": [{}], "k": 3}}"#,
                "0.5, ".repeat(20_000) + "0.5"
            ),
            413,
            "body_too_large",
        ),
    ];
    for (url, body, status, code) in cases {
        let (got, answer) = post(url, &body);
        let short: String = body.chars().take(80).collect();
        assert_eq!(got, status, "{short}: {answer}");
        assert_eq!(answer["error"]["code"], code, "{short}: {answer}");
        assert!(answer["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    }
    let body = format!(r#"{{"vector": {v}, "k": 3}}"#);
    let (status, answer) = post(&format!("{}/v1/datasets/missing/search", server.url), &body);
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (404, Some("dataset_not_found"))
    );
    let (status, answer) = post(
        &format!("{}/v1/datasets/..%2Fetc/search", server.url),
        &body,
    );
    assert_eq!(status, 400, "{answer}");
    let (status, answer) = get(&format!("{}/v2/nothing", server.url));
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (404, Some("no_such_route"))
    );
    // Nothing was written and the service still answers.
    let (status, _) = post(&search, &body);
    assert_eq!(status, 200);
    assert_eq!(
        shoal::Dataset::open(root.join("ds")).unwrap().version(),
        before
    );
}

#[test]
fn with_an_api_key_only_requests_carrying_it_get_through() {
    let (_dir, root, _rows) = data_dir();
    let mut config = Config::default();
    config.server.api_key = "s3cret-key".into();
    let server = Server::start(&root, config);
    let call = |path: &str, token: Option<&str>| -> (u16, serde_json::Value) {
        let mut request = agent().get(format!("{}{path}", server.url));
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let mut response = request.call().unwrap();
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().unwrap();
        (status, serde_json::from_str(&text).unwrap())
    };
    assert_eq!(call("/healthz", None).0, 200, "health checks need no key");
    for token in [None, Some("wrong"), Some("s3cret-ke"), Some("s3cret-key2")] {
        let (status, answer) = call("/v1/datasets", token);
        assert_eq!(status, 401, "{token:?}");
        assert_eq!(answer["error"]["code"], "unauthorized");
    }
    let (status, answer) = call("/v1/datasets", Some("s3cret-key"));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        call("/v2/unknown", None).0,
        401,
        "unknown routes are behind the key too"
    );
}

#[test]
fn a_client_that_disconnects_while_queued_cancels_its_search() {
    use std::io::Write;
    let (_dir, root, rows) = data_dir();
    let mut config = Config::default();
    config.coalescer.window_us = 10_000_000;
    config.coalescer.flush_when_idle = false;
    let server = Server::start(&root, config);
    let stats = || get(&format!("{}/v1/stats", server.url)).1;
    // Waits (bounded) until the engine's stats satisfy `done`.
    let wait_for = |done: &dyn Fn(&serde_json::Value) -> bool| {
        for _ in 0..500 {
            if done(&stats()) {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        false
    };
    let body = format!(r#"{{"vector": {}, "k": 3}}"#, json_vector(&rows[5].vector));
    let address = server.url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "POST /v1/datasets/ds/search HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    assert!(wait_for(&|s| s["pending"] == 1), "the search never queued");
    drop(stream);
    assert!(
        wait_for(&|s| s["pending"] == 0 && s["cancelled"] == 1),
        "the disconnect did not cancel the queued search: {}",
        stats()
    );
    let after = stats();
    assert_eq!(after["batches"], 0, "nothing was scanned for it");
    assert_eq!(after["budget_in_use"], 0);
}
