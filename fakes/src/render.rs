//! Replies rendered byte for byte in each provider's documented wire format.
//!
//! Anthropic Messages streams named SSE events (`event: X` then
//! `data: {"type":"X",...}` and a blank line): `message_start`,
//! `content_block_start`, `ping`, `content_block_delta` (`text_delta`,
//! `input_json_delta`, `citations_delta`, `thinking_delta`,
//! `signature_delta`), `content_block_stop`, `message_delta`,
//! `message_stop`; mid-stream failures are `event: error`. OpenAI Chat
//! Completions streams bare `data: {chat.completion.chunk}` lines, a usage
//! chunk with empty `choices` when `stream_options.include_usage` is set,
//! and `data: [DONE]`. The OpenAI Responses API streams named events
//! (`event: response.X` then `data: {"type":"response.X","sequence_number":n,...}`):
//! `response.created`, `response.in_progress`, per output item
//! `response.output_item.added`, its parts and deltas and
//! `response.output_item.done` (the whole item), then `response.completed`
//! (`response.incomplete` at the output limit) with the usage, or
//! `response.failed`; mid-stream failures are `event: error`.

use bytes::Bytes;
use serde_json::{json, Value};

use crate::reply::{json_fragments, text_pieces, ReplyBody};

/// Which API a request came in on (by its path).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// `POST /v1/messages`
    Anthropic,
    /// `POST /v1/chat/completions`
    Openai,
    /// `POST /v1/responses`
    OpenaiResponses,
}

/// One SSE frame; `delta` marks frames that carry content (text or tool
/// input), the unit `*_after_deltas(n)` counts.
pub(crate) struct Frame {
    pub bytes: Bytes,
    pub delta: bool,
}

/// What a rendering needs to know about the request.
pub(crate) struct Context {
    pub serial: u64,
    pub model: String,
    pub input_tokens: u64,
    pub include_usage: bool,
    pub created: u64,
    /// Of the input tokens, `(read, written)` in the prompt cache.
    pub cache_tokens: (u64, u64),
    /// Of the output tokens, reasoning.
    pub reasoning_tokens: u64,
}

fn anthropic_event(name: &str, data: Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

/// Anthropic's `message_start`: an empty assistant message of `cx`'s model,
/// its usage split as the API splits it: the uncached `input_tokens` beside
/// the cache reads and writes (the whole prompt is their sum).
fn anthropic_message_start(cx: &Context, input_tokens: u64) -> Bytes {
    let (read, written) = cx.cache_tokens;
    anthropic_event(
        "message_start",
        json!({"type": "message_start", "message": {
            "id": format!("msg_fake{:020}", cx.serial),
            "type": "message",
            "role": "assistant",
            "model": cx.model,
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": {"input_tokens": input_tokens.saturating_sub(read + written),
                      "cache_creation_input_tokens": written,
                      "cache_read_input_tokens": read,
                      "output_tokens": 1},
        }}),
    )
}

fn openai_data(data: &Value) -> Bytes {
    Bytes::from(format!("data: {data}\n\n"))
}

