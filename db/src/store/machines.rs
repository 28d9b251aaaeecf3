//! Machines and their commands (sql/schema/machines.sql).

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_postgres::types::Type;
use tokio_postgres::Row;
use uuid::Uuid;

use super::parse_text;
use super::prepared::Prepared;
use crate::error::{Error, Result};
use holdfast_wire::config::CommandWorkspace;
use holdfast_wire::domain::{
    ClaimedCommand, CommandResult, CommandResultOutcome, Heartbeat, HeartbeatRecorded,
    LiveOutputOutcome, MachineIdentity, MachineRegistered, MachineStatus, MachineTickReport,
    MachineWake, LIVE_OUTPUT_MAX_BYTES, LIVE_OUTPUT_MIN_INTERVAL,
};
use holdfast_wire::duration::to_interval;
use holdfast_wire::pg_text::storable_str;

/// Register a machine in `project`; the answer carries its token (show it
/// once). A taken name is [`Error::Conflict`]; a bad name or wake URL is
/// [`Error::Invalid`] naming `name` or `wake_url`.
pub async fn register_machine(
    client: &impl Prepared,
    project: Uuid,
    name: &str,
    wake_url: Option<&str>,
) -> Result<MachineRegistered> {
    let row = client
        .query_one(
            "SELECT machine_id, name, wake_url, token_prefix, token, created_at \
               FROM holdfast.register_machine($1, $2, $3)",
            &[&project, &name, &wake_url],
        )
        .await?;
    Ok(machine_with_token(&row))
}

/// Give a machine of `project` a new token (in the result, shown once);
/// the old one is refused from now on and the daemon session it served
/// ends. [`Error::NotFound`] for a machine of another project or a deleted one.
pub async fn rotate_machine_token(
    client: &impl Prepared,
    project: Uuid,
    machine: Uuid,
) -> Result<MachineRegistered> {
    let row = client
        .query_one(
            "SELECT machine_id, name, wake_url, token_prefix, token, created_at \
               FROM holdfast.rotate_machine_token($1, $2)",
            &[&project, &machine],
        )
        .await?;
    Ok(machine_with_token(&row))
}

/// A `(machine_id, name, wake_url, token_prefix, token, created_at)` row.
fn machine_with_token(row: &Row) -> MachineRegistered {
    MachineRegistered {
        machine_id: row.get("machine_id"),
        name: row.get("name"),
        wake_url: row.get("wake_url"),
        token_prefix: row.get("token_prefix"),
        token: row.get("token"),
        created_at: row.get("created_at"),
    }
}

/// Delete a machine of `project`: its token is refused from now on and its
/// unfinished commands end (queued ones fail, accepted ones become
/// unknown), their agents moving on. Returns how many commands ended.
/// [`Error::NotFound`] for a machine of another project or a deleted one.
pub async fn delete_machine(client: &impl Prepared, project: Uuid, machine: Uuid) -> Result<i32> {
    let row = client
        .query_one(
            "SELECT holdfast.delete_machine($1, $2)",
            &[&project, &machine],
        )
        .await?;
    Ok(row.get(0))
}

/// The machine `token` belongs to; `None` when it is unknown.
pub async fn authenticate_machine(
    client: &impl Prepared,
    token: &str,
) -> Result<Option<MachineIdentity>> {
    let row = client
        .query_opt(
            "SELECT machine_id, project_id FROM holdfast.authenticate_machine($1)",
            &[&token],
        )
        .await?;
    Ok(row.map(|r| MachineIdentity {
        machine_id: r.get("machine_id"),
        project_id: r.get("project_id"),
    }))
}

/// Record a daemon's heartbeat; returns its time. A session that no longer
/// serves the machine (another daemon process started) is
/// [`Error::Conflict`].
pub async fn machine_heartbeat(
    client: &impl Prepared,
    machine: Uuid,
    heartbeat: &Heartbeat,
    peer: Option<&str>,
) -> Result<HeartbeatRecorded> {
    let commands = serde_json::to_value(&heartbeat.commands).map_err(|e| Error::Invalid {
        field: Some("commands".into()),
        message: e.to_string(),
    })?;
    let row = client
        .query_one(
            "SELECT h.heartbeat_at, h.replaced_session, \
                    holdfast.commands_to_stop($1, $2) AS cancelled_commands \
               FROM holdfast.machine_heartbeat($1, $2, $3, $4, $5, $6, $7) h",
            &[
                &machine,
                &commands,
                &heartbeat.session,
                &heartbeat.started,
                &heartbeat.sandboxed,
                &heartbeat.single_session,
                &peer,
            ],
        )
        .await?;
    Ok(HeartbeatRecorded {
        heartbeat_at: row.get("heartbeat_at"),
        replaced_session: row.get("replaced_session"),
        cancelled_commands: row.get("cancelled_commands"),
    })
}

/// Accept up to `max` of the machine's queued commands for the daemon
/// `session`: each is returned by this call and never again.
pub async fn claim_commands(
    client: &impl Prepared,
    machine: Uuid,
    max: i32,
    session: Option<Uuid>,
) -> Result<Vec<ClaimedCommand>> {
    // Typed parameters: parse, bind and execute go in one round trip, so a
    // long-poll's claim is one exchange with the server (and its session
    // goes idle once, after the claim has run, not between a prepare and
    // an execute as well).
    let rows = client
        .query_typed(
            "SELECT command_id, tool_call_id, agent_id, command, timeout_secs, accepted_at, \
                    trace_parent, trace_state, workspace \
               FROM holdfast.claim_commands($1, $2, $3)",
            &[
                (&machine, Type::UUID),
                (&max, Type::INT4),
                (&session, Type::UUID),
            ],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| ClaimedCommand {
            id: r.get("command_id"),
            tool_call_id: r.get("tool_call_id"),
            agent_id: r.get("agent_id"),
            command: r.get("command"),
            timeout_secs: r.get("timeout_secs"),
            accepted_at: r.get("accepted_at"),
            traceparent: r.get("trace_parent"),
            tracestate: r.get("trace_state"),
            workspace: match r.get::<_, &str>("workspace") {
                "agent" => CommandWorkspace::Agent,
                _ => CommandWorkspace::Machine,
            },
        })
        .collect())
}

