//! `/v1/agents/{id}/schedules`: inputs an agent is sent at the slots of a
//! cron expression or every fixed interval.

use crate::domain::{InputMode, Schedule};
use crate::schedule::{format_every, MissedPolicy};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

fn queue() -> InputMode {
    InputMode::Queue
}

/// The input each fire sends: as `POST /v1/agents/{id}/inputs` takes it.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduledInput {
    /// A non-empty string, or a non-empty array of content blocks.
    #[schema(value_type = Value)]
    pub content: Value,
    /// `queue` (the default: a fire that finds the agent in a turn waits
    /// for it to end) or `steer` (it joins the turn).
    #[serde(default = "queue")]
    pub mode: InputMode,
}

/// A new schedule: `cron` (with `timezone`) or `every`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateScheduleRequest {
    /// A cron expression: 5 fields (minute hour day-of-month month
    /// day-of-week), or 6 with seconds first; e.g. `0 8 * * 1-5`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// The IANA time zone the cron expression is read in (default `UTC`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// A fixed interval: a whole number and a unit, `ms`, `s`, `m` or `h`
    /// (`15m`), at least 1s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every: Option<String>,
    pub input: ScheduledInput,
    /// No slot before this. An `every` schedule's slots are `start_at` and
    /// every interval after it; without it, the first is one interval
    /// after creation (and `start_at` is set to it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_at: Option<DateTime<Utc>>,
    /// No slot after this; the schedule then ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_at: Option<DateTime<Utc>>,
    /// After maintenance was away past slots: `skip` them (the default) or
    /// fire `once` for all of them.
    #[serde(default)]
    pub missed: MissedPolicy,
}

/// Pause or resume a schedule. Resuming fires from the next slot on: slots
/// that passed while it was paused are not fired.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateScheduleRequest {
    pub paused: bool,
}

/// Where a schedule stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleState {
    Active,
    Paused,
    /// No slot is left before `end_at`, or the agent was archived.
    Ended,
}

/// A schedule.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ScheduleView {
    pub id: Uuid,
    pub agent_id: Uuid,
    pub cron: Option<String>,
    pub timezone: String,
    pub every: Option<String>,
    pub input: ScheduledInput,
    pub start_at: Option<DateTime<Utc>>,
    pub end_at: Option<DateTime<Utc>>,
    pub missed: MissedPolicy,
    pub state: ScheduleState,
    /// The next slot (when paused: the one it was waiting for).
    pub next_fire_at: Option<DateTime<Utc>>,
    /// The slot of its latest fire.
    pub last_fired_at: Option<DateTime<Utc>>,
    pub fire_count: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<Schedule> for ScheduleView {
    fn from(s: Schedule) -> ScheduleView {
        let state = if s.ended_at.is_some() {
            ScheduleState::Ended
        } else if s.paused_at.is_some() {
            ScheduleState::Paused
        } else {
            ScheduleState::Active
        };
        ScheduleView {
            id: s.id,
            agent_id: s.agent_id,
            cron: s.cron,
            timezone: s.timezone,
            every: s.every.map(format_every),
            input: ScheduledInput {
                content: s.content,
                mode: s.mode,
            },
            start_at: s.start_at,
            end_at: s.end_at,
            missed: s.missed,
            state,
            next_fire_at: s.next_fire_at,
            last_fired_at: s.last_fired_at,
            fire_count: s.fire_count,
            created_at: s.created_at,
            updated_at: s.updated_at,
        }
    }
}

/// An agent's schedules, oldest first.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ScheduleList {
    pub schedules: Vec<ScheduleView>,
}
