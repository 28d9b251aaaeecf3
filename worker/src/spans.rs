//! The worker's trace spans (docs/api.md, "Tracing"): one per step attempt,
//! a child per model call (GenAI semantic conventions: `chat {model}`) and
//! per tool call (`execute_tool {name}`); one per webhook delivery attempt
//! (`POST`, a child of its event's turn). (The machine daemon's span of a
//! command run is holdfast-machine's.) All no-ops when tracing is off
//! ([`holdfast_telemetry`]).
//!
//! Nothing is replayed, so a step's span is emitted once, by the attempt
//! that ran it. An attempt whose worker died cannot end its own span: the
//! next attempt emits it (its span id derives from the agent and the lost
//! epoch, its times come from the agent row) and links its own span to the
//! step's first attempt.

use std::time::SystemTime;

use holdfast_providers::{ModelError, ModelRequest, ModelResponse};
use holdfast_telemetry::{
    attempt_span_id, start_child, start_span, start_span_with_id, stored_context, tracer,
};
use holdfast_wire::domain::{AttemptTrace, Claim, ClaimedWebhookDelivery, LostAttempt};
use opentelemetry::trace::{
    Link, SpanContext, SpanKind, Status, TraceContextExt, TraceFlags, TraceState, Tracer,
};
use opentelemetry::{Context, KeyValue};

/// Start the span of the attempt `claim` runs, as a child of its turn's
/// trace context, first emitting the span of the attempt before it that
/// died (if any). Returns the context to run the attempt in.
pub fn start_attempt(claim: Claim, trace: &AttemptTrace) -> Context {
    let parent = stored_context(trace.turn_parent.as_deref(), trace.turn_state.as_deref());
    let remote = parent.span().span_context().clone();
    let first_attempt = trace
        .first_attempt_epoch
        .filter(|_| remote.is_valid())
        .map(|epoch| {
            Link::with_context(SpanContext::new(
                remote.trace_id(),
                attempt_span_id(claim.agent_id, epoch),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ))
        });
    if let Some(lost) = trace.lost {
        emit_lost_attempt(claim, lost, &parent, first_attempt.clone());
    }
    let mut builder = tracer()
        .span_builder("holdfast.step")
        .with_kind(SpanKind::Internal)
        .with_attributes(attempt_attributes(claim, claim.epoch));
    if let Some(link) = first_attempt {
        builder = builder.with_links(vec![link]);
    }
    let span = start_span_with_id(
        builder,
        &parent,
        attempt_span_id(claim.agent_id, claim.epoch),
    );
    parent.with_span(span)
}

/// Record what the current attempt does (`model`, `tools`, `nothing`).
pub fn record_kind(kind: &'static str) {
    Context::current()
        .span()
        .set_attribute(KeyValue::new("holdfast.step.kind", kind));
}

/// End the attempt's span with what the step came to.
pub fn end_attempt(attempt: &Context, outcome: &str) {
    let span = attempt.span();
    span.set_attribute(KeyValue::new("holdfast.step.outcome", outcome.to_owned()));
    if outcome == "failed" {
        span.set_status(Status::error("the step failed"));
    }
    span.end();
}

/// The span of an attempt whose worker died mid-step, emitted for it.
fn emit_lost_attempt(claim: Claim, lost: LostAttempt, parent: &Context, first: Option<Link>) {
    let span_id = attempt_span_id(claim.agent_id, lost.epoch);
    let mut builder = tracer()
        .span_builder("holdfast.step")
        .with_kind(SpanKind::Internal)
        .with_start_time(SystemTime::from(lost.started_at))
        .with_attributes(attempt_attributes(claim, lost.epoch));
    // The first attempt links to nothing; later lost ones to the first.
    if let Some(link) = first.filter(|l| l.span_context.span_id() != span_id) {
        builder = builder.with_links(vec![link]);
    }
    let mut span = start_span_with_id(builder, parent, span_id);
    opentelemetry::trace::Span::set_status(
        &mut span,
        Status::error("the worker running this attempt stopped; maintenance released its lease"),
    );
    opentelemetry::trace::Span::set_attribute(
        &mut span,
        KeyValue::new("holdfast.step.outcome", "lost"),
    );
    opentelemetry::trace::Span::end_with_timestamp(&mut span, SystemTime::from(lost.ended_at));
}

fn attempt_attributes(claim: Claim, epoch: i64) -> Vec<KeyValue> {
    vec![
        KeyValue::new("holdfast.agent.id", claim.agent_id.to_string()),
        KeyValue::new("holdfast.lease.epoch", epoch),
    ]
}

/// Start a model call's span (`chat {model}`, a client span), a child of
/// the current attempt.
pub fn start_model_call(request: &ModelRequest) -> Context {
    // The GenAI conventions name the vendor: `openai` for both OpenAI APIs.
    let provider = request.model.provider.vendor().to_string();
    start_child(
        format!("chat {}", request.model.name),
        SpanKind::Client,
        vec![
            KeyValue::new("gen_ai.operation.name", "chat"),
            KeyValue::new("gen_ai.provider.name", provider.clone()),
            // The name before semantic conventions 1.37, still read by
            // many backends.
            KeyValue::new("gen_ai.system", provider),
            KeyValue::new("gen_ai.request.model", request.model.name.clone()),
        ],
    )
}

