//! The Anthropic Messages API: `POST {base}/v1/messages` with
//! `stream: true`, headers `x-api-key` and `anthropic-version: 2023-06-01`.
//!
//! The stream is a sequence of named SSE events: `message_start` (the
//! message with empty content and the input usage), then per content block
//! `content_block_start` / `content_block_delta`s / `content_block_stop`
//! (deltas are `text_delta` for text and `input_json_delta` for tool input,
//! whose `partial_json` fragments only parse once the block stops), then
//! `message_delta` (stop_reason, cumulative output usage) and
//! `message_stop`. `ping` may come at any time; an `error` event (e.g.
//! `overloaded_error`) can end the stream early.
//!
//! Prompt caching (unless the agent's `model.cache` is false) marks
//! `cache_control` breakpoints on the last tool, the system prompt (sent as
//! a text block for it) and the latest message; the usage reports
//! `cache_read_input_tokens` and `cache_creation_input_tokens` beside the
//! uncached `input_tokens`, all three counted in [`Usage::input_tokens`].
//!
//! Extended thinking (`thinking` in the request) streams `thinking` blocks —
//! `thinking_delta`s, then one `signature_delta` — and `redacted_thinking`
//! blocks whole in their `content_block_start` (`data`); both are kept raw
//! below, and the thinking text is also forwarded live as
//! [`DeltaKind::Thinking`].
//!
//! Blocks Holdfast does not interpret — the server tools' `server_tool_use`
//! and `web_search_tool_result`, text with `citations` (`citations_delta`),
//! and any type added later — are saved as [`ContentBlock::Raw`], exactly as
//! streamed, and sent back unchanged in later requests.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};
use tokio::sync::mpsc::UnboundedSender;

use super::classify::{classify_stream_error, incomplete_stream, invalid_response};
use super::client::{
    answering_model, event_data, event_type, forward, insert_if_set, StreamAssembler,
};
use super::history::{normalise, tool_result_text};
use super::{
    media_blocks, ContentBlock, Delta, DeltaKind, ModelError, ModelRequest, ModelResponse, Role,
    Usage,
};
use holdfast_outbound::sse::SseEvent;
use holdfast_wire::config::{ModelConfig, ToolChoice, ToolEntry};

pub(crate) const API_VERSION: &str = "2023-06-01";

/// The request body.
pub(crate) fn request_body(request: &ModelRequest) -> Value {
    let messages: Vec<Value> = normalise(&request.messages)
        .iter()
        .map(|message| {
            json!({
                "role": match message.role {
                    Role::User => "user",
                    Role::Assistant => "assistant",
                },
                "content": message.content.iter().map(block).collect::<Vec<_>>(),
            })
        })
        .collect();
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model.name));
    body.insert("max_tokens".into(), json!(request.model.output_limit()));
    let model = &request.model;
    // The config's shape is the API's: `{"type": "enabled", "budget_tokens": n}`.
    insert_if_set(&mut body, "thinking", &model.thinking);
    insert_if_set(&mut body, "temperature", &model.temperature);
    insert_if_set(&mut body, "top_p", &model.top_p);
    insert_if_set(&mut body, "top_k", &model.top_k);
    insert_if_set(&mut body, "stop_sequences", &model.stop_sequences);
    insert_if_set(&mut body, "service_tier", &model.service_tier);
    if let Some(user) = &model.user {
        body.insert("metadata".into(), json!({"user_id": user}));
    }
    let caching = request.model.caches_prompt();
    if let Some(system) = request.system.as_deref().filter(|s| !s.is_empty()) {
        let system = if caching {
            // A breakpoint needs the block form of the system prompt.
            json!([{"type": "text", "text": system, "cache_control": cache_breakpoint()}])
        } else {
            json!(system)
        };
        body.insert("system".into(), system);
    }
    body.insert("messages".into(), Value::Array(messages));
    let tools: Vec<Value> = request
        .tools
        .iter()
        .map(|t| {
            json!({
                "name": t.name,
                "description": t.description,
                "input_schema": t.input_schema,
            })
        })
        .chain(request.provider_tools.iter().filter_map(server_tool))
        .collect();
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
        if let Some(choice) = tool_choice(model) {
            body.insert("tool_choice".into(), choice);
        }
    }
    if caching {
        mark_cache_breakpoints(&mut body);
    }
    body.insert("stream".into(), json!(true));
    Value::Object(body)
}

