//! Webhook endpoints: register (the signing secret is shown once), list,
//! delete, and read an endpoint's deliveries. Delivery itself is the
//! maintenance process's dispatcher (worker/src/webhooks.rs); this module is
//! a shell over the SQL in sql/schema/webhooks.sql.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use holdfast_db::store;
use holdfast_providers::egress::EgressKind;
use holdfast_wire::api::error::ErrorBody;
use holdfast_wire::api::webhooks::{
    CreateWebhookRequest, CreatedWebhookView, DeliveryList, DeliveryStatusName, DeliveryView,
    WebhookList, WebhookView,
};
use holdfast_wire::domain::WebhookDeliveryFilter;
use serde::Deserialize;
use serde_json::Value;
use utoipa::IntoParams;
use uuid::Uuid;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery};
use crate::state::AppState;

/// Register a webhook endpoint for the key's project.
#[utoipa::path(
    post,
    path = "/v1/webhooks",
    tag = "webhooks",
    request_body = CreateWebhookRequest,
    responses(
        (status = 201, body = CreatedWebhookView),
        (status = 400, description = "bad URL or unknown event type; `field` names it", body = ErrorBody),
        (status = 401, body = ErrorBody),
    )
)]
pub async fn create_webhook(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<CreateWebhookRequest>,
) -> Result<(StatusCode, Json<CreatedWebhookView>), ApiError> {
    // The policy's ranges judge an IP-literal host here; the SQL check that
    // follows knows only whether any special range is allowed at all.
    let egress = &state.config().egress;
    if let Ok(url) = reqwest::Url::parse(&request.url) {
        if let Err(refused) = egress.check_url(EgressKind::Webhook, &url) {
            return Err(ApiError::invalid("url", refused.to_string()));
        }
    }
    let db = state.db().await?;
    let events = Value::from(request.events);
    let created = store::create_webhook_endpoint(
        &db,
        caller.project_id,
        &request.url,
        &events,
        request.description.as_deref(),
        egress.allows_any_special(EgressKind::Webhook),
    )
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(CreatedWebhookView {
            endpoint: created.endpoint.into(),
            secret: created.secret,
        }),
    ))
}

/// The project's webhook endpoints.
#[utoipa::path(
    get,
    path = "/v1/webhooks",
    tag = "webhooks",
    responses((status = 200, body = WebhookList), (status = 401, body = ErrorBody))
)]
pub async fn list_webhooks(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<Json<WebhookList>, ApiError> {
    let db = state.db().await?;
    let endpoints = store::list_webhook_endpoints(&db, caller.project_id).await?;
    Ok(Json(WebhookList {
        webhooks: endpoints.into_iter().map(WebhookView::from).collect(),
    }))
}

/// Delete an endpoint; its pending deliveries are failed.
#[utoipa::path(
    delete,
    path = "/v1/webhooks/{id}",
    tag = "webhooks",
    params(("id" = Uuid, Path, description = "webhook endpoint id")),
    responses((status = 204), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody))
)]
pub async fn delete_webhook(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
) -> Result<StatusCode, ApiError> {
    let db = state.db().await?;
    store::delete_webhook_endpoint(&db, caller.project_id, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeliveriesQuery {
    #[param(inline)]
    status: Option<DeliveryStatusName>,
    /// At most this many, newest first (default 100, at most 1000).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i32>,
    /// Page: deliveries older than this delivery id.
    before: Option<Uuid>,
}

/// An endpoint's deliveries, newest first.
#[utoipa::path(
    get,
    path = "/v1/webhooks/{id}/deliveries",
    tag = "webhooks",
    params(("id" = Uuid, Path, description = "webhook endpoint id"), DeliveriesQuery),
    responses((status = 200, body = DeliveryList), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody))
)]
pub async fn list_deliveries(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<Uuid>,
    ApiQuery(query): ApiQuery<DeliveriesQuery>,
) -> Result<Json<DeliveryList>, ApiError> {
    let limit = query.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "limit must be between 1 and 1000",
        )
        .with_field("limit"));
    }
    let db = state.db().await?;
    let filter = WebhookDeliveryFilter {
        status: query.status.map(Into::into),
        limit,
        before: query.before,
    };
    let deliveries = store::list_webhook_deliveries(&db, caller.project_id, id, filter).await?;
    Ok(Json(DeliveryList {
        deliveries: deliveries.into_iter().map(DeliveryView::from).collect(),
    }))
}
