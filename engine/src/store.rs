//! Typed calls of Holdfast's SQL functions. This module is the one place in
//! Rust that knows their names and signatures; workers and the API call these
//! wrappers, never ad-hoc SQL. Each takes any client (a pooled connection, a
//! dedicated session or a transaction).

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio_postgres::GenericClient;
use uuid::Uuid;

use crate::context::{HistoryMessage, PendingInput, StepContext, ToolCallRecord};
use crate::domain::{
    AgentState, Claim, Event, InputCreated, MaintenanceReport, ModelStep, Renewal,
};
use crate::duration::to_interval;
use crate::error::{Error, Result};

/// Claim up to `max` ready agents for `worker`. Call it on the worker's own
/// long-lived session: the session's backend pid is recorded on each claim,
/// and maintenance releases the claims of a session that dies.
pub async fn claim_agents(
    client: &impl GenericClient,
    worker: &str,
    max: i32,
    ttl: Duration,
) -> Result<Vec<Claim>> {
    let rows = client
        .query(
            "SELECT agent_id, epoch FROM holdfast.claim_agents($1, $2, $3::text::interval)",
            &[&worker, &max, &to_interval(ttl)],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| Claim {
            agent_id: r.get(0),
            epoch: r.get(1),
        })
        .collect())
}

/// Renew `worker`'s leases on `claims` in one round trip.
pub async fn renew_leases(
    client: &impl GenericClient,
    worker: &str,
    claims: &[Claim],
    ttl: Duration,
) -> Result<Vec<Renewal>> {
    let agents: Vec<Uuid> = claims.iter().map(|c| c.agent_id).collect();
    let epochs: Vec<i64> = claims.iter().map(|c| c.epoch).collect();
    let rows = client
        .query(
            "SELECT agent_id, renewed, cancel_requested \
               FROM holdfast.renew_leases($1, $2, $3, $4::text::interval)",
            &[&worker, &agents, &epochs, &to_interval(ttl)],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| Renewal {
            agent_id: r.get(0),
            renewed: r.get(1),
            cancel_requested: r.get(2),
        })
        .collect())
}

/// Give up a lease; the agent's next state is settled from its saved facts.
/// `run_after` delays the next claim (a durable backoff).
pub async fn release_agent(
    client: &impl GenericClient,
    claim: Claim,
    run_after: Option<DateTime<Utc>>,
) -> Result<AgentState> {
    let row = client
        .query_one(
            "SELECT holdfast.release_agent($1, $2, $3)",
            &[&claim.agent_id, &claim.epoch, &run_after],
        )
        .await?;
    parse_state(row.get(0))
}

/// Mark an external tool call running before its IO (never rerun after a crash).
pub async fn start_tool_call(
    client: &impl GenericClient,
    claim: Claim,
    tool_call: Uuid,
) -> Result<()> {
    client
        .execute(
            "SELECT holdfast.start_tool_call($1, $2, $3)",
            &[&claim.agent_id, &claim.epoch, &tool_call],
        )
        .await?;
    Ok(())
}

/// Save a model response with its inputs, tool calls and events, and release
/// the agent, in one transaction. Returns the step id.
pub async fn commit_model_step(
    client: &impl GenericClient,
    claim: Claim,
    step: &ModelStep,
) -> Result<Uuid> {
    let message = Value::Array(step.message.clone());
    let tool_calls = serde_json::to_value(&step.tool_calls).map_err(|e| Error::Invalid {
        field: Some("tool_calls".into()),
        message: e.to_string(),
    })?;
    let row = client
        .query_one(
            "SELECT holdfast.commit_model_step($1, $2, $3, $4, $5, $6, $7)",
            &[
                &claim.agent_id,
                &claim.epoch,
                &step.input_ids,
                &message,
                &tool_calls,
                &step.usage,
                &step.stop_reason,
            ],
        )
        .await?;
    Ok(row.get(0))
}

/// Save one tool call's result and its event (the agent stays leased).
pub async fn commit_tool_result(
    client: &impl GenericClient,
    claim: Claim,
    tool_call: Uuid,
    output: &Value,
    is_error: bool,
) -> Result<Uuid> {
    let row = client
        .query_one(
            "SELECT holdfast.commit_tool_result($1, $2, $3, $4, $5)",
            &[&claim.agent_id, &claim.epoch, &tool_call, output, &is_error],
        )
        .await?;
    Ok(row.get(0))
}

