//! `GET /v1/inbox`: what waits on a person or a client across a project.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

/// What an inbox item waits for, and so how it is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InboxKind {
    /// A tool call that needs approving: `POST /v1/approvals/{id}`.
    Approval,
    /// A reached budget that asks whether the turn may go on:
    /// `POST /v1/approvals/{id}`.
    BudgetApproval,
    /// A question for a person: `POST /v1/questions/{id}/answer`.
    Question,
    /// A custom tool call waiting for the client's result:
    /// `POST /v1/tool-calls/{id}/result`.
    ToolCall,
    /// A `run_command` that no machine has accepted yet (the machine's
    /// daemon claims it; `detail.machine_online` says whether it is up).
    Command,
}

impl InboxKind {
    /// The kind as the API (and `holdfast.inbox`) spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            InboxKind::Approval => "approval",
            InboxKind::BudgetApproval => "budget_approval",
            InboxKind::Question => "question",
            InboxKind::ToolCall => "tool_call",
            InboxKind::Command => "command",
        }
    }
}

/// One thing waiting.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct InboxItem {
    pub kind: InboxKind,
    /// The approval's, question's, tool call's or command's id.
    pub id: Uuid,
    pub agent_id: Uuid,
    /// The agent's `config.metadata` (`{}` when it has none).
    #[schema(value_type = Object)]
    pub agent_metadata: Value,
    /// One line saying what is asked (at most 200 characters).
    pub summary: String,
    /// What answering needs: `approval` {tool_call_id, name, input};
    /// `budget_approval` {budget}; `question` {tool_call_id, question};
    /// `tool_call` {name, input}; `command` {tool_call_id, command,
    /// machine, machine_online}.
    #[schema(value_type = Object)]
    pub detail: Value,
    /// When it began to wait.
    pub created_at: DateTime<Utc>,
    /// Seconds it has waited, at the time of the response.
    pub age_seconds: f64,
}

/// A page of the inbox, oldest first.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct Inbox {
    pub items: Vec<InboxItem>,
    /// Items matching the filters on every page.
    pub total: i64,
    /// More items follow: ask again with `cursor` = `next_cursor`.
    pub has_more: bool,
    /// With `has_more`: the `cursor` of the next page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}
