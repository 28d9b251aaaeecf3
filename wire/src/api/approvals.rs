//! Approvals and questions, the waits a person answers.

use crate::domain::{Approval, ApprovalStatus, ApprovalSubject, Question, QuestionStatus};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

/// An approval's status.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalStatusName {
    Pending,
    Approved,
    Denied,
    /// Its turn was cancelled before anyone decided.
    Cancelled,
}

impl ApprovalStatusName {
    /// The status as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatusName::Pending => "pending",
            ApprovalStatusName::Approved => "approved",
            ApprovalStatusName::Denied => "denied",
            ApprovalStatusName::Cancelled => "cancelled",
        }
    }
}

impl From<ApprovalStatus> for ApprovalStatusName {
    fn from(status: ApprovalStatus) -> Self {
        match status {
            ApprovalStatus::Pending => ApprovalStatusName::Pending,
            ApprovalStatus::Approved => ApprovalStatusName::Approved,
            ApprovalStatus::Denied => ApprovalStatusName::Denied,
            ApprovalStatus::Cancelled => ApprovalStatusName::Cancelled,
        }
    }
}

impl From<ApprovalStatusName> for ApprovalStatus {
    fn from(status: ApprovalStatusName) -> Self {
        match status {
            ApprovalStatusName::Pending => ApprovalStatus::Pending,
            ApprovalStatusName::Approved => ApprovalStatus::Approved,
            ApprovalStatusName::Denied => ApprovalStatus::Denied,
            ApprovalStatusName::Cancelled => ApprovalStatus::Cancelled,
        }
    }
}

/// What an approval asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalKindName {
    /// A tool call waits for approve or deny (`approvals.require_for`);
    /// `tool_call_id`, `tool_name` and `tool_input` say which.
    ToolCall,
    /// A turn stopped at a reached budget (`budget.on_exceeded: "ask"`);
    /// `budget` says which. Approving allows one more maximum of it.
    Budget,
}

/// Something waiting for a person's approve or deny: a tool call, or a turn
/// that reached its budget.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ApprovalView {
    pub id: Uuid,
    pub agent_id: Uuid,
    pub kind: ApprovalKindName,
    /// The call waiting (kind `tool_call`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<Uuid>,
    /// The tool the model wants to call (kind `tool_call`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    /// What it wants to call it with (kind `tool_call`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub tool_input: Option<Value>,
    /// The budget reached (kind `budget`): `{"budget", "limit", "value",
    /// "granted"}`, e.g. `{"budget": "max_tokens_per_turn", "limit": 20000,
    /// "value": 20412, "granted": 0}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub budget: Option<Value>,
    pub status: ApprovalStatusName,
    pub decided_by: Option<String>,
    pub reason: Option<String>,
    pub created_at: DateTime<Utc>,
    pub decided_at: Option<DateTime<Utc>>,
}

impl ApprovalView {
    /// What is asked, in one line for people: `refund {"order":"1001"}`, or
    /// `budget max_tokens_per_turn: 20412 of 20000`.
    pub fn subject(&self) -> String {
        match self.kind {
            ApprovalKindName::ToolCall => format!(
                "{} {}",
                self.tool_name.as_deref().unwrap_or("?"),
                self.tool_input.as_ref().unwrap_or(&Value::Null)
            ),
            ApprovalKindName::Budget => {
                let budget = self.budget.as_ref().unwrap_or(&Value::Null);
                format!(
                    "budget {}: {} of {}",
                    budget["budget"].as_str().unwrap_or("?"),
                    budget["value"],
                    budget["limit"]
                )
            }
        }
    }
}

impl From<Approval> for ApprovalView {
    fn from(approval: Approval) -> Self {
        let (kind, tool_call_id, tool_name, tool_input, budget) = match approval.subject {
            ApprovalSubject::ToolCall {
                tool_call_id,
                tool_name,
                tool_input,
            } => (
                ApprovalKindName::ToolCall,
                Some(tool_call_id),
                Some(tool_name),
                Some(tool_input),
                None,
            ),
            ApprovalSubject::Budget(budget) => {
                (ApprovalKindName::Budget, None, None, None, Some(budget))
            }
        };
        ApprovalView {
            id: approval.id,
            agent_id: approval.agent_id,
            kind,
            tool_call_id,
            tool_name,
            tool_input,
            budget,
            status: approval.status.into(),
            decided_by: approval.decided_by,
            reason: approval.reason,
            created_at: approval.created_at,
            decided_at: approval.decided_at,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ApprovalList {
    pub approvals: Vec<ApprovalView>,
}

/// Approve or deny.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// The call runs (or waits for its outside party, e.g. a custom tool).
    Approve,
    /// The call completes with an error the model sees.
    Deny,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Approve => "approve",
            Decision::Deny => "deny",
        }
    }
}

/// A decision on an approval.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionRequest {
    pub decision: Decision,
    /// Who decides (kept with the decision; the same person sending the
    /// same decision again gets 200).
    pub by: String,
    /// Why; shown to the model on a denial.
    pub reason: Option<String>,
}

/// A question's status.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum QuestionStatusName {
    Pending,
    Answered,
    /// Its turn was cancelled before anyone answered.
    Cancelled,
}

impl From<QuestionStatus> for QuestionStatusName {
    fn from(status: QuestionStatus) -> Self {
        match status {
            QuestionStatus::Pending => QuestionStatusName::Pending,
            QuestionStatus::Answered => QuestionStatusName::Answered,
            QuestionStatus::Cancelled => QuestionStatusName::Cancelled,
        }
    }
}

impl From<QuestionStatusName> for QuestionStatus {
    fn from(status: QuestionStatusName) -> Self {
        match status {
            QuestionStatusName::Pending => QuestionStatus::Pending,
            QuestionStatusName::Answered => QuestionStatus::Answered,
            QuestionStatusName::Cancelled => QuestionStatus::Cancelled,
        }
    }
}

/// A question an agent asked (`ask_user`).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct QuestionView {
    pub id: Uuid,
    pub agent_id: Uuid,
    pub tool_call_id: Uuid,
    pub question: String,
    pub status: QuestionStatusName,
    pub answer: Option<String>,
    pub answered_by: Option<String>,
    pub created_at: DateTime<Utc>,
    pub answered_at: Option<DateTime<Utc>>,
}

impl From<Question> for QuestionView {
    fn from(question: Question) -> Self {
        QuestionView {
            id: question.id,
            agent_id: question.agent_id,
            tool_call_id: question.tool_call_id,
            question: question.question,
            status: question.status.into(),
            answer: question.answer,
            answered_by: question.answered_by,
            created_at: question.created_at,
            answered_at: question.answered_at,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct QuestionList {
    pub questions: Vec<QuestionView>,
}

/// An answer to a question.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerRequest {
    /// Sent to the model as the `ask_user` call's result.
    pub answer: String,
    /// Who answers (the same person sending the same answer again gets 200).
    pub by: String,
}
