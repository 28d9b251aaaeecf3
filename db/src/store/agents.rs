//! Projects, agents, their configs and inputs, cancellation
//! (sql/schema/agents.sql, cancel.sql). Reads are scoped by project where
//! a client names the object, so another project's object reads as missing.

use postgres_types::ToSql;
use serde_json::Value;

use uuid::Uuid;

use super::prepared::{query_prepared, with_wake_after_commit, Prepared};
use super::{batch_outcomes, parse_text};
use crate::error::{Error, Result};
use holdfast_telemetry::TraceHeaders;
use holdfast_wire::domain::{
    Agent, AgentState, AttachmentQuotas, CancelOutcome, ConfigVersion, ForkPoint, Input,
    InputCreated, InputMode, LimitMaxima, PostedInput, TurnOutcome, WaitingInputs,
};

/// Write the operator's limit maxima (`holdfast.set_limit_maxima`).
pub async fn set_limit_maxima(client: &impl Prepared, maxima: &LimitMaxima) -> Result<()> {
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

/// Write the operator's attachment quotas (`holdfast.set_attachment_quotas`).
pub async fn set_attachment_quotas(
    client: &impl Prepared,
    quotas: &AttachmentQuotas,
) -> Result<()> {
    client
        .execute(
            "SELECT holdfast.set_attachment_quotas($1, $2)",
            &[&quotas.bytes_per_agent, &quotas.bytes_per_project],
        )
        .await?;
    Ok(())
}

/// Cap (or with `None`, uncap) how many of a project's agents run at once.
pub async fn set_project_max_running(
    client: &impl Prepared,
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

/// Create an agent; an invalid config is [`Error::Invalid`] naming the field.
pub async fn create_agent(client: &impl Prepared, project: Uuid, config: &Value) -> Result<Uuid> {
    let row = client
        .query_one("SELECT holdfast.create_agent($1, $2)", &[&project, config])
        .await?;
    Ok(row.get(0))
}

/// Add an input, idempotently when `idempotency_key` is given.
pub async fn create_input(
    client: &impl Prepared,
    agent: Uuid,
    content: &Value,
    idempotency_key: Option<&str>,
) -> Result<InputCreated> {
    create_traced_input(
        client,
        agent,
        content,
        idempotency_key,
        None,
        InputMode::Steer,
    )
    .await
}

/// [`create_input`] with the W3C trace context the input was posted with
/// (the steps of the turn it opens are children of it) and its steering
/// mode.
pub async fn create_traced_input(
    client: &impl Prepared,
    agent: Uuid,
    content: &Value,
    idempotency_key: Option<&str>,
    trace: Option<&TraceHeaders>,
    mode: InputMode,
) -> Result<InputCreated> {
    let parent = trace.map(|t| t.traceparent.as_str());
    let state = trace.and_then(|t| t.tracestate.as_deref());
    let mode: &str = mode.into();
    let row = client
        .query_one(
            "SELECT input_id, replayed \
               FROM holdfast.create_input_or_replay($1, $2, $3, $4, $5, $6)",
            &[&agent, content, &idempotency_key, &parent, &state, &mode],
        )
        .await?;
    Ok(InputCreated {
        input_id: row.get("input_id"),
        replayed: row.get("replayed"),
    })
}

/// Create a project if it does not exist; returns its id.
pub async fn ensure_project(client: &impl Prepared, name: &str) -> Result<Uuid> {
    let row = client
        .query_one("SELECT holdfast.ensure_project($1)", &[&name])
        .await?;
    Ok(row.get(0))
}

/// The columns [`agent_from_row`] reads, by these names. The config is
/// masked (`mask_config_secrets`): these rows are for clients.
pub(super) const AGENT_COLUMNS: &str =
    "id, project_id, holdfast.mask_config_secrets(config) AS config, state, turn_open, \
     cancel_requested_at, last_event_seq, created_at, updated_at, state_changed_at, \
     holdfast.agent_last_turn(agents) AS last_turn, config_version, next_turn_config_version, \
     forked_from_agent_id, forked_from_seq";

pub(super) fn agent_from_row(row: &tokio_postgres::Row) -> Result<Agent> {
    Ok(Agent {
        id: row.get("id"),
        project_id: row.get("project_id"),
        config: row.get("config"),
        state: parse_text(row.get("state"), "state")?,
        turn_open: row.get("turn_open"),
        cancel_requested_at: row.get("cancel_requested_at"),
        last_event_seq: row.get("last_event_seq"),
        created_at: row.get("created_at"),
        updated_at: row.get("updated_at"),
        state_changed_at: row.get("state_changed_at"),
        last_turn: row
            .get::<_, Option<Value>>("last_turn")
            .map(serde_json::from_value)
            .transpose()
            .map_err(|e| Error::Migration(format!("agent_last_turn document: {e}")))?,
        config_version: row.get("config_version"),
        next_turn_config_version: row.get("next_turn_config_version"),
        // Both or neither (agents_forked_from_complete).
        forked_from: row
            .get::<_, Option<Uuid>>("forked_from_agent_id")
            .zip(row.get::<_, Option<i64>>("forked_from_seq"))
            .map(|(agent_id, seq)| ForkPoint { agent_id, seq }),
    })
}

/// An agent of `project`, its config masked for showing; `None` when it
/// does not exist or belongs to another project.
pub async fn get_agent(
    client: &impl Prepared,
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
pub async fn agent_in_project(client: &impl Prepared, project: Uuid, agent: Uuid) -> Result<bool> {
    let row = client
        .query_opt(
            "SELECT 1 FROM holdfast.agents WHERE id = $1 AND project_id = $2",
            &[&agent, &project],
        )
        .await?;
    Ok(row.is_some())
}

/// A file an agent was sent (`holdfast.attachments`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attachment {
    pub media_type: String,
    pub data: Vec<u8>,
}

/// Attachment `id` of `agent`, if the agent is in `project` and has it.
pub async fn get_attachment(
    client: &impl Prepared,
    project: Uuid,
    agent: Uuid,
    id: Uuid,
) -> Result<Option<Attachment>> {
    let row = client
        .query_opt(
            "SELECT t.media_type, t.data FROM holdfast.attachments t, holdfast.agents a \
              WHERE a.id = $1 AND t.agent_id = ANY(a.attachment_sources || a.id) AND t.id = $2 \
                AND a.project_id = $3",
            &[&agent, &id, &project],
        )
        .await?;
    Ok(row.map(|r| Attachment {
        media_type: r.get("media_type"),
        data: r.get("data"),
    }))
}

/// Agents of `project` (configs masked for showing), oldest first (ids are
/// UUIDv7), after the id `after`, in `state` and with the last turn's
/// `outcome` when given, at most `limit`.
pub async fn list_agents(
    client: &impl Prepared,
    project: Uuid,
    state: Option<AgentState>,
    outcome: Option<TurnOutcome>,
    after: Option<Uuid>,
    limit: i64,
) -> Result<Vec<Agent>> {
    let state = state.map(<&str>::from);
    let outcome = outcome.map(<&str>::from);
    let rows = client
        .query(
            &format!(
                "SELECT {AGENT_COLUMNS} FROM holdfast.agents \
                  WHERE project_id = $1 AND replay_id IS NULL \
                    AND ($2::text IS NULL OR state = $2) \
                    AND ($3::text IS NULL OR last_turn_outcome = $3) \
                    AND ($4::uuid IS NULL OR id > $4) \
                  ORDER BY id LIMIT $5"
            ),
            &[&project, &state, &outcome, &after, &limit],
        )
        .await?;
    rows.iter().map(agent_from_row).collect()
}

/// When a config change takes effect (`holdfast.update_agent_config`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, strum::EnumString, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum ConfigApply {
    /// At once: the next model call uses it.
    #[default]
    Now,
    /// The open turn finishes on the version it runs; the next turn uses it.
    NextTurn,
}

/// Replace an agent's config (`config.updated`), saved as its next version;
/// returns the config saved, masked. Header values `"***"` keep the stored
/// values.
pub async fn update_agent_config(
    client: &impl Prepared,
    agent: Uuid,
    config: &Value,
    apply: ConfigApply,
) -> Result<Value> {
    let apply: &str = apply.into();
    let row = client
        .query_one(
            "SELECT holdfast.update_agent_config($1, $2, $3)",
            &[&agent, config, &apply],
        )
        .await?;
    Ok(row.get(0))
}

/// Change an agent's config by an RFC 7396 merge patch of its newest
/// version, applied under the agent's row lock; returns the config saved,
/// masked.
pub async fn patch_agent_config(
    client: &impl Prepared,
    agent: Uuid,
    patch: &Value,
    apply: ConfigApply,
) -> Result<Value> {
    let apply: &str = apply.into();
    let row = client
        .query_one(
            "SELECT holdfast.patch_agent_config($1, $2, $3)",
            &[&agent, patch, &apply],
        )
        .await?;
    Ok(row.get(0))
}

/// An agent's config versions, oldest first, configs masked.
pub async fn list_config_versions(
    client: &impl Prepared,
    agent: Uuid,
) -> Result<Vec<ConfigVersion>> {
    let rows = client
        .query(
            &format!(
                "SELECT {CONFIG_VERSION_COLUMNS} \
                   FROM holdfast.agent_config_versions WHERE agent_id = $1 ORDER BY version"
            ),
            &[&agent],
        )
        .await?;
    Ok(rows.iter().map(config_version_from_row).collect())
}

/// One config version of an agent, masked.
pub async fn get_config_version(
    client: &impl Prepared,
    agent: Uuid,
    version: i32,
) -> Result<Option<ConfigVersion>> {
    let row = client
        .query_opt(
            &format!(
                "SELECT {CONFIG_VERSION_COLUMNS} \
                   FROM holdfast.agent_config_versions WHERE agent_id = $1 AND version = $2"
            ),
            &[&agent, &version],
        )
        .await?;
    Ok(row.as_ref().map(config_version_from_row))
}

/// The columns [`config_version_from_row`] reads, by these names, of
/// `holdfast.agent_config_versions`; the config is masked.
const CONFIG_VERSION_COLUMNS: &str =
    "version, holdfast.mask_config_secrets(config) AS config, created_at";

fn config_version_from_row(row: &tokio_postgres::Row) -> ConfigVersion {
    ConfigVersion {
        version: row.get("version"),
        config: row.get("config"),
        created_at: row.get("created_at"),
    }
}

/// Archive an idle agent (no new inputs); [`Error::Conflict`] otherwise.
pub async fn archive_agent(client: &impl Prepared, agent: Uuid) -> Result<()> {
    client
        .execute("SELECT holdfast.archive_agent($1)", &[&agent])
        .await?;
    Ok(())
}

/// Cancel an agent's current turn: at once, or by asking its worker to stop.
pub async fn request_cancel(client: &impl Prepared, agent: Uuid) -> Result<CancelOutcome> {
    let row = client
        .query_one("SELECT holdfast.request_cancel($1)", &[&agent])
        .await?;
    parse_text(row.get(0), "request_cancel")
}

/// The columns [`input_from_row`] reads, as a literal (a macro, so that
/// statements built from it stay `&'static str` and can be prepared once);
/// `status` is derived here, the one definition of it (a queued input is one
/// no turn has admitted).
macro_rules! input_columns {
    () => {
        "id, agent_id, content, mode, \
         CASE WHEN removed_at IS NOT NULL THEN 'removed' \
              WHEN consumed_at IS NOT NULL THEN 'consumed' \
              WHEN admitted_at IS NULL THEN 'queued' ELSE 'pending' END, created_at"
    };
}

const INPUT_COLUMNS: &str = input_columns!();

fn input_from_row(row: &tokio_postgres::Row) -> Result<Input> {
    input_from_row_at(row, 0)
}

/// An [`Input`] from the [`input_columns`] of `row` that start at column
/// `first`.
fn input_from_row_at(row: &tokio_postgres::Row, first: usize) -> Result<Input> {
    Ok(Input {
        id: row.get(first),
        agent_id: row.get(first + 1),
        content: row.get(first + 2),
        mode: parse_text(row.get(first + 3), "mode")?,
        status: parse_text(row.get(first + 4), "status")?,
        created_at: row.get(first + 5),
    })
}

/// One input by id.
pub async fn get_input(client: &impl Prepared, input: Uuid) -> Result<Option<Input>> {
    let row = client
        .query_opt(
            &format!("SELECT {INPUT_COLUMNS} FROM holdfast.inputs WHERE id = $1"),
            &[&input],
        )
        .await?;
    row.as_ref().map(input_from_row).transpose()
}

/// One posted input, a row of `holdfast.new_input[]`: the arguments of
/// [`create_traced_input`], with the project the request was authenticated
/// for (an agent of another project is not found).
#[derive(Clone, Debug, ToSql)]
#[postgres(name = "new_input")]
pub struct NewInput {
    pub project_id: Uuid,
    pub agent_id: Uuid,
    pub content: Value,
    pub idempotency_key: Option<String>,
    pub trace_parent: Option<String>,
    pub trace_state: Option<String>,
    pub mode: String,
}

impl NewInput {
    pub fn new(
        project: Uuid,
        agent: Uuid,
        content: Value,
        idempotency_key: Option<&str>,
        trace: Option<&TraceHeaders>,
        mode: InputMode,
    ) -> Self {
        NewInput {
            project_id: project,
            agent_id: agent,
            content,
            idempotency_key: idempotency_key.map(str::to_owned),
            trace_parent: trace.map(|t| t.traceparent.clone()),
            trace_state: trace.and_then(|t| t.tracestate.clone()),
            mode: <&str>::from(mode).to_owned(),
        }
    }
}

/// Create several inputs in one transaction (the API's group commit,
/// `holdfast.create_inputs`), each checked on its own. Returns each input's
/// outcome in `inputs`' order: the saved input (on a replay, the first), or
/// the error [`create_traced_input`] would have returned for it alone
/// ([`Error::NotFound`], [`Error::Conflict`], [`Error::Invalid`]). `Err`
/// only when the whole batch failed (nothing of it was saved when `client`
/// commits nothing else).
pub async fn create_inputs(
    client: &impl Prepared,
    inputs: &[NewInput],
) -> Result<Vec<Result<PostedInput>>> {
    let rows = with_wake_after_commit(
        client,
        query_prepared(
            client,
            concat!(
                "SELECT r.ord, r.outcome, r.message, r.field, i.* \
                   FROM holdfast.create_inputs($1) r \
                   LEFT JOIN LATERAL (SELECT ",
                input_columns!(),
                " FROM (SELECT (r.input).*) i) i ON r.outcome IN ('created', 'replayed')"
            ),
            &[&inputs],
        ),
    )
    .await?;
    Ok(batch_outcomes(&rows, inputs.len(), |outcome, row| {
        let replayed = match outcome {
            "created" => false,
            "replayed" => true,
            _ => return None,
        };
        Some(input_from_row_at(row, 4).map(|input| PostedInput { input, replayed }))
    }))
}

/// An agent's inputs that still wait (queued, or pending in the open
/// turn: both bounded by what waits), oldest first.
pub async fn list_inputs(
    client: &impl Prepared,
    agent: Uuid,
    which: WaitingInputs,
) -> Result<Vec<Input>> {
    // Queued inputs in the order turns will take them (admit_queued_input).
    let (filter, order) = match which {
        WaitingInputs::Queued => (
            "admitted_at IS NULL AND removed_at IS NULL",
            "queue_position, created_at, id",
        ),
        WaitingInputs::Pending => ("admitted_at IS NOT NULL", "created_at, id"),
    };
    let rows = client
        .query(
            &format!(
                "SELECT {INPUT_COLUMNS} FROM holdfast.inputs \
                  WHERE agent_id = $1 AND consumed_at IS NULL AND {filter} \
                  ORDER BY {order}"
            ),
            &[&agent],
        )
        .await?;
    rows.iter().map(input_from_row).collect()
}

/// Take back a queued input (`holdfast.remove_input`): [`Error::NotFound`],
/// or [`Error::Conflict`] when a turn has taken it. Returns its agent.
pub async fn remove_input(client: &impl Prepared, input: Uuid) -> Result<Uuid> {
    let row = client
        .query_one("SELECT holdfast.remove_input($1)", &[&input])
        .await?;
    Ok(row.get(0))
}

/// Change a waiting input's mode and its place in its agent's queue
/// (`holdfast.update_input`; `None` leaves either as it is):
/// [`Error::NotFound`], [`Error::Conflict`] (it no longer waits, or the
/// change does not apply to it), [`Error::Invalid`] naming the field.
pub async fn update_input(
    client: &impl Prepared,
    input: Uuid,
    mode: Option<InputMode>,
    position: Option<i32>,
) -> Result<Input> {
    let mode = mode.map(<&str>::from);
    let row = client
        .query_one(
            &format!(
                "SELECT {INPUT_COLUMNS} FROM holdfast.update_input($1, $2, $3) \
                  WHERE id IS NOT NULL"
            ),
            &[&input, &mode, &position],
        )
        .await?;
    input_from_row(&row)
}