/// `tool_choice` as the Messages API takes it: the config's shape is the
/// API's, and `parallel_tool_calls: false` is its
/// `disable_parallel_tool_use` (which `none` does not take).
fn tool_choice(model: &ModelConfig) -> Option<Value> {
    let serial = model.parallel_tool_calls == Some(false);
    let mut choice = match &model.tool_choice {
        Some(choice) => json!(choice),
        None if serial => json!({"type": "auto"}),
        None => return None,
    };
    if serial && model.tool_choice != Some(ToolChoice::None {}) {
        choice["disable_parallel_tool_use"] = json!(true);
    }
    Some(choice)
}

/// A prompt-cache breakpoint: the prompt up to the block carrying it is
/// cached (for 5 minutes, refreshed by each read).
fn cache_breakpoint() -> Value {
    json!({"type": "ephemeral"})
}

/// Breakpoints where Anthropic's prompt caching documents them for a
/// growing conversation: on the last tool (all tool definitions cached), on
/// the system prompt (set where it is built) and on the last block of the
/// latest message that may carry one (thinking blocks may not), so the next
/// step reads this whole prompt from the cache. Three of the four a request
/// may have. Only the wire body changes, never the saved history.
fn mark_cache_breakpoints(body: &mut Map<String, Value>) {
    let last_tool = body
        .get_mut("tools")
        .and_then(Value::as_array_mut)
        .and_then(|tools| tools.last_mut())
        .and_then(Value::as_object_mut);
    if let Some(tool) = last_tool {
        tool.insert("cache_control".into(), cache_breakpoint());
    }
    let latest = body
        .get_mut("messages")
        .and_then(Value::as_array_mut)
        .and_then(|messages| messages.last_mut())
        .and_then(|message| message.get_mut("content"))
        .and_then(Value::as_array_mut);
    let cacheable = latest
        .into_iter()
        .flatten()
        .rev()
        .filter_map(Value::as_object_mut)
        .find(|block| {
            !matches!(
                block.get("type").and_then(Value::as_str),
                Some("thinking" | "redacted_thinking")
            )
        });
    if let Some(block) = cacheable {
        block.insert("cache_control".into(), cache_breakpoint());
    }
}

/// The beta web fetch needs: `anthropic-beta: web-fetch-2025-09-10`.
const WEB_FETCH_BETA: &str = "web-fetch-2025-09-10";

/// The `anthropic-beta` header `request` needs, if any.
pub(crate) fn beta_header(request: &ModelRequest) -> Option<&'static str> {
    request
        .provider_tools
        .iter()
        .any(|tool| matches!(tool, ToolEntry::AnthropicWebFetch(_)))
        .then_some(WEB_FETCH_BETA)
}

/// A server tool's entry in `tools`: its versioned type, the name the model
/// calls it by, and its settings as configured (their names are
/// Anthropic's).
fn server_tool(tool: &ToolEntry) -> Option<Value> {
    let (settings, tool_type) = match tool {
        ToolEntry::AnthropicWebSearch(settings) => (json!(settings), "web_search_20250305"),
        ToolEntry::AnthropicWebFetch(settings) => (json!(settings), "web_fetch_20250910"),
        _ => return None,
    };
    let mut entry = json!({"type": tool_type, "name": tool.name()});
    if let (Some(entry), Value::Object(settings)) = (entry.as_object_mut(), settings) {
        entry.extend(settings);
    }
    Some(entry)
}

fn block(block: &ContentBlock) -> Value {
    match block {
        ContentBlock::Text { text } => json!({"type": "text", "text": text}),
        ContentBlock::ToolUse { id, name, input } => {
            json!({"type": "tool_use", "id": id, "name": name, "input": input})
        }
        ContentBlock::ToolResult {
            tool_use_id,
            content,
            is_error,
        } => {
            // Images and documents go as the result's own blocks, which
            // the Messages API takes in a tool_result.
            let content = match media_blocks(content) {
                Some(blocks) => Value::Array(blocks.iter().map(self::block).collect()),
                None => json!(tool_result_text(content)),
            };
            let mut result = json!({
                "type": "tool_result",
                "tool_use_id": tool_use_id,
                "content": content,
            });
            if *is_error {
                result["is_error"] = json!(true);
            }
            result
        }
        // The saved shape is the Messages API's own, a stored file's
        // reference aside.
        ContentBlock::Image { source } => {
            json!({"type": "image", "source": source.anthropic_source()})
        }
        ContentBlock::Document { source } => {
            json!({"type": "document", "source": source.anthropic_source()})
        }
        ContentBlock::Raw(raw) => raw.clone(),
    }
}

