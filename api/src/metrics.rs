//! `GET /metrics`: Prometheus text. Request counts and latencies and stream
//! clients are recorded as they happen; agents by state and events written
//! are read from the database at scrape time, so every API instance reports
//! the same, exact numbers.

use std::sync::OnceLock;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use holdfast_engine::store;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

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

/// Prometheus metrics.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    security(()),
    responses((status = 200, description = "Prometheus text format", content_type = "text/plain", body = String))
)]
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    // A database outage must not take the rest of the metrics with it.
    match scrape_database(&state).await {
        Ok((by_state, events)) => {
            for (agent_state, count) in by_state {
                metrics::gauge!("holdfast_agents", "state" => agent_state).set(count as f64);
            }
            metrics::counter!("holdfast_events_written_total").absolute(events.max(0) as u64);
        }
        Err(e) => tracing::warn!(error = %e, "metrics: reading agents by state failed"),
    }
    let handle = state.metrics();
    handle.run_upkeep();
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        handle.render(),
    )
}

async fn scrape_database(state: &AppState) -> holdfast_engine::Result<(Vec<(String, i64)>, i64)> {
    let db = state.pool().get().await?;
    let by_state = store::queue_depth(&**db).await?;
    let events = store::events_written(&**db).await?;
    Ok((by_state, events))
}
