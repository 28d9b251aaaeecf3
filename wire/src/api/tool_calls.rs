//! Tool calls, and a custom tool's result.

use crate::domain::{ToolCall, ToolCallStatus, ToolKind};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

/// A tool call.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ToolCallView {
    pub id: Uuid,
    pub agent_id: Uuid,
    /// The provider's id for the call (`toolu_…`, `call_…`).
    pub provider_id: String,
    pub name: String,
    #[schema(value_type = Object)]
    pub input: Value,
    pub kind: KindName,
    pub status: StatusName,
    /// Set once completed; an image's or document's base64 source is its
    /// stored attachment (as in an input's content).
    #[schema(value_type = Option<Object>)]
    pub output: Option<Value>,
    pub is_error: Option<bool>,
    pub created_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
}

/// How a tool call runs (docs/api.md, "Tool calls"); the client answers `custom` calls.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum KindName {
    External,
    Internal,
    Custom,
    Question,
    Command,
}

/// A tool call's status (docs/state-machines.md).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StatusName {
    Pending,
    AwaitingApproval,
    Waiting,
    Running,
    Completed,
    Cancelled,
}

/// The `status` filter. `pending` means every call not finished yet.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StatusFilter {
    /// Not finished: pending, awaiting_approval, waiting or running.
    Pending,
    AwaitingApproval,
    Waiting,
    Running,
    Completed,
    Cancelled,
}

impl StatusFilter {
    pub fn statuses(self) -> Vec<ToolCallStatus> {
        match self {
            StatusFilter::Pending => ToolCallStatus::UNFINISHED.to_vec(),
            StatusFilter::AwaitingApproval => vec![ToolCallStatus::AwaitingApproval],
            StatusFilter::Waiting => vec![ToolCallStatus::Waiting],
            StatusFilter::Running => vec![ToolCallStatus::Running],
            StatusFilter::Completed => vec![ToolCallStatus::Completed],
            StatusFilter::Cancelled => vec![ToolCallStatus::Cancelled],
        }
    }
}

impl From<ToolKind> for KindName {
    fn from(kind: ToolKind) -> KindName {
        match kind {
            ToolKind::External => KindName::External,
            ToolKind::Internal => KindName::Internal,
            ToolKind::Custom => KindName::Custom,
            ToolKind::Question => KindName::Question,
            ToolKind::Command => KindName::Command,
        }
    }
}

impl From<KindName> for ToolKind {
    fn from(kind: KindName) -> ToolKind {
        match kind {
            KindName::External => ToolKind::External,
            KindName::Internal => ToolKind::Internal,
            KindName::Custom => ToolKind::Custom,
            KindName::Question => ToolKind::Question,
            KindName::Command => ToolKind::Command,
        }
    }
}

impl From<ToolCallStatus> for StatusName {
    fn from(status: ToolCallStatus) -> StatusName {
        match status {
            ToolCallStatus::Pending => StatusName::Pending,
            ToolCallStatus::AwaitingApproval => StatusName::AwaitingApproval,
            ToolCallStatus::Waiting => StatusName::Waiting,
            ToolCallStatus::Running => StatusName::Running,
            ToolCallStatus::Completed => StatusName::Completed,
            ToolCallStatus::Cancelled => StatusName::Cancelled,
        }
    }
}

impl From<ToolCall> for ToolCallView {
    fn from(call: ToolCall) -> ToolCallView {
        ToolCallView {
            id: call.id,
            agent_id: call.agent_id,
            provider_id: call.provider_id,
            name: call.name,
            input: call.input,
            kind: call.kind.into(),
            status: call.status.into(),
            output: call.output,
            is_error: call.is_error,
            created_at: call.created_at,
            completed_at: call.completed_at,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ToolCallList {
    pub tool_calls: Vec<ToolCallView>,
}

/// A custom tool's result.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolResultRequest {
    /// Any JSON (null included); sent to the model as the tool's result.
    /// An array of `text`, `image` and `document` blocks with at least one
    /// image or document is sent as content (the blocks of an input).
    #[schema(value_type = Object)]
    pub output: Value,
    /// The tool failed; the model is told so.
    #[serde(default)]
    pub is_error: bool,
}