enum Block {
    Text {
        text: String,
        /// From `citations_delta`s: a cited text block is kept raw.
        citations: Vec<Value>,
    },
    ToolUse {
        id: String,
        name: String,
        json: String,
        input: Option<Value>,
    },
    /// Any other block type (`server_tool_use`, `web_search_tool_result`,
    /// thinking, ...): the `content_block_start` object, with the deltas
    /// Holdfast knows applied to it (`input_json_delta` into `input`, text,
    /// thinking and signature deltas appended), kept verbatim.
    Raw { block: Value, json: String },
}

/// Assembles the streamed events into a [`ModelResponse`].
#[derive(Default)]
pub(crate) struct AnthropicStream {
    blocks: BTreeMap<u64, Block>,
    stop_reason: Option<String>,
    usage: Usage,
    model: Option<String>,
    complete: bool,
}

/// Input tokens as the whole prompt: uncached plus cache reads and writes.
fn input_tokens(usage: &Value) -> Option<u64> {
    let field = |name: &str| usage.get(name).and_then(Value::as_u64);
    let base = field("input_tokens")?;
    Some(
        base + field("cache_creation_input_tokens").unwrap_or(0)
            + field("cache_read_input_tokens").unwrap_or(0),
    )
}

impl AnthropicStream {
    /// The cache reads and writes of a usage object that has the input
    /// counts (`message_start`, or a `message_delta` that repeats them).
    fn cache_usage(&mut self, usage: &Value) {
        let field = |name: &str| usage.get(name).and_then(Value::as_u64).unwrap_or(0);
        self.usage.cache_read_tokens = field("cache_read_input_tokens");
        self.usage.cache_write_tokens = field("cache_creation_input_tokens");
    }
}

fn index(data: &Value) -> Result<u64, ModelError> {
    data.get("index")
        .and_then(Value::as_u64)
        .ok_or_else(|| invalid_response(format!("event without an index: {data}")))
}

