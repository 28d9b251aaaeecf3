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
//! and `data: [DONE]`.

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
    if protocol == Protocol::Openai {
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
    let searches = blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("server_tool_use"))
        .count();
    push(
        anthropic_event(
            "message_delta",
            json!({"type": "message_delta",
                   "delta": {"stop_reason": stop_reason, "stop_sequence": null},
                   "usage": {"output_tokens": output_tokens,
                             "server_tool_use": {"web_search_requests": searches}}}),
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
    }
    frames
}

/// The protocol's mid-stream overload error.
pub(crate) fn stream_error_frame(protocol: Protocol) -> Bytes {
    match protocol {
        Protocol::Anthropic => anthropic_event(
            "error",
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ),
        Protocol::Openai => openai_data(&json!({"error": {
            "message": "The server had an error while processing your request. Sorry about that!",
            "type": "server_error", "param": null, "code": null}})),
    }
}

/// The protocol's JSON error body for `status`.
pub(crate) fn error_body(protocol: Protocol, status: u16, serial: u64) -> String {
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
        Protocol::Openai => {
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
        Protocol::Openai => json!({"error": {
            "message": "This model's maximum context length is 128000 tokens. However, your messages resulted in 130412 tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}})
        .to_string(),
    }
}
