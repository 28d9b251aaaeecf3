//! Model providers: the provider-neutral request and response types.
//!
//! A [`ModelRequest`] is rebuilt from the database at every attempt (so inputs
//! and config changes that arrived meanwhile apply to a retry); the provider
//! clients map it to the Anthropic Messages or OpenAI Chat Completions wire
//! format, stream the answer, forward text deltas, and classify failures into
//! [`ModelError`] so the worker knows whether to retry, compact or fail the turn.
//!
//! The worker's side, per attempt:
//! - [`Providers::should_compact`] before sending (estimated size against
//!   the model's context window), and on [`ModelError::ContextTooLong`]:
//!   [`compaction_split`] / [`summary_request`] / [`summary_message`];
//! - [`Providers::complete`] to make the call (drop the future to cancel);
//! - on [`ModelError::Retryable`]: [`crate::backoff::Backoff::delay`]`(attempt, retry_after)`
//!   for the durable `run_after`.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

mod anthropic;
mod classify;
mod client;
mod compaction;
mod history;
mod openai;

pub use anthropic::DEFAULT_MAX_TOKENS;
pub use client::{
    ModelTarget, ProviderSettings, ProviderSetupError, Providers, DEFAULT_ANTHROPIC_BASE_URL,
    DEFAULT_OPENAI_BASE_URL,
};
pub use compaction::{compaction_split, estimate_tokens, summary_message, summary_request};

/// `config.model` of an agent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub provider: Provider,
    /// The provider's model name (within the endpoint's allow-list, if it
    /// has one).
    pub name: String,
    /// The operator's model endpoint by name (default `default`: the
    /// operator's Anthropic or OpenAI endpoint, by `provider`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// An OpenAI- or Anthropic-compatible server of your own (vLLM, Ollama,
    /// a gateway): refused (422) unless the operator allowed custom URLs for
    /// the project; requests to it carry only the project's own provider key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// The most output tokens a call may produce.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub max_tokens: Option<u32>,
    /// Anthropic extended thinking, sent as the request's `thinking`
    /// (Anthropic only). The thinking blocks the model writes are saved with
    /// their signatures and sent back unchanged, as the API requires of a
    /// turn that uses tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<Thinking>,
    /// Anthropic prompt caching (default `true`): `cache_control`
    /// breakpoints on the last tool, the system prompt and the latest
    /// message, so each step reads the prompt so far from the cache instead
    /// of paying for it again; `false` sends none (Anthropic only: OpenAI
    /// caches by itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<bool>,
    /// Sampling temperature: Anthropic 0 to 1, OpenAI 0 to 2 (not with
    /// Anthropic thinking).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus sampling, 0 to 1 (with Anthropic thinking, 0.95 to 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Anthropic: sample from the `top_k` likeliest tokens only (not with
    /// thinking).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u32>,
    /// Anthropic: text that ends the response when generated (each
    /// non-empty; the stop reason is then `stop_sequence`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_sequences: Option<Vec<String>>,
    /// OpenAI: up to 4 texts that end the response when generated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Vec<String>>,
    /// OpenAI: best-effort deterministic sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    /// Your identifier of the end user (1 to 256 characters, no personal
    /// data), for the provider's abuse detection: Anthropic
    /// `metadata.user_id`, OpenAI `user`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Anthropic: `auto` (priority capacity when available) or
    /// `standard_only`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_tier: Option<ServiceTier>,
    /// OpenAI reasoning models: how much to reason before answering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<ReasoningEffort>,
    /// OpenAI: whether one response may call several tools (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
}

/// `config.model.service_tier` (Anthropic).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ServiceTier {
    Auto,
    StandardOnly,
}

/// `config.model.reasoning_effort` (OpenAI).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningEffort {
    Minimal,
    Low,
    Medium,
    High,
}

/// The longest `model.user`, Anthropic's limit for `metadata.user_id`.
pub const MAX_USER_CHARS: usize = 256;
/// The most `model.stop` sequences OpenAI takes.
pub const MAX_OPENAI_STOP: usize = 4;

/// The smallest `budget_tokens` Anthropic accepts.
pub const MIN_THINKING_BUDGET: u32 = 1024;

/// `config.model.thinking`: the Messages API's `thinking` parameter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Thinking {
    /// Think before answering, using at most `budget_tokens` of the output
    /// (at least 1024, and less than `max_tokens`).
    Enabled {
        #[schema(minimum = 1024)]
        budget_tokens: u32,
    },
    /// The model decides whether and how much to think (models that
    /// support it).
    Adaptive {},
    /// No thinking (the model's default said explicitly).
    Disabled {},
}

