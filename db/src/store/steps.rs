//! The worker's calls: claims, leases, the fenced commits of a step, the
//! step's context, and maintenance's tick (sql/schema/leases.sql,
//! steps.sql).

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::TryStreamExt;
use postgres_types::{Json, ToSql};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use uuid::Uuid;

use super::models::model_route_from_row;
use super::parse_text;
use super::prepared::{execute_prepared, query_one_prepared, query_prepared, Prepared};
use crate::error::{Error, Result};
use holdfast_providers::{DeltaKind, RequestFiles, StoredFile};
use holdfast_wire::config::AgentConfig;
use holdfast_wire::domain::{
    AgentState, AttemptTrace, Claim, HistoryMessage, LostAttempt, MaintenanceReport, ModelInput,
    ModelStep, PendingInput, Renewal, StepContext, ToolCallRecord,
};
use holdfast_wire::duration::to_interval;
use holdfast_wire::pg_text::{make_storable, storable_str};
use tokio_postgres::GenericClient;

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
            agent_id: r.get("agent_id"),
            epoch: r.get("epoch"),
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
        "SELECT agent_id, renewed, cancel_requested, interrupt_input \
           FROM holdfast.renew_leases($1, $2, $3, $4::text::interval)",
        &[&worker, &agents, &epochs, &to_interval(ttl)],
    )
    .await?;
    Ok(rows
        .iter()
        .map(|r| Renewal {
            agent_id: r.get("agent_id"),
            renewed: r.get("renewed"),
            cancel_requested: r.get("cancel_requested"),
            interrupt_input: r.get("interrupt_input"),
        })
        .collect())
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
    parse_text(row.get(0), "state")
}

/// End a step that leaves its agent as it is (a tool batch whose results
/// are saved): release the lease, or, when the agent stays ready and its
/// next step is due with no other agent waiting, keep it for `keep_for`
/// more, and return [`AgentState::Running`]: the caller then holds the
/// lease at `claim.epoch + 1` and takes the next step without a re-claim.
pub async fn release_or_keep_agent(
    client: &impl Prepared,
    claim: Claim,
    keep_for: Duration,
) -> Result<AgentState> {
    let row = query_one_prepared(
        client,
        "SELECT holdfast.release_agent($1, $2, NULL, $3::text::interval)",
        &[&claim.agent_id, &claim.epoch, &to_interval(keep_for)],
    )
    .await?;
    parse_text(row.get(0), "state")
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
    config_version: Option<i32>,
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
            config_version: step.config_version,
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
        "SELECT holdfast.commit_model_step($1, $2, $3, $4, $5, $6, $7, $8)",
        &[
            &row.agent_id,
            &row.epoch,
            &row.input_ids,
            &row.message,
            &row.tool_calls,
            &row.usage,
            &row.stop_reason,
            &row.config_version,
        ],
    )
    .await?;
    Ok(row.get(0))
}

/// Save several agents' model responses in one statement (the worker's
/// group commit, `holdfast.commit_model_step_batch`), each agent fenced on its
/// own: a lost lease or a malformed response refuses only that agent's step.
/// Returns each step's agent and outcome (the step id, or the error a single
/// commit would have raised), in agent id order. `Err` only when the whole
/// batch failed (nothing of it was saved when `client` commits nothing
/// else).
pub async fn commit_model_step_batch(
    client: &impl Prepared,
    steps: &[(Claim, &ModelStep)],
) -> Result<Vec<(Uuid, Result<Uuid>)>> {
    Ok(commit_model_step_batch_keeping_leases(client, steps, None)
        .await?
        .into_iter()
        .map(|(agent, outcome)| (agent, outcome.map(|saved| saved.step_id)))
        .collect())
}

/// A model step the group commit saved.
#[derive(Clone, Debug, PartialEq)]
pub struct SavedModelStep {
    pub step_id: Uuid,
    /// The agent stayed ready and its holder kept the lease, now at the
    /// step's epoch + 1 (`keep_for` given).
    pub lease_kept: bool,
    /// With a kept lease, the agent's step context read in the commit's
    /// transaction, for the next step ([`read_step_context`]).
    pub next_context: Option<Box<StepContext>>,
}

