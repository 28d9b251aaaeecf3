//! Liveness and readiness.

use std::time::Duration;

use axum::extract::State;
use axum::Json;
use holdfast_wire::api::error::ErrorBody;
use holdfast_wire::api::operations::Health;

use crate::error::ApiError;
use crate::state::AppState;

const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "operations", security(()),
    responses((status = 200, body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
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
            status: "ready".into(),
            listener: Some(
                if state.fanout().is_connected() {
                    "connected"
                } else {
                    "reconnecting"
                }
                .into(),
            ),
        })),
        _ => Err(ApiError::unavailable("the database is unreachable")),
    }
}
