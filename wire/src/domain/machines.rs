//! Machines and commands (sql/schema/machines.sql).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use strum::{Display, EnumString, IntoStaticStr, VariantArray};
use uuid::Uuid;

use crate::config::CommandWorkspace;

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
    /// With `started`: the daemon runs its commands in the sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandboxed: Option<bool>,
    /// With `started`: no other session may take the machine over while
    /// this one heartbeats (`--single-session`).
    #[serde(default)]
    pub single_session: bool,
}

/// What a heartbeat did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatRecorded {
    pub heartbeat_at: DateTime<Utc>,
    /// The live session this start took the machine over from.
    pub replaced_session: Option<Uuid>,
    /// The reported commands whose tool calls were cancelled after they
    /// were accepted: the daemon stops them.
    pub cancelled_commands: Vec<Uuid>,
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
    /// The W3C trace context of the turn that queued it (`traceparent`,
    /// `tracestate`), when it had one: the parent of the run's span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
    /// Where it runs (the agent's run_command tool entry).
    #[serde(default)]
    pub workspace: CommandWorkspace,
}

/// How a command ended on its machine.
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
pub enum CommandResultState {
    /// The process exited (or was killed at its timeout).
    Finished,
    /// The daemon lost the process without an exit status.
    Unknown,
}

/// A limit of the command sandbox that ended a command.
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
pub enum CommandLimit {
    /// Its CPU time (`--command-cpu-secs`).
    CpuTime,
    /// Its memory (`--command-memory-mib`).
    Memory,
    /// Its number of processes (`--command-processes`).
    Processes,
}

/// A machine's result for one command (output bounded by the daemon).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandResult {
    pub state: CommandResultState,
    /// The sandbox limit that ended it, if one did (then it ran, and
    /// `command.failed` names the limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<CommandLimit>,
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
            limit: None,
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
pub enum CommandResultOutcome {
    /// It completed the waiting tool call; the agent goes on with it.
    Delivered,
    /// The agent had already moved on; it is recorded (late: true) only.
    Late,
    /// The same result was recorded before; nothing changed.
    Duplicate,
}

/// What became of a running command's output relayed live
/// (`holdfast.command_output`).
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
pub enum LiveOutputOutcome {
    /// Sent to the agent's stream listeners.
    Relayed,
    /// The command is not running (finished, or never accepted): nothing
    /// more of it is relayed.
    NotRunning,
    /// Less than the minimum interval after the previous call: not
    /// relayed (send it with the next).
    TooSoon,
    /// The command's live output reached its bound: nothing more of it is
    /// relayed (its result still carries its output).
    Limit,
}

/// The bytes of a command's output relayed live, in all.
pub const LIVE_OUTPUT_MAX_BYTES: usize = 256 * 1024;
/// The bytes of live output (stdout and stderr together) per call.
pub const LIVE_OUTPUT_PIECE_MAX_BYTES: usize = 16 * 1024;
/// The shortest time between two calls relaying one command's output.
pub const LIVE_OUTPUT_MIN_INTERVAL: std::time::Duration = std::time::Duration::from_millis(200);

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
