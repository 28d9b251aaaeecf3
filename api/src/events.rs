//! `GET /v1/agents/{id}/events`: the timeline, oldest first.

use axum::extract::State;
use axum::Json;
use chrono::{DateTime, Utc};
use holdfast_engine::domain::Event;
use holdfast_engine::store;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::agents::page_limit;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiPath, ApiQuery};
use crate::observe::record_agent;
use crate::state::AppState;

/// One event (docs/events.md).
#[derive(Serialize, ToSchema)]
pub struct EventView {
    /// Gap-free per agent, from 1.
    seq: i64,
    id: Uuid,
    agent_id: Uuid,
    /// `input.received`, `turn.started`, `model.response`, ...
    #[serde(rename = "type")]
    kind: String,
    #[schema(value_type = Object)]
    data: Value,
    created_at: DateTime<Utc>,
}

impl From<Event> for EventView {
    fn from(event: Event) -> EventView {
        EventView {
            seq: event.seq,
            id: event.id,
            agent_id: event.agent_id,
            kind: event.kind,
            data: event.data,
            created_at: event.created_at,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct EventList {
    events: Vec<EventView>,
    /// More events follow: ask again with `after` = the last seq.
    has_more: bool,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Events after this seq (default 0: from the first).
    #[param(minimum = 0)]
    after: Option<i64>,
    /// At most this many (default 100, at most 1000).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
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
    let db = state.db().await?;
    if !store::agent_in_project(&**db, caller.project_id, id).await? {
        return Err(ApiError::agent_not_found(id));
    }
    let mut events = store::events_after(&**db, id, after, limit + 1).await?;
    let has_more = events.len() as i64 > limit;
    events.truncate(limit as usize);
    Ok(Json(EventList {
        events: events.into_iter().map(EventView::from).collect(),
        has_more,
    }))
}
