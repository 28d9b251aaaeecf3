//! `/v1/provider-keys`: a project's own model provider keys. Write-only: a
//! key is sealed (AES-256-GCM under the operator's `HOLDFAST_SECRET_KEY`)
//! as it arrives, stored sealed, and never returned; reads show only which
//! providers have one and since when. Keys appear in no event, log or
//! webhook. The worker opens a key only to call the provider, in place of
//! the operator's credential (and, at a custom `model.base_url`, as the only
//! credential).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use holdfast_db::store;
use holdfast_wire::api::error::ErrorBody;
use holdfast_wire::api::provider_keys::{ProviderKeyBody, ProviderKeyList, ProviderKeyView};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath};
use crate::state::AppState;
use holdfast_wire::config::Provider;

/// `anthropic` or `openai`, or a 404 naming the choices (as an unknown
/// route would be).
fn provider_name(provider: &str) -> Result<&str, ApiError> {
    match provider {
        "anthropic" | "openai" => Ok(provider),
        other => Err(ApiError::not_found(format!(
            "no provider {other:?}; expected anthropic or openai"
        ))),
    }
}

/// Set (or replace) the project's own key for a provider.
#[utoipa::path(
    put,
    path = "/v1/provider-keys/{provider}",
    tag = "provider-keys",
    params(("provider" = Provider, Path, description = "anthropic or openai")),
    request_body = ProviderKeyBody,
    responses(
        (status = 200, description = "set; the key is not shown", body = ProviderKeyView),
        (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody),
        (status = 404, description = "no such provider", body = ErrorBody),
        (status = 503, description = "the operator has not set HOLDFAST_SECRET_KEY", body = ErrorBody),
    )
)]
pub async fn set_provider_key(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(provider): ApiPath<String>,
    ApiJson(body): ApiJson<ProviderKeyBody>,
) -> Result<Json<ProviderKeyView>, ApiError> {
    let provider = provider_name(&provider)?;
    let key = body.key.trim();
    if key.is_empty() || key.len() > 4096 || key.chars().any(char::is_control) {
        return Err(ApiError::invalid(
            "key",
            "key must be 1 to 4096 characters with no control characters",
        ));
    }
    let secret = state.config().secret_key.as_ref().ok_or_else(|| {
        ApiError::unavailable(
            "projects' own provider keys are not enabled here: the operator has not set HOLDFAST_SECRET_KEY",
        )
    })?;
    let sealed = secret.seal_provider_key(caller.project_id, provider, key);
    let db = state.db().await?;
    let status = store::set_project_provider_key(&db, caller.project_id, provider, &sealed).await?;
    Ok(Json(status.into()))
}

/// Which providers the project has its own key for (never the keys).
#[utoipa::path(
    get,
    path = "/v1/provider-keys",
    tag = "provider-keys",
    responses((status = 200, body = ProviderKeyList), (status = 401, body = ErrorBody))
)]
pub async fn list_provider_keys(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<ProviderKeyList>, ApiError> {
    let db = state.db().await?;
    let keys = store::list_project_provider_keys(&db, caller.project_id).await?;
    Ok(Json(ProviderKeyList {
        provider_keys: keys.into_iter().map(ProviderKeyView::from).collect(),
    }))
}

/// Delete the project's own key for a provider: its agents use the
/// endpoint's credential again from their next model call.
#[utoipa::path(
    delete,
    path = "/v1/provider-keys/{provider}",
    tag = "provider-keys",
    params(("provider" = Provider, Path, description = "anthropic or openai")),
    responses((status = 204), (status = 401, body = ErrorBody), (status = 404, description = "no key set", body = ErrorBody))
)]
pub async fn delete_provider_key(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(provider): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    let provider = provider_name(&provider)?;
    let db = state.db().await?;
    store::delete_project_provider_key(&db, caller.project_id, provider).await?;
    Ok(StatusCode::NO_CONTENT)
}
