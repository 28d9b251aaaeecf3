"""The API's types, generated from sdk/openapi.json by scripts/generate.py: do not edit."""

from __future__ import annotations

from typing import Any, Literal, Optional, TypedDict, Union

from typing_extensions import NotRequired


class AnswerRequest(TypedDict):
    answer: str
    by: str


ApprovalKindName = Literal['tool_call', 'budget']


class ApprovalSettings(TypedDict):
    require_for: NotRequired[list[str]]


ApprovalStatusName = Literal['pending', 'approved', 'denied', 'cancelled']


class ApprovalView(TypedDict):
    agent_id: str
    budget: NotRequired[Optional[dict[str, Any]]]
    created_at: str
    decided_at: NotRequired[Optional[str]]
    decided_by: NotRequired[Optional[str]]
    id: str
    kind: ApprovalKindName
    reason: NotRequired[Optional[str]]
    status: ApprovalStatusName
    tool_call_id: NotRequired[Optional[str]]
    tool_input: NotRequired[Optional[dict[str, Any]]]
    tool_name: NotRequired[Optional[str]]


BudgetOnExceeded = Literal['fail', 'ask']


class BudgetReached(TypedDict):
    budget: str
    granted: int
    limit: float
    value: float


class BudgetSettings(TypedDict):
    max_cost_usd_per_agent: NotRequired[Optional[float]]
    max_cost_usd_per_turn: NotRequired[Optional[float]]
    max_tokens_per_agent: NotRequired[Optional[int]]
    max_tokens_per_turn: NotRequired[Optional[int]]
    on_exceeded: NotRequired[Optional[BudgetOnExceeded]]


class CitationSettings(TypedDict):
    enabled: bool


class CommandAcceptedData(TypedDict):
    accepted_at: str
    command_id: str
    machine_id: str
    tool_call_id: str


class CommandAcceptedEvent(TypedDict):
    agent_id: str
    created_at: str
    data: CommandAcceptedData
    id: str
    seq: int
    type: Literal['command.accepted']


class CommandOutcomeData(TypedDict):
    command_id: NotRequired[Optional[str]]
    exit_code: NotRequired[Optional[int]]
    late: NotRequired[Optional[bool]]
    machine_id: NotRequired[Optional[str]]
    message: NotRequired[Optional[str]]
    reason: NotRequired[Optional[str]]
    signal: NotRequired[Optional[int]]
    state: NotRequired[Optional[str]]
    stderr: NotRequired[Optional[str]]
    stderr_truncated: NotRequired[Optional[bool]]
    stdout: NotRequired[Optional[str]]
    stdout_truncated: NotRequired[Optional[bool]]
    timed_out: NotRequired[Optional[bool]]
    tool_call_id: str


class CommandQueuedData(TypedDict):
    command: str
    command_id: str
    machine: str
    machine_id: str
    timeout_secs: int
    tool_call_id: str


class CommandQueuedEvent(TypedDict):
    agent_id: str
    created_at: str
    data: CommandQueuedData
    id: str
    seq: int
    type: Literal['command.queued']


class CommandUnknownEvent(TypedDict):
    agent_id: str
    created_at: str
    data: CommandOutcomeData
    id: str
    seq: int
    type: Literal['command.unknown']


CommandWorkspace = Literal['machine', 'agent']


class ContentLeftOutData(TypedDict):
    reason: str
    url: str


class ContentLeftOutEvent(TypedDict):
    agent_id: str
    created_at: str
    data: ContentLeftOutData
    id: str
    seq: int
    type: Literal['content.left_out']


class CreateWebhookRequest(TypedDict):
    description: NotRequired[Optional[str]]
    events: list[str]
    url: str


DaemonStateName = Literal['accepted', 'running', 'finished']


Decision = Literal['approve', 'deny']


class DecisionRequest(TypedDict):
    by: str
    decision: Decision
    reason: NotRequired[Optional[str]]


class DeliveryFailureView(TypedDict):
    attempts: int
    delivery_id: str
    event_type: str
    last_attempt_at: NotRequired[Optional[str]]
    last_error: NotRequired[Optional[str]]
    last_status_code: NotRequired[Optional[int]]
    status: str


DeliveryStatusName = Literal['pending', 'delivered', 'failed']


