//! One step for one claimed agent: load its saved state, decide, run, and
//! hand what it came to ([`StepDecision`]) to the one function that saves it
//! ([`crate::outcome::save`]).

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use holdfast_db::{store, Error, Result};
use holdfast_outbound::backoff::Backoff;
use holdfast_providers::{
    attachment_ids, ContentBlock, ModelError, ModelRequest, ModelTarget, RequestFiles,
};
use holdfast_wire::config::ModelConfig;
use holdfast_wire::domain::{Claim, ModelInput, ModelStep, NewToolCall, StepContext, Usage};
use opentelemetry::context::FutureExt as _;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::deps::StepDeps;
use crate::outcome::{save, StepDecision, StepOutcome};
use crate::plan::{compaction_plan, model_request, next_action, NextAction};
use crate::stop::{StopReason, StopSignal};
use crate::{content_urls, deltas, spans, toolbox};

/// Why a step ended without an outcome of its own.
enum StepFailure {
    Error(Error),
    /// The step's code panicked (a bug reachable from some input): the
    /// panic's message.
    Panicked(String),
}

/// Run one step for `claim` until it is saved or `stop` fires. On a stop
/// the in-flight work is dropped (an HTTP stream is closed, nothing partial
/// is saved) and the reason decides what is written: nothing (lease lost),
/// `turn.cancelled` (cancel), or an explicit release (drain). A step that
/// fails, or panics, with anything but a lost lease is saved as a step
/// failure ([`StepDecision::StepFailed`]): it never ends the task abnormally
/// and never releases its agent for an immediate retry — retrying at once
/// would fail the same way, in a loop, perhaps paying for a model call
/// each time.
///
/// `loaded` is the agent's context when the claim, or the commit that kept
/// the lease, read it in its transaction; without it the step reads its own.
pub async fn run(
    deps: Arc<StepDeps>,
    claim: Claim,
    loaded: Option<Box<StepContext>>,
    stop: StopSignal,
) -> StepOutcome {
    // The attempt's span, started once its turn's trace context is loaded.
    let mut attempt = None;
    let result = tokio::select! {
        result = contained(execute(&deps, claim, loaded, &stop, &mut attempt)) => result,
        _ = stop.stopped() => Ok(StepDecision::NoWork),
    };
    let outcome = match (stop.reason(), result) {
        (None, Ok(result)) => finish(&deps, claim, result, &stop).await,
        (None, Err(StepFailure::Error(Error::LeaseLost(message)))) => {
            // Another holder took the agent (this worker was stalled past
            // its lease): Postgres refused the write and nothing is saved.
            tracing::warn!(%message, "lease lost: a write was refused");
            StepOutcome::LeaseLost
        }
        (None, Err(failure)) => finish(&deps, claim, step_failed(claim, failure), &stop).await,
        (Some(StopReason::LeaseLost), _) => StepOutcome::LeaseLost,
        (Some(StopReason::Cancel), result) => {
            save_held_tool_result(&deps, claim, result).await;
            finish(&deps, claim, StepDecision::Cancelled, &stop).await
        }
        (Some(StopReason::Drain), result) => {
            save_held_tool_result(&deps, claim, result).await;
            finish(&deps, claim, StepDecision::Drained, &stop).await
        }
    };
    if let Some(attempt) = attempt {
        spans::end_attempt(&attempt, outcome.as_str());
    }
    metrics::counter!("holdfast_steps_total", "outcome" => outcome.as_str()).increment(1);
    if matches!(outcome, StepOutcome::LeaseLost) {
        metrics::counter!("holdfast_lease_losses_total").increment(1);
    }
    outcome
}

/// A tool batch that ran to its end before a cancel or drain stopped the
/// step holds its last result unsaved (it is saved with the batch's end):
/// the tool ran, so its result is saved on its own before the stop's own
/// write, as every earlier result of the batch was.
async fn save_held_tool_result(
    deps: &StepDeps,
    claim: Claim,
    result: Result<StepDecision, StepFailure>,
) {
    let Ok(StepDecision::BatchDone { last: Some(last) }) = result else {
        return;
    };
    let saved = async {
        let client = deps.pool.get().await?;
        store::commit_tool_result(
            &client,
            claim,
            last.call,
            &last.output.output,
            last.output.is_error,
        )
        .await
    };
    if let Err(error) = saved.await {
        tracing::warn!(agent_id = %claim.agent_id, %error, "saving a stopped batch's last tool result failed");
    }
}

