//! `GET /v1/agents/{id}/events`: the timeline, and the schema of each event
//! type's `data` (docs/events.md).
//!
//! Events are written by the SQL functions (sql/schema/), never by Rust
//! code, so these types are what the document promises of them:
//! tests/tests/api/event_schemas.rs checks that every type `holdfast.event_types()`
//! lists has a variant here, and that the events real agents write validate
//! against their variant's schema.

use std::borrow::Cow;

use crate::config::AgentConfig;
use crate::domain::Usage;
use crate::domain::{Event, ForkPoint, InputMode, TokenUsage, TurnError};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::openapi::schema::{
    Discriminator, KnownFormat, ObjectBuilder, OneOfBuilder, Schema, SchemaFormat, Type,
};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};
use uuid::Uuid;

use super::approvals::{ApprovalKindName, Decision};
use super::tool_calls::{KindName, StatusName};

/// One event (docs/events.md). Its schema is a union discriminated by
/// `type`: one variant per event type, each with its own `data`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EventView {
    /// Gap-free per agent, from 1.
    pub seq: i64,
    pub id: Uuid,
    pub agent_id: Uuid,
    /// `input.received`, `turn.started`, `model.response`, ... (EVENT_TYPES).
    #[serde(rename = "type")]
    pub kind: String,
    /// As its type's schema says.
    pub data: Value,
    pub created_at: DateTime<Utc>,
}

impl From<Event> for EventView {
    fn from(event: Event) -> EventView {
        EventView {
            seq: event.seq,
            id: event.id,
            agent_id: event.agent_id,
            kind: event.kind,
            data: event.data,
            created_at: event.created_at,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct EventList {
    pub events: Vec<EventView>,
    /// More events follow: ask again with `after` = the last seq.
    pub has_more: bool,
}

/// `input.received`: an input was accepted.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct InputReceivedData {
    pub input_id: Uuid,
    /// The string or content blocks sent; an image's or document's base64
    /// source replaced by its attachment reference.
    #[schema(value_type = Value)]
    pub content: Value,
    pub mode: InputMode,
}

/// `input.removed`: a queued input was taken back.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct InputRemovedData {
    pub input_id: Uuid,
}

/// `turn.started`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct TurnStartedData {
    /// The agent config version the turn opened on (`GET
    /// /v1/agents/{id}/versions/{n}`).
    pub config_version: i32,
}

/// `input.updated`: a waiting input's mode or place changed
/// (`PATCH /v1/inputs/{id}`).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct InputUpdatedData {
    pub input_id: Uuid,
    /// `steer` or `queue`.
    pub mode: String,
    /// Its place among the agent's queued inputs, from 1; null when it is
    /// not queued.
    #[schema(required = true)]
    pub position: Option<i64>,
}

/// `schedule.fired`: a schedule sent its input for a slot.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ScheduleFiredData {
    pub schedule_id: Uuid,
    /// The slot fired.
    pub slot: DateTime<Utc>,
    pub input_id: Uuid,
    /// Fired after its time, for slots maintenance missed (`missed: once`).
    pub late: bool,
}

/// `schedule.skipped`: slots a schedule did not fire.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ScheduleSkippedData {
    pub schedule_id: Uuid,
    /// `missed`: maintenance came too late for them; `refused`: the agent
    /// refused the input (`message` says why; an archived agent's schedule
    /// ends).
    pub reason: String,
    /// The slots skipped are those from `from` up to, not including,
    /// `until`: the slot fired instead, or the next one planned.
    pub from: DateTime<Utc>,
    pub until: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Events that carry nothing: `agent.archived`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct EmptyData {}

