//! An agent's configuration, typed: the one Rust description of the JSON an
//! agent is created with (`POST /v1/agents`, `holdfast.create_agent`).
//!
//! The API parses every config it is given into [`AgentConfig`] (its
//! OpenAPI schema is derived from these types) and the worker parses the
//! stored config once per step. SQL's `holdfast.validate_config` keeps the
//! same rule for SQL clients — the same fields, the same tool types — and
//! adds what only the database knows (the operator's limit maxima, model
//! permissions); `tests/tests/api/config_rules.rs` holds the two to one rule:
//! whatever SQL stores, the worker can parse.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use strum::{Display, EnumString, IntoStaticStr, VariantArray};
use utoipa::ToSchema;

use crate::domain::ToolKind;

/// An agent's configuration (the body of `POST /v1/agents`; `PATCH` takes a
/// JSON merge patch of it).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    pub model: ModelConfig,
    /// The system prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// The agent's tools, by `type` (tool names unique).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals: Option<ApprovalSettings>,
    /// Free-form; returned as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<LimitSettings>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetSettings>,
}

/// The output limit of a call whose agent sets no `model.max_tokens`
/// (Anthropic requires one in every request).
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

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
    /// OpenAI Chat Completions: up to 4 texts that end the response when
    /// generated (the Responses API has no stop sequences).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Vec<String>>,
    /// OpenAI Chat Completions: best-effort deterministic sampling.
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
    /// OpenAI reasoning models (both APIs): how much to reason before
    /// answering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<ReasoningEffort>,
    /// Whether one response may call several tools (default true): OpenAI
    /// `parallel_tool_calls`, Anthropic `tool_choice.disable_parallel_tool_use`
    /// (sent only when the agent has tools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    /// Whether and which tool the model must call: `auto` (the default),
    /// `any` (some tool), `none`, or `{"type": "tool", "name": ...}`. A
    /// forcing choice (`any`, a named tool) applies to the first model call
    /// of a turn only; later calls of the turn use `auto`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
}

/// `config.model.tool_choice`, one shape for every provider: Anthropic's
/// `tool_choice` types, sent to OpenAI as `auto`, `required`, `none` or the
/// named function.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ToolChoice {
    /// The model decides whether to call tools.
    Auto {},
    /// The model must call at least one tool (OpenAI `required`).
    Any {},
    /// The model must not call a tool.
    None {},
    /// The model must call this tool (by the name it calls it).
    Tool { name: String },
}

impl ToolChoice {
    /// Whether the model is made to call a tool. Forcing every call of a
    /// turn would never let the model answer: each forced call brings a
    /// tool result and another forced call, an endless paid loop. So a
    /// forcing choice applies to a turn's first call only.
    pub fn forces_a_call(&self) -> bool {
        matches!(self, ToolChoice::Any {} | ToolChoice::Tool { .. })
    }
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
    /// No reasoning (the default of gpt-5.1 and later; earlier models refuse it).
    #[serde(rename = "none")]
    NoReasoning,
    Minimal,
    Low,
    Medium,
    High,
    /// More than high (models after gpt-5.1-codex-max).
    Xhigh,
}