/// The frames of a [`ReplyBody::Blocks`] reply (any other body: none).
pub(crate) fn block_frames(
    protocol: Protocol,
    cx: &Context,
    body: &ReplyBody,
    usage: Option<(u64, u64)>,
) -> Vec<Frame> {
    let ReplyBody::Blocks {
        blocks,
        stop_reason,
    } = body
    else {
        return Vec::new();
    };
    if protocol != Protocol::Anthropic {
        let text: Vec<&str> = blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect();
        return message_frames(
            protocol,
            cx,
            &text.concat(),
            &[],
            stop_reason.as_deref(),
            usage,
        );
    }
    let mut frames = Vec::new();
    let mut push = |bytes: Bytes, delta: bool| frames.push(Frame { bytes, delta });
    let mut deltas = 0u64;
    push(
        anthropic_message_start(cx, usage.map_or(cx.input_tokens, |(input, _)| input)),
        false,
    );
    for (index, block) in blocks.iter().enumerate() {
        let delta = |delta: Value| {
            anthropic_event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": delta}),
            )
        };
        let kind = block.get("type").and_then(Value::as_str);
        let mut start = block.clone();
        let mut streamed = Vec::new();
        if kind == Some("text") {
            start = json!({"type": "text", "text": ""});
            for citation in block
                .get("citations")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                streamed.push(delta(
                    json!({"type": "citations_delta", "citation": citation}),
                ));
            }
            let text = block.get("text").and_then(Value::as_str).unwrap_or("");
            for piece in text_pieces(text) {
                streamed.push(delta(json!({"type": "text_delta", "text": piece})));
            }
        } else if kind == Some("thinking") {
            // As the API streams thinking: an empty block, the text in
            // `thinking_delta`s, then the whole signature in one
            // `signature_delta` just before the block stops.
            start = json!({"type": "thinking", "thinking": "", "signature": ""});
            let thinking = block.get("thinking").and_then(Value::as_str).unwrap_or("");
            for piece in text_pieces(thinking) {
                streamed.push(delta(json!({"type": "thinking_delta", "thinking": piece})));
            }
            let signature = block.get("signature").and_then(Value::as_str).unwrap_or("");
            streamed.push(delta(
                json!({"type": "signature_delta", "signature": signature}),
            ));
        } else if let Some(input) = block.get("input") {
            start["input"] = json!({});
            for fragment in json_fragments(input) {
                streamed.push(delta(
                    json!({"type": "input_json_delta", "partial_json": fragment}),
                ));
            }
        }
        push(
            anthropic_event(
                "content_block_start",
                json!({"type": "content_block_start", "index": index, "content_block": start}),
            ),
            false,
        );
        deltas += streamed.len() as u64;
        for frame in streamed {
            push(frame, true);
        }
        push(
            anthropic_event(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            ),
            false,
        );
    }
    let output_tokens = usage.map_or(deltas, |(_, output)| output);
    let stop_reason = stop_reason.as_deref().unwrap_or(
        if blocks
            .iter()
            .any(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
        {
            "tool_use"
        } else {
            "end_turn"
        },
    );
    // Anthropic's counts of the server tools' requests, by tool name.
    let server_tool_requests = |tool: &str| {
        blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("server_tool_use"))
            .filter(|b| b.get("name").and_then(Value::as_str) == Some(tool))
            .count()
    };
    push(
        anthropic_event(
            "message_delta",
            json!({"type": "message_delta",
                   "delta": {"stop_reason": stop_reason, "stop_sequence": null},
                   "usage": {"output_tokens": output_tokens,
                             "server_tool_use": {"web_search_requests": server_tool_requests("web_search"),
                                                 "web_fetch_requests": server_tool_requests("web_fetch")}}}),
        ),
        false,
    );
    push(
        anthropic_event("message_stop", json!({"type": "message_stop"})),
        false,
    );
    frames
}

