//! Typed calls of Holdfast's SQL functions. This module is the one place in
//! Rust that knows their names and signatures; workers and the API call these
//! wrappers, never ad-hoc SQL. Each takes any client (a pooled connection, a
//! dedicated session or a transaction).

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};
use postgres_types::ToSql;
use serde_json::Value;
use tokio_postgres::{GenericClient, Row, Statement};
use uuid::Uuid;

use crate::config::AgentConfig;
use crate::connect::Session;
use crate::context::{HistoryMessage, PendingInput, StepContext, ToolCallRecord};
use crate::domain::{
    Agent, AgentState, ApiKeyCreated, ApiKeyOwner, ApiKeyRevoked, CancelOutcome, Claim, Event,
    Input, InputCreated, LimitMaxima, MaintenanceReport, ModelStep, Renewal, ToolCall,
    ToolCallStatus, ToolKind,
};
use crate::domain::{Approval, ApprovalStatus, Question, QuestionStatus, StuckAgent, WorkerLeases};
use crate::domain::{
    ClaimedCommand, CommandResult, CommandResultOutcome, Heartbeat, MachineIdentity,
    MachineRegistered, MachineStatus, MachineTickReport, MachineWake,
};
use crate::domain::{
    ClaimedWebhookDelivery, CreatedWebhookEndpoint, RecordedAttempt, WebhookDelivery,
    WebhookDeliveryFilter, WebhookDeliveryStatus, WebhookEndpoint, WebhookQueueStats,
};
use crate::domain::{
    ModelDestination, ModelEndpoint, ModelRoute, NewModelEndpoint, ProviderKeyStatus, SealedKey,
};
use crate::duration::to_interval;
use crate::error::{Error, Result};
use crate::pg_text::{make_storable, storable_str};
use crate::provider::ModelConfig;

pub mod console;

/// A client for the hot path (claims, context loads, commits): it runs a
/// statement prepared once per connection where it can keep one, so repeated
/// calls skip the parse round trip and the planning of the top-level query.
/// A pooled connection wrapped in [`Pooled`] and the worker's claim
/// [`Session`] keep their statements; any other client (a bare
/// `tokio_postgres` client or transaction) prepares on each call, as an
/// unnamed statement would (same round trips), so tests and tools pass
/// whatever they hold.
pub trait Prepared {
    type Client: GenericClient;
    /// The connection to run the statement on.
    fn client(&self) -> &Self::Client;
    /// `sql`, prepared on this connection (from its cache when it has one).
    fn statement(
        &self,
        sql: &'static str,
    ) -> impl Future<Output = std::result::Result<Statement, tokio_postgres::Error>> + Send;
}

impl<C: GenericClient> Prepared for C {
    type Client = C;
    fn client(&self) -> &C {
        self
    }
    fn statement(
        &self,
        sql: &'static str,
    ) -> impl Future<Output = std::result::Result<Statement, tokio_postgres::Error>> + Send {
        GenericClient::prepare(self, sql)
    }
}

/// A pooled connection whose statements stay prepared for its lifetime
/// (deadpool's per-connection statement cache).
pub struct Pooled<'a>(pub &'a deadpool_postgres::ClientWrapper);

impl Prepared for Pooled<'_> {
    type Client = tokio_postgres::Client;
    fn client(&self) -> &tokio_postgres::Client {
        self.0
    }
    fn statement(
        &self,
        sql: &'static str,
    ) -> impl Future<Output = std::result::Result<Statement, tokio_postgres::Error>> + Send {
        self.0.prepare_cached(sql)
    }
}

impl Prepared for Session {
    type Client = tokio_postgres::Client;
    fn client(&self) -> &tokio_postgres::Client {
        &self.client
    }
    fn statement(
        &self,
        sql: &'static str,
    ) -> impl Future<Output = std::result::Result<Statement, tokio_postgres::Error>> + Send {
        self.prepared(sql)
    }
}

/// `sql` with `params` as a statement prepared on `client` ([`Prepared`]):
/// the rows.
async fn query_prepared(
    client: &impl Prepared,
    sql: &'static str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<Row>> {
    let statement = client.statement(sql).await?;
    Ok(client.client().query(&statement, params).await?)
}

/// As [`query_prepared`], for exactly one row.
async fn query_one_prepared(
    client: &impl Prepared,
    sql: &'static str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Row> {
    let statement = client.statement(sql).await?;
    Ok(client.client().query_one(&statement, params).await?)
}

/// As [`query_prepared`], for the count of rows affected.
async fn execute_prepared(
    client: &impl Prepared,
    sql: &'static str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<u64> {
    let statement = client.statement(sql).await?;
    Ok(client.client().execute(&statement, params).await?)
}

