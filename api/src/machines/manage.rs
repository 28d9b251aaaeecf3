//! `/v1/machines`, with a project's API key: register a machine (its token
//! is in the answer, once), list machines with their online state, start a
//! wake attempt, rotate a machine's token, delete a machine.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use holdfast_db::store;
use holdfast_providers::egress::{refusal_in, EgressKind, EgressPolicy};
use holdfast_wire::api::error::ErrorBody;
use holdfast_wire::api::machines::{
    MachineCreated, MachineList, MachineView, RegisterMachineRequest, WakeRequest, WakeView,
};
use holdfast_wire::domain::MachineWake;
use serde_json::json;
use uuid::Uuid;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{parse_json, ApiJson, ApiPath};
use crate::state::AppState;

/// A wake attempt lasts this long unless the request says otherwise.
const DEFAULT_WAKE_WINDOW_SECS: u64 = 300;
/// How long the API waits for a machine's wake_url to answer.
const WAKE_URL_TIMEOUT: Duration = Duration::from_secs(5);

/// Register a machine; the answer carries its token, shown only once.
#[utoipa::path(
    post,
    path = "/v1/machines",
    tag = "machines",
    request_body = RegisterMachineRequest,
    responses(
        (status = 201, body = MachineCreated),
        (status = 400, description = "bad name or wake_url; `field` names it", body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 409, description = "the project already has a machine of that name", body = ErrorBody),
    )
)]
pub async fn register_machine(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<RegisterMachineRequest>,
) -> Result<impl IntoResponse, ApiError> {
    // An IP-literal wake_url the egress policy refuses is refused now; a
    // name is judged by what it resolves to when it is called.
    let wake_url = request.wake_url.as_deref().map(reqwest::Url::parse);
    if let Some(Ok(url)) = wake_url {
        if let Err(refused) = state.config().egress.check_url(EgressKind::Wake, &url) {
            return Err(ApiError::invalid("wake_url", refused.to_string()));
        }
    }
    let db = state.db().await?;
    let created = store::register_machine(
        &db,
        caller.project_id,
        &request.name,
        request.wake_url.as_deref(),
    )
    .await?;
    let id = created.machine_id;
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, format!("/v1/machines/{id}"))],
        Json(MachineCreated::from(created)),
    ))
}

