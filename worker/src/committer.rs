//! The worker's group commit of model steps: steps that finish within a
//! short window (`HOLDFAST_COMMIT_WINDOW`), or until `HOLDFAST_COMMIT_BATCH`
//! are waiting, are saved in one transaction by
//! `holdfast.commit_model_steps` ([`holdfast_db::group_commit`]). Each
//! agent is fenced on its own in SQL: a lost lease or a malformed response
//! refuses only that agent's step, and each step's caller gets the outcome
//! a commit of its own would have had.

use std::collections::HashMap;

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
/// step id, or [`Error::LeaseLost`] when the lease is gone.
pub type Committer = GroupCommitter<ModelSteps>;

impl GroupWrite for ModelSteps {
    type Item = (Claim, ModelStep);
    type Saved = Uuid;
    const KIND: &'static str = "model_step";

    fn key((claim, _): &Self::Item) -> Uuid {
        claim.agent_id
    }

    async fn commit_batch(pool: &Pool, items: &[Self::Item]) -> Result<Vec<Result<Uuid>>> {
        let client = pool.get().await?;
        let steps: Vec<(Claim, &ModelStep)> = items.iter().map(|(c, s)| (*c, s)).collect();
        let mut outcomes: HashMap<Uuid, Result<Uuid>> = store::commit_model_steps(&client, &steps)
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
