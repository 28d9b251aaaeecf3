//! `GET /v1/agents/{id}/usage`: an agent's model usage, summed by the step
//! commits in SQL (sql/schema/usage.sql), so reading it is one row and
//! one index range of the agent's steps. `GET /v1/usage`: the project's by
//! day and model, a report over its steps.

use axum::extract::State;
use axum::Json;
use holdfast_db::store;
use holdfast_wire::api::error::ErrorBody;
use holdfast_wire::api::usage::{AgentUsage, ProjectUsage};
use uuid::Uuid;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery};
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
    store::agent_usage(&db, caller.project_id, id)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::agent_not_found(id))
}

#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ProjectUsageQuery {
    /// The last this many UTC days, today included (default 30, at most 366).
    #[param(minimum = 1, maximum = 366)]
    days: Option<i64>,
}

/// The project's model usage by UTC day, provider and model over the last
/// `days` days, newest first, and its sum; cost in USD at the operator's
/// prices (`null` when none was priced).
#[utoipa::path(
    get,
    path = "/v1/usage",
    tag = "operations",
    params(ProjectUsageQuery),
    responses((status = 200, body = ProjectUsage), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody))
)]
pub async fn get_project_usage(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<ProjectUsageQuery>,
) -> Result<Json<ProjectUsage>, ApiError> {
    let days = query.days.unwrap_or(30);
    if !(1..=366).contains(&days) {
        return Err(ApiError::invalid("days", "days must be from 1 to 366"));
    }
    let since = chrono::Utc::now().date_naive() - chrono::Days::new(days as u64 - 1);
    let db = state.db().await?;
    Ok(Json(
        store::project_usage(&db, caller.project_id, since).await?,
    ))
}