impl ModelConfig {
    /// `name` of `provider`, every setting at its default.
    pub fn new(provider: Provider, name: impl Into<String>) -> ModelConfig {
        ModelConfig {
            provider,
            name: name.into(),
            endpoint: None,
            base_url: None,
            max_tokens: None,
            thinking: None,
            cache: None,
            temperature: None,
            top_p: None,
            top_k: None,
            stop_sequences: None,
            stop: None,
            seed: None,
            user: None,
            service_tier: None,
            reasoning_effort: None,
            parallel_tool_calls: None,
        }
    }

    /// The output tokens a call may produce: `max_tokens`, else
    /// [`DEFAULT_MAX_TOKENS`].
    pub fn output_limit(&self) -> u32 {
        self.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)
    }

    /// Whether requests carry prompt-cache breakpoints (Anthropic's, unless
    /// turned off).
    pub fn caches_prompt(&self) -> bool {
        self.provider == Provider::Anthropic && self.cache != Some(false)
    }

    /// What the field types alone do not say (SQL's `validate_config`
    /// checks the same): each provider's own settings only for it; the
    /// thinking budget at least [`MIN_THINKING_BUDGET`] and below the
    /// output limit; sampling values in the provider's ranges, and the ones
    /// thinking does not allow left out (the API would refuse each call
    /// otherwise). `Err` is the field (within `model`) and why.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let refuse = |field: &'static str, message: String| Err((field, message));
        let anthropic_only = [
            ("thinking", self.thinking.is_some()),
            ("cache", self.cache.is_some()),
            ("top_k", self.top_k.is_some()),
            ("stop_sequences", self.stop_sequences.is_some()),
            ("service_tier", self.service_tier.is_some()),
        ];
        let openai_only = [
            ("stop", self.stop.is_some()),
            ("seed", self.seed.is_some()),
            ("reasoning_effort", self.reasoning_effort.is_some()),
            ("parallel_tool_calls", self.parallel_tool_calls.is_some()),
        ];
        let (foreign, owner): (&[(&'static str, bool)], Provider) = match self.provider {
            Provider::Anthropic => (&openai_only, Provider::Openai),
            Provider::Openai => (&anthropic_only, Provider::Anthropic),
        };
        if let Some((field, _)) = foreign.iter().find(|(_, set)| *set) {
            return refuse(
                field,
                format!(
                    "{field} is an {} setting (provider \"{}\")",
                    match owner {
                        Provider::Anthropic => "Anthropic",
                        Provider::Openai => "OpenAI",
                    },
                    owner.as_str()
                ),
            );
        }
        if let Some(Thinking::Enabled { budget_tokens }) = self.thinking {
            if budget_tokens < MIN_THINKING_BUDGET || budget_tokens >= self.output_limit() {
                return refuse(
                    "thinking.budget_tokens",
                    format!(
                        "thinking.budget_tokens must be at least {MIN_THINKING_BUDGET} and less than max_tokens ({})",
                        self.output_limit()
                    ),
                );
            }
        }
        let thinks = matches!(
            self.thinking,
            Some(Thinking::Enabled { .. } | Thinking::Adaptive {})
        );
        let max_temperature = match self.provider {
            Provider::Anthropic => 1.0,
            Provider::Openai => 2.0,
        };
        if let Some(temperature) = self.temperature {
            if thinks {
                return refuse(
                    "temperature",
                    "temperature cannot be set with thinking".into(),
                );
            }
            if !(0.0..=max_temperature).contains(&temperature) {
                return refuse(
                    "temperature",
                    format!("temperature must be from 0 to {max_temperature}"),
                );
            }
        }
        if let Some(top_p) = self.top_p {
            let min = if thinks { 0.95 } else { 0.0 };
            if !(min..=1.0).contains(&top_p) {
                return refuse("top_p", format!("top_p must be from {min} to 1"));
            }
        }
        if self.top_k.is_some() && thinks {
            return refuse("top_k", "top_k cannot be set with thinking".into());
        }
        if let Some(sequences) = &self.stop_sequences {
            if sequences.iter().any(String::is_empty) {
                return refuse(
                    "stop_sequences",
                    "stop_sequences must be non-empty strings".into(),
                );
            }
        }
        if let Some(stop) = &self.stop {
            if stop.is_empty() || stop.len() > MAX_OPENAI_STOP || stop.iter().any(String::is_empty)
            {
                return refuse(
                    "stop",
                    format!("stop must be 1 to {MAX_OPENAI_STOP} non-empty strings"),
                );
            }
        }
        if let Some(user) = &self.user {
            if user.is_empty() || user.chars().count() > MAX_USER_CHARS {
                return refuse(
                    "user",
                    format!("user must be 1 to {MAX_USER_CHARS} characters"),
                );
            }
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    Anthropic,
    Openai,
}

impl Provider {
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Anthropic => "anthropic",
            Provider::Openai => "openai",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

/// A live piece of a response being streamed: sent to stream listeners as
/// it arrives, never saved (the saved response is the truth).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delta {
    pub kind: DeltaKind,
    pub text: String,
}

/// Named as in the `holdfast_stream` payload's `kind` (absent: `text`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeltaKind {
    /// Answer text (`text_delta`, OpenAI `delta.content`).
    #[default]
    Text,
    /// Extended thinking (`thinking_delta`).
    Thinking,
}

impl DeltaKind {
    /// Its name in the `holdfast_stream` payload.
    pub fn as_str(self) -> &'static str {
        match self {
            DeltaKind::Text => "text",
            DeltaKind::Thinking => "thinking",
        }
    }
}

