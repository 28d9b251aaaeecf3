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

/// How a tool call is run (docs/api.md, "Tool calls").
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
    /// Subagents whose turn was cancelled here because their parent's call
    /// was cancelled while they were busy (0011).
    pub subagents_cancelled: i64,
    /// Stream watches dropped because their LISTEN session is gone (0020).
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
    /// The defaults of `holdfast.limit_settings` (0011).
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

impl std::str::FromStr for ToolKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "external" => ToolKind::External,
            "internal" => ToolKind::Internal,
            "custom" => ToolKind::Custom,
            "question" => ToolKind::Question,
            "command" => ToolKind::Command,
            other => return Err(format!("unknown tool kind {other:?}")),
        })
    }
}

impl ToolKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ToolKind::External => "external",
            ToolKind::Internal => "internal",
            ToolKind::Custom => "custom",
            ToolKind::Question => "question",
            ToolKind::Command => "command",
        }
    }
}

/// A tool call's status (docs/state-machines.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
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
    pub fn as_str(self) -> &'static str {
        match self {
            ToolCallStatus::Pending => "pending",
            ToolCallStatus::AwaitingApproval => "awaiting_approval",
            ToolCallStatus::Waiting => "waiting",
            ToolCallStatus::Running => "running",
            ToolCallStatus::Completed => "completed",
            ToolCallStatus::Cancelled => "cancelled",
        }
    }

    /// Every status of a call that has not finished.
    pub const UNFINISHED: [ToolCallStatus; 4] = [
        ToolCallStatus::Pending,
        ToolCallStatus::AwaitingApproval,
        ToolCallStatus::Waiting,
        ToolCallStatus::Running,
    ];
}

impl std::str::FromStr for ToolCallStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "pending" => ToolCallStatus::Pending,
            "awaiting_approval" => ToolCallStatus::AwaitingApproval,
            "waiting" => ToolCallStatus::Waiting,
            "running" => ToolCallStatus::Running,
            "completed" => ToolCallStatus::Completed,
            "cancelled" => ToolCallStatus::Cancelled,
            other => return Err(format!("unknown tool call status {other:?}")),
        })
    }
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
}

/// A saved input.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Input {
    pub id: Uuid,
    pub agent_id: Uuid,
    pub content: Value,
    pub created_at: DateTime<Utc>,
}

/// A new API key, in clear: shown once, stored only as a hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiKeyCreated {
    pub key_id: Uuid,
    pub project_id: Uuid,
    /// The first characters of the key, kept in clear to tell keys apart.
    pub prefix: String,
    pub key: String,
}

/// Who an API key speaks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiKeyOwner {
    pub key_id: Uuid,
    pub project_id: Uuid,
}

/// A revoked API key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiKeyRevoked {
    pub key_id: Uuid,
    pub project_id: Uuid,
    pub prefix: String,
    pub revoked_at: DateTime<Utc>,
}

/// What `request_cancel` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CancelOutcome {
    /// A worker holds the agent: it was asked to stop; `turn.cancelled` follows.
    Requested,
    /// The turn ended at once (`turn.cancelled` is saved).
    Cancelled,
}
/// A webhook endpoint as clients see it (its secret is shown only at creation).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookEndpoint {
    pub id: Uuid,
    pub url: String,
    /// Event types it receives; `"*"` means all.
    pub events: Vec<String>,
    pub description: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// A new endpoint with its signing secret (`whsec_` + base64), shown once.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreatedWebhookEndpoint {
    #[serde(flatten)]
    pub endpoint: WebhookEndpoint,
    pub secret: String,
}

impl std::fmt::Debug for CreatedWebhookEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreatedWebhookEndpoint")
            .field("endpoint", &self.endpoint)
            .field("secret", &"whsec_…")
            .finish()
    }
}

/// Where a webhook delivery stands (see docs/state-machines.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WebhookDeliveryStatus {
    /// Not delivered yet: due at `next_attempt_at` (or in flight).
    Pending,
    /// A 2xx answer was received.
    Delivered,
    /// No 2xx within the retry window, or the endpoint was deleted.
    Failed,
}

