//! Model usage and the operator's prices (sql/schema/usage.sql).

use serde_json::Value;
use strum::{EnumString, IntoStaticStr};

use uuid::Uuid;

use super::parse_text;
use super::prepared::Prepared;
use crate::error::{Error, Result};
use holdfast_wire::domain::{AgentUsage, Claim, ModelPrice, ProjectUsage};

/// The usage of `agent` in `project`: its sum and each turn's; `None` when
/// the project has no such agent.
pub async fn agent_usage(
    client: &impl Prepared,
    project: Uuid,
    agent: Uuid,
) -> Result<Option<AgentUsage>> {
    let row = client
        .query_one("SELECT holdfast.agent_usage($1, $2)", &[&project, &agent])
        .await?;
    row.get::<_, Option<Value>>(0)
        .map(|usage| {
            serde_json::from_value(usage)
                .map_err(|e| Error::Migration(format!("agent_usage document: {e}")))
        })
        .transpose()
}

/// `project`'s usage by UTC day and model from `since` on
/// (`holdfast.project_usage`).
pub async fn project_usage(
    client: &impl Prepared,
    project: Uuid,
    since: chrono::NaiveDate,
) -> Result<ProjectUsage> {
    let row = client
        .query_one("SELECT holdfast.project_usage($1, $2)", &[&project, &since])
        .await?;
    serde_json::from_value(row.get(0))
        .map_err(|e| Error::Migration(format!("project_usage document: {e}")))
}

/// Set a model's price (USD per million tokens; `None` cache prices: the
/// input price). [`Error::Invalid`] names a field out of range.
pub async fn set_model_price(client: &impl Prepared, price: &NewModelPrice<'_>) -> Result<()> {
    client
        .execute(
            "SELECT holdfast.set_model_price($1, $2, $3::float8::numeric, $4::float8::numeric, \
                    $5::float8::numeric, $6::float8::numeric)",
            &[
                &price.provider,
                &price.model,
                &price.input_usd_per_mtok,
                &price.output_usd_per_mtok,
                &price.cache_read_usd_per_mtok,
                &price.cache_write_usd_per_mtok,
            ],
        )
        .await?;
    Ok(())
}

/// A price to set: [`set_model_price`]'s argument.
pub struct NewModelPrice<'a> {
    pub provider: &'a str,
    pub model: &'a str,
    pub input_usd_per_mtok: f64,
    pub output_usd_per_mtok: f64,
    pub cache_read_usd_per_mtok: Option<f64>,
    pub cache_write_usd_per_mtok: Option<f64>,
}

/// Every price, by provider and model.
pub async fn list_model_prices(client: &impl Prepared) -> Result<Vec<ModelPrice>> {
    let rows = client
        .query(
            "SELECT provider, model, input_usd_per_mtok::float8, output_usd_per_mtok::float8, \
                    cache_read_usd_per_mtok::float8, cache_write_usd_per_mtok::float8, updated_at \
               FROM holdfast.list_model_prices()",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| ModelPrice {
            provider: r.get("provider"),
            model: r.get("model"),
            input_usd_per_mtok: r.get("input_usd_per_mtok"),
            output_usd_per_mtok: r.get("output_usd_per_mtok"),
            cache_read_usd_per_mtok: r.get("cache_read_usd_per_mtok"),
            cache_write_usd_per_mtok: r.get("cache_write_usd_per_mtok"),
            updated_at: r.get("updated_at"),
        })
        .collect())
}

/// Remove a model's price; returns whether it had one.
pub async fn remove_model_price(
    client: &impl Prepared,
    provider: &str,
    model: &str,
) -> Result<bool> {
    let row = client
        .query_one(
            "SELECT holdfast.remove_model_price($1, $2)",
            &[&provider, &model],
        )
        .await?;
    Ok(row.get(0))
}

/// What [`end_turn_over_budget`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, EnumString, IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum OverBudget {
    /// The turn ended `budget_exceeded`.
    Failed,
    /// The turn waits on a budget approval (`on_exceeded: "ask"`).
    Asked,
    /// No budget is exceeded under the lock any more: the agent was released.
    Released,
}

/// Stop the claimed agent before its next model call because a budget is
/// reached: the turn ends `budget_exceeded` (the inputs that call would
/// have sent go into the history) or waits on a budget approval.
/// [`Error::LeaseLost`] when the lease is gone.
pub async fn end_turn_over_budget(
    client: &impl Prepared,
    claim: Claim,
    input_ids: &[Uuid],
) -> Result<OverBudget> {
    let row = client
        .query_one(
            "SELECT holdfast.end_turn_over_budget($1, $2, $3)",
            &[&claim.agent_id, &claim.epoch, &input_ids],
        )
        .await?;
    parse_text(row.get(0), "end_turn_over_budget")
}
