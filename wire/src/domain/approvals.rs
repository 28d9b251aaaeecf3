//! Approvals (`approvals.require_for`) and questions (`ask_user`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use strum::{Display, EnumString, IntoStaticStr, VariantArray};
use uuid::Uuid;

/// An approval's status: `pending` until someone decides; `cancelled` when
/// its turn was cancelled first.
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
pub enum ApprovalStatus {
    Pending,
    Approved,
    Denied,
    Cancelled,
}

/// What an approval asks a person to decide, with what they need to decide
/// it from this row alone.
#[derive(Clone, Debug, PartialEq)]
pub enum ApprovalSubject {
    /// A tool call waiting for approve/deny (`approvals.require_for`).
    ToolCall {
        tool_call_id: Uuid,
        tool_name: String,
        tool_input: Value,
    },
    /// A turn stopped at a reached budget (`budget.on_exceeded: "ask"`):
    /// `{"budget", "limit", "value", "granted"}` as `holdfast.budget_exceeded`
    /// gave it. Approving allows one more maximum.
    Budget(Value),
}

/// An approval: what it asks and how it was decided.
#[derive(Clone, Debug, PartialEq)]
pub struct Approval {
    pub id: Uuid,
    pub agent_id: Uuid,
    pub subject: ApprovalSubject,
    pub status: ApprovalStatus,
    pub decided_by: Option<String>,
    pub reason: Option<String>,
    pub created_at: DateTime<Utc>,
    pub decided_at: Option<DateTime<Utc>>,
}

/// A question's status: `pending` until answered; `cancelled` with its turn.
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
pub enum QuestionStatus {
    Pending,
    Answered,
    Cancelled,
}

/// A question an agent asked (`ask_user`).
#[derive(Clone, Debug, PartialEq)]
pub struct Question {
    pub id: Uuid,
    pub agent_id: Uuid,
    pub tool_call_id: Uuid,
    pub question: String,
    pub status: QuestionStatus,
    pub answer: Option<String>,
    pub answered_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub answered_at: Option<DateTime<Utc>>,
}
