//! `GET /v1/agents/{id}/attachments/{attachment_id}`: the bytes of an image
//! or document an agent was sent, which inputs, tool calls and events
//! reference by id (docs/api.md, "Content blocks").

use axum::extract::State;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use holdfast_db::store;
use holdfast_wire::api::error::ErrorBody;
use uuid::Uuid;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::ApiPath;
use crate::observe::record_agent;
use crate::state::AppState;

/// What an attachment's response may do in a browser that opens it: nothing
/// (no script, no styles, no requests, a unique origin), whatever its
/// bytes hold.
pub const ATTACHMENT_CONTENT_SECURITY_POLICY: &str = "default-src 'none'; sandbox";

/// An attachment's bytes, with its media type as `Content-Type`, served as a
/// download (`Content-Disposition: attachment`) that a browser neither
/// sniffs (`nosniff`) nor lets act (a sandboxing CSP). The bytes were
/// checked against the media type when stored. An attachment never
/// changes, so a client may cache it for good.
#[utoipa::path(
    get,
    path = "/v1/agents/{id}/attachments/{attachment_id}",
    tag = "agents",
    params(
        ("id" = Uuid, Path, description = "agent id"),
        ("attachment_id" = Uuid, Path, description = "the `attachment_id` of a block's source"),
    ),
    responses(
        (status = 200, description = "the file, `Content-Type` its media type", content_type = "application/octet-stream", body = Vec<u8>),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, description = "no such agent in this project, or no such attachment of it", body = ErrorBody),
    )
)]
pub async fn get_attachment(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((agent, id)): ApiPath<(Uuid, Uuid)>,
) -> Result<Response, ApiError> {
    record_agent(agent);
    let db = state.db().await?;
    let attachment = store::get_attachment(&db, caller.project_id, agent, id)
        .await?
        .ok_or_else(|| {
            ApiError::not_found(format!("attachment {id} of agent {agent} not found"))
        })?;
    // The media type is one of the five SQL allows: always a valid header.
    let content_type =
        HeaderValue::from_str(&attachment.media_type).map_err(|_| ApiError::internal())?;
    Ok((
        [
            (header::CONTENT_TYPE, content_type),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("private, max-age=31536000, immutable"),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                header::CONTENT_DISPOSITION,
                HeaderValue::from_static("attachment"),
            ),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(ATTACHMENT_CONTENT_SECURITY_POLICY),
            ),
        ],
        attachment.data,
    )
        .into_response())
}