/// End a model call's span with its usage and the model that answered, or
/// the error it ended with.
pub fn end_model_call(call: &Context, result: Result<&ModelResponse, &ModelError>) {
    let span = call.span();
    match result {
        Ok(response) => {
            let usage = &response.usage;
            if let Some(model) = &response.model {
                span.set_attribute(KeyValue::new("gen_ai.response.model", model.clone()));
            }
            span.set_attribute(KeyValue::new(
                "gen_ai.usage.input_tokens",
                i64::try_from(usage.input_tokens).unwrap_or(i64::MAX),
            ));
            span.set_attribute(KeyValue::new(
                "gen_ai.usage.output_tokens",
                i64::try_from(usage.output_tokens).unwrap_or(i64::MAX),
            ));
        }
        Err(error) => {
            let error_type = match error {
                ModelError::Retryable { kind, .. } => kind.clone(),
                ModelError::Fatal { error_type, .. } => error_type.clone(),
                ModelError::ContextTooLong { .. } => "context_length_exceeded".to_owned(),
            };
            span.set_status(Status::error(error.to_string()));
            span.set_attribute(KeyValue::new("error.type", error_type));
        }
    }
    span.end();
}

/// End a model call's span that an interrupt input aborted.
pub fn end_interrupted_model_call(call: &Context) {
    let span = call.span();
    span.set_attribute(KeyValue::new("error.type", "interrupted"));
    span.end();
}

/// Start a tool call's span (`execute_tool {name}`), a child of the
/// current attempt; `server` is the URL of the tool server it calls (an MCP
/// server), if any, recorded as [`server_attributes`].
pub fn start_tool_call(name: &str, call_id: &str, server: Option<&reqwest::Url>) -> Context {
    let mut attributes = vec![
        KeyValue::new("gen_ai.operation.name", "execute_tool"),
        KeyValue::new("gen_ai.tool.name", name.to_owned()),
        KeyValue::new("gen_ai.tool.call.id", call_id.to_owned()),
    ];
    attributes.extend(server.map(server_attributes).unwrap_or_default());
    start_child(
        format!("execute_tool {name}"),
        SpanKind::Internal,
        attributes,
    )
}

/// A server's `url.scheme`, `server.address` and `server.port`, and nothing
/// else of its URL: a tenant's URL may carry a secret in its path (Slack-
/// and Discord-style webhooks), its query or its credentials, and the
/// operator's trace backend must not see them.
fn server_attributes(url: &reqwest::Url) -> Vec<KeyValue> {
    let mut attributes = vec![KeyValue::new("url.scheme", url.scheme().to_owned())];
    if let Some(host) = url.host_str() {
        attributes.push(KeyValue::new("server.address", host.to_owned()));
    }
    if let Some(port) = url.port_or_known_default() {
        attributes.push(KeyValue::new("server.port", i64::from(port)));
    }
    attributes
}

/// End a tool call's span; a tool's error result marks it an error.
pub fn end_tool_call(call: &Context, is_error: bool) {
    let span = call.span();
    if is_error {
        span.set_attribute(KeyValue::new("error.type", "tool_error"));
        span.set_status(Status::error("the tool returned an error"));
    }
    span.end();
}

/// Start the span of one attempt of a webhook delivery (`POST`, a client
/// span with the HTTP semantic conventions), a child of the trace context
/// of its event's turn when the delivery kept one, else a root. `url` is
/// the endpoint's, recorded as [`server_attributes`] only.
pub fn start_webhook_delivery(delivery: &ClaimedWebhookDelivery, url: &reqwest::Url) -> Context {
    let parent = stored_context(
        delivery.trace_parent.as_deref(),
        delivery.trace_state.as_deref(),
    );
    let mut attributes = vec![
        KeyValue::new("http.request.method", "POST"),
        KeyValue::new("holdfast.agent.id", delivery.event.agent_id.to_string()),
        KeyValue::new("holdfast.event.type", delivery.event.kind.clone()),
        KeyValue::new(
            "holdfast.webhook.delivery_id",
            delivery.delivery_id.to_string(),
        ),
        KeyValue::new("holdfast.webhook.attempt", i64::from(delivery.attempt)),
    ];
    attributes.extend(server_attributes(url));
    start_span(&parent, "POST", SpanKind::Client, attributes)
}

/// End a delivery attempt's span: the receiver's status, or the error when
/// it did not answer with a 2xx (`error.type`: the status code, or
/// `request_error`).
pub fn end_webhook_delivery(attempt: &Context, status: Option<u16>, error: Option<&str>) {
    let span = attempt.span();
    if let Some(code) = status {
        span.set_attribute(KeyValue::new("http.response.status_code", i64::from(code)));
    }
    if let Some(error) = error {
        let error_type = status.map_or_else(|| "request_error".to_owned(), |c| c.to_string());
        span.set_attribute(KeyValue::new("error.type", error_type));
        span.set_status(Status::error(error.to_owned()));
    }
    span.end();
}
