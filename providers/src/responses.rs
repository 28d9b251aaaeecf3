//! The OpenAI Responses API: `POST {base}/responses` (the base of
//! `OPENAI_BASE_URL`, with its `/v1`) with `Authorization: Bearer`,
//! `stream: true`, `store: false` (Holdfast keeps the history; OpenAI keeps
//! nothing) and `include: ["reasoning.encrypted_content"]`.
//!
//! The request's `input` is a list of items: user and assistant `message`s
//! (`input_text` / `output_text` parts), the model's `function_call`s and
//! each tool result as a `function_call_output` answering its `call_id`,
//! and the model's `reasoning` items. The system prompt is `instructions`.
//!
//! The stream is named SSE events (`event: X` and `data: {"type": "X",
//! "sequence_number": n, ...}`), with no `[DONE]`: `response.created`,
//! `response.in_progress`, then per output item `response.output_item.added`,
//! its deltas (`response.output_text.delta`,
//! `response.reasoning_summary_text.delta`,
//! `response.function_call_arguments.delta`, ...) and
//! `response.output_item.done` carrying the whole item; the stream ends
//! with `response.completed` (or `response.incomplete`, e.g. at
//! `max_output_tokens`), whose `response.usage` has `input_tokens`,
//! `output_tokens` and, in `input_tokens_details` / `output_tokens_details`,
//! the `cached_tokens` and `reasoning_tokens` among them. A failure mid-way
//! is `response.failed` (`response.error: {code, message}`) or an `error`
//! event (`code`, `message`).
//!
//! A reasoning model's `reasoning` item (its summary, and with `store:
//! false` its reasoning as `encrypted_content`) is saved whole as
//! [`ContentBlock::Raw`] and sent back verbatim in the next requests: that
//! is how the model keeps its reasoning across the tool calls of a turn.
//! Any other item type Holdfast does not interpret is saved the same way
//! (the history is the truth), but only its text is sent back.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};
use tokio::sync::mpsc::UnboundedSender;

use super::anthropic::parse_tool_input;
use super::classify::{incomplete_stream, invalid_response, says_context_too_long, truncate};
use super::client::{
    answering_model, event_data, event_type, forward, insert_if_set, StreamAssembler,
};
use super::history::{normalise, tool_output_text};
use super::openai::{tool_choice, DOCUMENT_FILENAME};
use super::{
    media_blocks, ContentBlock, Delta, DeltaKind, MediaSource, ModelError, ModelRequest,
    ModelResponse, Role, Usage,
};
use holdfast_outbound::sse::SseEvent;

/// The request body.
pub(crate) fn request_body(request: &ModelRequest) -> Value {
    let mut input = Vec::new();
    for message in normalise(&request.messages) {
        match message.role {
            Role::User => {
                let mut parts = Vec::new();
                for block in &message.content {
                    match block {
                        ContentBlock::ToolResult {
                            tool_use_id,
                            content,
                            is_error,
                        } => {
                            // Images and documents: the output as a list
                            // of input parts, which function_call_output takes.
                            let output = match media_blocks(content) {
                                Some(blocks) => {
                                    let error = is_error
                                        .then(|| json!({"type": "input_text", "text": "Error:"}));
                                    Value::Array(
                                        error
                                            .into_iter()
                                            .chain(blocks.iter().filter_map(input_part))
                                            .collect(),
                                    )
                                }
                                None => json!(tool_output_text(content, *is_error)),
                            };
                            input.push(json!({
                                "type": "function_call_output",
                                "call_id": tool_use_id,
                                "output": output,
                            }));
                        }
                        other => parts.extend(input_part(other)),
                    }
                }
                if !parts.is_empty() {
                    input.push(json!({"type": "message", "role": "user", "content": parts}));
                }
            }
            Role::Assistant => {
                // Items in the order the model produced them: a reasoning
                // item must come right before the call or message it led to.
                for block in &message.content {
                    match block {
                        ContentBlock::ToolUse {
                            id,
                            name,
                            input: arguments,
                        } => {
                            input.push(json!({
                                "type": "function_call",
                                "call_id": id,
                                "name": name,
                                "arguments": arguments.to_string(),
                            }));
                        }
                        ContentBlock::Raw(item) if is_reasoning(item) => input.push(item.clone()),
                        other => {
                            if let Some(text) = other.text() {
                                input.push(json!({
                                    "type": "message",
                                    "role": "assistant",
                                    "content": [{"type": "output_text", "text": text}],
                                }));
                            }
                        }
                    }
                }
            }
        }
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model.name));
    if let Some(system) = request.system.as_deref().filter(|s| !s.is_empty()) {
        body.insert("instructions".into(), json!(system));
    }
    body.insert("input".into(), Value::Array(input));
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.input_schema,
                    // Strict mode needs every schema closed and fully
                    // required; tool schemas here are any JSON Schema.
                    "strict": false,
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        // OpenAI refuses `parallel_tool_calls` in a request without tools.
        insert_if_set(
            &mut body,
            "parallel_tool_calls",
            &request.model.parallel_tool_calls,
        );
        if let Some(choice) = &request.model.tool_choice {
            let named = |name: &str| json!({"type": "function", "name": name});
            body.insert("tool_choice".into(), tool_choice(choice, named));
        }
    }
    let model = &request.model;
    insert_if_set(&mut body, "temperature", &model.temperature);
    insert_if_set(&mut body, "top_p", &model.top_p);
    insert_if_set(&mut body, "user", &model.user);
    insert_if_set(&mut body, "max_output_tokens", &model.max_tokens);
    if let Some(effort) = model.reasoning_effort {
        // `summary: auto` makes the model write reasoning summaries, which
        // stream live as thinking deltas.
        body.insert(
            "reasoning".into(),
            json!({"effort": effort, "summary": "auto"}),
        );
    }
    body.insert("store".into(), json!(false));
    body.insert("include".into(), json!(["reasoning.encrypted_content"]));
    body.insert("stream".into(), json!(true));
    Value::Object(body)
}

