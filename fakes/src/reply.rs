//! Scripted replies: what the fake provider answers to one request, in
//! protocol-neutral terms (rendered as Anthropic or OpenAI by `render`).

use std::time::{Duration, SystemTime};

use serde_json::Value;

/// One scripted answer. Build with a constructor, refine with the chained
/// methods, then [`crate::FakeProvider::push`] it.
#[derive(Clone, Debug)]
pub struct Reply {
    pub(crate) body: ReplyBody,
    pub(crate) hold: Option<Hold>,
    pub(crate) end: End,
    pub(crate) trickle: Option<Duration>,
    pub(crate) usage: Option<(u64, u64)>,
    /// Of the input tokens, `(read from, written to)` the prompt cache.
    pub(crate) cache_tokens: (u64, u64),
    /// Of the output tokens, reasoning (OpenAI reports them).
    pub(crate) reasoning_tokens: u64,
    /// The model the response says answered (`None`: the one requested).
    pub(crate) answered_by: Option<String>,
    pub(crate) headers: Vec<(String, String)>,
}

#[derive(Clone, Debug)]
pub(crate) enum ReplyBody {
    /// A streamed assistant message.
    Message {
        text: String,
        tool_calls: Vec<(String, Value)>,
        /// Normalised (`end_turn`, `tool_use`, `max_tokens`, ...); `None`
        /// derives it from whether there are tool calls.
        stop_reason: Option<String>,
    },
    /// Anthropic content blocks as the API returns them (server tool use
    /// and results, cited text, ...), streamed block by block; over the
    /// OpenAI protocol only their text.
    Blocks {
        blocks: Vec<Value>,
        /// `None`: `end_turn`.
        stop_reason: Option<String>,
    },
    /// OpenAI Responses output items in their final shape (`reasoning` with
    /// its summary and `encrypted_content`, `message`, `function_call`),
    /// streamed as the API streams them; over the other protocols only the
    /// messages' text.
    Items {
        items: Vec<Value>,
        /// `None`: `end_turn`.
        stop_reason: Option<String>,
    },
    /// A response that fails mid-stream: Responses `response.failed` with
    /// `response.error: {code, message}` (the other protocols: their
    /// mid-stream error with the message).
    Failed { code: String, message: String },
    /// An error status with the protocol's realistic error body (or `body`).
    Status {
        status: u16,
        retry_after: Option<String>,
        body: Option<String>,
    },
    /// Each protocol's own "prompt does not fit" 400.
    ContextTooLong,
}

/// Where a reply stops until [`crate::FakeProvider::release`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hold {
    BeforeHeaders,
    AfterDeltas(usize),
}

/// How a streamed message ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    Complete,
    /// The body ends cleanly after n deltas, without `message_stop` / `[DONE]`.
    CutAfter(usize),
    /// The connection is aborted after n deltas.
    ResetAfter(usize),
    /// The protocol's mid-stream overload error after n deltas.
    ErrorAfter(usize),
}

impl Reply {
    fn new(body: ReplyBody) -> Reply {
        Reply {
            body,
            hold: None,
            end: End::Complete,
            trickle: None,
            usage: None,
            cache_tokens: (0, 0),
            reasoning_tokens: 0,
            answered_by: None,
            headers: Vec::new(),
        }
    }

    /// A text answer, streamed as one delta per word (at least two deltas
    /// for any text longer than one character).
    pub fn text(text: impl Into<String>) -> Reply {
        Reply::new(ReplyBody::Message {
            text: text.into(),
            tool_calls: Vec::new(),
            stop_reason: None,
        })
    }

    /// Tool calls `(name, input)`, each input streamed as several JSON
    /// fragments; stop reason `tool_use`.
    pub fn tool_calls<N: Into<String>>(calls: Vec<(N, Value)>) -> Reply {
        Reply::text_and_tool_calls("", calls)
    }

    /// Text followed by tool calls, in one message.
    pub fn text_and_tool_calls<N: Into<String>>(
        text: impl Into<String>,
        calls: Vec<(N, Value)>,
    ) -> Reply {
        Reply::new(ReplyBody::Message {
            text: text.into(),
            tool_calls: calls.into_iter().map(|(n, v)| (n.into(), v)).collect(),
            stop_reason: None,
        })
    }

