//! `/v1/agents`: create, read, list, change config, cancel, archive.
//!
//! Config values are validated by SQL (`holdfast.validate_config`, one rule
//! for SQL and HTTP clients, the field named in the error); this module adds
//! the check SQL does not make: a field the config does not have is a 400,
//! not a setting silently ignored.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use chrono::{DateTime, Utc};
use holdfast_engine::domain::{Agent, AgentState, CancelOutcome};
use holdfast_engine::egress::check_mcp_header;
use holdfast_engine::store;
use holdfast_engine::store::console;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::auth::Caller;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::observe::record_agent;
use crate::state::AppState;

/// The top-level fields of an agent config ([`AgentConfig`]).
pub const CONFIG_FIELDS: &[&str] = &[
    "model",
    "system",
    "tools",
    "approvals",
    "metadata",
    "limits",
];
/// The fields of `config.model` ([`ModelSettings`]).
pub const MODEL_FIELDS: &[&str] = &["provider", "name", "endpoint", "base_url", "max_tokens"];
/// The fields of `config.approvals` ([`ApprovalSettings`]).
pub const APPROVAL_FIELDS: &[&str] = &["require_for"];
/// The fields of `config.limits` ([`LimitSettings`]; `holdfast.limit_names()`).
pub const LIMIT_FIELDS: &[&str] = &[
    "max_model_steps_per_turn",
    "max_tool_calls_per_response",
    "max_subagent_depth",
    "max_live_children",
    "max_descendants",
];

const LIST_DEFAULT: i64 = 100;
const LIST_MAX: i64 = 1000;

/// An agent's configuration (the body of `POST /v1/agents`; `PATCH` takes a
/// JSON merge patch of it).
#[derive(ToSchema)]
#[allow(dead_code)] // Describes the JSON for the OpenAPI document.
pub struct AgentConfig {
    model: ModelSettings,
    /// The system prompt.
    system: Option<String>,
    /// Tool definitions: `{"type": ..., "name"?: ...}` (names unique).
    #[schema(value_type = Option<Vec<Object>>)]
    tools: Option<Vec<Value>>,
    approvals: Option<ApprovalSettings>,
    /// Free-form; returned as given.
    #[schema(value_type = Option<Object>)]
    metadata: Option<Map<String, Value>>,
    limits: Option<LimitSettings>,
}

