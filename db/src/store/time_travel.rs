//! Forks and replays (`sql/schema/time_travel.sql`): an agent's saved
//! history used again.

use serde_json::Value;

use uuid::Uuid;

use super::prepared::{execute_prepared, Prepared};
use crate::error::Result;
use holdfast_wire::domain::Claim;

/// Where to fork an agent: one event of its timeline, the end of one of
/// its turns, or (neither) its last event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ForkAt {
    pub seq: Option<i64>,
    pub turn: Option<i64>,
}

/// Fork `agent` of `project` at `at` with its config (or its config
/// `version`) changed by `patch` (`holdfast.fork_agent`); returns the
/// fork's id.
pub async fn fork_agent(
    client: &impl Prepared,
    project: Uuid,
    agent: Uuid,
    at: ForkAt,
    patch: Option<&Value>,
    version: Option<i32>,
) -> Result<Uuid> {
    let row = client
        .query_one(
            "SELECT holdfast.fork_agent($1, $2, $3, $4, $5, $6)",
            &[&project, &agent, &at.seq, &at.turn, &patch, &version],
        )
        .await?;
    Ok(row.get(0))
}

/// Replay `agent`'s recorded turns `from..=to` (all when unset) with its
/// config (or its config `version`) changed by `patch`
/// (`holdfast.create_replay`); returns the replay's id.
pub async fn create_replay(
    client: &impl Prepared,
    project: Uuid,
    agent: Uuid,
    patch: Option<&Value>,
    from_turn: Option<i64>,
    to_turn: Option<i64>,
    version: Option<i32>,
) -> Result<Uuid> {
    let row = client
        .query_one(
            "SELECT holdfast.create_replay($1, $2, $3, $4, $5, $6)",
            &[&project, &agent, &patch, &from_turn, &to_turn, &version],
        )
        .await?;
    Ok(row.get(0))
}

/// A replay's report (`holdfast.replay_report`), `None` when it is not in
/// `project`.
pub async fn replay_report(
    client: &impl Prepared,
    project: Uuid,
    replay: Uuid,
) -> Result<Option<Value>> {
    let row = client
        .query_one(
            "SELECT holdfast.replay_report($1, $2)",
            &[&project, &replay],
        )
        .await?;
    Ok(row.get(0))
}

/// `agent`'s replays (`holdfast.list_replays`), `None` when the agent is
/// not in `project`.
pub async fn list_replays(
    client: &impl Prepared,
    project: Uuid,
    agent: Uuid,
) -> Result<Option<Value>> {
    let row = client
        .query_one("SELECT holdfast.list_replays($1, $2)", &[&project, &agent])
        .await?;
    Ok(row.get(0))
}

/// Answer a replay child's runnable tool calls from the recording
/// (`holdfast.answer_replay_calls`), fenced by the claim.
pub async fn answer_replay_calls(client: &impl Prepared, claim: Claim) -> Result<()> {
    execute_prepared(
        client,
        "SELECT holdfast.answer_replay_calls($1, $2)",
        &[&claim.agent_id, &claim.epoch],
    )
    .await?;
    Ok(())
}
