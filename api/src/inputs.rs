//! `POST /v1/agents/{id}/inputs`, idempotent by `Idempotency-Key`; the
//! waiting inputs (`GET /v1/agents/{id}/inputs`) and taking back a queued
//! one (`DELETE /v1/inputs/{id}`).
//!
//! The response is built only from the saved input row, so a replay returns
//! exactly the first response (plus `Idempotent-Replayed: true`). The key's
//! uniqueness and the same-body check are SQL's (`create_input_or_replay`):
//! concurrent requests with one key serialize there and create one input.
//! Inputs posted at once share a commit ([`Inputs`]).

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use deadpool_postgres::Pool;
use holdfast_db::group_commit::GroupWrite;
use holdfast_db::store::{self, NewInput};
use holdfast_db::{Error, Result};
use holdfast_providers::egress::{EgressKind, EgressPolicy};
use holdfast_providers::media_urls;
use holdfast_telemetry::TraceHeaders;
use holdfast_wire::api::error::ErrorBody;
use holdfast_wire::api::inputs::{InputList, InputRequest, InputView, UpdateInputRequest};
use holdfast_wire::domain::{PostedInput, WaitingInputs};
use serde::Deserialize;
use serde_json::Value;
use utoipa::IntoParams;
use uuid::Uuid;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::observe::record_agent;
use crate::state::AppState;

pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
pub const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";
const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;
const TRACEPARENT: &str = "traceparent";
const TRACESTATE: &str = "tracestate";

/// Send an input to an agent.
#[utoipa::path(
    post,
    path = "/v1/agents/{id}/inputs",
    tag = "agents",
    params(
        ("id" = Uuid, Path, description = "agent id"),
        ("Idempotency-Key" = Option<String>, Header, description = "1 to 255 characters; a replay returns the first response"),
        ("traceparent" = Option<String>, Header, description = "W3C trace context: the turn this input opens is traced as its child; malformed: 400"),
        ("tracestate" = Option<String>, Header, description = "W3C trace state, kept with `traceparent` (ignored without it)"),
    ),
    request_body = InputRequest,
    responses(
        (status = 201, body = InputView, headers(("Idempotent-Replayed" = String, description = "`true` on a replay"))),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "the agent is archived", body = ErrorBody),
        (status = 413, description = "the body is over the limit for content (48 MiB)", body = ErrorBody),
        (status = 422, description = "`idempotency_key_reused`: the key was used with another body or mode; `unsupported_content`: the agent's provider cannot take an image or document block; `egress_refused`: the egress policy refuses an image's or document's URL (`content_url`); `attachment_quota_exceeded`: the input's new files would pass the agent's or the project's attachment quota (the message names it); `request_too_large`: its files would take the agent's next model request past what the provider takes; `field` names it", body = ErrorBody),
    )
)]
pub async fn create_input(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    headers: HeaderMap,
    ApiJson(request): ApiJson<InputRequest>,
) -> Result<impl IntoResponse, ApiError> {
    record_agent(id);
    let key = idempotency_key(&headers)?;
    let trace = trace_headers(&headers)?;
    check_content_urls(&state.config().egress, &request.content, "content").await?;
    let input = NewInput::new(
        caller.project_id,
        id,
        request.content,
        key,
        trace.as_ref(),
        request.mode,
    );
    let posted = match state.inputs().commit(input).await {
        Ok(posted) => posted,
        Err(Error::NotFound(_)) => return Err(ApiError::agent_not_found(id)),
        Err(e) => return Err(e.into()),
    };
    let mut response = (StatusCode::CREATED, Json(InputView::from(posted.input))).into_response();
    if posted.replayed {
        response
            .headers_mut()
            .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    }
    Ok(response)
}

/// Posted inputs: those that arrive within the commit window share one
/// transaction (`holdfast.create_inputs`), each checked on its own, so each
/// request gets the answer a commit of its own would have had (201, a
/// replay, 404, 409 or 422). Two inputs for one agent never share a batch.
pub struct Inputs;

impl GroupWrite for Inputs {
    type Item = NewInput;
    type Saved = PostedInput;
    const KIND: &'static str = "input";
    type Context = ();

    fn key(input: &NewInput) -> Uuid {
        input.agent_id
    }