/// Give a machine a new token, shown only in this answer. The old token is
/// refused from now on: the daemon using it stops (its claims and
/// heartbeats get 401) and must be started again with the new one.
#[utoipa::path(
    post,
    path = "/v1/machines/{id}/token",
    tag = "machines",
    params(("id" = Uuid, Path, description = "machine id")),
    responses(
        (status = 200, body = MachineCreated),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, description = "no such machine in this project (or deleted)", body = ErrorBody),
    )
)]
pub async fn rotate_machine_token(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<Json<MachineCreated>, ApiError> {
    let db = state.db().await?;
    let rotated = store::rotate_machine_token(&db, caller.project_id, id).await?;
    Ok(Json(MachineCreated::from(rotated)))
}

/// Delete a machine. Its token is refused from now on (its daemon stops),
/// its name is free again, and its unfinished commands end at once: a
/// queued one fails (`command.failed`, reason `machine_deleted`; it never
/// ran), an accepted one becomes `unknown` (`command.unknown`, reason
/// `machine_deleted`: it may still run on the machine; its result will not
/// be received). The agents waiting on them get that result and go on.
#[utoipa::path(
    delete,
    path = "/v1/machines/{id}",
    tag = "machines",
    params(("id" = Uuid, Path, description = "machine id")),
    responses(
        (status = 204, description = "deleted"),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, description = "no such machine in this project (or already deleted)", body = ErrorBody),
    )
)]
pub async fn delete_machine(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<StatusCode, ApiError> {
    let db = state.db().await?;
    let ended = store::delete_machine(&db, caller.project_id, id).await?;
    tracing::info!(machine = %id, commands_ended = ended, "machine deleted");
    Ok(StatusCode::NO_CONTENT)
}

/// List the project's machines, oldest first, with their online state and
/// commands.
#[utoipa::path(
    get,
    path = "/v1/machines",
    tag = "machines",
    responses((status = 200, body = MachineList), (status = 401, body = ErrorBody))
)]
pub async fn list_machines(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<MachineList>, ApiError> {
    let db = state.db().await?;
    let machines = store::list_machines(&db, caller.project_id).await?;
    Ok(Json(MachineList {
        machines: machines.into_iter().map(MachineView::from).collect(),
    }))
}

/// Start a wake attempt: for its window, the machine's queued commands wait
/// instead of failing as offline, and its wake_url (if any) is POSTed. A
/// wake_url that fails or does not answer in 5 s is reported, not retried.
#[utoipa::path(
    post,
    path = "/v1/machines/{id}/wake",
    tag = "machines",
    params(("id" = Uuid, Path, description = "machine id")),
    request_body(content = Option<WakeRequest>, description = "optional"),
    responses(
        (status = 200, body = WakeView),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, body = ErrorBody),
    )
)]
pub async fn wake_machine(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    body: Bytes,
) -> Result<Json<WakeView>, ApiError> {
    let request = if body.iter().all(u8::is_ascii_whitespace) {
        WakeRequest { window_secs: None }
    } else {
        parse_json::<WakeRequest>(&body)?
    };
    let window_secs = request.window_secs.unwrap_or(DEFAULT_WAKE_WINDOW_SECS);
    if !(1..=86_400).contains(&window_secs) {
        return Err(ApiError::invalid(
            "window_secs",
            "window_secs must be between 1 and 86400",
        ));
    }
    let wake = {
        let db = state.db().await?;
        store::start_machine_wake(&db, caller.project_id, id, Duration::from_secs(window_secs))
            .await?
    };
    let (wake_url_status, wake_url_error) = match &wake.wake_url {
        Some(url) => call_wake_url(url, &wake, &state.config().egress).await,
        None => (None, None),
    };
    Ok(Json(WakeView {
        machine_id: wake.machine_id,
        wake_until: wake.wake_until,
        wake_url_called: wake.wake_url.is_some(),
        wake_url_status,
        wake_url_error,
    }))
}

/// POST the wake request; its status, or why it failed. Redirects are not
/// followed. The URL is the tenant's, so it goes through the egress policy
/// (kind `wake`): a wake endpoint on a private network needs the operator
/// to allow its range (`HOLDFAST_EGRESS_ALLOW=wake=…`); a refused one is
/// never connected to, and the answer's `wake_url_error` says why.
async fn call_wake_url(
    url: &str,
    wake: &MachineWake,
    egress: &Arc<EgressPolicy>,
) -> (Option<u16>, Option<String>) {
    let parsed = match reqwest::Url::parse(url) {
        Ok(parsed) => parsed,
        Err(e) => return (None, Some(format!("wake_url is not a valid URL: {e}"))),
    };
    if let Err(refused) = egress.check_url(EgressKind::Wake, &parsed) {
        return (None, Some(refused.to_string()));
    }
    let client = match egress
        .client_builder(EgressKind::Wake)
        .timeout(WAKE_URL_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
    {
        Ok(client) => client,
        Err(e) => return (None, Some(e.to_string())),
    };
    let body = json!({
        "machine_id": wake.machine_id,
        "name": wake.name,
        "wake_until": wake.wake_until,
    });
    match client.post(parsed).json(&body).send().await {
        Ok(response) => {
            let status = response.status();
            let error = (!status.is_success()).then(|| format!("wake_url answered {status}"));
            (Some(status.as_u16()), error)
        }
        Err(e) => {
            tracing::warn!(machine = %wake.machine_id, error = %e, "calling a wake_url");
            let refused = refusal_in(&e).map(ToString::to_string);
            (None, Some(refused.unwrap_or_else(|| e.to_string())))
        }
    }
}
