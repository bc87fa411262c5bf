//! Writes and reads beside search: creating a dataset, describing one,
//! appending JSON rows, deleting by filter, reading one row by id. Every
//! body is checked in full before anything is written, so a bad request
//! changes nothing on disk.

use super::error::ApiError;
use super::{AppState, JsonBody};
use crate::error::Error;
use crate::kernel::Metric;
use crate::serve::{DatasetHandle, Engine};
use crate::storage::{ColumnType, Schema};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// Versions listed by `GET /v1/datasets/{name}` (the newest ones).
const VERSIONS_SHOWN: usize = 20;

/// One column of `POST /v1/datasets`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColumnBody {
    /// Column name.
    pub name: String,
    /// `vector`, `int64`, `float64`, `utf8` (or `string`), `bool`.
    #[serde(rename = "type")]
    pub ty: String,
    /// Dimension (vector columns only).
    pub dim: Option<usize>,
    /// `l2` (default), `cosine` or `dot` (vector columns only).
    pub metric: Option<Metric>,
}

/// `POST /v1/datasets`: a name and the columns (an `id` int64 column is
/// added in front when not listed).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    /// Dataset name, `[A-Za-z0-9_-]{1,64}`.
    pub name: String,
    /// Columns in order.
    pub columns: Vec<ColumnBody>,
}

impl CreateBody {
    /// The schema the body describes.
    pub fn schema(&self) -> Result<Schema, Error> {
        let mut columns = Vec::with_capacity(self.columns.len());
        for (i, c) in self.columns.iter().enumerate() {
            let vector_only = |what: &str| {
                Error::InvalidArgument(format!(
                    "columns[{i}] ('{}'): '{what}' applies to vector columns only",
                    c.name
                ))
            };
            let ty = match c.ty.as_str() {
                "vector" => {
                    let dim = c.dim.ok_or_else(|| {
                        Error::InvalidArgument(format!(
                            "columns[{i}] ('{}'): a vector column needs 'dim'",
                            c.name
                        ))
                    })?;
                    ColumnType::Vector {
                        dim,
                        metric: c.metric.unwrap_or_default(),
                    }
                }
                scalar => {
                    if c.dim.is_some() {
                        return Err(vector_only("dim"));
                    }
                    if c.metric.is_some() {
                        return Err(vector_only("metric"));
                    }
                    match scalar {
                        "int64" => ColumnType::Int64,
                        "float64" => ColumnType::Float64,
                        "utf8" | "string" => ColumnType::Utf8,
                        "bool" => ColumnType::Bool,
                        other => {
                            return Err(Error::InvalidArgument(format!(
                                "columns[{i}] ('{}'): unknown type '{}' (vector, int64, float64, utf8, bool)",
                                c.name,
                                other.escape_debug()
                            )))
                        }
                    }
                }
            };
            columns.push((c.name.clone(), ty));
        }
        Schema::new(columns)
    }
}

/// `POST /v1/datasets/{name}/rows`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RowsBody {
    /// One object per row, keyed by column name; a row without `id` gets
    /// the dataset's running row count.
    pub rows: Vec<Map<String, Value>>,
}

/// `POST /v1/datasets/{name}/delete`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeleteBody {
    /// SQL filter over scalar columns; matching rows are deleted.
    pub filter: String,
}

/// A schema as JSON in the shape `POST /v1/datasets` takes.
pub fn schema_json(schema: &Schema) -> Vec<Value> {
    schema
        .columns
        .iter()
        .map(|c| match &c.ty {
            ColumnType::Vector { dim, metric } => {
                json!({ "name": c.name, "type": "vector", "dim": dim, "metric": metric })
            }
            other => json!({ "name": c.name, "type": other.describe() }),
        })
        .collect()
}

/// Runs `work` (file or storage I/O, parsing) on a blocking thread, off
/// the runtime's, and answers its result.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> crate::error::Result<T> + Send + 'static,
) -> crate::error::Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| Error::Internal(format!("a blocking task failed: {e}")))?
}

