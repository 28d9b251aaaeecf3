//! Tool calls: list an agent's (re-read them after a stream reconnects), and
//! post a custom tool's result (first result wins; later ones get 409 with
//! the call as it stands).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use deadpool_postgres::Pool;
use holdfast_db::group_commit::GroupWrite;
use holdfast_db::store::ToolResult;
use holdfast_db::{store, Error, Result};
use holdfast_providers::inline_media_bytes;
use holdfast_wire::api::error::ErrorBody;
use holdfast_wire::api::tool_calls::{
    KindName, StatusFilter, ToolCallList, ToolCallView, ToolResultRequest,
};
use holdfast_wire::domain::ToolCall;
use serde::Deserialize;
use serde_json::Value;
use utoipa::IntoParams;
use uuid::Uuid;

use crate::agents::page_limit;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::inputs::check_content_urls;
use crate::observe::record_agent;
use crate::state::AppState;

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ToolCallsQuery {
    /// `pending`: every call not finished yet; otherwise that exact status.
    /// Absent: all.
    #[param(inline)]
    status: Option<StatusFilter>,
    /// Only calls of this kind (`custom`: the ones the client answers).
    #[param(inline)]
    kind: Option<KindName>,
    /// At most this many (default 100, at most 1000).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

/// List an agent's tool calls, in the order the model asked for them.
#[utoipa::path(
    get,
    path = "/v1/agents/{id}/tool-calls",
    tag = "tool-calls",
    params(("id" = Uuid, Path, description = "agent id"), ToolCallsQuery),
    responses((status = 200, body = ToolCallList), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody))
)]
pub async fn list_tool_calls(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(query): ApiQuery<ToolCallsQuery>,
) -> Result<Json<ToolCallList>, ApiError> {
    record_agent(id);
    let limit = page_limit(query.limit)?;
    let statuses = query.status.map(StatusFilter::statuses).unwrap_or_default();
    let db = state.db().await?;
    if !store::agent_in_project(&db, caller.project_id, id).await? {
        return Err(ApiError::agent_not_found(id));
    }
    let calls =
        store::list_tool_calls(&db, id, &statuses, query.kind.map(Into::into), limit).await?;
    Ok(Json(ToolCallList {
        tool_calls: calls.into_iter().map(ToolCallView::from).collect(),
    }))
}

/// Post the result of a custom tool call. The first result wins.
#[utoipa::path(
    post,
    path = "/v1/tool-calls/{id}/result",
    tag = "tool-calls",
    params(("id" = Uuid, Path, description = "tool call id")),
    request_body = ToolResultRequest,
    responses(
        (status = 200, description = "recorded; the agent continues", body = ToolCallView),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "the call already has a result, was cancelled, or is not a custom call waiting for one; `tool_call` is the call as it stands", body = ErrorBody),
        (status = 413, description = "`output` (its images' and documents' base64 aside) or the body is larger than the server's limit", body = ErrorBody),
        (status = 422, description = "`unsupported_content`: the agent's provider cannot take an image or document block of `output`; `egress_refused`: the egress policy refuses an image's or document's URL (`content_url`); `attachment_quota_exceeded`: its new files would pass the agent's or the project's attachment quota (the message names it); `request_too_large`: its files would take the agent's next model request past what the provider takes; `field` names it", body = ErrorBody),
    )
)]
pub async fn submit_tool_result(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(request): ApiJson<ToolResultRequest>,
) -> Result<Json<ToolCallView>, ApiError> {
    // The connection is handed back before the commit: the group commit
    // takes its own, and a request waiting on it must not hold one.
    let call = store::get_tool_call(&state.db().await?, caller.project_id, id)
        .await?
        .ok_or_else(|| ApiError::tool_call_not_found(id))?;
    record_agent(call.agent_id);
    check_content_urls(&state.config().egress, &request.output, "output").await?;
    let size = serde_json::to_vec(&request.output).map_or(0, |bytes| bytes.len())
        - inline_media_bytes(&request.output);
    let limit = state.config().max_tool_output_bytes;
    if size > limit {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "output_too_large",
            format!("output is {size} bytes; the limit is {limit}"),
        )
        .with_field("output"));
    }
    let result = ToolResult {
        tool_call_id: id,
        output: request.output,
        is_error: request.is_error,
    };
    match state.tool_results().commit(result).await {
        Ok(call) => Ok(Json(call.into())),
        Err(Error::Conflict(message)) => {
            let current = store::get_tool_call(&state.db().await?, caller.project_id, id)
                .await?
                .ok_or_else(|| ApiError::tool_call_not_found(id))?;
            let current = serde_json::to_value(ToolCallView::from(current)).unwrap_or(Value::Null);
            Err(ApiError::new(StatusCode::CONFLICT, "conflict", message)
                .with_context("tool_call", current))
        }
        Err(e) => Err(e.into()),
    }
}

/// Custom tool results, posted by clients: those that arrive within the
/// commit window share one transaction (`holdfast.submit_tool_results`),
/// each call checked on its own, so each request gets the answer a commit
/// of its own would have had. Two results for one call never share a batch.
pub struct ToolResults;

impl GroupWrite for ToolResults {
    type Item = ToolResult;
    type Saved = ToolCall;
    const KIND: &'static str = "tool_result";
    type Context = ();

    fn key(result: &ToolResult) -> Uuid {
        result.tool_call_id
    }

    async fn commit_batch(
        pool: &Pool,
        _: &(),
        results: &[ToolResult],
    ) -> Result<Vec<Result<ToolCall>>> {
        let client = pool.get().await?;
        store::submit_tool_results(&client, results).await
    }
}