/// `model.response`: a model call's saved response.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ModelResponseData {
    pub step_id: Uuid,
    /// The assistant's content blocks: `{"type": "text", "text"}`,
    /// `{"type": "tool_use", "id", "name", "input"}`, and the provider's
    /// other blocks as it sent them (`thinking`, `redacted_thinking`,
    /// `server_tool_use`, cited text, ...).
    #[schema(value_type = Vec<Object>)]
    pub message: Vec<Value>,
    /// The calls it asked for, as each `tool_call.created` carries it.
    pub tool_calls: Vec<ToolCallCreatedData>,
    pub usage: Usage,
    /// `end_turn`, `tool_use`, `max_tokens`, `stop_sequence`, `pause_turn`, or null.
    #[schema(required = true)]
    pub stop_reason: Option<String>,
    /// The agent config version in force when the response was saved.
    pub config_version: i32,
}

/// `model.retry`: a model call failed and will be made again.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ModelRetryData {
    /// 1, 2, ...
    pub attempt: i64,
    /// Until the agent may be claimed again.
    pub delay_ms: i64,
    pub error: ModelCallError,
}

/// `step.retry`: a step failed for a reason other than a model error or a
/// lost lease, and the agent will be claimed again after a delay.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct StepRetryData {
    /// The failures in a row so far: 1, 2, ...
    pub attempt: i64,
    /// At this many failures in a row the turn fails with `internal_error`.
    pub max_attempts: i64,
    pub delay_ms: i64,
    /// When the agent may be claimed again.
    pub retry_at: DateTime<Utc>,
    /// `{"type": "internal_error", "message"}`.
    pub error: ModelCallError,
}

/// `content.left_out`: an image or document URL the egress policy refused
/// at use; the model call went without it.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ContentLeftOutData {
    pub url: String,
    /// Why the URL was refused.
    pub reason: String,
}

/// `worker.lost`: maintenance released the agent from a worker that stopped
/// answering; the step it was taking runs again on another worker.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct WorkerLostData {
    /// `lease_expired` (no renewal in time) or `session_gone` (the worker's
    /// Postgres session ended).
    pub reason: String,
    /// The lost worker's id.
    pub worker: String,
    /// The lease epoch the lost worker held; its late writes are refused.
    pub epoch: i64,
}

/// Why a model call failed.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ModelCallError {
    /// `rate_limit_error`, `overloaded_error`, `api_error`, `timeout_error`,
    /// `connection_error`, `incomplete_stream_error`,
    /// `invalid_response_error`, or the type of an error event inside the
    /// provider's stream.
    #[serde(rename = "type")]
    pub error_type: String,
    pub message: String,
}

/// `model.interrupted`: a model call in flight was aborted for interrupt inputs.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ModelInterruptedData {
    pub input_ids: Vec<Uuid>,
}

/// `tool_call.created`: one call of a `model.response`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ToolCallCreatedData {
    pub id: Uuid,
    /// The provider's id of the call.
    pub provider_id: String,
    pub name: String,
    #[schema(value_type = Value)]
    pub input: Value,
    pub kind: KindName,
    /// `pending`, `awaiting_approval`, `waiting`, or `cancelled` when a
    /// limit refused the response.
    pub status: StatusName,
}

/// `tool_call.completed` (and `tool_call.interrupted`): a call's result.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ToolCallResultData {
    pub tool_call_id: Uuid,
    pub name: String,
    /// What the model is given (images and documents by attachment
    /// reference); absent when over 16 KiB (`output_omitted`).
    #[schema(value_type = Value)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    pub is_error: bool,
    /// `true` when `output` is too large for the event: the tool call has it whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_omitted: Option<bool>,
    /// With `output_omitted`: the size of the output's JSON text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_bytes: Option<i64>,
    /// With `output_omitted`: its first 1,024 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_preview: Option<String>,
}

/// `tool.unavailable`: a model call goes without a tool server's tools.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ToolUnavailableData {
    /// The MCP tool entry's `name`.
    pub server: String,
    pub reason: String,
}

/// `approval.requested`: a tool call (`kind` `tool_call`: `tool_call_id`,
/// `name`, `input`) or a reached budget (`kind` `budget`: `budget`) waits
/// for a decision.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ApprovalRequestedData {
    pub approval_id: Uuid,
    pub kind: ApprovalKindName,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[schema(value_type = Value)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetReached>,
}

