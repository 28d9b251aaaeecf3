//! Holdfast's HTTP API: a thin shell over the SQL functions. It
//! authenticates, validates, calls SQL through `holdfast_db::store`, and
//! maps SQLSTATEs to HTTP. Live streams are fed by one LISTEN connection per
//! process ([`fanout`]).
//!
//! Embedding: [`serve`] runs the whole server on a listener until a
//! cancellation token fires. For a custom stack, build the state with
//! [`AppState::start`] and the routes with [`router`].

pub mod agents;
pub mod approvals;
pub mod attachments;
pub mod auth;
pub mod console;
pub mod error;
pub mod events;
pub mod extract;
pub mod fanout;
pub mod inbox;
pub mod inputs;
pub mod machines;
pub mod metrics;
pub mod observe;
pub mod openapi;
pub mod operations;
pub mod probes;
pub mod project;
pub mod provider_keys;
pub mod rate_limit;
pub mod replays;
pub mod replica;
pub mod schedules;
pub mod state;
pub mod stream;
pub mod tool_calls;
pub mod usage;
pub mod webhooks;

use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::Router;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::{RequestBodyTimeoutLayer, TimeoutLayer};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use error::ApiError;
pub use state::{ApiConfig, AppState};

/// Why [`serve`] stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Engine(#[from] holdfast_db::Error),
    #[error("serving HTTP: {0}")]
    Io(#[from] std::io::Error),
}

/// Serve the API on `listener` until `shutdown` is cancelled; then stop
/// accepting, let in-flight requests finish, end every stream, close the
/// LISTEN connection, and return.
pub async fn serve(
    config: ApiConfig,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let (state, fanout) = AppState::start(config, shutdown.clone())?;
    let app = router(state);
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "HTTP API listening");
    }
    // Made into a service once (as `into_make_service` does); served as a
    // plain `Router`, axum redoes that for every connection (a table of
    // every route, 18 KiB, held as long as the connection: an SSE stream's).
    // Each request carries its connection's peer address, by which failed
    // key lookups are limited (`rate_limit::FailedLookups`) and a daemon takeover
    // is named.
    let served = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown.clone().cancelled_owned())
    .await;
    // Served with an error: stop the fan-out too.
    shutdown.cancel();
    let _ = fanout.await;
    tracing::info!("HTTP API stopped");
    Ok(served?)
}

/// Every route with its handler and its OpenAPI entry, registered together.
fn routes() -> OpenApiRouter<AppState> {
    small_body_routes().merge(content_routes())
}

/// The routes whose bodies may carry images and documents, under
/// [`ApiConfig::max_content_body_bytes`].
fn content_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(inputs::create_input))
        .routes(routes!(tool_calls::submit_tool_result))
}

/// The other routes, under [`ApiConfig::max_body_bytes`].
fn small_body_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .routes(routes!(agents::create_agent, agents::list_agents))
        .routes(routes!(agents::get_agent, agents::patch_agent))
        .routes(routes!(agents::cancel_agent))
        .routes(routes!(agents::archive_agent))
        .routes(routes!(agents::list_config_versions))
        .routes(routes!(agents::get_config_version))
        .routes(routes!(
            schedules::create_schedule,
            schedules::list_schedules
        ))
        .routes(routes!(
            schedules::get_schedule,
            schedules::update_schedule,
            schedules::delete_schedule
        ))
        .routes(routes!(replays::fork_agent))
        .routes(routes!(replays::create_replay, replays::list_replays))
        .routes(routes!(replays::get_replay))
        .routes(routes!(usage::get_agent_usage))
        .routes(routes!(usage::get_project_usage))
        .routes(routes!(inputs::list_inputs))
        .routes(routes!(inputs::remove_input, inputs::update_input))
        .routes(routes!(attachments::get_attachment))
        .routes(routes!(events::list_events))
        .routes(routes!(stream::stream_events))
        .routes(routes!(tool_calls::list_tool_calls))
        .routes(routes!(webhooks::create_webhook, webhooks::list_webhooks))
        .routes(routes!(webhooks::delete_webhook))
        .routes(routes!(provider_keys::list_provider_keys))
        .routes(routes!(
            provider_keys::set_provider_key,
            provider_keys::delete_provider_key
        ))
        .routes(routes!(webhooks::list_deliveries))
        .routes(routes!(
            machines::manage::register_machine,
            machines::manage::list_machines
        ))
        .routes(routes!(machines::manage::wake_machine))
        .routes(routes!(machines::manage::delete_machine))
        .routes(routes!(machines::manage::rotate_machine_token))
        .routes(routes!(machines::daemon::heartbeat))
        .routes(routes!(machines::daemon::claim_commands))
        .routes(routes!(machines::daemon::submit_result))
        .routes(routes!(machines::daemon::relay_output))
        .routes(routes!(inbox::get_inbox))
        .routes(routes!(approvals::list_approvals))
        .routes(routes!(approvals::decide_approval))
        .routes(routes!(approvals::list_questions))
        .routes(routes!(approvals::answer_question))
        .routes(routes!(probes::healthz))
        .routes(routes!(probes::readyz))
        .routes(routes!(metrics::metrics))
        .routes(routes!(openapi::openapi_json))
        .routes(routes!(project::get_project))
        .routes(routes!(operations::get_operations))
}

/// The OpenAPI 3.1 document of every route [`router`] serves.
pub fn openapi() -> utoipa::openapi::OpenApi {
    let mut document = routes().into_openapi();
    openapi::document_common_errors(&mut document);
    document
}

/// The API's routes with their layers: tracing, metrics, the error shape
/// for every error (axum's and tower-http's included), the request timeout,
/// the body limits.
pub fn router(state: AppState) -> Router {
    let config = state.config().clone();
    let (router, _) = small_body_routes().split_for_parts();
    let (content, _) = content_routes().split_for_parts();
    // Both limits: tower-http's counts the bytes as they come, axum's is the
    // one its body extractor checks (2 MB unless told).
    let content = content
        .layer(RequestBodyLimitLayer::new(config.max_content_body_bytes))
        .layer(DefaultBodyLimit::max(config.max_content_body_bytes));
    router
        .merge(console::routes())
        .fallback(|| async { ApiError::not_found("no such route") })
        .layer(RequestBodyLimitLayer::new(config.max_body_bytes))
        .merge(content)
        // Every write, inputs and tool results included, is stamped.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            replica::stamp_writes,
        ))
        .layer(RequestBodyTimeoutLayer::new(config.request_timeout))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            config.request_timeout,
        ))
        .layer(axum::middleware::map_response(error::ensure_error_shape))
        // Inside the metrics and the trace, which count and log such a
        // request under one method label.
        .layer(axum::middleware::from_fn(observe::refuse_extension_methods))
        .layer(axum::middleware::from_fn(observe::record_metrics))
        .layer(observe::trace_layer())
        .with_state(state)
}