/// Bounds on a runaway agent. Each defaults to, and may not exceed, the
/// operator's maximum (`HOLDFAST_MAX_<NAME>`); exceeding one ends the turn
/// with `turn.failed` `limit_exceeded` (model steps, tool calls) or refuses
/// the spawn with an error result (subagents).
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct LimitSettings {
    /// Model calls one turn may make (default 100).
    #[schema(minimum = 1)]
    max_model_steps_per_turn: Option<u32>,
    /// Tool calls one model response may ask for (default 64).
    #[schema(minimum = 1)]
    max_tool_calls_per_response: Option<u32>,
    /// Levels of subagents below this agent's tree root (default 4; the root's setting counts).
    #[schema(minimum = 1)]
    max_subagent_depth: Option<u32>,
    /// Subagents this agent may have running at once (default 16).
    #[schema(minimum = 1)]
    max_live_children: Option<u32>,
    /// Subagents the tree may ever have (default 64; the root's setting counts).
    #[schema(minimum = 1)]
    max_descendants: Option<u32>,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ModelSettings {
    provider: Provider,
    /// The provider's model name (within the endpoint's allow-list, if it
    /// has one).
    name: String,
    /// The operator's model endpoint by name (default `default`: the
    /// operator's Anthropic or OpenAI endpoint, by `provider`).
    endpoint: Option<String>,
    /// An OpenAI- or Anthropic-compatible server of your own (vLLM, Ollama,
    /// a gateway): refused (422) unless the operator allowed custom URLs for
    /// the project; requests to it carry only the project's own provider key.
    base_url: Option<String>,
    /// The most output tokens a call may produce (an integer; the range of
    /// the worker's u32, checked by SQL's `validate_config`).
    #[schema(minimum = 1, maximum = 4294967295_u64)]
    max_tokens: Option<u32>,
}

#[derive(ToSchema)]
#[schema(rename_all = "lowercase")]
#[allow(dead_code)] // Describes the JSON for the OpenAPI document.
pub enum Provider {
    Anthropic,
    Openai,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ApprovalSettings {
    /// Tool names that need approve/deny before they run.
    require_for: Option<Vec<String>>,
}

/// An agent's state (docs/state-machines.md).
#[derive(Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum StateName {
    Idle,
    Ready,
    Running,
    Waiting,
    Archived,
}

impl From<AgentState> for StateName {
    fn from(state: AgentState) -> StateName {
        match state {
            AgentState::Idle => StateName::Idle,
            AgentState::Ready => StateName::Ready,
            AgentState::Running => StateName::Running,
            AgentState::Waiting => StateName::Waiting,
            AgentState::Archived => StateName::Archived,
        }
    }
}

impl From<StateName> for AgentState {
    fn from(state: StateName) -> AgentState {
        match state {
            StateName::Idle => AgentState::Idle,
            StateName::Ready => AgentState::Ready,
            StateName::Running => AgentState::Running,
            StateName::Waiting => AgentState::Waiting,
            StateName::Archived => AgentState::Archived,
        }
    }
}

/// An agent.
#[derive(Serialize, ToSchema)]
pub struct AgentView {
    id: Uuid,
    state: StateName,
    /// Secrets (MCP header values) show as `"***"`; sent back in a PATCH or
    /// create, `"***"` keeps the stored value.
    #[schema(value_type = AgentConfig)]
    config: Value,
    /// A turn is under way (from an input to turn.completed/failed/cancelled).
    turn_open: bool,
    /// A cancel waits for the worker holding the agent to stop.
    cancel_requested: bool,
    /// The seq of its latest event: resume a stream from here.
    last_event_seq: i64,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    state_changed_at: DateTime<Utc>,
    /// In a list with `order=activity` only: the time the list is ordered
    /// by (its latest event's time, else its creation).
    #[serde(skip_serializing_if = "Option::is_none")]
    activity_at: Option<DateTime<Utc>>,
}

impl From<Agent> for AgentView {
    fn from(agent: Agent) -> AgentView {
        AgentView {
            id: agent.id,
            state: agent.state.into(),
            config: agent.config,
            turn_open: agent.turn_open,
            cancel_requested: agent.cancel_requested_at.is_some(),
            last_event_seq: agent.last_event_seq,
            created_at: agent.created_at,
            updated_at: agent.updated_at,
            state_changed_at: agent.state_changed_at,
            activity_at: None,
        }
    }
}

#[derive(Serialize, ToSchema)]
pub struct AgentList {
    agents: Vec<AgentView>,
    /// More agents follow: ask again with `after` = the last id
    /// (`order=created`) or `cursor` = `next_cursor` (`order=activity`).
    has_more: bool,
    /// With `order=activity` and `has_more`: the `cursor` of the next page.
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
}

/// The order of a list.
#[derive(Clone, Copy, Default, Deserialize, ToSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ListOrder {
    /// Oldest first (by id, a UUIDv7); pages with `after`.
    #[default]
    Created,
    /// Newest activity first (the latest event's time, else creation);
    /// pages with `cursor`; takes `q`.
    Activity,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only agents in this state.
    state: Option<StateName>,
    /// Agents created after this one (the last id of the previous page;
    /// `order=created`).
    after: Option<Uuid>,
    /// At most this many (default 100, at most 1000).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
    /// `created` (default) or `activity`.
    #[param(inline)]
    order: Option<ListOrder>,
    /// The `next_cursor` of the previous page (`order=activity`).
    cursor: Option<String>,
    /// Search (`order=activity`): an agent id finds that agent; `key=value`
    /// finds agents whose `metadata.key` is that value (a JSON scalar such as
    /// `3` or `true`, else the text); anything else finds agents whose
    /// metadata contains the text, case-insensitively.
    q: Option<String>,
}

/// The outcome of a cancel.
#[derive(Serialize, ToSchema)]
pub struct CancelView {
    /// `cancelled`: the turn ended (`turn.cancelled` is saved).
    /// `requested`: a worker is mid-step; it stops within a second and then
    /// saves `turn.cancelled`.
    #[schema(value_type = String, example = "cancelled")]
    status: CancelOutcome,
    agent: AgentView,
}

