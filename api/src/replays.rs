//! Forks and replays (docs/guides/time-travel.md): `POST
//! /v1/agents/{id}/fork`, `POST|GET /v1/agents/{id}/replays`, `GET
//! /v1/replays/{id}`. The work is SQL's (`fork_agent`, `create_replay`,
//! `replay_report`); a config patch is parsed here first, as `PATCH
//! /v1/agents/{id}` parses one, so a bad one is a 400 naming the field.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use holdfast_db::store;
use holdfast_db::Error;
use holdfast_wire::api::agents::AgentView;
use holdfast_wire::api::error::ErrorBody;
use holdfast_wire::api::replays::{ForkRequest, ReplayList, ReplayReport, ReplayRequest};
use serde::de::DeserializeOwned;
use serde_json::Value;
use uuid::Uuid;

use crate::agents::{load, parse_config};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath};
use crate::observe::record_agent;
use crate::state::AppState;

/// Check `patch` against the config of `agent`, or its config `version`
/// (masked, as `PATCH` sees it): the patched config must parse. SQL applies
/// it again to the config stored, under the source's row lock.
async fn check_patch(
    state: &AppState,
    db: &tokio_postgres::Client,
    caller: &Caller,
    agent: Uuid,
    patch: Option<&Value>,
    version: Option<i32>,
) -> Result<(), ApiError> {
    let current = load(db, caller, agent).await?.config;
    let mut patched = match version {
        None => current,
        Some(version) => {
            store::get_config_version(db, agent, version)
                .await?
                .ok_or_else(|| {
                    ApiError::invalid(
                        "version",
                        format!("agent {agent} has no config version {version}"),
                    )
                })?
                .config
        }
    };
    if let Some(patch) = patch {
        if !patch.is_object() {
            return Err(ApiError::invalid(
                "config",
                "config must be a JSON object (a merge patch of the agent's config)",
            ));
        }
        json_patch::merge(&mut patched, patch);
        parse_config(&patched, &state.config().egress).await?;
    }
    Ok(())
}

/// A document SQL built, read as the API's type of it.
fn typed<T: DeserializeOwned>(document: Value, what: &str) -> Result<T, ApiError> {
    serde_json::from_value(document)
        .map_err(|e| Error::Migration(format!("{what} document: {e}")).into())
}

/// Fork an agent at one of its steps: a new agent of the project whose
/// history is the source's up to that point (open tool calls there closed
/// as interrupted), idle, with `forked_from` set; its timeline opens with
/// `agent.forked`. Stored files are shared with the source.
#[utoipa::path(
    post,
    path = "/v1/agents/{id}/fork",
    tag = "agents",
    params(("id" = Uuid, Path, description = "the source agent's id")),
    request_body = ForkRequest,
    responses(
        (status = 201, body = AgentView, headers(("Location" = String, description = "/v1/agents/{id} of the fork"))),
        (status = 400, description = "both `at.seq` and `at.turn`, a seq not on the timeline, a turn not finished, a config version the source does not have, or an invalid patched config; `field` names it", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 422, description = "as for `PATCH /v1/agents/{id}`", body = ErrorBody),
    )
)]
pub async fn fork_agent(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(request): ApiJson<ForkRequest>,
) -> Result<impl IntoResponse, ApiError> {
    record_agent(id);
    let db = state.db().await?;
    check_patch(
        &state,
        &db,
        &caller,
        id,
        request.config.as_ref(),
        request.version,
    )
    .await?;
    let at = request.at.unwrap_or_default();
    let fork = store::fork_agent(
        &db,
        caller.project_id,
        id,
        store::ForkAt {
            seq: at.seq,
            turn: at.turn,
        },
        request.config.as_ref(),
        request.version,
    )
    .await?;
    let agent = load(&db, &caller, fork).await?;
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, format!("/v1/agents/{fork}"))],
        Json(AgentView::from(agent)),
    ))
}

/// Replay an agent's recorded turns with a changed config: a hidden agent
/// is sent the source's inputs turn by turn, and its tool calls are
/// answered from the recording (nothing runs: no command, no client wait,
/// no MCP or web request). Follow it with `GET /v1/replays/{id}`, or the
/// hidden agent's stream; `replay.completed` says when it ends.
#[utoipa::path(
    post,
    path = "/v1/agents/{id}/replays",
    tag = "replays",
    params(("id" = Uuid, Path, description = "the source agent's id")),
    request_body = ReplayRequest,
    responses(
        (status = 201, body = ReplayReport, headers(("Location" = String, description = "/v1/replays/{id}"))),
        (status = 400, description = "a bad turn range, no recorded turn in it, or an invalid patched config; `field` names it", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 422, description = "as for `PATCH /v1/agents/{id}`", body = ErrorBody),
    )
)]
pub async fn create_replay(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(request): ApiJson<ReplayRequest>,
) -> Result<impl IntoResponse, ApiError> {
    record_agent(id);
    let db = state.db().await?;
    check_patch(
        &state,
        &db,
        &caller,
        id,
        request.config.as_ref(),
        request.version,
    )
    .await?;
    let turns = request.turns.unwrap_or_default();
    let replay = store::create_replay(
        &db,
        caller.project_id,
        id,
        request.config.as_ref(),
        turns.from,
        turns.to,
        request.version,
    )
    .await?;
    let report = report(&db, &caller, replay).await?;
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, format!("/v1/replays/{replay}"))],
        Json(report),
    ))
}

/// An agent's replays, oldest first, without their turns.
#[utoipa::path(
    get,
    path = "/v1/agents/{id}/replays",
    tag = "replays",
    params(("id" = Uuid, Path, description = "the source agent's id")),
    responses((status = 200, body = ReplayList), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody))
)]
pub async fn list_replays(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<ReplayList>, ApiError> {
    record_agent(id);
    let db = state.db().await?;
    let list = store::list_replays(&db, caller.project_id, id)
        .await?
        .ok_or_else(|| ApiError::agent_not_found(id))?;
    Ok(Json(typed(list, "list_replays")?))
}

/// A replay's report: per turn, the source's and the replay's final
/// answers, tool calls, usage and the first divergence; and the totals.
#[utoipa::path(
    get,
    path = "/v1/replays/{id}",
    tag = "replays",
    params(("id" = Uuid, Path, description = "replay id")),
    responses((status = 200, body = ReplayReport), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody))
)]
pub async fn get_replay(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<ReplayReport>, ApiError> {
    let db = state.db().await?;
    Ok(Json(report(&db, &caller, id).await?))
}

async fn report(
    db: &tokio_postgres::Client,
    caller: &Caller,
    replay: Uuid,
) -> Result<ReplayReport, ApiError> {
    let report = store::replay_report(db, caller.project_id, replay)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("replay {replay} not found")))?;
    typed(report, "replay_report")
}