/// Save `result`. A save refused for anything but the lease or a full disk
/// (a malformed response SQL will not store, say) is saved as a step
/// failure instead, so it is counted and backed off like any other; if even
/// that cannot be written (Postgres unreachable, or the lease is gone), the
/// lease expires and maintenance releases the agent, a minute from now, not
/// at once.
async fn finish(
    deps: &StepDeps,
    claim: Claim,
    result: StepDecision,
    stop: &StopSignal,
) -> StepOutcome {
    let retry_as_failure = !matches!(result, StepDecision::StepFailed { .. });
    let error = match save_waiting_out_a_full_disk(deps, claim, result, stop).await {
        Ok(outcome) => return outcome,
        Err(error) => error,
    };
    if error.is_storage_full() {
        // Stopped while the disk was still full: the wait's own reason
        // decides (another holder has the agent, or the lease expires).
        return match stop.reason() {
            Some(StopReason::LeaseLost) => StepOutcome::LeaseLost,
            _ => unsaved(claim, &error),
        };
    }
    if retry_as_failure && !matches!(error, Error::LeaseLost(_)) {
        tracing::warn!(agent_id = %claim.agent_id, %error, "saving the step's result failed");
        let mut failed = StepDecision::StepFailed {
            message: error.to_string(),
        };
        match save(deps, claim, &mut failed).await {
            Ok(outcome) => return outcome,
            Err(e) => return unsaved(claim, &e),
        }
    }
    unsaved(claim, &error)
}

/// Save `result`, waiting out a full disk ([`FullDiskWait`]).
async fn save_waiting_out_a_full_disk(
    deps: &StepDeps,
    claim: Claim,
    mut result: StepDecision,
    stop: &StopSignal,
) -> Result<StepOutcome> {
    let mut wait = FullDiskWait::new(claim, stop);
    loop {
        match save(deps, claim, &mut result).await {
            Err(error) if error.is_storage_full() => wait.after(error).await?,
            saved => return saved,
        }
    }
}

/// The wait between attempts at one of a step's writes (its result, or a
/// tool result mid-batch) that Postgres refused for want of space. That is
/// no fault of the step: counted as a step failure, each retry would do the
/// work again (a model call paid for, a tool's IO repeated) and the last
/// would fail the turn. What was to be written is kept instead and written
/// again after a backoff, for as long as the worker renews the lease; a
/// stop (lease lost, cancel, drain) ends the wait with the refused write's
/// error.
pub(crate) struct FullDiskWait<'a> {
    claim: Claim,
    stop: &'a StopSignal,
    attempt: u32,
}

impl<'a> FullDiskWait<'a> {
    pub(crate) fn new(claim: Claim, stop: &'a StopSignal) -> Self {
        Self {
            claim,
            stop,
            attempt: 0,
        }
    }

    /// Wait out the backoff after `error`, a write refused for a full disk;
    /// `Err(error)` if the step is stopped first.
    pub(crate) async fn after(&mut self, error: Error) -> Result<()> {
        metrics::counter!("holdfast_storage_full_total", "process" => "worker").increment(1);
        self.attempt += 1;
        let delay = FULL_DISK_BACKOFF.delay(self.attempt, None);
        tracing::error!(agent_id = %self.claim.agent_id, %error, ?delay,
            "Postgres is out of disk space: what the step wrote is kept and written again after a delay");
        tokio::select! {
            _ = tokio::time::sleep(delay) => Ok(()),
            _ = self.stop.stopped() => Err(error),
        }
    }
}

/// Saves refused for a full disk are tried again after 1 s doubling to 30 s.
const FULL_DISK_BACKOFF: Backoff = Backoff {
    base: std::time::Duration::from_secs(1),
    cap: std::time::Duration::from_secs(30),
};

/// The step failure to save for `failure`, logged.
fn step_failed(claim: Claim, failure: StepFailure) -> StepDecision {
    let message = match failure {
        StepFailure::Error(e) => {
            tracing::warn!(agent_id = %claim.agent_id, error = %e, "step failed");
            e.to_string()
        }
        StepFailure::Panicked(message) => {
            tracing::error!(agent_id = %claim.agent_id, panic = %message, "step panicked");
            metrics::counter!("holdfast_worker_step_panics_total").increment(1);
            format!("the worker panicked: {message}")
        }
    };
    StepDecision::StepFailed { message }
}

