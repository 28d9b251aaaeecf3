//! `GET /v1/agents/{id}/events`: the timeline, oldest first; from the read
//! replica when there is one, lag-aware (`crate::replica`).

use axum::extract::State;
use axum::Json;
use holdfast_db::store;
use holdfast_wire::api::error::ErrorBody;
use holdfast_wire::api::events::{EventList, EventView};
use serde::Deserialize;
use utoipa::IntoParams;
use uuid::Uuid;

use crate::agents::page_limit;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery};
use crate::observe::record_agent;
use crate::replica::parse_min_lsn;
use crate::state::AppState;

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Events after this seq (default 0: from the first).
    #[param(minimum = 0)]
    after: Option<i64>,
    /// At most this many (default 100, at most 1000).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
    /// With a read replica: read only once it has replayed this WAL
    /// position (a `Holdfast-Lsn` from a write response), else from the
    /// primary. The caller's own last write through this API process
    /// counts without it.
    #[param(example = "0/16B3748")]
    min_lsn: Option<String>,
}

/// Read an agent's timeline.
#[utoipa::path(
    get,
    path = "/v1/agents/{id}/events",
    tag = "events",
    params(("id" = Uuid, Path, description = "agent id"), EventsQuery),
    responses((status = 200, body = EventList), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody))
)]
pub async fn list_events(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(query): ApiQuery<EventsQuery>,
) -> Result<Json<EventList>, ApiError> {
    record_agent(id);
    let after = query.after.unwrap_or(0);
    if after < 0 {
        return Err(ApiError::invalid("after", "after must be ≥ 0"));
    }
    let limit = page_limit(query.limit)?;
    let min_lsn = parse_min_lsn(query.min_lsn.as_deref())?;
    let db = state.read_db(Some(caller.key_id), min_lsn).await?;
    if !store::agent_in_project(&db, caller.project_id, id).await? {
        return Err(ApiError::agent_not_found(id));
    }
    let mut events = store::events_after(&db, id, after, limit + 1).await?;
    let has_more = events.len() as i64 > limit;
    events.truncate(limit as usize);
    Ok(Json(EventList {
        events: events.into_iter().map(EventView::from).collect(),
        has_more,
    }))
}