/// The longest `model.user`, Anthropic's limit for `metadata.user_id`.
pub const MAX_USER_CHARS: usize = 256;
/// The longest `model.name`: longer than any provider's model names, and a
/// bound on the `model` label of `holdfast_model_tokens_total`, which a
/// tenant chooses.
pub const MAX_MODEL_NAME_CHARS: usize = 256;
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
            tool_choice: None,
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
        let settings: [(&'static str, bool, &[Provider]); 8] = [
            ("thinking", self.thinking.is_some(), ANTHROPIC),
            ("cache", self.cache.is_some(), ANTHROPIC),
            ("top_k", self.top_k.is_some(), ANTHROPIC),
            ("stop_sequences", self.stop_sequences.is_some(), ANTHROPIC),
            ("service_tier", self.service_tier.is_some(), ANTHROPIC),
            // The Responses API has neither stop sequences nor a seed.
            ("stop", self.stop.is_some(), CHAT_COMPLETIONS),
            ("seed", self.seed.is_some(), CHAT_COMPLETIONS),
            ("reasoning_effort", self.reasoning_effort.is_some(), OPENAI),
        ];
        let foreign = settings
            .iter()
            .find(|(_, set, owners)| *set && !owners.contains(&self.provider));
        if let Some((field, _, owners)) = foreign {
            let owner = owners[0];
            return refuse(
                field,
                format!(
                    "{field} is an {} setting (provider \"{}\")",
                    owner.vendor_name(),
                    <&str>::from(owner)
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
        let max_temperature = match self.provider.vendor() {
            Provider::Anthropic => 1.0,
            _ => 2.0,
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
        if let Some(ToolChoice::Tool { name }) = &self.tool_choice {
            if name.is_empty() {
                return refuse(
                    "tool_choice.name",
                    "tool_choice.name must be a tool's name".into(),
                );
            }
        }
        if thinks
            && self
                .tool_choice
                .as_ref()
                .is_some_and(ToolChoice::forces_a_call)
        {
            // Anthropic refuses a forced tool call with extended thinking.
            return refuse(
                "tool_choice",
                "tool_choice any or tool cannot be set with thinking".into(),
            );
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
        if self.name.chars().count() > MAX_MODEL_NAME_CHARS {
            return refuse(
                "name",
                format!("name must be at most {MAX_MODEL_NAME_CHARS} characters"),
            );
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

#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    ToSchema,
    EnumString,
    IntoStaticStr,
    Display,
    VariantArray,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Provider {
    /// The Anthropic Messages API (`/v1/messages`).
    Anthropic,
    /// OpenAI Chat Completions (`/chat/completions`), and the servers
    /// compatible with it.
    Openai,
    /// The OpenAI Responses API (`/responses`): OpenAI's endpoints and keys,
    /// with reasoning items kept (encrypted) across the calls of a turn.
    OpenaiResponses,
}

/// The providers of the Anthropic-only settings.
const ANTHROPIC: &[Provider] = &[Provider::Anthropic];
/// The providers of the Chat Completions-only settings.
const CHAT_COMPLETIONS: &[Provider] = &[Provider::Openai];
/// The providers of the settings both OpenAI APIs take.
const OPENAI: &[Provider] = &[Provider::Openai, Provider::OpenaiResponses];

impl Provider {
    /// Whose endpoints, environment pair and project key the provider's
    /// calls use: OpenAI's for both OpenAI APIs (model endpoints and project
    /// keys are per vendor, `anthropic` or `openai`).
    pub fn vendor(self) -> Provider {
        match self {
            Provider::OpenaiResponses => Provider::Openai,
            other => other,
        }
    }

    /// The vendor's name, for messages.
    fn vendor_name(self) -> &'static str {
        match self.vendor() {
            Provider::Anthropic => "Anthropic",
            _ => "OpenAI",
        }
    }
}

/// One entry of `config.tools`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ToolEntry {
    /// A tool your backend runs: the call waits for its result
    /// (`POST /v1/agents/{id}/tool-calls/{call}/result`).
    Custom {
        /// The name the model calls it by (`^[a-zA-Z0-9_-]{1,64}$`).
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
        /// A JSON Schema for the input (default `{"type": "object"}`);
        /// input that fails it never reaches your backend.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(value_type = Option<Object>)]
        input_schema: Option<Value>,
    },
    /// Fetch a web page as text (the model calls it `web_fetch`).
    WebFetch {},
    /// Search the web through the operator's search backend (the model
    /// calls it `web_search`; the backend and its key are the operator's).
    WebSearch {},
    /// The tools of an MCP server (Streamable HTTP), each called
    /// `<name>__<tool>`.
    Mcp {
        /// The prefix of its tools' names.
        name: String,
        url: String,
        /// Sent with each request (a safe set of names; values shown as `***`).
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        headers: BTreeMap<String, String>,
    },
    /// Ask the user a question and wait for the answer (`ask_user`).
    AskUser {},
    /// Start a subagent and receive its final answer (`spawn_subagent`).
    SpawnSubagent {
        /// The child's config (validated when a child is created); by
        /// default the parent's, without `spawn_subagent`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(value_type = Option<Object>)]
        config: Option<Value>,
    },
    /// Run a shell command on a machine, at most once (`run_command`).
    RunCommand {
        /// The machine's id or name (without one, each call ends with an
        /// error result saying so).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        machine: Option<String>,
        /// Where its commands run on the machine: `machine` (default), the
        /// machine's work directory; `agent`, a directory of this agent's
        /// own under it, which other agents' commands cannot see.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        workspace: Option<CommandWorkspace>,
    },
    /// Anthropic's own web search (`web_search_20250305`), run by Anthropic
    /// inside the model call: the model calls it `web_search`, and its
    /// queries and results come back as blocks of the response, kept as
    /// sent. Anthropic agents only; not with Holdfast's `web_search`.
    AnthropicWebSearch(AnthropicWebSearch),
    /// Anthropic's own web fetch (`web_fetch_20250910`, sent with the
    /// `anthropic-beta: web-fetch-2025-09-10` header), run by Anthropic
    /// inside the model call: the model calls it `web_fetch`. Anthropic
    /// agents only; not with Holdfast's `web_fetch`.
    AnthropicWebFetch(AnthropicWebFetch),
}

/// The settings of Anthropic's web search server tool, named as Anthropic
/// names them (sent as given).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AnthropicWebSearch {
    /// The most searches one model call may make.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub max_uses: Option<u32>,
    /// Only results from these domains (not with `blocked_domains`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_domains: Option<Vec<String>>,
    /// Never results from these domains (not with `allowed_domains`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_domains: Option<Vec<String>>,
    /// Where the user is, to localise results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_location: Option<UserLocation>,
}

/// An approximate location (`{"type": "approximate", ...}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum UserLocation {
    Approximate {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        city: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        region: Option<String>,
        /// An ISO 3166-1 alpha-2 country code.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        country: Option<String>,
        /// An IANA time zone (`America/New_York`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timezone: Option<String>,
    },
}

/// The settings of Anthropic's web fetch server tool, named as Anthropic
/// names them (sent as given).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AnthropicWebFetch {
    /// The most fetches one model call may make.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub max_uses: Option<u32>,
    /// Only pages on these domains (not with `blocked_domains`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_domains: Option<Vec<String>>,
    /// Never pages on these domains (not with `allowed_domains`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_domains: Option<Vec<String>>,
    /// Citations on the text drawn from fetched pages (off by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub citations: Option<CitationSettings>,
    /// The most tokens of one page's content the model is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub max_content_tokens: Option<u32>,
}

/// `{"enabled": true}` turns citations on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CitationSettings {
    pub enabled: bool,
}

impl ToolEntry {
    /// How calls of this tool run; `None` for a tool the provider runs
    /// inside the model call (no call of it is ever committed or run here).
    pub fn kind(&self) -> Option<ToolKind> {
        Some(match self {
            ToolEntry::Custom { .. } => ToolKind::Custom,
            ToolEntry::WebFetch {} | ToolEntry::WebSearch {} | ToolEntry::Mcp { .. } => {
                ToolKind::External
            }
            ToolEntry::AskUser {} => ToolKind::Question,
            ToolEntry::SpawnSubagent { .. } => ToolKind::Internal,
            ToolEntry::RunCommand { .. } => ToolKind::Command,
            ToolEntry::AnthropicWebSearch(_) | ToolEntry::AnthropicWebFetch(_) => return None,
        })
    }

    /// The tool's name in the config: the name given (custom, MCP prefix),
    /// else its type (the name unique among an agent's tools).
    pub fn name(&self) -> &str {
        match self {
            ToolEntry::Custom { name, .. } | ToolEntry::Mcp { name, .. } => name,
            ToolEntry::WebFetch {} | ToolEntry::AnthropicWebFetch(_) => "web_fetch",
            ToolEntry::WebSearch {} | ToolEntry::AnthropicWebSearch(_) => "web_search",
            ToolEntry::AskUser {} => "ask_user",
            ToolEntry::SpawnSubagent { .. } => "spawn_subagent",
            ToolEntry::RunCommand { .. } => "run_command",
        }
    }
}

/// Which tool calls need a person's approval first.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalSettings {
    /// Tool names that need approve/deny before they run.
    #[serde(default)]
    pub require_for: Vec<String>,
}

