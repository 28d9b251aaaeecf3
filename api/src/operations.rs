//! `GET /v1/operations`: what an operator looks at when agents do not move,
//! for the caller's project: agents by state, the workers holding its agents,
//! stuck agents with the reason, webhook endpoints with their backlog and
//! latest failures, machines with the commands they run. Built from the DBA
//! views (`holdfast.stuck_agents`, `webhook_queue`, `machine_overview`),
//! narrowed to the project.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::Json;
use chrono::{DateTime, Utc};
use holdfast_client::wire::error::ErrorBody;
use holdfast_engine::store::console;
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;

#[derive(Serialize, ToSchema)]
pub struct OperationsView {
    /// The queue depth: agents per state.
    agents_by_state: BTreeMap<&'static str, i64>,
    workers: Vec<WorkerView>,
    stuck_agents: Vec<StuckAgentView>,
    webhooks: Vec<WebhookBacklogView>,
    machines: Vec<MachineActivityView>,
}

/// A worker holding leases on this project's agents.
#[derive(Serialize, ToSchema)]
pub struct WorkerView {
    worker: String,
    agents_held: i64,
    /// The lease that runs out first (a worker renews before then).
    soonest_lease_expiry: Option<DateTime<Utc>>,
    /// The agents it holds (at most 20).
    agents: Vec<Uuid>,
}

#[derive(Serialize, ToSchema)]
pub struct StuckAgentView {
    agent_id: Uuid,
    state: String,
    /// Why it is listed (unclaimed while ready, lease expired, session gone).
    reason: String,
    since: DateTime<Utc>,
}

#[derive(Serialize, ToSchema)]
pub struct WebhookBacklogView {
    endpoint_id: Uuid,
    url: String,
    pending: i64,
    /// Pending and due now.
    due: i64,
    in_flight: i64,
    failed: i64,
    oldest_due_at: Option<DateTime<Utc>>,
    /// Up to five deliveries whose latest attempt failed, newest first.
    recent_failures: Vec<DeliveryFailureView>,
}

#[derive(Serialize, ToSchema)]
pub struct DeliveryFailureView {
    delivery_id: Uuid,
    event_type: String,
    status: String,
    attempts: i32,
    last_status_code: Option<i32>,
    last_error: Option<String>,
    last_attempt_at: Option<DateTime<Utc>>,
}

#[derive(Serialize, ToSchema)]
pub struct MachineActivityView {
    machine_id: Uuid,
    name: String,
    online: bool,
    last_heartbeat_at: Option<DateTime<Utc>>,
    /// Commands waiting for the machine to accept them.
    queued: i64,
    /// Commands accepted and still running.
    running: Vec<RunningCommandView>,
}

#[derive(Serialize, ToSchema)]
pub struct RunningCommandView {
    command_id: Uuid,
    agent_id: Uuid,
    command: String,
    accepted_at: Option<DateTime<Utc>>,
}

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
    let ops = console::operations(&**db, caller.project_id).await?;
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
