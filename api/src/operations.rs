//! `GET /v1/operations`: what an operator looks at when agents do not move,
//! for the caller's project: agents by state, the workers holding its agents,
//! stuck agents with the reason, webhook endpoints with their backlog and
//! latest failures, machines with the commands they run. Built from the DBA
//! views (`holdfast.stuck_agents`, `webhook_queue`, `machine_overview`),
//! narrowed to the project.

use axum::extract::State;
use axum::Json;
use holdfast_db::store::console;
use holdfast_wire::api::error::ErrorBody;
use holdfast_wire::api::operations::{
    DeliveryFailureView, MachineActivityView, OperationsView, RunningCommandView, StuckAgentView,
    WebhookBacklogView, WorkerView,
};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;

/// The operations overview of the caller's project.
#[utoipa::path(
    get,
    path = "/v1/operations",
    tag = "operations",
    responses((status = 200, body = OperationsView), (status = 401, body = ErrorBody))
)]
pub async fn get_operations(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<OperationsView>, ApiError> {
    let db = state.db().await?;
    let ops = console::operations(&db, caller.project_id).await?;
    Ok(Json(OperationsView {
        agents_by_state: ops.agents_by_state,
        workers: ops
            .workers
            .into_iter()
            .map(|w| WorkerView {
                worker: w.worker,
                agents_held: w.agents_held,
                soonest_lease_expiry: w.soonest_lease_expiry,
                agents: w.agents,
            })
            .collect(),
        stuck_agents: ops
            .stuck
            .into_iter()
            .map(|s| StuckAgentView {
                agent_id: s.agent_id,
                state: s.state,
                reason: s.reason,
                since: s.since,
            })
            .collect(),
        webhooks: ops
            .webhooks
            .into_iter()
            .map(|w| WebhookBacklogView {
                endpoint_id: w.endpoint_id,
                url: w.url,
                pending: w.pending,
                due: w.due,
                in_flight: w.in_flight,
                failed: w.failed,
                oldest_due_at: w.oldest_due_at,
                recent_failures: w
                    .recent_failures
                    .into_iter()
                    .map(|f| DeliveryFailureView {
                        delivery_id: f.delivery_id,
                        event_type: f.event_type,
                        status: f.status,
                        attempts: f.attempts,
                        last_status_code: f.last_status_code,
                        last_error: f.last_error,
                        last_attempt_at: f.last_attempt_at,
                    })
                    .collect(),
            })
            .collect(),
        machines: ops
            .machines
            .into_iter()
            .map(|m| MachineActivityView {
                machine_id: m.machine_id,
                name: m.name,
                online: m.online,
                last_heartbeat_at: m.last_heartbeat_at,
                queued: m.queued,
                running: m
                    .running
                    .into_iter()
                    .map(|c| RunningCommandView {
                        command_id: c.command_id,
                        agent_id: c.agent_id,
                        command: c.command,
                        accepted_at: c.accepted_at,
                    })
                    .collect(),
            })
            .collect(),
    }))
}