/// Bounds on a runaway agent. Each defaults to, and may not exceed, the
/// operator's maximum (`HOLDFAST_MAX_<NAME>`); exceeding one ends the turn
/// with `turn.failed` `limit_exceeded` (model steps, tool calls) or refuses
/// the spawn with an error result (subagents). Enforced in SQL.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitSettings {
    /// Model calls one turn may make (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub max_model_steps_per_turn: Option<u32>,
    /// Tool calls one model response may ask for (default 64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub max_tool_calls_per_response: Option<u32>,
    /// Levels of subagents below this agent's tree root (default 4; the
    /// root's setting counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub max_subagent_depth: Option<u32>,
    /// Subagents this agent may have running at once (default 16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub max_live_children: Option<u32>,
    /// Subagents the tree may ever have (default 64; the root's setting
    /// counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub max_descendants: Option<u32>,
}

/// `config.budget`: the most model usage a turn and the agent may reach
/// (tokens: input + output; cost: USD at the operator's prices, so a cost
/// budget counts only priced models). Checked in SQL before each model
/// call: once a sum has reached its maximum, the call is not made and the
/// turn ends with `turn.failed` `budget_exceeded`, or, with `on_exceeded:
/// "ask"`, waits on a budget approval (a turn may pass a maximum by the one
/// call that reached it).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 9999999999_u64)]
    pub max_tokens_per_turn: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 9999999999_u64)]
    pub max_tokens_per_agent: Option<u64>,
    /// USD, more than 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd_per_turn: Option<f64>,
    /// USD, more than 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd_per_agent: Option<f64>,
    /// What reaching a maximum does (default `fail`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_exceeded: Option<BudgetOnExceeded>,
}

