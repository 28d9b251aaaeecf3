//! `/v1/machine/...`, the daemon's routes, with its machine token:
//! heartbeats (whose answers name the commands to stop), long-poll claims (each returned command is accepted, and no
//! claim returns it again), live output while a command runs, and results.
//!
//! The claim long-poll waits for a hint between claims: the `holdfast_commands`
//! NOTIFY for its machine (sent when a command is queued for it, when its
//! token is rotated and when it is deleted), fanned out by the API's one
//! LISTEN connection ([`crate::fanout`]), so a waiting daemon costs no
//! query until something happens for its machine. Hints can be lost (the
//! LISTEN connection drops), so it also claims every
//! [`CLAIM_FALLBACK_POLL`] (every [`CLAIM_POLL_WITHOUT_LISTEN`] while the
//! LISTEN connection is down). No connection is held between claims. Each
//! claim after the first checks the token again: one rotated or deleted
//! during the wait is refused (401) before any command is handed out.

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{ConnectInfo, State};
use axum::http::Extensions;
use axum::Json;
use holdfast_db::store;
use holdfast_wire::api::error::ErrorBody;
use holdfast_wire::api::machines::{
    ClaimedCommandView, ClaimedList, HeartbeatRequest, HeartbeatView, OutputRequest, OutputView,
    ResultRequest, ResultView,
};
use holdfast_wire::domain::{CommandResult, Heartbeat, LIVE_OUTPUT_PIECE_MAX_BYTES};
use serde::Deserialize;
use tokio::time::Instant;
use utoipa::IntoParams;
use uuid::Uuid;

use super::token::MachineCaller;
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery, MachineJson};
use crate::state::AppState;

/// The longest long-poll a claim may ask for.
pub const MAX_CLAIM_WAIT_SECS: u64 = 20;
/// How often a waiting claim looks for new commands without a hint.
pub const CLAIM_FALLBACK_POLL: Duration = Duration::from_secs(5);
/// The same while the API's LISTEN connection is down (no hints come).
pub const CLAIM_POLL_WITHOUT_LISTEN: Duration = Duration::from_millis(500);
/// Commands per claim, unless the daemon asks for fewer.
const DEFAULT_CLAIM_MAX: i32 = 10;

/// Record a heartbeat: the machine is online, and a wake attempt (if any)
/// has succeeded. The answer names the reported commands whose tool calls
/// were cancelled since they were accepted: the daemon stops them.
#[utoipa::path(
    post,
    path = "/v1/machine/heartbeat",
    tag = "machine daemon",
    request_body = HeartbeatRequest,
    responses(
        (status = 200, body = HeartbeatView),
        (status = 400, body = ErrorBody),
        (status = 401, description = "not a machine token (API keys are refused)", body = ErrorBody),
        (status = 409, description = "another daemon process has taken the machine over, or (a start) the machine's live session is --single-session", body = ErrorBody),
    )
)]
pub async fn heartbeat(
    State(state): State<AppState>,
    machine: MachineCaller,
    extensions: Extensions,
    MachineJson(request): MachineJson<HeartbeatRequest>,
) -> Result<Json<HeartbeatView>, ApiError> {
    let peer = extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.to_string());
    let heartbeat = Heartbeat::from(request);
    let db = state.db().await?;
    let recorded =
        store::machine_heartbeat(&db, machine.machine_id, &heartbeat, peer.as_deref()).await?;
    if let Some(replaced) = recorded.replaced_session {
        // The agents with commands on the machine see it on their
        // timelines (`machine.session_replaced`); the operator sees it here.
        tracing::warn!(
            machine = %machine.machine_id,
            previous_session = %replaced,
            session = %heartbeat.session,
            peer = peer.as_deref().unwrap_or("unknown"),
            "a daemon session took over a machine whose daemon was still heartbeating"
        );
    }
    Ok(Json(HeartbeatView {
        machine_id: machine.machine_id,
        heartbeat_at: recorded.heartbeat_at,
        cancelled_commands: recorded.cancelled_commands,
    }))
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ClaimQuery {
    /// The daemon's session, as its `started` heartbeat named it.
    session: Uuid,
    /// Wait up to this many seconds for a command (0 to 20, default 0).
    #[param(minimum = 0, maximum = 20)]
    wait: Option<u64>,
    /// At most this many commands (1 to 100, default 10).
    #[param(minimum = 1, maximum = 100)]
    max: Option<i32>,
}

