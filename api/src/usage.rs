//! `GET /v1/agents/{id}/usage`: an agent's model usage, summed by the step
//! commits in SQL (sql/functions/usage.sql), so reading it is one row and
//! one index range of the agent's steps.

use axum::extract::State;
use axum::Json;
use holdfast_client::wire::error::ErrorBody;
use holdfast_client::wire::usage::AgentUsage;
use holdfast_engine::store;
use uuid::Uuid;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::ApiPath;
use crate::observe::record_agent;
use crate::state::AppState;

/// An agent's model usage: the sum of every saved model response, and each
/// turn's, oldest first; cost in USD at the operator's prices (`null` when
/// the model has none).
#[utoipa::path(
    get,
    path = "/v1/agents/{id}/usage",
    tag = "agents",
    params(("id" = Uuid, Path, description = "agent id")),
    responses((status = 200, body = AgentUsage), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody))
)]
pub async fn get_agent_usage(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<AgentUsage>, ApiError> {
    record_agent(id);
    let db = state.db().await?;
    store::agent_usage(&**db, caller.project_id, id)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::agent_not_found(id))
}
