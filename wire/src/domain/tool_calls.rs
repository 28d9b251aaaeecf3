//! Tool calls: how they run and where they stand.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use strum::{Display, EnumString, IntoStaticStr, VariantArray};
use uuid::Uuid;

/// How a tool call is run (docs/api.md, "Tool calls").
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

/// A tool call's status (docs/state-machines.md).
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
pub enum ToolCallStatus {
    /// A worker may run it.
    Pending,
    /// Waits for approve/deny.
    AwaitingApproval,
    /// Waits on the outside: a client result, an answer, a machine.
    Waiting,
    /// An external call in flight under a lease.
    Running,
    Completed,
    /// Its turn was cancelled.
    Cancelled,
}

impl ToolCallStatus {
    /// Every status of a call that has not finished.
    pub const UNFINISHED: [ToolCallStatus; 4] = [
        ToolCallStatus::Pending,
        ToolCallStatus::AwaitingApproval,
        ToolCallStatus::Waiting,
        ToolCallStatus::Running,
    ];
}

/// A saved tool call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: Uuid,
    pub agent_id: Uuid,
    /// The model step that asked for it.
    pub step_id: Uuid,
    /// Its place in that step's batch.
    pub position: i32,
    pub provider_id: String,
    pub name: String,
    pub input: Value,
    pub kind: ToolKind,
    pub status: ToolCallStatus,
    /// Set once completed.
    pub output: Option<Value>,
    pub is_error: Option<bool>,
    pub created_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
}