/// A `config.budget` maximum that was reached.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct BudgetReached {
    /// The budget's name, e.g. `max_cost_usd_per_turn`.
    pub budget: String,
    /// Its maximum, with the grants approved so far.
    pub limit: f64,
    /// The usage that reached it.
    pub value: f64,
    /// Extra maximums approved so far.
    pub granted: i64,
}

/// `approval.answered`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ApprovalAnsweredData {
    pub approval_id: Uuid,
    pub kind: ApprovalKindName,
    /// Null for a budget.
    #[schema(required = true)]
    pub tool_call_id: Option<Uuid>,
    pub decision: Decision,
    pub by: String,
    #[schema(required = true)]
    pub reason: Option<String>,
}

/// `question.asked`: an `ask_user` call waits for its answer.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct QuestionAskedData {
    pub question_id: Uuid,
    pub tool_call_id: Uuid,
    pub question: String,
}

/// `question.answered`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct QuestionAnsweredData {
    pub question_id: Uuid,
    pub tool_call_id: Uuid,
    pub answer: String,
    pub by: String,
}

/// `command.queued`: a `run_command` call's command waits for its machine.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct CommandQueuedData {
    pub command_id: Uuid,
    pub tool_call_id: Uuid,
    pub machine_id: Uuid,
    /// The machine's name.
    pub machine: String,
    pub command: String,
    pub timeout_secs: i64,
}

/// `command.accepted`: a machine daemon took the command.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct CommandAcceptedData {
    pub command_id: Uuid,
    pub tool_call_id: Uuid,
    pub machine_id: Uuid,
    pub accepted_at: DateTime<Utc>,
}

/// `command.finished`, `command.failed`, `command.unknown` (docs/events.md
/// says which fields each of their causes carries): `tool_call_id` always;
/// a machine's result carries the result fields (`state` ... `late`); a
/// refused or lost command `reason` and `message`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct CommandOutcomeData {
    pub tool_call_id: Uuid,
    /// Absent when the command was refused before it was queued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_id: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_id: Option<Uuid>,
    /// `finished`, `failed` or `unknown`, with a machine's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed_out: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_truncated: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_truncated: Option<bool>,
    /// Why it failed or is unknown: `machine_not_configured`,
    /// `unknown_machine`, `invalid_input`, `accept_timeout`,
    /// `machine_offline`, `machine_deleted`, `daemon_lost_record`,
    /// `cpu_time_limit`, `memory_limit`, `process_limit`; `cancelled` on
    /// the late result of a command its machine stopped because its call
    /// was cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// `true`: the agent had already moved on; the call keeps what it was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late: Option<bool>,
}

/// `machine.unreachable`: an accepted command's machine went silent.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct MachineUnreachableData {
    pub command_id: Uuid,
    pub tool_call_id: Uuid,
    pub machine_id: Uuid,
    pub machine: String,
    #[schema(required = true)]
    pub last_heartbeat_at: Option<DateTime<Utc>>,
    /// `{"state", "pid"?, "reported_at"}` from the daemon's last report, or
    /// `{"state": "accepted", "at"}`.
    #[schema(value_type = Object)]
    pub last_known_state: Value,
}

/// `machine.session_replaced`: a daemon start took the machine over from a
/// session that was still heartbeating.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct MachineSessionReplacedData {
    pub machine_id: Uuid,
    pub machine: String,
    pub previous_session: Uuid,
    pub session: Uuid,
    #[schema(required = true)]
    pub previous_heartbeat_at: Option<DateTime<Utc>>,
    /// The new daemon's address as the API saw it.
    #[schema(required = true)]
    pub peer: Option<String>,
}

/// `subagent.started`, on the parent's timeline.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct SubagentStartedData {
    pub tool_call_id: Uuid,
    pub child_agent_id: Uuid,
    pub prompt: String,
}

/// `subagent.finished`, on the parent's timeline.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct SubagentFinishedData {
    pub tool_call_id: Uuid,
    pub child_agent_id: Uuid,
    /// The child's event type that ended its turn.
    pub outcome: String,
}

