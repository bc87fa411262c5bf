//! The HTTP service over real TCP on 127.0.0.1 with a real HTTP client:
//! searches answer what the in-process path answers, coalescing happens,
//! bad requests get a 4xx JSON error and change nothing, shutdown is clean.

use crate::common::*;
use shoal::{Config, Metric, Query};
use shoal::{IndexKind, IndexParams};
use std::path::{Path, PathBuf};

const DIM: usize = 16;

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
    ds.create_index(None, IndexParams::new(IndexKind::IvfFlat, 8))
        .unwrap();
    let root = dir.path().to_path_buf();
    (dir, root, rows)
}

/// (id, distance) pairs of an in-process answer's first query.
fn pairs(response: &shoal::SearchResponse) -> Vec<(i64, f32)> {
    response.hits.iter().map(|h| (h.id, h.distance)).collect()
}

fn json_vector(v: &[f32]) -> String {
    serde_json::to_string(v).unwrap()
}

/// (id, distance) pairs of a JSON hit list.
/// `v` as base64 of its little-endian float32 bytes.
fn base64_vector(v: &[f32]) -> String {
    use base64::Engine as _;
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

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
        // The same vector as base64 of little-endian float32.
        let packed = body.replace(&json_vector(v), &format!("\"{}\"", base64_vector(v)));
        let (status, same) = post(&format!("{}/v1/datasets/ds/search", server.url), &packed);
        assert_eq!(status, 200, "{same}");
        assert_eq!(same["hits"], answer["hits"], "base64 = numbers");
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
    let packed: Vec<String> = vectors.iter().map(|v| base64_vector(v)).collect();
    let body =
        serde_json::json!({ "vectors": packed, "ks": (1..=vectors.len()).collect::<Vec<_>>() });
    let (status, same) = post(
        &format!("{}/v1/datasets/ds/search/batch", server.url),
        &body.to_string(),
    );
    assert_eq!(status, 200, "{same}");
    assert_eq!(
        same["results"], answer["results"],
        "a base64 batch = numbers"
    );
    // The same batch as a raw float32 body, options in the query string.
    let raw: Vec<u8> = vectors
        .iter()
        .flatten()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    // A binary batch body of `content_type`, options in the query string.
    let post_binary = |content_type: &str, query: &str, body: &[u8]| -> (u16, serde_json::Value) {
        let mut response = agent()
            .post(&format!(
                "{}/v1/datasets/ds/search/batch?{query}",
                server.url
            ))
            .header("content-type", content_type)
            .send(body)
            .unwrap();
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().unwrap();
        (status, serde_json::from_str(&text).unwrap())
    };
    let post_raw = |query: &str, body: &[u8]| post_binary("application/octet-stream", query, body);
    let json_body = serde_json::json!({ "vectors": vectors, "k": 6, "nprobes": 2,
        "filter": "len < 20", "select": ["len", "category"] });
    let (status, want) = post(
        &format!("{}/v1/datasets/ds/search/batch", server.url),
        &json_body.to_string(),
    );
    assert_eq!(status, 200, "{want}");
    let (status, got) = post_raw(
        "k=6&nprobes=2&filter=len%20%3C%2020&select=len,category",
        &raw,
    );
    assert_eq!(status, 200, "{got}");
    assert_eq!(
        got["results"], want["results"],
        "a raw float32 batch = JSON"
    );
    // The same batch as an Arrow IPC stream (one FixedSizeList<Float32>
    // column), options in the query string.
    let arrow_body = {
        use shoal::arrow_array::{ArrayRef, FixedSizeListArray, Float32Array, RecordBatch};
        use shoal::arrow_schema::{DataType, Field, Schema};
        let dim = vectors[0].len() as i32;
        let item = std::sync::Arc::new(Field::new("item", DataType::Float32, false));
        let list = FixedSizeListArray::new(
            item.clone(),
            dim,
            std::sync::Arc::new(Float32Array::from(
                vectors.iter().flatten().copied().collect::<Vec<f32>>(),
            )),
            None,
        );
        let schema = std::sync::Arc::new(Schema::new(vec![Field::new(
            "q",
            DataType::FixedSizeList(item, dim),
            false,
        )]));
        let batch =
            RecordBatch::try_new(schema.clone(), vec![std::sync::Arc::new(list) as ArrayRef])
                .unwrap();
        let mut out = Vec::new();
        let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut out, &schema).unwrap();
        w.write(&batch).unwrap();
        w.finish().unwrap();
        drop(w);
        out
    };
    let post_arrow =
        |query: &str, body: &[u8]| post_binary("application/vnd.apache.arrow.stream", query, body);
    let (status, got) = post_arrow(
        "k=6&nprobes=2&filter=len%20%3C%2020&select=len,category",
        &arrow_body,
    );
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["results"], want["results"], "an Arrow batch = JSON");
    let (status, error) = post_arrow("k=6", &arrow_body[..arrow_body.len() / 2]);
    assert_eq!(status, 400, "{error}");
    let (status, error) = post_arrow("k=6", &raw);
    assert_eq!(status, 400, "{error}");
    assert!(error.to_string().contains("Arrow"), "{error}");
    let (status, error) = post_raw("k=6", &raw[..raw.len() - 4]);
    assert_eq!(status, 400, "{error}");
    assert!(error.to_string().contains("whole query vectors"), "{error}");
    let (status, error) = post_raw("kk=6", &raw);
    assert_eq!(status, 400, "{error}");
    let (status, error) = post(
        &format!("{}/v1/datasets/ds/search", server.url),
        r#"{"vector": "AAAAAAA="}"#,
    );
    assert_eq!(status, 400, "{error}");
    assert!(error.to_string().contains("4 bytes"), "{error}");
    // A batch of full search requests, each with its own filter, k,
    // offset, probing and columns, answered by one shared scan.
    let entries: Vec<serde_json::Value> = (0..6)
        .map(|i| {
            let mut e = serde_json::json!({
                "vector": rows[i * 70].vector,
                "k": 3 + i,
                "offset": i % 2,
                "filter": format!("len < {}", 10 + 3 * i),
                "nprobes": 1 + i,
            });
            if i % 3 == 0 {
                e["select"] = serde_json::json!(["len"]);
                e["refine_factor"] = serde_json::json!(2);
            }
            if i == 4 {
                e["filter_mode"] = serde_json::json!("postfilter");
            }
            e
        })
        .collect();
    let (status, answer) = post(
        &format!("{}/v1/datasets/ds/explain", server.url),
        &serde_json::json!({ "queries": entries }).to_string(),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["profile"]["mode"], "shared_scan");
    assert_eq!(answer["profile"]["distinct_filters"], 6);
    for (i, r) in answer["results"].as_array().unwrap().iter().enumerate() {
        let mut q = Query::new(rows[i * 70].vector.clone(), 3 + i)
            .offset(i % 2)
            .filter(format!("len < {}", 10 + 3 * i))
            .nprobes(1 + i);
        if i % 3 == 0 {
            q = q.select(["len"]).refine_factor(2);
        }
        if i == 4 {
            q = q.postfilter();
        }
        let expected = ds.search(&q).unwrap();
        assert_eq!(hits_of(&r["hits"]), pairs(&expected), "entry {i}");
        let columns = r["hits"][0]["columns"].as_object().unwrap();
        assert_eq!(columns.contains_key("len"), i % 3 == 0, "entry {i}");
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
                    // Four different filters: still one batch.
                    let body = format!(
                        r#"{{"vector": {}, "k": {}, "filter": "len < {}"}}"#,
                        json_vector(&v),
                        2 + i,
                        12 + i % 4
                    );
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
            .search(
                &Query::new(rows[i * 13].vector.clone(), 2 + i)
                    .filter(format!("len < {}", 12 + i % 4)),
            )
            .unwrap();
        let want = pairs(&expected);
        assert_eq!(hits_of(&answer["hits"]), want);
    }
    let (_, stats) = get(&format!("{}/v1/stats", server.url));
    assert_eq!(stats["batches"], 1);
    let by_filters = stats["batches_by_distinct_filters"].as_array().unwrap();
    for bucket in by_filters {
        let expected = if bucket["max_filters"] == 4 { 1 } else { 0 };
        assert_eq!(bucket["batches"], expected, "{bucket}");
    }
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
    assert_eq!(value("shoal_batch_distinct_filters_sum"), 4.0);
    assert_eq!(
        value("shoal_batch_distinct_filters_bucket{le=\"2.0\"}"),
        0.0
    );
    assert_eq!(
        value("shoal_batch_distinct_filters_bucket{le=\"4.0\"}"),
        1.0
    );
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
            batch.as_str(),
            r#"{"k": 3}"#.into(),
            400,
            "invalid_argument",
        ),
        (
            batch.as_str(),
            format!(r#"{{"queries": [{{"vector": {v}}}], "filter": "len < 3"}}"#),
            400,
            "invalid_argument",
        ),
        (
            batch.as_str(),
            format!(r#"{{"queries": [{{"vector": {v}, "k": 3, "typo": 1}}]}}"#),
            400,
            "malformed_json",
        ),
        (
            batch.as_str(),
            format!(
                r#"{{"queries": [{{"vector": {v}}}, {{"vector": {v}, "filter": "nope = 1"}}]}}"#
            ),
            400,
            "bad_filter",
        ),
        (
            batch.as_str(),
            format!(r#"{{"queries": [{{"vector": {v}, "nprobes": 0}}]}}"#),
            400,
            "invalid_argument",
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

/// Polls `GET /v1/datasets/{name}/indexes` until job `id` is no longer
/// running (bounded); returns the job.
fn wait_for_job(url: &str, name: &str, id: &serde_json::Value) -> serde_json::Value {
    for _ in 0..1000 {
        let (status, answer) = get(&format!("{url}/v1/datasets/{name}/indexes"));
        assert_eq!(status, 200, "{answer}");
        let job = answer["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| &j["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("job {id} missing: {answer}"));
        if job["state"] != "running" {
            return job;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("job {id} never finished");
}

/// `n` JSON rows for the `docs` dataset of the admin tests (dimension 4),
/// seeded; ids from `first`.
fn doc_rows(first: i64, n: usize) -> Vec<serde_json::Value> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(first as u64 + 7);
    (0..n)
        .map(|i| {
            let id = first + i as i64;
            let v: Vec<f32> = (0..4).map(|_| rng.random_range(-8i32..=8) as f32).collect();
            serde_json::json!({ "id": id, "emb": v, "title": format!("doc {id}"), "n": id % 10 })
        })
        .collect()
}

fn docs_schema() -> serde_json::Value {
    serde_json::json!({
        "name": "docs",
        "columns": [
            { "name": "emb", "type": "vector", "dim": 4, "metric": "l2" },
            { "name": "title", "type": "string" },
            { "name": "n", "type": "int64" },
        ]
    })
}

/// An hnsw index built by an index job, searched with `ef`; `nprobes` on
/// it, `partitions` in its job and `ef` below k are 400s naming the cause.
#[test]
fn an_hnsw_index_job_and_searches_with_ef() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), Config::default());
    let url = server.url.clone();
    let (status, _) = post(&format!("{url}/v1/datasets"), &docs_schema().to_string());
    assert_eq!(status, 201);
    let rows = doc_rows(0, 300);
    let (status, _) = post(
        &format!("{url}/v1/datasets/docs/rows"),
        &serde_json::json!({ "rows": rows }).to_string(),
    );
    assert_eq!(status, 200);
    let indexes = format!("{url}/v1/datasets/docs/indexes");
    let (status, refused) = post(&indexes, r#"{"type": "hnsw", "partitions": 4}"#);
    assert_eq!(status, 400, "{refused}");
    assert!(refused["error"]["message"]
        .as_str()
        .unwrap()
        .contains("hnsw takes m"));
    let (status, accepted) = post(
        &indexes,
        r#"{"type": "hnsw", "m": 8, "ef_construction": 40}"#,
    );
    assert_eq!(status, 202, "{accepted}");
    let job = wait_for_job(&url, "docs", &accepted["job"]["id"]);
    assert_eq!(job["state"], "done", "{job}");
    let (_, info) = get(&format!("{url}/v1/datasets/docs"));
    assert_eq!(
        info["index_segments"][0]["params"]["kind"]["type"], "hnsw",
        "{info}"
    );
    let search = format!("{url}/v1/datasets/docs/search");
    let body = |extra: serde_json::Value| {
        let mut b = serde_json::json!({ "vector": rows[37]["emb"], "k": 5 });
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        b.to_string()
    };
    let (status, found) = post(&search, &body(serde_json::json!({ "ef": 20 })));
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["hits"].as_array().unwrap().len(), 5);
    assert_eq!(found["hits"][0]["distance"], 0.0);
    for (extra, says) in [
        (
            serde_json::json!({ "nprobes": 4 }),
            "nprobes applies to IVF indexes",
        ),
        (
            serde_json::json!({ "ef": 2 }),
            "ef (2) must be at least k (5)",
        ),
    ] {
        let (status, refused) = post(&search, &body(extra));
        assert_eq!(status, 400, "{refused}");
        assert!(
            refused["error"]["message"].as_str().unwrap().contains(says),
            "{refused}"
        );
    }
}

#[test]
fn admin_endpoints_create_append_read_delete_and_index() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), Config::default());
    let url = server.url.clone();
    let (status, created) = post(&format!("{url}/v1/datasets"), &docs_schema().to_string());
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["name"], "docs");
    assert_eq!(created["version"], 1);
    assert_eq!(created["rows"], 0);
    assert_eq!(
        created["columns"],
        serde_json::json!([
            { "name": "id", "type": "int64" },
            { "name": "emb", "type": "vector", "dim": 4, "metric": "l2" },
            { "name": "title", "type": "utf8" },
            { "name": "n", "type": "int64" },
        ])
    );
    let (status, again) = post(&format!("{url}/v1/datasets"), &docs_schema().to_string());
    assert_eq!(
        (status, again["error"]["code"].as_str()),
        (409, Some("dataset_exists"))
    );
    assert_eq!(
        get(&format!("{url}/v1/datasets")).1["datasets"],
        serde_json::json!(["docs"])
    );

    // Append 200 rows, read one back, find it by its own vector.
    let rows = doc_rows(0, 200);
    let (status, appended) = post(
        &format!("{url}/v1/datasets/docs/rows"),
        &serde_json::json!({ "rows": rows }).to_string(),
    );
    assert_eq!(status, 200, "{appended}");
    assert_eq!(appended, serde_json::json!({ "version": 2, "rows": 200 }));
    let (status, row) = get(&format!("{url}/v1/datasets/docs/rows/37"));
    assert_eq!(status, 200, "{row}");
    assert_eq!(row["columns"]["emb"], rows[37]["emb"]);
    assert_eq!(row["columns"]["title"], "doc 37");
    let (status, found) = post(
        &format!("{url}/v1/datasets/docs/search"),
        &serde_json::json!({ "vector": rows[37]["emb"], "k": 1, "filter": "n = 7", "select": ["title"] })
            .to_string(),
    );
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["hits"][0]["distance"], 0.0);
    assert_eq!(found["hits"][0]["columns"]["title"], "doc 37");

    // Delete by filter.
    let (status, deleted) = post(
        &format!("{url}/v1/datasets/docs/delete"),
        r#"{"filter": "n = 3 OR title = 'doc 0'"}"#,
    );
    assert_eq!(status, 200, "{deleted}");
    assert_eq!(deleted, serde_json::json!({ "version": 3, "deleted": 21 }));
    let (status, gone) = get(&format!("{url}/v1/datasets/docs/rows/13"));
    assert_eq!(
        (status, gone["error"]["code"].as_str()),
        (404, Some("row_not_found"))
    );
    let (_, nothing) = post(
        &format!("{url}/v1/datasets/docs/delete"),
        r#"{"filter": "n = 3"}"#,
    );
    assert_eq!(nothing, serde_json::json!({ "version": 3, "deleted": 0 }));

    // Build an index in the background and watch it finish.
    let (status, accepted) = post(
        &format!("{url}/v1/datasets/docs/indexes"),
        r#"{"type": "ivf_flat", "partitions": 4, "iterations": 5}"#,
    );
    assert_eq!(status, 202, "{accepted}");
    assert_eq!(accepted["job"]["operation"], "create_index");
    let job = wait_for_job(&url, "docs", &accepted["job"]["id"]);
    assert_eq!(job["state"], "done", "{job}");
    assert_eq!(job["result"]["version"], 4);
    assert!(job["finished_ms"].as_u64().unwrap() >= job["started_ms"].as_u64().unwrap());
    assert!(job["progress"]["stage"].is_string(), "{job}");
    let (_, indexes) = get(&format!("{url}/v1/datasets/docs/indexes"));
    assert_eq!(indexes["segments"].as_array().unwrap().len(), 1);
    assert_eq!(indexes["segments"][0]["rows"], 179);

    // New rows, then optimize: a delta segment.
    let (status, _) = post(
        &format!("{url}/v1/datasets/docs/rows"),
        &serde_json::json!({ "rows": doc_rows(200, 50) }).to_string(),
    );
    assert_eq!(status, 200);
    let (status, accepted) = post(
        &format!("{url}/v1/datasets/docs/indexes"),
        r#"{"optimize": true}"#,
    );
    assert_eq!(status, 202, "{accepted}");
    let job = wait_for_job(&url, "docs", &accepted["job"]["id"]);
    assert_eq!(job["state"], "done", "{job}");
    assert_eq!(job["result"]["version"], 6);
    let (_, info) = get(&format!("{url}/v1/datasets/docs"));
    assert_eq!(info["version"], 6);
    assert_eq!(info["rows"], 229);
    assert_eq!(info["index_segments"].as_array().unwrap().len(), 2);
    assert_eq!(info["version_count"], 6);
    let ops: Vec<&str> = info["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["operation"].as_str().unwrap())
        .collect();
    assert_eq!(
        ops,
        [
            "create",
            "append",
            "delete",
            "create_index",
            "append",
            "optimize"
        ]
    );
    // The indexed dataset answers like the in-process path.
    let ds = shoal::Dataset::open(dir.path().join("docs")).unwrap();
    let v: Vec<f32> = serde_json::from_value(rows[60]["emb"].clone()).unwrap();
    let (_, answer) = post(
        &format!("{url}/v1/datasets/docs/search"),
        &serde_json::json!({ "vector": v, "k": 5, "nprobes": 2 }).to_string(),
    );
    let expected = ds.search(&Query::new(v, 5).nprobes(2)).unwrap();
    assert_eq!(hits_of(&answer["hits"]), pairs(&expected));
}

