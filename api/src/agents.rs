//! `/v1/agents`: create, read, list, change config, cancel, archive.
//!
//! A config is parsed into [`AgentConfig`] here (a field it does not have,
//! or a value of the wrong type, is a 400 naming the field) and validated
//! again by SQL (`holdfast.validate_config`, the same rule for SQL clients,
//! plus what only the database knows: the operator's maxima and the
//! project's model permissions).

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use chrono::{DateTime, Utc};
use holdfast_db::store::console;
use holdfast_db::store::{self, ConfigApply};
use holdfast_providers::egress::{check_mcp_header, EgressKind, EgressPolicy};
use holdfast_wire::api::agents::{
    AgentList, AgentView, CancelView, ConfigVersionList, ConfigVersionView, ListOrder, StateName,
    TurnOutcome,
};
use holdfast_wire::api::error::ErrorBody;
use holdfast_wire::config::AgentConfig;
use holdfast_wire::domain::{Agent, CancelOutcome};
use serde::Deserialize;
use serde_json::{Map, Value};
use utoipa::IntoParams;
use uuid::Uuid;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::observe::record_agent;
use crate::state::AppState;

const LIST_DEFAULT: i64 = 100;
const LIST_MAX: i64 = 1000;

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only agents in this state.
    state: Option<StateName>,
    /// Only agents whose last turn ended so (`failed`: an error other than
    /// a limit; `limit`: a limit or budget).
    #[param(inline)]
    outcome: Option<TurnOutcome>,
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
    /// metadata or id contains the text, case-insensitively (a part of an
    /// id finds its agent), or one of whose inputs or saved messages holds
    /// its words: whole words, any case, all of them in one input or
    /// message; `"a phrase"`, `or` and `-word` as in a web search
    /// (content over 256 KiB is not searched).
    q: Option<String>,
}

/// `value` as an agent config, or the 400 naming the field that does not
/// fit. Its MCP tool entries, and those of its subagents' configs at any
/// depth ([`mcp_entries`]), are checked here too: their headers must be in
/// the egress policy's safe set ([`check_mcp_header`], 422), and their
/// servers allowed by it ([`EgressPolicy::check_configured_url`], 422): an
/// agent is never created with a tool server it may not reach.
pub(crate) async fn parse_config(
    value: &Value,
    egress: &EgressPolicy,
) -> Result<AgentConfig, ApiError> {
    let config = AgentConfig::from_value(value).map_err(holdfast_db::Error::from)?;
    for (at, entry) in mcp_entries(value, String::new()) {
        if let Some(headers) = entry.get("headers").and_then(Value::as_object) {
            for name in headers.keys() {
                check_mcp_header(name).map_err(|reason| {
                    ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "egress_refused", reason)
                        .with_field(format!("{at}.headers.{name}"))
                })?;
            }
        }
        // A URL that does not parse, or is not http(s), is the config
        // checks' to refuse (400).
        let url = entry.get("url").and_then(Value::as_str);
        let url = url.and_then(|u| reqwest::Url::parse(u).ok());
        if let Some(url) = url.filter(|u| matches!(u.scheme(), "http" | "https")) {
            egress
                .check_configured_url(EgressKind::Mcp, &url)
                .await
                .map_err(|refused| ApiError::egress_refused(format!("{at}.url"), refused))?;
        }
    }
    Ok(config)
}

/// The MCP tool entries of `config` with the path of each (`tools[1]`,
/// `tools[0].config.tools[2]`), the configs of `spawn_subagent` tools
/// included, at any depth.
fn mcp_entries(config: &Value, at: String) -> Vec<(String, &Value)> {
    let Some(tools) = config.get("tools").and_then(Value::as_array) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for (i, tool) in tools.iter().enumerate() {
        let path = format!("{at}tools[{i}]");
        match tool.get("type").and_then(Value::as_str) {
            Some("mcp") => found.push((path, tool)),
            Some("spawn_subagent") => {
                if let Some(child) = tool.get("config") {
                    found.extend(mcp_entries(child, format!("{path}.config.")));
                }
            }
            _ => {}
        }
    }
    found
}

