//! `GET /v1/agents/{id}/events`: the timeline.

use chrono::{DateTime, Utc};
use holdfast_engine::domain::Event;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

/// One event (docs/events.md).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct EventView {
    /// Gap-free per agent, from 1.
    pub seq: i64,
    pub id: Uuid,
    pub agent_id: Uuid,
    /// `input.received`, `turn.started`, `model.response`, ...
    #[serde(rename = "type")]
    pub kind: String,
    #[schema(value_type = Object)]
    pub data: Value,
    pub created_at: DateTime<Utc>,
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

#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct EventList {
    pub events: Vec<EventView>,
    /// More events follow: ask again with `after` = the last seq.
    pub has_more: bool,
}
