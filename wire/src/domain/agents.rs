//! Agents: their state, config as saved, inputs and cancels.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use strum::{Display, EnumString, IntoStaticStr, VariantArray};
use utoipa::ToSchema;
use uuid::Uuid;

/// An agent's state (see docs/state-machines.md).
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    EnumString,
    IntoStaticStr,
    Display,
    VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum AgentState {
    Idle,
    Ready,
    Running,
    Waiting,
    Archived,
}

/// What `create_input_or_replay` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InputCreated {
    pub input_id: Uuid,
    /// True when an earlier call with the same idempotency key created it.
    pub replayed: bool,
}

/// An input as [`crate::store::create_inputs`] saved it.
#[derive(Clone, Debug, PartialEq)]
pub struct PostedInput {
    pub input: Input,
    /// True when an earlier call with the same idempotency key created it.
    pub replayed: bool,
}

/// Where a fork came from: the source agent and the seq of the source's
/// event its copied history ends at (`holdfast.fork_agent`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ForkPoint {
    pub agent_id: Uuid,
    pub seq: i64,
}

/// An agent as saved: its config and where it stands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Agent {
    pub id: Uuid,
    pub project_id: Uuid,
    /// The config as shown to clients: secrets (MCP header values) are
    /// `"***"` (`holdfast.mask_config_secrets`); the worker reads the stored
    /// config through its step context instead.
    pub config: Value,
    pub state: AgentState,
    /// A turn runs from the input that starts it to turn.completed/failed/cancelled.
    pub turn_open: bool,
    /// Set while a cancel waits for the worker holding the agent to stop.
    pub cancel_requested_at: Option<DateTime<Utc>>,
    /// The seq of its latest event (0: none yet).
    pub last_event_seq: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub state_changed_at: DateTime<Utc>,
    /// Its latest turn; `None` before its first.
    pub last_turn: Option<LastTurn>,
    /// The config version in force (`config` is it).
    pub config_version: i32,
    /// A newer version saved with `apply: next_turn`, waiting for the open
    /// turn to end.
    pub next_turn_config_version: Option<i32>,
    /// Set on a fork: what it was forked from.
    pub forked_from: Option<ForkPoint>,
}

/// How a turn ended.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    EnumString,
    IntoStaticStr,
    Display,
    VariantArray,
    ToSchema,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum TurnOutcome {
    /// `turn.completed`: the model answered.
    Completed,
    /// `turn.failed` for any error but a limit.
    Failed,
    /// `turn.cancelled`.
    Cancelled,
    /// `turn.failed` because a limit or budget was reached (error types
    /// `limit_exceeded`, `budget_exceeded`).
    Limit,
}

/// Why a turn failed: `turn.failed`'s `error`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TurnError {
    /// `authentication_error`, `retries_exhausted`, `limit_exceeded`,
    /// `budget_exceeded`, `internal_error`, ... (docs/events.md).
    #[serde(rename = "type")]
    pub error_type: String,
    pub message: String,
    /// With `limit_exceeded`, the limit's name; with `budget_exceeded`, the
    /// budget's maximum.
    #[schema(value_type = Value)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<Value>,
    /// With `limit_exceeded` and `budget_exceeded`: the value that reached it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// With `budget_exceeded`: the budget's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<String>,
    /// With `retries_exhausted`: the last error.
    #[schema(value_type = Value)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Value>,
}

/// An agent's latest turn (open or ended).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LastTurn {
    /// The turn's number on the agent (counted up as turns open).
    pub turn: i64,
    /// How it ended; `null` while it is open.
    pub outcome: Option<TurnOutcome>,
    /// With `failed` and `limit`: the error it failed with.
    pub error: Option<TurnError>,
    /// Its `turn.started`.
    pub started_at: DateTime<Utc>,
    /// The event that ended it; `null` while it is open.
    pub ended_at: Option<DateTime<Utc>>,
    /// Its model usage so far, and cost.
    pub usage: super::TokenUsage,
}

/// A saved input.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Input {
    pub id: Uuid,
    pub agent_id: Uuid,
    pub content: Value,
    pub mode: InputMode,
    pub status: InputStatus,
    pub created_at: DateTime<Utc>,
}

/// How an input joins the agent's turns (docs/api.md, "Steering modes").
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    EnumString,
    IntoStaticStr,
    Display,
    VariantArray,
    ToSchema,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum InputMode {
    /// Joins the open turn: its next model call sees it.
    #[default]
    Steer,
    /// Waits for the open turn to end, then opens the next turn.
    Queue,
    /// Joins the open turn and aborts a model call in flight, which is made
    /// again with it (a running tool call is never interrupted).
    Interrupt,
}

/// Where an input stands.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    EnumString,
    IntoStaticStr,
    Display,
    VariantArray,
    ToSchema,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum InputStatus {
    /// Queued: waiting for the open turn to end (removable).
    Queued,
    /// In the open turn, not yet seen by a saved model call.
    Pending,
    /// In the history.
    Consumed,
    /// Taken back while queued.
    Removed,
}

/// Which of an agent's waiting inputs to list.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, EnumString, IntoStaticStr, ToSchema,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum WaitingInputs {
    /// Waiting for the open turn to end.
    Queued,
    /// In the open turn, not yet seen by a saved model call.
    Pending,
}

/// What `request_cancel` did.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    EnumString,
    IntoStaticStr,
    Display,
    VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum CancelOutcome {
    /// A worker holds the agent: it was asked to stop; `turn.cancelled` follows.
    Requested,
    /// The turn ended at once (`turn.cancelled` is saved).
    Cancelled,
}