impl std::str::FromStr for WebhookDeliveryStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "pending" => WebhookDeliveryStatus::Pending,
            "delivered" => WebhookDeliveryStatus::Delivered,
            "failed" => WebhookDeliveryStatus::Failed,
            other => return Err(format!("unknown webhook delivery status {other:?}")),
        })
    }
}

/// One delivery of one event to one endpoint, as `GET /v1/webhooks/{id}/deliveries` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookDelivery {
    /// Also the `webhook-id` header of every attempt.
    pub id: Uuid,
    pub endpoint_id: Uuid,
    pub agent_id: Uuid,
    pub event_seq: i64,
    pub event_id: Uuid,
    pub event_type: String,
    pub status: WebhookDeliveryStatus,
    /// Attempts started so far.
    pub attempts: i32,
    pub last_status_code: Option<i32>,
    pub last_error: Option<String>,
    /// When the next attempt is due (pending deliveries only).
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub last_attempt_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub delivered_at: Option<DateTime<Utc>>,
    pub failed_at: Option<DateTime<Utc>>,
}

/// Which deliveries to list: newest first, `limit` (1..=1000) of them, older
/// than the delivery `before` when paging, of one status when given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WebhookDeliveryFilter {
    pub status: Option<WebhookDeliveryStatus>,
    pub limit: i32,
    pub before: Option<Uuid>,
}

impl Default for WebhookDeliveryFilter {
    fn default() -> Self {
        WebhookDeliveryFilter {
            status: None,
            limit: 100,
            before: None,
        }
    }
}

/// A delivery a dispatcher has claimed: POST `event` to `url`, signed with
/// `secret`, and record the outcome under `attempt`.
#[derive(Clone, PartialEq)]
pub struct ClaimedWebhookDelivery {
    pub delivery_id: Uuid,
    /// The attempt number this claim started; it fences the outcome.
    pub attempt: i32,
    pub endpoint_id: Uuid,
    pub url: String,
    pub secret: String,
    /// When the delivery was due (its queue lag is the claim time minus this).
    pub due_at: DateTime<Utc>,
    pub event: Event,
}

impl std::fmt::Debug for ClaimedWebhookDelivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimedWebhookDelivery")
            .field("delivery_id", &self.delivery_id)
            .field("attempt", &self.attempt)
            .field("endpoint_id", &self.endpoint_id)
            .field("url", &self.url)
            .field("due_at", &self.due_at)
            .field("event", &self.event)
            .finish_non_exhaustive()
    }
}

/// What `record_webhook_attempt` did with an attempt's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordedAttempt {
    /// A 2xx: the delivery is done.
    Delivered,
    /// Not a 2xx, inside the retry window: another attempt is scheduled.
    RetryScheduled,
    /// Not a 2xx, and the retry window is over.
    Failed,
    /// A newer attempt owns the delivery's schedule; nothing changed.
    Superseded,
}

/// The dispatchers' backlog, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WebhookQueueStats {
    /// How long the oldest due delivery has waited (0 when none is due).
    pub oldest_due_seconds: f64,
    /// Requests in flight across all dispatchers.
    pub in_flight: i64,
}

// Machines and commands (sql/0008_machines.sql).

/// A new machine with its token (`hfm_…`): shown once, stored only as a hash.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineRegistered {
    pub machine_id: Uuid,
    pub name: String,
    pub wake_url: Option<String>,
    /// The token's first characters, kept in clear to tell tokens apart.
    pub token_prefix: String,
    pub token: String,
    pub created_at: DateTime<Utc>,
}

impl std::fmt::Debug for MachineRegistered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MachineRegistered")
            .field("machine_id", &self.machine_id)
            .field("name", &self.name)
            .field("wake_url", &self.wake_url)
            .field("token_prefix", &self.token_prefix)
            .finish_non_exhaustive()
    }
}

/// Who a machine token speaks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MachineIdentity {
    pub machine_id: Uuid,
    pub project_id: Uuid,
}

