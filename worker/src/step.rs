//! One step for one claimed agent: load its saved state, decide, run, save.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use holdfast_engine::context::{NextAction, StepContext};
use holdfast_engine::domain::{Claim, ModelStep, NewToolCall};
use holdfast_engine::provider::{ContentBlock, ModelError, ModelRequest, ModelTarget};
use holdfast_engine::{store, Error, Result};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::deps::StepDeps;
use crate::stop::{StopReason, StopSignal};
use crate::{deltas, toolbox};

/// How a step ended, for metrics and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepOutcome {
    Committed,
    Retrying,
    Failed,
    Cancelled,
    Released,
    LeaseLost,
    /// Nothing more could be written (the database was unreachable, or
    /// refused the write for a reason other than the lease): the lease
    /// expires and maintenance releases the agent.
    Abandoned,
    Nothing,
}

impl StepOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            StepOutcome::Committed => "committed",
            StepOutcome::Retrying => "retrying",
            StepOutcome::Failed => "failed",
            StepOutcome::Cancelled => "cancelled",
            StepOutcome::Released => "released",
            StepOutcome::LeaseLost => "lease_lost",
            StepOutcome::Abandoned => "abandoned",
            StepOutcome::Nothing => "nothing",
        }
    }
}

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
/// fails, or panics, with anything but a lost lease is contained
/// ([`contain_failure`]): it never ends the task abnormally and never
/// releases its agent for an immediate retry.
pub async fn run(deps: Arc<StepDeps>, claim: Claim, stop: StopSignal) -> StepOutcome {
    let result = tokio::select! {
        result = contained(execute(&deps, claim, &stop)) => result,
        _ = stop.stopped() => Ok(StepOutcome::Nothing),
    };
    let outcome = match (stop.reason(), result) {
        (None, Ok(outcome)) => outcome,
        (None, Err(StepFailure::Error(Error::LeaseLost(message)))) => {
            // Another holder took the agent (this worker was stalled past
            // its lease): Postgres refused the write and nothing is saved.
            tracing::warn!(%message, "lease lost: a write was refused");
            StepOutcome::LeaseLost
        }
        (None, Err(failure)) => contain_failure(&deps, claim, failure).await,
        (Some(StopReason::LeaseLost), _) => StepOutcome::LeaseLost,
        (Some(StopReason::Cancel), _) => match deps.pool.get().await {
            Ok(client) => match store::complete_cancel(&**client, claim).await {
                Ok(_) => StepOutcome::Cancelled,
                Err(e) => {
                    tracing::warn!(error = %e, "completing a cancel");
                    unsaved(&e)
                }
            },
            Err(e) => {
                tracing::warn!(error = %e, "completing a cancel: no connection");
                StepOutcome::Abandoned
            }
        },
        (Some(StopReason::Drain), _) => release(&deps, claim).await,
    };
    metrics::counter!("holdfast_steps_total", "outcome" => outcome.as_str()).increment(1);
    if outcome == StepOutcome::LeaseLost {
        metrics::counter!("holdfast_lease_losses_total").increment(1);
    }
    outcome
}

/// A step failed with something other than a lost lease (a database error,
/// a config the worker can't represent, a panic). Retrying at once would
/// fail the same way, in a loop, perhaps paying for a model call each time:
/// the failure is counted on the agent and the agent released with a
/// durable, jittered backoff; the `step_max_attempts`-th failure in a row
/// ends the turn with `internal_error` (sql/0010_step_failures.sql).
async fn contain_failure(deps: &StepDeps, claim: Claim, failure: StepFailure) -> StepOutcome {
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
    let settings = &deps.settings;
    let failed = async {
        let client = deps.pool.get().await?;
        let failures = store::step_failures(&**client, claim.agent_id).await?;
        let attempt = u32::try_from(failures).unwrap_or(0).saturating_add(1);
        let delay = settings.step_backoff.delay(attempt, None);
        let max = i32::try_from(settings.step_max_attempts).unwrap_or(i32::MAX);
        store::fail_step(&**client, claim, &message, delay, max).await
    };
    match failed.await {
        Ok(true) => StepOutcome::Retrying,
        Ok(false) => {
            tracing::warn!(agent_id = %claim.agent_id, "step failed too often: the turn failed");
            StepOutcome::Failed
        }
        Err(e) => {
            // Not even the failure could be saved (Postgres unreachable, or
            // the lease is gone): the lease expires and maintenance releases
            // the agent, a minute from now, not at once.
            tracing::warn!(agent_id = %claim.agent_id, error = %e, "recording a step failure");
            unsaved(&e)
        }
    }
}