/// Refuse fields a config does not have (in a body for create, or a merge
/// patch, whose null values remove fields and pass here too).
fn check_config_fields(config: &Value) -> Result<(), ApiError> {
    let Some(object) = config.as_object() else {
        return Err(ApiError::invalid(
            "config",
            "the body must be a JSON object (the agent config)",
        ));
    };
    unknown_field(object, CONFIG_FIELDS, "")?;
    if let Some(Value::Object(model)) = object.get("model") {
        unknown_field(model, MODEL_FIELDS, "model.")?;
    }
    if let Some(Value::Object(approvals)) = object.get("approvals") {
        unknown_field(approvals, APPROVAL_FIELDS, "approvals.")?;
    }
    if let Some(Value::Object(limits)) = object.get("limits") {
        unknown_field(limits, LIMIT_FIELDS, "limits.")?;
    }
    check_mcp_headers(object.get("tools"))
}

/// Headers of MCP tool entries must be in the egress policy's safe set
/// ([`check_mcp_header`]). A merge patch replaces `tools` whole, so checking
/// the array in the body covers creation and patches alike.
fn check_mcp_headers(tools: Option<&Value>) -> Result<(), ApiError> {
    let Some(Value::Array(tools)) = tools else {
        return Ok(());
    };
    for (i, tool) in tools.iter().enumerate() {
        if tool.get("type").and_then(Value::as_str) != Some("mcp") {
            continue;
        }
        let Some(Value::Object(headers)) = tool.get("headers") else {
            continue;
        };
        for name in headers.keys() {
            check_mcp_header(name).map_err(|reason| {
                ApiError::invalid(format!("tools[{i}].headers.{name}"), reason)
            })?;
        }
    }
    Ok(())
}

fn unknown_field(
    object: &Map<String, Value>,
    known: &[&str],
    prefix: &str,
) -> Result<(), ApiError> {
    match object.keys().find(|k| !known.contains(&k.as_str())) {
        Some(key) => Err(ApiError::invalid(
            format!("{prefix}{key}"),
            format!(
                "unknown field {prefix}{key}; expected one of: {}",
                known.join(", ")
            ),
        )),
        None => Ok(()),
    }
}

/// The agent of `caller`'s project, or the 404 a missing one gets.
async fn load(db: &tokio_postgres::Client, caller: &Caller, id: Uuid) -> Result<Agent, ApiError> {
    store::get_agent(db, caller.project_id, id)
        .await?
        .ok_or_else(|| ApiError::agent_not_found(id))
}

/// Create an agent.
#[utoipa::path(
    post,
    path = "/v1/agents",
    tag = "agents",
    request_body = AgentConfig,
    responses(
        (status = 201, body = AgentView, headers(("Location" = String, description = "/v1/agents/{id}"))),
        (status = 400, description = "invalid config; `field` names the field", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 413, body = ErrorBody),
        (status = 422, description = "`model_not_permitted`: the project may not use this endpoint, model or base_url; `field` names it", body = ErrorBody),
    )
)]
pub async fn create_agent(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(config): ApiJson<Value>,
) -> Result<impl IntoResponse, ApiError> {
    check_config_fields(&config)?;
    let db = state.db().await?;
    let id = store::create_agent(&**db, caller.project_id, &config).await?;
    record_agent(id);
    let agent = load(&db, &caller, id).await?;
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, format!("/v1/agents/{id}"))],
        Json(AgentView::from(agent)),
    ))
}