class DeliveryView(TypedDict):
    agent_id: str
    attempts: int
    created_at: str
    delivered_at: NotRequired[Optional[str]]
    event_id: str
    event_seq: int
    event_type: str
    failed_at: NotRequired[Optional[str]]
    id: str
    last_attempt_at: NotRequired[Optional[str]]
    last_error: NotRequired[Optional[str]]
    last_status_code: NotRequired[Optional[int]]
    next_attempt_at: NotRequired[Optional[str]]
    status: DeliveryStatusName


class EmptyData(TypedDict):
    pass


class ErrorDetail(TypedDict):
    field: NotRequired[Optional[str]]
    message: str
    type: str


class ForkAt(TypedDict):
    seq: NotRequired[Optional[int]]
    turn: NotRequired[Optional[int]]


class ForkPoint(TypedDict):
    agent_id: str
    seq: int


class ForkRequest(TypedDict):
    at: NotRequired[Optional[ForkAt]]
    config: NotRequired[Optional[dict[str, Any]]]
    version: NotRequired[Optional[int]]


class Health(TypedDict):
    listener: NotRequired[Optional[str]]
    status: str


class HeartbeatView(TypedDict):
    cancelled_commands: NotRequired[list[str]]
    heartbeat_at: str
    machine_id: str


InboxKind = Literal['approval', 'budget_approval', 'question', 'tool_call', 'command']


InputMode = Literal['steer', 'queue', 'interrupt']


class InputReceivedData(TypedDict):
    content: Any
    input_id: str
    mode: InputMode


class InputReceivedEvent(TypedDict):
    agent_id: str
    created_at: str
    data: InputReceivedData
    id: str
    seq: int
    type: Literal['input.received']


class InputRemovedData(TypedDict):
    input_id: str


class InputRemovedEvent(TypedDict):
    agent_id: str
    created_at: str
    data: InputRemovedData
    id: str
    seq: int
    type: Literal['input.removed']


class InputRequest(TypedDict):
    content: Any
    mode: NotRequired[InputMode]


InputStatus = Literal['queued', 'pending', 'consumed', 'removed']


class InputUpdatedData(TypedDict):
    input_id: str
    mode: str
    position: Optional[int]


class InputUpdatedEvent(TypedDict):
    agent_id: str
    created_at: str
    data: InputUpdatedData
    id: str
    seq: int
    type: Literal['input.updated']


class InputView(TypedDict):
    agent_id: str
    content: Any
    created_at: str
    id: str
    mode: InputMode
    status: InputStatus


KindName = Literal['external', 'internal', 'custom', 'question', 'command']


LimitName = Literal['cpu_time', 'memory', 'processes']


class LimitSettings(TypedDict):
    max_descendants: NotRequired[Optional[int]]
    max_live_children: NotRequired[Optional[int]]
    max_model_steps_per_turn: NotRequired[Optional[int]]
    max_subagent_depth: NotRequired[Optional[int]]
    max_tool_calls_per_response: NotRequired[Optional[int]]


class MachineCreated(TypedDict):
    created_at: str
    id: str
    name: str
    token: str
    token_prefix: str
    wake_url: NotRequired[Optional[str]]


class MachineSessionReplacedData(TypedDict):
    machine: str
    machine_id: str
    peer: Optional[str]
    previous_heartbeat_at: Optional[str]
    previous_session: str
    session: str


class MachineSessionReplacedEvent(TypedDict):
    agent_id: str
    created_at: str
    data: MachineSessionReplacedData
    id: str
    seq: int
    type: Literal['machine.session_replaced']


class MachineUnreachableData(TypedDict):
    command_id: str
    last_heartbeat_at: Optional[str]
    last_known_state: dict[str, Any]
    machine: str
    machine_id: str
    tool_call_id: str


class MachineUnreachableEvent(TypedDict):
    agent_id: str
    created_at: str
    data: MachineUnreachableData
    id: str
    seq: int
    type: Literal['machine.unreachable']


class MachineView(TypedDict):
    created_at: str
    id: str
    last_heartbeat_at: NotRequired[Optional[str]]
    name: str
    online: bool
    queued_commands: int
    running_commands: list[dict[str, Any]]
    wake_until: NotRequired[Optional[str]]
    wake_url: NotRequired[Optional[str]]


MissedPolicy = Literal['skip', 'once']


class ModelCallError(TypedDict):
    message: str
    type: str


class ModelInterruptedData(TypedDict):
    input_ids: list[str]


