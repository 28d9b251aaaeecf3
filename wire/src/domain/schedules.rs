use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use super::InputMode;
use crate::schedule::MissedPolicy;

/// One schedule of an agent (`holdfast.schedules`).
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    pub id: Uuid,
    pub agent_id: Uuid,
    pub cron: Option<String>,
    pub timezone: String,
    pub every: Option<std::time::Duration>,
    pub content: Value,
    pub mode: InputMode,
    pub start_at: Option<DateTime<Utc>>,
    pub end_at: Option<DateTime<Utc>>,
    pub missed: MissedPolicy,
    pub paused_at: Option<DateTime<Utc>>,
    pub next_fire_at: Option<DateTime<Utc>>,
    pub ended_at: Option<DateTime<Utc>>,
    pub last_fired_at: Option<DateTime<Utc>>,
    pub fire_count: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A new schedule, checked and with its first slot.
#[derive(Clone, Debug)]
pub struct NewSchedule {
    pub agent_id: Uuid,
    pub cron: Option<String>,
    pub timezone: String,
    pub every: Option<std::time::Duration>,
    pub content: Value,
    pub mode: InputMode,
    pub start_at: Option<DateTime<Utc>>,
    pub end_at: Option<DateTime<Utc>>,
    pub missed: MissedPolicy,
    pub next_fire_at: Option<DateTime<Utc>>,
}

/// A due schedule maintenance claimed (`holdfast.claim_due_schedules`), with
/// the clock it is judged by.
#[derive(Clone, Debug)]
pub struct DueSchedule {
    pub id: Uuid,
    pub cron: Option<String>,
    pub timezone: String,
    pub every: Option<std::time::Duration>,
    pub start_at: Option<DateTime<Utc>>,
    pub end_at: Option<DateTime<Utc>>,
    pub missed: MissedPolicy,
    pub due: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    pub now: DateTime<Utc>,
}

/// One saved config of an agent (`holdfast.agent_config_versions`), masked.
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigVersion {
    pub version: i32,
    pub config: Value,
    pub created_at: DateTime<Utc>,
}
