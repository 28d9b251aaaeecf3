//! OpenTelemetry traces: the exporter set up from the standard `OTEL_*`
//! variables, W3C trace context in and out, and the span ids of step
//! attempts.
//!
//! Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set: then no provider is
//! installed, the global tracer is OpenTelemetry's no-op one, and every span
//! below costs a branch. On, spans go out in batches over OTLP/HTTP
//! (protobuf), from the SDK's own thread.
//!
//! Spans are made with the OpenTelemetry API itself (not through `tracing`):
//! a step attempt's span id is derived from the agent and the lease epoch
//! ([`attempt_span_id`]), so the attempt that retries a step after a crash
//! can link to the first attempt's span, and emit the span of the attempt
//! whose process died, without either id ever having been written down.

use std::cell::Cell;
use std::collections::HashMap;
use std::str::FromStr;

use opentelemetry::global::BoxedSpan;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{SpanBuilder, SpanId, TraceContextExt, TraceId, TraceState, Tracer};
use opentelemetry::{global, Context};
use opentelemetry_otlp::WithHttpConfig;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// The installed tracer provider, if tracing is on; [`Telemetry::shutdown`]
/// exports what is still buffered.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

/// Why traces could not be set up (a malformed endpoint, say).
#[derive(Debug, thiserror::Error)]
#[error("OpenTelemetry: {0}")]
pub struct TelemetryError(String);

impl Telemetry {
    /// No provider: every span is a no-op.
    pub fn disabled() -> Self {
        Telemetry { provider: None }
    }

    /// Install the OTLP exporter when `var("OTEL_EXPORTER_OTLP_ENDPOINT")`
    /// (or the traces-only variant) is set and not empty. The exporter
    /// itself reads the other standard variables (`OTEL_SERVICE_NAME`,
    /// `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_BSP_SCHEDULE_DELAY`, ...).
    /// The exporter's client comes from [`holdfast_outbound`] (the process's
    /// trust store, `HOLDFAST_CA_BUNDLE` included). Call it outside an async
    /// runtime: the blocking HTTP client it builds must not be created on one.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Self, TelemetryError> {
        let configured = [
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        ]
        .iter()
        .any(|name| var(name).is_some_and(|v| !v.trim().is_empty()));
        if !configured {
            return Ok(Telemetry::disabled());
        }
        let client = holdfast_outbound::blocking_client_builder()
            .timeout(export_timeout(&var))
            .build()
            .map_err(|e| TelemetryError(format!("building the OTLP HTTP client: {e}")))?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .build()
            .map_err(|e| TelemetryError(e.to_string()))?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_id_generator(SpanIds::default())
            .with_resource(
                Resource::builder()
                    .with_service_name(
                        var("OTEL_SERVICE_NAME").unwrap_or_else(|| "holdfast".into()),
                    )
                    .build(),
            )
            .build();
        global::set_tracer_provider(provider.clone());
        Ok(Telemetry {
            provider: Some(provider),
        })
    }

    /// Export the spans still buffered and stop the exporter.
    pub fn shutdown(self) {
        if let Some(provider) = self.provider {
            if let Err(error) = provider.shutdown() {
                tracing::warn!(%error, "exporting the last spans failed");
            }
        }
    }
}

/// How long one export may take: `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`, else
/// `OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds), else 10 s, as the exporter
/// reads them for a client of its own (a client handed to it keeps its own
/// timeout).
fn export_timeout(var: impl Fn(&str) -> Option<String>) -> std::time::Duration {
    [
        opentelemetry_otlp::OTEL_EXPORTER_OTLP_TRACES_TIMEOUT,
        opentelemetry_otlp::OTEL_EXPORTER_OTLP_TIMEOUT,
    ]
    .iter()
    .find_map(|name| var(name).and_then(|v| v.trim().parse().ok()))
    .map(std::time::Duration::from_millis)
    .unwrap_or(opentelemetry_otlp::OTEL_EXPORTER_OTLP_TIMEOUT_DEFAULT)
}

