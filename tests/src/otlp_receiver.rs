//! An OTLP/HTTP trace receiver for tests: `POST /v1/traces` with a protobuf
//! `ExportTraceServiceRequest` (the opentelemetry-proto messages, decoded
//! with prost), answered with an `ExportTraceServiceResponse`, as an
//! OpenTelemetry collector does. It keeps every span it received.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use axum::Router;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tokio_util::sync::CancellationToken;

use crate::wait_until;

/// A span as received, with the service that sent it.
#[derive(Clone, Debug)]
pub struct ReceivedSpan {
    pub service: String,
    pub span: Span,
}

impl ReceivedSpan {
    pub fn trace_id(&self) -> String {
        hex::encode(&self.span.trace_id)
    }
    pub fn span_id(&self) -> String {
        hex::encode(&self.span.span_id)
    }
    pub fn parent_span_id(&self) -> String {
        hex::encode(&self.span.parent_span_id)
    }
    /// A string or integer attribute, as text.
    pub fn attribute(&self, key: &str) -> Option<String> {
        self.span
            .attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref()?.value.as_ref())
            .map(|value| match value {
                AnyValue::StringValue(s) => s.clone(),
                AnyValue::IntValue(i) => i.to_string(),
                AnyValue::BoolValue(b) => b.to_string(),
                AnyValue::DoubleValue(d) => d.to_string(),
                other => format!("{other:?}"),
            })
    }
}

/// The running receiver; stops when dropped.
pub struct OtlpReceiver {
    /// For `OTEL_EXPORTER_OTLP_ENDPOINT` (the exporter appends `/v1/traces`).
    pub endpoint: String,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    shutdown: CancellationToken,
}

impl OtlpReceiver {
    /// Over plain HTTP on a free port of 127.0.0.1.
    pub async fn start() -> OtlpReceiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        OtlpReceiver::serve(listener, endpoint)
    }

    /// On `listener` (a TLS one, say), reached at `endpoint`.
    pub fn serve<L>(listener: L, endpoint: String) -> OtlpReceiver
    where
        L: axum::serve::Listener,
        L::Addr: std::fmt::Debug,
    {
        let spans = Arc::new(Mutex::new(Vec::new()));
        let app = Router::new()
            .route("/v1/traces", post(export))
            .with_state(spans.clone());
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await
                .unwrap();
        });
        OtlpReceiver {
            endpoint,
            spans,
            shutdown,
        }
    }

    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().unwrap().clone()
    }

    /// Wait until the spans received satisfy `done` (panics after `timeout`).
    pub async fn wait_for(
        &self,
        timeout: Duration,
        what: &str,
        done: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Vec<ReceivedSpan> {
        wait_until(timeout, what, || {
            let ready = done(&self.spans());
            async move { ready }
        })
        .await;
        self.spans()
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn export(
    State(spans): State<Arc<Mutex<Vec<ReceivedSpan>>>>,
    headers: HeaderMap,
    body: Bytes,
) -> impl IntoResponse {
    let protobuf = headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes() == b"application/x-protobuf");
    if !protobuf {
        return (StatusCode::UNSUPPORTED_MEDIA_TYPE, Vec::new()).into_response();
    }
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return (StatusCode::BAD_REQUEST, Vec::new()).into_response();
    };
    let mut received = spans.lock().unwrap();
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                AnyValue::StringValue(s) => Some(s.clone()),
                _ => None,
            })
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                received.push(ReceivedSpan {
                    service: service.clone(),
                    span,
                });
            }
        }
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/x-protobuf")],
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
        .into_response()
}
