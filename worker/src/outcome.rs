//! What a step came to, and the one function that saves it.
//!
//! A step decides its result — a model response, a retry, a failed turn, a
//! compaction, nothing — as a [`StepDecision`] without writing anything, and
//! [`save`] writes it: every end-of-step write is fenced by the claim's
//! epoch in SQL, timed by kind (`holdfast_step_save_seconds{result}`) and
//! turned into the step's [`StepOutcome`] here, so a batched commit can
//! replace any of them (model responses already go through the group
//! [`crate::committer::Committer`]). Tool results are the exception: each
//! is saved inside its batch as soon as it is in hand (the toolbox), so a
//! crash later in the batch never loses it; the batch's last is saved here,
//! with the batch's end, in one transaction.
//!
//! A step that leaves its agent ready (a model response whose tool calls
//! the worker runs, a finished tool batch) keeps the lease when nothing
//! else waits to be claimed ([`StepOutcome::LeaseKept`]): the worker takes
//! the agent's next step at once, without a release and a re-claim.

use std::time::{Duration, Instant};

use holdfast_db::group_commit::Refused;
use holdfast_db::store::{self, OverBudget};
use holdfast_db::Result;
use holdfast_wire::domain::{AgentState, Claim, ModelStep, StepContext};
use serde_json::Value;
use uuid::Uuid;

use crate::deps::StepDeps;
use crate::toolbox::LastToolResult;

/// What a step decided, before it is written ([`save`] writes it and
/// returns the [`StepOutcome`]).
#[derive(Debug)]
pub enum StepDecision {
    /// Nothing to do (the claim raced a change): release the agent.
    NoWork,
    /// A tool batch ran (its results are saved, but `last`, saved with
    /// the batch's end): release the agent, or keep its lease.
    BatchDone { last: Option<LastToolResult> },
    /// The worker is draining: release the agent for another worker.
    Drained,
    /// The model's response, with the tool calls it asks for.
    ModelResponse(ModelStep),
    /// A retryable model failure: try again after `delay`, unless the turn
    /// has used its `max_retries` (then it fails).
    ModelRetry {
        error: Value,
        delay: Duration,
        max_retries: i32,
        input_ids: Vec<Uuid>,
    },
    /// The turn ends with an error.
    TurnFailed {
        error_type: String,
        message: String,
        input_ids: Vec<Uuid>,
    },
    /// The older history summarised; the next step calls the model with it.
    Compacted {
        summary: String,
        keep_from_seq: i64,
        usage: Value,
    },
    /// A budget of `config.budget` is used up: the turn ends
    /// `budget_exceeded` instead of the model call.
    OverBudget { input_ids: Vec<Uuid> },
    /// The turn was cancelled while the step ran: `turn.cancelled`.
    Cancelled,
    /// The model call was aborted for interrupt inputs it did not include
    /// (`input_ids`): `model.interrupted`, and the call is made again.
    Interrupted { input_ids: Vec<Uuid> },
    /// The step failed (an error other than a lost lease, or a panic):
    /// counted on the agent and retried after a durable backoff; the
    /// `step_max_attempts`-th failure in a row ends the turn.
    StepFailed { message: String },
}

/// How a step ended, for metrics and logs.
#[derive(Clone, Debug, PartialEq)]
pub enum StepOutcome {
    Committed,
    /// Committed, and the agent stayed ready: its lease is kept, at the
    /// step's epoch + 1, for the next step (no release, no re-claim),
    /// running until the lease ttl from before `since`. `next` is the
    /// agent's context the commit read for that step, when it did.
    LeaseKept {
        since: Instant,
        next: Option<Box<StepContext>>,
    },
    Retrying,
    Failed,
    Cancelled,
    Released,
    LeaseLost,
    /// Nothing more could be written (the database was unreachable, or
    /// refused the write for a reason other than the lease): the lease
    /// expires and maintenance releases the agent.
    Abandoned,
    /// The claim raced a change and found no work; the agent was released.
    NoWork,
}

impl StepOutcome {
    pub fn as_str(&self) -> &'static str {
        match self {
            StepOutcome::Committed | StepOutcome::LeaseKept { .. } => "committed",
            StepOutcome::Retrying => "retrying",
            StepOutcome::Failed => "failed",
            StepOutcome::Cancelled => "cancelled",
            StepOutcome::Released => "released",
            StepOutcome::LeaseLost => "lease_lost",
            StepOutcome::Abandoned => "abandoned",
            StepOutcome::NoWork => "no_work",
        }
    }
}

impl StepDecision {
    fn kind(&self) -> &'static str {
        match self {
            StepDecision::NoWork => "no_work",
            StepDecision::BatchDone { .. } => "batch_done",
            StepDecision::Drained => "drained",
            StepDecision::ModelResponse(_) => "model_response",
            StepDecision::ModelRetry { .. } => "model_retry",
            StepDecision::TurnFailed { .. } => "turn_failed",
            StepDecision::OverBudget { .. } => "over_budget",
            StepDecision::Compacted { .. } => "compacted",
            StepDecision::Cancelled => "cancelled",
            StepDecision::Interrupted { .. } => "interrupted",
            StepDecision::StepFailed { .. } => "step_failed",
        }
    }
}