class ModelInterruptedEvent(TypedDict):
    agent_id: str
    created_at: str
    data: ModelInterruptedData
    id: str
    seq: int
    type: Literal['model.interrupted']


class ModelRetryData(TypedDict):
    attempt: int
    delay_ms: int
    error: ModelCallError


class ModelRetryEvent(TypedDict):
    agent_id: str
    created_at: str
    data: ModelRetryData
    id: str
    seq: int
    type: Literal['model.retry']


class ModelUsage(TypedDict):
    cache_read_tokens: NotRequired[int]
    cache_write_tokens: NotRequired[int]
    input_tokens: NotRequired[int]
    output_tokens: NotRequired[int]
    reasoning_tokens: NotRequired[int]
    server_tool_requests: NotRequired[int]
    web_search_requests: NotRequired[int]


class OutputRequest(TypedDict):
    stderr: NotRequired[str]
    stdout: NotRequired[str]


class OutputView(TypedDict):
    command_id: str
    outcome: str


class ProjectView(TypedDict):
    agents_by_last_turn_outcome: dict[str, int]
    agents_by_state: dict[str, int]
    id: str
    name: str


Provider = Literal['anthropic', 'openai', 'openai_responses']


class ProviderKeyBody(TypedDict):
    key: str


class ProviderKeyView(TypedDict):
    created_at: str
    provider: Provider
    updated_at: str


class QuestionAnsweredData(TypedDict):
    answer: str
    by: str
    question_id: str
    tool_call_id: str


class QuestionAnsweredEvent(TypedDict):
    agent_id: str
    created_at: str
    data: QuestionAnsweredData
    id: str
    seq: int
    type: Literal['question.answered']


class QuestionAskedData(TypedDict):
    question: str
    question_id: str
    tool_call_id: str


class QuestionAskedEvent(TypedDict):
    agent_id: str
    created_at: str
    data: QuestionAskedData
    id: str
    seq: int
    type: Literal['question.asked']


QuestionStatusName = Literal['pending', 'answered', 'cancelled']


class QuestionView(TypedDict):
    agent_id: str
    answer: NotRequired[Optional[str]]
    answered_at: NotRequired[Optional[str]]
    answered_by: NotRequired[Optional[str]]
    created_at: str
    id: str
    question: str
    status: QuestionStatusName
    tool_call_id: str


ReasoningEffort = Literal['none', 'minimal', 'low', 'medium', 'high', 'xhigh']


class RecordedCall(TypedDict):
    input: dict[str, Any]
    name: str


class RegisterMachineRequest(TypedDict):
    name: str
    wake_url: NotRequired[Optional[str]]


class ReplayCompletedData(TypedDict):
    error: Optional[dict[str, Any]]
    replay_id: str
    source_agent_id: str
    status: str
    turns_replayed: int
    turns_total: int


class ReplayCompletedEvent(TypedDict):
    agent_id: str
    created_at: str
    data: ReplayCompletedData
    id: str
    seq: int
    type: Literal['replay.completed']


class ReplayDivergedData(TypedDict):
    input: dict[str, Any]
    name: str
    position: int
    recorded: Optional[RecordedCall]
    replay_id: str
    source_turn: int
    tool_call_id: str
    turn: int


class ReplayDivergedEvent(TypedDict):
    agent_id: str
    created_at: str
    data: ReplayDivergedData
    id: str
    seq: int
    type: Literal['replay.diverged']


ReplayStatus = Literal['running', 'completed', 'failed']


class ReplaySummary(TypedDict):
    agent_id: str
    completed_at: NotRequired[Optional[str]]
    config_patch: dict[str, Any]
    created_at: str
    error: NotRequired[Optional[dict[str, Any]]]
    id: str
    status: ReplayStatus
    turns_replayed: int
    turns_total: int


class ReportedCommandBody(TypedDict):
    id: str
    pid: NotRequired[Optional[int]]
    state: DaemonStateName


ResultStateName = Literal['finished', 'unknown']


class ResultView(TypedDict):
    command_id: str
    outcome: str


class RunningCommandView(TypedDict):
    accepted_at: NotRequired[Optional[str]]
    agent_id: str
    command: str
    command_id: str


class ScheduleFiredData(TypedDict):
    input_id: str
    late: bool
    schedule_id: str
    slot: str


class ScheduleFiredEvent(TypedDict):
    agent_id: str
    created_at: str
    data: ScheduleFiredData
    id: str
    seq: int
    type: Literal['schedule.fired']