/// The agent of `caller`'s project, or the 404 a missing one gets.
pub(crate) async fn load(
    db: &tokio_postgres::Client,
    caller: &Caller,
    id: Uuid,
) -> Result<Agent, ApiError> {
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
        (status = 422, description = "`model_not_permitted`: the project may not use this endpoint, model or base_url; `server_tools_not_allowed`: the operator has not allowed the project Anthropic's server tools; `egress_refused`: the egress policy refuses an MCP server's address or one of its headers; `field` names it", body = ErrorBody),
    )
)]
pub async fn create_agent(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(config): ApiJson<Value>,
) -> Result<impl IntoResponse, ApiError> {
    parse_config(&config, &state.config().egress).await?;
    let db = state.db().await?;
    let id = store::create_agent(&db, caller.project_id, &config).await?;
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
        &db,
        caller.project_id,
        query.state.map(Into::into),
        query.outcome,
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
    let before = query
        .cursor
        .as_deref()
        .map(parse_cursor)
        .transpose()?
        .map(|(activity, id)| console::ActivityCursor { activity, id });
    let mut filter = match query.q.as_deref().map(str::trim) {
        Some(q) if !q.is_empty() => search_filter(q)?,
        _ => console::AgentFilter::default(),
    };
    filter.state = query.state.map(Into::into);
    filter.outcome = query.outcome;
    let db = state.db().await?;
    let mut agents =
        console::agents_by_activity(&db, caller.project_id, &filter, before, limit + 1).await?;
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

/// A keyset cursor is `<timestamp, RFC 3339 with microseconds>_<id>` (the
/// agent list's activity, the inbox's created_at): opaque to clients,
/// readable in a log.
pub fn format_cursor(at: DateTime<Utc>, id: Uuid) -> String {
    format!(
        "{}_{id}",
        at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
    )
}

/// The timestamp and id of a [`format_cursor`] cursor; a 400 naming
/// `cursor` otherwise.
pub fn parse_cursor(cursor: &str) -> Result<(DateTime<Utc>, Uuid), ApiError> {
    cursor
        .split_once('_')
        .and_then(|(at, id)| {
            Some((
                DateTime::parse_from_rfc3339(at).ok()?.with_timezone(&Utc),
                id.parse().ok()?,
            ))
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

/// A page size: default 100, from 1 to 1000 (as the document says; outside
/// that a 400 naming `limit`).
pub fn page_limit(limit: Option<i64>) -> Result<i64, ApiError> {
    match limit {
        None => Ok(LIST_DEFAULT),
        Some(n) if !(1..=LIST_MAX).contains(&n) => Err(ApiError::invalid(
            "limit",
            format!("limit must be from 1 to {LIST_MAX}"),
        )),
        Some(n) => Ok(n),
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
/// `null` removes a field, arrays are replaced) of its newest version. The
/// result is saved as the next numbered version and recorded as
/// `config.updated` (with the version and the diff). A top-level `"apply"`
/// says when it takes effect: `"now"` (the default: the next model call,
/// retries included) or `"next_turn"` (a running turn finishes on its
/// version; the next turn uses this one).
#[utoipa::path(
    patch,
    path = "/v1/agents/{id}",
    tag = "agents",
    params(("id" = Uuid, Path, description = "agent id")),
    request_body(content = Object, description = "a JSON merge patch of the config (`AgentConfig`: any of its fields, `null` removing one), with an optional top-level `\"apply\": \"now\" | \"next_turn\"`", content_type = "application/merge-patch+json"),
    responses(
        (status = 200, body = AgentView),
        (status = 400, description = "the patched config is invalid, or `apply` is neither `now` nor `next_turn`; `field` names the field", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "the agent is archived", body = ErrorBody),
        (status = 422, description = "`model_not_permitted`: the project may not use this endpoint, model or base_url; `server_tools_not_allowed`: the operator has not allowed the project Anthropic's server tools; `egress_refused`: the egress policy refuses an MCP server's address or one of its headers; `field` names it", body = ErrorBody),
    )
)]
pub async fn patch_agent(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(mut patch): ApiJson<Value>,
) -> Result<Json<AgentView>, ApiError> {
    record_agent(id);
    let apply = match patch.as_object_mut().and_then(|p| p.remove("apply")) {
        None => ConfigApply::Now,
        Some(Value::String(text)) => text
            .parse()
            .map_err(|_| ApiError::invalid("apply", "apply must be now or next_turn"))?,
        Some(_) => return Err(ApiError::invalid("apply", "apply must be now or next_turn")),
    };
    let db = state.db().await?;
    let agent = load(&db, &caller, id).await?;
    // The patched config is parsed here for its shape (masked header values
    // are strings like any other); SQL applies the patch again under the
    // agent's row lock, to the newest version stored then.
    let newest = agent
        .next_turn_config_version
        .unwrap_or(agent.config_version);
    let mut patched = store::get_config_version(&db, id, newest)
        .await?
        .map_or(agent.config, |v| v.config);
    json_patch::merge(&mut patched, &patch);
    parse_config(&patched, &state.config().egress).await?;
    store::patch_agent_config(&db, id, &patch, apply).await?;
    Ok(Json(load(&db, &caller, id).await?.into()))
}

/// The agent's config versions, oldest first (configs masked as in
/// `GET /v1/agents/{id}`).
#[utoipa::path(
    get,
    path = "/v1/agents/{id}/versions",
    tag = "agents",
    params(("id" = Uuid, Path, description = "agent id")),
    responses((status = 200, body = ConfigVersionList), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody))
)]
pub async fn list_config_versions(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<ConfigVersionList>, ApiError> {
    record_agent(id);
    let db = state.db().await?;
    if !store::agent_in_project(&db, caller.project_id, id).await? {
        return Err(ApiError::agent_not_found(id));
    }
    let versions = store::list_config_versions(&db, id).await?;
    Ok(Json(ConfigVersionList {
        versions: versions.into_iter().map(ConfigVersionView::from).collect(),
    }))
}

/// One config version of the agent.
#[utoipa::path(
    get,
    path = "/v1/agents/{id}/versions/{version}",
    tag = "agents",
    params(("id" = Uuid, Path, description = "agent id"), ("version" = i32, Path, description = "version number, from 1")),
    responses((status = 200, body = ConfigVersionView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody))
)]
pub async fn get_config_version(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath((id, version)): ApiPath<(Uuid, i32)>,
) -> Result<Json<ConfigVersionView>, ApiError> {
    record_agent(id);
    let db = state.db().await?;
    if !store::agent_in_project(&db, caller.project_id, id).await? {
        return Err(ApiError::agent_not_found(id));
    }
    let found = store::get_config_version(&db, id, version).await?;
    let found = found.ok_or_else(|| {
        ApiError::not_found(format!("agent {id} has no config version {version}"))
    })?;
    Ok(Json(found.into()))
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
    if !store::agent_in_project(&db, caller.project_id, id).await? {
        return Err(ApiError::agent_not_found(id));
    }
    let outcome = store::request_cancel(&db, id).await?;
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
    if !store::agent_in_project(&db, caller.project_id, id).await? {
        return Err(ApiError::agent_not_found(id));
    }
    store::archive_agent(&db, id).await?;
    Ok(Json(load(&db, &caller, id).await?.into()))
}