/// Holdfast's tracer (the no-op one when tracing is off).
pub fn tracer() -> global::BoxedTracer {
    global::tracer("holdfast")
}

/// A W3C trace context as received (`traceparent`, `tracestate`), checked
/// and in its canonical form, ready to be stored with an input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceHeaders {
    pub traceparent: String,
    pub tracestate: Option<String>,
}

/// Why a received trace context is refused: the header at fault.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{message}")]
pub struct InvalidTraceHeader {
    pub header: &'static str,
    pub message: String,
}

impl TraceHeaders {
    /// Parse `traceparent` (and `tracestate`, read only with a
    /// `traceparent`, as the W3C spec says) with OpenTelemetry's own
    /// propagator. Refused: a `traceparent` the propagator does not accept
    /// (wrong version or length, an all-zero id), or a `tracestate` that is
    /// not a list of at most 32 valid `key=value` members.
    pub fn parse(
        traceparent: &str,
        tracestate: Option<&str>,
    ) -> Result<TraceHeaders, InvalidTraceHeader> {
        if let Some(state) = tracestate {
            TraceState::from_str(state).map_err(|e| InvalidTraceHeader {
                header: "tracestate",
                message: format!("tracestate is not a valid W3C trace state: {e}"),
            })?;
        }
        let context = context_of(traceparent, tracestate);
        if !context.span().span_context().is_valid() {
            return Err(InvalidTraceHeader {
                header: "traceparent",
                message: "traceparent must be a W3C trace context: \
                          00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>, ids not all zero"
                    .into(),
            });
        }
        let mut canonical = HashMap::new();
        TraceContextPropagator::new().inject_context(&context, &mut HeaderCarrier(&mut canonical));
        Ok(TraceHeaders {
            traceparent: canonical.remove("traceparent").unwrap_or_default(),
            tracestate: canonical.remove("tracestate").filter(|s| !s.is_empty()),
        })
    }
}

/// The remote parent a stored trace context names (an empty context when
/// there is none, or it is invalid).
pub fn context_of(traceparent: &str, tracestate: Option<&str>) -> Context {
    let mut headers = HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
    if let Some(state) = tracestate {
        headers.insert("tracestate".to_owned(), state.to_owned());
    }
    TraceContextPropagator::new().extract(&HeaderCarrier(&mut headers))
}

/// The `traceparent` (and `tracestate`) headers naming the current span,
/// for an outbound request; none when no span is current or tracing is off.
pub fn outbound_headers() -> Vec<(&'static str, String)> {
    outbound_headers_of(&Context::current())
}

/// The `traceparent` (and `tracestate`) headers naming `context`'s span;
/// none when it has no valid span (tracing off, or no trace).
pub fn outbound_headers_of(context: &Context) -> Vec<(&'static str, String)> {
    if !context.span().span_context().is_valid() {
        return Vec::new();
    }
    let mut headers = HashMap::new();
    TraceContextPropagator::new().inject_context(context, &mut HeaderCarrier(&mut headers));
    ["traceparent", "tracestate"]
        .into_iter()
        .filter_map(|name| {
            headers
                .remove(name)
                .filter(|v| !v.is_empty())
                .map(|v| (name, v))
        })
        .collect()
}

/// The span id of the step attempt `agent` runs under lease `epoch`: the
/// first 8 bytes of SHA-256(agent id, epoch), never the invalid all-zero id.
/// Each claim has its own epoch, so each attempt its own span.
pub fn attempt_span_id(agent: Uuid, epoch: i64) -> SpanId {
    let mut hash = Sha256::new();
    hash.update(agent.as_bytes());
    hash.update(epoch.to_be_bytes());
    let digest = hash.finalize();
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    if bytes == [0u8; 8] {
        bytes[7] = 1;
    }
    SpanId::from_bytes(bytes)
}

thread_local! {
    /// The id [`start_span_with_id`] wants for the span it is starting.
    static NEXT_SPAN_ID: Cell<Option<SpanId>> = const { Cell::new(None) };
}

