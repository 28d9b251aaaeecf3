//! The operator's views of workers and agents (`holdfast status`).

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

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