/// Record a machine's result for one of its commands. Another machine's
/// command is [`Error::NotFound`]; a different result after one was
/// recorded is [`Error::Conflict`].
pub async fn submit_command_result(
    client: &impl Prepared,
    machine: Uuid,
    command: Uuid,
    result: &CommandResult,
) -> Result<CommandResultOutcome> {
    let row = client
        .query_one(
            "SELECT holdfast.submit_command_result($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            &[
                &machine,
                &command,
                &<&str>::from(result.state),
                &result.exit_code,
                &result.stdout,
                &result.stderr,
                &result.stdout_truncated,
                &result.stderr_truncated,
                &result.timed_out,
                &result.signal,
                &result.limit.map(<&str>::from),
            ],
        )
        .await?;
    parse_text(row.get(0), "submit_command_result")
}

/// Relay what running command `command` printed since the last call to
/// its agent's stream listeners, within the live bounds
/// ([`LIVE_OUTPUT_MAX_BYTES`], [`LIVE_OUTPUT_MIN_INTERVAL`]). U+0000
/// becomes U+FFFD (Postgres text cannot hold it). `NotFound` when the
/// command is not on `machine`.
pub async fn relay_command_output(
    client: &impl Prepared,
    machine: Uuid,
    command: Uuid,
    stdout: &str,
    stderr: &str,
) -> Result<LiveOutputOutcome> {
    let max_bytes = i32::try_from(LIVE_OUTPUT_MAX_BYTES).unwrap_or(i32::MAX);
    let row = client
        .query_one(
            "SELECT holdfast.command_output($1, $2, $3, $4, $5, $6::text::interval)",
            &[
                &machine,
                &command,
                &storable_str(stdout),
                &storable_str(stderr),
                &max_bytes,
                &to_interval(LIVE_OUTPUT_MIN_INTERVAL),
            ],
        )
        .await?;
    parse_text(row.get(0), "command_output")
}

/// The machines of `project`, oldest first, with their online state.
pub async fn list_machines(client: &impl Prepared, project: Uuid) -> Result<Vec<MachineStatus>> {
    let rows = client
        .query(
            "SELECT id, name, wake_url, created_at, last_heartbeat_at, online, wake_until, \
                    queued_commands, running_commands \
               FROM holdfast.list_machines($1)",
            &[&project],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| MachineStatus {
            id: r.get("id"),
            name: r.get("name"),
            wake_url: r.get("wake_url"),
            created_at: r.get("created_at"),
            last_heartbeat_at: r.get("last_heartbeat_at"),
            online: r.get("online"),
            wake_until: r.get("wake_until"),
            queued_commands: r.get("queued_commands"),
            running_commands: r.get("running_commands"),
        })
        .collect())
}

/// Start a wake attempt on a machine of `project` for `window`: its queued
/// commands wait that long instead of failing as offline.
pub async fn start_machine_wake(
    client: &impl Prepared,
    project: Uuid,
    machine: Uuid,
    window: Duration,
) -> Result<MachineWake> {
    let row = client
        .query_one(
            "SELECT machine_id, name, wake_url, wake_until \
               FROM holdfast.start_machine_wake($1, $2, $3::text::interval)",
            &[&project, &machine, &to_interval(window)],
        )
        .await?;
    Ok(MachineWake {
        machine_id: row.get("machine_id"),
        name: row.get("name"),
        wake_url: row.get("wake_url"),
        wake_until: row.get("wake_until"),
    })
}

/// One machine sweep (lost, unaccepted, offline and unreachable commands),
/// enforcing `accept_timeout` and `offline_after`.
pub async fn machine_tick(
    client: &impl Prepared,
    accept_timeout: Duration,
    offline_after: Duration,
) -> Result<MachineTickReport> {
    let row = client
        .query_one(
            "SELECT holdfast.machine_tick($1::text::interval, $2::text::interval)",
            &[&to_interval(accept_timeout), &to_interval(offline_after)],
        )
        .await?;
    let report: Value = row.get(0);
    serde_json::from_value(report)
        .map_err(|e| Error::Migration(format!("machine_tick report: {e}")))
}

/// An online machine whose daemon runs commands unsandboxed.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct UnsandboxedMachine {
    pub machine_id: Uuid,
    pub project_id: Uuid,
    pub name: String,
    pub last_heartbeat_at: DateTime<Utc>,
}

/// Online machines whose daemon runs with `--sandbox none`.
pub async fn unsandboxed_machines(client: &impl Prepared) -> Result<Vec<UnsandboxedMachine>> {
    let rows = client
        .query(
            "SELECT machine_id, project_id, name, last_heartbeat_at \
               FROM holdfast.unsandboxed_machines()",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| UnsandboxedMachine {
            machine_id: r.get("machine_id"),
            project_id: r.get("project_id"),
            name: r.get("name"),
            last_heartbeat_at: r.get("last_heartbeat_at"),
        })
        .collect())
}