/// Claim up to `max` ready agents for `worker`. Call it on the worker's own
/// long-lived session: the session's backend pid is recorded on each claim,
/// and maintenance releases the claims of a session that dies.
pub async fn claim_agents(
    client: &impl Prepared,
    worker: &str,
    max: i32,
    ttl: Duration,
) -> Result<Vec<Claim>> {
    let rows = query_prepared(
        client,
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
    client: &impl Prepared,
    worker: &str,
    claims: &[Claim],
    ttl: Duration,
) -> Result<Vec<Renewal>> {
    let agents: Vec<Uuid> = claims.iter().map(|c| c.agent_id).collect();
    let epochs: Vec<i64> = claims.iter().map(|c| c.epoch).collect();
    let rows = query_prepared(
        client,
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

/// Write the operator's limit maxima (`holdfast.set_limit_maxima`).
pub async fn set_limit_maxima(client: &impl GenericClient, maxima: &LimitMaxima) -> Result<()> {
    client
        .execute(
            "SELECT holdfast.set_limit_maxima($1, $2, $3, $4, $5)",
            &[
                &maxima.model_steps_per_turn,
                &maxima.tool_calls_per_response,
                &maxima.subagent_depth,
                &maxima.live_children,
                &maxima.descendants,
            ],
        )
        .await?;
    Ok(())
}

/// Cap (or with `None`, uncap) how many of a project's agents run at once.
pub async fn set_project_max_running(
    client: &impl GenericClient,
    project_name: &str,
    max_running: Option<i32>,
) -> Result<()> {
    client
        .execute(
            "SELECT holdfast.set_project_max_running($1, $2)",
            &[&project_name, &max_running],
        )
        .await?;
    Ok(())
}

/// Give up a lease; the agent's next state is settled from its saved facts.
/// `run_after` delays the next claim (a durable backoff).
pub async fn release_agent(
    client: &impl Prepared,
    claim: Claim,
    run_after: Option<DateTime<Utc>>,
) -> Result<AgentState> {
    let row = query_one_prepared(
        client,
        "SELECT holdfast.release_agent($1, $2, $3)",
        &[&claim.agent_id, &claim.epoch, &run_after],
    )
    .await?;
    parse_state(row.get(0))
}

/// Mark an external tool call running before its IO (never rerun after a crash).
pub async fn start_tool_call(client: &impl Prepared, claim: Claim, tool_call: Uuid) -> Result<()> {
    execute_prepared(
        client,
        "SELECT holdfast.start_tool_call($1, $2, $3)",
        &[&claim.agent_id, &claim.epoch, &tool_call],
    )
    .await?;
    Ok(())
}

/// One row of `holdfast.model_step[]`: a model response made storable
/// (pg_text), for every caller of the model-step commits.
#[derive(Debug, ToSql)]
#[postgres(name = "model_step")]
struct ModelStepRow {
    agent_id: Uuid,
    epoch: i64,
    input_ids: Vec<Uuid>,
    message: Value,
    tool_calls: Value,
    usage: Value,
    stop_reason: Option<String>,
}

impl ModelStepRow {
    fn new(claim: Claim, step: &ModelStep) -> Result<ModelStepRow> {
        let mut message = Value::Array(step.message.clone());
        make_storable(&mut message);
        let mut tool_calls =
            serde_json::to_value(&step.tool_calls).map_err(|e| Error::Invalid {
                field: Some("tool_calls".into()),
                message: e.to_string(),
            })?;
        make_storable(&mut tool_calls);
        let mut usage = step.usage.clone();
        make_storable(&mut usage);
        Ok(ModelStepRow {
            agent_id: claim.agent_id,
            epoch: claim.epoch,
            input_ids: step.input_ids.clone(),
            message,
            tool_calls,
            usage,
            stop_reason: step
                .stop_reason
                .as_deref()
                .map(|s| storable_str(s).into_owned()),
        })
    }
}

/// Save a model response with its inputs, tool calls and events, and release
/// the agent, in one transaction (in SQL, the group commit's batch of one).
/// Returns the step id; a lost lease is [`Error::LeaseLost`], a malformed
/// response [`Error::Invalid`].
pub async fn commit_model_step(
    client: &impl Prepared,
    claim: Claim,
    step: &ModelStep,
) -> Result<Uuid> {
    let row = ModelStepRow::new(claim, step)?;
    let row = query_one_prepared(
        client,
        "SELECT holdfast.commit_model_step($1, $2, $3, $4, $5, $6, $7)",
        &[
            &row.agent_id,
            &row.epoch,
            &row.input_ids,
            &row.message,
            &row.tool_calls,
            &row.usage,
            &row.stop_reason,
        ],
    )
    .await?;
    Ok(row.get(0))
}

/// Save several agents' model responses in one statement (the worker's
/// group commit, `holdfast.commit_model_steps`), each agent fenced on its
/// own: a lost lease or a malformed response refuses only that agent's step.
/// Returns each step's agent and outcome (the step id, or the error a single
/// commit would have raised), in agent id order. `Err` only when the whole
/// batch failed (nothing of it was saved when `client` commits nothing
/// else).
pub async fn commit_model_steps(
    client: &impl Prepared,
    steps: &[(Claim, &ModelStep)],
) -> Result<Vec<(Uuid, Result<Uuid>)>> {
    let mut rows = Vec::with_capacity(steps.len());
    let mut refused = Vec::new();
    for (claim, step) in steps {
        match ModelStepRow::new(*claim, step) {
            Ok(row) => rows.push(row),
            Err(error) => refused.push((claim.agent_id, Err(error))),
        }
    }
    let mut outcomes = refused;
    if rows.is_empty() {
        return Ok(outcomes);
    }
    for row in query_prepared(
        client,
        "SELECT agent_id, outcome, step_id, message, field FROM holdfast.commit_model_steps($1)",
        &[&rows],
    )
    .await?
    {
        let message = || row.get::<_, Option<String>>("message").unwrap_or_default();
        let outcome = match row.get::<_, &str>("outcome") {
            "committed" => Ok(row.get("step_id")),
            "lease_lost" => Err(Error::LeaseLost(message())),
            "not_found" => Err(Error::NotFound(message())),
            _ => Err(Error::Invalid {
                field: row.get("field"),
                message: message(),
            }),
        };
        outcomes.push((row.get("agent_id"), outcome));
    }
    Ok(outcomes)
}

/// Save one tool call's result and its event (the agent stays leased).
pub async fn commit_tool_result(
    client: &impl Prepared,
    claim: Claim,
    tool_call: Uuid,
    output: &Value,
    is_error: bool,
) -> Result<Uuid> {
    // A tool's result is made storable, never refused: it is already in hand.
    let mut output = output.clone();
    make_storable(&mut output);
    let row = query_one_prepared(
        client,
        "SELECT holdfast.commit_tool_result($1, $2, $3, $4, $5)",
        &[
            &claim.agent_id,
            &claim.epoch,
            &tool_call,
            &output,
            &is_error,
        ],
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

// ---------------------------------------------------------------------------
// API keys, agent changes, cancellation, custom tool results (0002_api.sql),
// and the reads the HTTP API serves. Reads are scoped by project where a
// client names the object, so another project's object reads as missing.
// ---------------------------------------------------------------------------

/// Create an API key for `project_name` (the project is created if needed).
/// The clear key is in the result and nowhere else.
pub async fn create_api_key(
    client: &impl GenericClient,
    project_name: &str,
) -> Result<ApiKeyCreated> {
    let row = client
        .query_one(
            "SELECT key_id, project_id, prefix, key FROM holdfast.create_api_key($1)",
            &[&project_name],
        )
        .await?;
    Ok(ApiKeyCreated {
        key_id: row.get(0),
        project_id: row.get(1),
        prefix: row.get(2),
        key: row.get(3),
    })
}

/// Who `key` speaks for; `None` when it is unknown or revoked.
pub async fn authenticate_api_key(
    client: &impl GenericClient,
    key: &str,
) -> Result<Option<ApiKeyOwner>> {
    let row = client
        .query_opt(
            "SELECT key_id, project_id FROM holdfast.authenticate_api_key($1)",
            &[&key],
        )
        .await?;
    Ok(row.map(|r| ApiKeyOwner {
        key_id: r.get(0),
        project_id: r.get(1),
    }))
}

/// Whether the key `key_id` still authenticates (exists, not revoked).
pub async fn api_key_active(client: &impl GenericClient, key_id: Uuid) -> Result<bool> {
    let row = client
        .query_one("SELECT holdfast.api_key_active($1)", &[&key_id])
        .await?;
    Ok(row.get(0))
}

/// Revoke the key named by its id, prefix or full text (idempotent).
pub async fn revoke_api_key(client: &impl GenericClient, key_ref: &str) -> Result<ApiKeyRevoked> {
    let row = client
        .query_one(
            "SELECT key_id, project_id, prefix, revoked_at FROM holdfast.revoke_api_key($1)",
            &[&key_ref],
        )
        .await?;
    Ok(ApiKeyRevoked {
        key_id: row.get(0),
        project_id: row.get(1),
        prefix: row.get(2),
        revoked_at: row.get(3),
    })
}

/// The config is masked (`mask_config_secrets`): these rows are for clients.
const AGENT_COLUMNS: &str =
    "id, project_id, holdfast.mask_config_secrets(config), state, turn_open, cancel_requested_at, \
                             last_event_seq, created_at, updated_at, state_changed_at";

fn agent_from_row(row: &tokio_postgres::Row) -> Result<Agent> {
    Ok(Agent {
        id: row.get(0),
        project_id: row.get(1),
        config: row.get(2),
        state: parse_state(row.get(3))?,
        turn_open: row.get(4),
        cancel_requested_at: row.get(5),
        last_event_seq: row.get(6),
        created_at: row.get(7),
        updated_at: row.get(8),
        state_changed_at: row.get(9),
    })
}

/// An agent of `project`, its config masked for showing; `None` when it
/// does not exist or belongs to another project.
pub async fn get_agent(
    client: &impl GenericClient,
    project: Uuid,
    agent: Uuid,
) -> Result<Option<Agent>> {
    let row = client
        .query_opt(
            &format!(
                "SELECT {AGENT_COLUMNS} FROM holdfast.agents WHERE id = $1 AND project_id = $2"
            ),
            &[&agent, &project],
        )
        .await?;
    row.as_ref().map(agent_from_row).transpose()
}

/// True when `agent` exists in `project` (a cheap scope check before a write).
pub async fn agent_in_project(
    client: &impl GenericClient,
    project: Uuid,
    agent: Uuid,
) -> Result<bool> {
    let row = client
        .query_opt(
            "SELECT 1 FROM holdfast.agents WHERE id = $1 AND project_id = $2",
            &[&agent, &project],
        )
        .await?;
    Ok(row.is_some())
}

/// Agents of `project` (configs masked for showing), oldest first (ids are
/// UUIDv7), after the id `after`, in `state` when given, at most `limit`.
pub async fn list_agents(
    client: &impl GenericClient,
    project: Uuid,
    state: Option<AgentState>,
    after: Option<Uuid>,
    limit: i64,
) -> Result<Vec<Agent>> {
    let state = state.map(AgentState::as_str);
    let rows = client
        .query(
            &format!(
                "SELECT {AGENT_COLUMNS} FROM holdfast.agents \
                  WHERE project_id = $1 AND ($2::text IS NULL OR state = $2) \
                    AND ($3::uuid IS NULL OR id > $3) \
                  ORDER BY id LIMIT $4"
            ),
            &[&project, &state, &after, &limit],
        )
        .await?;
    rows.iter().map(agent_from_row).collect()
}

/// The seq of an agent's latest event; `None` when the agent does not exist.
pub async fn last_event_seq(client: &impl GenericClient, agent: Uuid) -> Result<Option<i64>> {
    let row = client
        .query_opt(
            "SELECT last_event_seq FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await?;
    Ok(row.map(|r| r.get(0)))
}

/// Replace an agent's config (`config.updated`); returns the config in
/// force, masked. Header values `"***"` keep the stored values.
pub async fn update_agent_config(
    client: &impl GenericClient,
    agent: Uuid,
    config: &Value,
) -> Result<Value> {
    let row = client
        .query_one(
            "SELECT holdfast.update_agent_config($1, $2)",
            &[&agent, config],
        )
        .await?;
    Ok(row.get(0))
}

/// Change an agent's config by an RFC 7396 merge patch, applied under the
/// agent's row lock; returns the config in force, masked.
pub async fn patch_agent_config(
    client: &impl GenericClient,
    agent: Uuid,
    patch: &Value,
) -> Result<Value> {
    let row = client
        .query_one(
            "SELECT holdfast.patch_agent_config($1, $2)",
            &[&agent, patch],
        )
        .await?;
    Ok(row.get(0))
}

/// Archive an idle agent (no new inputs); [`Error::Conflict`] otherwise.
pub async fn archive_agent(client: &impl GenericClient, agent: Uuid) -> Result<()> {
    client
        .execute("SELECT holdfast.archive_agent($1)", &[&agent])
        .await?;
    Ok(())
}

/// Cancel an agent's current turn: at once, or by asking its worker to stop.
pub async fn request_cancel(client: &impl GenericClient, agent: Uuid) -> Result<CancelOutcome> {
    let row = client
        .query_one("SELECT holdfast.request_cancel($1)", &[&agent])
        .await?;
    let outcome: String = row.get(0);
    match outcome.as_str() {
        "requested" => Ok(CancelOutcome::Requested),
        "cancelled" => Ok(CancelOutcome::Cancelled),
        other => Err(Error::Invalid {
            field: Some("request_cancel".into()),
            message: format!("unexpected outcome {other:?}"),
        }),
    }
}

/// The columns [`tool_call_from_row`] reads, as a literal (a macro, so that
/// statements built from it stay `&'static str` and can be prepared once).
macro_rules! tool_call_columns {
    () => {
        "id, agent_id, step_id, position, provider_id, name, input, kind, \
         status, output, is_error, created_at, completed_at"
    };
}
const TOOL_CALL_COLUMNS: &str = tool_call_columns!();

fn tool_call_from_row(row: &tokio_postgres::Row) -> Result<ToolCall> {
    let invalid = |field: &str, message: String| Error::Invalid {
        field: Some(field.into()),
        message,
    };
    Ok(ToolCall {
        id: row.get(0),
        agent_id: row.get(1),
        step_id: row.get(2),
        position: row.get(3),
        provider_id: row.get(4),
        name: row.get(5),
        input: row.get(6),
        kind: row
            .get::<_, &str>(7)
            .parse()
            .map_err(|m| invalid("kind", m))?,
        status: row
            .get::<_, &str>(8)
            .parse()
            .map_err(|m| invalid("status", m))?,
        output: row.get(9),
        is_error: row.get(10),
        created_at: row.get(11),
        completed_at: row.get(12),
    })
}

/// Post a custom tool call's result (first result wins: a later one is
/// [`Error::Conflict`]); returns the completed call.
pub async fn submit_tool_result(
    client: &impl Prepared,
    tool_call: Uuid,
    output: &Value,
    is_error: bool,
) -> Result<ToolCall> {
    let row = query_one_prepared(
        client,
        concat!(
            "SELECT ",
            tool_call_columns!(),
            " FROM holdfast.submit_tool_result($1, $2, $3)"
        ),
        &[&tool_call, output, &is_error],
    )
    .await?;
    tool_call_from_row(&row)
}

/// A tool call of `project`'s agents; `None` when missing or another project's.
pub async fn get_tool_call(
    client: &impl GenericClient,
    project: Uuid,
    tool_call: Uuid,
) -> Result<Option<ToolCall>> {
    let row = client
        .query_opt(
            &format!(
                "SELECT {} FROM holdfast.tool_calls t JOIN holdfast.agents a ON a.id = t.agent_id \
                  WHERE t.id = $1 AND a.project_id = $2",
                qualified(TOOL_CALL_COLUMNS, "t")
            ),
            &[&tool_call, &project],
        )
        .await?;
    row.as_ref().map(tool_call_from_row).transpose()
}

/// An agent's tool calls in `statuses` (all when empty), of `kind` when
/// given, in the order the model asked for them.
pub async fn list_tool_calls(
    client: &impl GenericClient,
    agent: Uuid,
    statuses: &[ToolCallStatus],
    kind: Option<ToolKind>,
    limit: i64,
) -> Result<Vec<ToolCall>> {
    let statuses: Vec<&str> = statuses.iter().map(|s| s.as_str()).collect();
    let kind = kind.map(ToolKind::as_str);
    let rows = client
        .query(
            &format!(
                "SELECT {TOOL_CALL_COLUMNS} FROM holdfast.tool_calls \
                  WHERE agent_id = $1 AND (cardinality($2::text[]) = 0 OR status = ANY ($2)) \
                    AND ($3::text IS NULL OR kind = $3) \
                  ORDER BY created_at, step_id, position LIMIT $4"
            ),
            &[&agent, &statuses, &kind, &limit],
        )
        .await?;
    rows.iter().map(tool_call_from_row).collect()
}

/// One input by id.
pub async fn get_input(client: &impl GenericClient, input: Uuid) -> Result<Option<Input>> {
    let row = client
        .query_opt(
            "SELECT id, agent_id, content, created_at FROM holdfast.inputs WHERE id = $1",
            &[&input],
        )
        .await?;
    Ok(row.map(|r| Input {
        id: r.get(0),
        agent_id: r.get(1),
        content: r.get(2),
        created_at: r.get(3),
    }))
}

/// Events written so far, over all agents: the sum of the per-agent gap-free
/// sequences, exact and monotonic (for the `/metrics` counter).
pub async fn events_written(client: &impl GenericClient) -> Result<i64> {
    let row = client
        .query_one(
            "SELECT coalesce(sum(last_event_seq), 0)::bigint FROM holdfast.agents",
            &[],
        )
        .await?;
    Ok(row.get(0))
}

/// `a, b` → `t.a, t.b`.
fn qualified(columns: &str, alias: &str) -> String {
    columns
        .split(',')
        .map(|c| format!("{alias}.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ")
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
    // The error text comes from the provider.
    let mut error = error.clone();
    make_storable(&mut error);
    let row = client
        .query_one(
            "SELECT holdfast.commit_model_retry($1, $2, $3, $4::text::interval, $5, $6)",
            &[
                &claim.agent_id,
                &claim.epoch,
                &error,
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
                &storable_str(error_type),
                &storable_str(message),
                &input_ids,
            ],
        )
        .await?;
    Ok(())
}

/// A step failed with something other than a lost lease: count it, and
/// release the agent until `delay` from now (`true`), or, at the
/// `max_attempts`-th failure in a row, end the turn with `internal_error`
/// (`false`). `message` may carry a model's or tool's text: made storable.
pub async fn fail_step(
    client: &impl GenericClient,
    claim: Claim,
    message: &str,
    delay: Duration,
    max_attempts: i32,
) -> Result<bool> {
    let row = client
        .query_one(
            "SELECT holdfast.fail_step($1, $2, $3, $4::text::interval, $5)",
            &[
                &claim.agent_id,
                &claim.epoch,
                &storable_str(message),
                &to_interval(delay),
                &max_attempts,
            ],
        )
        .await?;
    Ok(row.get::<_, String>(0) == "retrying")
}

/// How many steps of `agent` failed in a row (see [`fail_step`]).
pub async fn step_failures(client: &impl GenericClient, agent: Uuid) -> Result<i32> {
    let row = client
        .query_one(
            "SELECT step_failures FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await?;
    Ok(row.get(0))
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
pub async fn stream_delta(client: &impl Prepared, claim: Claim, text: &str) -> Result<()> {
    execute_prepared(
        client,
        "SELECT holdfast.stream_delta($1, $2, $3)",
        &[&claim.agent_id, &claim.epoch, &storable_str(text)],
    )
    .await?;
    Ok(())
}

/// Everything a step is decided and built from, read fresh at every attempt.
/// The four reads are sent together (pipelined on the one connection), so
/// the load costs about one round trip, not four. Each read is its own
/// snapshot, as before: the agent's lease keeps what they read stable.
pub async fn load_step_context(client: &impl Prepared, agent: Uuid) -> Result<StepContext> {
    let (agent_sql, messages_sql, tool_calls_sql, inputs_sql) = futures::try_join!(
        client.statement(
            "SELECT config, turn_open, model_attempts, cancel_requested_at IS NOT NULL, \
                    context_summary \
               FROM holdfast.agents WHERE id = $1",
        ),
        // The messages from the agent's context start on (the subquery
        // reads the same row the first statement does).
        client.statement(
            "SELECT seq, role, content, step_id FROM holdfast.messages \
              WHERE agent_id = $1 \
                AND seq >= (SELECT context_start_seq FROM holdfast.agents WHERE id = $1) \
              ORDER BY seq",
        ),
        client.statement(
            "SELECT id, step_id, position, provider_id, name, input, kind, status, output, is_error \
               FROM holdfast.tool_calls WHERE agent_id = $1 ORDER BY created_at, step_id, position",
        ),
        client.statement(
            "SELECT id, content FROM holdfast.inputs \
              WHERE agent_id = $1 AND consumed_at IS NULL ORDER BY created_at, id",
        ),
    )?;
    let db = client.client();
    let by_agent: &[&(dyn tokio_postgres::types::ToSql + Sync)] = &[&agent];
    let (row, messages, tool_calls, pending_inputs) = futures::try_join!(
        db.query_opt(&agent_sql, by_agent),
        db.query(&messages_sql, by_agent),
        db.query(&tool_calls_sql, by_agent),
        db.query(&inputs_sql, by_agent),
    )?;
    let row = row.ok_or_else(|| Error::NotFound(format!("agent {agent} not found")))?;
    // Parsed once per step: every use below reads the typed config.
    let config = AgentConfig::from_value(&row.get::<_, Value>(0))?;
    let (turn_open, model_attempts, cancel_requested, context_summary) =
        (row.get(1), row.get(2), row.get(3), row.get(4));
    let messages = messages
        .iter()
        .map(|r| HistoryMessage {
            seq: r.get(0),
            role: r.get(1),
            content: r.get(2),
            step_id: r.get(3),
        })
        .collect();
    let tool_calls = tool_calls
        .iter()
        .map(|r| {
            Ok(ToolCallRecord {
                id: r.get(0),
                step_id: r.get(1),
                position: r.get(2),
                provider_id: r.get(3),
                name: r.get(4),
                input: r.get(5),
                kind: r
                    .get::<_, &str>(6)
                    .parse()
                    .map_err(|message| Error::Invalid {
                        field: Some("kind".into()),
                        message,
                    })?,
                status: r.get(7),
                output: r.get(8),
                is_error: r.get(9),
            })
        })
        .collect::<Result<_>>()?;
    let pending_inputs = pending_inputs
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
/// returns the child's id, or `None` when a subagent limit refused the spawn
/// (the call is then completed with an error result naming the limit).
pub async fn spawn_subagent(
    client: &impl GenericClient,
    claim: Claim,
    tool_call: Uuid,
    config: &Value,
    prompt: &str,
) -> Result<Option<Uuid>> {
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
    let mut usage = usage.clone();
    make_storable(&mut usage);
    client
        .execute(
            "SELECT holdfast.commit_compaction($1, $2, $3, $4, $5)",
            &[
                &claim.agent_id,
                &claim.epoch,
                &storable_str(summary),
                &keep_from_seq,
                &usage,
            ],
        )
        .await?;
    Ok(())
}
// Webhooks (sql/0007_webhooks.sql).

/// Create a webhook endpoint in `project`; the answer carries the signing
/// secret (show it once). `allow_private` is the deployment's setting
/// ([`crate::egress::EgressPolicy::allows_any_special`] for webhooks). A bad url or event
/// list is [`Error::Invalid`] naming `url` or `events`.
pub async fn create_webhook_endpoint(
    client: &impl GenericClient,
    project: Uuid,
    url: &str,
    events: &Value,
    description: Option<&str>,
    allow_private: bool,
) -> Result<CreatedWebhookEndpoint> {
    let row = client
        .query_one(
            "SELECT id, url, events, description, secret, created_at \
               FROM holdfast.create_webhook_endpoint($1, $2, $3, $4, $5)",
            &[&project, &url, events, &description, &allow_private],
        )
        .await?;
    Ok(CreatedWebhookEndpoint {
        endpoint: WebhookEndpoint {
            id: row.get(0),
            url: row.get(1),
            events: row.get(2),
            description: row.get(3),
            created_at: row.get(5),
        },
        secret: row.get(4),
    })
}

/// Delete an endpoint of `project` (its pending deliveries end as failed);
/// [`Error::NotFound`] when it is not there.
pub async fn delete_webhook_endpoint(
    client: &impl GenericClient,
    project: Uuid,
    endpoint: Uuid,
) -> Result<()> {
    client
        .execute(
            "SELECT holdfast.delete_webhook_endpoint($1, $2)",
            &[&project, &endpoint],
        )
        .await?;
    Ok(())
}

/// The live endpoints of `project`, oldest first, without secrets.
pub async fn list_webhook_endpoints(
    client: &impl GenericClient,
    project: Uuid,
) -> Result<Vec<WebhookEndpoint>> {
    let rows = client
        .query(
            "SELECT id, url, events, description, created_at \
               FROM holdfast.list_webhook_endpoints($1)",
            &[&project],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| WebhookEndpoint {
            id: r.get(0),
            url: r.get(1),
            events: r.get(2),
            description: r.get(3),
            created_at: r.get(4),
        })
        .collect())
}

/// Deliveries of an endpoint of `project`, newest first;
/// [`Error::NotFound`] when the endpoint is not there.
pub async fn list_webhook_deliveries(
    client: &impl GenericClient,
    project: Uuid,
    endpoint: Uuid,
    filter: WebhookDeliveryFilter,
) -> Result<Vec<WebhookDelivery>> {
    let status = filter.status.map(|s| match s {
        WebhookDeliveryStatus::Pending => "pending",
        WebhookDeliveryStatus::Delivered => "delivered",
        WebhookDeliveryStatus::Failed => "failed",
    });
    let rows = client
        .query(
            "SELECT id, endpoint_id, agent_id, event_seq, event_id, event_type, status, attempts, \
                    last_status_code, last_error, next_attempt_at, last_attempt_at, created_at, \
                    delivered_at, failed_at \
               FROM holdfast.list_webhook_deliveries($1, $2, $3, $4, $5)",
            &[&project, &endpoint, &status, &filter.limit, &filter.before],
        )
        .await?;
    rows.iter()
        .map(|r| {
            Ok(WebhookDelivery {
                id: r.get(0),
                endpoint_id: r.get(1),
                agent_id: r.get(2),
                event_seq: r.get(3),
                event_id: r.get(4),
                event_type: r.get(5),
                status: r
                    .get::<_, String>(6)
                    .parse()
                    .map_err(|message| Error::Invalid {
                        field: Some("status".into()),
                        message,
                    })?,
                attempts: r.get(7),
                last_status_code: r.get(8),
                last_error: r.get(9),
                next_attempt_at: r.get(10),
                last_attempt_at: r.get(11),
                created_at: r.get(12),
                delivered_at: r.get(13),
                failed_at: r.get(14),
            })
        })
        .collect()
}

/// Claim up to `max` due webhook deliveries for one dispatcher, each held for
/// `lease` (then it comes due again by itself), at most `max_per_endpoint`
/// in flight per endpoint across all dispatchers.
pub async fn claim_webhook_deliveries(
    client: &impl GenericClient,
    max: i32,
    lease: Duration,
    max_per_endpoint: i32,
) -> Result<Vec<ClaimedWebhookDelivery>> {
    let rows = client
        .query(
            "SELECT delivery_id, attempt, endpoint_id, url, secret, due_at, \
                    event_seq, event_id, agent_id, event_type, event_data, event_created_at \
               FROM holdfast.claim_webhook_deliveries($1, $2::text::interval, $3)",
            &[&max, &to_interval(lease), &max_per_endpoint],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| ClaimedWebhookDelivery {
            delivery_id: r.get(0),
            attempt: r.get(1),
            endpoint_id: r.get(2),
            url: r.get(3),
            secret: r.get(4),
            due_at: r.get(5),
            event: Event {
                seq: r.get(6),
                id: r.get(7),
                agent_id: r.get(8),
                kind: r.get(9),
                data: r.get(10),
                created_at: r.get(11),
            },
        })
        .collect())
}

/// Record the outcome of one attempt: `status_code` when the receiver
/// answered, `error` otherwise (or with a non-2xx answer). Not a 2xx: retry
/// after `retry_delay`, but not past `retry_window` after the event.
pub async fn record_webhook_attempt(
    client: &impl GenericClient,
    delivery: &ClaimedWebhookDelivery,
    status_code: Option<i32>,
    error: Option<&str>,
    retry_delay: Duration,
    retry_window: Duration,
) -> Result<RecordedAttempt> {
    let row = client
        .query_one(
            "SELECT holdfast.record_webhook_attempt($1, $2, $3, $4, $5::text::interval, $6::text::interval)",
            &[
                &delivery.delivery_id,
                &delivery.attempt,
                &status_code,
                &error,
                &to_interval(retry_delay),
                &to_interval(retry_window),
            ],
        )
        .await?;
    match row.get::<_, &str>(0) {
        "delivered" => Ok(RecordedAttempt::Delivered),
        "pending" => Ok(RecordedAttempt::RetryScheduled),
        "failed" => Ok(RecordedAttempt::Failed),
        "superseded" => Ok(RecordedAttempt::Superseded),
        other => Err(Error::Invalid {
            field: Some("record_webhook_attempt".into()),
            message: format!("unexpected outcome {other:?}"),
        }),
    }
}

/// Give back claims whose attempt has no outcome (shutdown mid-request): they
/// are due again at once, for any dispatcher. Returns how many were released.
pub async fn release_webhook_deliveries(
    client: &impl GenericClient,
    claims: &[(Uuid, i32)],
) -> Result<i32> {
    let ids: Vec<Uuid> = claims.iter().map(|c| c.0).collect();
    let attempts: Vec<i32> = claims.iter().map(|c| c.1).collect();
    let row = client
        .query_one(
            "SELECT holdfast.release_webhook_deliveries($1, $2)",
            &[&ids, &attempts],
        )
        .await?;
    Ok(row.get(0))
}

/// The dispatchers' backlog: the oldest due delivery's wait, requests in flight.
pub async fn webhook_queue_stats(client: &impl GenericClient) -> Result<WebhookQueueStats> {
    let row = client
        .query_one(
            "SELECT coalesce((SELECT extract(epoch FROM holdfast.now() - min(next_attempt_at))::float8 \
                                FROM holdfast.webhook_deliveries \
                               WHERE status = 'pending' AND next_attempt_at <= holdfast.now()), 0), \
                    (SELECT count(*) FROM holdfast.webhook_deliveries \
                      WHERE claimed_until IS NOT NULL AND claimed_until > holdfast.now())",
            &[],
        )
        .await?;
    Ok(WebhookQueueStats {
        oldest_due_seconds: row.get(0),
        in_flight: row.get(1),
    })
}

// Machines and commands (sql/0008_machines.sql).

/// Register a machine in `project`; the answer carries its token (show it
/// once). A taken name is [`Error::Conflict`]; a bad name or wake URL is
/// [`Error::Invalid`] naming `name` or `wake_url`.
pub async fn register_machine(
    client: &impl GenericClient,
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
    client: &impl GenericClient,
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
        machine_id: row.get(0),
        name: row.get(1),
        wake_url: row.get(2),
        token_prefix: row.get(3),
        token: row.get(4),
        created_at: row.get(5),
    }
}

/// Delete a machine of `project`: its token is refused from now on and its
/// unfinished commands end (queued ones fail, accepted ones become
/// unknown), their agents moving on. Returns how many commands ended.
/// [`Error::NotFound`] for a machine of another project or a deleted one.
pub async fn delete_machine(
    client: &impl GenericClient,
    project: Uuid,
    machine: Uuid,
) -> Result<i32> {
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
    client: &impl GenericClient,
    token: &str,
) -> Result<Option<MachineIdentity>> {
    let row = client
        .query_opt(
            "SELECT machine_id, project_id FROM holdfast.authenticate_machine($1)",
            &[&token],
        )
        .await?;
    Ok(row.map(|r| MachineIdentity {
        machine_id: r.get(0),
        project_id: r.get(1),
    }))
}

/// Record a daemon's heartbeat; returns its time. A session that no longer
/// serves the machine (another daemon process started) is
/// [`Error::Conflict`].
pub async fn machine_heartbeat(
    client: &impl GenericClient,
    machine: Uuid,
    heartbeat: &Heartbeat,
) -> Result<DateTime<Utc>> {
    let commands = serde_json::to_value(&heartbeat.commands).map_err(|e| Error::Invalid {
        field: Some("commands".into()),
        message: e.to_string(),
    })?;
    let row = client
        .query_one(
            "SELECT holdfast.machine_heartbeat($1, $2, $3, $4)",
            &[&machine, &commands, &heartbeat.session, &heartbeat.started],
        )
        .await?;
    Ok(row.get(0))
}

/// Accept up to `max` of the machine's queued commands for the daemon
/// `session`: each is returned by this call and never again.
pub async fn claim_commands(
    client: &impl GenericClient,
    machine: Uuid,
    max: i32,
    session: Option<Uuid>,
) -> Result<Vec<ClaimedCommand>> {
    let rows = client
        .query(
            "SELECT command_id, tool_call_id, agent_id, command, timeout_secs, accepted_at \
               FROM holdfast.claim_commands($1, $2, $3)",
            &[&machine, &max, &session],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| ClaimedCommand {
            id: r.get(0),
            tool_call_id: r.get(1),
            agent_id: r.get(2),
            command: r.get(3),
            timeout_secs: r.get(4),
            accepted_at: r.get(5),
        })
        .collect())
}

/// Record a machine's result for one of its commands. Another machine's
/// command is [`Error::NotFound`]; a different result after one was
/// recorded is [`Error::Conflict`].
pub async fn submit_command_result(
    client: &impl GenericClient,
    machine: Uuid,
    command: Uuid,
    result: &CommandResult,
) -> Result<CommandResultOutcome> {
    let row = client
        .query_one(
            "SELECT holdfast.submit_command_result($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            &[
                &machine,
                &command,
                &result.state.as_str(),
                &result.exit_code,
                &result.stdout,
                &result.stderr,
                &result.stdout_truncated,
                &result.stderr_truncated,
                &result.timed_out,
                &result.signal,
            ],
        )
        .await?;
    match row.get::<_, &str>(0) {
        "delivered" => Ok(CommandResultOutcome::Delivered),
        "late" => Ok(CommandResultOutcome::Late),
        "duplicate" => Ok(CommandResultOutcome::Duplicate),
        other => Err(Error::Invalid {
            field: Some("submit_command_result".into()),
            message: format!("unexpected outcome {other:?}"),
        }),
    }
}

/// The machines of `project`, oldest first, with their online state.
pub async fn list_machines(
    client: &impl GenericClient,
    project: Uuid,
) -> Result<Vec<MachineStatus>> {
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
            id: r.get(0),
            name: r.get(1),
            wake_url: r.get(2),
            created_at: r.get(3),
            last_heartbeat_at: r.get(4),
            online: r.get(5),
            wake_until: r.get(6),
            queued_commands: r.get(7),
            running_commands: r.get(8),
        })
        .collect())
}

/// Start a wake attempt on a machine of `project` for `window`: its queued
/// commands wait that long instead of failing as offline.
pub async fn start_machine_wake(
    client: &impl GenericClient,
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
        machine_id: row.get(0),
        name: row.get(1),
        wake_url: row.get(2),
        wake_until: row.get(3),
    })
}