ScheduleSkippedData = TypedDict(
    'ScheduleSkippedData',
    {
        'from': str,
        'message': NotRequired[Optional[str]],
        'reason': str,
        'schedule_id': str,
        'until': str,
    },
)


class ScheduleSkippedEvent(TypedDict):
    agent_id: str
    created_at: str
    data: ScheduleSkippedData
    id: str
    seq: int
    type: Literal['schedule.skipped']


ScheduleState = Literal['active', 'paused', 'ended']


class ScheduledInput(TypedDict):
    content: Any
    mode: NotRequired[InputMode]


ServiceTier = Literal['auto', 'standard_only']


class SseEvent(TypedDict):
    data: str
    event: NotRequired[Optional[str]]
    id: NotRequired[Optional[str]]


StateName = Literal['idle', 'ready', 'running', 'waiting', 'archived']


StatusName = Literal[
    'pending', 'awaiting_approval', 'waiting', 'running', 'completed', 'cancelled'
]


class StepRetryData(TypedDict):
    attempt: int
    delay_ms: int
    error: ModelCallError
    max_attempts: int
    retry_at: str


class StepRetryEvent(TypedDict):
    agent_id: str
    created_at: str
    data: StepRetryData
    id: str
    seq: int
    type: Literal['step.retry']


class StuckAgentView(TypedDict):
    agent_id: str
    reason: str
    since: str
    state: str


class SubagentFinishedData(TypedDict):
    child_agent_id: str
    outcome: str
    tool_call_id: str


class SubagentFinishedEvent(TypedDict):
    agent_id: str
    created_at: str
    data: SubagentFinishedData
    id: str
    seq: int
    type: Literal['subagent.finished']


class SubagentStartedData(TypedDict):
    child_agent_id: str
    prompt: str
    tool_call_id: str


class SubagentStartedEvent(TypedDict):
    agent_id: str
    created_at: str
    data: SubagentStartedData
    id: str
    seq: int
    type: Literal['subagent.started']


class Thinking1(TypedDict):
    budget_tokens: int
    type: Literal['enabled']


class Thinking2(TypedDict):
    type: Literal['adaptive']


class Thinking3(TypedDict):
    type: Literal['disabled']


Thinking = Union[Thinking1, Thinking2, Thinking3]


class TokenUsage(TypedDict):
    cache_read_tokens: int
    cache_write_tokens: int
    cost_usd: NotRequired[Optional[float]]
    input_tokens: int
    output_tokens: int
    reasoning_tokens: int
    server_tool_requests: NotRequired[int]
    web_search_requests: NotRequired[int]


class ToolCallCreatedData(TypedDict):
    id: str
    input: Any
    kind: KindName
    name: str
    provider_id: str
    status: StatusName


class ToolCallCreatedEvent(TypedDict):
    agent_id: str
    created_at: str
    data: ToolCallCreatedData
    id: str
    seq: int
    type: Literal['tool_call.created']


class ToolCallResultData(TypedDict):
    is_error: bool
    name: str
    output: NotRequired[Any]
    output_bytes: NotRequired[Optional[int]]
    output_omitted: NotRequired[Optional[bool]]
    output_preview: NotRequired[Optional[str]]
    tool_call_id: str


class ToolCallView(TypedDict):
    agent_id: str
    completed_at: NotRequired[Optional[str]]
    created_at: str
    id: str
    input: dict[str, Any]
    is_error: NotRequired[Optional[bool]]
    kind: KindName
    name: str
    output: NotRequired[Optional[dict[str, Any]]]
    provider_id: str
    status: StatusName


class ToolChoice1(TypedDict):
    type: Literal['auto']


class ToolChoice2(TypedDict):
    type: Literal['any']


class ToolChoice3(TypedDict):
    type: Literal['none']


class ToolChoice4(TypedDict):
    name: str
    type: Literal['tool']


ToolChoice = Union[ToolChoice1, ToolChoice2, ToolChoice3, ToolChoice4]


class ToolEntry1(TypedDict):
    description: NotRequired[Optional[str]]
    input_schema: NotRequired[Optional[dict[str, Any]]]
    name: str
    type: Literal['custom']


class ToolEntry2(TypedDict):
    type: Literal['web_fetch']


class ToolEntry3(TypedDict):
    type: Literal['web_search']


class ToolEntry4(TypedDict):
    headers: NotRequired[dict[str, str]]
    name: str
    type: Literal['mcp']
    url: str


