//! The HTTP JSON service over an [`Engine`]: `shoal serve`.
//!
//! Single searches go through the coalescer (so concurrent HTTP clients
//! share scans like in-process callers do); batch searches run as one
//! explicit batch. A client that disconnects drops its handler's future,
//! which cancels its search. Errors are JSON with the status from the
//! error's kind (the table is in the README and `openapi.json`).

mod admin;
mod api;
mod error;
mod jobs;
mod metrics;
mod wire;

use self::api::{hits_json, BatchBody, RawBatchParams, SearchBody};
use self::error::ApiError;
use self::jobs::IndexJobs;
use crate::serve::Engine;
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, FromRef, FromRequest, Path, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::{Json, Router};
use serde_json::{json, Value};
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

/// One route the service answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// HTTP method (upper case).
    pub method: &'static str,
    /// Path, with `{name}` parameters as in OpenAPI.
    pub path: &'static str,
    /// Served without the API key (the console page, health, the API
    /// description); every other route needs it when one is configured.
    pub public: bool,
}

const fn route(method: &'static str, path: &'static str, public: bool) -> Route {
    Route {
        method,
        path,
        public,
    }
}

/// Every route of the service. The router is built from this list and
/// `openapi.json` must describe exactly these (a test checks both).
pub const ROUTES: &[Route] = &[
    route("GET", "/", true),
    route("GET", "/healthz", true),
    route("GET", "/readyz", true),
    route("GET", "/openapi.json", true),
    route("GET", "/metrics", false),
    route("GET", "/v1/stats", false),
    route("GET", "/v1/datasets", false),
    route("POST", "/v1/datasets", false),
    route("GET", "/v1/datasets/{name}", false),
    route("POST", "/v1/datasets/{name}/search", false),
    route("POST", "/v1/datasets/{name}/search/batch", false),
    route("POST", "/v1/datasets/{name}/explain", false),
    route("POST", "/v1/datasets/{name}/rows", false),
    route("GET", "/v1/datasets/{name}/rows/{id}", false),
    route("POST", "/v1/datasets/{name}/delete", false),
    route("POST", "/v1/datasets/{name}/prewarm", false),
    route("GET", "/v1/datasets/{name}/indexes", false),
    route("POST", "/v1/datasets/{name}/indexes", false),
];

/// The web console, one static page (`GET /`).
pub const CONSOLE_HTML: &str = include_str!("console.html");
/// The OpenAPI 3.1 description of [`ROUTES`] (`GET /openapi.json`).
pub const OPENAPI_JSON: &str = include_str!("../../openapi.json");

/// What every handler can reach: the engine and the index jobs.
#[derive(Clone, Debug)]
pub struct AppState {
    /// The engine serving the datasets.
    pub engine: Engine,
    /// Background index builds and their outcomes.
    pub jobs: Arc<IndexJobs>,
}

impl FromRef<AppState> for Engine {
    fn from_ref(state: &AppState) -> Engine {
        state.engine.clone()
    }
}

/// The handler of one entry of [`ROUTES`]; `None` for a pair not in it.
fn handler(method: &str, path: &str) -> Option<MethodRouter<AppState>> {
    Some(match (method, path) {
        ("GET", "/") => get(console),
        ("GET", "/healthz") => get(healthz),
        ("GET", "/readyz") => get(readyz),
        ("GET", "/openapi.json") => get(openapi),
        ("GET", "/metrics") => get(prometheus),
        ("GET", "/v1/stats") => get(stats),
        ("GET", "/v1/datasets") => get(list_datasets),
        ("POST", "/v1/datasets") => post(admin::create_dataset),
        ("GET", "/v1/datasets/{name}") => get(admin::describe_dataset),
        ("POST", "/v1/datasets/{name}/search") => post(search),
        ("POST", "/v1/datasets/{name}/search/batch") => post(search_batch),
        ("POST", "/v1/datasets/{name}/explain") => post(explain),
        ("POST", "/v1/datasets/{name}/rows") => post(admin::append_rows),
        ("GET", "/v1/datasets/{name}/rows/{id}") => get(admin::get_row),
        ("POST", "/v1/datasets/{name}/delete") => post(admin::delete_rows),
        ("POST", "/v1/datasets/{name}/prewarm") => post(admin::prewarm),
        ("GET", "/v1/datasets/{name}/indexes") => get(jobs::list_indexes),
        ("POST", "/v1/datasets/{name}/indexes") => post(jobs::start_index_job),
        _ => return None,
    })
}