/// One machine sweep (lost, unaccepted, offline and unreachable commands),
/// enforcing `accept_timeout` and `offline_after`.
pub async fn machine_tick(
    client: &impl GenericClient,
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
// ---------------------------------------------------------------------------
// Approvals and questions (sql/0005_tools.sql) as clients read them, and the
// DBA views the status command shows. Reads are scoped by project where a
// client names the object, so another project's object reads as missing.
// ---------------------------------------------------------------------------

const APPROVAL_COLUMNS: &str = "p.id, p.agent_id, p.tool_call_id, t.name, t.input, p.status, \
                                p.decided_by, p.reason, p.created_at, p.decided_at";

fn approval_from_row(row: &tokio_postgres::Row) -> Result<Approval> {
    Ok(Approval {
        id: row.get(0),
        agent_id: row.get(1),
        tool_call_id: row.get(2),
        tool_name: row.get(3),
        tool_input: row.get(4),
        status: row
            .get::<_, &str>(5)
            .parse()
            .map_err(|message| Error::Invalid {
                field: Some("status".into()),
                message,
            })?,
        decided_by: row.get(6),
        reason: row.get(7),
        created_at: row.get(8),
        decided_at: row.get(9),
    })
}

/// An approval of `project`'s agents; `None` when missing or another project's.
pub async fn get_approval(
    client: &impl GenericClient,
    project: Uuid,
    approval: Uuid,
) -> Result<Option<Approval>> {
    let row = client
        .query_opt(
            &format!(
                "SELECT {APPROVAL_COLUMNS} FROM holdfast.approvals p \
                   JOIN holdfast.tool_calls t ON t.id = p.tool_call_id \
                   JOIN holdfast.agents a ON a.id = p.agent_id \
                  WHERE p.id = $1 AND a.project_id = $2"
            ),
            &[&approval, &project],
        )
        .await?;
    row.as_ref().map(approval_from_row).transpose()
}

/// An agent's approvals in `status` (all when `None`), oldest first.
pub async fn list_approvals(
    client: &impl GenericClient,
    agent: Uuid,
    status: Option<ApprovalStatus>,
    limit: i64,
) -> Result<Vec<Approval>> {
    let status = status.map(ApprovalStatus::as_str);
    let rows = client
        .query(
            &format!(
                "SELECT {APPROVAL_COLUMNS} FROM holdfast.approvals p \
                   JOIN holdfast.tool_calls t ON t.id = p.tool_call_id \
                  WHERE p.agent_id = $1 AND ($2::text IS NULL OR p.status = $2) \
                  ORDER BY p.created_at, p.id LIMIT $3"
            ),
            &[&agent, &status, &limit],
        )
        .await?;
    rows.iter().map(approval_from_row).collect()
}

const QUESTION_COLUMNS: &str = "q.id, q.agent_id, q.tool_call_id, q.question, q.status, q.answer, \
                                q.answered_by, q.created_at, q.answered_at";

fn question_from_row(row: &tokio_postgres::Row) -> Result<Question> {
    Ok(Question {
        id: row.get(0),
        agent_id: row.get(1),
        tool_call_id: row.get(2),
        question: row.get(3),
        status: row
            .get::<_, &str>(4)
            .parse()
            .map_err(|message| Error::Invalid {
                field: Some("status".into()),
                message,
            })?,
        answer: row.get(5),
        answered_by: row.get(6),
        created_at: row.get(7),
        answered_at: row.get(8),
    })
}

/// A question of `project`'s agents; `None` when missing or another project's.
pub async fn get_question(
    client: &impl GenericClient,
    project: Uuid,
    question: Uuid,
) -> Result<Option<Question>> {
    let row = client
        .query_opt(
            &format!(
                "SELECT {QUESTION_COLUMNS} FROM holdfast.questions q \
                   JOIN holdfast.agents a ON a.id = q.agent_id \
                  WHERE q.id = $1 AND a.project_id = $2"
            ),
            &[&question, &project],
        )
        .await?;
    row.as_ref().map(question_from_row).transpose()
}

/// An agent's questions in `status` (all when `None`), oldest first.
pub async fn list_questions(
    client: &impl GenericClient,
    agent: Uuid,
    status: Option<QuestionStatus>,
    limit: i64,
) -> Result<Vec<Question>> {
    let status = status.map(QuestionStatus::as_str);
    let rows = client
        .query(
            &format!(
                "SELECT {QUESTION_COLUMNS} FROM holdfast.questions q \
                  WHERE q.agent_id = $1 AND ($2::text IS NULL OR q.status = $2) \
                  ORDER BY q.created_at, q.id LIMIT $3"
            ),
            &[&agent, &status, &limit],
        )
        .await?;
    rows.iter().map(question_from_row).collect()
}

/// Per worker: agents held, the soonest lease expiry (`holdfast.worker_leases`).
pub async fn worker_leases(client: &impl GenericClient) -> Result<Vec<WorkerLeases>> {
    let rows = client
        .query(
            "SELECT worker, agents_held, oldest_lease_expires_at, last_claim_at, \
                    array_remove(backend_pids, NULL) \
               FROM holdfast.worker_leases ORDER BY worker",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| WorkerLeases {
            worker: r.get(0),
            agents_held: r.get(1),
            oldest_lease_expires_at: r.get(2),
            last_claim_at: r.get(3),
            backend_pids: r.get(4),
        })
        .collect())
}

