//! `GET /metrics`: Prometheus text. Request counts and latencies and stream
//! clients are recorded as they happen; agents by state and events written
//! are read from the database and written into the response, so every API
//! instance reports the same numbers. Those two cost a scan of the agents
//! table (every agent counts, idle and archived ones included, so no
//! partial index can serve them), so they are read at most once per
//! `metrics_cache` (10 s) per API process, however often it is scraped.
//!
//! The figures cover every project. With `HOLDFAST_METRICS_TOKEN` set the
//! route needs `Authorization: Bearer <token>`; unset, it is open (keep it
//! then on a network only the operator's Prometheus reaches).

use std::sync::{Arc, OnceLock};

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::IntoResponse;
use holdfast_db::store;
use holdfast_wire::api::error::ErrorBody;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use sha2::{Digest, Sha256};

use crate::error::ApiError;
use crate::observe::REQUEST_DURATION;
use crate::state::AppState;

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// The process's Prometheus recorder, installed as the global `metrics`
/// recorder on first use. A process that embeds the API (`holdfast up`)
/// records its own metrics through the same recorder.
pub fn prometheus_handle() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full(REQUEST_DURATION.to_owned()),
                    &[
                        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                        10.0,
                    ],
                )
                .unwrap_or_else(|_| PrometheusBuilder::new());
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("another metrics recorder is installed; /metrics will be empty");
            }
            handle
        })
        .clone()
}

/// Prometheus metrics. Open unless the server has `HOLDFAST_METRICS_TOKEN`:
/// then `Authorization: Bearer <that token>` (not an API key).
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    security((), ("metrics_token" = [])),
    responses(
        (status = 200, description = "Prometheus text format", content_type = "text/plain", body = String),
        (status = 401, description = "HOLDFAST_METRICS_TOKEN is set and the request does not carry it", body = ErrorBody),
    )
)]
pub async fn metrics(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    if let Some(expected) = &state.config().metrics_token {
        check_metrics_token(&headers, expected)?;
    }
    let handle = state.metrics();
    handle.run_upkeep();
    let mut text = handle.render();
    // The database's figures are written straight into this response, not
    // through the process-wide recorder: each scrape reports what it read,
    // even when one process serves several APIs (tests, embedders). A
    // database outage must not take the rest of the metrics with it.
    match state.cached_database_metrics() {
        Some(cached) => text.push_str(&cached),
        None => match scrape_database(&state).await {
            Ok((by_state, events)) => {
                let fresh: Arc<str> = database_metrics(&by_state, events).into();
                text.push_str(&fresh);
                state.cache_database_metrics(fresh);
            }
            Err(e) => tracing::warn!(error = %e, "metrics: reading agents by state failed"),
        },
    }
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text))
}

/// 401 unless `headers` carry `Authorization: Bearer <expected>`. The
/// tokens are compared as SHA-256 digests, so the time taken says nothing
/// about how much of a guess was right.
fn check_metrics_token(headers: &HeaderMap, expected: &str) -> Result<(), ApiError> {
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim());
    match presented {
        Some(token) if Sha256::digest(token) == Sha256::digest(expected) => Ok(()),
        Some(_) => Err(ApiError::unauthorized("wrong metrics token")),
        None => Err(ApiError::unauthorized(
            "missing Authorization: Bearer <HOLDFAST_METRICS_TOKEN>",
        )),
    }
}

/// `holdfast_agents{state}` and `holdfast_events_written_total` in the
/// Prometheus text format.
fn database_metrics(by_state: &[(String, i64)], events: i64) -> String {
    let mut text = String::from("# TYPE holdfast_agents gauge\n");
    for (agent_state, count) in by_state {
        text.push_str(&format!(
            "holdfast_agents{{state=\"{agent_state}\"}} {count}\n"
        ));
    }
    text.push_str("# TYPE holdfast_events_written_total counter\n");
    text.push_str(&format!(
        "holdfast_events_written_total {}\n",
        events.max(0)
    ));
    text
}

async fn scrape_database(state: &AppState) -> holdfast_db::Result<(Vec<(String, i64)>, i64)> {
    let db = state.pool().get().await?;
    let by_state = store::queue_depth(&db).await?;
    let events = store::events_written(&db).await?;
    Ok((by_state, events))
}
