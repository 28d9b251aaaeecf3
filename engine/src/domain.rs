//! Domain types shared by the worker, the API and the CLI.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

/// An agent's state (see docs/state-machines.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentState {
    Idle,
    Ready,
    Running,
    Waiting,
    Archived,
}

impl AgentState {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentState::Idle => "idle",
            AgentState::Ready => "ready",
            AgentState::Running => "running",
            AgentState::Waiting => "waiting",
            AgentState::Archived => "archived",
        }
    }
}

impl std::str::FromStr for AgentState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "idle" => AgentState::Idle,
            "ready" => AgentState::Ready,
            "running" => AgentState::Running,
            "waiting" => AgentState::Waiting,
            "archived" => AgentState::Archived,
            other => return Err(format!("unknown agent state {other:?}")),
        })
    }
}

/// A claim on an agent: run one step for it, writing with this epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim {
    pub agent_id: Uuid,
    pub epoch: i64,
}

/// The answer of `renew_leases` for one agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Renewal {
    pub agent_id: Uuid,
    /// False: the lease is lost; stop the step, save nothing.
    pub renewed: bool,
    /// A cancel is pending for this agent's turn.
    pub cancel_requested: bool,
}

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

/// How a tool call is run (DESIGN §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolKind {
    /// IO with the outside world (web_fetch, MCP): marked running first, never rerun.
    External,
    /// Effect and result in one transaction (spawn_subagent).
    Internal,
    /// Waits for the client's backend to post a result.
    Custom,
    /// Waits for a person's answer (ask_user).
    Question,
    /// Handed to a machine once (run_command).
    Command,
}

/// A tool call the model asked for, as committed with its model step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NewToolCall {
    /// The provider's id for the call (`toolu_…`, `call_…`).
    pub provider_id: String,
    pub name: String,
    pub input: Value,
    pub kind: ToolKind,
}

/// A saved model response, ready to commit.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelStep {
    /// The unconsumed inputs the request was built with.
    pub input_ids: Vec<Uuid>,
    /// Assistant content blocks (provider-neutral, Anthropic-shaped).
    pub message: Vec<Value>,
    pub tool_calls: Vec<NewToolCall>,
    pub usage: Value,
    pub stop_reason: Option<String>,
}

/// What `create_input_or_replay` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InputCreated {
    pub input_id: Uuid,
    /// True when an earlier call with the same idempotency key created it.
    pub replayed: bool,
}

/// What one `maintenance_tick` did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct MaintenanceReport {
    /// Leases released because they expired.
    pub expired: i64,
    /// Leases released because the claiming session is gone.
    pub session_gone: i64,
    /// Delayed agents that came due (one wake hint covers them all).
    pub woken: i64,
}