/// What a reached budget does to its turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BudgetOnExceeded {
    /// The turn ends `turn.failed` `budget_exceeded`.
    Fail,
    /// The turn waits on an approval of kind `budget` ("continue past the
    /// budget?"): approving allows one more maximum (for a per-turn
    /// budget, in this turn), denying ends the turn `budget_exceeded`.
    Ask,
}

/// A config that does not parse: the field that does not fit and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field}: {message}")]
pub struct InvalidConfig {
    pub field: String,
    pub message: String,
}

impl AgentConfig {
    /// Parse a config; the error names the field that does not fit
    /// (`model.max_tokens`, `tools[2]`, `model.thinking.budget_tokens`).
    pub fn from_value(value: &Value) -> Result<AgentConfig, InvalidConfig> {
        // serde would also read a struct from an array of its fields.
        if !value.is_object() {
            return Err(InvalidConfig {
                field: "config".into(),
                message: "config must be a JSON object".into(),
            });
        }
        let config: AgentConfig = serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            let message = e.into_inner().to_string();
            // A missing field is reported at its parent; name the field
            // itself (serde's message is "missing field `name`").
            let missing = message
                .strip_prefix("missing field `")
                .and_then(|rest| rest.split_once('`'))
                .map(|(name, _)| name);
            let field = match (path.as_str(), missing) {
                (".", Some(name)) => name.to_owned(),
                (".", None) => "config".to_owned(),
                (_, Some(name)) => format!("{path}.{name}"),
                (_, None) => path,
            };
            InvalidConfig { field, message }
        })?;
        config
            .model
            .check()
            .map_err(|(field, message)| InvalidConfig {
                field: format!("model.{field}"),
                message,
            })?;
        Ok(config)
    }

    /// The config as stored JSON.
    pub fn to_value(&self) -> Value {
        // Plain fields and JSON values: serializing cannot fail.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// The tool entry whose calls the model makes by `name` (an MCP entry
    /// answers for `<prefix>__<tool>`), with how such calls run. A tool the
    /// provider runs answers for none: its calls never come back as
    /// `tool_use`.
    pub fn tool_for_call(&self, name: &str) -> Option<(&ToolEntry, ToolKind)> {
        self.tools.iter().find_map(|tool| {
            let kind = tool.kind()?;
            let named = match tool {
                ToolEntry::Mcp { name: prefix, .. } => {
                    split_mcp_tool_name(name).is_some_and(|(p, _)| p == prefix)
                }
                other => other.name() == name,
            };
            named.then_some((tool, kind))
        })
    }

    /// The entries the provider runs inside the model call, in config order.
    pub fn provider_tools(&self) -> Vec<ToolEntry> {
        self.tools
            .iter()
            .filter(|tool| tool.kind().is_none())
            .cloned()
            .collect()
    }
}

/// Between an MCP server's prefix and its tool's name, in the name the
/// model sees.
pub const MCP_NAME_SEPARATOR: &str = "__";

/// The name the model sees for `tool` of the MCP server with prefix `prefix`.
pub fn prefixed_tool_name(prefix: &str, tool: &str) -> String {
    format!("{prefix}{MCP_NAME_SEPARATOR}{tool}")
}

