//! Agents' timelines (sql/schema/events.sql).

use uuid::Uuid;

use super::prepared::Prepared;
use crate::error::Result;
use holdfast_wire::domain::Event;

/// Events of an agent after `after_seq`, oldest first, at most `limit`.
pub async fn events_after(
    client: &impl Prepared,
    agent: Uuid,
    after_seq: i64,
    limit: i64,
) -> Result<Vec<Event>> {
    let rows = client
        .query(
            "SELECT seq, id, agent_id, type, data, created_at FROM holdfast.events \
              WHERE agent_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
            &[&agent, &after_seq, &limit],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| Event {
            seq: r.get("seq"),
            id: r.get("id"),
            agent_id: r.get("agent_id"),
            kind: r.get("type"),
            data: r.get("data"),
            created_at: r.get("created_at"),
        })
        .collect())
}

/// The seq of an agent's latest event; `None` when the agent does not exist.
pub async fn last_event_seq(client: &impl Prepared, agent: Uuid) -> Result<Option<i64>> {
    let row = client
        .query_opt(
            "SELECT last_event_seq FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await?;
    Ok(row.map(|r| r.get(0)))
}

/// Events written so far, over all agents: the sum of the per-agent gap-free
/// sequences, exact and monotonic (for the `/metrics` counter).
pub async fn events_written(client: &impl Prepared) -> Result<i64> {
    let row = client
        .query_one(
            "SELECT coalesce(sum(last_event_seq), 0)::bigint FROM holdfast.agents",
            &[],
        )
        .await?;
    Ok(row.get(0))
}

/// Register the stream watch `watch` on `agent`, heard by the LISTEN session
/// with backend pid `listener_pid` (or move it to that session): from its
/// commit on, the agent's events are hinted on `holdfast_events`. Call it
/// before reading the agent's events (see `holdfast.watch_agent_events`).
pub async fn watch_agent_events(
    client: &impl Prepared,
    watch: Uuid,
    agent: Uuid,
    listener_pid: i32,
) -> Result<()> {
    client
        .execute(
            "SELECT holdfast.watch_agent_events($1, $2, $3)",
            &[&watch, &agent, &listener_pid],
        )
        .await?;
    Ok(())
}

/// Drop the stream watch `watch` (unknown ids are ignored).
pub async fn unwatch_agent_events(client: &impl Prepared, watch: Uuid) -> Result<()> {
    client
        .execute("SELECT holdfast.unwatch_agent_events($1)", &[&watch])
        .await?;
    Ok(())
}