/// The routes of the service over `engine`.
pub fn router(engine: Engine) -> Router {
    let max_body = usize::try_from(engine.config().server.max_body_bytes).unwrap_or(usize::MAX);
    let api_key = Arc::<str>::from(engine.config().server.api_key.as_str());
    let mut public = Router::new();
    let mut protected = Router::new();
    for r in ROUTES {
        let Some(h) = handler(r.method, r.path) else {
            continue;
        };
        if r.public {
            public = public.route(r.path, h);
        } else {
            protected = protected.route(r.path, h);
        }
    }
    let protected = protected
        .fallback(not_found)
        .layer(axum::middleware::from_fn(
            move |req: Request, next: Next| {
                let api_key = Arc::clone(&api_key);
                async move { authorize(&api_key, req, next).await }
            },
        ));
    Router::new()
        .merge(public)
        .merge(protected)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(AppState {
            engine,
            jobs: Arc::default(),
        })
}

/// Lets a request through when no key is configured or it carries
/// `Authorization: Bearer <key>`; 401 otherwise.
async fn authorize(api_key: &str, req: Request, next: Next) -> Response {
    if api_key.is_empty() {
        return next.run(req).await;
    }
    let presented = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if constant_time_eq(presented.as_bytes(), api_key.as_bytes()) {
        next.run(req).await
    } else {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid 'Authorization: Bearer <api_key>' header is required",
        )
        .into_response()
    }
}

/// Compares without an early exit, so the time taken does not reveal how
/// much of the key a guess got right (only its length).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Serves `engine` on `listener` until `shutdown` resolves, then stops
/// accepting and shuts the engine down: searches already queued are
/// scanned at once (not after their window) and answered, later ones get
/// 503 `shutting_down`; returns when every request in flight has its answer.
pub async fn serve(
    listener: tokio::net::TcpListener,
    engine: Engine,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> crate::error::Result<()> {
    let app = router(engine.clone());
    let draining = engine.clone();
    let signal = async move {
        shutdown.await;
        // Drain the coalescer while axum waits for the requests in flight.
        tokio::spawn(async move { draining.shutdown().await });
    };
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(signal)
        .await;
    engine.shutdown().await;
    served.map_err(|e| crate::error::Error::Internal(format!("the HTTP server failed: {e}")))
}

/// JSON bodies whose rejections (malformed JSON, wrong types, unknown
/// fields, too large) answer in the service's error format.
struct JsonBody<T>(T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    Json<T>: FromRequest<S, Rejection = JsonRejection>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(value)) => Ok(JsonBody(value)),
            Err(rejection) => {
                let status = rejection.status();
                let (status, code) = if status == StatusCode::PAYLOAD_TOO_LARGE {
                    (status, "body_too_large")
                } else if status == StatusCode::UNSUPPORTED_MEDIA_TYPE {
                    (status, "unsupported_media_type")
                } else {
                    (StatusCode::BAD_REQUEST, "malformed_json")
                };
                Err(ApiError::new(status, code, rejection.body_text()))
            }
        }
    }
}

/// A batch search's body: JSON ([`BatchBody`]), or with `Content-Type:
/// application/octet-stream` raw little-endian float32 vectors, or with
/// `application/vnd.apache.arrow.stream` an Arrow IPC stream of vectors,
/// both with the options in the query string ([`RawBatchParams`]).
enum BatchInput {
    Json(BatchBody),
    Raw(RawBatchParams, axum::body::Bytes, BinaryBody),
}

/// How a binary batch body holds its vectors.
#[derive(Clone, Copy)]
enum BinaryBody {
    /// Little-endian float32, query after query.
    Float32,
    /// An Arrow IPC stream of one `FixedSizeList<Float32>` column.
    ArrowStream,
}

impl BatchInput {
    /// The batch, for the dataset `ds` (whose vector column gives a raw
    /// body's dimension).
    fn into_batch(
        self,
        ds: &crate::serve::DatasetHandle,
    ) -> Result<crate::query::BatchQuery, ApiError> {
        match self {
            BatchInput::Json(body) => Ok(body.into_batch()?),
            BatchInput::Raw(params, body, form) => {
                let latest = ds.latest();
                let (_, dim, _) = latest.schema().vector_column(params.column.as_deref())?;
                let vectors = match form {
                    BinaryBody::Float32 => wire::split_raw_batch(&body, dim),
                    BinaryBody::ArrowStream => wire::arrow_batch(&body, dim),
                }
                .map_err(|m| ApiError::new(StatusCode::BAD_REQUEST, "malformed_body", m))?;
                Ok(params.into_batch(vectors)?)
            }
        }
    }
}