/// Where a command stands on its daemon, as a heartbeat reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DaemonCommandState {
    /// Journaled, its process not started yet.
    Accepted,
    /// Its process runs (`pid`).
    Running,
    /// Its result waits for the server's acknowledgement.
    Finished,
}

/// One command a daemon's journal holds, as a heartbeat reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportedCommand {
    pub id: Uuid,
    pub state: DaemonCommandState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

/// A daemon's heartbeat.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// The daemon process (a new id per process start).
    pub session: Uuid,
    /// The first heartbeat of this process: it takes the machine over, and
    /// `commands` is the complete list of what its journal holds (accepted
    /// commands missing from it are resolved as unknown).
    #[serde(default)]
    pub started: bool,
    /// Every command the daemon's journal holds.
    #[serde(default)]
    pub commands: Vec<ReportedCommand>,
}

/// A command handed to a machine by a claim: run it once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimedCommand {
    pub id: Uuid,
    pub tool_call_id: Uuid,
    pub agent_id: Uuid,
    /// Run with `sh -c`.
    pub command: String,
    /// Kill it after this long.
    pub timeout_secs: i32,
    pub accepted_at: DateTime<Utc>,
}

/// How a command ended on its machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CommandResultState {
    /// The process exited (or was killed at its timeout).
    Finished,
    /// The daemon lost the process without an exit status.
    Unknown,
}

impl CommandResultState {
    pub fn as_str(self) -> &'static str {
        match self {
            CommandResultState::Finished => "finished",
            CommandResultState::Unknown => "unknown",
        }
    }
}

/// A machine's result for one command (output bounded by the daemon).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandResult {
    pub state: CommandResultState,
    /// The exit status, when the process exited by itself.
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// The signal that ended the process, if one did.
    #[serde(default)]
    pub signal: Option<i32>,
    /// Killed at its timeout.
    #[serde(default)]
    pub timed_out: bool,
    #[serde(default)]
    pub stdout: String,
    #[serde(default)]
    pub stderr: String,
    #[serde(default)]
    pub stdout_truncated: bool,
    #[serde(default)]
    pub stderr_truncated: bool,
}

impl CommandResult {
    /// The result for a command whose process the daemon lost.
    pub fn unknown() -> CommandResult {
        CommandResult {
            state: CommandResultState::Unknown,
            exit_code: None,
            signal: None,
            timed_out: false,
            stdout: String::new(),
            stderr: String::new(),
            stdout_truncated: false,
            stderr_truncated: false,
        }
    }
}

/// What `submit_command_result` did with a result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CommandResultOutcome {
    /// It completed the waiting tool call; the agent goes on with it.
    Delivered,
    /// The agent had already moved on; it is recorded (late: true) only.
    Late,
    /// The same result was recorded before; nothing changed.
    Duplicate,
}

/// A machine as `GET /v1/machines` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MachineStatus {
    pub id: Uuid,
    pub name: String,
    pub wake_url: Option<String>,
    pub created_at: DateTime<Utc>,
    pub last_heartbeat_at: Option<DateTime<Utc>>,
    /// A heartbeat within the offline window.
    pub online: bool,
    /// Set while a wake attempt is in progress.
    pub wake_until: Option<DateTime<Utc>>,
    /// Commands waiting for the machine to claim them.
    pub queued_commands: i64,
    /// Accepted commands: `[{"id", "agent_id", "tool_call_id", "command",
    /// "accepted_at", "last_known_state"}]`.
    pub running_commands: Value,
}

/// A wake attempt just started.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineWake {
    pub machine_id: Uuid,
    pub name: String,
    pub wake_url: Option<String>,
    pub wake_until: DateTime<Utc>,
}

/// What one `machine_tick` did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct MachineTickReport {
    /// Accepted commands a restarted daemon had no record of (now unknown).
    pub lost: i64,
    /// Queued commands not accepted in time (failed).
    pub accept_timeout: i64,
    /// Queued commands of offline machines (failed).
    pub machine_offline: i64,
    /// Accepted commands of machines gone silent (machine_unreachable).
    pub unreachable: i64,
}
/// An approval's status: `pending` until someone decides; `cancelled` when
/// its turn was cancelled first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalStatus {
    Pending,
    Approved,
    Denied,
    Cancelled,
}