    /// A message of these Anthropic content blocks, streamed as the API
    /// streams them: text as `text_delta`s after a `citations_delta` per
    /// citation, `thinking` as `thinking_delta`s and one `signature_delta`,
    /// a block with `input` (`tool_use`, `server_tool_use`) as
    /// `input_json_delta` fragments, any other block
    /// (`web_search_tool_result`, `redacted_thinking`) whole in its
    /// `content_block_start`. Stop reason `tool_use` if there is a
    /// `tool_use` block, else `end_turn` (unless [`Reply::stop_reason`] sets
    /// one, e.g. `pause_turn`); usage reports a web search request per
    /// `server_tool_use` block.
    pub fn anthropic_blocks(blocks: Vec<Value>) -> Reply {
        Reply::new(ReplyBody::Blocks {
            blocks,
            stop_reason: None,
        })
    }

    /// A Responses API answer of these output items, each given as
    /// `response.output_item.done` carries it: a `reasoning` item's summary
    /// streams as `reasoning_summary_text.delta`s (the item, with its
    /// `encrypted_content`, comes whole in the done event), a `message`'s
    /// `output_text` parts as `output_text.delta`s, a `function_call`'s
    /// arguments as `function_call_arguments.delta` fragments.
    pub fn responses_items(items: Vec<Value>) -> Reply {
        Reply::new(ReplyBody::Items {
            items,
            stop_reason: None,
        })
    }

    /// A response that fails after it started: Responses `response.failed`
    /// with `response.error: {code, message}` (e.g. `server_error`,
    /// `invalid_prompt`).
    pub fn response_failed(code: impl Into<String>, message: impl Into<String>) -> Reply {
        Reply::new(ReplyBody::Failed {
            code: code.into(),
            message: message.into(),
        })
    }

    /// An HTTP error with the protocol's error body for that status
    /// (Anthropic `{"type":"error","error":{"type","message"}}`, OpenAI
    /// `{"error":{"message","type","param","code"}}`).
    pub fn status(status: u16) -> Reply {
        Reply::new(ReplyBody::Status {
            status,
            retry_after: None,
            body: None,
        })
    }

    /// The protocol's context-window error: Anthropic 400
    /// `invalid_request_error` "prompt is too long: … tokens > … maximum";
    /// OpenAI 400 with code `context_length_exceeded`.
    pub fn context_too_long() -> Reply {
        Reply::new(ReplyBody::ContextTooLong)
    }

    /// Accept the request and send nothing (not even headers) until
    /// released; then answer "ok".
    pub fn hang() -> Reply {
        Reply::text("ok").hold_before_headers()
    }

    /// Override the stop reason (normalised names: `end_turn`, `tool_use`,
    /// `max_tokens`, `stop_sequence`; OpenAI renders them as `stop`,
    /// `tool_calls`, `length`; Anthropic-only ones such as `pause_turn` are
    /// sent as given). For a message or blocks reply.
    pub fn stop_reason(mut self, reason: impl Into<String>) -> Reply {
        match &mut self.body {
            ReplyBody::Message { stop_reason, .. }
            | ReplyBody::Blocks { stop_reason, .. }
            | ReplyBody::Items { stop_reason, .. } => {
                *stop_reason = Some(reason.into());
            }
            other => panic!("a stop reason on a reply that has none: {other:?}"),
        }
        self
    }

    /// `Retry-After: n` (delta-seconds) on a status reply.
    pub fn retry_after_secs(self, seconds: u64) -> Reply {
        self.retry_after_value(seconds.to_string())
    }

    /// `Retry-After` as an HTTP-date on a status reply.
    pub fn retry_after_date(self, at: SystemTime) -> Reply {
        self.retry_after_value(httpdate::fmt_http_date(at))
    }

    fn retry_after_value(mut self, value: String) -> Reply {
        if let ReplyBody::Status { retry_after, .. } = &mut self.body {
            *retry_after = Some(value);
        }
        self
    }

    /// Replace a status reply's body (e.g. a gateway's wrapped error).
    pub fn body(mut self, text: impl Into<String>) -> Reply {
        if let ReplyBody::Status { body, .. } = &mut self.body {
            *body = Some(text.into());
        }
        self
    }

    /// An extra response header (e.g. `anthropic-ratelimit-requests-reset`).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Send nothing until [`crate::FakeProvider::release`].
    pub fn hold_before_headers(mut self) -> Reply {
        self.hold = Some(Hold::BeforeHeaders);
        self
    }

