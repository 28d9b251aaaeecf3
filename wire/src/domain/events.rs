//! An agent's timeline.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

/// One event of an agent's timeline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub seq: i64,
    pub id: Uuid,
    pub agent_id: Uuid,
    #[serde(rename = "type")]
    pub kind: String,
    pub data: Value,
    pub created_at: DateTime<Utc>,
}

/// What one retention pass (`store::retention_tick`) did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetentionReport {
    /// Weekly partitions of events created ahead of time.
    pub partitions_created: i32,
    /// Expired partitions dropped whole.
    pub partitions_dropped: i32,
    /// Rows pruned one by one (where a whole partition could not go).
    pub events_deleted: i64,
    pub deliveries_deleted: i64,
    pub tool_outputs_pruned: i64,
    /// Inputs whose content became JSON null.
    pub inputs_pruned: i64,
    /// Attachments deleted (nothing kept referenced them any more).
    pub attachments_deleted: i64,
}
