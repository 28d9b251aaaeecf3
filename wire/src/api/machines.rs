//! `/v1/machines` (a project's machines, with its API key) and `/v1/machine/...` (a daemon's calls, with the machine token).

use crate::config::CommandWorkspace;
use crate::domain::{
    ClaimedCommand, CommandLimit, CommandResult, CommandResultOutcome, CommandResultState,
    DaemonCommandState, Heartbeat, LiveOutputOutcome, MachineRegistered, MachineStatus,
    ReportedCommand,
};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

/// A machine to register.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterMachineRequest {
    /// Unique in the project: 1 to 100 letters, digits, `.`, `_` or `-`.
    /// Agents name the machine by it (or by id) in their `run_command`
    /// tool entry.
    pub name: String,
    /// POSTed when a wake attempt starts (`{"machine_id", "name",
    /// "wake_until"}`): e.g. a Wake-on-LAN relay on the machine's network.
    pub wake_url: Option<String>,
}

/// A machine with its token (registered, or its token rotated). The token
/// is shown here only: give it to the machine's daemon (`--token-file` or
/// `HOLDFAST_MACHINE_TOKEN`).
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct MachineCreated {
    pub id: Uuid,
    pub name: String,
    pub wake_url: Option<String>,
    /// The token's first characters, to tell tokens apart later.
    pub token_prefix: String,
    /// `hfm_…`: authenticates the daemon on `/v1/machine/...`.
    pub token: String,
    pub created_at: DateTime<Utc>,
}

/// A machine and where it stands.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct MachineView {
    pub id: Uuid,
    pub name: String,
    pub wake_url: Option<String>,
    /// A heartbeat arrived within the offline window
    /// (`HOLDFAST_MACHINE_OFFLINE_AFTER`, 30 s).
    pub online: bool,
    pub last_heartbeat_at: Option<DateTime<Utc>>,
    /// Set while a wake attempt is in progress: queued commands wait until
    /// then instead of failing as offline.
    pub wake_until: Option<DateTime<Utc>>,
    /// Commands waiting for the machine to claim them.
    pub queued_commands: i64,
    /// Accepted commands: `{"id", "agent_id", "tool_call_id", "command",
    /// "accepted_at", "last_known_state"}` (the state the daemon last
    /// reported: `accepted`, `running` with its `pid`, or `finished`).
    #[schema(value_type = Vec<Object>)]
    pub running_commands: Value,
    pub created_at: DateTime<Utc>,
}

impl From<MachineStatus> for MachineView {
    fn from(machine: MachineStatus) -> MachineView {
        MachineView {
            id: machine.id,
            name: machine.name,
            wake_url: machine.wake_url,
            online: machine.online,
            last_heartbeat_at: machine.last_heartbeat_at,
            wake_until: machine.wake_until,
            queued_commands: machine.queued_commands,
            running_commands: machine.running_commands,
            created_at: machine.created_at,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct MachineList {
    pub machines: Vec<MachineView>,
}

/// How long to wait for the machine to come up.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WakeRequest {
    /// The wake attempt's window in seconds (1 to 86400, default 300). A
    /// heartbeat ends it early: the machine is up.
    #[schema(minimum = 1, maximum = 86400)]
    pub window_secs: Option<u64>,
}

/// A wake attempt, started.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct WakeView {
    pub machine_id: Uuid,
    /// Queued commands wait until then.
    pub wake_until: DateTime<Utc>,
    /// The machine's wake_url was POSTed.
    pub wake_url_called: bool,
    /// Its answer's status, when it answered.
    pub wake_url_status: Option<u16>,
    /// Why the call failed, when it did (the attempt is recorded anyway).
    pub wake_url_error: Option<String>,
}

impl From<MachineRegistered> for MachineCreated {
    fn from(machine: MachineRegistered) -> MachineCreated {
        MachineCreated {
            id: machine.machine_id,
            name: machine.name,
            wake_url: machine.wake_url,
            token_prefix: machine.token_prefix,
            token: machine.token,
            created_at: machine.created_at,
        }
    }
}

/// Where a command stands on the daemon.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DaemonStateName {
    /// Journaled; its process has not started.
    Accepted,
    /// Its process runs.
    Running,
    /// Its result waits for the server to acknowledge it.
    Finished,
}

