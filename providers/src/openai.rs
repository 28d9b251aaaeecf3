//! OpenAI Chat Completions: `POST {base}/chat/completions` with
//! `Authorization: Bearer`, `stream: true` and
//! `stream_options: {"include_usage": true}`.
//!
//! The stream is unnamed `data:` chunks (`chat.completion.chunk` objects)
//! ending with `data: [DONE]`. Text arrives in `choices[0].delta.content`;
//! tool calls in `choices[0].delta.tool_calls[]`, keyed by `index`, the
//! first fragment carrying `id` and `function.name`, later ones appending
//! to `function.arguments`. `finish_reason` comes on the last choice chunk;
//! with `include_usage`, a final chunk with empty `choices` carries `usage`
//! (`prompt_tokens`, `completion_tokens`, and in `prompt_tokens_details` /
//! `completion_tokens_details` the `cached_tokens` and `reasoning_tokens`
//! among them).
//!
//! Holdfast's history is Anthropic-shaped; here the system prompt becomes a
//! `system` message, assistant tool calls become `tool_calls`, and each tool
//! result a `role: tool` message answering its `tool_call_id`.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};
use tokio::sync::mpsc::UnboundedSender;

use super::anthropic::parse_tool_input;
use super::classify::{classify_stream_error, incomplete_stream, invalid_response};
use super::client::{answering_model, forward, insert_if_set, StreamAssembler};
use super::history::{normalise, tool_output_text};
use super::{
    media_blocks, ContentBlock, Delta, DeltaKind, MediaSource, ModelError, ModelRequest,
    ModelResponse, Role, Usage,
};
use holdfast_outbound::sse::SseEvent;
use holdfast_wire::config::ToolChoice;

/// The request body.
pub(crate) fn request_body(request: &ModelRequest) -> Value {
    let mut messages = Vec::new();
    if let Some(system) = request.system.as_deref().filter(|s| !s.is_empty()) {
        messages.push(json!({"role": "system", "content": system}));
    }
    for message in normalise(&request.messages) {
        let texts: Vec<&str> = message
            .content
            .iter()
            .filter_map(ContentBlock::text)
            .collect();
        let text = (!texts.is_empty()).then(|| texts.join("\n\n"));
        match message.role {
            Role::User => {
                // A `tool` message takes text only: a tool result's images
                // and documents go in the user message that follows, first,
                // and its text says so.
                let mut attached = Vec::new();
                // normalise() put tool results first, so each `tool` message
                // directly follows the assistant message that made the call.
                for block in &message.content {
                    if let ContentBlock::ToolResult {
                        tool_use_id,
                        content,
                        is_error,
                    } = block
                    {
                        let mut output = tool_output_text(content, *is_error);
                        if let Some(blocks) = media_blocks(content) {
                            attached.extend(blocks.iter().filter_map(media_part));
                            output.push_str(TOOL_MEDIA_NOTE);
                        }
                        messages.push(json!({
                            "role": "tool",
                            "tool_call_id": tool_use_id,
                            "content": output,
                        }));
                    }
                }
                let has_media = message.content.iter().any(|b| {
                    matches!(
                        b,
                        ContentBlock::Image { .. } | ContentBlock::Document { .. }
                    )
                });
                if has_media || !attached.is_empty() {
                    // Content parts, in order, when there is more than text.
                    let own = message.content.iter().filter_map(|b| match b.text() {
                        Some(text) => Some(json!({"type": "text", "text": text})),
                        None => media_part(b),
                    });
                    attached.extend(own);
                    messages.push(json!({"role": "user", "content": attached}));
                } else if let Some(text) = text {
                    messages.push(json!({"role": "user", "content": text}));
                }
            }
            Role::Assistant => {
                let calls: Vec<Value> = message
                    .content
                    .iter()
                    .filter_map(|b| match b {
                        ContentBlock::ToolUse { id, name, input } => Some(json!({
                            "id": id,
                            "type": "function",
                            "function": {"name": name, "arguments": input.to_string()},
                        })),
                        _ => None,
                    })
                    .collect();
                let mut assistant = json!({"role": "assistant", "content": text});
                if !calls.is_empty() {
                    assistant["tool_calls"] = Value::Array(calls);
                }
                messages.push(assistant);
            }
        }
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model.name));
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.input_schema,
                    },
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    let model = &request.model;
    insert_if_set(&mut body, "temperature", &model.temperature);
    insert_if_set(&mut body, "top_p", &model.top_p);
    insert_if_set(&mut body, "stop", &model.stop);
    insert_if_set(&mut body, "seed", &model.seed);
    insert_if_set(&mut body, "user", &model.user);
    insert_if_set(&mut body, "reasoning_effort", &model.reasoning_effort);
    if !request.tools.is_empty() {
        // OpenAI refuses `parallel_tool_calls` in a request without tools.
        insert_if_set(&mut body, "parallel_tool_calls", &model.parallel_tool_calls);
        if let Some(choice) = &model.tool_choice {
            let named = |name: &str| json!({"type": "function", "function": {"name": name}});
            body.insert("tool_choice".into(), tool_choice(choice, named));
        }
    }
    if let Some(max_tokens) = request.model.max_tokens {
        // `max_tokens` is deprecated by OpenAI and rejected by its
        // reasoning models; this is its replacement.
        body.insert("max_completion_tokens".into(), json!(max_tokens));
    }
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    Value::Object(body)
}

