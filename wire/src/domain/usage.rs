//! Model usage summed per turn and agent, and the operator's prices
//! (sql/schema/usage.sql).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

/// Tokens by kind as the providers report them, and their cost.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TokenUsage {
    /// The whole prompt, cache reads and writes included.
    pub input_tokens: i64,
    /// Everything generated, reasoning included.
    pub output_tokens: i64,
    /// Of `input_tokens`, read from the provider's prompt cache.
    pub cache_read_tokens: i64,
    /// Of `input_tokens`, written to the prompt cache.
    pub cache_write_tokens: i64,
    /// Of `output_tokens`, a reasoning model's reasoning.
    pub reasoning_tokens: i64,
    /// USD at the operator's prices when each step committed; `null` while
    /// none of the steps summed was priced (a sum over priced and unpriced
    /// steps counts the priced ones).
    pub cost_usd: Option<f64>,
    /// Requests the provider's own server tools made inside the model calls
    /// (Anthropic's web search and web fetch: `usage.server_tool_use`).
    #[serde(default)]
    pub server_tool_requests: i64,
    /// Of `server_tool_requests`, web searches: billed per search, so
    /// `cost_usd` includes their price.
    #[serde(default)]
    pub web_search_requests: i64,
}

/// One turn's usage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TurnUsage {
    /// The turn's number on the agent (counted up as turns open).
    pub turn: i64,
    /// Model responses saved in the turn.
    pub model_steps: i64,
    /// When its first model response was saved.
    pub started_at: DateTime<Utc>,
    pub usage: TokenUsage,
}

/// An agent's usage: its whole life, and each turn that called the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AgentUsage {
    pub agent_id: Uuid,
    /// Every model response the agent has had saved.
    pub usage: TokenUsage,
    /// Oldest turn first.
    pub turns: Vec<TurnUsage>,
}

/// A project's usage of one model on one UTC day.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DayUsage {
    pub day: chrono::NaiveDate,
    pub provider: String,
    pub model: String,
    /// Model calls saved that day (responses and compactions).
    pub model_steps: i64,
    pub usage: TokenUsage,
}

/// A project's usage by day and model since a day, and its sum.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ProjectUsage {
    /// The first UTC day counted.
    pub since: chrono::NaiveDate,
    /// Newest day first, then by provider and model.
    pub days: Vec<DayUsage>,
    /// The sum of `days`.
    pub usage: TokenUsage,
}

/// The operator's price of one provider's model, in USD per million tokens.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelPrice {
    pub provider: String,
    pub model: String,
    pub input_usd_per_mtok: f64,
    pub output_usd_per_mtok: f64,
    /// `None`: cache reads cost the input price.
    pub cache_read_usd_per_mtok: Option<f64>,
    /// `None`: cache writes cost the input price.
    pub cache_write_usd_per_mtok: Option<f64>,
    pub updated_at: DateTime<Utc>,
}

/// What one model call used, as the provider reported it: `model.response`'s
/// and `context.compacted`'s `usage` (`{}` from a SQL client that committed
/// a step without one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
#[schema(as = ModelUsage)]
pub struct Usage {
    /// The whole prompt, its cached parts included.
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Of `input_tokens`, read from the provider's prompt cache (Anthropic
    /// `cache_read_input_tokens`); absent when none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_tokens: u64,
    /// Of `input_tokens`, written to the prompt cache (Anthropic
    /// `cache_creation_input_tokens`); absent when none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
    /// Of `output_tokens`, the reasoning a reasoning model did before
    /// answering (OpenAI `completion_tokens_details.reasoning_tokens`;
    /// Anthropic counts thinking in `output_tokens` without a split);
    /// absent when none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u64,
    /// Requests the provider's own server tools made (Anthropic's
    /// `usage.server_tool_use`: web searches and fetches); absent when none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub server_tool_requests: u64,
    /// Of `server_tool_requests`, Anthropic's web searches
    /// (`usage.server_tool_use.web_search_requests`): billed per search on
    /// top of tokens, so the step's cost counts them
    /// (`holdfast.add_server_tool_cost`); absent when none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub web_search_requests: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