/// Agents that need a look (`holdfast.stuck_agents`), at most `limit`.
pub async fn stuck_agents(client: &impl GenericClient, limit: i64) -> Result<Vec<StuckAgent>> {
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
            agent_id: r.get(0),
            state: r.get(1),
            lease_owner: r.get(2),
            lease_expires_at: r.get(3),
            state_changed_at: r.get(4),
            reason: r.get(5),
        })
        .collect())
}

// ---------------------------------------------------------------------------
// Model endpoints (operator), provider keys (project), model routing (worker)
// ---------------------------------------------------------------------------

/// Add an operator model endpoint; [`Error::Conflict`] when the name is taken.
pub async fn add_model_endpoint(
    client: &impl GenericClient,
    endpoint: &NewModelEndpoint,
) -> Result<()> {
    client
        .execute(
            "SELECT FROM holdfast.add_model_endpoint($1, $2, $3, $4, $5, $6)",
            &[
                &endpoint.name,
                &endpoint.kind,
                &endpoint.base_url,
                &endpoint.credential_env,
                &endpoint.project,
                &endpoint.models,
            ],
        )
        .await?;
    Ok(())
}

/// Every operator model endpoint, by name.
pub async fn list_model_endpoints(client: &impl GenericClient) -> Result<Vec<ModelEndpoint>> {
    let rows = client
        .query(
            "SELECT name, kind, base_url, credential_env, project_name, models, agents, created_at \
               FROM holdfast.list_model_endpoints()",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| ModelEndpoint {
            name: r.get(0),
            kind: r.get(1),
            base_url: r.get(2),
            credential_env: r.get(3),
            project: r.get(4),
            models: r.get(5),
            agents: r.get(6),
            created_at: r.get(7),
        })
        .collect())
}