/// The frames of a complete streamed message.
pub(crate) fn message_frames(
    protocol: Protocol,
    cx: &Context,
    text: &str,
    tool_calls: &[(String, Value)],
    stop_reason: Option<&str>,
    usage: Option<(u64, u64)>,
) -> Vec<Frame> {
    if protocol == Protocol::OpenaiResponses {
        let mut items = Vec::new();
        if !text.is_empty() {
            items.push(
                json!({"type": "message", "id": format!("msg_fake{:020}", cx.serial),
                              "role": "assistant",
                              "content": [{"type": "output_text", "text": text}]}),
            );
        }
        for (call, (name, input)) in tool_calls.iter().enumerate() {
            items.push(json!({"type": "function_call",
                              "id": format!("fc_fake{:08}{call:04}", cx.serial),
                              "call_id": format!("call_fake{:08}{call:04}", cx.serial),
                              "name": name, "arguments": input.to_string()}));
        }
        return responses_frames(cx, &items, stop_reason, usage);
    }
    let pieces = text_pieces(text);
    let fragments: Vec<Vec<String>> = tool_calls.iter().map(|(_, i)| json_fragments(i)).collect();
    let delta_count = pieces.len() + fragments.iter().map(|f| f.len() + 1).sum::<usize>();
    let (input_tokens, output_tokens) = usage.unwrap_or((cx.input_tokens, delta_count as u64));
    let stop_reason = stop_reason.unwrap_or(if tool_calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    });
    let mut frames = Vec::new();
    let mut push = |bytes: Bytes, delta: bool| frames.push(Frame { bytes, delta });
    match protocol {
        Protocol::Anthropic => {
            push(anthropic_message_start(cx, input_tokens), false);
            let mut index = 0;
            // One ping, after the first block starts, as the API's streams do.
            let mut pinged = false;
            if !pieces.is_empty() {
                push(
                    anthropic_event(
                        "content_block_start",
                        json!({"type": "content_block_start", "index": index,
                               "content_block": {"type": "text", "text": ""}}),
                    ),
                    false,
                );
                if !pinged {
                    pinged = true;
                    push(anthropic_event("ping", json!({"type": "ping"})), false);
                }
                for piece in &pieces {
                    push(
                        anthropic_event(
                            "content_block_delta",
                            json!({"type": "content_block_delta", "index": index,
                                   "delta": {"type": "text_delta", "text": piece}}),
                        ),
                        true,
                    );
                }
                push(
                    anthropic_event(
                        "content_block_stop",
                        json!({"type": "content_block_stop", "index": index}),
                    ),
                    false,
                );
                index += 1;
            }
            for (call, ((name, _), fragments)) in tool_calls.iter().zip(&fragments).enumerate() {
                push(
                    anthropic_event(
                        "content_block_start",
                        json!({"type": "content_block_start", "index": index,
                               "content_block": {"type": "tool_use",
                                   "id": format!("toolu_fake{:08}{:04}", cx.serial, call),
                                   "name": name, "input": {}}}),
                    ),
                    false,
                );
                if !pinged {
                    pinged = true;
                    push(anthropic_event("ping", json!({"type": "ping"})), false);
                }
                // The first input_json_delta is empty, as in the API's streams.
                for fragment in std::iter::once("").chain(fragments.iter().map(String::as_str)) {
                    push(
                        anthropic_event(
                            "content_block_delta",
                            json!({"type": "content_block_delta", "index": index,
                                   "delta": {"type": "input_json_delta", "partial_json": fragment}}),
                        ),
                        true,
                    );
                }
                push(
                    anthropic_event(
                        "content_block_stop",
                        json!({"type": "content_block_stop", "index": index}),
                    ),
                    false,
                );
                index += 1;
            }
            push(
                anthropic_event(
                    "message_delta",
                    json!({"type": "message_delta",
                           "delta": {"stop_reason": stop_reason, "stop_sequence": null},
                           "usage": {"output_tokens": output_tokens}}),
                ),
                false,
            );
            push(
                anthropic_event("message_stop", json!({"type": "message_stop"})),
                false,
            );
        }
        Protocol::Openai => {
            let chunk = |delta: Value, finish: Option<&str>| {
                json!({
                    "id": format!("chatcmpl-fake{:020}", cx.serial),
                    "object": "chat.completion.chunk",
                    "created": cx.created,
                    "model": cx.model,
                    "system_fingerprint": null,
                    "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
                    "usage": null,
                })
            };
            push(
                openai_data(&chunk(
                    json!({"role": "assistant", "content": "", "refusal": null}),
                    None,
                )),
                false,
            );
            for piece in &pieces {
                push(openai_data(&chunk(json!({"content": piece}), None)), true);
            }
            for (call, ((name, _), fragments)) in tool_calls.iter().zip(&fragments).enumerate() {
                push(
                    openai_data(&chunk(
                        json!({"tool_calls": [{"index": call,
                            "id": format!("call_fake{:08}{:04}", cx.serial, call),
                            "type": "function",
                            "function": {"name": name, "arguments": ""}}]}),
                        None,
                    )),
                    true,
                );
                for fragment in fragments {
                    push(
                        openai_data(&chunk(
                            json!({"tool_calls": [{"index": call, "function": {"arguments": fragment}}]}),
                            None,
                        )),
                        true,
                    );
                }
            }
            let finish = match stop_reason {
                "end_turn" | "stop_sequence" => "stop",
                "tool_use" => "tool_calls",
                "max_tokens" => "length",
                other => other,
            };
            push(openai_data(&chunk(json!({}), Some(finish))), false);
            if cx.include_usage {
                push(
                    openai_data(&json!({
                        "id": format!("chatcmpl-fake{:020}", cx.serial),
                        "object": "chat.completion.chunk",
                        "created": cx.created,
                        "model": cx.model,
                        "system_fingerprint": null,
                        "choices": [],
                        "usage": {"prompt_tokens": input_tokens,
                                  "completion_tokens": output_tokens,
                                  "total_tokens": input_tokens + output_tokens,
                                  "prompt_tokens_details": {"cached_tokens": cx.cache_tokens.0,
                                                            "audio_tokens": 0},
                                  "completion_tokens_details": {"reasoning_tokens": cx.reasoning_tokens,
                                                                "audio_tokens": 0,
                                                                "accepted_prediction_tokens": 0,
                                                                "rejected_prediction_tokens": 0}},
                    })),
                    false,
                );
            }
            push(Bytes::from_static(b"data: [DONE]\n\n"), false);
        }
        Protocol::OpenaiResponses => unreachable!("rendered above"),
    }
    frames
}