/// Create an agent; an invalid config is [`Error::Invalid`] naming the field.
pub async fn create_agent(
    client: &impl GenericClient,
    project: Uuid,
    config: &Value,
) -> Result<Uuid> {
    let row = client
        .query_one("SELECT holdfast.create_agent($1, $2)", &[&project, config])
        .await?;
    Ok(row.get(0))
}

/// Add an input, idempotently when `idempotency_key` is given.
pub async fn create_input(
    client: &impl GenericClient,
    agent: Uuid,
    content: &Value,
    idempotency_key: Option<&str>,
) -> Result<InputCreated> {
    let row = client
        .query_one(
            "SELECT input_id, replayed FROM holdfast.create_input_or_replay($1, $2, $3)",
            &[&agent, content, &idempotency_key],
        )
        .await?;
    Ok(InputCreated {
        input_id: row.get(0),
        replayed: row.get(1),
    })
}

/// One maintenance pass (expired and orphaned leases, due delays).
pub async fn maintenance_tick(client: &impl GenericClient) -> Result<MaintenanceReport> {
    let row = client
        .query_one("SELECT holdfast.maintenance_tick()", &[])
        .await?;
    let report: Value = row.get(0);
    serde_json::from_value(report)
        .map_err(|e| Error::Migration(format!("maintenance_tick report: {e}")))
}

/// Events of an agent after `after_seq`, oldest first, at most `limit`.
pub async fn events_after(
    client: &impl GenericClient,
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
            seq: r.get(0),
            id: r.get(1),
            agent_id: r.get(2),
            kind: r.get(3),
            data: r.get(4),
            created_at: r.get(5),
        })
        .collect())
}

/// Create a project if it does not exist; returns its id.
pub async fn ensure_project(client: &impl GenericClient, name: &str) -> Result<Uuid> {
    let row = client
        .query_one("SELECT holdfast.ensure_project($1)", &[&name])
        .await?;
    Ok(row.get(0))
}