class ToolEntry5(TypedDict):
    type: Literal['ask_user']


class ToolEntry6(TypedDict):
    config: NotRequired[Optional[dict[str, Any]]]
    type: Literal['spawn_subagent']


class ToolEntry7(TypedDict):
    machine: NotRequired[Optional[str]]
    type: Literal['run_command']
    workspace: NotRequired[Optional[CommandWorkspace]]


class ToolResultRequest(TypedDict):
    is_error: NotRequired[bool]
    output: dict[str, Any]


class ToolUnavailableData(TypedDict):
    reason: str
    server: str


class ToolUnavailableEvent(TypedDict):
    agent_id: str
    created_at: str
    data: ToolUnavailableData
    id: str
    seq: int
    type: Literal['tool.unavailable']


class TurnCancelledData(TypedDict):
    cancelled_tool_calls: list[str]


class TurnCancelledEvent(TypedDict):
    agent_id: str
    created_at: str
    data: TurnCancelledData
    id: str
    seq: int
    type: Literal['turn.cancelled']


class TurnCompletedData(TypedDict):
    step_id: str
    stop_reason: Optional[str]
    usage: TokenUsage


class TurnCompletedEvent(TypedDict):
    agent_id: str
    created_at: str
    data: TurnCompletedData
    id: str
    seq: int
    type: Literal['turn.completed']


class TurnError(TypedDict):
    budget: NotRequired[Optional[str]]
    detail: NotRequired[Any]
    limit: NotRequired[Any]
    message: str
    type: str
    value: NotRequired[Optional[float]]


class TurnFailedData(TypedDict):
    error: TurnError


class TurnFailedEvent(TypedDict):
    agent_id: str
    created_at: str
    data: TurnFailedData
    id: str
    seq: int
    type: Literal['turn.failed']


TurnOutcome = Literal['completed', 'failed', 'cancelled', 'limit']


TurnRange = TypedDict(
    'TurnRange',
    {
        'from': NotRequired[Optional[int]],
        'to': NotRequired[Optional[int]],
    },
)


class TurnStartedData(TypedDict):
    config_version: int


class TurnStartedEvent(TypedDict):
    agent_id: str
    created_at: str
    data: TurnStartedData
    id: str
    seq: int
    type: Literal['turn.started']


class TurnToolCall(TypedDict):
    input: dict[str, Any]
    is_error: NotRequired[Optional[bool]]
    name: str
    output: NotRequired[Optional[dict[str, Any]]]


class TurnUsage(TypedDict):
    model_steps: int
    started_at: str
    turn: int
    usage: TokenUsage


class UpdateInputRequest(TypedDict):
    mode: NotRequired[Optional[InputMode]]
    position: NotRequired[Optional[int]]


class UpdateScheduleRequest(TypedDict):
    paused: bool


class UserLocation1(TypedDict):
    city: NotRequired[Optional[str]]
    country: NotRequired[Optional[str]]
    region: NotRequired[Optional[str]]
    timezone: NotRequired[Optional[str]]
    type: Literal['approximate']


UserLocation = UserLocation1


class WakeRequest(TypedDict):
    window_secs: NotRequired[Optional[int]]


class WakeView(TypedDict):
    machine_id: str
    wake_until: str
    wake_url_called: bool
    wake_url_error: NotRequired[Optional[str]]
    wake_url_status: NotRequired[Optional[int]]


class WebhookBacklogView(TypedDict):
    due: int
    endpoint_id: str
    failed: int
    in_flight: int
    oldest_due_at: NotRequired[Optional[str]]
    pending: int
    recent_failures: list[DeliveryFailureView]
    url: str


class WebhookView(TypedDict):
    created_at: str
    description: NotRequired[Optional[str]]
    events: list[str]
    id: str
    url: str


class WorkerLostData(TypedDict):
    epoch: int
    reason: str
    worker: str


class WorkerLostEvent(TypedDict):
    agent_id: str
    created_at: str
    data: WorkerLostData
    id: str
    seq: int
    type: Literal['worker.lost']


class WorkerView(TypedDict):
    agents: list[str]
    agents_held: int
    soonest_lease_expiry: NotRequired[Optional[str]]
    worker: str


class AgentArchivedEvent(TypedDict):
    agent_id: str
    created_at: str
    data: EmptyData
    id: str
    seq: int
    type: Literal['agent.archived']