/// Remove an operator model endpoint; returns how many agents still name it.
pub async fn remove_model_endpoint(client: &impl GenericClient, name: &str) -> Result<i64> {
    let row = client
        .query_one("SELECT holdfast.remove_model_endpoint($1)", &[&name])
        .await?;
    Ok(row.get::<_, Option<i64>>(0).unwrap_or(0))
}

/// Allow or forbid tenant-set `model.base_url` for the project named
/// `project` ([`Error::NotFound`] when there is none).
pub async fn set_project_custom_model_urls(
    client: &impl GenericClient,
    project: &str,
    allowed: bool,
) -> Result<()> {
    client
        .execute(
            "SELECT holdfast.set_project_custom_model_urls($1, $2)",
            &[&project, &allowed],
        )
        .await?;
    Ok(())
}

/// Store a project's own provider key, already sealed.
pub async fn set_project_provider_key(
    client: &impl GenericClient,
    project: Uuid,
    provider: &str,
    key: &SealedKey,
) -> Result<ProviderKeyStatus> {
    let row = client
        .query_one(
            "SELECT provider, created_at, updated_at \
               FROM holdfast.set_project_provider_key($1, $2, $3, $4)",
            &[&project, &provider, &key.sealed, &key.key_fingerprint],
        )
        .await?;
    Ok(provider_key_status(&row))
}

