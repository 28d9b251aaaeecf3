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

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};
use tokio::sync::mpsc::UnboundedSender;

use super::classify::{classify_stream_error, incomplete_stream, invalid_response};
use super::client::StreamAssembler;
use super::history::{normalise, tool_result_text};
use super::{ContentBlock, ModelError, ModelRequest, ModelResponse, Role, Usage};
use crate::sse::SseEvent;

pub(crate) const API_VERSION: &str = "2023-06-01";

/// Anthropic requires `max_tokens`; this is used when the agent sets none.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

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
    body.insert(
        "max_tokens".into(),
        json!(request.model.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)),
    );
    if let Some(system) = request.system.as_deref().filter(|s| !s.is_empty()) {
        body.insert("system".into(), json!(system));
    }
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
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
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    body.insert("stream".into(), json!(true));
    Value::Object(body)
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
            let mut result = json!({
                "type": "tool_result",
                "tool_use_id": tool_use_id,
                "content": tool_result_text(content),
            });
            if *is_error {
                result["is_error"] = json!(true);
            }
            result
        }
    }
}

enum Block {
    Text(String),
    ToolUse {
        id: String,
        name: String,
        json: String,
        input: Option<Value>,
    },
    /// Block types Holdfast does not keep (thinking, server tools, ...).
    Ignored,
}

/// Assembles the streamed events into a [`ModelResponse`].
#[derive(Default)]
pub(crate) struct AnthropicStream {
    blocks: BTreeMap<u64, Block>,
    stop_reason: Option<String>,
    usage: Usage,
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

fn index(data: &Value) -> Result<u64, ModelError> {
    data.get("index")
        .and_then(Value::as_u64)
        .ok_or_else(|| invalid_response(format!("event without an index: {data}")))
}

impl StreamAssembler for AnthropicStream {
    fn event(
        &mut self,
        event: SseEvent,
        deltas: Option<&UnboundedSender<String>>,
    ) -> Result<bool, ModelError> {
        let data: Value = serde_json::from_str(&event.data)
            .map_err(|e| invalid_response(format!("event {:?} is not JSON: {e}", event.event)))?;
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .or(event.event.as_deref())
            .unwrap_or_default();
        match kind {
            "message_start" => {
                if let Some(usage) = data.pointer("/message/usage") {
                    self.usage.input_tokens = input_tokens(usage).unwrap_or(0);
                    self.usage.output_tokens = usage
                        .get("output_tokens")
                        .and_then(Value::as_u64)
                        .unwrap_or(0);
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
                    Some("text") => Block::Text(text("text")),
                    Some("tool_use") => Block::ToolUse {
                        id: text("id"),
                        name: text("name"),
                        json: String::new(),
                        input: None,
                    },
                    _ => Block::Ignored,
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
                    (Some(Block::Text(text)), Some("text_delta")) => {
                        let piece = delta.get("text").and_then(Value::as_str).unwrap_or("");
                        text.push_str(piece);
                        if let (Some(tx), false) = (deltas, piece.is_empty()) {
                            // A receiver gone away only means nobody watches live.
                            let _ = tx.send(piece.to_owned());
                        }
                    }
                    (Some(Block::ToolUse { json, .. }), Some("input_json_delta")) => {
                        json.push_str(
                            delta
                                .get("partial_json")
                                .and_then(Value::as_str)
                                .unwrap_or(""),
                        );
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                let index = index(&data)?;
                if let Some(Block::ToolUse { json, input, .. }) = self.blocks.get_mut(&index) {
                    *input = Some(parse_tool_input(json)?);
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
                Block::Text(text) if !text.is_empty() => content.push(ContentBlock::Text { text }),
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
                _ => {}
            }
        }
        Ok(ModelResponse {
            content,
            stop_reason: self.stop_reason,
            usage: self.usage,
        })
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
