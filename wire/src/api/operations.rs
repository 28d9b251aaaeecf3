//! Operator views: `/v1/operations`, `/v1/project`, and the probes (`/healthz`, `/readyz`).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct OperationsView {
    /// The queue depth: agents per state.
    pub agents_by_state: BTreeMap<String, i64>,
    pub workers: Vec<WorkerView>,
    pub stuck_agents: Vec<StuckAgentView>,
    pub webhooks: Vec<WebhookBacklogView>,
    pub machines: Vec<MachineActivityView>,
}

/// A worker holding leases on this project's agents.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct WorkerView {
    pub worker: String,
    pub agents_held: i64,
    /// The lease that runs out first (a worker renews before then).
    pub soonest_lease_expiry: Option<DateTime<Utc>>,
    /// The agents it holds (at most 20).
    pub agents: Vec<Uuid>,
}

#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct StuckAgentView {
    pub agent_id: Uuid,
    pub state: String,
    /// Why it is listed (unclaimed while ready, lease expired, session gone).
    pub reason: String,
    pub since: DateTime<Utc>,
}

#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct WebhookBacklogView {
    pub endpoint_id: Uuid,
    pub url: String,
    pub pending: i64,
    /// Pending and due now.
    pub due: i64,
    pub in_flight: i64,
    pub failed: i64,
    pub oldest_due_at: Option<DateTime<Utc>>,
    /// Up to five deliveries whose latest attempt failed, newest first.
    pub recent_failures: Vec<DeliveryFailureView>,
}

#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct DeliveryFailureView {
    pub delivery_id: Uuid,
    pub event_type: String,
    pub status: String,
    pub attempts: i32,
    pub last_status_code: Option<i32>,
    pub last_error: Option<String>,
    pub last_attempt_at: Option<DateTime<Utc>>,
}

#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct MachineActivityView {
    pub machine_id: Uuid,
    pub name: String,
    pub online: bool,
    pub last_heartbeat_at: Option<DateTime<Utc>>,
    /// Commands waiting for the machine to accept them.
    pub queued: i64,
    /// Commands accepted and still running.
    pub running: Vec<RunningCommandView>,
}

#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct RunningCommandView {
    pub command_id: Uuid,
    pub agent_id: Uuid,
    pub command: String,
    pub accepted_at: Option<DateTime<Utc>>,
}

/// The project an API key belongs to.
#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct ProjectView {
    pub id: Uuid,
    pub name: String,
    /// Agents per state; every state is listed (0 when none).
    #[schema(example = json!({"idle": 3, "ready": 0, "running": 1, "waiting": 2, "archived": 0}))]
    pub agents_by_state: BTreeMap<String, i64>,
    /// Agents per outcome of their last turn (`completed`, `failed`,
    /// `cancelled`, `limit`); every outcome is listed (0 when none). An
    /// agent with a turn open, or none yet, is in no count.
    #[schema(example = json!({"completed": 4, "failed": 1, "cancelled": 0, "limit": 0}))]
    pub agents_by_last_turn_outcome: BTreeMap<String, i64>,
}

#[derive(Clone, Debug, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `ok` (alive) or `ready` (can serve).
    pub status: String,
    /// Whether the LISTEN connection that feeds streams is up (readiness only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listener: Option<String>,
}