class AgentForkedData(TypedDict):
    config_patch: dict[str, Any]
    forked_from: ForkPoint
    interrupted_tool_calls: int
    messages: int
    tool_calls: int
    turn: int


class AgentForkedEvent(TypedDict):
    agent_id: str
    created_at: str
    data: AgentForkedData
    id: str
    seq: int
    type: Literal['agent.forked']


class AgentUsage(TypedDict):
    agent_id: str
    turns: list[TurnUsage]
    usage: TokenUsage


class AnthropicWebFetch(TypedDict):
    allowed_domains: NotRequired[list[str]]
    blocked_domains: NotRequired[list[str]]
    citations: NotRequired[Optional[CitationSettings]]
    max_content_tokens: NotRequired[Optional[int]]
    max_uses: NotRequired[Optional[int]]


class AnthropicWebSearch(TypedDict):
    allowed_domains: NotRequired[list[str]]
    blocked_domains: NotRequired[list[str]]
    max_uses: NotRequired[Optional[int]]
    user_location: NotRequired[Optional[UserLocation]]


class ApprovalAnsweredData(TypedDict):
    approval_id: str
    by: str
    decision: Decision
    kind: ApprovalKindName
    reason: Optional[str]
    tool_call_id: Optional[str]


class ApprovalAnsweredEvent(TypedDict):
    agent_id: str
    created_at: str
    data: ApprovalAnsweredData
    id: str
    seq: int
    type: Literal['approval.answered']


class ApprovalList(TypedDict):
    approvals: list[ApprovalView]


class ApprovalRequestedData(TypedDict):
    approval_id: str
    budget: NotRequired[Optional[BudgetReached]]
    input: NotRequired[Any]
    kind: ApprovalKindName
    name: NotRequired[Optional[str]]
    tool_call_id: NotRequired[Optional[str]]


class ApprovalRequestedEvent(TypedDict):
    agent_id: str
    created_at: str
    data: ApprovalRequestedData
    id: str
    seq: int
    type: Literal['approval.requested']


class ClaimedCommandView(TypedDict):
    accepted_at: str
    agent_id: str
    command: str
    id: str
    timeout_secs: int
    tool_call_id: str
    traceparent: NotRequired[Optional[str]]
    tracestate: NotRequired[Optional[str]]
    workspace: NotRequired[CommandWorkspace]


class ClaimedList(TypedDict):
    commands: list[ClaimedCommandView]


class CommandFailedEvent(TypedDict):
    agent_id: str
    created_at: str
    data: CommandOutcomeData
    id: str
    seq: int
    type: Literal['command.failed']


class CommandFinishedEvent(TypedDict):
    agent_id: str
    created_at: str
    data: CommandOutcomeData
    id: str
    seq: int
    type: Literal['command.finished']


class ContextCompactedData(TypedDict):
    keep_from_seq: int
    replaced_messages: int
    summary: str
    usage: ModelUsage


class ContextCompactedEvent(TypedDict):
    agent_id: str
    created_at: str
    data: ContextCompactedData
    id: str
    seq: int
    type: Literal['context.compacted']


class CreateScheduleRequest(TypedDict):
    cron: NotRequired[Optional[str]]
    end_at: NotRequired[Optional[str]]
    every: NotRequired[Optional[str]]
    input: ScheduledInput
    missed: NotRequired[MissedPolicy]
    start_at: NotRequired[Optional[str]]
    timezone: NotRequired[Optional[str]]


class CreatedWebhookView(WebhookView):
    secret: str


class DayUsage(TypedDict):
    day: str
    model: str
    model_steps: int
    provider: str
    usage: TokenUsage


class DeliveryList(TypedDict):
    deliveries: list[DeliveryView]


class Divergence(TypedDict):
    position: int
    replay: NotRequired[Optional[RecordedCall]]
    source: NotRequired[Optional[RecordedCall]]


class ErrorBody(TypedDict):
    error: ErrorDetail


class HeartbeatRequest(TypedDict):
    commands: NotRequired[list[ReportedCommandBody]]
    sandboxed: NotRequired[Optional[bool]]
    session: str
    single_session: NotRequired[bool]
    started: NotRequired[bool]


class InboxItem(TypedDict):
    age_seconds: float
    agent_id: str
    agent_metadata: dict[str, Any]
    created_at: str
    detail: dict[str, Any]
    id: str
    kind: InboxKind
    summary: str


