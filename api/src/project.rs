//! `GET /v1/project`: the caller's project, for a client (the console) to
//! show which project a key opens, with its agent counts by state.

use axum::extract::State;
use axum::Json;
use holdfast_db::store::console;
use holdfast_wire::api::error::ErrorBody;
use holdfast_wire::api::operations::ProjectView;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;

/// The caller's project.
#[utoipa::path(
    get,
    path = "/v1/project",
    tag = "operations",
    responses((status = 200, body = ProjectView), (status = 401, body = ErrorBody))
)]
pub async fn get_project(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<ProjectView>, ApiError> {
    let db = state.db().await?;
    // A key exists only for an existing project; a missing one is a race with
    // a deletion, answered like a revoked key.
    let project = console::project(&db, caller.project_id)
        .await?
        .ok_or_else(|| ApiError::unauthorized("the key's project no longer exists"))?;
    Ok(Json(ProjectView {
        id: project.id,
        name: project.name,
        agents_by_state: project.agents_by_state,
        agents_by_last_turn_outcome: project.agents_by_last_turn_outcome,
    }))
}