/// `context.compacted`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ContextCompactedData {
    pub summary: String,
    /// How many messages the summary stands for.
    pub replaced_messages: i64,
    /// The first message kept verbatim.
    pub keep_from_seq: i64,
    pub usage: Usage,
}

/// `config.updated`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ConfigUpdatedData {
    /// The new config, secrets masked as `"***"`.
    pub config: AgentConfig,
    /// Its version number (`GET /v1/agents/{id}/versions/{n}`).
    pub version: i32,
    /// `now` (in force at once) or `next_turn` (the next turn opens on it).
    pub apply: String,
    /// The JSON merge patch (RFC 7396) from the previous newest version to
    /// this one, secrets masked.
    #[schema(value_type = Object)]
    pub diff: Value,
}

/// `turn.completed`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct TurnCompletedData {
    pub step_id: Uuid,
    #[schema(required = true)]
    pub stop_reason: Option<String>,
    /// The turn's model responses summed.
    pub usage: TokenUsage,
}

/// `turn.cancelled`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct TurnCancelledData {
    /// The calls it cancelled.
    pub cancelled_tool_calls: Vec<Uuid>,
}

/// `turn.failed`.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct TurnFailedData {
    pub error: TurnError,
}

/// `agent.forked`: the first event of a fork.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct AgentForkedData {
    pub forked_from: ForkPoint,
    /// The source's turns the copied history holds.
    pub turn: i64,
    /// Messages and tool calls copied.
    pub messages: i64,
    pub tool_calls: i64,
    /// Calls open at the fork point, completed for the fork as interrupted.
    pub interrupted_tool_calls: i64,
    /// The config merge patch the fork was made with (`{}`: none), secrets
    /// masked.
    #[schema(value_type = Object)]
    pub config_patch: Value,
}

/// A tool call as recorded: its name and input.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct RecordedCall {
    pub name: String,
    #[schema(value_type = Object)]
    pub input: Value,
}

/// `replay.diverged`: a replay's call the recording does not have (another
/// tool, another input, or no call at that point); it got an error result.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ReplayDivergedData {
    pub replay_id: Uuid,
    /// The replay's turn and the source's turn it replays.
    pub turn: i64,
    pub source_turn: i64,
    /// The call's place among the turn's calls, from 0.
    pub position: i64,
    pub tool_call_id: Uuid,
    pub name: String,
    #[schema(value_type = Object)]
    pub input: Value,
    /// The source's call at that point, if it made one.
    #[schema(required = true)]
    pub recorded: Option<RecordedCall>,
}

/// `replay.completed`: a replay ended (status `completed`, or `failed`
/// when a replayed turn failed or was cancelled, with that turn's error).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ReplayCompletedData {
    pub replay_id: Uuid,
    pub source_agent_id: Uuid,
    pub status: String,
    #[schema(required = true, value_type = Option<Object>)]
    pub error: Option<Value>,
    pub turns_replayed: i64,
    pub turns_total: i64,
}

/// One event type: its name, the schema of its `data`, and what that schema refers to.
struct Variant {
    event_type: &'static str,
    data_name: Cow<'static, str>,
    data_schema: RefOr<Schema>,
    data_dependencies: fn(&mut Vec<(String, RefOr<Schema>)>),
}

fn variant<D: ToSchema>(event_type: &'static str) -> Variant {
    Variant {
        event_type,
        data_name: D::name(),
        data_schema: D::schema(),
        data_dependencies: D::schemas,
    }
}

