//! Request tracing and request metrics.
//!
//! Each request runs in a `request` span with its method, route template
//! and (once a handler knows it) the agent id; the response is logged with
//! its status and latency. Counts and latencies go to Prometheus labelled by
//! route template, never by raw path, so the label set stays bounded.

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{MatchedPath, Request};
use axum::http::Response;
use axum::middleware::Next;
use tower_http::classify::{ServerErrorsAsFailures, SharedClassifier};
use tower_http::trace::TraceLayer;
use tracing::Span;

pub const REQUESTS_TOTAL: &str = "holdfast_api_requests_total";
pub const REQUEST_DURATION: &str = "holdfast_api_request_duration_seconds";

fn route_of(request: &Request) -> String {
    request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |p| p.as_str().to_owned())
}

type MakeSpan = fn(&Request) -> Span;
type OnResponse = fn(&Response<Body>, Duration, &Span);

/// The tower-http trace layer with Holdfast's span and response log.
pub fn trace_layer(
) -> TraceLayer<SharedClassifier<ServerErrorsAsFailures>, MakeSpan, (), OnResponse> {
    TraceLayer::new_for_http()
        .make_span_with(make_span as MakeSpan)
        .on_request(())
        .on_response(on_response as OnResponse)
}

fn make_span(request: &Request) -> Span {
    tracing::info_span!(
        "request",
        method = %request.method(),
        route = %route_of(request),
        agent_id = tracing::field::Empty,
    )
}

fn on_response(response: &Response<Body>, latency: Duration, _span: &Span) {
    tracing::info!(
        status = response.status().as_u16(),
        latency_ms = latency.as_secs_f64() * 1000.0,
        "request"
    );
}

/// Name the agent a request is about in its span.
pub fn record_agent(agent: uuid::Uuid) {
    Span::current().record("agent_id", tracing::field::display(agent));
}

/// Count the request and time it, by method, route template and status.
pub async fn record_metrics(request: Request, next: Next) -> axum::response::Response {
    let started = Instant::now();
    let method = request.method().as_str().to_owned();
    let route = route_of(&request);
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    metrics::counter!(REQUESTS_TOTAL, "method" => method.clone(), "route" => route.clone(), "status" => status)
        .increment(1);
    metrics::histogram!(REQUEST_DURATION, "method" => method, "route" => route)
        .record(started.elapsed().as_secs_f64());
    response
}