/// List agents: oldest first, or newest activity first with search
/// (`order=activity`).
#[utoipa::path(
    get,
    path = "/v1/agents",
    tag = "agents",
    params(ListQuery),
    responses((status = 200, body = AgentList), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody))
)]
pub async fn list_agents(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<AgentList>, ApiError> {
    let limit = page_limit(query.limit)?;
    if query.order.unwrap_or_default() == ListOrder::Activity {
        return list_by_activity(&state, caller, query, limit).await;
    }
    if query.cursor.is_some() || query.q.is_some() {
        let field = if query.q.is_some() { "q" } else { "cursor" };
        return Err(ApiError::invalid(
            field,
            format!("{field} needs order=activity"),
        ));
    }
    let db = state.db().await?;
    let mut agents = store::list_agents(
        &**db,
        caller.project_id,
        query.state.map(Into::into),
        query.after,
        limit + 1,
    )
    .await?;
    let has_more = agents.len() as i64 > limit;
    agents.truncate(limit as usize);
    Ok(Json(AgentList {
        agents: agents.into_iter().map(AgentView::from).collect(),
        has_more,
        next_cursor: None,
    }))
}

/// `order=activity`: newest activity first, keyset-paged by
/// (activity, id), narrowed by `state` and `q`.
async fn list_by_activity(
    state: &AppState,
    caller: Caller,
    query: ListQuery,
    limit: i64,
) -> Result<Json<AgentList>, ApiError> {
    if query.after.is_some() {
        return Err(ApiError::invalid(
            "after",
            "after pages order=created; order=activity pages with cursor",
        ));
    }
    let before = query.cursor.as_deref().map(parse_cursor).transpose()?;
    let mut filter = match query.q.as_deref().map(str::trim) {
        Some(q) if !q.is_empty() => search_filter(q)?,
        _ => console::AgentFilter::default(),
    };
    filter.state = query.state.map(Into::into);
    let db = state.db().await?;
    let mut agents =
        console::agents_by_activity(&**db, caller.project_id, &filter, before, limit + 1).await?;
    let has_more = agents.len() as i64 > limit;
    agents.truncate(limit as usize);
    let next_cursor = agents
        .last()
        .filter(|_| has_more)
        .map(|last| format_cursor(last.activity, last.agent.id));
    Ok(Json(AgentList {
        agents: agents
            .into_iter()
            .map(|a| AgentView {
                activity_at: Some(a.activity),
                ..AgentView::from(a.agent)
            })
            .collect(),
        has_more,
        next_cursor,
    }))
}

/// A cursor is `<activity, RFC 3339 with microseconds>_<agent id>`: opaque to
/// clients, readable in a log.
fn format_cursor(activity: DateTime<Utc>, id: Uuid) -> String {
    format!(
        "{}_{id}",
        activity.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
    )
}

fn parse_cursor(cursor: &str) -> Result<console::ActivityCursor, ApiError> {
    cursor
        .split_once('_')
        .and_then(|(activity, id)| {
            Some(console::ActivityCursor {
                activity: DateTime::parse_from_rfc3339(activity)
                    .ok()?
                    .with_timezone(&Utc),
                id: id.parse().ok()?,
            })
        })
        .ok_or_else(|| {
            ApiError::invalid(
                "cursor",
                "cursor must be the next_cursor of a previous page",
            )
        })
}

/// The filter a search text `q` asks for (see [`ListQuery::q`]).
fn search_filter(q: &str) -> Result<console::AgentFilter, ApiError> {
    if let Ok(id) = q.parse::<Uuid>() {
        return Ok(console::AgentFilter {
            id: Some(id),
            ..Default::default()
        });
    }
    if let Some((key, value)) = q.split_once('=') {
        let key = key.trim();
        if key.is_empty() {
            return Err(ApiError::invalid("q", "q: key=value needs a key"));
        }
        let value = value.trim();
        let value = match serde_json::from_str::<Value>(value) {
            Ok(scalar) if !scalar.is_object() && !scalar.is_array() => scalar,
            _ => Value::String(value.to_owned()),
        };
        let mut metadata = Map::new();
        metadata.insert(key.to_owned(), value);
        return Ok(console::AgentFilter {
            metadata: Some(Value::Object(metadata)),
            ..Default::default()
        });
    }
    Ok(console::AgentFilter {
        text: Some(q.to_owned()),
        ..Default::default()
    })
}

/// A page size: default 100, capped at 1000, at least 1.
pub fn page_limit(limit: Option<i64>) -> Result<i64, ApiError> {
    match limit {
        None => Ok(LIST_DEFAULT),
        Some(n) if n < 1 => Err(ApiError::invalid("limit", "limit must be ≥ 1")),
        Some(n) => Ok(n.min(LIST_MAX)),
    }
}

/// Read an agent.
#[utoipa::path(
    get,
    path = "/v1/agents/{id}",
    tag = "agents",
    params(("id" = Uuid, Path, description = "agent id")),
    responses((status = 200, body = AgentView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody))
)]
pub async fn get_agent(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<AgentView>, ApiError> {
    record_agent(id);
    let db = state.db().await?;
    Ok(Json(load(&db, &caller, id).await?.into()))
}

/// Change an agent's config by a JSON merge patch (RFC 7396: objects merge,
/// `null` removes a field, arrays are replaced). Recorded as
/// `config.updated`; applies to the next model call, retries included.
#[utoipa::path(
    patch,
    path = "/v1/agents/{id}",
    tag = "agents",
    params(("id" = Uuid, Path, description = "agent id")),
    request_body(content = AgentConfig, description = "a merge patch of the config", content_type = "application/merge-patch+json"),
    responses(
        (status = 200, body = AgentView),
        (status = 400, description = "the patched config is invalid; `field` names the field", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "the agent is archived", body = ErrorBody),
        (status = 422, description = "`model_not_permitted`: the project may not use this endpoint, model or base_url; `field` names it", body = ErrorBody),
    )
)]
pub async fn patch_agent(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(patch): ApiJson<Value>,
) -> Result<Json<AgentView>, ApiError> {
    record_agent(id);
    check_config_fields(&patch)?;
    let db = state.db().await?;
    if !store::agent_in_project(&**db, caller.project_id, id).await? {
        return Err(ApiError::agent_not_found(id));
    }
    store::patch_agent_config(&**db, id, &patch).await?;
    Ok(Json(load(&db, &caller, id).await?.into()))
}