    /// Stream `n` deltas, then stall until released (then finish normally).
    pub fn hold_after_deltas(mut self, n: usize) -> Reply {
        self.hold = Some(Hold::AfterDeltas(n));
        self
    }

    /// Stream `n` deltas, then end the body cleanly without the
    /// protocol's end marker (`message_stop`, `data: [DONE]`).
    pub fn cut_after_deltas(mut self, n: usize) -> Reply {
        self.end = End::CutAfter(n);
        self
    }

    /// Stream `n` deltas, then abort the connection mid-body.
    pub fn reset_after_deltas(mut self, n: usize) -> Reply {
        self.end = End::ResetAfter(n);
        self
    }

    /// Stream `n` deltas, then the protocol's mid-stream overload error
    /// (Anthropic `event: error` with `overloaded_error`; OpenAI a `data:`
    /// chunk carrying `error`).
    pub fn error_after_deltas(mut self, n: usize) -> Reply {
        self.end = End::ErrorAfter(n);
        self
    }

    /// Wait this long before each streamed frame.
    pub fn trickle(mut self, delay: Duration) -> Reply {
        self.trickle = Some(delay);
        self
    }

    /// Reported usage (default: request bytes / 4 in, one token per delta
    /// out); `input_tokens` is the whole prompt, cached parts included.
    pub fn usage(mut self, input_tokens: u64, output_tokens: u64) -> Reply {
        self.usage = Some((input_tokens, output_tokens));
        self
    }

    /// Of the input tokens, `read` came from the prompt cache and `written`
    /// went into it: Anthropic reports them as `cache_read_input_tokens` and
    /// `cache_creation_input_tokens` beside the uncached `input_tokens`;
    /// OpenAI the reads as `prompt_tokens_details.cached_tokens` (it has no
    /// writes to report).
    pub fn cache_tokens(mut self, read: u64, written: u64) -> Reply {
        self.cache_tokens = (read, written);
        self
    }

    /// Of the output tokens, `n` were reasoning: OpenAI reports them as
    /// `completion_tokens_details.reasoning_tokens` (Chat Completions) or
    /// `output_tokens_details.reasoning_tokens` (Responses).
    pub fn reasoning_tokens(mut self, n: u64) -> Reply {
        self.reasoning_tokens = n;
        self
    }

    /// The response names `model` as the model that answered, as providers
    /// name a dated snapshot of the alias requested
    /// (`claude-sonnet-4-5` → `claude-sonnet-4-5-20250929`).
    pub fn answered_by(mut self, model: impl Into<String>) -> Reply {
        self.answered_by = Some(model.into());
        self
    }
}

/// A text as the deltas it streams as: one per word, whitespace attached
/// to the word before it; a single word is split in two.
pub(crate) fn text_pieces(text: &str) -> Vec<String> {
    if text.is_empty() {
        return Vec::new();
    }
    let pieces: Vec<String> = text.split_inclusive(' ').map(str::to_owned).collect();
    if pieces.len() > 1 {
        return pieces;
    }
    let chars = text.chars().count();
    if chars < 2 {
        return pieces;
    }
    let (at, _) = text.char_indices().nth(chars / 2).unwrap_or((0, ' '));
    vec![text[..at].to_owned(), text[at..].to_owned()]
}

/// A tool input's JSON text as three fragments (split at character
/// boundaries, so fragments break strings and keys mid-way, as real
/// streams do).
pub(crate) fn json_fragments(input: &Value) -> Vec<String> {
    let json = input.to_string();
    let chars: Vec<char> = json.chars().collect();
    let size = chars.len().div_ceil(3).max(1);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_splits_into_several_pieces_that_rejoin() {
        assert_eq!(text_pieces("Hello big world"), ["Hello ", "big ", "world"]);
        assert_eq!(text_pieces("ok"), ["o", "k"]);
        assert_eq!(text_pieces("x"), ["x"]);
        assert!(text_pieces("").is_empty());
    }

    #[test]
    fn json_fragments_rejoin_to_the_input() {
        let input = json!({"city": "Zürich", "days": 3});
        let fragments = json_fragments(&input);
        assert_eq!(fragments.len(), 3);
        assert_eq!(fragments.concat(), input.to_string());
    }
}