/// Appended to a `tool` message whose result had images or documents.
const TOOL_MEDIA_NOTE: &str =
    "\n(The images and documents of this result follow in the next user message.)";

/// An image or a document as a Chat Completions content part: `image_url`
/// (a URL or a `data:` URL) and `file` (a PDF as a `data:` URL). A document
/// by URL, which Chat Completions does not take, becomes a text part saying
/// so: the API refuses one for an agent on this provider, so only content
/// sent before the agent switched providers gets here.
fn media_part(block: &ContentBlock) -> Option<Value> {
    match block {
        ContentBlock::Image { source } => {
            Some(json!({"type": "image_url", "image_url": {"url": source.url()}}))
        }
        ContentBlock::Document {
            source: source @ (MediaSource::Base64 { .. } | MediaSource::Attachment { .. }),
        } => Some(json!({"type": "file",
                         "file": {"filename": DOCUMENT_FILENAME, "file_data": source.url()}})),
        ContentBlock::Document {
            source: MediaSource::Url { url },
        } => Some(json!({"type": "text",
                         "text": format!("[A document at {url} was not sent: this provider takes no document by URL.]")})),
        _ => None,
    }
}

/// The name a PDF is sent under (the OpenAI APIs want one with inline data;
/// Holdfast's blocks have none).
pub(crate) const DOCUMENT_FILENAME: &str = "document.pdf";

/// `tool_choice` as both OpenAI APIs take it: `auto`, `required`, `none`,
/// or the named function in the API's own form (`named`).
pub(crate) fn tool_choice(choice: &ToolChoice, named: impl Fn(&str) -> Value) -> Value {
    match choice {
        ToolChoice::Auto {} => json!("auto"),
        ToolChoice::Any {} => json!("required"),
        ToolChoice::None {} => json!("none"),
        ToolChoice::Tool { name } => named(name),
    }
}

#[derive(Default)]
struct ToolCall {
    id: String,
    name: String,
    arguments: String,
}

/// Assembles the streamed chunks into a [`ModelResponse`].
#[derive(Default)]
pub(crate) struct OpenAiStream {
    text: String,
    calls: BTreeMap<u64, ToolCall>,
    finish_reason: Option<String>,
    usage: Usage,
    model: Option<String>,
    complete: bool,
}