/// `work`'s result, with a panic inside it turned into
/// [`StepFailure::Panicked`] instead of ending the task (whose slot would
/// then never be freed). A combinator, not an `async fn`: an `async fn`
/// keeps its argument and the future it moves that into side by side, and
/// this one's argument is the whole step.
fn contained(
    work: impl Future<Output = Result<StepDecision, Error>>,
) -> impl Future<Output = Result<StepDecision, StepFailure>> {
    AssertUnwindSafe(work)
        .catch_unwind()
        .map(|caught| match caught {
            Ok(result) => result.map_err(StepFailure::Error),
            Err(panic) => Err(StepFailure::Panicked(panic_message(panic.as_ref()))),
        })
}

/// The text a panic carried (`panic!` with a literal or a format).
fn panic_message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// The outcome of a step whose last write failed with `error`: a lost lease
/// only when Postgres refused it for the lease (a plain database error is
/// not one, and must not count in `holdfast_lease_losses_total`).
fn unsaved(claim: Claim, error: &Error) -> StepOutcome {
    tracing::warn!(agent_id = %claim.agent_id, %error, "the step's result could not be saved");
    match error {
        Error::LeaseLost(_) => StepOutcome::LeaseLost,
        _ => StepOutcome::Abandoned,
    }
}

async fn execute(
    deps: &StepDeps,
    claim: Claim,
    loaded: Option<Box<StepContext>>,
    stop: &StopSignal,
    attempt: &mut Option<opentelemetry::Context>,
) -> Result<StepDecision> {
    // Boxed, like the other large awaits of a step: the load's future is
    // larger than the model call's, and a step future is as large as its
    // largest state for as long as it is in flight.
    let context = match loaded {
        Some(loaded) => loaded,
        None => {
            let client = deps.pool.get().await?;
            Box::new(Box::pin(store::load_step_context(&client, claim.agent_id)).await?)
        }
    };
    let trace = spans::start_attempt(claim, &context.trace);
    *attempt = Some(trace.clone());
    decide_and_run(deps, claim, stop, &context)
        .with_context(trace)
        .await
}

/// The step for the loaded `context`, run inside its attempt's span.
async fn decide_and_run(
    deps: &StepDeps,
    claim: Claim,
    stop: &StopSignal,
    context: &StepContext,
) -> Result<StepDecision> {
    if context.cancel_requested {
        stop.stop(StopReason::Cancel);
        return Ok(StepDecision::Cancelled);
    }
    let action = next_action(context)?;
    let kind = match &action {
        NextAction::NoWork => "no_work",
        NextAction::Tools(_) => "tools",
        NextAction::Model(_) => "model",
    };
    tracing::Span::current().record("kind", kind);
    spans::record_kind(kind);
    metrics::counter!("holdfast_steps_started_total", "kind" => kind).increment(1);
    match action {
        NextAction::NoWork => Ok(StepDecision::NoWork),
        NextAction::Tools(calls) => {
            tracing::debug!(calls = calls.len(), "tool batch");
            // Boxed, as the tool definitions below: a step future's size is
            // that of its largest state, and each in-flight step holds one.
            let last = Box::pin(toolbox::run_batch(deps, claim, stop, context, calls)).await?;
            Ok(StepDecision::BatchDone { last })
        }
        NextAction::Model(input) => model_step(deps, claim, stop, context, input).await,
    }
}

/// Messages kept verbatim when compacting (the rest are summarised).
const COMPACTION_KEEP_LAST: usize = 4;