/// What `GET /v1/datasets/{name}` answers: the latest version's schema,
/// rows, fragments and index segments, and the newest versions.
pub(super) async fn describe(handle: &DatasetHandle) -> Result<Value, ApiError> {
    let ds = handle.latest();
    let history = {
        let ds = ds.clone();
        blocking(move || ds.versions()).await?
    };
    let total_versions = history.len();
    let versions: Vec<Value> = history
        .iter()
        .skip(total_versions.saturating_sub(VERSIONS_SHOWN))
        .map(|v| serde_json::to_value(v).unwrap_or(Value::Null))
        .collect();
    let segments: Vec<Value> = ds
        .index_segments()
        .iter()
        .map(|s| serde_json::to_value(s).unwrap_or(Value::Null))
        .collect();
    Ok(json!({
        "name": handle.name(),
        "version": ds.version(),
        "rows": ds.count_rows(),
        "fragments": ds.manifest().fragments.len(),
        "columns": schema_json(ds.schema()),
        "index_segments": segments,
        "versions": versions,
        "version_count": total_versions,
    }))
}

/// `GET /v1/datasets/{name}`.
pub(super) async fn describe_dataset(
    State(engine): State<Engine>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let handle = engine.dataset(&name).await?;
    Ok(Json(describe(&handle).await?))
}

/// `POST /v1/datasets`: 201 with the new dataset's description.
pub(super) async fn create_dataset(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<CreateBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let schema = body.schema()?;
    let handle = state.engine.create_dataset(&body.name, schema).await?;
    Ok((StatusCode::CREATED, Json(describe(&handle).await?)))
}

/// `POST /v1/datasets/{name}/rows`: every row is converted and checked
/// against the schema before one commit writes them all.
pub(super) async fn append_rows(
    State(engine): State<Engine>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<RowsBody>,
) -> Result<Json<Value>, ApiError> {
    let handle = engine.dataset(&name).await?;
    if body.rows.is_empty() {
        return Err(Error::InvalidArgument("'rows' is empty: nothing to append".into()).into());
    }
    let schema = handle.latest().schema().clone();
    let batch = blocking(move || {
        crate::storage::input::json_rows_batch(&body.rows, &schema, "request body")
    })
    .await?;
    let commit = handle.append(vec![batch]).await?;
    Ok(Json(
        json!({ "version": commit.version, "rows": commit.rows }),
    ))
}

/// `POST /v1/datasets/{name}/delete`.
pub(super) async fn delete_rows(
    State(engine): State<Engine>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<DeleteBody>,
) -> Result<Json<Value>, ApiError> {
    let handle = engine.dataset(&name).await?;
    let commit = handle.delete(&body.filter).await?;
    Ok(Json(
        json!({ "version": commit.version, "deleted": commit.rows }),
    ))
}

/// `GET /v1/datasets/{name}/rows/{id}`: the row whose `id` column is `id`
/// in the latest version, with every column (vectors included).
pub(super) async fn get_row(
    State(engine): State<Engine>,
    Path((name, id)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let id: i64 = id.parse().map_err(|_| {
        Error::InvalidArgument(format!(
            "row id '{}' is not a 64-bit integer",
            id.escape_debug()
        ))
    })?;
    let handle = engine.dataset(&name).await?;
    let ds = handle.latest();
    let version = ds.version();
    let found = blocking(move || ds.row_by_id(id)).await?;
    let Some(row) = found else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "row_not_found",
            format!("no visible row has id {id} in version {version}"),
        ));
    };
    let columns: Map<String, Value> = row
        .values
        .iter()
        .map(|(name, v)| (name.clone(), super::api::scalar_json(v)))
        .collect();
    Ok(Json(
        json!({ "version": version, "id": id, "columns": columns }),
    ))
}

/// Body of `POST /v1/datasets/{name}/prewarm`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PrewarmBody {
    /// The vector column (default: every indexed one).
    #[serde(default)]
    column: Option<String>,
    /// Partition numbers (default: all).
    #[serde(default)]
    partitions: Option<Vec<u32>>,
}

/// `POST /v1/datasets/{name}/prewarm`: fills the disk cache with what
/// searches read (see [`crate::Dataset::prewarm`]); answers its report.
pub(super) async fn prewarm(
    State(engine): State<Engine>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<PrewarmBody>,
) -> Result<Json<Value>, ApiError> {
    let handle = engine.dataset(&name).await?;
    let ds = handle.latest();
    let partitions = match body.partitions {
        Some(list) => crate::db::PrewarmPartitions::Only(list),
        None => crate::db::PrewarmPartitions::All,
    };
    let report = blocking(move || ds.prewarm(body.column.as_deref(), &partitions)).await?;
    Ok(Json(serde_json::to_value(report).map_err(|e| {
        Error::Internal(format!("prewarm report: {e}"))
    })?))
}
