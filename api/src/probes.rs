//! Liveness and readiness.

use holdfast_client::wire::error::ErrorBody;
use std::time::Duration;

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::state::AppState;

const READY_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Serialize, ToSchema)]
pub struct Health {
    /// `ok` (alive) or `ready` (can serve).
    status: &'static str,
    /// Whether the LISTEN connection that feeds streams is up (readiness only).
    #[serde(skip_serializing_if = "Option::is_none")]
    listener: Option<&'static str>,
}

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "operations", security(()),
    responses((status = 200, body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok",
        listener: None,
    })
}

/// Readiness: Postgres answers a query.
#[utoipa::path(get, path = "/readyz", tag = "operations", security(()),
    responses((status = 200, body = Health), (status = 503, body = ErrorBody)))]
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    let check = async {
        let db = state.pool().get().await.ok()?;
        db.simple_query("SELECT 1").await.ok()
    };
    match tokio::time::timeout(READY_TIMEOUT, check).await {
        Ok(Some(_)) => Ok(Json(Health {
            status: "ready",
            listener: Some(if state.fanout().is_connected() {
                "connected"
            } else {
                "reconnecting"
            }),
        })),
        _ => Err(ApiError::unavailable("the database is unreachable")),
    }
}