/// The agents per state (the `holdfast.queue_depth` view).
pub async fn queue_depth(client: &impl GenericClient) -> Result<Vec<(String, i64)>> {
    let rows = client
        .query(
            "SELECT state, agents FROM holdfast.queue_depth ORDER BY state",
            &[],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

fn parse_state(text: String) -> Result<AgentState> {
    text.parse().map_err(|message| Error::Invalid {
        field: Some("state".into()),
        message,
    })
}

/// Record a retryable model failure and release the agent until `delay` has
/// passed; past `max_retries` the turn fails (`retries_exhausted`) and the
/// inputs the call saw (`input_ids`) become history with the error.
/// Returns true while retrying, false when the budget is exhausted.
pub async fn commit_model_retry(
    client: &impl GenericClient,
    claim: Claim,
    error: &Value,
    delay: Duration,
    max_retries: i32,
    input_ids: &[Uuid],
) -> Result<bool> {
    let row = client
        .query_one(
            "SELECT holdfast.commit_model_retry($1, $2, $3, $4::text::interval, $5, $6)",
            &[
                &claim.agent_id,
                &claim.epoch,
                error,
                &to_interval(delay),
                &max_retries,
                &input_ids,
            ],
        )
        .await?;
    Ok(row.get::<_, String>(0) == "retrying")
}

/// End the turn with a fatal model error (no retry).
pub async fn fail_turn(
    client: &impl GenericClient,
    claim: Claim,
    error_type: &str,
    message: &str,
    input_ids: &[Uuid],
) -> Result<()> {
    client
        .execute(
            "SELECT holdfast.fail_turn($1, $2, $3, $4, $5)",
            &[
                &claim.agent_id,
                &claim.epoch,
                &error_type,
                &message,
                &input_ids,
            ],
        )
        .await?;
    Ok(())
}

/// The worker half of a cancel: close the turn as cancelled and release.
pub async fn complete_cancel(client: &impl GenericClient, claim: Claim) -> Result<AgentState> {
    let row = client
        .query_one(
            "SELECT holdfast.complete_cancel($1, $2)",
            &[&claim.agent_id, &claim.epoch],
        )
        .await?;
    parse_state(row.get(0))
}

/// Send a live text delta to stream listeners (never saved).
pub async fn stream_delta(client: &impl GenericClient, claim: Claim, text: &str) -> Result<()> {
    client
        .execute(
            "SELECT holdfast.stream_delta($1, $2, $3)",
            &[&claim.agent_id, &claim.epoch, &text],
        )
        .await?;
    Ok(())
}

/// Everything a step is decided and built from, read fresh at every attempt.
pub async fn load_step_context(client: &impl GenericClient, agent: Uuid) -> Result<StepContext> {
    let row = client
        .query_opt(
            "SELECT config, turn_open, model_attempts, cancel_requested_at IS NOT NULL, \
                    context_summary, context_start_seq \
               FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await?
        .ok_or_else(|| Error::NotFound(format!("agent {agent} not found")))?;
    let (config, turn_open, model_attempts, cancel_requested, context_summary) =
        (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4));
    let context_start_seq: i64 = row.get(5);
    let messages = client
        .query(
            "SELECT seq, role, content, step_id FROM holdfast.messages \
              WHERE agent_id = $1 AND seq >= $2 ORDER BY seq",
            &[&agent, &context_start_seq],
        )
        .await?
        .iter()
        .map(|r| HistoryMessage {
            seq: r.get(0),
            role: r.get(1),
            content: r.get(2),
            step_id: r.get(3),
        })
        .collect();
    let tool_calls = client
        .query(
            "SELECT id, step_id, position, provider_id, name, input, kind, status, output, is_error \
               FROM holdfast.tool_calls WHERE agent_id = $1 ORDER BY created_at, step_id, position",
            &[&agent],
        )
        .await?
        .iter()
        .map(|r| ToolCallRecord {
            id: r.get(0),
            step_id: r.get(1),
            position: r.get(2),
            provider_id: r.get(3),
            name: r.get(4),
            input: r.get(5),
            kind: r.get(6),
            status: r.get(7),
            output: r.get(8),
            is_error: r.get(9),
        })
        .collect();
    let pending_inputs = client
        .query(
            "SELECT id, content FROM holdfast.inputs \
              WHERE agent_id = $1 AND consumed_at IS NULL ORDER BY created_at, id",
            &[&agent],
        )
        .await?
        .iter()
        .map(|r| PendingInput {
            id: r.get(0),
            content: r.get(1),
        })
        .collect();
    Ok(StepContext {
        agent_id: agent,
        config,
        turn_open,
        model_attempts,
        cancel_requested,
        context_summary,
        messages,
        tool_calls,
        pending_inputs,
    })
}

/// Decide an approval (`approve` | `deny`): first decision wins; the same
/// decision again by the same person is accepted again. Returns the
/// approval's status after the call.
pub async fn answer_approval(
    client: &impl GenericClient,
    approval: Uuid,
    decision: &str,
    by: &str,
    reason: Option<&str>,
) -> Result<String> {
    let row = client
        .query_one(
            "SELECT (holdfast.answer_approval($1, $2, $3, $4)).status",
            &[&approval, &decision, &by, &reason],
        )
        .await?;
    Ok(row.get(0))
}

/// Answer a question: first answer wins; the same answer again by the same
/// person is accepted again.
pub async fn answer_question(
    client: &impl GenericClient,
    question: Uuid,
    answer: &str,
    by: &str,
) -> Result<()> {
    client
        .execute(
            "SELECT holdfast.answer_question($1, $2, $3)",
            &[&question, &answer, &by],
        )
        .await?;
    Ok(())
}

/// Create a subagent for a pending `spawn_subagent` call (one transaction);
/// returns the child's id.
pub async fn spawn_subagent(
    client: &impl GenericClient,
    claim: Claim,
    tool_call: Uuid,
    config: &Value,
    prompt: &str,
) -> Result<Uuid> {
    let row = client
        .query_one(
            "SELECT holdfast.spawn_subagent($1, $2, $3, $4, $5)",
            &[&claim.agent_id, &claim.epoch, &tool_call, config, &prompt],
        )
        .await?;
    Ok(row.get(0))
}

/// Save a compaction summary covering every message before `keep_from_seq`,
/// and release the agent for its next model call.
pub async fn commit_compaction(
    client: &impl GenericClient,
    claim: Claim,
    summary: &str,
    keep_from_seq: i64,
    usage: &Value,
) -> Result<()> {
    client
        .execute(
            "SELECT holdfast.commit_compaction($1, $2, $3, $4, $5)",
            &[
                &claim.agent_id,
                &claim.epoch,
                &summary,
                &keep_from_seq,
                usage,
            ],
        )
        .await?;
    Ok(())
}
