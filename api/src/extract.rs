//! Request extractors that answer in the API's error shape: JSON bodies
//! (malformed → 400 `invalid_json`, wrong type or unknown field → 400
//! `invalid_request` naming the field, over the body limit → 413), path
//! parameters (a bad UUID → 400) and query strings.

use axum::body::Bytes;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::{header, StatusCode};
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A JSON body, parsed with the field path of any error kept.
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let content_type = req
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap_or_default().to_owned());
        if let Some(content_type) = content_type {
            let essence = content_type.split(';').next().unwrap_or_default().trim();
            if !(essence.eq_ignore_ascii_case("application/json") || essence.ends_with("+json")) {
                return Err(ApiError::new(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "unsupported_media_type",
                    format!("expected a JSON body (application/json), got {content_type:?}"),
                ));
            }
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::payload_too_large("request body too large")
            } else {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_body",
                    rejection.body_text(),
                )
            }
        })?;
        parse_json(&bytes).map(ApiJson)
    }
}

/// Parse JSON, naming the field an error is about.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_json",
            "the request body is empty; expected JSON",
        ));
    }
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        match inner.classify() {
            serde_json::error::Category::Data => {
                let error = ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid_request",
                    inner.to_string(),
                );
                if path == "." {
                    error
                } else {
                    error.with_field(path)
                }
            }
            _ => ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_json",
                format!("malformed JSON: {inner}"),
            ),
        }
    })?;
    deserializer.end().map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_json",
            format!("malformed JSON: {e}"),
        )
    })?;
    Ok(value)
}

/// Path parameters; a value that does not parse (a bad UUID) is a 400.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct ApiPath<T>(pub T);

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_path",
            rejection.body_text(),
        )
    }
}

/// A query string; a parameter of the wrong type is a 400.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct ApiQuery<T>(pub T);

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_query",
            rejection.body_text(),
        )
    }
}
