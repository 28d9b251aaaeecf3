//! The worker's group commit of model steps: steps that finish within a
//! short window (`HOLDFAST_COMMIT_WINDOW`), or until `HOLDFAST_COMMIT_BATCH`
//! are waiting, are saved in one transaction by
//! `holdfast.commit_model_step_batch` ([`holdfast_db::group_commit`]). Each
//! agent is fenced on its own in SQL: a lost lease or a malformed response
//! refuses only that agent's step, and each step's caller gets the outcome
//! a commit of its own would have had. An agent that stays ready stays
//! leased to this worker (the committer's context: the lease ttl), which
//! takes its next step at once.

use std::collections::HashMap;
use std::time::Duration;

use deadpool_postgres::Pool;
use holdfast_db::group_commit::{GroupCommitter, GroupWrite};
use holdfast_db::{store, Error, Result};
use holdfast_wire::domain::{Claim, ModelStep};
use uuid::Uuid;

/// Model steps, grouped by agent: a second step of an agent already in the
/// batch (a stale step of an earlier lease, still queued) goes into the
/// next batch, so each is fenced by its own epoch.
pub struct ModelSteps;

/// The handle steps commit through: `commit((claim, step))` returns the
/// saved step (and whether the lease was kept), or [`Error::LeaseLost`]
/// when the lease is gone.
pub type Committer = GroupCommitter<ModelSteps>;

impl GroupWrite for ModelSteps {
    type Item = (Claim, ModelStep);
    type Saved = store::SavedModelStep;
    const KIND: &'static str = "model_step";
    /// How long a lease kept for the agent's next step runs (the lease
    /// ttl); `None` releases every agent.
    type Context = Option<Duration>;

    fn key((claim, _): &Self::Item) -> Uuid {
        claim.agent_id
    }

    async fn commit_batch(
        pool: &Pool,
        keep_for: &Option<Duration>,
        items: &[Self::Item],
    ) -> Result<Vec<Result<store::SavedModelStep>>> {
        let client = pool.get().await?;
        let steps: Vec<(Claim, &ModelStep)> = items.iter().map(|(c, s)| (*c, s)).collect();
        let mut outcomes: HashMap<Uuid, Result<store::SavedModelStep>> =
            store::commit_model_step_batch_keeping_leases(&client, &steps, *keep_for)
                .await?
                .into_iter()
                .collect();
        Ok(items
            .iter()
            .map(|(claim, _)| {
                outcomes
                    .remove(&claim.agent_id)
                    .unwrap_or_else(|| Err(Error::Pool("the group commit lost a step".into())))
            })
            .collect())
    }
}