async fn model_step(
    deps: &StepDeps,
    claim: Claim,
    stop: &StopSignal,
    context: &StepContext,
    input: &ModelInput,
) -> Result<StepDecision> {
    // Before anything is paid for (a compaction's summary call included).
    if input.over_budget {
        return Ok(StepDecision::OverBudget {
            input_ids: input.pending_input_ids(),
        });
    }
    // Boxed: the definitions' future (MCP discovery) is several times the
    // size of the model call's, and would otherwise set the size every
    // in-flight step is held at.
    let tools = Box::pin(toolbox::tool_set(deps, &context.config)).await;
    if !tools.unavailable.is_empty() {
        let unavailable: Vec<store::UnavailableTool> = tools
            .unavailable
            .iter()
            .map(|u| store::UnavailableTool {
                server: &u.server,
                tool: u.tool.as_deref(),
                reason: &u.reason,
            })
            .collect();
        let client = deps.pool.get().await?;
        store::record_tools_unavailable(&client, claim, &unavailable).await?;
    }
    let notice = toolbox::unavailable_notice(&tools.unavailable);
    let mut request = model_request(context, input, tools.definitions, notice);
    let left_out =
        content_urls::leave_out_refused(&deps.settings.egress, &mut request.messages).await;
    if !left_out.is_empty() {
        let (urls, reasons): (Vec<&str>, Vec<&str>) = left_out
            .iter()
            .map(|(url, reason)| (url.as_str(), reason.as_str()))
            .unzip();
        let client = deps.pool.get().await?;
        store::record_content_left_out(&client, claim, &urls, &reasons).await?;
    }
    let target = match model_target(deps, input, &request) {
        Ok(target) => target,
        Err(error) => return Ok(model_failed(deps, context, input, error)),
    };
    // The stored files the messages send, each read once, for this call
    // (and a compaction's, whose messages are among these) only; a
    // request that sends none reads nothing.
    let ids = attachment_ids(&request.messages);
    let files = if ids.is_empty() {
        RequestFiles::default()
    } else {
        let client = deps.pool.get().await?;
        store::load_request_files(&client, claim.agent_id, &ids).await?
    };
    if deps.providers.should_compact(&request) {
        tracing::info!("context near the model's window: compacting first");
        return Ok(compact(deps, context, input, &request, &files, &target).await);
    }
    let input_ids = input.pending_input_ids();

    let (delta_tx, delta_rx) = mpsc::unbounded_channel();
    let publisher = tokio::spawn(deltas::publish(deps.pool.clone(), claim, delta_rx));
    let started = std::time::Instant::now();
    let call = spans::start_model_call(&request);
    // An interrupt input this call was not built with aborts it (the HTTP
    // stream is dropped, nothing of it is saved); a response that is in
    // hand first is kept, and the next call sees the input as steer.
    let response = tokio::select! {
        response = deps
            .providers
            .complete_with_files(&request, &files, &target, Some(&delta_tx))
            .with_context(call.clone()) => response,
        interrupts = stop.interrupted(&input_ids) => {
            tracing::info!(?interrupts, "model call interrupted");
            drop(delta_tx);
            let _ = publisher.await;
            spans::end_interrupted_model_call(&call);
            return Ok(StepDecision::Interrupted { input_ids: interrupts });
        }
    };
    spans::end_model_call(&call, response.as_ref());
    drop(delta_tx);
    // Deltas go out before the saved response, so a live client never sees
    // a delta after the model.response event it belongs to.
    let _ = publisher.await;
    metrics::histogram!("holdfast_model_call_seconds").record(started.elapsed().as_secs_f64());

    let response = match response {
        Ok(response) => response,
        Err(ModelError::ContextTooLong { message }) => {
            tracing::info!(%message, "context too long: compacting");
            return Ok(compact(deps, context, input, &request, &files, &target).await);
        }
        Err(error) => return Ok(model_failed(deps, context, input, error)),
    };
    count_tokens(&context.config.model, &response.usage);
    let tool_calls = response
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::ToolUse { id, name, input } => Some(NewToolCall {
                provider_id: id.clone(),
                name: name.clone(),
                input: input.clone(),
                kind: toolbox::commit_kind(&context.config, name, input),
            }),
            _ => None,
        })
        .collect();
    let message = response
        .content
        .iter()
        .map(|b| serde_json::to_value(b).unwrap_or(Value::Null))
        .collect();
    Ok(StepDecision::ModelResponse(ModelStep {
        input_ids,
        message,
        tool_calls,
        usage: serde_json::to_value(response.usage).unwrap_or(Value::Null),
        stop_reason: response.stop_reason,
        config_version: Some(context.config_version),
    }))
}

/// `holdfast_model_tokens_total{provider, model, kind}`: the tokens a
/// response used (a compaction's summary too), counted as it arrives
/// (paid for, whether or not its commit lands). Kinds as in the saved usage: input, output, cache_read,
/// cache_write, reasoning (the last three are parts of the first two).
fn count_tokens(model: &ModelConfig, usage: &Usage) {
    let provider: &'static str = model.provider.into();
    for (kind, tokens) in [
        ("input", usage.input_tokens),
        ("output", usage.output_tokens),
        ("cache_read", usage.cache_read_tokens),
        ("cache_write", usage.cache_write_tokens),
        ("reasoning", usage.reasoning_tokens),
    ] {
        metrics::counter!("holdfast_model_tokens_total",
            "provider" => provider, "model" => model.name.clone(), "kind" => kind)
        .increment(tokens);
    }
}

/// Where this attempt's model call goes: the endpoint resolved with the
/// attempt's context, from the config loaded with it (so a removed
/// endpoint, a changed allow-list or a withdrawn custom-URL permission
/// applies at once), or the error that ends the turn.
fn model_target(
    deps: &StepDeps,
    input: &ModelInput,
    request: &ModelRequest,
) -> std::result::Result<ModelTarget, ModelError> {
    deps.providers.target(&input.route, request.model.provider)
}