/// A Responses API event: its `type` is also the SSE event name.
fn responses_event(kind: &str, sequence_number: usize, mut data: Value) -> Bytes {
    data["type"] = json!(kind);
    data["sequence_number"] = json!(sequence_number);
    Bytes::from(format!("event: {kind}\ndata: {data}\n\n"))
}

/// The `response` object the lifecycle events carry.
fn response_object(cx: &Context, status: &str, output: Vec<Value>, usage: Value) -> Value {
    json!({
        "id": format!("resp_fake{:020}", cx.serial),
        "object": "response",
        "created_at": cx.created,
        "status": status,
        "error": null,
        "incomplete_details": null,
        "instructions": null,
        "max_output_tokens": null,
        "model": cx.model,
        "output": output,
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "reasoning": {"effort": null, "summary": null},
        "store": false,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage,
        "user": null,
        "metadata": {},
    })
}

/// Collects the frames of a Responses stream, numbering them.
struct ResponsesFrames {
    frames: Vec<Frame>,
}

impl ResponsesFrames {
    fn push(&mut self, kind: &str, data: Value, delta: bool) {
        let bytes = responses_event(kind, self.frames.len(), data);
        self.frames.push(Frame { bytes, delta });
    }

    /// `response.created` and `response.in_progress`.
    fn start(&mut self, cx: &Context) {
        for kind in ["response.created", "response.in_progress"] {
            let response = response_object(cx, "in_progress", Vec::new(), Value::Null);
            self.push(kind, json!({"response": response}), false);
        }
    }
}

