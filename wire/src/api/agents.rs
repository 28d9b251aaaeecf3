//! `/v1/agents`: agents, their lists and cancels.

use crate::config::AgentConfig;
use crate::domain::{Agent, AgentState, CancelOutcome, ConfigVersion, ForkPoint};
pub use crate::domain::{LastTurn, TurnError, TurnOutcome};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

/// An agent's state (docs/state-machines.md).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum StateName {
    Idle,
    Ready,
    Running,
    Waiting,
    Archived,
}

impl StateName {
    /// The state as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            StateName::Idle => "idle",
            StateName::Ready => "ready",
            StateName::Running => "running",
            StateName::Waiting => "waiting",
            StateName::Archived => "archived",
        }
    }
}

impl From<AgentState> for StateName {
    fn from(state: AgentState) -> StateName {
        match state {
            AgentState::Idle => StateName::Idle,
            AgentState::Ready => StateName::Ready,
            AgentState::Running => StateName::Running,
            AgentState::Waiting => StateName::Waiting,
            AgentState::Archived => StateName::Archived,
        }
    }
}

impl From<StateName> for AgentState {
    fn from(state: StateName) -> AgentState {
        match state {
            StateName::Idle => AgentState::Idle,
            StateName::Ready => AgentState::Ready,
            StateName::Running => AgentState::Running,
            StateName::Waiting => AgentState::Waiting,
            StateName::Archived => AgentState::Archived,
        }
    }
}

/// An agent.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct AgentView {
    pub id: Uuid,
    pub state: StateName,
    /// Secrets (MCP header values) show as `"***"`; sent back in a PATCH or
    /// create, `"***"` keeps the stored value.
    #[schema(value_type = AgentConfig)]
    pub config: Value,
    /// A turn is under way (from an input to turn.completed/failed/cancelled).
    pub turn_open: bool,
    /// A cancel waits for the worker holding the agent to stop.
    pub cancel_requested: bool,
    /// The seq of its latest event: resume a stream from here.
    pub last_event_seq: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub state_changed_at: DateTime<Utc>,
    /// Its latest turn (open or ended): how it ended, its error, start, end
    /// and usage; `null` before its first turn.
    pub last_turn: Option<LastTurn>,
    /// The config version in force (`GET /v1/agents/{id}/versions/{n}`).
    pub config_version: i32,
    /// A newer version saved with `"apply": "next_turn"`, waiting for the
    /// open turn to end; `null` when none waits.
    pub next_turn_config_version: Option<i32>,
    /// Set on a fork: the agent it was forked from and the seq of that
    /// agent's event its history ends at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkPoint>,
    /// In a list with `order=activity` only: the time the list is ordered
    /// by (its latest event's time, else its creation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub activity_at: Option<DateTime<Utc>>,
}

impl From<Agent> for AgentView {
    fn from(agent: Agent) -> AgentView {
        AgentView {
            id: agent.id,
            state: agent.state.into(),
            config: agent.config,
            turn_open: agent.turn_open,
            cancel_requested: agent.cancel_requested_at.is_some(),
            last_event_seq: agent.last_event_seq,
            created_at: agent.created_at,
            updated_at: agent.updated_at,
            state_changed_at: agent.state_changed_at,
            last_turn: agent.last_turn,
            config_version: agent.config_version,
            next_turn_config_version: agent.next_turn_config_version,
            forked_from: agent.forked_from,
            activity_at: None,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct AgentList {
    pub agents: Vec<AgentView>,
    /// More agents follow: ask again with `after` = the last id
    /// (`order=created`) or `cursor` = `next_cursor` (`order=activity`).
    pub has_more: bool,
    /// With `order=activity` and `has_more`: the `cursor` of the next page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// The order of a list.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ListOrder {
    /// Oldest first (by id, a UUIDv7); pages with `after`.
    #[default]
    Created,
    /// Newest activity first (the latest event's time, else creation);
    /// pages with `cursor`; takes `q`.
    Activity,
}

/// The outcome of a cancel.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct CancelView {
    /// `cancelled`: the turn ended (`turn.cancelled` is saved).
    /// `requested`: a worker is mid-step; it stops within a second and then
    /// saves `turn.cancelled`.
    #[schema(value_type = String, example = "cancelled")]
    pub status: CancelOutcome,
    pub agent: AgentView,
}

/// One saved config of an agent: numbered from 1, never changed.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ConfigVersionView {
    pub version: i32,
    /// Masked as in [`AgentView::config`].
    #[schema(value_type = AgentConfig)]
    pub config: Value,
    pub created_at: DateTime<Utc>,
}

impl From<ConfigVersion> for ConfigVersionView {
    fn from(version: ConfigVersion) -> ConfigVersionView {
        ConfigVersionView {
            version: version.version,
            config: version.config,
            created_at: version.created_at,
        }
    }
}

/// An agent's config versions, oldest first.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ConfigVersionList {
    pub versions: Vec<ConfigVersionView>,
}
