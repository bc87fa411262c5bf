//! Errors as HTTP responses: `{ "error": { "code": "...", "message": "..." } }`
//! with the status taken from the error's [`ErrorKind`], so a new error
//! variant cannot land in the wrong class.

use crate::error::{Error, ErrorKind};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error on its way to an HTTP client.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    /// An error with an explicit status (request-level problems the engine
    /// never sees: malformed JSON, oversized bodies, unknown routes).
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> ApiError {
        ApiError {
            status: status_of(&e),
            code: code_of(&e),
            message: e.to_string(),
        }
    }
}

/// The HTTP status for an error, from its kind.
pub fn status_of(e: &Error) -> StatusCode {
    match e.kind() {
        ErrorKind::InvalidInput => match e {
            Error::LimitExceeded {
                what: "batch size", ..
            } => StatusCode::PAYLOAD_TOO_LARGE,
            _ => StatusCode::BAD_REQUEST,
        },
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Conflict => StatusCode::CONFLICT,
        ErrorKind::Overloaded | ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Cancelled => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
        ErrorKind::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// A stable, machine-readable code per error variant.
pub fn code_of(e: &Error) -> &'static str {
    match e {
        Error::DimensionMismatch { .. } => "dimension_mismatch",
        Error::NonFinite { .. } => "non_finite",
        Error::InvalidArgument(_) => "invalid_argument",
        Error::LimitExceeded { .. } => "limit_exceeded",
        Error::UnknownColumn { .. } => "unknown_column",
        Error::WrongColumnType { .. } => "wrong_column_type",
        Error::Filter { .. } => "bad_filter",
        Error::DatasetNotFound(_) => "dataset_not_found",
        Error::NotADataset(_) => "not_a_dataset",
        Error::DatasetExists(_) => "dataset_exists",
        Error::VersionNotFound { .. } => "version_not_found",
        Error::CommitConflict { .. } => "commit_conflict",
        Error::SchemaMismatch(_) => "schema_mismatch",
        Error::MalformedInput { .. } => "malformed_input",
        Error::Corrupt { .. } => "corrupt",
        Error::Io { .. } => "io",
        Error::Arrow(_) => "arrow",
        Error::Cancelled => "cancelled",
        Error::Overloaded(_) => "overloaded",
        Error::DeadlineExceeded { .. } => "deadline_exceeded",
        Error::StorageUnavailable { .. } => "storage_unavailable",
        Error::ShuttingDown => "shutting_down",
        Error::Internal(_) => "internal",
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = axum::Json(json!({
            "error": { "code": self.code, "message": self.message }
        }));
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            (self.status, [(header::RETRY_AFTER, "1")], body).into_response()
        } else {
            (self.status, body).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreachable_storage_is_503_storage_unavailable() {
        let e = Error::StorageUnavailable {
            url: "s3://bucket/ds".into(),
            message: "connection refused".into(),
        };
        assert_eq!(status_of(&e), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(code_of(&e), "storage_unavailable");
        assert!(!e.is_user_error());
    }
}