    async fn commit_batch(
        pool: &Pool,
        _: &(),
        inputs: &[NewInput],
    ) -> Result<Vec<Result<PostedInput>>> {
        let client = pool.get().await?;
        store::create_inputs(&client, inputs).await
    }
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct InputsQuery {
    /// `queued` (the default: waiting for the open turn to end, removable)
    /// or `pending` (in the open turn, not yet seen by a saved model call).
    #[param(inline)]
    status: Option<WaitingInputs>,
}

/// List an agent's waiting inputs, oldest first.
#[utoipa::path(
    get,
    path = "/v1/agents/{id}/inputs",
    tag = "agents",
    params(("id" = Uuid, Path, description = "agent id"), InputsQuery),
    responses(
        (status = 200, body = InputList),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
pub async fn list_inputs(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(query): ApiQuery<InputsQuery>,
) -> Result<Json<InputList>, ApiError> {
    record_agent(id);
    let db = state.db().await?;
    if !store::agent_in_project(&db, caller.project_id, id).await? {
        return Err(ApiError::agent_not_found(id));
    }
    let which = query.status.unwrap_or(WaitingInputs::Queued);
    let inputs = store::list_inputs(&db, id, which).await?;
    Ok(Json(InputList {
        inputs: inputs.into_iter().map(InputView::from).collect(),
    }))
}

/// Take back a queued input before a turn admits it: it is never consumed,
/// and `input.removed` is recorded.
#[utoipa::path(
    delete,
    path = "/v1/inputs/{id}",
    tag = "agents",
    params(("id" = Uuid, Path, description = "input id")),
    responses(
        (status = 200, description = "removed", body = InputView),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "the input is not queued (a turn has taken it, or it was removed)", body = ErrorBody),
    )
)]
pub async fn remove_input(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<InputView>, ApiError> {
    let not_found = || ApiError::not_found(format!("input {id} not found"));
    let db = state.db().await?;
    let input = store::get_input(&db, id).await?.ok_or_else(not_found)?;
    if !store::agent_in_project(&db, caller.project_id, input.agent_id).await? {
        return Err(not_found());
    }
    record_agent(input.agent_id);
    store::remove_input(&db, id).await?;
    let input = store::get_input(&db, id)
        .await?
        .ok_or_else(ApiError::internal)?;
    Ok(Json(InputView::from(input)))
}

/// Change a waiting input: its mode (`queue` <-> `steer`) and its place
/// among its agent's queued inputs. Changes of one agent's inputs take
/// turns on its row lock; each is recorded as `input.updated`.
#[utoipa::path(
    patch,
    path = "/v1/inputs/{id}",
    tag = "agents",
    params(("id" = Uuid, Path, description = "input id")),
    request_body = UpdateInputRequest,
    responses(
        (status = 200, description = "the input as changed", body = InputView),
        (status = 400, description = "bad mode or position; `field` names it", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
        (status = 409, description = "the input no longer waits, or the change does not apply to it", body = ErrorBody),
    )
)]
pub async fn update_input(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiJson(request): ApiJson<UpdateInputRequest>,
) -> Result<Json<InputView>, ApiError> {
    let not_found = || ApiError::not_found(format!("input {id} not found"));
    let db = state.db().await?;
    let input = store::get_input(&db, id).await?.ok_or_else(not_found)?;
    if !store::agent_in_project(&db, caller.project_id, input.agent_id).await? {
        return Err(not_found());
    }
    record_agent(input.agent_id);
    let input = store::update_input(&db, id, request.mode, request.position).await?;
    Ok(Json(InputView::from(input)))
}

/// Refuses (422 `egress_refused`, the block's `source.url` named under
/// `field`) an image or document URL the egress policy does not allow
/// (`content_url`): the model provider fetches it, and a self-hosted one
/// would fetch it from inside the operator's network. The worker checks
/// each URL again before every model call that would send it (a name may
/// resolve elsewhere by then).
pub async fn check_content_urls(
    egress: &EgressPolicy,
    content: &Value,
    field: &str,
) -> Result<(), ApiError> {
    for (i, url) in media_urls(content) {
        // Malformed, or not http(s): SQL's content check names it (400).
        let Ok(parsed) = reqwest::Url::parse(url) else {
            continue;
        };
        if !matches!(parsed.scheme(), "http" | "https") {
            continue;
        }
        egress
            .check_configured_url(EgressKind::ContentUrl, &parsed)
            .await
            .map_err(|refused| {
                ApiError::egress_refused(format!("{field}[{i}].source.url"), refused)
            })?;
    }
    Ok(())
}

fn idempotency_key(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    let Some(value) = headers.get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    let key = value.to_str().map_err(|_| {
        ApiError::invalid("Idempotency-Key", "Idempotency-Key must be visible ASCII")
    })?;
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_LEN {
        return Err(ApiError::invalid(
            "Idempotency-Key",
            format!("Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY_LEN} characters"),
        ));
    }
    Ok(Some(key))
}

/// The W3C trace context the input was posted with. A malformed one is
/// refused (400 naming the header) rather than ignored: the input is
/// durable, and a silently dropped parent would leave its turn in a trace
/// of its own with nothing to say why.
fn trace_headers(headers: &HeaderMap) -> Result<Option<TraceHeaders>, ApiError> {
    let Some(parent) = headers.get(TRACEPARENT) else {
        return Ok(None);
    };
    let parent = header_text(TRACEPARENT, parent)?;
    let state = headers
        .get(TRACESTATE)
        .map(|value| header_text(TRACESTATE, value))
        .transpose()?;
    TraceHeaders::parse(parent, state)
        .map(Some)
        .map_err(|e| ApiError::invalid(e.header, e.message))
}

fn header_text<'a>(name: &'static str, value: &'a HeaderValue) -> Result<&'a str, ApiError> {
    value
        .to_str()
        .map_err(|_| ApiError::invalid(name, format!("{name} must be visible ASCII")))
}