/// A content block, in the shape saved in `holdfast.messages.content`
/// (Anthropic-shaped; the OpenAI client maps it). A block with a field the
/// typed variants do not have (text with `citations`) or of a type they do
/// not know (`thinking` and `redacted_thinking` with their signatures,
/// `server_tool_use`, `web_search_tool_result`, ...) is [`Raw`]:
/// kept as the provider sent it, so history is never silently altered.
///
/// [`Raw`]: ContentBlock::Raw
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ContentBlock {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    ToolResult {
        tool_use_id: String,
        /// The tool's output: a string, or any JSON (sent as its JSON text).
        content: Value,
        #[serde(default)]
        is_error: bool,
    },
    /// Any other block, verbatim (a JSON object with a `type`): sent back
    /// to Anthropic unchanged; the OpenAI client keeps only its `text`.
    #[serde(untagged)]
    Raw(Value),
}

impl ContentBlock {
    /// The block's text, if it is a text block (typed or raw, e.g. cited).
    pub fn text(&self) -> Option<&str> {
        match self {
            ContentBlock::Text { text } => Some(text),
            ContentBlock::Raw(raw) if raw.get("type").and_then(Value::as_str) == Some("text") => {
                raw.get("text").and_then(Value::as_str)
            }
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<ContentBlock>,
}

/// A tool the model may call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    pub name: String,
    pub description: String,
    /// JSON Schema of the tool's input (an object schema).
    pub input_schema: Value,
}

/// Everything one model call needs, provider-neutral.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelRequest {
    pub model: ModelConfig,
    pub system: Option<String>,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolDefinition>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
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
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A finished model response: text and tool_use blocks, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelResponse {
    pub content: Vec<ContentBlock>,
    /// Normalised: `end_turn`, `tool_use`, `max_tokens`, `stop_sequence`
    /// (OpenAI's `stop` / `tool_calls` / `length` map to these).
    pub stop_reason: Option<String>,
    pub usage: Usage,
}

/// Why a model call failed, classified for the worker.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// Try again later: 429, 529/overloaded, 5xx, timeouts, connection
    /// errors, a stream cut mid-way. `retry_after` is the provider's hint
    /// (Retry-After in seconds or as an HTTP date, or a reset header).
    /// `kind` is one of `rate_limit_error`, `overloaded_error`, `api_error`
    /// (other 5xx, 409, 425), `timeout_error` (408, 504, connect or idle
    /// timeout), `connection_error`, `incomplete_stream_error` (no
    /// `message_stop` / `[DONE]`), `invalid_response_error` (e.g. tool input
    /// that is not JSON), or the type of an error event inside the stream.
    #[error("{kind}: {message}")]
    Retryable {
        kind: String,
        message: String,
        retry_after: Option<Duration>,
    },
    /// The context is too long for the model: compact, do not retry as is.
    /// Recognised by what the error body says, whatever the status (a
    /// gateway may wrap it in a 5xx), and for 413.
    #[error("context too long: {message}")]
    ContextTooLong { message: String },
    /// End the turn now: `authentication_error` (401/403), `billing_error`
    /// (402, and a 429 that is an exhausted quota or spend limit),
    /// `invalid_request_error` (400 and other 4xx, a malformed base URL).
    #[error("{error_type}: {message}")]
    Fatal { error_type: String, message: String },
}