/// `"<prefix>__<tool>"` → `("<prefix>", "<tool>")`; `None` for names
/// without the separator (not an MCP tool). Prefixes never contain `__`,
/// so the first separator is the one.
pub fn split_mcp_tool_name(name: &str) -> Option<(&str, &str)> {
    let (prefix, tool) = name.split_once(MCP_NAME_SEPARATOR)?;
    (!prefix.is_empty() && !tool.is_empty()).then_some((prefix, tool))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn mcp_names_split_at_the_first_separator() {
        assert_eq!(
            split_mcp_tool_name("docs__search"),
            Some(("docs", "search"))
        );
        assert_eq!(
            split_mcp_tool_name("docs__deep__name"),
            Some(("docs", "deep__name"))
        );
        assert_eq!(split_mcp_tool_name("web_fetch"), None);
        assert_eq!(split_mcp_tool_name("__x"), None);
    }

    #[test]
    fn every_tool_type_parses_and_round_trips() {
        let config = json!({
            "model": {"provider": "anthropic", "name": "m", "max_tokens": 10},
            "system": "s",
            "tools": [
                {"type": "custom", "name": "lookup", "input_schema": {"type": "object"}},
                {"type": "web_fetch"},
                {"type": "web_search"},
                {"type": "mcp", "name": "docs", "url": "https://d.example/mcp", "headers": {"Authorization": "x"}},
                {"type": "ask_user"},
                {"type": "spawn_subagent"},
                {"type": "run_command", "machine": "m1"}
            ],
            "approvals": {"require_for": ["lookup"]},
            "metadata": {"team": "a"},
            "limits": {"max_descendants": 3}
        });
        let parsed = AgentConfig::from_value(&config).unwrap();
        assert_eq!(parsed.to_value(), config);
        let kinds: Vec<ToolKind> = parsed.tools.iter().filter_map(ToolEntry::kind).collect();
        assert_eq!(
            kinds,
            [
                ToolKind::Custom,
                ToolKind::External,
                ToolKind::External,
                ToolKind::External,
                ToolKind::Question,
                ToolKind::Internal,
                ToolKind::Command
            ]
        );
        assert_eq!(
            parsed.tool_for_call("docs__search").map(|(t, _)| t.name()),
            Some("docs")
        );
        assert_eq!(
            parsed.tool_for_call("web_fetch").map(|(_, kind)| kind),
            Some(ToolKind::External)
        );
        assert!(parsed.tool_for_call("docs").is_none());
        assert!(parsed.tool_for_call("nope").is_none());
    }

    #[test]
    fn tools_the_provider_runs_are_sent_but_never_called_here() {
        let config = AgentConfig::from_value(&json!({
            "model": {"provider": "anthropic", "name": "m"},
            "tools": [
                {"type": "anthropic_web_search", "max_uses": 2,
                 "user_location": {"type": "approximate", "country": "CH"}},
                {"type": "custom", "name": "lookup"},
                {"type": "anthropic_web_fetch", "citations": {"enabled": false}}
            ]
        }))
        .unwrap();
        let names: Vec<&str> = config.tools.iter().map(ToolEntry::name).collect();
        assert_eq!(names, ["web_search", "lookup", "web_fetch"]);
        let provider_tools: Vec<String> = config
            .provider_tools()
            .iter()
            .map(|t| t.name().to_owned())
            .collect();
        assert_eq!(provider_tools, ["web_search", "web_fetch"]);
        assert!(config.tool_for_call("web_search").is_none());
        assert!(config.tool_for_call("web_fetch").is_none());
        assert_eq!(
            config.tool_for_call("lookup").map(|(_, kind)| kind),
            Some(ToolKind::Custom)
        );
    }

    #[test]
    fn a_field_the_config_does_not_have_is_named() {
        for (config, field) in [
            (
                json!({"model": {"provider": "openai", "name": "x"}, "temperature": 1}),
                "temperature",
            ),
            (
                json!({"model": {"provider": "openai", "name": "x", "temprature": 1}}),
                "model.temprature",
            ),
            (
                json!({"model": {"provider": "openai", "name": "x"}, "limits": {"max_steps": 1}}),
                "limits.max_steps",
            ),
            (
                json!({"model": {"provider": "openai", "name": "x"}, "tools": [{"type": "web_fetch"}, {"type": "custom", "name": "a", "url": "u"}]}),
                "tools[1]",
            ),
            (
                json!({"model": {"provider": "openai", "name": "x"}, "tools": [{"type": "search"}]}),
                "tools[0]",
            ),
            (
                json!({"model": {"provider": "openai", "name": "x", "max_tokens": 1.0}}),
                "model.max_tokens",
            ),
            (json!({"model": "gpt"}), "model"),
            (json!([]), "config"),
        ] {
            match AgentConfig::from_value(&config) {
                Err(InvalidConfig {
                    field: named,
                    message,
                }) => {
                    assert!(named.starts_with(field), "{config}: {named} ({message})");
                }
                other => panic!("{config}: {other:?}"),
            }
        }
    }
}

/// Where a `run_command` tool's commands run on the machine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CommandWorkspace {
    /// The machine's work directory, shared by every agent using it.
    #[default]
    Machine,
    /// `<work directory>/agent-workspaces/<agent id>`, this agent's alone.
    Agent,
}
