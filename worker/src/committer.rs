//! The worker's group commit. Model steps that finish within a short window
//! (`HOLDFAST_COMMIT_WINDOW`), or until `HOLDFAST_COMMIT_BATCH` are waiting,
//! are saved in one transaction by `holdfast.commit_model_steps`: with fsync
//! on, every commit waits for its WAL flush and takes its turn at the NOTIFY
//! queue lock, so N steps in one commit pay those once instead of N times.
//! Each agent is fenced on its own in SQL: a lost lease or a malformed
//! response refuses only that agent's step, and each step's caller gets the
//! outcome a commit of its own would have had.

use std::collections::HashMap;
use std::time::Duration;

use deadpool_postgres::Pool;
use holdfast_engine::domain::{Claim, ModelStep};
use holdfast_engine::{store, Error, Result};
use tokio::sync::{mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use uuid::Uuid;

/// How model steps are grouped into commits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupCommit {
    /// How long the first waiting step waits for others to join its commit
    /// (`HOLDFAST_COMMIT_WINDOW`; zero: only the steps already waiting).
    pub window: Duration,
    /// Most steps in one commit (`HOLDFAST_COMMIT_BATCH`; 1 turns grouping
    /// off). A full batch commits at once, without waiting out the window.
    pub batch: usize,
}

impl Default for GroupCommit {
    fn default() -> Self {
        GroupCommit {
            window: Duration::from_millis(2),
            batch: 32,
        }
    }
}

/// A step waiting for its commit, and where its outcome goes.
struct Pending {
    claim: Claim,
    step: ModelStep,
    outcome: oneshot::Sender<Result<Uuid>>,
}

/// The handle steps commit through. The committing task ends, after its
/// last commit, once every handle is dropped.
pub struct Committer {
    queue: mpsc::Sender<Pending>,
}

impl Committer {
    /// Start the committing task on `pool`.
    pub fn start(pool: Pool, settings: GroupCommit) -> (Committer, JoinHandle<()>) {
        let (queue, waiting) = mpsc::channel(settings.batch.max(1) * 4);
        let task = tokio::spawn(run(pool, settings, waiting));
        (Committer { queue }, task)
    }

    /// Save `step` for `claim` (with whichever steps join its commit).
    /// Returns the step id, or the error a commit of its own would have
    /// returned: [`Error::LeaseLost`] when the lease is gone.
    pub async fn commit_model_step(&self, claim: Claim, step: ModelStep) -> Result<Uuid> {
        let (outcome, answer) = oneshot::channel();
        let pending = Pending {
            claim,
            step,
            outcome,
        };
        self.queue.send(pending).await.map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

fn stopped() -> Error {
    Error::Pool("the group committer has stopped".into())
}

/// Collect batches and commit each on its own task, so a batch collects
/// while the one before waits for its WAL flush.
async fn run(pool: Pool, settings: GroupCommit, mut waiting: mpsc::Receiver<Pending>) {
    let mut commits = JoinSet::new();
    // A second step of an agent already in the batch (a stale step of an
    // earlier lease, still queued) goes into the next batch, so each is
    // fenced by its own epoch.
    let mut next: Vec<Pending> = Vec::new();
    loop {
        let mut batch = std::mem::take(&mut next);
        if batch.is_empty() {
            match waiting.recv().await {
                Some(pending) => batch.push(pending),
                None => break,
            }
        }
        let deadline = Instant::now() + settings.window;
        while batch.len() < settings.batch {
            tokio::select! {
                biased;
                pending = waiting.recv() => match pending {
                    Some(pending) if batch.iter().any(|p| p.claim.agent_id == pending.claim.agent_id) => {
                        next.push(pending);
                    }
                    Some(pending) => batch.push(pending),
                    None => break,
                },
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
        commits.spawn(commit(pool.clone(), batch));
        while commits.try_join_next().is_some() {}
    }
    while commits.join_next().await.is_some() {}
}

/// Commit one batch and answer each of its steps. When the batch fails as a
/// whole (a deadlock with some other transaction, a lost connection),
/// nothing of it was saved: each step is then committed on its own, so one
/// step's trouble is never another's outcome.
async fn commit(pool: Pool, batch: Vec<Pending>) {
    metrics::histogram!("holdfast_commit_batch_steps").record(batch.len() as f64);
    let steps: Vec<(Claim, &ModelStep)> = batch.iter().map(|p| (p.claim, &p.step)).collect();
    let result = match pool.get().await {
        Ok(client) => store::commit_model_steps(&store::Pooled(&client), &steps).await,
        Err(error) => Err(error.into()),
    };
    match result {
        Ok(outcomes) => {
            let mut outcomes: HashMap<Uuid, Result<Uuid>> = outcomes.into_iter().collect();
            for pending in batch {
                let outcome = outcomes
                    .remove(&pending.claim.agent_id)
                    .unwrap_or_else(|| Err(Error::Pool("the group commit lost a step".into())));
                let _ = pending.outcome.send(outcome);
            }
        }
        Err(error) if batch.len() == 1 => {
            if let Some(pending) = batch.into_iter().next() {
                let _ = pending.outcome.send(Err(error));
            }
        }
        Err(error) => {
            tracing::warn!(%error, steps = batch.len(), "group commit failed: committing its steps one by one");
            for pending in batch {
                let outcome = match pool.get().await {
                    Ok(client) => {
                        store::commit_model_step(
                            &store::Pooled(&client),
                            pending.claim,
                            &pending.step,
                        )
                        .await
                    }
                    Err(error) => Err(error.into()),
                };
                let _ = pending.outcome.send(outcome);
            }
        }
    }
}
