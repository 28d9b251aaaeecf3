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
        (name = "agents", description = "agents, inputs, cancel, archive"),
        (name = "events", description = "the timeline and its live stream"),
        (name = "tool-calls", description = "custom tool calls the client answers"),
        (name = "webhooks", description = "endpoints that receive every event, signed per Standard Webhooks"),
        (name = "provider-keys", description = "the project's own model provider keys: write-only, stored sealed"),
        (name = "approvals", description = "approvals and questions a person answers"),
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

/// Add the rate limit's 429 to every operation that takes an API key (every
/// `/v1` route but the machine daemon's): the limit is applied where a
/// handler takes its `Caller`, not in each route's annotation.
pub fn document_rate_limit(openapi: &mut utoipa::openapi::OpenApi) {
    let too_many = ResponseBuilder::new()
        .description("over the API key's rate limit (`HOLDFAST_API_RATE_LIMIT`)")
        .header(
            "Retry-After",
            HeaderBuilder::new()
                .schema(ObjectBuilder::new().schema_type(Type::Integer))
                .description(Some("seconds until a request is accepted again"))
                .build(),
        )
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorBody")))
                .build(),
        )
        .build();
    for (path, item) in openapi.paths.paths.iter_mut() {
        if !path.starts_with("/v1/") || path.starts_with("/v1/machine/") {
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
            operation
                .responses
                .responses
                .insert("429".to_owned(), RefOr::T(too_many.clone()));
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