impl<S: Send + Sync> FromRequest<S> for BatchInput {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let content_type = req
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let form = if content_type.starts_with("application/octet-stream") {
            BinaryBody::Float32
        } else if content_type.starts_with("application/vnd.apache.arrow.stream") {
            BinaryBody::ArrowStream
        } else {
            return JsonBody::<BatchBody>::from_request(req, state)
                .await
                .map(|JsonBody(body)| BatchInput::Json(body));
        };
        let params = axum::extract::Query::<RawBatchParams>::try_from_uri(req.uri())
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "bad_query_string", e.body_text()))?
            .0;
        let body = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|e| {
                let status = e.status();
                if status == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::new(status, "body_too_large", e.body_text())
                } else {
                    ApiError::new(StatusCode::BAD_REQUEST, "malformed_body", e.body_text())
                }
            })?;
        Ok(BatchInput::Raw(params, body, form))
    }
}

async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// `GET /readyz`: 200 once the engine takes traffic; 503 while the
/// start-up prewarm (`storage.prewarm`) fills the disk cache, so a load
/// balancer sends a new replica nothing until its reads are warm.
async fn readyz(State(engine): State<Engine>) -> Response {
    if engine.is_ready() {
        Json(json!({ "status": "ready" })).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "prewarming" })),
        )
            .into_response()
    }
}

async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "no_such_route", "no such route")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this route does not take that method (see GET /openapi.json)",
    )
}

async fn console() -> Response {
    (
        [
            (axum::http::header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (axum::http::header::CACHE_CONTROL, "no-cache"),
        ],
        CONSOLE_HTML,
    )
        .into_response()
}

async fn openapi() -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        OPENAPI_JSON,
    )
        .into_response()
}

async fn list_datasets(State(engine): State<Engine>) -> Result<Json<Value>, ApiError> {
    let names = engine.dataset_names().await?;
    Ok(Json(json!({ "datasets": names })))
}

async fn search(
    State(engine): State<Engine>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<SearchBody>,
) -> Result<Json<Value>, ApiError> {
    let started = Instant::now();
    let ds = engine.dataset(&name).await?;
    let response = ds.search(&body.into_query()).await?;
    Ok(Json(json!({
        "version": response.version,
        "hits": hits_json(&response.hits, &response.projection),
        "took_us": started.elapsed().as_micros() as u64,
        "batch": { "id": response.batch.id, "size": response.batch.size, "mode": response.batch.mode },
    })))
}

async fn search_batch(
    State(engine): State<Engine>,
    Path(name): Path<String>,
    body: BatchInput,
) -> Result<Json<Value>, ApiError> {
    let started = Instant::now();
    let ds = engine.dataset(&name).await?;
    let results = ds.search_batch(&body.into_batch(&ds)?).await?;
    Ok(Json(json!({
        "version": results.version,
        "results": results_json(&results),
        "took_us": started.elapsed().as_micros() as u64,
    })))
}

async fn explain(
    State(engine): State<Engine>,
    Path(name): Path<String>,
    body: BatchInput,
) -> Result<Json<Value>, ApiError> {
    let ds = engine.dataset(&name).await?;
    let (results, profile) = ds.explain(&body.into_batch(&ds)?).await?;
    Ok(Json(json!({
        "version": results.version,
        "results": results_json(&results),
        "profile": serde_json::to_value(&profile).unwrap_or(Value::Null),
    })))
}

fn results_json(results: &crate::query::SearchResults) -> Vec<Value> {
    results
        .hits
        .iter()
        .enumerate()
        .map(|(i, hits)| json!({ "query_index": i, "hits": hits_json(hits, results.projection_of(i)) }))
        .collect()
}

async fn prometheus(State(engine): State<Engine>) -> Result<Response, ApiError> {
    let text = metrics::render(&engine)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response())
}

