//! What `holdfast status` and the operations views show: queue depth,
//! workers' leases, stuck agents.

use super::prepared::Prepared;
use crate::error::Result;
use holdfast_wire::domain::{StuckAgent, WorkerLeases};

/// The agents per state (the `holdfast.queue_depth` view).
pub async fn queue_depth(client: &impl Prepared) -> Result<Vec<(String, i64)>> {
    let rows = client
        .query(
            "SELECT state, agents FROM holdfast.queue_depth ORDER BY state",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| (r.get("state"), r.get("agents")))
        .collect())
}

/// Per worker: agents held, the soonest lease expiry (`holdfast.worker_leases`).
pub async fn worker_leases(client: &impl Prepared) -> Result<Vec<WorkerLeases>> {
    let rows = client
        .query(
            "SELECT worker, agents_held, oldest_lease_expires_at, last_claim_at, \
                    array_remove(backend_pids, NULL) AS backend_pids \
               FROM holdfast.worker_leases ORDER BY worker",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| WorkerLeases {
            worker: r.get("worker"),
            agents_held: r.get("agents_held"),
            oldest_lease_expires_at: r.get("oldest_lease_expires_at"),
            last_claim_at: r.get("last_claim_at"),
            backend_pids: r.get("backend_pids"),
        })
        .collect())
}

/// Agents that need a look (`holdfast.stuck_agents`), at most `limit`.
pub async fn stuck_agents(client: &impl Prepared, limit: i64) -> Result<Vec<StuckAgent>> {
    let rows = client
        .query(
            "SELECT agent_id, state, lease_owner, lease_expires_at, state_changed_at, reason \
               FROM holdfast.stuck_agents ORDER BY state_changed_at, agent_id LIMIT $1",
            &[&limit],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| StuckAgent {
            agent_id: r.get("agent_id"),
            state: r.get("state"),
            lease_owner: r.get("lease_owner"),
            lease_expires_at: r.get("lease_expires_at"),
            state_changed_at: r.get("state_changed_at"),
            reason: r.get("reason"),
        })
        .collect())
}