class InputList(TypedDict):
    inputs: list[InputView]


class LastTurn(TypedDict):
    ended_at: NotRequired[Optional[str]]
    error: NotRequired[Optional[TurnError]]
    outcome: NotRequired[Optional[TurnOutcome]]
    started_at: str
    turn: int
    usage: TokenUsage


class MachineActivityView(TypedDict):
    last_heartbeat_at: NotRequired[Optional[str]]
    machine_id: str
    name: str
    online: bool
    queued: int
    running: list[RunningCommandView]


class MachineList(TypedDict):
    machines: list[MachineView]


class ModelConfig(TypedDict):
    base_url: NotRequired[Optional[str]]
    cache: NotRequired[Optional[bool]]
    endpoint: NotRequired[Optional[str]]
    max_tokens: NotRequired[Optional[int]]
    name: str
    parallel_tool_calls: NotRequired[Optional[bool]]
    provider: Provider
    reasoning_effort: NotRequired[Optional[ReasoningEffort]]
    seed: NotRequired[Optional[int]]
    service_tier: NotRequired[Optional[ServiceTier]]
    stop: NotRequired[list[str]]
    stop_sequences: NotRequired[list[str]]
    temperature: NotRequired[Optional[float]]
    thinking: NotRequired[Optional[Thinking]]
    tool_choice: NotRequired[Optional[ToolChoice]]
    top_k: NotRequired[Optional[int]]
    top_p: NotRequired[Optional[float]]
    user: NotRequired[Optional[str]]


class ModelResponseData(TypedDict):
    config_version: int
    message: list[dict[str, Any]]
    step_id: str
    stop_reason: Optional[str]
    tool_calls: list[ToolCallCreatedData]
    usage: ModelUsage


class ModelResponseEvent(TypedDict):
    agent_id: str
    created_at: str
    data: ModelResponseData
    id: str
    seq: int
    type: Literal['model.response']


class OperationsView(TypedDict):
    agents_by_state: dict[str, int]
    machines: list[MachineActivityView]
    stuck_agents: list[StuckAgentView]
    webhooks: list[WebhookBacklogView]
    workers: list[WorkerView]


class ProjectUsage(TypedDict):
    days: list[DayUsage]
    since: str
    usage: TokenUsage


class ProviderKeyList(TypedDict):
    provider_keys: list[ProviderKeyView]


class QuestionList(TypedDict):
    questions: list[QuestionView]


class ReplayList(TypedDict):
    replays: list[ReplaySummary]


class ReplayRequest(TypedDict):
    config: NotRequired[Optional[dict[str, Any]]]
    turns: NotRequired[Optional[TurnRange]]
    version: NotRequired[Optional[int]]


class ReplayTotals(TypedDict):
    replay: TokenUsage
    source: TokenUsage
    turns_diverged: int
    turns_equal: int


class ResultRequest(TypedDict):
    exit_code: NotRequired[Optional[int]]
    limit: NotRequired[Optional[LimitName]]
    signal: NotRequired[Optional[int]]
    state: ResultStateName
    stderr: NotRequired[str]
    stderr_truncated: NotRequired[bool]
    stdout: NotRequired[str]
    stdout_truncated: NotRequired[bool]
    timed_out: NotRequired[bool]


class ScheduleView(TypedDict):
    agent_id: str
    created_at: str
    cron: NotRequired[Optional[str]]
    end_at: NotRequired[Optional[str]]
    every: NotRequired[Optional[str]]
    fire_count: int
    id: str
    input: ScheduledInput
    last_fired_at: NotRequired[Optional[str]]
    missed: MissedPolicy
    next_fire_at: NotRequired[Optional[str]]
    start_at: NotRequired[Optional[str]]
    state: ScheduleState
    timezone: str
    updated_at: str


class ToolCallCompletedEvent(TypedDict):
    agent_id: str
    created_at: str
    data: ToolCallResultData
    id: str
    seq: int
    type: Literal['tool_call.completed']


class ToolCallInterruptedEvent(TypedDict):
    agent_id: str
    created_at: str
    data: ToolCallResultData
    id: str
    seq: int
    type: Literal['tool_call.interrupted']


class ToolCallList(TypedDict):
    tool_calls: list[ToolCallView]


class ToolEntry8(AnthropicWebSearch):
    type: Literal['anthropic_web_search']


