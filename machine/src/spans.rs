//! The daemon's trace span (docs/api.md, "Tracing"): one per command run
//! (`run_command`, a child of the turn that queued it); a no-op when
//! tracing is off ([`holdfast_telemetry`]).

use holdfast_telemetry::{start_span, stored_context};
use holdfast_wire::domain::{ClaimedCommand, CommandResult};
use opentelemetry::trace::{SpanKind, Status, TraceContextExt};
use opentelemetry::{Context, KeyValue};

/// Start the span of a machine command's run (`run_command`), a child of
/// the trace context of the turn that queued it when it had one. The
/// command's text is not an attribute: the model wrote it, and it may carry
/// what the operator's trace backend should not see.
pub fn start_command(command: &ClaimedCommand) -> Context {
    let parent = stored_context(
        command.traceparent.as_deref(),
        command.tracestate.as_deref(),
    );
    start_span(
        &parent,
        "run_command",
        SpanKind::Internal,
        vec![
            KeyValue::new("holdfast.agent.id", command.agent_id.to_string()),
            KeyValue::new("holdfast.command.id", command.id.to_string()),
            KeyValue::new("holdfast.tool_call.id", command.tool_call_id.to_string()),
        ],
    )
}

/// End a command run's span with how it ended (`None`: its outcome could
/// not be known). A non-zero exit, a signal or a timeout marks it an error.
pub fn end_command(run: &Context, result: Option<&CommandResult>) {
    let span = run.span();
    let error = match result {
        None => Some("unknown"),
        Some(result) => {
            if let Some(code) = result.exit_code {
                span.set_attribute(KeyValue::new("process.exit.code", i64::from(code)));
            }
            if let Some(signal) = result.signal {
                span.set_attribute(KeyValue::new("holdfast.command.signal", i64::from(signal)));
            }
            span.set_attribute(KeyValue::new(
                "holdfast.command.timed_out",
                result.timed_out,
            ));
            if result.timed_out {
                Some("timeout")
            } else if result.signal.is_some() {
                Some("signal")
            } else if result.exit_code.is_some_and(|code| code != 0) {
                Some("exit_code")
            } else {
                None
            }
        }
    };
    if let Some(error) = error {
        span.set_attribute(KeyValue::new("error.type", error));
        span.set_status(Status::error(format!("the command ended: {error}")));
    }
    span.end();
}