impl StreamAssembler for OpenAiStream {
    fn event(
        &mut self,
        event: SseEvent,
        deltas: Option<&UnboundedSender<Delta>>,
    ) -> Result<bool, ModelError> {
        if event.data.trim() == "[DONE]" {
            self.complete = true;
            return Ok(true);
        }
        let chunk: Value = serde_json::from_str(&event.data)
            .map_err(|e| invalid_response(format!("chunk is not JSON ({e}): {}", event.data)))?;
        if let Some(error) = chunk.get("error") {
            return Err(classify_stream_error(error));
        }
        // Every chunk repeats it.
        if self.model.is_none() {
            self.model = answering_model(chunk.get("model"));
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            let field = |name: &str| usage.get(name).and_then(Value::as_u64).unwrap_or(0);
            let detail = |pointer: &str| usage.pointer(pointer).and_then(Value::as_u64);
            self.usage = Usage {
                input_tokens: field("prompt_tokens"),
                output_tokens: field("completion_tokens"),
                // OpenAI caches long prompts by itself and reports the hits.
                cache_read_tokens: detail("/prompt_tokens_details/cached_tokens").unwrap_or(0),
                reasoning_tokens: detail("/completion_tokens_details/reasoning_tokens")
                    .unwrap_or(0),
                ..Usage::default()
            };
        }
        let choices = chunk.get("choices").and_then(Value::as_array);
        let Some(choice) = choices.and_then(|c| {
            c.iter()
                .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
        }) else {
            return Ok(false);
        };
        let delta = choice.get("delta").unwrap_or(&Value::Null);
        if let Some(piece) = delta.get("content").and_then(Value::as_str) {
            self.text.push_str(piece);
            forward(deltas, DeltaKind::Text, piece);
        }
        let fragments = delta.get("tool_calls").and_then(Value::as_array);
        for (position, fragment) in fragments.into_iter().flatten().enumerate() {
            let index = fragment
                .get("index")
                .and_then(Value::as_u64)
                .unwrap_or(position as u64);
            let call = self.calls.entry(index).or_default();
            let text = |pointer: &str| fragment.pointer(pointer).and_then(Value::as_str);
            // id and name come whole in the first fragment; some compatible
            // servers repeat them in every fragment, so later copies are ignored.
            if let (true, Some(id)) = (call.id.is_empty(), text("/id")) {
                call.id = id.to_owned();
            }
            if let (true, Some(name)) = (call.name.is_empty(), text("/function/name")) {
                call.name = name.to_owned();
            }
            if let Some(arguments) = text("/function/arguments") {
                call.arguments.push_str(arguments);
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_owned());
        }
        Ok(false)
    }

    fn finish(self) -> Result<ModelResponse, ModelError> {
        if !self.complete {
            return Err(incomplete_stream("data: [DONE]"));
        }
        let mut content = Vec::new();
        if !self.text.is_empty() {
            content.push(ContentBlock::Text { text: self.text });
        }
        let has_calls = !self.calls.is_empty();
        for (index, call) in self.calls {
            if call.name.is_empty() {
                return Err(invalid_response(format!("tool call {index} has no name")));
            }
            content.push(ContentBlock::ToolUse {
                id: if call.id.is_empty() {
                    format!("call_{}", uuid::Uuid::new_v4().simple())
                } else {
                    call.id
                },
                name: call.name,
                input: parse_tool_input(&call.arguments)?,
            });
        }
        // Some compatible servers say `stop` even when they called tools.
        let stop_reason = match self.finish_reason.as_deref() {
            Some("tool_calls" | "function_call") => Some("tool_use".to_owned()),
            _ if has_calls => Some("tool_use".to_owned()),
            Some("stop") => Some("end_turn".to_owned()),
            Some("length") => Some("max_tokens".to_owned()),
            other => other.map(str::to_owned),
        };
        Ok(ModelResponse {
            content,
            stop_reason,
            usage: self.usage,
            model: self.model,
        })
    }
}