/// Every event type Holdfast writes, the same list as `holdfast.event_types()`,
/// each with the type of its `data`.
fn variants() -> Vec<Variant> {
    vec![
        variant::<InputReceivedData>("input.received"),
        variant::<InputRemovedData>("input.removed"),
        variant::<TurnStartedData>("turn.started"),
        variant::<ModelResponseData>("model.response"),
        variant::<ModelRetryData>("model.retry"),
        variant::<ModelInterruptedData>("model.interrupted"),
        variant::<StepRetryData>("step.retry"),
        variant::<WorkerLostData>("worker.lost"),
        variant::<ToolCallCreatedData>("tool_call.created"),
        variant::<ToolCallResultData>("tool_call.completed"),
        variant::<ToolCallResultData>("tool_call.interrupted"),
        variant::<ToolUnavailableData>("tool.unavailable"),
        variant::<ContentLeftOutData>("content.left_out"),
        variant::<ApprovalRequestedData>("approval.requested"),
        variant::<ApprovalAnsweredData>("approval.answered"),
        variant::<QuestionAskedData>("question.asked"),
        variant::<QuestionAnsweredData>("question.answered"),
        variant::<CommandQueuedData>("command.queued"),
        variant::<CommandAcceptedData>("command.accepted"),
        variant::<CommandOutcomeData>("command.finished"),
        variant::<CommandOutcomeData>("command.failed"),
        variant::<CommandOutcomeData>("command.unknown"),
        variant::<MachineUnreachableData>("machine.unreachable"),
        variant::<MachineSessionReplacedData>("machine.session_replaced"),
        variant::<SubagentStartedData>("subagent.started"),
        variant::<SubagentFinishedData>("subagent.finished"),
        variant::<ContextCompactedData>("context.compacted"),
        variant::<ConfigUpdatedData>("config.updated"),
        variant::<TurnCompletedData>("turn.completed"),
        variant::<TurnCancelledData>("turn.cancelled"),
        variant::<TurnFailedData>("turn.failed"),
        variant::<EmptyData>("agent.archived"),
        variant::<InputUpdatedData>("input.updated"),
        variant::<ScheduleFiredData>("schedule.fired"),
        variant::<ScheduleSkippedData>("schedule.skipped"),
        variant::<AgentForkedData>("agent.forked"),
        variant::<ReplayDivergedData>("replay.diverged"),
        variant::<ReplayCompletedData>("replay.completed"),
    ]
}

/// Every event type Holdfast writes, in `holdfast.event_types()`'s order.
pub fn event_types() -> Vec<&'static str> {
    variants().iter().map(|v| v.event_type).collect()
}

/// The schema name of the variant of `event_type`: `tool_call.completed`
/// is `ToolCallCompletedEvent`.
pub fn event_schema_name(event_type: &str) -> String {
    let mut name = String::new();
    for word in event_type.split(['.', '_']) {
        let mut chars = word.chars();
        if let Some(first) = chars.next() {
            name.extend(first.to_uppercase());
            name.push_str(chars.as_str());
        }
    }
    name + "Event"
}

/// One variant: the envelope with `type` fixed to `event_type` and `data`
/// its data's schema.
fn envelope(event_type: &str, data_name: &str) -> Schema {
    let uuid = || {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Uuid)))
    };
    ObjectBuilder::new()
        .description(Some(format!("A `{event_type}` event (docs/events.md).")))
        .property(
            "seq",
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
                .description(Some("Gap-free per agent, from 1.")),
        )
        .required("seq")
        .property("id", uuid())
        .required("id")
        .property("agent_id", uuid())
        .required("agent_id")
        .property(
            "type",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some([event_type])),
        )
        .required("type")
        .property("data", Ref::from_schema_name(data_name))
        .required("data")
        .property(
            "created_at",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime))),
        )
        .required("created_at")
        .into()
}

impl PartialSchema for EventView {
    fn schema() -> RefOr<Schema> {
        let mut discriminator = Discriminator::new("type");
        let mut one_of = OneOfBuilder::new()
            .description(Some("One event (docs/events.md): a variant per `type`."));
        for v in variants() {
            let name = event_schema_name(v.event_type);
            discriminator.mapping.insert(
                v.event_type.to_owned(),
                format!("#/components/schemas/{name}"),
            );
            one_of = one_of.item(Ref::from_schema_name(name));
        }
        one_of.discriminator(Some(discriminator)).into()
    }
}

impl ToSchema for EventView {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("EventView")
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        for v in variants() {
            schemas.push((
                event_schema_name(v.event_type),
                envelope(v.event_type, &v.data_name).into(),
            ));
            schemas.push((v.data_name.into_owned(), v.data_schema));
            (v.data_dependencies)(schemas);
        }
    }
}