/// The frames of a Responses stream of these output items (in their final,
/// `output_item.done` shape): message text as `output_text.delta`s,
/// reasoning summaries as `reasoning_summary_text.delta`s, function call
/// arguments as `function_call_arguments.delta` fragments, any other item
/// whole. A `max_tokens` stop reason ends it `response.incomplete`.
pub(crate) fn responses_frames(
    cx: &Context,
    items: &[Value],
    stop_reason: Option<&str>,
    usage: Option<(u64, u64)>,
) -> Vec<Frame> {
    let mut out = ResponsesFrames { frames: Vec::new() };
    out.start(cx);
    let mut deltas = 0u64;
    let mut done_items = Vec::new();
    for (output_index, item) in items.iter().enumerate() {
        let mut item = item.clone();
        let id = item
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let at = json!({"item_id": id, "output_index": output_index});
        let with = |extra: Value| {
            let mut data = at.clone();
            if let (Some(data), Value::Object(extra)) = (data.as_object_mut(), extra) {
                data.extend(extra);
            }
            data
        };
        let mut added = item.clone();
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                added["status"] = json!("in_progress");
                added["content"] = json!([]);
                out.push(
                    "response.output_item.added",
                    json!({"output_index": output_index, "item": added}),
                    false,
                );
                let parts = item
                    .get("content")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let mut done_parts = Vec::new();
                for (content_index, part) in parts.iter().enumerate() {
                    let text = part.get("text").and_then(Value::as_str).unwrap_or("");
                    let part_at = |extra: Value| {
                        let mut data = with(extra);
                        data["content_index"] = json!(content_index);
                        data
                    };
                    let empty = json!({"type": "output_text", "annotations": [], "logprobs": [], "text": ""});
                    out.push(
                        "response.content_part.added",
                        part_at(json!({"part": empty})),
                        false,
                    );
                    for piece in text_pieces(text) {
                        deltas += 1;
                        out.push(
                            "response.output_text.delta",
                            part_at(json!({"delta": piece, "logprobs": []})),
                            true,
                        );
                    }
                    out.push(
                        "response.output_text.done",
                        part_at(json!({"text": text, "logprobs": []})),
                        false,
                    );
                    let full = json!({"type": "output_text", "annotations": [], "logprobs": [], "text": text});
                    out.push(
                        "response.content_part.done",
                        part_at(json!({"part": full.clone()})),
                        false,
                    );
                    done_parts.push(full);
                }
                item["content"] = Value::Array(done_parts);
                item["status"] = json!("completed");
            }
            Some("reasoning") => {
                added["summary"] = json!([]);
                out.push(
                    "response.output_item.added",
                    json!({"output_index": output_index, "item": added}),
                    false,
                );
                let parts = item
                    .get("summary")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                for (summary_index, part) in parts.iter().enumerate() {
                    let text = part.get("text").and_then(Value::as_str).unwrap_or("");
                    let part_at = |extra: Value| {
                        let mut data = with(extra);
                        data["summary_index"] = json!(summary_index);
                        data
                    };
                    out.push(
                        "response.reasoning_summary_part.added",
                        part_at(json!({"part": {"type": "summary_text", "text": ""}})),
                        false,
                    );
                    for piece in text_pieces(text) {
                        deltas += 1;
                        out.push(
                            "response.reasoning_summary_text.delta",
                            part_at(json!({"delta": piece})),
                            true,
                        );
                    }
                    out.push(
                        "response.reasoning_summary_text.done",
                        part_at(json!({"text": text})),
                        false,
                    );
                    out.push(
                        "response.reasoning_summary_part.done",
                        part_at(json!({"part": {"type": "summary_text", "text": text}})),
                        false,
                    );
                }
            }
            Some("function_call") => {
                let arguments = item
                    .get("arguments")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                added["status"] = json!("in_progress");
                added["arguments"] = json!("");
                out.push(
                    "response.output_item.added",
                    json!({"output_index": output_index, "item": added}),
                    false,
                );
                for fragment in string_fragments(&arguments) {
                    deltas += 1;
                    out.push(
                        "response.function_call_arguments.delta",
                        with(json!({"delta": fragment})),
                        true,
                    );
                }
                out.push(
                    "response.function_call_arguments.done",
                    with(json!({"arguments": arguments})),
                    false,
                );
                item["status"] = json!("completed");
            }
            _ => {
                out.push(
                    "response.output_item.added",
                    json!({"output_index": output_index, "item": added}),
                    false,
                );
            }
        }
        out.push(
            "response.output_item.done",
            json!({"output_index": output_index, "item": item.clone()}),
            false,
        );
        done_items.push(item);
    }
    let (input_tokens, output_tokens) = usage.unwrap_or((cx.input_tokens, deltas));
    let usage = json!({
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cx.cache_tokens.0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": cx.reasoning_tokens},
        "total_tokens": input_tokens + output_tokens,
    });
    if stop_reason == Some("max_tokens") {
        let mut response = response_object(cx, "incomplete", done_items, usage);
        response["incomplete_details"] = json!({"reason": "max_output_tokens"});
        out.push("response.incomplete", json!({"response": response}), false);
    } else {
        let response = response_object(cx, "completed", done_items, usage);
        out.push("response.completed", json!({"response": response}), false);
    }
    out.frames
}