/// `work`'s result, with a panic inside it turned into
/// [`StepFailure::Panicked`] instead of ending the task (whose slot would
/// then never be freed).
async fn contained(
    work: impl Future<Output = Result<StepOutcome, Error>>,
) -> Result<StepOutcome, StepFailure> {
    match AssertUnwindSafe(work).catch_unwind().await {
        Ok(result) => result.map_err(StepFailure::Error),
        Err(panic) => Err(StepFailure::Panicked(panic_message(panic.as_ref()))),
    }
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
fn unsaved(error: &Error) -> StepOutcome {
    match error {
        Error::LeaseLost(_) => StepOutcome::LeaseLost,
        _ => StepOutcome::Abandoned,
    }
}

async fn release(deps: &StepDeps, claim: Claim) -> StepOutcome {
    let released = match deps.pool.get().await {
        Ok(client) => store::release_agent(&store::Pooled(&client), claim, None).await,
        Err(e) => Err(e.into()),
    };
    match released {
        Ok(_) => StepOutcome::Released,
        Err(e) => {
            tracing::warn!(error = %e, "releasing an agent");
            unsaved(&e)
        }
    }
}

async fn execute(deps: &StepDeps, claim: Claim, stop: &StopSignal) -> Result<StepOutcome> {
    let context = {
        let client = deps.pool.get().await?;
        store::load_step_context(&store::Pooled(&client), claim.agent_id).await?
    };
    if context.cancel_requested {
        stop.stop(StopReason::Cancel);
        return Ok(StepOutcome::Cancelled);
    }
    let action = context.next_action();
    let kind = match &action {
        NextAction::Nothing => "nothing",
        NextAction::Tools(_) => "tools",
        NextAction::Model => "model",
    };
    tracing::Span::current().record("kind", kind);
    metrics::counter!("holdfast_steps_started_total", "kind" => kind).increment(1);
    match action {
        NextAction::Nothing => {
            let client = deps.pool.get().await?;
            store::release_agent(&store::Pooled(&client), claim, None).await?;
            Ok(StepOutcome::Nothing)
        }
        NextAction::Tools(calls) => {
            tracing::debug!(calls = calls.len(), "tool batch");
            toolbox::run_batch(deps, claim, &context, calls).await?;
            let client = deps.pool.get().await?;
            store::release_agent(&store::Pooled(&client), claim, None).await?;
            Ok(StepOutcome::Committed)
        }
        NextAction::Model => model_step(deps, claim, &context).await,
    }
}

/// Messages kept verbatim when compacting (the rest are summarised).
const COMPACTION_KEEP_LAST: usize = 4;

async fn model_step(deps: &StepDeps, claim: Claim, context: &StepContext) -> Result<StepOutcome> {
    let request = context.model_request(toolbox::definitions(deps, &context.config).await);
    let target = match model_target(deps, claim, context, &request).await? {
        Ok(target) => target,
        Err(error) => return model_failed(deps, claim, context, error).await,
    };
    if deps.providers.should_compact(&request) {
        tracing::info!("context near the model's window: compacting first");
        return compact(deps, claim, context, &request, &target).await;
    }
    let input_ids = context.pending_input_ids();

    let (delta_tx, delta_rx) = mpsc::unbounded_channel();
    let publisher = tokio::spawn(deltas::publish(deps.pool.clone(), claim, delta_rx));
    let started = std::time::Instant::now();
    let response = deps
        .providers
        .complete(&request, &target, Some(&delta_tx))
        .await;
    drop(delta_tx);
    // Deltas go out before the saved response, so a live client never sees
    // a delta after the model.response event it belongs to.
    let _ = publisher.await;
    metrics::histogram!("holdfast_model_call_seconds").record(started.elapsed().as_secs_f64());

    let response = match response {
        Ok(response) => response,
        Err(ModelError::ContextTooLong { message }) => {
            tracing::info!(%message, "context too long: compacting");
            return compact(deps, claim, context, &request, &target).await;
        }
        Err(error) => return model_failed(deps, claim, context, error).await,
    };
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
    let step = ModelStep {
        input_ids,
        message,
        tool_calls,
        usage: serde_json::to_value(response.usage).unwrap_or(Value::Null),
        stop_reason: response.stop_reason,
    };
    deps.committer.commit_model_step(claim, step).await?;
    Ok(StepOutcome::Committed)
}

/// Where this attempt's model call goes: the endpoint resolved now, from the
/// config loaded for this attempt (so a removed endpoint, a changed
/// allow-list or a withdrawn custom-URL permission applies at once), or the
/// error that ends the turn.
async fn model_target(
    deps: &StepDeps,
    claim: Claim,
    context: &StepContext,
    request: &ModelRequest,
) -> Result<std::result::Result<ModelTarget, ModelError>> {
    let client = deps.pool.get().await?;
    let route = store::resolve_model_endpoint(
        &store::Pooled(&client),
        claim.agent_id,
        &context.config.model,
    )
    .await?;
    Ok(deps.providers.target(&route, request.model.provider))
}

/// Summarise the older history with a model call and save the summary; the
/// agent is released ready, and its next step makes the real call with the
/// compacted context. The summary call is a step like any other: its
/// failures are retried, or fail the turn, the same way.
async fn compact(
    deps: &StepDeps,
    claim: Claim,
    context: &StepContext,
    request: &ModelRequest,
    target: &ModelTarget,
) -> Result<StepOutcome> {
    let plan = context
        .compaction_plan(request, COMPACTION_KEEP_LAST)
        .or_else(|| context.compaction_plan(request, 0));
    let Some(plan) = plan else {
        let client = deps.pool.get().await?;
        store::fail_turn(
            &**client,
            claim,
            "context_length_exceeded",
            "the context is too long for the model and nothing older is left to summarise",
            &context.pending_input_ids(),
        )
        .await?;
        return Ok(StepOutcome::Failed);
    };
    let summary = match deps.providers.complete(&plan.request, target, None).await {
        Ok(response) => response,
        Err(ModelError::ContextTooLong { message }) => {
            let client = deps.pool.get().await?;
            store::fail_turn(
                &**client,
                claim,
                "context_length_exceeded",
                &format!("even the summary request is too long: {message}"),
                &context.pending_input_ids(),
            )
            .await?;
            return Ok(StepOutcome::Failed);
        }
        Err(error) => return model_failed(deps, claim, context, error).await,
    };
    let text: Vec<&str> = summary
        .content
        .iter()
        .filter_map(ContentBlock::text)
        .collect();
    let usage = serde_json::to_value(summary.usage).unwrap_or(Value::Null);
    let client = deps.pool.get().await?;
    store::commit_compaction(
        &**client,
        claim,
        &text.join("\n"),
        plan.keep_from_seq,
        &usage,
    )
    .await?;
    Ok(StepOutcome::Committed)
}

/// A model call failed: retry later (durably), or end the turn.
async fn model_failed(
    deps: &StepDeps,
    claim: Claim,
    context: &StepContext,
    error: ModelError,
) -> Result<StepOutcome> {
    let client = deps.pool.get().await?;
    match error {
        ModelError::Retryable {
            kind,
            message,
            retry_after,
        } => {
            let attempt = u32::try_from(context.model_attempts).unwrap_or(0) + 1;
            let delay = deps.settings.model_backoff.delay(attempt, retry_after);
            let error = json!({"type": kind, "message": message});
            let max = i32::try_from(deps.settings.model_max_retries).unwrap_or(i32::MAX);
            let retrying = store::commit_model_retry(
                &**client,
                claim,
                &error,
                delay,
                max,
                &context.pending_input_ids(),
            )
            .await?;
            tracing::info!(attempt, ?delay, retrying, error = %message, "model call failed");
            Ok(if retrying {
                StepOutcome::Retrying
            } else {
                StepOutcome::Failed
            })
        }
        ModelError::Fatal {
            error_type,
            message,
        } => {
            store::fail_turn(
                &**client,
                claim,
                &error_type,
                &message,
                &context.pending_input_ids(),
            )
            .await?;
            Ok(StepOutcome::Failed)
        }
        ModelError::ContextTooLong { message } => {
            store::fail_turn(
                &**client,
                claim,
                "context_length_exceeded",
                &message,
                &context.pending_input_ids(),
            )
            .await?;
            Ok(StepOutcome::Failed)
        }
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
            Ok(StepOutcome::Committed)
        };
        match contained(panicking).await {
            Err(StepFailure::Panicked(message)) => {
                assert!(message.contains("out of bounds"), "{message}")
            }
            Err(StepFailure::Error(e)) => panic!("an error instead of a panic: {e}"),
            Ok(outcome) => panic!("no panic caught: {}", outcome.as_str()),
        }
    }

    #[tokio::test]
    async fn a_step_that_does_not_panic_keeps_its_result() {
        let ok = contained(async { Ok(StepOutcome::Committed) }).await;
        assert!(matches!(ok, Ok(StepOutcome::Committed)));
        let failed = contained(async { Err(Error::LeaseLost("taken".into())) }).await;
        assert!(matches!(
            failed,
            Err(StepFailure::Error(Error::LeaseLost(_)))
        ));
    }

    #[test]
    fn only_a_refused_lease_is_a_lost_lease() {
        assert_eq!(
            unsaved(&Error::LeaseLost("epoch moved on".into())),
            StepOutcome::LeaseLost
        );
        assert_eq!(
            unsaved(&Error::Pool("timed out".into())),
            StepOutcome::Abandoned
        );
        assert_eq!(
            unsaved(&Error::NotFound("agent".into())),
            StepOutcome::Abandoned
        );
    }
}
