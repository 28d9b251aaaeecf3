//! Model providers: the provider-neutral request and response types, and
//! what every call out of Holdfast to an address a tenant chose goes
//! through ([`egress`]), and the sealing of provider keys ([`secrets`]).
//!
//! A [`ModelRequest`] is rebuilt from the database at every attempt (so inputs
//! and config changes that arrived meanwhile apply to a retry); the provider
//! clients map it to the Anthropic Messages, OpenAI Chat Completions or
//! OpenAI Responses wire format, stream the answer, forward text deltas,
//! and classify failures into [`ModelError`] so the worker knows whether to
//! retry, compact or fail the turn.
//!
//! The worker's side, per attempt:
//! - [`Providers::should_compact`] before sending (estimated size against
//!   the model's context window), and on [`ModelError::ContextTooLong`]:
//!   [`compaction_split`] / [`summary_request`] / [`summary_message`];
//! - [`Providers::complete`] to make the call (drop the future to cancel);
//! - on [`ModelError::Retryable`]: [`holdfast_outbound::backoff::Backoff::delay`]`(attempt, retry_after)`
//!   for the durable `run_after`.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

mod anthropic;
mod classify;
mod client;
mod compaction;
pub mod egress;
mod history;
mod media;
mod openai;
mod responses;
pub mod secrets;

pub use client::{
    ModelTarget, ProviderSettings, ProviderSetupError, Providers, DEFAULT_ANTHROPIC_BASE_URL,
    DEFAULT_OPENAI_BASE_URL,
};
pub use compaction::{compaction_split, estimate_tokens, summary_message, summary_request};
pub use media::{attachment_ids, RequestFiles, StoredFile};
// `config.model`, which requests carry and clients are picked by.
use holdfast_wire::config::{ModelConfig, Provider, ToolEntry};
use holdfast_wire::domain::Usage;

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
    /// An image (JPEG, PNG, GIF, WebP) from an input or a tool result.
    Image {
        source: MediaSource,
    },
    /// A document (PDF) from an input or a tool result.
    Document {
        source: MediaSource,
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

/// Where an image's or a document's bytes are: inline (a tool's output
/// before it is stored), a file stored in `holdfast.attachments` (what
/// saved content holds; its bytes go into the request body as it is
/// serialized, [`RequestFiles`]) or at a URL the provider fetches.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum MediaSource {
    Base64 {
        media_type: String,
        data: String,
    },
    Url {
        url: String,
    },
    Attachment {
        attachment_id: Uuid,
        media_type: String,
        size_bytes: u64,
    },
}

impl MediaSource {
    /// As a URL the OpenAI APIs take: the URL itself, or a `data:` URL.
    pub fn url(&self) -> String {
        match self {
            MediaSource::Base64 { media_type, data } => format!("data:{media_type};base64,{data}"),
            MediaSource::Url { url } => url.clone(),
            MediaSource::Attachment { attachment_id, .. } => media::data_url_marker(*attachment_id),
        }
    }

    /// As the Messages API takes a source: `base64` (a stored file's too)
    /// or `url`.
    pub(crate) fn anthropic_source(&self) -> Value {
        match self {
            MediaSource::Attachment {
                attachment_id,
                media_type,
                ..
            } => serde_json::json!({"type": "base64", "media_type": media_type,
                                    "data": media::base64_marker(*attachment_id)}),
            other => serde_json::json!(other),
        }
    }
}

/// A tool's output as content blocks, when it is some: an array of text,
/// image and document blocks with at least one image or document (the rule
/// of `holdfast.is_media_blocks`, which stored it so). Any other output is
/// sent as its text.
pub fn media_blocks(output: &Value) -> Option<Vec<ContentBlock>> {
    let blocks: Vec<ContentBlock> = output
        .as_array()?
        .iter()
        .map(|b| ContentBlock::deserialize(b).ok())
        .collect::<Option<_>>()?;
    let typed = blocks.iter().all(|b| {
        matches!(
            b,
            ContentBlock::Text { .. } | ContentBlock::Image { .. } | ContentBlock::Document { .. }
        )
    });
    let media = blocks.iter().any(|b| {
        matches!(
            b,
            ContentBlock::Image { .. } | ContentBlock::Document { .. }
        )
    });
    (typed && media).then_some(blocks)
}

/// The URLs of the image and document blocks of `content` (an input's
/// content, a tool's output or a saved message: an array of blocks) with
/// each block's index: what the model provider would fetch.
pub fn media_urls(content: &Value) -> Vec<(usize, &str)> {
    let Some(blocks) = content.as_array() else {
        return Vec::new();
    };
    blocks
        .iter()
        .enumerate()
        .filter(|(_, b)| {
            matches!(
                b.get("type").and_then(Value::as_str),
                Some("image" | "document")
            )
        })
        .filter(|(_, b)| b.pointer("/source/type").and_then(Value::as_str) == Some("url"))
        .filter_map(|(i, b)| Some((i, b.pointer("/source/url")?.as_str()?)))
        .collect()
}

/// The base64 characters of a tool output's images and documents: stored
/// once as attachments, they do not count towards the output's size limit.
pub fn inline_media_bytes(output: &Value) -> usize {
    media_blocks(output)
        .into_iter()
        .flatten()
        .map(|block| match block {
            ContentBlock::Image {
                source: MediaSource::Base64 { data, .. },
            }
            | ContentBlock::Document {
                source: MediaSource::Base64 { data, .. },
            } => data.len(),
            _ => 0,
        })
        .sum()
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
    /// The config's tools the provider runs inside the call (Anthropic's
    /// web search and web fetch), sent in the provider's own form.
    pub provider_tools: Vec<ToolEntry>,
}

/// A finished model response: text and tool_use blocks, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelResponse {
    pub content: Vec<ContentBlock>,
    /// Normalised: `end_turn`, `tool_use`, `max_tokens`, `stop_sequence`,
    /// `pause_turn` (Anthropic: continue by sending the response back);
    /// OpenAI's `stop` / `tool_calls` / `length` map to these.
    pub stop_reason: Option<String>,
    pub usage: Usage,
    /// The model that answered, as the response names it (often a dated
    /// snapshot of the alias requested); `None` when it named none.
    pub model: Option<String>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn media_blocks_are_text_image_and_document_blocks_with_an_image_or_document() {
        let png = json!({"type": "image",
                         "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}});
        let blocks = media_blocks(&json!([{"type": "text", "text": "chart"}, png])).unwrap();
        assert_eq!(blocks.len(), 2);
        assert_eq!(inline_media_bytes(&json!([png])), 4);
        // Text blocks alone, other block types or other JSON keep their meaning.
        assert_eq!(
            media_blocks(&json!([{"type": "text", "text": "chart"}])),
            None
        );
        assert_eq!(
            media_blocks(&json!([png, {"type": "tool_use", "id": "t", "name": "n", "input": {}}])),
            None
        );
        assert_eq!(media_blocks(&json!([png, 1])), None);
        assert_eq!(media_blocks(&json!({"content": [png]})), None);
        assert_eq!(inline_media_bytes(&json!({"content": [png]})), 0);
    }
}