/// The provider's ids: random, except the span id of a span started by
/// [`start_span_with_id`].
#[derive(Debug, Default)]
struct SpanIds {
    random: RandomIdGenerator,
}

impl IdGenerator for SpanIds {
    fn new_trace_id(&self) -> TraceId {
        self.random.new_trace_id()
    }

    fn new_span_id(&self) -> SpanId {
        NEXT_SPAN_ID
            .with(Cell::take)
            .unwrap_or_else(|| self.random.new_span_id())
    }
}

/// Starts the span `builder` describes as a child of `parent`, with span
/// id `id` (an attempt's: [`attempt_span_id`]). OpenTelemetry's span
/// builder takes no span id, so the provider's id generator hands this one
/// out: the SDK asks it once, on this thread, while starting the span.
pub fn start_span_with_id(builder: SpanBuilder, parent: &Context, id: SpanId) -> BoxedSpan {
    NEXT_SPAN_ID.with(|next| next.set(Some(id)));
    let span = builder.start_with_context(&tracer(), parent);
    // Unused when tracing is off (the no-op tracer asks for no id).
    NEXT_SPAN_ID.with(|next| next.set(None));
    span
}

/// The remote parent a stored trace context names, when one was stored
/// (an empty context otherwise: a span started under it is a root).
pub fn stored_context(traceparent: Option<&str>, tracestate: Option<&str>) -> Context {
    traceparent
        .map(|p| context_of(p, tracestate))
        .unwrap_or_default()
}

/// Starts `name` as a child of `parent` (see [`tracer`]); returns the
/// context to run under it.
pub fn start_span(
    parent: &Context,
    name: impl Into<std::borrow::Cow<'static, str>>,
    kind: opentelemetry::trace::SpanKind,
    attributes: Vec<opentelemetry::KeyValue>,
) -> Context {
    let span = tracer()
        .span_builder(name)
        .with_kind(kind)
        .with_attributes(attributes)
        .start_with_context(&tracer(), parent);
    parent.with_span(span)
}

/// Starts `name` as a child of the current span ([`start_span`]).
pub fn start_child(
    name: String,
    kind: opentelemetry::trace::SpanKind,
    attributes: Vec<opentelemetry::KeyValue>,
) -> Context {
    start_span(&Context::current(), name, kind, attributes)
}

/// Header names lower-cased, as the propagator reads and writes them.
struct HeaderCarrier<'a>(&'a mut HashMap<String, String>);

impl Injector for HeaderCarrier<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key.to_ascii_lowercase(), value);
    }
}

impl Extractor for HeaderCarrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(&key.to_ascii_lowercase()).map(String::as_str)
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_traceparent_is_kept_in_canonical_form() {
        let parsed = TraceHeaders::parse(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            Some("congo=t61rcWkgMzE"),
        )
        .unwrap();
        assert_eq!(
            parsed.traceparent,
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        );
        assert_eq!(parsed.tracestate.as_deref(), Some("congo=t61rcWkgMzE"));
    }

    #[test]
    fn malformed_trace_headers_name_the_header() {
        for bad in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "zz-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ] {
            let error = TraceHeaders::parse(bad, None).unwrap_err();
            assert_eq!(error.header, "traceparent", "{bad:?}");
        }
        let error = TraceHeaders::parse(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            Some("not a list member"),
        )
        .unwrap_err();
        assert_eq!(error.header, "tracestate");
    }

    #[test]
    fn attempt_span_ids_differ_per_epoch_and_agent() {
        let agent = Uuid::from_u128(7);
        assert_eq!(attempt_span_id(agent, 1), attempt_span_id(agent, 1));
        assert_ne!(attempt_span_id(agent, 1), attempt_span_id(agent, 2));
        assert_ne!(
            attempt_span_id(agent, 1),
            attempt_span_id(Uuid::from_u128(8), 1)
        );
    }
}
