//! The API's one error type and its one `IntoResponse`. Every error a client
//! sees is `{"error": {"type", "message", "field"?}}` with a fitting status.
//! Engine errors are mapped here; their details (SQL text, pool state) are
//! logged, never sent.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use holdfast_db::Error;
use holdfast_providers::egress::EgressRefused;
use serde_json::{json, Value};

/// An error answer: status, machine-readable type, human message.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    kind: &'static str,
    message: String,
    field: Option<String>,
    extra: Extra,
}

/// What an error carries beyond type, message and field (one at most, in
/// one field, so that `ApiError` stays small enough to return by value).
#[derive(Debug)]
enum Extra {
    None,
    /// One more top-level member of the body, e.g. `tool_call` on a 409 so
    /// the client sees the state that won.
    Context(&'static str, Value),
    /// Whole seconds for a `Retry-After` header (a 429, a full disk's 503).
    RetryAfterSecs(u64),
}

impl ApiError {
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            kind,
            message: message.into(),
            field: None,
            extra: Extra::None,
        }
    }

    /// 400 `invalid_request` naming `field`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message).with_field(field)
    }

    /// 422 `egress_refused`: a URL the egress policy does not let Holdfast
    /// reach (an MCP server, an image's or document's URL).
    pub fn egress_refused(field: impl Into<String>, refused: EgressRefused) -> ApiError {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "egress_refused",
            refused.to_string(),
        )
        .with_field(field)
    }

    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// The 404 for an agent that is missing or another project's: the two
    /// must be indistinguishable.
    pub fn agent_not_found(agent: uuid::Uuid) -> ApiError {
        ApiError::not_found(format!("agent {agent} not found"))
    }

    pub fn tool_call_not_found(tool_call: uuid::Uuid) -> ApiError {
        ApiError::not_found(format!("tool call {tool_call} not found"))
    }

    pub fn payload_too_large(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", message)
    }

    /// 429 `rate_limited`, with `Retry-After` rounded up to whole seconds
    /// (at least 1: `0` would invite an immediate retry that fails again).
    pub fn rate_limited(wait: std::time::Duration) -> ApiError {
        let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        let secs = secs.max(1);
        let mut error = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            format!("too many requests; retry after {secs} s"),
        );
        error.extra = Extra::RetryAfterSecs(secs);
        error
    }

    /// 503 `storage_unavailable`: Postgres has no disk space left for the
    /// write; nothing of the request was saved. `Retry-After` asks for a
    /// wait long enough for an operator's alert to fire, not a tight loop.
    pub fn storage_unavailable() -> ApiError {
        let mut error = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "storage_unavailable",
            format!(
                "the database has no disk space left; nothing was saved; retry after \
                 {STORAGE_RETRY_AFTER_SECS} s (an operator must free or add space)"
            ),
        );
        error.extra = Extra::RetryAfterSecs(STORAGE_RETRY_AFTER_SECS);
        error
    }

    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }

    pub fn internal() -> ApiError {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error; see the server log",
        )
    }

    pub fn with_field(mut self, field: impl Into<String>) -> ApiError {
        self.field = Some(field.into());
        self
    }

    pub fn with_context(mut self, name: &'static str, value: Value) -> ApiError {
        self.extra = Extra::Context(name, value);
        self
    }

    pub fn status(&self) -> StatusCode {
        self.status
    }
}

/// The `Retry-After` of a `storage_unavailable` answer, in seconds.
const STORAGE_RETRY_AFTER_SECS: u64 = 30;

/// Message prefixes of SQL's HF422 errors that answer 422 (with the token as
/// the error type) rather than 400.
const UNPROCESSABLE_TOKENS: &[&str] = &[
    "attachment_quota_exceeded",
    "idempotency_key_reused",
    "media_type_mismatch",
    "model_not_permitted",
    "request_too_large",
    "unsupported_content",
    "server_tools_not_allowed",
];

impl From<Error> for ApiError {
    fn from(e: Error) -> ApiError {
        match e {
            Error::NotFound(message) => ApiError::not_found(message),
            Error::Conflict(message) => ApiError::new(StatusCode::CONFLICT, "conflict", message),
            // The SQL raises these tokens first in their messages on
            // purpose: a well-formed request that is not permitted (a reused
            // idempotency key, a model endpoint or URL the project may not
            // use, an image or document the agent's provider cannot take or
            // whose bytes are not of its declared type, files past an
            // attachment quota or the provider's request size) is a 422, told
            // apart from malformed input (400).
            Error::Invalid { field, message }
                if UNPROCESSABLE_TOKENS.iter().any(|t| message.starts_with(t)) =>
            {
                let kind = UNPROCESSABLE_TOKENS
                    .iter()
                    .find(|t| message.starts_with(*t))
                    .copied()
                    .unwrap_or("invalid_request");
                let error = ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, kind, message);
                match field {
                    Some(field) => error.with_field(field),
                    None => error,
                }
            }
            Error::Invalid { field, message } => match field {
                // The message names the field too, for people reading it.
                Some(field) if !message.contains(&field) => ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_request",
                    format!("{field}: {message}"),
                )
                .with_field(field),
                Some(field) => ApiError::invalid(field, message),
                None => ApiError::new(StatusCode::BAD_REQUEST, "invalid_request", message),
            },
            ref e if e.is_storage_full() => {
                tracing::error!(error = %e, "Postgres is out of disk space: a request was refused");
                metrics::counter!("holdfast_storage_full_total", "process" => "api").increment(1);
                ApiError::storage_unavailable()
            }
            ref e @ (Error::Database(_) | Error::Pool(_)) if e.is_retryable() => {
                tracing::warn!(error = %e, "database unavailable");
                ApiError::unavailable("the database is unavailable; retry later")
            }
            other => {
                // LeaseLost never comes from the API's calls; anything else
                // here is a defect or an outage worth a look.
                tracing::error!(error = %other, "request failed");
                ApiError::internal()
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = json!({"type": self.kind, "message": self.message});
        if let Some(field) = self.field {
            error["field"] = Value::String(field);
        }
        let mut body = json!({ "error": error });
        let retry_after_secs = match self.extra {
            Extra::Context(name, value) => {
                body[name] = value;
                None
            }
            Extra::RetryAfterSecs(secs) => Some(secs),
            Extra::None => None,
        };
        let mut response = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(secs) = retry_after_secs {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// Give every error response the error shape, including those made by axum
/// and tower-http layers (405, 413 by Content-Length, the timeout's 503),
/// which answer in plain text or with an empty body.
pub async fn ensure_error_shape(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if status.as_u16() < 400 || is_json {
        return response;
    }
    let (kind, message) = match status {
        StatusCode::METHOD_NOT_ALLOWED => {
            ("method_not_allowed", "method not allowed on this route")
        }
        StatusCode::PAYLOAD_TOO_LARGE => ("payload_too_large", "request body too large"),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            ("unsupported_media_type", "expected application/json")
        }
        // Our own 503s are JSON; a bare one is the request timeout.
        StatusCode::SERVICE_UNAVAILABLE => ("timeout", "the request took too long"),
        StatusCode::NOT_FOUND => ("not_found", "no such route"),
        _ if status.is_client_error() => ("bad_request", "bad request"),
        _ => ("internal", "internal error; see the server log"),
    };
    let (mut parts, _) = response.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    let body = ApiError::new(status, kind, message).into_response();
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, body.into_body())
}