/// A user block as a Responses input part: `input_text`, `input_image` (a
/// URL or a `data:` URL) or `input_file` (a PDF as a `data:` URL, or its
/// URL); `None` for a block with nothing to send.
fn input_part(block: &ContentBlock) -> Option<Value> {
    match block {
        ContentBlock::Image { source } => Some(json!({
            "type": "input_image", "image_url": source.url(), "detail": "auto",
        })),
        ContentBlock::Document {
            source: MediaSource::Url { url },
        } => Some(json!({"type": "input_file", "file_url": url})),
        ContentBlock::Document { source } => Some(json!({
            "type": "input_file", "filename": DOCUMENT_FILENAME, "file_data": source.url(),
        })),
        other => other
            .text()
            .map(|text| json!({"type": "input_text", "text": text})),
    }
}

/// A saved `reasoning` item, sent back as it came. Other raw blocks (an
/// Anthropic block after a provider switch, an item type this client does
/// not interpret) are sent as their text, if any.
fn is_reasoning(raw: &Value) -> bool {
    raw.get("type").and_then(Value::as_str) == Some("reasoning")
}

/// Assembles the streamed events into a [`ModelResponse`]: each output item
/// as `response.output_item.done` gives it, by `output_index`.
#[derive(Default)]
pub(crate) struct ResponsesStream {
    items: BTreeMap<u64, Value>,
    stop_reason: Option<String>,
    usage: Usage,
    model: Option<String>,
    complete: bool,
}

impl StreamAssembler for ResponsesStream {
    fn event(
        &mut self,
        event: SseEvent,
        deltas: Option<&UnboundedSender<Delta>>,
    ) -> Result<bool, ModelError> {
        let data = event_data(&event)?;
        let kind = event_type(&data, &event);
        let text = |field: &str| data.get(field).and_then(Value::as_str).unwrap_or("");
        match kind {
            "response.output_text.delta" => forward(deltas, DeltaKind::Text, text("delta")),
            "response.reasoning_summary_text.delta" => {
                forward(deltas, DeltaKind::Thinking, text("delta"))
            }
            "response.output_item.done" => {
                let index = data
                    .get("output_index")
                    .and_then(Value::as_u64)
                    .ok_or_else(|| invalid_response(format!("item without an index: {data}")))?;
                let item = data.get("item").filter(|i| i.is_object()).ok_or_else(|| {
                    invalid_response(format!("output_item.done without an item: {data}"))
                })?;
                self.items.insert(index, item.clone());
            }
            "response.completed" | "response.incomplete" => {
                let response = data.get("response").unwrap_or(&Value::Null);
                self.model = answering_model(response.get("model"));
                if let Some(usage) = response.get("usage").filter(|u| u.is_object()) {
                    let count = |pointer: &str| usage.pointer(pointer).and_then(Value::as_u64);
                    self.usage = Usage {
                        input_tokens: count("/input_tokens").unwrap_or(0),
                        output_tokens: count("/output_tokens").unwrap_or(0),
                        // OpenAI caches long prompts by itself and reports the hits.
                        cache_read_tokens: count("/input_tokens_details/cached_tokens")
                            .unwrap_or(0),
                        reasoning_tokens: count("/output_tokens_details/reasoning_tokens")
                            .unwrap_or(0),
                        ..Usage::default()
                    };
                }
                if kind == "response.incomplete" {
                    let reason = response
                        .pointer("/incomplete_details/reason")
                        .and_then(Value::as_str);
                    self.stop_reason = Some(match reason {
                        Some("max_output_tokens") | None => "max_tokens".to_owned(),
                        Some(other) => other.to_owned(),
                    });
                }
                self.complete = true;
                return Ok(true);
            }
            "response.failed" => {
                let error = data.pointer("/response/error").unwrap_or(&Value::Null);
                return Err(failure(error));
            }
            "error" => return Err(failure(&data)),
            _ => {} // the other deltas and `.done`s: the item's done event has it all
        }
        Ok(false)
    }