/// One command the daemon's journal holds.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportedCommandBody {
    pub id: Uuid,
    pub state: DaemonStateName,
    /// The process id, while it runs.
    pub pid: Option<u32>,
}

/// A heartbeat.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HeartbeatRequest {
    /// The daemon process: a new random id at every process start.
    pub session: Uuid,
    /// True on the first heartbeat of a process start: this session takes
    /// the machine over (an older session's heartbeats and claims get 409),
    /// and any accepted command missing from `commands` is one the daemon
    /// has no record of, resolved as `unknown`. Send it before claiming.
    #[serde(default)]
    pub started: bool,
    /// Every command the daemon's journal holds (kept as their last known
    /// state). At most 1000.
    #[serde(default)]
    pub commands: Vec<ReportedCommandBody>,
    /// With `started`: whether the daemon runs its commands in its sandbox
    /// (`false` is `--sandbox none`, which `holdfast status` warns about).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandboxed: Option<bool>,
    /// With `started`: while this session heartbeats, a `started`
    /// heartbeat of another session is refused (409) instead of taking
    /// the machine over.
    #[serde(default)]
    pub single_session: bool,
}

impl From<HeartbeatRequest> for Heartbeat {
    fn from(request: HeartbeatRequest) -> Heartbeat {
        Heartbeat {
            session: request.session,
            started: request.started,
            sandboxed: request.sandboxed,
            single_session: request.single_session,
            commands: request
                .commands
                .into_iter()
                .map(|c| ReportedCommand {
                    id: c.id,
                    state: match c.state {
                        DaemonStateName::Accepted => DaemonCommandState::Accepted,
                        DaemonStateName::Running => DaemonCommandState::Running,
                        DaemonStateName::Finished => DaemonCommandState::Finished,
                    },
                    pid: c.pid,
                })
                .collect(),
        }
    }
}