impl StreamAssembler for AnthropicStream {
    fn event(
        &mut self,
        event: SseEvent,
        deltas: Option<&UnboundedSender<Delta>>,
    ) -> Result<bool, ModelError> {
        let data = event_data(&event)?;
        let kind = event_type(&data, &event);
        match kind {
            "message_start" => {
                self.model = answering_model(data.pointer("/message/model"));
                if let Some(usage) = data.pointer("/message/usage") {
                    self.usage.input_tokens = input_tokens(usage).unwrap_or(0);
                    self.usage.output_tokens = usage
                        .get("output_tokens")
                        .and_then(Value::as_u64)
                        .unwrap_or(0);
                    self.cache_usage(usage);
                }
            }
            "content_block_start" => {
                let index = index(&data)?;
                let start = data.get("content_block").unwrap_or(&Value::Null);
                let text = |field: &str| {
                    start
                        .get(field)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                let block = match start.get("type").and_then(Value::as_str) {
                    Some("text") => Block::Text {
                        text: text("text"),
                        citations: start
                            .get("citations")
                            .and_then(Value::as_array)
                            .cloned()
                            .unwrap_or_default(),
                    },
                    Some("tool_use") => Block::ToolUse {
                        id: text("id"),
                        name: text("name"),
                        json: String::new(),
                        input: None,
                    },
                    _ => Block::Raw {
                        block: start.clone(),
                        json: String::new(),
                    },
                };
                self.blocks.insert(index, block);
            }
            "content_block_delta" => {
                let index = index(&data)?;
                let delta = data.get("delta").unwrap_or(&Value::Null);
                match (
                    self.blocks.get_mut(&index),
                    delta.get("type").and_then(Value::as_str),
                ) {
                    (Some(Block::Text { text, .. }), Some("text_delta")) => {
                        let piece = delta.get("text").and_then(Value::as_str).unwrap_or("");
                        text.push_str(piece);
                        forward(deltas, DeltaKind::Text, piece);
                    }
                    (Some(Block::Text { citations, .. }), Some("citations_delta")) => {
                        if let Some(citation) = delta.get("citation") {
                            citations.push(citation.clone());
                        }
                    }
                    (
                        Some(Block::ToolUse { json, .. } | Block::Raw { json, .. }),
                        Some("input_json_delta"),
                    ) => {
                        json.push_str(
                            delta
                                .get("partial_json")
                                .and_then(Value::as_str)
                                .unwrap_or(""),
                        );
                    }
                    (Some(Block::Raw { block, .. }), Some(kind)) => {
                        raw_delta(block, kind, delta);
                        if kind == "thinking_delta" {
                            let piece = delta.get("thinking").and_then(Value::as_str);
                            forward(deltas, DeltaKind::Thinking, piece.unwrap_or(""));
                        }
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                let index = index(&data)?;
                match self.blocks.get_mut(&index) {
                    Some(Block::ToolUse { json, input, .. }) => {
                        *input = Some(parse_tool_input(json)?);
                    }
                    Some(Block::Raw { block, json }) if !json.is_empty() => {
                        block["input"] = parse_tool_input(json)?;
                        json.clear();
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(reason.to_owned());
                }
                if let Some(usage) = data.get("usage") {
                    if let Some(output) = usage.get("output_tokens").and_then(Value::as_u64) {
                        self.usage.output_tokens = output;
                    }
                    if let Some(input) = input_tokens(usage) {
                        self.usage.input_tokens = input;
                        self.cache_usage(usage);
                    }
                    // Cumulative like output_tokens: `{"web_search_requests": n, ...}`.
                    if let Some(counts) = usage.get("server_tool_use").and_then(Value::as_object) {
                        self.usage.server_tool_requests =
                            counts.values().filter_map(Value::as_u64).sum();
                        self.usage.web_search_requests = counts
                            .get("web_search_requests")
                            .and_then(Value::as_u64)
                            .unwrap_or(0);
                    }
                }
            }
            "message_stop" => {
                self.complete = true;
                return Ok(true);
            }
            "error" => {
                return Err(classify_stream_error(
                    data.get("error").unwrap_or(&Value::Null),
                ))
            }
            _ => {} // ping, and event types added after this was written
        }
        Ok(false)
    }

    fn finish(self) -> Result<ModelResponse, ModelError> {
        if !self.complete {
            return Err(incomplete_stream("message_stop"));
        }
        let mut content = Vec::new();
        for block in self.blocks.into_values() {
            match block {
                Block::Text { text, citations } if !citations.is_empty() => {
                    content.push(ContentBlock::Raw(
                        json!({"type": "text", "text": text, "citations": citations}),
                    ));
                }
                Block::Text { text, .. } if !text.is_empty() => {
                    content.push(ContentBlock::Text { text })
                }
                Block::ToolUse {
                    id,
                    name,
                    json,
                    input,
                } => {
                    let input = match input {
                        Some(input) => input,
                        None => parse_tool_input(&json)?,
                    };
                    content.push(ContentBlock::ToolUse { id, name, input });
                }
                Block::Raw { mut block, json } => {
                    if !json.is_empty() {
                        block["input"] = parse_tool_input(&json)?;
                    }
                    content.push(ContentBlock::Raw(block));
                }
                Block::Text { .. } => {}
            }
        }
        Ok(ModelResponse {
            content,
            stop_reason: self.stop_reason,
            usage: self.usage,
            model: self.model,
        })
    }
}

/// A delta of a block kept raw: text, thinking and signature deltas build
/// their field as the API documents (citations come only on text blocks); other delta types are not known here
/// and leave the block as it started.
fn raw_delta(block: &mut Value, kind: &str, delta: &Value) {
    let (field, piece) = match kind {
        "text_delta" => ("text", "text"),
        "thinking_delta" => ("thinking", "thinking"),
        "signature_delta" => ("signature", "signature"),
        _ => return,
    };
    let Some(piece) = delta.get(piece).and_then(Value::as_str) else {
        return;
    };
    if let Some(object) = block.as_object_mut() {
        let current = object
            .get(field)
            .and_then(Value::as_str)
            .unwrap_or_default();
        let joined = format!("{current}{piece}");
        object.insert(field.into(), Value::String(joined));
    }
}

/// A tool's accumulated input JSON; no fragments at all means `{}`.
pub(crate) fn parse_tool_input(json: &str) -> Result<Value, ModelError> {
    if json.trim().is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_str(json)
        .map_err(|e| invalid_response(format!("tool input is not valid JSON ({e}): {json}")))
}