/// A Responses stream that fails: created, in progress, then
/// `response.failed` with `response.error: {code, message}`. Over the other
/// protocols, their mid-stream error with the message.
pub(crate) fn failed_frames(
    protocol: Protocol,
    cx: &Context,
    code: &str,
    message: &str,
) -> Vec<Frame> {
    let bytes = match protocol {
        Protocol::Anthropic => anthropic_event(
            "error",
            json!({"type": "error", "error": {"type": "api_error", "message": message}}),
        ),
        Protocol::Openai => openai_data(&json!({"error": {
            "message": message, "type": "server_error", "param": null, "code": code}})),
        Protocol::OpenaiResponses => {
            let mut out = ResponsesFrames { frames: Vec::new() };
            out.start(cx);
            let mut response = response_object(cx, "failed", Vec::new(), Value::Null);
            response["error"] = json!({"code": code, "message": message});
            out.push("response.failed", json!({"response": response}), false);
            return out.frames;
        }
    };
    vec![Frame {
        bytes,
        delta: false,
    }]
}

/// A string as three fragments, split at character boundaries.
fn string_fragments(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let size = chars.len().div_ceil(3).max(1);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// The protocol's mid-stream overload error, after `sent` frames.
pub(crate) fn stream_error_frame(protocol: Protocol, sent: usize) -> Bytes {
    match protocol {
        Protocol::Anthropic => anthropic_event(
            "error",
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ),
        Protocol::Openai => openai_data(&json!({"error": {
            "message": "The server had an error while processing your request. Sorry about that!",
            "type": "server_error", "param": null, "code": null}})),
        Protocol::OpenaiResponses => responses_event(
            "error",
            sent,
            json!({"code": "server_error", "param": null,
                   "message": "The server had an error while processing your request. Sorry about that!"}),
        ),
    }
}

/// The protocol's JSON error body for `status`.
pub(crate) fn error_body(protocol: Protocol, status: u16, serial: u64) -> String {
    // The Responses API's error bodies are Chat Completions'.
    match protocol {
        Protocol::Anthropic => {
            let (kind, message) = match status {
                400 => ("invalid_request_error", "messages: the request was rejected by the fake provider"),
                401 => ("authentication_error", "invalid x-api-key"),
                402 => ("billing_error", "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."),
                403 => ("permission_error", "Your API key does not have permission to use the specified resource."),
                404 => ("not_found_error", "model: not found"),
                413 => ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
                429 => ("rate_limit_error", "This request would exceed the rate limit for your organization of 50 requests per minute."),
                529 => ("overloaded_error", "Overloaded"),
                504 => ("timeout_error", "Request timed out"),
                _ => ("api_error", "Internal server error"),
            };
            json!({"type": "error", "error": {"type": kind, "message": message},
                   "request_id": format!("req_fake{serial:020}")})
            .to_string()
        }
        Protocol::Openai | Protocol::OpenaiResponses => {
            let (kind, code, message) = match status {
                400 => ("invalid_request_error", Value::Null, "The request was rejected by the fake provider."),
                401 => ("invalid_request_error", json!("invalid_api_key"), "Incorrect API key provided: sk-fake. You can find your API key at https://platform.openai.com/account/api-keys."),
                403 => ("invalid_request_error", json!("unsupported_country_region_territory"), "Country, region, or territory not supported"),
                404 => ("invalid_request_error", json!("model_not_found"), "The model does not exist or you do not have access to it."),
                429 => ("requests", json!("rate_limit_exceeded"), "Rate limit reached for requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 20s."),
                503 => ("server_error", Value::Null, "The engine is currently overloaded, please try again later"),
                s if s >= 500 => ("server_error", Value::Null, "The server had an error while processing your request. Sorry about that!"),
                _ => ("invalid_request_error", Value::Null, "The request was rejected by the fake provider."),
            };
            json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
                .to_string()
        }
    }
}

/// The protocol's context-window 400 body.
pub(crate) fn context_too_long_body(protocol: Protocol, serial: u64) -> String {
    match protocol {
        Protocol::Anthropic => json!({"type": "error", "error": {
                "type": "invalid_request_error",
                "message": "prompt is too long: 215017 tokens > 200000 maximum"},
            "request_id": format!("req_fake{serial:020}")})
        .to_string(),
        Protocol::OpenaiResponses => json!({"error": {
            "message": "Your input exceeds the context window of this model. Please adjust your input and try again.",
            "type": "invalid_request_error", "param": "input", "code": "context_length_exceeded"}})
        .to_string(),
        Protocol::Openai => json!({"error": {
            "message": "This model's maximum context length is 128000 tokens. However, your messages resulted in 130412 tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}})
        .to_string(),
    }
}