impl From<&Heartbeat> for HeartbeatRequest {
    fn from(heartbeat: &Heartbeat) -> HeartbeatRequest {
        HeartbeatRequest {
            session: heartbeat.session,
            started: heartbeat.started,
            sandboxed: heartbeat.sandboxed,
            single_session: heartbeat.single_session,
            commands: heartbeat
                .commands
                .iter()
                .map(|c| ReportedCommandBody {
                    id: c.id,
                    state: match c.state {
                        DaemonCommandState::Accepted => DaemonStateName::Accepted,
                        DaemonCommandState::Running => DaemonStateName::Running,
                        DaemonCommandState::Finished => DaemonStateName::Finished,
                    },
                    pid: c.pid,
                })
                .collect(),
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct HeartbeatView {
    pub machine_id: Uuid,
    pub heartbeat_at: DateTime<Utc>,
    /// Commands of this heartbeat's report whose tool calls were cancelled
    /// after they were accepted: end their processes (SIGTERM to the
    /// process group, SIGKILL after a grace) and report their results.
    #[serde(default)]
    pub cancelled_commands: Vec<Uuid>,
}

/// A command handed to this machine: run it once.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ClaimedCommandView {
    pub id: Uuid,
    pub tool_call_id: Uuid,
    pub agent_id: Uuid,
    /// Run with `sh -c`.
    pub command: String,
    /// Kill it after this many seconds.
    pub timeout_secs: i32,
    pub accepted_at: DateTime<Utc>,
    /// The W3C trace context of the turn that queued it, when it had one:
    /// the daemon's span for the run is its child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
    /// Where to run it: the machine's work directory, or the agent's own
    /// directory under it.
    #[serde(default)]
    pub workspace: CommandWorkspace,
}

impl From<ClaimedCommand> for ClaimedCommandView {
    fn from(command: ClaimedCommand) -> ClaimedCommandView {
        ClaimedCommandView {
            id: command.id,
            tool_call_id: command.tool_call_id,
            agent_id: command.agent_id,
            command: command.command,
            timeout_secs: command.timeout_secs,
            accepted_at: command.accepted_at,
            traceparent: command.traceparent,
            tracestate: command.tracestate,
            workspace: command.workspace,
        }
    }
}

impl From<ClaimedCommandView> for ClaimedCommand {
    fn from(command: ClaimedCommandView) -> ClaimedCommand {
        ClaimedCommand {
            id: command.id,
            tool_call_id: command.tool_call_id,
            agent_id: command.agent_id,
            command: command.command,
            timeout_secs: command.timeout_secs,
            accepted_at: command.accepted_at,
            traceparent: command.traceparent,
            tracestate: command.tracestate,
            workspace: command.workspace,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ClaimedList {
    pub commands: Vec<ClaimedCommandView>,
}

/// How a command ended on the machine.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ResultStateName {
    /// The process exited, or was killed at its timeout (`timed_out`).
    Finished,
    /// The daemon lost the process without an exit status (e.g. it was
    /// restarted while the command ran).
    Unknown,
}

/// The sandbox limit a command reached (the daemon then ended it).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LimitName {
    /// Its CPU time.
    CpuTime,
    /// Its memory.
    Memory,
    /// Its number of processes.
    Processes,
}

impl From<LimitName> for CommandLimit {
    fn from(limit: LimitName) -> CommandLimit {
        match limit {
            LimitName::CpuTime => CommandLimit::CpuTime,
            LimitName::Memory => CommandLimit::Memory,
            LimitName::Processes => CommandLimit::Processes,
        }
    }
}

impl From<CommandLimit> for LimitName {
    fn from(limit: CommandLimit) -> LimitName {
        match limit {
            CommandLimit::CpuTime => LimitName::CpuTime,
            CommandLimit::Memory => LimitName::Memory,
            CommandLimit::Processes => LimitName::Processes,
        }
    }
}

/// A command's result. Text is UTF-8 (invalid bytes replaced); the daemon
/// bounds it and says so with the `*_truncated` flags.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResultRequest {
    pub state: ResultStateName,
    /// Set when a limit of the machine's command sandbox ended the command
    /// (`state` is then `finished`): the agent gets `command.failed` naming it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<LimitName>,
    pub exit_code: Option<i32>,
    /// The signal that ended the process, if one did.
    pub signal: Option<i32>,
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

impl From<ResultRequest> for CommandResult {
    fn from(request: ResultRequest) -> CommandResult {
        CommandResult {
            state: match request.state {
                ResultStateName::Finished => CommandResultState::Finished,
                ResultStateName::Unknown => CommandResultState::Unknown,
            },
            limit: request.limit.map(Into::into),
            exit_code: request.exit_code,
            signal: request.signal,
            timed_out: request.timed_out,
            stdout: request.stdout,
            stderr: request.stderr,
            stdout_truncated: request.stdout_truncated,
            stderr_truncated: request.stderr_truncated,
        }
    }
}

impl From<&CommandResult> for ResultRequest {
    fn from(result: &CommandResult) -> ResultRequest {
        ResultRequest {
            state: match result.state {
                CommandResultState::Finished => ResultStateName::Finished,
                CommandResultState::Unknown => ResultStateName::Unknown,
            },
            limit: result.limit.map(Into::into),
            exit_code: result.exit_code,
            signal: result.signal,
            timed_out: result.timed_out,
            stdout: result.stdout.clone(),
            stderr: result.stderr.clone(),
            stdout_truncated: result.stdout_truncated,
            stderr_truncated: result.stderr_truncated,
        }
    }
}

/// What a running command printed since the daemon's last call, relayed
/// live to its agent's stream (`event: command_output`) and never saved:
/// the result carries the output. At most 16 KiB of text per call, a call
/// per 200 ms and 256 KiB per command.
#[derive(Clone, Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OutputRequest {
    #[serde(default)]
    pub stdout: String,
    #[serde(default)]
    pub stderr: String,
}

/// What became of a call relaying live output.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct OutputView {
    pub command_id: Uuid,
    /// `relayed`; `not_running` (finished, or never accepted: send no
    /// more); `too_soon` (within 200 ms of the previous call: send it with
    /// the next); `limit` (the command's 256 KiB were relayed: send no more).
    #[schema(value_type = String, example = "relayed")]
    pub outcome: LiveOutputOutcome,
}

/// What became of a result.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ResultView {
    pub command_id: Uuid,
    /// `delivered`: the agent continues with it. `late`: the agent had
    /// already moved on (machine_unreachable, a cancelled turn); it is
    /// recorded as an event only. `duplicate`: this result was recorded
    /// before.
    #[schema(value_type = String, example = "delivered")]
    pub outcome: CommandResultOutcome,
}
