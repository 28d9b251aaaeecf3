//! A worker's side: claims, leases, a step's context and its saved model
//! response, maintenance, the limit maxima.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::{ModelRoute, NewToolCall, ToolKind};
use crate::config::AgentConfig;

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
    /// The newest interrupt input of the turn not yet consumed: a model
    /// call in flight that did not include it is to be aborted.
    pub interrupt_input: Option<Uuid>,
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
    /// The agent config version the request was built from
    /// ([`StepContext::config_version`]); `model.response` names it even
    /// when an `"apply": "now"` change replaced it during the call. `None`:
    /// the version in force when the step is saved.
    pub config_version: Option<i32>,
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
    /// Subagents whose turn was cancelled here because their parent's call
    /// was cancelled while they were busy.
    pub subagents_cancelled: i64,
    /// Stream watches dropped because their LISTEN session is gone.
    pub watches_dropped: i64,
}

/// The operator's maxima for the per-agent limits (`holdfast.limit_settings`,
/// written by each worker at start from its `HOLDFAST_MAX_*` settings). An
/// agent's `config.limits` may lower them, never raise them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitMaxima {
    /// Model calls one turn may make (`HOLDFAST_MAX_MODEL_STEPS_PER_TURN`).
    pub model_steps_per_turn: i32,
    /// Tool calls one model response may ask for (`HOLDFAST_MAX_TOOL_CALLS_PER_RESPONSE`).
    pub tool_calls_per_response: i32,
    /// Levels of subagents below a client's agent (`HOLDFAST_MAX_SUBAGENT_DEPTH`).
    pub subagent_depth: i32,
    /// Subagents one agent may have running at once (`HOLDFAST_MAX_LIVE_CHILDREN`).
    pub live_children: i32,
    /// Subagents in one tree, ever (`HOLDFAST_MAX_DESCENDANTS`).
    pub descendants: i32,
}

impl Default for LimitMaxima {
    /// The defaults of `holdfast.limit_settings`.
    fn default() -> Self {
        LimitMaxima {
            model_steps_per_turn: 100,
            tool_calls_per_response: 64,
            subagent_depth: 4,
            live_children: 16,
            descendants: 64,
        }
    }
}

/// The operator's attachment quotas (`holdfast.attachment_quotas`, written
/// by each API process at start from its `HOLDFAST_MAX_ATTACHMENT_BYTES_*`
/// settings): the most bytes of images and documents one agent, and one
/// project, may have stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttachmentQuotas {
    pub bytes_per_agent: i64,
    pub bytes_per_project: i64,
}

impl Default for AttachmentQuotas {
    /// The defaults of `holdfast.attachment_quotas`: 256 MiB an
    /// agent (fifty of the largest images, or eight of the largest PDFs),
    /// 10 GiB a project.
    fn default() -> Self {
        AttachmentQuotas {
            bytes_per_agent: 256 * 1024 * 1024,
            bytes_per_project: 10 * 1024 * 1024 * 1024,
        }
    }
}

/// One message of the saved history.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryMessage {
    pub seq: i64,
    pub role: String,
    /// Its content as stored, JSON text: the step that renders it reads
    /// the blocks straight from the text, with no JSON tree in between.
    pub content: Box<str>,
    /// The model step that produced it (assistant), or consumed it (user).
    pub step_id: Option<Uuid>,
}

/// A saved tool call.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCallRecord {
    pub id: Uuid,
    pub step_id: Uuid,
    pub position: i32,
    pub provider_id: String,
    pub name: String,
    pub input: Value,
    /// How the call runs, decided when it was committed.
    pub kind: ToolKind,
    pub status: String,
    pub output: Option<Value>,
    pub is_error: Option<bool>,
}

/// An input not yet seen by a committed model call.
#[derive(Clone, Debug, PartialEq)]
pub struct PendingInput {
    pub id: Uuid,
    pub content: Value,
}

/// Everything a step is decided and built from.
#[derive(Clone, Debug, PartialEq)]
pub struct StepContext {
    pub agent_id: Uuid,
    /// The config as stored now (a change applies to the next step).
    pub config: AgentConfig,
    /// The version number of `config` (`agent_config_versions`).
    pub config_version: i32,
    pub turn_open: bool,
    pub model_attempts: i32,
    /// Model steps committed in the open turn (0 before its first call's
    /// response is committed; retries do not count).
    pub turn_model_steps: i32,
    pub cancel_requested: bool,
    /// The calls of `model`'s messages and every open call; without
    /// `model`, the open calls only.
    pub tool_calls: Vec<ToolCallRecord>,
    /// What the attempt's span needs (docs/api.md, "Tracing").
    pub trace: AttemptTrace,
    /// A replay's child: its tool calls are answered from the recording
    /// (`holdfast.answer_replay_calls`), never run.
    pub replay: bool,
    /// What only a model call reads. `None` when a call is pending: the
    /// step runs tools, and the model is not asked before their results
    /// are saved (its next step's context is read then).
    pub model: Option<ModelInput>,
}

/// The part of a step context a model call is built from.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelInput {
    /// A budget of `config.budget` is used up (`holdfast.budget_exceeded`):
    /// the next model call is not made.
    pub over_budget: bool,
    /// The summary of messages compacted away (those before the first of
    /// `messages`), if the context was ever compacted.
    pub context_summary: Option<String>,
    pub messages: Vec<HistoryMessage>,
    pub pending_inputs: Vec<PendingInput>,
    /// Where a model call with `config.model` goes, resolved with the rest
    /// (a removed endpoint or a withdrawn permission applies at this attempt).
    pub route: ModelRoute,
}

/// The trace an attempt's span belongs in, and the attempt before it that
/// no one could end: the agent row's `turn_trace_*` and `*_attempt_*`
/// columns.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AttemptTrace {
    /// The W3C `traceparent` the turn's spans are children of.
    pub turn_parent: Option<String>,
    pub turn_state: Option<String>,
    /// The step's first attempt, when this one retries it after a crash.
    pub first_attempt_epoch: Option<i64>,
    /// The attempt whose worker died, not yet in any trace.
    pub lost: Option<LostAttempt>,
}

/// A step attempt whose holder died: its epoch and how long it held the lease.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LostAttempt {
    pub epoch: i64,
    pub started_at: chrono::DateTime<chrono::Utc>,
    pub ended_at: chrono::DateTime<chrono::Utc>,
}

impl ModelInput {
    /// The ids of the inputs a model request built now would include.
    pub fn pending_input_ids(&self) -> Vec<Uuid> {
        self.pending_inputs.iter().map(|i| i.id).collect()
    }
}