    fn finish(self) -> Result<ModelResponse, ModelError> {
        if !self.complete {
            return Err(incomplete_stream("response.completed"));
        }
        let mut content = Vec::new();
        for item in self.items.into_values() {
            match item.get("type").and_then(Value::as_str) {
                Some("message") => {
                    // `output_text` parts, or a `refusal` part saying why not.
                    let parts = item.get("content").and_then(Value::as_array);
                    let text: String = parts
                        .into_iter()
                        .flatten()
                        .filter_map(|part| {
                            part.get("text")
                                .or_else(|| part.get("refusal"))
                                .and_then(Value::as_str)
                        })
                        .collect();
                    if !text.is_empty() {
                        content.push(ContentBlock::Text { text });
                    }
                }
                Some("function_call") => {
                    let field = |name: &str| item.get(name).and_then(Value::as_str);
                    let (Some(call_id), Some(name)) = (field("call_id"), field("name")) else {
                        return Err(invalid_response(format!(
                            "function_call without call_id or name: {item}"
                        )));
                    };
                    content.push(ContentBlock::ToolUse {
                        id: call_id.to_owned(),
                        name: name.to_owned(),
                        input: parse_tool_input(field("arguments").unwrap_or(""))?,
                    });
                }
                _ => content.push(ContentBlock::Raw(item)),
            }
        }
        let calls = content
            .iter()
            .any(|b| matches!(b, ContentBlock::ToolUse { .. }));
        let stop_reason = match self.stop_reason {
            Some(reason) => reason,
            None if calls => "tool_use".to_owned(),
            None => "end_turn".to_owned(),
        };
        Ok(ModelResponse {
            content,
            stop_reason: Some(stop_reason),
            usage: self.usage,
            model: self.model,
        })
    }
}

/// A failure inside the stream: `response.failed`'s `response.error` or an
/// `error` event, both `{code, message}`. The codes that clear by waiting
/// (`server_error`, `rate_limit_exceeded`, a missing code) are retried;
/// a prompt too long compacts; the rest (`invalid_prompt`, the image codes)
/// are the request's fault and end the turn.
fn failure(error: &Value) -> ModelError {
    let code = error.get("code").and_then(Value::as_str);
    let text = error
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| error.to_string());
    let message = truncate(&format!(
        "response failed ({}): {text}",
        code.unwrap_or("no code")
    ));
    if says_context_too_long(&error.to_string()) {
        return ModelError::ContextTooLong { message };
    }
    let retry = |kind: &str| ModelError::Retryable {
        kind: kind.to_owned(),
        message: message.clone(),
        retry_after: None,
    };
    match code {
        None | Some("server_error" | "vector_store_timeout") => retry("api_error"),
        Some("rate_limit_exceeded") => retry("rate_limit_error"),
        Some("insufficient_quota") => ModelError::Fatal {
            error_type: "billing_error".into(),
            message,
        },
        Some(_) => ModelError::Fatal {
            error_type: "invalid_request_error".into(),
            message,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Message;
    use holdfast_wire::config::{ModelConfig, Provider};

    #[test]
    fn history_becomes_input_items_with_reasoning_sent_back_verbatim() {
        let reasoning = json!({"type": "reasoning", "id": "rs_1", "summary": [],
                               "encrypted_content": "gAAAAB-opaque"});
        let request = ModelRequest {
            model: ModelConfig::new(Provider::OpenaiResponses, "gpt-5"),
            system: Some("be brief".into()),
            messages: vec![
                Message {
                    role: Role::User,
                    content: vec![ContentBlock::Text { text: "hi".into() }],
                },
                Message {
                    role: Role::Assistant,
                    content: vec![
                        ContentBlock::Raw(reasoning.clone()),
                        ContentBlock::ToolUse {
                            id: "call_1".into(),
                            name: "lookup".into(),
                            input: json!({"q": 1}),
                        },
                    ],
                },
                Message {
                    role: Role::User,
                    content: vec![ContentBlock::ToolResult {
                        tool_use_id: "call_1".into(),
                        content: json!("42"),
                        is_error: true,
                    }],
                },
            ],
            tools: Vec::new(),
            provider_tools: Vec::new(),
        };
        let body = request_body(&request);
        assert_eq!(body["instructions"], "be brief");
        assert_eq!(
            body["input"],
            json!([
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                reasoning,
                {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{\"q\":1}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "Error: 42"},
            ])
        );
        assert_eq!(body["store"], false);
        assert!(body.get("tools").is_none() && body.get("parallel_tool_calls").is_none());
    }

    #[test]
    fn failures_are_classified_by_code() {
        assert!(matches!(
            failure(&json!({"code": "server_error", "message": "oops"})),
            ModelError::Retryable { .. }
        ));
        assert!(matches!(
            failure(&json!({"code": "invalid_prompt", "message": "no"})),
            ModelError::Fatal { ref error_type, .. } if error_type == "invalid_request_error"
        ));
        assert!(matches!(
            failure(&json!({"code": "context_length_exceeded",
                             "message": "Your input exceeds the context window of this model."})),
            ModelError::ContextTooLong { .. }
        ));
    }
}