async fn stats(State(engine): State<Engine>) -> Json<Value> {
    let s = engine.stats();
    Json(json!({
        "requests": s.requests,
        "batches": s.batches,
        "explicit_batches": s.explicit_batches,
        "mean_batch_size": s.mean_batch_size(),
        "rejected_overloaded": s.rejected_overloaded,
        "deadline_exceeded": s.deadline_exceeded,
        "cancelled": s.cancelled,
        "write_conflicts": s.write_conflicts,
        "pending": s.pending,
        "cache_hit_ratio": s.cache_hit_ratio(),
        "batched_requests": s.batch_size.sum,
        "batches_by_distinct_filters": s
            .batch_filters
            .counts
            .iter()
            .enumerate()
            .map(|(i, n)| json!({ "max_filters": s.batch_filters.bounds.get(i), "batches": n }))
            .collect::<Vec<Value>>(),
        "queue_wait_mean_us": s.queue_wait_us.mean(),
        "queue_wait_p99_us": quantile_bound(&s.queue_wait_us, 0.99),
        "scan_p99_us": quantile_bound(&s.scan_us, 0.99),
        "budget_in_use": s.budget_in_use,
        "budget_limit": s.budget_limit,
    }))
}

/// The upper bound of the bucket holding quantile `q` of `h` (`None`
/// when empty, or when it falls in the unbounded last bucket).
fn quantile_bound(h: &crate::serve::HistogramSnapshot, q: f64) -> Option<u64> {
    let n = h.count();
    if n == 0 {
        return None;
    }
    let rank = ((n as f64) * q).ceil().max(1.0) as u64;
    let mut seen = 0u64;
    for (i, c) in h.counts.iter().enumerate() {
        seen += c;
        if seen >= rank {
            return h.bounds.get(i).copied();
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantile_bound_reads_the_bucket_holding_the_rank() {
        let h = crate::serve::HistogramSnapshot {
            bounds: vec![10, 100, 1000],
            counts: vec![98, 1, 1, 0],
            sum: 0,
        };
        assert_eq!(quantile_bound(&h, 0.5), Some(10));
        assert_eq!(quantile_bound(&h, 0.99), Some(100));
        assert_eq!(quantile_bound(&h, 1.0), Some(1000));
        let empty = crate::serve::HistogramSnapshot {
            bounds: vec![10],
            counts: vec![0, 0],
            sum: 0,
        };
        assert_eq!(quantile_bound(&empty, 0.99), None);
    }

    const METHODS: [&str; 7] = ["get", "post", "put", "delete", "patch", "head", "options"];

    #[test]
    fn every_route_has_a_handler_and_appears_once() {
        for (i, r) in ROUTES.iter().enumerate() {
            assert!(handler(r.method, r.path).is_some(), "{r:?}");
            assert!(!ROUTES[..i].contains(r), "{r:?} twice");
        }
    }

    #[test]
    fn openapi_json_describes_exactly_the_routes_served() {
        let doc: Value = serde_json::from_str(OPENAPI_JSON).unwrap();
        assert_eq!(doc["openapi"], "3.1.0");
        let mut described = Vec::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                if !METHODS.contains(&method.as_str()) {
                    continue;
                }
                described.push((method.to_uppercase(), path.clone()));
                let route = ROUTES
                    .iter()
                    .find(|r| r.method.eq_ignore_ascii_case(method) && r.path == path);
                let route = route.unwrap_or_else(|| {
                    panic!("openapi.json describes {method} {path}, which ROUTES does not have")
                });
                let open = op.get("security") == Some(&json!([]));
                assert_eq!(open, route.public, "{method} {path}: security vs ROUTES");
                assert!(op["responses"].as_object().is_some_and(|r| !r.is_empty()));
            }
        }
        let mut served: Vec<(String, String)> = ROUTES
            .iter()
            .map(|r| (r.method.to_string(), r.path.to_string()))
            .collect();
        described.sort();
        served.sort();
        assert_eq!(described, served, "openapi.json and ROUTES differ");
    }

    #[test]
    fn every_schema_reference_in_openapi_json_resolves() {
        fn refs(v: &Value, out: &mut Vec<String>) {
            match v {
                Value::Object(map) => {
                    for (k, v) in map {
                        match (k.as_str(), v) {
                            ("$ref", Value::String(r)) => out.push(r.clone()),
                            _ => refs(v, out),
                        }
                    }
                }
                Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
                _ => {}
            }
        }
        let doc: Value = serde_json::from_str(OPENAPI_JSON).unwrap();
        let mut all = Vec::new();
        refs(&doc, &mut all);
        assert!(!all.is_empty());
        for r in all {
            let pointer = r
                .strip_prefix('#')
                .unwrap_or_else(|| panic!("external ref {r}"));
            assert!(doc.pointer(pointer).is_some(), "{r} does not resolve");
        }
    }
}