/// Summarise the older history with a model call; the summary is saved,
/// the agent released ready, and its next step makes the real call with the
/// compacted context. The summary call is a step like any other: its
/// failures are retried, or fail the turn, the same way.
async fn compact(
    deps: &StepDeps,
    context: &StepContext,
    input: &ModelInput,
    request: &ModelRequest,
    files: &RequestFiles,
    target: &ModelTarget,
) -> StepDecision {
    let too_long = |message: String| StepDecision::TurnFailed {
        error_type: "context_length_exceeded".into(),
        message,
        input_ids: input.pending_input_ids(),
    };
    let plan = compaction_plan(context, input, request, COMPACTION_KEEP_LAST)
        .or_else(|| compaction_plan(context, input, request, 0));
    let Some(plan) = plan else {
        return too_long(
            "the context is too long for the model and nothing older is left to summarise".into(),
        );
    };
    let summary = match deps
        .providers
        .complete_with_files(&plan.request, files, target, None)
        .await
    {
        Ok(response) => response,
        Err(ModelError::ContextTooLong { message }) => {
            return too_long(format!("even the summary request is too long: {message}"));
        }
        Err(error) => return model_failed(deps, context, input, error),
    };
    count_tokens(&context.config.model, &summary.usage);
    let text: Vec<&str> = summary
        .content
        .iter()
        .filter_map(ContentBlock::text)
        .collect();
    StepDecision::Compacted {
        summary: text.join("\n"),
        keep_from_seq: plan.keep_from_seq,
        usage: serde_json::to_value(summary.usage).unwrap_or(Value::Null),
    }
}

/// A model call failed: retry later (durably), or end the turn.
fn model_failed(
    deps: &StepDeps,
    context: &StepContext,
    input: &ModelInput,
    error: ModelError,
) -> StepDecision {
    match error {
        ModelError::Retryable {
            kind,
            message,
            retry_after,
        } => {
            let attempt = u32::try_from(context.model_attempts).unwrap_or(0) + 1;
            let delay = deps.settings.model_backoff.delay(attempt, retry_after);
            tracing::info!(attempt, ?delay, error = %message, "model call failed");
            StepDecision::ModelRetry {
                error: json!({"type": kind, "message": message}),
                delay,
                max_retries: i32::try_from(deps.settings.model_max_retries).unwrap_or(i32::MAX),
                input_ids: input.pending_input_ids(),
            }
        }
        ModelError::Fatal {
            error_type,
            message,
        } => StepDecision::TurnFailed {
            error_type,
            message,
            input_ids: input.pending_input_ids(),
        },
        ModelError::ContextTooLong { message } => StepDecision::TurnFailed {
            error_type: "context_length_exceeded".into(),
            message,
            input_ids: input.pending_input_ids(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_step_is_a_failure_carrying_the_panic_message() {
        let index = 7;
        let panicking = async move {
            let bytes = "Tom &amp; Jerry";
            // A panic reachable from data, as html_text's byte slicing was.
            let _ = &bytes[index..index + 100];
            Ok(StepDecision::NoWork)
        };
        match contained(panicking).await {
            Err(StepFailure::Panicked(message)) => {
                assert!(message.contains("out of bounds"), "{message}")
            }
            Err(StepFailure::Error(e)) => panic!("an error instead of a panic: {e}"),
            Ok(result) => panic!("no panic caught: {result:?}"),
        }
    }

    #[tokio::test]
    async fn a_step_that_does_not_panic_keeps_its_result() {
        let ok = contained(async { Ok(StepDecision::BatchDone { last: None }) }).await;
        assert!(matches!(ok, Ok(StepDecision::BatchDone { last: None })));
        let failed = contained(async { Err(Error::LeaseLost("taken".into())) }).await;
        assert!(matches!(
            failed,
            Err(StepFailure::Error(Error::LeaseLost(_)))
        ));
    }

    fn claim() -> Claim {
        Claim {
            agent_id: uuid::Uuid::nil(),
            epoch: 1,
        }
    }

    #[test]
    fn only_a_refused_lease_is_a_lost_lease() {
        assert_eq!(
            unsaved(claim(), &Error::LeaseLost("epoch moved on".into())),
            StepOutcome::LeaseLost
        );
        assert_eq!(
            unsaved(claim(), &Error::Pool("timed out".into())),
            StepOutcome::Abandoned
        );
        assert_eq!(
            unsaved(claim(), &Error::NotFound("agent".into())),
            StepOutcome::Abandoned
        );
    }
}