/// Cancel the agent's current turn: waiting tool calls are cancelled (later
/// answers get 409) and `turn.cancelled` is saved; an in-flight step stops.
#[utoipa::path(
    post,
    path = "/v1/agents/{id}/cancel",
    tag = "agents",
    params(("id" = Uuid, Path, description = "agent id")),
    responses(
        (status = 200, description = "cancelled at once", body = CancelView),
        (status = 202, description = "a worker is mid-step; it has been asked to stop", body = CancelView),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "no turn to cancel (idle or archived)", body = ErrorBody),
    )
)]
pub async fn cancel_agent(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<impl IntoResponse, ApiError> {
    record_agent(id);
    let db = state.db().await?;
    if !store::agent_in_project(&**db, caller.project_id, id).await? {
        return Err(ApiError::agent_not_found(id));
    }
    let outcome = store::request_cancel(&**db, id).await?;
    let agent = load(&db, &caller, id).await?;
    let status = match outcome {
        CancelOutcome::Cancelled => StatusCode::OK,
        CancelOutcome::Requested => StatusCode::ACCEPTED,
    };
    Ok((
        status,
        Json(CancelView {
            status: outcome,
            agent: agent.into(),
        }),
    ))
}

/// Archive an idle agent: it takes no new inputs (409).
#[utoipa::path(
    post,
    path = "/v1/agents/{id}/archive",
    tag = "agents",
    params(("id" = Uuid, Path, description = "agent id")),
    responses(
        (status = 200, body = AgentView),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "the agent is not idle", body = ErrorBody),
    )
)]
pub async fn archive_agent(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<AgentView>, ApiError> {
    record_agent(id);
    let db = state.db().await?;
    if !store::agent_in_project(&**db, caller.project_id, id).await? {
        return Err(ApiError::agent_not_found(id));
    }
    store::archive_agent(&**db, id).await?;
    Ok(Json(load(&db, &caller, id).await?.into()))
}

#[cfg(test)]
mod tests {
    use utoipa::openapi::schema::Schema;
    use utoipa::openapi::RefOr;
    use utoipa::PartialSchema;

    use super::*;

    fn properties(schema: RefOr<Schema>) -> Vec<String> {
        match schema {
            RefOr::T(Schema::Object(object)) => object.properties.keys().cloned().collect(),
            _ => panic!("not an object schema"),
        }
    }

    fn sorted(fields: &[&str]) -> Vec<String> {
        let mut fields: Vec<String> = fields.iter().map(|f| f.to_string()).collect();
        fields.sort();
        fields
    }

    #[test]
    fn the_checked_fields_are_the_documented_fields() {
        let mut config = properties(AgentConfig::schema());
        config.sort();
        assert_eq!(config, sorted(CONFIG_FIELDS));
        let mut model = properties(ModelSettings::schema());
        model.sort();
        assert_eq!(model, sorted(MODEL_FIELDS));
        let mut approvals = properties(ApprovalSettings::schema());
        approvals.sort();
        assert_eq!(approvals, sorted(APPROVAL_FIELDS));
    }

    #[test]
    fn unknown_fields_are_named() {
        let error =
            check_config_fields(&serde_json::json!({"model": {"provider": "openai", "nmae": "x"}}))
                .unwrap_err();
        assert_eq!(error.status(), StatusCode::BAD_REQUEST);
        let error = check_config_fields(&serde_json::json!({"modle": {}})).unwrap_err();
        assert_eq!(error.status(), StatusCode::BAD_REQUEST);
        check_config_fields(&serde_json::json!({"model": {"name": "x"}, "system": null})).unwrap();
    }
}
