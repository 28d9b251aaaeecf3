//! Request tracing and request metrics.
//!
//! Each request runs in a `request` span with its method, route template
//! and (once a handler knows it) the agent id; the response is logged with
//! its status and latency. Counts and latencies go to Prometheus labelled by
//! route template, never by raw path, and by standard method, never by the
//! method a client wrote, so the label set stays bounded. A request with any
//! other method is refused ([`refuse_extension_methods`]): hyper accepts any
//! token of any length as a method.

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{MatchedPath, Request};
use axum::http::{Method, Response, StatusCode};
use axum::middleware::Next;
use axum::response::IntoResponse;
use tower_http::classify::{ServerErrorsAsFailures, SharedClassifier};
use tower_http::trace::TraceLayer;
use tracing::Span;

use crate::error::ApiError;

pub const REQUESTS_TOTAL: &str = "holdfast_api_requests_total";
pub const REQUEST_DURATION: &str = "holdfast_api_request_duration_seconds";

/// The methods HTTP defines; any other is one label value, [`OTHER_METHOD`].
static STANDARD_METHODS: [Method; 9] = [
    Method::GET,
    Method::HEAD,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::PATCH,
    Method::OPTIONS,
    Method::TRACE,
    Method::CONNECT,
];

/// The label and log value of every method outside [`STANDARD_METHODS`].
pub const OTHER_METHOD: &str = "OTHER";

/// `method` as a metrics label and log field: its name if HTTP defines it,
/// else [`OTHER_METHOD`], so that no request adds a label value of its own.
pub fn method_label(method: &Method) -> &'static str {
    STANDARD_METHODS
        .iter()
        .find(|standard| *standard == method)
        .map_or(OTHER_METHOD, Method::as_str)
}

/// Refuse (405, in the API's error shape) a request whose method HTTP does
/// not define, before any handler runs.
pub async fn refuse_extension_methods(request: Request, next: Next) -> axum::response::Response {
    if method_label(request.method()) == OTHER_METHOD {
        return ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "unknown HTTP method",
        )
        .into_response();
    }
    next.run(request).await
}

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
        method = method_label(request.method()),
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

/// Count the request and time it, by method label, route template and status.
pub async fn record_metrics(request: Request, next: Next) -> axum::response::Response {
    let started = Instant::now();
    let method = method_label(request.method());
    let route = route_of(&request);
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    metrics::counter!(REQUESTS_TOTAL, "method" => method, "route" => route.clone(), "status" => status)
        .increment(1);
    metrics::histogram!(REQUEST_DURATION, "method" => method, "route" => route)
        .record(started.elapsed().as_secs_f64());
    response
}
