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

/// A tool call waiting for approve/deny (`approvals.require_for`), with
/// what the call would do, so a person can decide from this row alone.
#[derive(Clone, Debug, PartialEq)]
pub struct Approval {
    pub id: Uuid,
    pub agent_id: Uuid,
    pub tool_call_id: Uuid,
    pub tool_name: String,
    pub tool_input: Value,
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
