//! Tool calls: list an agent's (re-read them after a stream reconnects), and
//! post a custom tool's result (first result wins; later ones get 409 with
//! the call as it stands).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use holdfast_engine::domain::{ToolCall, ToolCallStatus, ToolKind};
use holdfast_engine::{store, Error};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::agents::page_limit;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::observe::record_agent;
use crate::state::AppState;

/// A tool call.
#[derive(Serialize, ToSchema)]
pub struct ToolCallView {
    id: Uuid,
    agent_id: Uuid,
    /// The provider's id for the call (`toolu_…`, `call_…`).
    provider_id: String,
    name: String,
    #[schema(value_type = Object)]
    input: Value,
    kind: KindName,
    status: StatusName,
    /// Set once completed.
    #[schema(value_type = Option<Object>)]
    output: Option<Value>,
    is_error: Option<bool>,
    created_at: DateTime<Utc>,
    completed_at: Option<DateTime<Utc>>,
}

/// How a tool call runs (docs/api.md, "Tool calls"); the client answers `custom` calls.
#[derive(Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum KindName {
    External,
    Internal,
    Custom,
    Question,
    Command,
}

/// A tool call's status (docs/state-machines.md).
#[derive(Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StatusName {
    Pending,
    AwaitingApproval,
    Waiting,
    Running,
    Completed,
    Cancelled,
}

/// The `status` filter. `pending` means every call not finished yet.
#[derive(Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StatusFilter {
    /// Not finished: pending, awaiting_approval, waiting or running.
    Pending,
    AwaitingApproval,
    Waiting,
    Running,
    Completed,
    Cancelled,
}

impl StatusFilter {
    fn statuses(self) -> Vec<ToolCallStatus> {
        match self {
            StatusFilter::Pending => ToolCallStatus::UNFINISHED.to_vec(),
            StatusFilter::AwaitingApproval => vec![ToolCallStatus::AwaitingApproval],
            StatusFilter::Waiting => vec![ToolCallStatus::Waiting],
            StatusFilter::Running => vec![ToolCallStatus::Running],
            StatusFilter::Completed => vec![ToolCallStatus::Completed],
            StatusFilter::Cancelled => vec![ToolCallStatus::Cancelled],
        }
    }
}

impl From<ToolKind> for KindName {
    fn from(kind: ToolKind) -> KindName {
        match kind {
            ToolKind::External => KindName::External,
            ToolKind::Internal => KindName::Internal,
            ToolKind::Custom => KindName::Custom,
            ToolKind::Question => KindName::Question,
            ToolKind::Command => KindName::Command,
        }
    }
}

impl From<KindName> for ToolKind {
    fn from(kind: KindName) -> ToolKind {
        match kind {
            KindName::External => ToolKind::External,
            KindName::Internal => ToolKind::Internal,
            KindName::Custom => ToolKind::Custom,
            KindName::Question => ToolKind::Question,
            KindName::Command => ToolKind::Command,
        }
    }
}

impl From<ToolCallStatus> for StatusName {
    fn from(status: ToolCallStatus) -> StatusName {
        match status {
            ToolCallStatus::Pending => StatusName::Pending,
            ToolCallStatus::AwaitingApproval => StatusName::AwaitingApproval,
            ToolCallStatus::Waiting => StatusName::Waiting,
            ToolCallStatus::Running => StatusName::Running,
            ToolCallStatus::Completed => StatusName::Completed,
            ToolCallStatus::Cancelled => StatusName::Cancelled,
        }
    }
}

impl From<ToolCall> for ToolCallView {
    fn from(call: ToolCall) -> ToolCallView {
        ToolCallView {
            id: call.id,
            agent_id: call.agent_id,
            provider_id: call.provider_id,
            name: call.name,
            input: call.input,
            kind: call.kind.into(),
            status: call.status.into(),
            output: call.output,
            is_error: call.is_error,
            created_at: call.created_at,
            completed_at: call.completed_at,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct ToolCallList {
    tool_calls: Vec<ToolCallView>,
}

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
    if !store::agent_in_project(&**db, caller.project_id, id).await? {
        return Err(ApiError::agent_not_found(id));
    }
    let calls =
        store::list_tool_calls(&**db, id, &statuses, query.kind.map(Into::into), limit).await?;
    Ok(Json(ToolCallList {
        tool_calls: calls.into_iter().map(ToolCallView::from).collect(),
    }))
}

/// A custom tool's result.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolResultRequest {
    /// Any JSON (null included); sent to the model as the tool's result.
    #[schema(value_type = Object)]
    output: Value,
    /// The tool failed; the model is told so.
    #[serde(default)]
    is_error: bool,
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
        (status = 413, description = "`output` is larger than the server's limit", body = ErrorBody),
    )
)]
pub async fn submit_tool_result(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(request): ApiJson<ToolResultRequest>,
) -> Result<Json<ToolCallView>, ApiError> {
    let db = state.db().await?;
    let call = store::get_tool_call(&**db, caller.project_id, id)
        .await?
        .ok_or_else(|| ApiError::tool_call_not_found(id))?;
    record_agent(call.agent_id);
    let size = serde_json::to_vec(&request.output).map_or(0, |bytes| bytes.len());
    let limit = state.config().max_tool_output_bytes;
    if size > limit {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "output_too_large",
            format!("output is {size} bytes; the limit is {limit}"),
        )
        .with_field("output"));
    }
    match store::submit_tool_result(&**db, id, &request.output, request.is_error).await {
        Ok(call) => Ok(Json(call.into())),
        Err(Error::Conflict(message)) => {
            let current = store::get_tool_call(&**db, caller.project_id, id)
                .await?
                .ok_or_else(|| ApiError::tool_call_not_found(id))?;
            let current = serde_json::to_value(ToolCallView::from(current)).unwrap_or(Value::Null);
            Err(ApiError::new(StatusCode::CONFLICT, "conflict", message)
                .with_context("tool_call", current))
        }
        Err(e) => Err(e.into()),
    }
}