/// Claim queued commands, waiting up to `wait` seconds for one. Every
/// command returned is accepted (`command.accepted`) and is never returned
/// again, to this or any claim: journal it before running it.
#[utoipa::path(
    post,
    path = "/v1/machine/commands/claim",
    tag = "machine daemon",
    params(ClaimQuery),
    responses(
        (status = 200, body = ClaimedList),
        (status = 400, body = ErrorBody),
        (status = 401, description = "not a machine token (API keys are refused)", body = ErrorBody),
        (status = 409, description = "the session does not serve this machine (send a `started` heartbeat first, or another daemon took over)", body = ErrorBody),
    )
)]
pub async fn claim_commands(
    State(state): State<AppState>,
    machine: MachineCaller,
    ApiQuery(query): ApiQuery<ClaimQuery>,
) -> Result<Json<ClaimedList>, ApiError> {
    let wait = query.wait.unwrap_or(0);
    if wait > MAX_CLAIM_WAIT_SECS {
        return Err(ApiError::invalid(
            "wait",
            format!("wait must be at most {MAX_CLAIM_WAIT_SECS} seconds"),
        ));
    }
    let max = query.max.unwrap_or(DEFAULT_CLAIM_MAX);
    // Answer before the server's own request timeout would (503).
    let wait = Duration::from_secs(wait).min(
        state
            .config()
            .request_timeout
            .saturating_sub(Duration::from_secs(1)),
    );
    let deadline = Instant::now() + wait;
    let mut hints = state.fanout().watch_commands(machine.machine_id);
    let mut first = true;
    loop {
        let claimed = {
            let db = state.db().await?;
            if !first {
                machine.revalidate(&db).await?;
            }
            store::claim_commands(&db, machine.machine_id, max, Some(query.session)).await?
        };
        first = false;
        let now = Instant::now();
        if !claimed.is_empty() || now >= deadline {
            return Ok(Json(ClaimedList {
                commands: claimed.into_iter().map(ClaimedCommandView::from).collect(),
            }));
        }
        let poll = if state.fanout().is_connected() {
            CLAIM_FALLBACK_POLL
        } else {
            CLAIM_POLL_WITHOUT_LISTEN
        };
        tokio::select! {
            _ = hints.changed() => {}
            _ = tokio::time::sleep(poll.min(deadline - now)) => {}
            _ = state.shutdown().cancelled() => {
                return Ok(Json(ClaimedList { commands: Vec::new() }));
            }
        }
    }
}

/// Report a command's result (U+0000 in its output is kept as U+FFFD).
/// Idempotent: the same result again is
/// `duplicate`; a different one is 409.
#[utoipa::path(
    post,
    path = "/v1/machine/commands/{id}/result",
    tag = "machine daemon",
    params(("id" = Uuid, Path, description = "command id")),
    request_body = ResultRequest,
    responses(
        (status = 200, body = ResultView),
        (status = 400, body = ErrorBody),
        (status = 401, description = "not a machine token (API keys are refused)", body = ErrorBody),
        (status = 404, description = "no such command on this machine", body = ErrorBody),
        (status = 409, description = "a different result was recorded, or the command was never accepted", body = ErrorBody),
        (status = 413, body = ErrorBody),
    )
)]
pub async fn submit_result(
    State(state): State<AppState>,
    machine: MachineCaller,
    ApiPath(id): ApiPath<Uuid>,
    MachineJson(request): MachineJson<ResultRequest>,
) -> Result<Json<ResultView>, ApiError> {
    let db = state.db().await?;
    let result = CommandResult::from(request);
    let outcome = store::submit_command_result(&db, machine.machine_id, id, &result).await?;
    Ok(Json(ResultView {
        command_id: id,
        outcome,
    }))
}

/// Relay what a running command printed since the last call to its agent's
/// stream (`event: command_output`, never saved: the result carries the
/// output). Bounded per command: 16 KiB per call, a call per 200 ms,
/// 256 KiB in all; `outcome` says what became of this one.
#[utoipa::path(
    post,
    path = "/v1/machine/commands/{id}/output",
    tag = "machine daemon",
    params(("id" = Uuid, Path, description = "command id")),
    request_body = OutputRequest,
    responses(
        (status = 200, body = OutputView),
        (status = 400, description = "`stdout` and `stderr` over 16 KiB together", body = ErrorBody),
        (status = 401, description = "not a machine token (API keys are refused)", body = ErrorBody),
        (status = 404, description = "no such command on this machine", body = ErrorBody),
    )
)]
pub async fn relay_output(
    State(state): State<AppState>,
    machine: MachineCaller,
    ApiPath(id): ApiPath<Uuid>,
    MachineJson(request): MachineJson<OutputRequest>,
) -> Result<Json<OutputView>, ApiError> {
    if request.stdout.len() + request.stderr.len() > LIVE_OUTPUT_PIECE_MAX_BYTES {
        let field = if request.stdout.len() >= request.stderr.len() {
            "stdout"
        } else {
            "stderr"
        };
        return Err(ApiError::invalid(
            field,
            format!(
                "stdout and stderr must be at most {LIVE_OUTPUT_PIECE_MAX_BYTES} bytes together"
            ),
        ));
    }
    let db = state.db().await?;
    let outcome = store::relay_command_output(
        &db,
        machine.machine_id,
        id,
        &request.stdout,
        &request.stderr,
    )
    .await?;
    Ok(Json(OutputView {
        command_id: id,
        outcome,
    }))
}