/// [`commit_model_step_batch`], with each agent that stays ready kept leased to
/// its holder for `keep_for` more (when given): its next step is due and no
/// other agent is waiting to be claimed (`holdfast.settle_agent`).
pub async fn commit_model_step_batch_keeping_leases(
    client: &impl Prepared,
    steps: &[(Claim, &ModelStep)],
    keep_for: Option<Duration>,
) -> Result<Vec<(Uuid, Result<SavedModelStep>)>> {
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
        "SELECT c.agent_id, c.outcome, c.step_id, c.message, c.field, c.lease_kept, \
                (c.next_context).* \
           FROM holdfast.commit_model_step_batch($1, $2::text::interval) c",
        &[&rows, &keep_for.map(to_interval)],
    )
    .await?
    {
        let message = || row.get::<_, Option<String>>("message").unwrap_or_default();
        let outcome = match row.get::<_, &str>("outcome") {
            "committed" => Ok(SavedModelStep {
                step_id: row.get("step_id"),
                lease_kept: row.get("lease_kept"),
                next_context: read_step_context(row.get("agent_id"), &row),
            }),
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

/// Save a tool batch's last result and end the batch in one transaction
/// (`holdfast.end_tool_batch`): [`commit_tool_result`], then
/// [`release_or_keep_agent`]'s settle, keeping the lease for `keep_for`
/// when the agent stays ready and nothing else waits
/// ([`AgentState::Running`]: the caller holds it at `claim.epoch + 1`).
pub async fn end_tool_batch(
    client: &impl Prepared,
    claim: Claim,
    tool_call: Uuid,
    output: &Value,
    is_error: bool,
    keep_for: Duration,
) -> Result<BatchEnd> {
    let mut output = output.clone();
    make_storable(&mut output);
    let row = query_one_prepared(
        client,
        "SELECT e.state, (e.next_context).* \
           FROM holdfast.end_tool_batch($1, $2, $3, $4, $5, $6::text::interval) e",
        &[
            &claim.agent_id,
            &claim.epoch,
            &tool_call,
            &output,
            &is_error,
            &to_interval(keep_for),
        ],
    )
    .await?;
    Ok(BatchEnd {
        state: parse_text(row.get("state"), "state")?,
        next_context: read_step_context(claim.agent_id, &row),
    })
}

/// How a tool batch ended ([`end_tool_batch`]).
#[derive(Debug)]
pub struct BatchEnd {
    /// `Running` when the lease was kept for the agent's next step.
    pub state: AgentState,
    /// With a kept lease, the agent's step context read in the same
    /// transaction, for the next step ([`read_step_context`]).
    pub next_context: Option<Box<StepContext>>,
}

/// The step context a claim or a commit that kept the lease read for the
/// agent's next step (a `holdfast.step_context` expanded into `row`), when
/// it did. One that does not parse is left out: the step reads its own,
/// and fails on it as any step does.
fn read_step_context(agent: Uuid, row: &tokio_postgres::Row) -> Option<Box<StepContext>> {
    let config = row.get::<_, Option<Value>>("config")?;
    step_context_from_row(agent, config, row).ok().map(Box::new)
}

/// A tool server (or one tool of it) the model call about to be made goes
/// without, and why.
#[derive(Clone, Copy, Debug)]
pub struct UnavailableTool<'a> {
    /// The MCP tool entry's `name`.
    pub server: &'a str,
    /// The one tool left out, by the server's own name; `None`: all of
    /// the server's tools.
    pub tool: Option<&'a str>,
    pub reason: &'a str,
}

/// Record `tool.unavailable {"server", "tool"?, "reason"}` for each of
/// `unavailable` (the agent stays leased). The names and reasons may carry
/// a server's text: made storable.
pub async fn record_tools_unavailable(
    client: &impl Prepared,
    claim: Claim,
    unavailable: &[UnavailableTool<'_>],
) -> Result<()> {
    let storable = |text: &str| storable_str(text).into_owned();
    let servers: Vec<String> = unavailable.iter().map(|u| storable(u.server)).collect();
    let tools: Vec<Option<String>> = unavailable.iter().map(|u| u.tool.map(storable)).collect();
    let reasons: Vec<String> = unavailable.iter().map(|u| storable(u.reason)).collect();
    client
        .execute(
            "SELECT holdfast.record_tools_unavailable($1, $2, $3, $4, $5)",
            &[&claim.agent_id, &claim.epoch, &servers, &tools, &reasons],
        )
        .await?;
    Ok(())
}

/// Record `content.left_out {"url", "reason"}` for each image or document
/// URL the model call about to be made goes without (the egress policy
/// refused it at use; the agent stays leased). Made storable.
pub async fn record_content_left_out(
    client: &impl Prepared,
    claim: Claim,
    urls: &[&str],
    reasons: &[&str],
) -> Result<()> {
    let storable = |texts: &[&str]| -> Vec<String> {
        texts.iter().map(|t| storable_str(t).into_owned()).collect()
    };
    client
        .execute(
            "SELECT holdfast.record_content_left_out($1, $2, $3, $4)",
            &[
                &claim.agent_id,
                &claim.epoch,
                &storable(urls),
                &storable(reasons),
            ],
        )
        .await?;
    Ok(())
}

/// Record a retryable model failure and release the agent until `delay` has
/// passed; past `max_retries` the turn fails (`retries_exhausted`) and the
/// inputs the call saw (`input_ids`) become history with the error.
/// Returns true while retrying, false when the budget is exhausted.
pub async fn commit_model_retry(
    client: &impl Prepared,
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
    client: &impl Prepared,
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
    client: &impl Prepared,
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
pub async fn step_failures(client: &impl Prepared, agent: Uuid) -> Result<i32> {
    let row = client
        .query_one(
            "SELECT step_failures FROM holdfast.agents WHERE id = $1",
            &[&agent],
        )
        .await?;
    Ok(row.get(0))
}

/// The worker half of a cancel: close the turn as cancelled and release.
pub async fn complete_cancel(client: &impl Prepared, claim: Claim) -> Result<AgentState> {
    let row = client
        .query_one(
            "SELECT holdfast.complete_cancel($1, $2)",
            &[&claim.agent_id, &claim.epoch],
        )
        .await?;
    parse_text(row.get(0), "state")
}

/// Send a live delta (answer text or thinking) to stream listeners (never
/// saved).
pub async fn stream_delta(
    client: &impl Prepared,
    claim: Claim,
    kind: DeltaKind,
    text: &str,
) -> Result<()> {
    execute_prepared(
        client,
        "SELECT holdfast.stream_delta($1, $2, $3, $4)",
        &[
            &claim.agent_id,
            &claim.epoch,
            &kind.as_str(),
            &storable_str(text),
        ],
    )
    .await?;
    Ok(())
}

/// Everything a step is decided and built from, read fresh at every attempt,
/// in one statement (`holdfast.load_step_context`): the agent's step
/// fields, history, tool calls and turn inputs, and where its model call
/// goes ([`ModelRoute`], so a removed endpoint or withdrawn permission
/// applies at the attempt's call). Content that references stored files
/// keeps the references (a few bytes each): the model call loads the files
/// it sends once ([`load_request_files`]), and nothing else of a step needs
/// their bytes.
pub async fn load_step_context(client: &impl Prepared, agent: Uuid) -> Result<StepContext> {
    let rows = query_prepared(
        client,
        "SELECT * FROM holdfast.load_step_context($1)",
        &[&agent],
    )
    .await?;
    let row = rows
        .first()
        .ok_or_else(|| Error::NotFound(format!("agent {agent} not found")))?;
    step_context_from_row(agent, row.get("config"), row)
}

/// A claim and its agent's step context, read in the same transaction
/// right after it ([`claim_agents_with_context`], [`read_step_context`]).
pub struct ClaimedStep {
    pub claim: Claim,
    pub context: Option<Box<StepContext>>,
}

/// [`claim_agents`], and each claimed agent's [`load_step_context`], in one
/// round trip and one transaction (`holdfast.claim_agents_with_context`).
/// Call it on the worker's own session, as [`claim_agents`].
pub async fn claim_agents_with_context(
    client: &impl Prepared,
    worker: &str,
    max: i32,
    ttl: Duration,
) -> Result<Vec<ClaimedStep>> {
    let rows = query_prepared(
        client,
        "SELECT c.agent_id, c.epoch, (c.context).* \
           FROM holdfast.claim_agents_with_context($1, $2, $3::text::interval) c",
        &[&worker, &max, &to_interval(ttl)],
    )
    .await?;
    Ok(rows
        .iter()
        .map(|row| {
            let claim = Claim {
                agent_id: row.get("agent_id"),
                epoch: row.get("epoch"),
            };
            let context = read_step_context(claim.agent_id, row);
            ClaimedStep { claim, context }
        })
        .collect())
}

/// A step context from a row of `holdfast.step_context`'s columns (what
/// `load_step_context` returns, and each claim's `context` expanded), its
/// `config` already read from the row by the caller.
fn step_context_from_row(
    agent: Uuid,
    config: Value,
    row: &tokio_postgres::Row,
) -> Result<StepContext> {
    // Parsed once per step: every use below reads the typed config.
    let config = AgentConfig::from_value(&config)?;
    let lost_epoch: Option<i64> = row.get("lost_attempt_epoch");
    let lost_started: Option<DateTime<Utc>> = row.get("lost_attempt_started_at");
    let lost_ended: Option<DateTime<Utc>> = row.get("lost_attempt_ended_at");
    let trace = AttemptTrace {
        turn_parent: row.get("turn_trace_parent"),
        turn_state: row.get("turn_trace_state"),
        first_attempt_epoch: row.get("first_attempt_epoch"),
        // All or none (agents_lost_attempt_complete).
        lost: lost_epoch.zip(lost_started.zip(lost_ended)).map(
            |(epoch, (started_at, ended_at))| LostAttempt {
                epoch,
                started_at,
                ended_at,
            },
        ),
    };
    let tool_calls = required_step_context_list::<ToolCallRow>(row, "tool_calls")?
        .into_iter()
        .map(|t| {
            Ok(ToolCallRecord {
                id: t.id,
                step_id: t.step_id,
                position: t.position,
                provider_id: t.provider_id,
                name: t.name,
                input: t.input,
                kind: parse_text(&t.kind, "kind")?,
                status: t.status,
                output: t.output,
                is_error: t.is_error,
            })
        })
        .collect::<Result<_>>()?;
    Ok(StepContext {
        agent_id: agent,
        config,
        config_version: row.get("config_version"),
        turn_open: row.get("turn_open"),
        model_attempts: row.get("model_attempts"),
        turn_model_steps: row.get("turn_model_steps"),
        cancel_requested: row.get("cancel_requested"),
        tool_calls,
        trace,
        replay: row.get("replay"),
        model: model_input_from_row(row)?,
    })
}

/// The model's part of a step context: `None` when `load_step_context`
/// left it out (NULL messages: a call is pending, so the step runs tools).
fn model_input_from_row(row: &tokio_postgres::Row) -> Result<Option<ModelInput>> {
    let Some(messages) = step_context_list::<MessageRow>(row, "messages")? else {
        return Ok(None);
    };
    let messages = messages
        .into_iter()
        .map(|m| HistoryMessage {
            seq: m.seq,
            role: m.role,
            content: m.content.into(),
            step_id: m.step_id,
        })
        .collect();
    let pending_inputs = required_step_context_list::<InputRow>(row, "pending_inputs")?
        .into_iter()
        .map(|i| PendingInput {
            id: i.id,
            content: i.content,
        })
        .collect();
    Ok(Some(ModelInput {
        over_budget: row.get("over_budget"),
        context_summary: row.get("context_summary"),
        messages,
        pending_inputs,
        route: model_route_from_row(row),
    }))
}

/// A message of `load_step_context`'s `messages` array.
#[derive(Deserialize)]
struct MessageRow {
    seq: i64,
    role: String,
    content: Box<RawValue>,
    step_id: Option<Uuid>,
}

/// A tool call of `load_step_context`'s `tool_calls` array.
#[derive(Deserialize)]
struct ToolCallRow {
    id: Uuid,
    step_id: Uuid,
    position: i32,
    provider_id: String,
    name: String,
    input: Value,
    kind: String,
    status: String,
    output: Option<Value>,
    is_error: Option<bool>,
}

/// An input of `load_step_context`'s `pending_inputs` array.
#[derive(Deserialize)]
struct InputRow {
    id: Uuid,
    content: Value,
}

/// One of the step context's lists (a json array the SQL built), parsed
/// from its text straight into its rows; `None` when it was not read (NULL).
fn step_context_list<T: serde::de::DeserializeOwned>(
    row: &tokio_postgres::Row,
    field: &str,
) -> Result<Option<Vec<T>>> {
    row.try_get::<_, Option<Json<Vec<T>>>>(field)
        .map(|list| list.map(|list| list.0))
        .map_err(|e| Error::Invalid {
            field: Some(field.into()),
            message: format!("the step context's {field} did not parse: {e}"),
        })
}

/// A list the step context must carry (`tool_calls` always, `pending_inputs`
/// with its messages), or the error that names it.
fn required_step_context_list<T: serde::de::DeserializeOwned>(
    row: &tokio_postgres::Row,
    field: &str,
) -> Result<Vec<T>> {
    step_context_list(row, field)?.ok_or_else(|| Error::Invalid {
        field: Some(field.into()),
        message: format!("the step context's {field} is missing"),
    })
}

/// The bytes of `agent`'s stored files `ids` (what a model request's
/// messages reference, [`holdfast_providers::attachment_ids`]), each read
/// once, as bytea (no base64 on the wire). Rows are taken one at a time, so
/// at most one file is held twice. A file that is gone is left out (the
/// call then fails naming it).
pub async fn load_request_files(
    client: &impl Prepared,
    agent: Uuid,
    ids: &[Uuid],
) -> Result<RequestFiles> {
    let mut files = HashMap::with_capacity(ids.len());
    let rows = client
        .client()
        .query_raw(
            // A fork's or a replay's history also references the files of
            // the agents it came from (attachment_sources), shared with them.
            "SELECT id, media_type, data FROM holdfast.attachments \
              WHERE agent_id IN (SELECT unnest(a.attachment_sources || a.id) FROM holdfast.agents a WHERE a.id = $1) \
                AND id = ANY($2)",
            [&agent as &(dyn ToSql + Sync), &ids],
        )
        .await?;
    futures::pin_mut!(rows);
    while let Some(row) = rows.try_next().await? {
        files.insert(
            row.get("id"),
            StoredFile {
                media_type: row.get("media_type"),
                data: row.get("data"),
            },
        );
    }
    Ok(RequestFiles::new(files))
}

/// Create a subagent for a pending `spawn_subagent` call (one transaction);
/// returns the child's id, or `None` when a subagent limit refused the spawn
/// (the call is then completed with an error result naming the limit).
pub async fn spawn_subagent(
    client: &impl Prepared,
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

/// The model call in flight was aborted for the interrupt inputs it did not
/// include (`holdfast.commit_model_interrupt`): nothing of it is saved,
/// `model.interrupted` is, and the agent is released for the call again.
pub async fn commit_model_interrupt(
    client: &impl Prepared,
    claim: Claim,
    input_ids: &[Uuid],
) -> Result<()> {
    client
        .execute(
            "SELECT holdfast.commit_model_interrupt($1, $2, $3)",
            &[&claim.agent_id, &claim.epoch, &input_ids],
        )
        .await?;
    Ok(())
}

/// Save a compaction summary covering every message before `keep_from_seq`,
/// and release the agent for its next model call.
pub async fn commit_compaction(
    client: &impl Prepared,
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

/// One maintenance pass (expired and orphaned leases, due delays).
pub async fn maintenance_tick(client: &impl Prepared) -> Result<MaintenanceReport> {
    let row = client
        .query_one("SELECT holdfast.maintenance_tick()", &[])
        .await?;
    let report: Value = row.get(0);
    serde_json::from_value(report)
        .map_err(|e| Error::Migration(format!("maintenance_tick report: {e}")))
}