/// Files under `dir`, recursively (to see that nothing was written).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out.sort();
    out
}

#[test]
fn bad_admin_requests_get_a_4xx_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), Config::default());
    let url = server.url.clone();
    let (status, _) = post(&format!("{url}/v1/datasets"), &docs_schema().to_string());
    assert_eq!(status, 201);
    let (status, _) = post(
        &format!("{url}/v1/datasets/docs/rows"),
        &serde_json::json!({ "rows": doc_rows(0, 20) }).to_string(),
    );
    assert_eq!(status, 200);
    let before = files_under(dir.path());
    let create = format!("{url}/v1/datasets");
    let rows = format!("{url}/v1/datasets/docs/rows");
    let delete = format!("{url}/v1/datasets/docs/delete");
    let indexes = format!("{url}/v1/datasets/docs/indexes");
    let good = r#"{"id": 99, "emb": [1, 2, 3, 4], "title": "ok", "n": 1}"#;
    let cases: Vec<(String, String, u16, &str)> = vec![
        // Creating datasets.
        (create.clone(), String::new(), 400, "malformed_json"),
        (create.clone(), r#"{"name": "x", "columns": [{"name""#.into(), 400, "malformed_json"),
        (create.clone(), r#"{"name": "x", "columns": [], "extra": 1}"#.into(), 400, "malformed_json"),
        (create.clone(), r#"{"name": "x", "columns": [{"name": "v", "type": "vector", "dims": 3}]}"#.into(), 400, "malformed_json"),
        (create.clone(), r#"{"name": "../x", "columns": [{"name": "v", "type": "vector", "dim": 3}]}"#.into(), 400, "invalid_argument"),
        (create.clone(), r#"{"name": "", "columns": [{"name": "v", "type": "vector", "dim": 3}]}"#.into(), 400, "invalid_argument"),
        (create.clone(), r#"{"name": "x", "columns": [{"name": "v", "type": "vector"}]}"#.into(), 400, "invalid_argument"),
        (create.clone(), r#"{"name": "x", "columns": [{"name": "v", "type": "vector", "dim": 0}]}"#.into(), 400, "invalid_argument"),
        (create.clone(), r#"{"name": "x", "columns": [{"name": "v", "type": "vector", "dim": 3, "metric": "hamming"}]}"#.into(), 400, "malformed_json"),
        (create.clone(), r#"{"name": "x", "columns": [{"name": "v", "type": "vector", "dim": 99999999}]}"#.into(), 400, "invalid_argument"),
        (create.clone(), r#"{"name": "x", "columns": [{"name": "t", "type": "string"}]}"#.into(), 400, "invalid_argument"),
        (create.clone(), r#"{"name": "x", "columns": [{"name": "v", "type": "vector", "dim": 3}, {"name": "v", "type": "int64"}]}"#.into(), 400, "invalid_argument"),
        (create.clone(), r#"{"name": "x", "columns": [{"name": "v", "type": "vector", "dim": 3}, {"name": "t", "type": "text"}]}"#.into(), 400, "invalid_argument"),
        (create.clone(), r#"{"name": "x", "columns": [{"name": "v", "type": "vector", "dim": 3}, {"name": "t", "type": "int64", "dim": 2}]}"#.into(), 400, "invalid_argument"),
        (create.clone(), r#"{"name": "x", "columns": [{"name": "v", "type": "vector", "dim": 3}, {"name": "id", "type": "utf8"}]}"#.into(), 400, "wrong_column_type"),
        // Appending rows.
        (rows.clone(), String::new(), 400, "malformed_json"),
        (rows.clone(), format!(r#"{{"rows": [{good}"#), 400, "malformed_json"),
        (rows.clone(), r#"{"rows": []}"#.into(), 400, "invalid_argument"),
        (rows.clone(), format!(r#"{{"rows": [{good}], "mode": "overwrite"}}"#), 400, "malformed_json"),
        (rows.clone(), r#"{"rows": [{"emb": [1, 2, NaN, 4]}]}"#.into(), 400, "malformed_json"),
        (rows.clone(), r#"{"rows": [{"emb": [1, 2, "NaN", 4]}]}"#.into(), 400, "malformed_input"),
        (rows.clone(), r#"{"rows": [{"emb": [1, 2, 1e39, 4]}]}"#.into(), 400, "schema_mismatch"),
        (rows.clone(), r#"{"rows": [{"emb": [1, 2, 3]}]}"#.into(), 400, "schema_mismatch"),
        (rows.clone(), format!(r#"{{"rows": [{good}, {{"title": "no vector"}}]}}"#), 400, "schema_mismatch"),
        (rows.clone(), r#"{"rows": [{"title": "no vector at all"}]}"#.into(), 400, "schema_mismatch"),
        (rows.clone(), format!(r#"{{"rows": [{good}, {{"emb": [1, 2, 3, 4], "title": 5}}]}}"#), 400, "malformed_input"),
        (rows.clone(), format!(r#"{{"rows": [{good}, {{"emb": [1, 2, 3, 4], "body": "x"}}]}}"#), 400, "malformed_input"),
        (rows.clone(), r#"{"rows": [{"emb": [1, 2, 3, 4], "id": "seven"}]}"#.into(), 400, "malformed_input"),
        (rows.clone(), r#"{"rows": [[1, 2, 3, 4]]}"#.into(), 400, "malformed_json"),
        // Deleting.
        (delete.clone(), String::new(), 400, "malformed_json"),
        (delete.clone(), r#"{}"#.into(), 400, "malformed_json"),
        (delete.clone(), r#"{"filter": ""}"#.into(), 400, "bad_filter"),
        (delete.clone(), r#"{"filter": "n = 1; DROP TABLE docs"}"#.into(), 400, "bad_filter"),
        (delete.clone(), r#"{"filter": "n = 1 OR 1=1 --"}"#.into(), 400, "bad_filter"),
        (delete.clone(), r#"{"filter": "title = '' OR ''=''; DELETE FROM docs"}"#.into(), 400, "bad_filter"),
        (delete.clone(), r#"{"filter": "nope = 1"}"#.into(), 400, "bad_filter"),
        (delete.clone(), r#"{"filter": "emb = 1"}"#.into(), 400, "bad_filter"),
        // Index jobs.
        (indexes.clone(), String::new(), 400, "malformed_json"),
        (indexes.clone(), r#"{}"#.into(), 400, "invalid_argument"),
        (indexes.clone(), r#"{"type": "ivf_flat"}"#.into(), 400, "invalid_argument"),
        (indexes.clone(), r#"{"type": "hnsw", "partitions": 2}"#.into(), 400, "invalid_argument"),
        (indexes.clone(), r#"{"type": "ivf_flat", "partitions": 0}"#.into(), 400, "invalid_argument"),
        (indexes.clone(), r#"{"type": "ivf_flat", "partitions": 21}"#.into(), 400, "invalid_argument"),
        (indexes.clone(), r#"{"type": "ivf_flat", "partitions": 2, "iterations": 1000000}"#.into(), 400, "limit_exceeded"),
        (indexes.clone(), r#"{"type": "ivf_pq", "partitions": 2}"#.into(), 400, "invalid_argument"),
        (indexes.clone(), r#"{"type": "ivf_pq", "partitions": 2, "sub_vectors": 3}"#.into(), 400, "invalid_argument"),
        (indexes.clone(), r#"{"type": "ivf_flat", "partitions": 2, "sub_vectors": 2}"#.into(), 400, "invalid_argument"),
        (indexes.clone(), r#"{"type": "ivf_rq", "partitions": 2, "bits": 0}"#.into(), 400, "invalid_argument"),
        (indexes.clone(), r#"{"type": "ivf_rq", "partitions": 2, "bits": 9}"#.into(), 400, "invalid_argument"),
        (indexes.clone(), r#"{"type": "ivf_rq", "partitions": 2, "sub_vectors": 2}"#.into(), 400, "invalid_argument"),
        (indexes.clone(), r#"{"type": "ivf_flat", "partitions": 2, "bits": 2}"#.into(), 400, "invalid_argument"),
        (indexes.clone(), r#"{"type": "ivf_flat", "partitions": 2, "column": "title"}"#.into(), 400, "wrong_column_type"),
        (indexes.clone(), r#"{"type": "ivf_flat", "partitions": 2, "column": "nope"}"#.into(), 400, "unknown_column"),
        (indexes.clone(), r#"{"type": "ivf_flat", "partitions": 2, "shards": 2}"#.into(), 400, "malformed_json"),
        (indexes.clone(), r#"{"optimize": true}"#.into(), 400, "invalid_argument"),
        (indexes.clone(), r#"{"optimize": true, "type": "ivf_flat"}"#.into(), 400, "invalid_argument"),
        // Unknown or unreachable datasets.
        (format!("{url}/v1/datasets/missing/rows"), format!(r#"{{"rows": [{good}]}}"#), 404, "dataset_not_found"),
        (format!("{url}/v1/datasets/..%2F..%2Fetc/rows"), format!(r#"{{"rows": [{good}]}}"#), 400, "invalid_argument"),
        (format!("{url}/v1/datasets/missing/delete"), r#"{"filter": "n = 1"}"#.into(), 404, "dataset_not_found"),
        (format!("{url}/v1/datasets/missing/indexes"), r#"{"optimize": true}"#.into(), 404, "dataset_not_found"),
    ];
    for (target, body, status, code) in cases {
        let (got, answer) = post(&target, &body);
        let short: String = body.chars().take(90).collect();
        assert_eq!(got, status, "{target} {short}: {answer}");
        assert_eq!(answer["error"]["code"], code, "{target} {short}: {answer}");
        assert!(answer["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    }
    for (path, status, code) in [
        ("/v1/datasets/docs/rows/abc", 400, "invalid_argument"),
        ("/v1/datasets/docs/rows/12345", 404, "row_not_found"),
        ("/v1/datasets/missing/rows/1", 404, "dataset_not_found"),
        ("/v1/datasets/..%2Fetc", 400, "invalid_argument"),
        ("/v1/datasets/missing/indexes", 404, "dataset_not_found"),
    ] {
        let (got, answer) = get(&format!("{url}{path}"));
        assert_eq!(
            (got, answer["error"]["code"].as_str()),
            (status, Some(code)),
            "{path}: {answer}"
        );
    }
    // A wrong method is a JSON 405.
    let (status, answer) = get(&format!("{url}/v1/datasets/docs/search"));
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (405, Some("method_not_allowed"))
    );
    // Nothing was written: same version, same files, no job started.
    let (_, info) = get(&format!("{url}/v1/datasets/docs"));
    assert_eq!(info["version"], 2);
    assert_eq!(info["rows"], 20);
    assert_eq!(
        get(&format!("{url}/v1/datasets")).1["datasets"],
        serde_json::json!(["docs"])
    );
    assert_eq!(get(&indexes).1["jobs"], serde_json::json!([]));
    assert_eq!(files_under(dir.path()), before);
}

/// The Chromium binary on PATH, if any.
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    None
}

/// A small seeded `demo` dataset (the scalar columns `shoal serve`'s demo
/// has), indexed with IVF_FLAT.
fn demo_dir() -> tempfile::TempDir {
    let dir = seeded_dir("demo", 2_000, 32, 16, 42);
    let mut ds = shoal::Dataset::open(dir.path().join("demo")).unwrap();
    ds.create_index(None, IndexParams::new(IndexKind::IvfFlat, 16))
        .unwrap();
    dir
}

/// A temporary directory holding one unindexed dataset `name` of `rows`
/// seeded clustered vectors with the demo's scalar columns.
fn seeded_dir(
    name: &str,
    rows: usize,
    dim: usize,
    clusters: usize,
    seed: u64,
) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut ds = shoal::Dataset::create(
        dir.path().join(name),
        shoal::demo::demo_schema("vector", dim, Metric::L2).unwrap(),
        Config::default(),
    )
    .unwrap();
    let vectors = shoal::demo::clustered_vectors(rows, dim, clusters, seed);
    ds.append([shoal::demo::demo_batch("vector", dim, &vectors, 0)])
        .unwrap();
    dir
}

#[test]
fn the_console_is_served_openly_without_external_resources() {
    let dir = demo_dir();
    let mut config = Config::default();
    // The page is public; the API behind it needs the key.
    config.server.api_key = "console-key".into();
    let server = Server::start(dir.path(), config);
    let mut page = agent().get(format!("{}/", server.url)).call().unwrap();
    assert_eq!(page.status().as_u16(), 200);
    let html = page.body_mut().read_to_string().unwrap();
    assert!(html.contains("<title>shoal console</title>"));
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "no external resources"
    );
}

/// The console in a real browser: it runs the search its URL names and
/// shows the rows the in-process search returns, in order. Needs Chromium
/// (`apt-get install chromium`); `.ci/run` installs it and runs the
/// ignored tests, so there it fails rather than skips when the browser is
/// missing.
#[test]
#[ignore = "needs chromium on PATH; .ci/run runs it"]
fn the_console_runs_a_search_in_headless_chromium() {
    let dir = demo_dir();
    let chromium = chromium().expect("no chromium on PATH (apt-get install chromium)");
    let server = Server::start(dir.path(), Config::default());
    let profile = tempfile::tempdir().unwrap();
    let run = |extra: &[String]| -> std::process::Output {
        let mut command = std::process::Command::new(&chromium);
        command
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--hide-scrollbars",
                "--virtual-time-budget=5000",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .args(extra)
            .arg(format!("{}/?dataset=demo&row=5&k=8", server.url));
        command.output().unwrap()
    };
    let out = run(&["--dump-dom".to_string()]);
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        dom.contains(r#"data-search="done""#),
        "the page did not finish its search: {}\n{dom}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hits = dom.matches(r#"<tr class="hit"#).count();
    assert_eq!(hits, 8, "{dom}");
    assert!(
        dom.contains(r#"<tr class="hit self" data-id="5">"#),
        "row 5 is its own nearest neighbour: {dom}"
    );
    // The same search as the page ran, in process: same ids in order.
    let ds = shoal::Dataset::open(dir.path().join("demo")).unwrap();
    let vector = match ds.row_by_id(5).unwrap().unwrap().values[1].1.clone() {
        shoal::ScalarValue::Vector(v) => v,
        other => panic!("{other:?}"),
    };
    let expected = ds.search(&Query::new(vector, 8)).unwrap();
    let ids: Vec<String> = expected
        .hits
        .iter()
        .map(|h| format!(r#"data-id="{}""#, h.id))
        .collect();
    let mut at = 0;
    for id in &ids {
        let found = dom[at..]
            .find(id.as_str())
            .unwrap_or_else(|| panic!("{id} out of order"));
        at += found + id.len();
    }
    // A screenshot for the README (SHOAL_CONSOLE_SCREENSHOT=docs/console.png).
    let shot = std::env::var_os("SHOAL_CONSOLE_SCREENSHOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| profile.path().join("console.png"));
    let out = run(&[
        format!("--screenshot={}", shot.display()),
        "--window-size=1280,900".to_string(),
    ]);
    assert!(
        shot.is_file(),
        "no screenshot: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn every_route_in_the_table_is_served_and_openapi_json_is_too() {
    let (_dir, root, _rows) = data_dir();
    let server = Server::start(&root, Config::default());
    let (status, doc) = get(&format!("{}/openapi.json", server.url));
    assert_eq!(status, 200);
    assert_eq!(
        doc,
        serde_json::from_str::<serde_json::Value>(shoal::http::OPENAPI_JSON).unwrap()
    );
    for route in shoal::http::ROUTES {
        let path = route.path.replace("{name}", "ds").replace("{id}", "3");
        let url = format!("{}{path}", server.url);
        let mut response = match route.method {
            "GET" => agent().get(&url).call().unwrap(),
            // An empty JSON object: the route answers (200, 4xx), never
            // "no such route" or "wrong method".
            _ => agent()
                .post(&url)
                .header("content-type", "application/json")
                .send("{}")
                .unwrap(),
        };
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().unwrap();
        assert!(
            status != 404 || !text.contains("no_such_route"),
            "{route:?}: {text}"
        );
        assert_ne!(status, 405, "{route:?}: {text}");
        assert!(status < 500, "{route:?}: {status} {text}");
    }
}

/// An unindexed dataset `big` (seeded clustered vectors) whose exact scans
/// take a while when asked for deep results.
fn big_dir(rows: usize, dim: usize) -> tempfile::TempDir {
    seeded_dir("big", rows, dim, 32, 5)
}

/// Sends a search over a raw TCP connection and leaves it open (the
/// answer is never read).
fn raw_search(address: &str, dataset: &str, body: &str) -> std::net::TcpStream {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "POST /v1/datasets/{dataset}/search HTTP/1.1\r\nhost: {address}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    stream
}

/// Polls `/v1/stats` until `done` holds (at most ~10 s).
fn wait_for_stats(url: &str, done: &dyn Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let mut last = serde_json::Value::Null;
    for _ in 0..5000 {
        last = get(&format!("{url}/v1/stats")).1;
        if done(&last) {
            return last;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    panic!("stats never got there: {last}");
}

#[test]
fn clients_that_disconnect_while_their_batch_is_scanned_cancel_it_and_free_the_budget() {
    const CLIENTS: usize = 64;
    let dim = 16;
    let dir = big_dir(60_000, dim);
    let mut config = Config::default();
    config.coalescer.window_us = 10_000_000;
    config.coalescer.flush_when_idle = false;
    config.coalescer.max_batch_size = CLIENTS;
    let server = Server::start(dir.path(), config);
    let address = server.url.trim_start_matches("http://").to_string();
    // Deep results (k + offset = 50,010 of 60,000 rows per query) keep the
    // exact scan of the 64-query batch busy for a good while; it checks
    // its cancel token every 256 rows.
    let vectors = shoal::demo::clustered_vectors(CLIENTS, dim, 32, 77);
    let streams: Vec<std::net::TcpStream> = vectors
        .chunks(dim)
        .map(|v| {
            let body = format!(
                r#"{{"vector": {}, "k": 10, "offset": 50000}}"#,
                json_vector(v)
            );
            raw_search(&address, "big", &body)
        })
        .collect();
    // The 64th search closes the batch; the scan holds its budget permit.
    // (The coalescer publishes `pending` after it dispatches, so for a
    // moment the permit may show beside the 63 searches before the last.)
    let scanning = wait_for_stats(&server.url, &|s| {
        (s["budget_in_use"].as_u64().unwrap() > 0 && s["pending"] == 0) || s["batches"] != 0
    });
    assert_eq!(
        scanning["batches"], 0,
        "the scan finished before the test could see it run"
    );
    assert_eq!(scanning["pending"], 0, "{scanning}");
    drop(streams);
    let after = wait_for_stats(&server.url, &|s| {
        s["cancelled"].as_u64().unwrap() == CLIENTS as u64 && s["budget_in_use"] == 0
    });
    assert_eq!(
        after["batches"], 0,
        "the cancelled batch never completed: {after}"
    );
    assert_eq!(after["pending"], 0);
    assert_eq!(after["budget_in_use"], 0);
    // The engine still serves (an explicit batch: a single search would
    // wait out the 10 s window).
    let (status, answer) = post(
        &format!("{}/v1/datasets/big/search/batch", server.url),
        &serde_json::json!({ "vectors": [vectors[..dim].to_vec()], "k": 3 }).to_string(),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        get(&format!("{}/v1/stats", server.url)).1["budget_in_use"],
        0
    );
}

#[test]
fn graceful_shutdown_answers_every_request_in_flight_and_returns() {
    const CLIENTS: usize = 8;
    let (_dir, root, rows) = data_dir();
    let mut config = Config::default();
    // Searches wait for a 10 s window: the shutdown's drain answers them
    // long before it ends.
    config.coalescer.window_us = 10_000_000;
    config.coalescer.flush_when_idle = false;
    let mut server = Server::start(&root, config);
    let url = server.url.clone();
    let ds = shoal::Dataset::open(root.join("ds")).unwrap();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let url = format!("{url}/v1/datasets/ds/search");
            let v = rows[i * 31].vector.clone();
            std::thread::spawn(move || {
                let agent: ureq::Agent = ureq::Agent::config_builder()
                    .http_status_as_error(false)
                    .timeout_global(Some(std::time::Duration::from_secs(30)))
                    .build()
                    .into();
                let body = format!(r#"{{"vector": {}, "k": 4}}"#, json_vector(&v));
                let mut response = agent
                    .post(&url)
                    .header("content-type", "application/json")
                    .send(body)
                    .unwrap();
                let status = response.status().as_u16();
                let text = response.body_mut().read_to_string().unwrap();
                (
                    i,
                    status,
                    serde_json::from_str::<serde_json::Value>(&text).unwrap(),
                )
            })
        })
        .collect();
    wait_for_stats(&url, &|s| s["pending"] == CLIENTS as u64);
    let started = std::time::Instant::now();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let stop = server.stop.take().unwrap();
    let thread = server.thread.take().unwrap();
    std::thread::spawn(move || {
        let _ = stop.send(());
        let _ = thread.join();
        let _ = done_tx.send(());
    });
    done_rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("the server future did not return");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(8),
        "the drain waited out the window"
    );
    let mut answered = 0;
    for client in clients {
        let (i, status, answer) = client.join().unwrap();
        match status {
            200 => {
                let expected = ds
                    .search(&Query::new(rows[i * 31].vector.clone(), 4))
                    .unwrap();
                assert_eq!(hits_of(&answer["hits"]), pairs(&expected));
                answered += 1;
            }
            503 => assert_eq!(answer["error"]["code"], "shutting_down", "{answer}"),
            other => panic!("client {i}: {other} {answer}"),
        }
    }
    assert_eq!(
        answered, CLIENTS,
        "queued searches are drained, not dropped"
    );
    // Nothing listens any more.
    let address = url.trim_start_matches("http://");
    assert!(std::net::TcpStream::connect(address).is_err());
}