class ToolEntry9(AnthropicWebFetch):
    type: Literal['anthropic_web_fetch']


ToolEntry = Union[
    ToolEntry1,
    ToolEntry2,
    ToolEntry3,
    ToolEntry4,
    ToolEntry5,
    ToolEntry6,
    ToolEntry7,
    ToolEntry8,
    ToolEntry9,
]


class TurnSide(TypedDict):
    answer: NotRequired[Optional[str]]
    tool_calls: list[TurnToolCall]
    usage: TokenUsage


class WebhookList(TypedDict):
    webhooks: list[WebhookView]


class AgentConfig(TypedDict):
    approvals: NotRequired[Optional[ApprovalSettings]]
    budget: NotRequired[Optional[BudgetSettings]]
    limits: NotRequired[Optional[LimitSettings]]
    metadata: NotRequired[Optional[dict[str, Any]]]
    model: ModelConfig
    system: NotRequired[Optional[str]]
    tools: NotRequired[list[ToolEntry]]


class AgentView(TypedDict):
    activity_at: NotRequired[Optional[str]]
    cancel_requested: bool
    config: AgentConfig
    config_version: int
    created_at: str
    forked_from: NotRequired[Optional[ForkPoint]]
    id: str
    last_event_seq: int
    last_turn: NotRequired[Optional[LastTurn]]
    next_turn_config_version: NotRequired[Optional[int]]
    state: StateName
    state_changed_at: str
    turn_open: bool
    updated_at: str


class CancelView(TypedDict):
    agent: AgentView
    status: str


class ConfigUpdatedData(TypedDict):
    apply: str
    config: AgentConfig
    diff: dict[str, Any]
    version: int


class ConfigUpdatedEvent(TypedDict):
    agent_id: str
    created_at: str
    data: ConfigUpdatedData
    id: str
    seq: int
    type: Literal['config.updated']


class ConfigVersionView(TypedDict):
    config: AgentConfig
    created_at: str
    version: int


EventView = Union[
    InputReceivedEvent,
    InputRemovedEvent,
    TurnStartedEvent,
    ModelResponseEvent,
    ModelRetryEvent,
    ModelInterruptedEvent,
    StepRetryEvent,
    WorkerLostEvent,
    ToolCallCreatedEvent,
    ToolCallCompletedEvent,
    ToolCallInterruptedEvent,
    ToolUnavailableEvent,
    ContentLeftOutEvent,
    ApprovalRequestedEvent,
    ApprovalAnsweredEvent,
    QuestionAskedEvent,
    QuestionAnsweredEvent,
    CommandQueuedEvent,
    CommandAcceptedEvent,
    CommandFinishedEvent,
    CommandFailedEvent,
    CommandUnknownEvent,
    MachineUnreachableEvent,
    MachineSessionReplacedEvent,
    SubagentStartedEvent,
    SubagentFinishedEvent,
    ContextCompactedEvent,
    ConfigUpdatedEvent,
    TurnCompletedEvent,
    TurnCancelledEvent,
    TurnFailedEvent,
    AgentArchivedEvent,
    InputUpdatedEvent,
    ScheduleFiredEvent,
    ScheduleSkippedEvent,
    AgentForkedEvent,
    ReplayDivergedEvent,
    ReplayCompletedEvent,
]


class Inbox(TypedDict):
    has_more: bool
    items: list[InboxItem]
    next_cursor: NotRequired[Optional[str]]
    total: int


class ReplayTurn(TypedDict):
    answer_equal: bool
    diverged: bool
    first_divergence: NotRequired[Optional[Divergence]]
    replay: TurnSide
    source: TurnSide
    source_turn: int
    turn: int


class ScheduleList(TypedDict):
    schedules: list[ScheduleView]


class AgentList(TypedDict):
    agents: list[AgentView]
    has_more: bool
    next_cursor: NotRequired[Optional[str]]


class ConfigVersionList(TypedDict):
    versions: list[ConfigVersionView]


class EventList(TypedDict):
    events: list[EventView]
    has_more: bool


class ReplayReport(TypedDict):
    agent_id: str
    completed_at: NotRequired[Optional[str]]
    config_patch: dict[str, Any]
    created_at: str
    error: NotRequired[Optional[dict[str, Any]]]
    id: str
    source_agent_id: str
    status: ReplayStatus
    totals: ReplayTotals
    turns: list[ReplayTurn]
    turns_replayed: int
    turns_total: int