/// The providers `project` has its own key for (never the keys).
pub async fn list_project_provider_keys(
    client: &impl GenericClient,
    project: Uuid,
) -> Result<Vec<ProviderKeyStatus>> {
    let rows = client
        .query(
            "SELECT provider, created_at, updated_at FROM holdfast.list_project_provider_keys($1)",
            &[&project],
        )
        .await?;
    Ok(rows.iter().map(provider_key_status).collect())
}

fn provider_key_status(row: &Row) -> ProviderKeyStatus {
    ProviderKeyStatus {
        provider: row.get(0),
        created_at: row.get(1),
        updated_at: row.get(2),
    }
}

/// Delete a project's own provider key ([`Error::NotFound`] when none is set).
pub async fn delete_project_provider_key(
    client: &impl GenericClient,
    project: Uuid,
    provider: &str,
) -> Result<()> {
    client
        .execute(
            "SELECT holdfast.delete_project_provider_key($1, $2)",
            &[&project, &provider],
        )
        .await?;
    Ok(())
}

/// Where `agent`'s model call with settings `model` (its `config.model` as
/// loaded for this attempt) goes, resolved now.
pub async fn resolve_model_endpoint(
    client: &impl Prepared,
    agent: Uuid,
    model: &ModelConfig,
) -> Result<ModelRoute> {
    // Plain fields: serializing cannot fail.
    let model = serde_json::to_value(model).unwrap_or(Value::Null);
    let row = query_one_prepared(
        client,
        "SELECT refused_field, refused_message, endpoint, custom_url, base_url, credential_env, \
                sealed_key, key_fingerprint, project_id \
           FROM holdfast.resolve_model_endpoint($1, $2)",
        &[&agent, &model],
    )
    .await?;
    let project_key = match (row.get(6), row.get(7)) {
        (Some(sealed), Some(key_fingerprint)) => Some(SealedKey {
            sealed,
            key_fingerprint,
        }),
        _ => None,
    };
    let destination = match (row.get(0), row.get(1), row.get(3)) {
        (Some(field), Some(message), _) => ModelDestination::Refused { field, message },
        (_, _, Some(base_url)) => ModelDestination::CustomUrl { base_url },
        _ => ModelDestination::Operator {
            endpoint: row.get(2),
            base_url: row.get(4),
            credential_env: row.get(5),
        },
    };
    Ok(ModelRoute {
        project_id: row.get(8),
        destination,
        project_key,
    })
}