/// Save `result` for `claim`: the one place a step's end is written. An
/// error is the write's (a lost lease is [`holdfast_db::Error::LeaseLost`]),
/// and `result` is left as it was, to be saved again, except when the
/// group committer has stopped with a model response in hand.
pub async fn save(deps: &StepDeps, claim: Claim, result: &mut StepDecision) -> Result<StepOutcome> {
    let kind = result.kind();
    let started = Instant::now();
    let outcome = write(deps, claim, result).await;
    metrics::histogram!("holdfast_step_save_seconds", "result" => kind)
        .record(started.elapsed().as_secs_f64());
    outcome
}

async fn write(deps: &StepDeps, claim: Claim, result: &mut StepDecision) -> Result<StepOutcome> {
    let release = |outcome| async move {
        let client = deps.pool.get().await?;
        store::release_agent(&client, claim, None).await?;
        Ok(outcome)
    };
    match result {
        StepDecision::NoWork => release(StepOutcome::NoWork).await,
        StepDecision::BatchDone { last } => {
            let since = Instant::now();
            let client = deps.pool.get().await?;
            let keep_for = deps.settings.lease_ttl;
            let (state, next) = match last {
                Some(last) => {
                    let end = store::end_tool_batch(
                        &client,
                        claim,
                        last.call,
                        &last.output.output,
                        last.output.is_error,
                        keep_for,
                    )
                    .await?;
                    (end.state, end.next_context)
                }
                None => (
                    store::release_or_keep_agent(&client, claim, keep_for).await?,
                    None,
                ),
            };
            Ok(if state == AgentState::Running {
                StepOutcome::LeaseKept { since, next }
            } else {
                StepOutcome::Committed
            })
        }
        StepDecision::Drained => release(StepOutcome::Released).await,
        StepDecision::ModelResponse(kept) => {
            // Moved into the group commit, and back if it is refused: a
            // response is not copied to be saved.
            let since = Instant::now();
            match deps
                .committer
                .try_commit((claim, std::mem::take(kept)))
                .await
            {
                Ok(saved) if saved.lease_kept => Ok(StepOutcome::LeaseKept {
                    since,
                    next: saved.next_context,
                }),
                Ok(_) => Ok(StepOutcome::Committed),
                Err(Refused { error, item }) => {
                    if let Some((_, step)) = item {
                        *kept = step;
                    }
                    Err(error)
                }
            }
        }
        StepDecision::ModelRetry {
            error,
            delay,
            max_retries,
            input_ids,
        } => {
            let client = deps.pool.get().await?;
            let retrying =
                store::commit_model_retry(&client, claim, error, *delay, *max_retries, input_ids)
                    .await?;
            Ok(if retrying {
                StepOutcome::Retrying
            } else {
                StepOutcome::Failed
            })
        }
        StepDecision::TurnFailed {
            error_type,
            message,
            input_ids,
        } => {
            let client = deps.pool.get().await?;
            store::fail_turn(&client, claim, error_type, message, input_ids).await?;
            Ok(StepOutcome::Failed)
        }
        StepDecision::OverBudget { input_ids } => {
            let client = deps.pool.get().await?;
            Ok(
                match store::end_turn_over_budget(&client, claim, input_ids).await? {
                    OverBudget::Failed => StepOutcome::Failed,
                    OverBudget::Asked | OverBudget::Released => StepOutcome::Released,
                },
            )
        }
        StepDecision::Compacted {
            summary,
            keep_from_seq,
            usage,
        } => {
            let client = deps.pool.get().await?;
            store::commit_compaction(&client, claim, summary, *keep_from_seq, usage).await?;
            Ok(StepOutcome::Committed)
        }
        StepDecision::Cancelled => {
            let client = deps.pool.get().await?;
            store::complete_cancel(&client, claim).await?;
            Ok(StepOutcome::Cancelled)
        }
        StepDecision::Interrupted { input_ids } => {
            let client = deps.pool.get().await?;
            store::commit_model_interrupt(&client, claim, input_ids).await?;
            Ok(StepOutcome::Released)
        }
        StepDecision::StepFailed { message } => {
            let settings = &deps.settings;
            let client = deps.pool.get().await?;
            let failures = store::step_failures(&client, claim.agent_id).await?;
            let attempt = u32::try_from(failures).unwrap_or(0).saturating_add(1);
            let delay = settings.step_backoff.delay(attempt, None);
            let max = i32::try_from(settings.step_max_attempts).unwrap_or(i32::MAX);
            if store::fail_step(&client, claim, message, delay, max).await? {
                Ok(StepOutcome::Retrying)
            } else {
                tracing::warn!(agent_id = %claim.agent_id, "step failed too often: the turn failed");
                Ok(StepOutcome::Failed)
            }
        }
    }
}