impl ApprovalStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Denied => "denied",
            ApprovalStatus::Cancelled => "cancelled",
        }
    }
}

impl std::str::FromStr for ApprovalStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "pending" => ApprovalStatus::Pending,
            "approved" => ApprovalStatus::Approved,
            "denied" => ApprovalStatus::Denied,
            "cancelled" => ApprovalStatus::Cancelled,
            other => return Err(format!("unknown approval status {other:?}")),
        })
    }
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum QuestionStatus {
    Pending,
    Answered,
    Cancelled,
}

impl QuestionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            QuestionStatus::Pending => "pending",
            QuestionStatus::Answered => "answered",
            QuestionStatus::Cancelled => "cancelled",
        }
    }
}

impl std::str::FromStr for QuestionStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "pending" => QuestionStatus::Pending,
            "answered" => QuestionStatus::Answered,
            "cancelled" => QuestionStatus::Cancelled,
            other => return Err(format!("unknown question status {other:?}")),
        })
    }
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

/// One row of `holdfast.worker_leases`: what a worker holds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WorkerLeases {
    pub worker: String,
    pub agents_held: i64,
    pub oldest_lease_expires_at: Option<DateTime<Utc>>,
    pub last_claim_at: Option<DateTime<Utc>>,
    /// The Postgres backends its claims were made on.
    pub backend_pids: Vec<i32>,
}

/// One row of `holdfast.stuck_agents`: an agent that needs a look.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StuckAgent {
    pub agent_id: Uuid,
    pub state: String,
    pub lease_owner: Option<String>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub state_changed_at: DateTime<Utc>,
    pub reason: String,
}

/// An operator-owned model endpoint (`holdfast.model_endpoints`), as listed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelEndpoint {
    pub name: String,
    /// The provider protocol it speaks: `anthropic` or `openai`.
    pub kind: String,
    pub base_url: String,
    /// The worker's environment variable holding its credential (none: no
    /// credential is sent).
    pub credential_env: Option<String>,
    /// The one project that may use it; `None`: every project.
    pub project: Option<String>,
    /// The model names allowed on it; `None`: any.
    pub models: Option<Vec<String>>,
    /// Agents (not archived) whose config names it.
    pub agents: i64,
    pub created_at: DateTime<Utc>,
}

/// An endpoint to add (`holdfast endpoints add`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NewModelEndpoint {
    pub name: String,
    pub kind: String,
    pub base_url: String,
    pub credential_env: Option<String>,
    pub project: Option<String>,
    /// Empty: any model.
    pub models: Vec<String>,
}

/// That a project has its own key for a provider (never the key itself).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProviderKeyStatus {
    pub provider: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Where one model call goes, as `holdfast.resolve_model_endpoint` reads it
/// for the worker at every call.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelRoute {
    /// The agent's project (a sealed key is bound to it).
    pub project_id: Uuid,
    pub destination: ModelDestination,
    /// The project's own key for the agent's provider, if it set one.
    pub project_key: Option<SealedKey>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ModelDestination {
    /// The project may not use these model settings (any more): fail the
    /// turn with `field` and `message`.
    Refused { field: String, message: String },
    /// A tenant-set `model.base_url`, allowed for the project: no operator
    /// credential goes there, only the project's own key (if any).
    CustomUrl { base_url: String },
    /// An operator endpoint: `default` (the worker's environment pair, both
    /// fields `None`) or a named one with its base URL and credential
    /// variable.
    Operator {
        endpoint: String,
        base_url: Option<String>,
        credential_env: Option<String>,
    },
}

/// A project's provider key as stored: sealed under `HOLDFAST_SECRET_KEY`.
#[derive(Clone, PartialEq)]
pub struct SealedKey {
    pub sealed: Vec<u8>,
    /// Which secret key sealed it ([`crate::secrets::SecretKey::fingerprint`]).
    pub key_fingerprint: String,
}

impl std::fmt::Debug for SealedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealedKey")
            .field("key_fingerprint", &self.key_fingerprint)
            .finish_non_exhaustive()
    }
}
