//! Request extractors that answer in the API's error shape: JSON bodies
//! (malformed → 400 `invalid_json`, wrong type or unknown field → 400
//! `invalid_request` naming the field, over the body limit → 413), path
//! parameters (a bad UUID → 400) and query strings.
//!
//! Tenant text Postgres cannot store (U+0000, see `holdfast_wire::pg_text`)
//! is refused here, in every string and object key of a JSON body and in
//! every query parameter, with 400 `invalid_request` naming the field: every
//! route takes its input through these extractors, so none can forget, and
//! nothing is written. A machine daemon's reports ([`MachineJson`]) are made
//! storable instead: a command's output is a result in hand, not input to fix.

use axum::body::Bytes;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use holdfast_wire::pg_text::{find_nul, make_storable};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::ApiError;

/// A tenant's JSON body, parsed with the field path of any error kept;
/// U+0000 anywhere in it is refused (400 naming the field).
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        parse_json(&json_body(req, state).await?).map(ApiJson)
    }
}

/// A machine daemon's JSON body: what a machine reports (a command's
/// output) is kept, so U+0000 in it becomes U+FFFD instead of a refusal
/// (`holdfast_wire::pg_text`).
pub struct MachineJson<T>(pub T);

impl<S, T> FromRequest<S> for MachineJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let mut value = parse_value(&json_body(req, state).await?)?;
        make_storable(&mut value);
        deserialize_value(value).map(MachineJson)
    }
}

/// The body of a request that declares JSON (or declares nothing).
async fn json_body<S: Send + Sync>(req: Request, state: &S) -> Result<Bytes, ApiError> {
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
    Bytes::from_request(req, state).await.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::payload_too_large("request body too large")
        } else {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_body",
                rejection.body_text(),
            )
        }
    })
}

/// Parse a tenant's JSON as `T`, naming the field an error is about; U+0000
/// anywhere in it is refused.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let value = parse_value(bytes)?;
    if let Some(field) = find_nul(&value) {
        return Err(nul_refused(field));
    }
    deserialize_value(value)
}

/// Any JSON value; empty or malformed → 400 `invalid_json`.
fn parse_value(bytes: &[u8]) -> Result<Value, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_json",
            "the request body is empty; expected JSON",
        ));
    }
    serde_json::from_slice(bytes).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_json",
            format!("malformed JSON: {e}"),
        )
    })
}

/// `value` as `T`; a wrong type or unknown field → 400 naming the field.
fn deserialize_value<T: DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let error = ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            e.into_inner().to_string(),
        );
        if path == "." {
            error
        } else {
            error.with_field(path)
        }
    })
}

/// The 400 for U+0000 in `field`.
fn nul_refused(field: String) -> ApiError {
    ApiError::invalid(
        field.clone(),
        format!("{field} contains U+0000 (a NUL character), which cannot be stored"),
    )
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

/// A query string; a parameter of the wrong type, or one holding U+0000
/// (`%00`), is a 400 naming it.
pub struct ApiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let axum::extract::Query(pairs) =
            axum::extract::Query::<Vec<(String, String)>>::from_request_parts(parts, state).await?;
        if let Some((name, _)) = pairs
            .iter()
            .find(|(name, value)| name.contains('\0') || value.contains('\0'))
        {
            return Err(nul_refused(name.replace('\0', "\\u0000")));
        }
        let axum::extract::Query(query) =
            axum::extract::Query::<T>::from_request_parts(parts, state).await?;
        Ok(ApiQuery(query))
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_query",
            rejection.body_text(),
        )
    }
}
