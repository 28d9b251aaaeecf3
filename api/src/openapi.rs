//! `GET /openapi.json`: the OpenAPI 3.1 document, generated from the
//! handlers' annotations as they are registered (utoipa-axum), so a route
//! cannot exist without being documented.

use std::sync::OnceLock;

use axum::http::header;
use axum::response::IntoResponse;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Holdfast",
        description = "A durable runtime for LLM agents on PostgreSQL. Every route under /v1 takes `Authorization: Bearer <api key>`; another project's objects answer 404. Errors are `{\"error\": {\"type\", \"message\", \"field\"?}}`.",
    ),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
    tags(
        (name = "agents", description = "agents, their config versions, inputs, cancel, archive"),
        (name = "schedules", description = "inputs sent to an agent on a cron schedule or every interval"),
        (name = "events", description = "the timeline and its live stream"),
        (name = "tool-calls", description = "custom tool calls the client answers"),
        (name = "webhooks", description = "endpoints that receive every event, signed per Standard Webhooks"),
        (name = "provider-keys", description = "the project's own model provider keys: write-only, stored sealed"),
        (name = "approvals", description = "approvals and questions a person answers"),
        (name = "replays", description = "an agent's recorded turns replayed with a changed config, tool results served from the recording"),
        (name = "operations", description = "health, readiness, metrics, this document"),
    )
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("hf_…")
                    .build(),
            ),
        );
        // GET /metrics, when the server sets HOLDFAST_METRICS_TOKEN.
        components.add_security_scheme(
            "metrics_token",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// An error response in the error shape.
fn error_response(description: &str) -> utoipa::openapi::Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorBody")))
                .build(),
        )
        .build()
}

/// Document the errors that come from the layers and extractors every route
/// shares rather than from its handler, wherever a route's own annotation
/// does not already say more: 400 (a malformed path, query or body), 401
/// (no valid key or token), 413 and 415 (a body too large, not JSON), 503
/// (no database, or the request timed out) on the `/v1` routes; and the
/// rate limits' 429, applied where a handler takes its `Caller` or
/// `MachineCaller`.
pub fn document_common_errors(openapi: &mut utoipa::openapi::OpenApi) {
    let mut too_many = error_response(
        "over the rate limit of the API key or machine (`HOLDFAST_API_RATE_LIMIT`), or too many failed key lookups from this address",
    );
    too_many.headers.insert(
        "Retry-After".to_owned(),
        HeaderBuilder::new()
            .schema(ObjectBuilder::new().schema_type(Type::Integer))
            .description(Some("seconds until a request is accepted again"))
            .build(),
    );
    for (path, item) in openapi.paths.paths.iter_mut() {
        if !path.starts_with("/v1/") {
            continue;
        }
        let operations = [
            &mut item.get,
            &mut item.post,
            &mut item.put,
            &mut item.patch,
            &mut item.delete,
        ];
        for operation in operations.into_iter().flatten() {
            let has_body = operation.request_body.is_some();
            let has_parameters = operation
                .parameters
                .as_ref()
                .is_some_and(|parameters| !parameters.is_empty());
            let responses = &mut operation.responses.responses;
            let mut add = |status: &str, description: &str| {
                responses
                    .entry(status.to_owned())
                    .or_insert_with(|| RefOr::T(error_response(description)));
            };
            if has_body || has_parameters {
                add("400", "a malformed path, query or body; `field` names it");
            }
            add(
                "401",
                "no valid API key (or machine token, on the daemon's routes)",
            );
            if has_body {
                add("413", "the body is over the route's limit");
                add("415", "the body is not `application/json`");
            }
            add(
                "503",
                "the database is unavailable or the request took too long; retry later",
            );
            responses.insert("429".to_owned(), RefOr::T(too_many.clone()));
        }
    }
}

static DOCUMENT: OnceLock<String> = OnceLock::new();

/// This document.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    security(()),
    responses((status = 200, description = "the OpenAPI 3.1 document", content_type = "application/json", body = Object))
)]
pub async fn openapi_json() -> impl IntoResponse {
    let document = DOCUMENT.get_or_init(|| {
        crate::openapi().to_json().unwrap_or_else(|e| {
            format!("{{\"error\": {{\"type\": \"internal\", \"message\": \"{e}\"}}}}")
        })
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        document.as_str(),
    )
}
