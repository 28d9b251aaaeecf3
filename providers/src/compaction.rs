//! Compaction support: estimating a request's size before sending it, and
//! building the call that summarises older history when it no longer fits.
//!
//! The worker decides when to compact (the provider said the context is too
//! long, or [`super::Providers::should_compact`] says it soon will be),
//! calls the model with [`summary_request`], and replaces the messages
//! before [`compaction_split`] with [`summary_message`] of the answer.

use super::{media_blocks, ContentBlock, MediaSource, Message, ModelRequest, Role};
use crate::history::tool_result_text;

/// Tokens counted for each message's framing (role markers and the like).
const TOKENS_PER_MESSAGE: u64 = 3;

/// Longest text of one tool result or tool input kept in the transcript the
/// summariser reads: enough for the gist, and it keeps a history made of
/// huge tool outputs summarisable.
const TRANSCRIPT_BLOCK_LIMIT: usize = 4000;

const SUMMARY_SYSTEM: &str = "You summarise the earlier part of a conversation between a user \
and an AI agent that uses tools, so the agent can continue the work without the original \
messages. Keep every fact the agent still needs: the user's goals and constraints, decisions \
made, what was tried and with what result, names, paths, identifiers, numbers, and open \
questions. Leave out pleasantries and repetition. Write plain prose or short lists; do not \
address the user.";

/// A rough token count of everything the request sends: characters / 4,
/// rounded up, plus a few tokens per message. It needs no tokenizer and
/// errs low for code and JSON (closer to 3 characters a token), so callers
/// compare it to a fraction of the context window, not the whole.
pub fn estimate_tokens(request: &ModelRequest) -> u64 {
    let mut chars = request.system.as_deref().map_or(0, char_count);
    for tool in &request.tools {
        chars +=
            char_count(&tool.name) + char_count(&tool.description) + json_chars(&tool.input_schema);
    }
    for message in &request.messages {
        chars += message.content.iter().map(block_chars).sum::<u64>();
    }
    chars.div_ceil(4) + TOKENS_PER_MESSAGE * request.messages.len() as u64
}

/// Anthropic's documented cost of an image at its largest (about 1.15
/// megapixels): images are counted at it, whatever their size.
const IMAGE_TOKENS: u64 = 1600;

/// Bytes of PDF counted as one token: about 1,500 to 3,000 tokens a page
/// (Anthropic's figure) at a typical 50 to 100 KB a page.
const PDF_BYTES_PER_TOKEN: u64 = 32;

/// A document at a URL, whose size is unknown here: a few pages.
const DOCUMENT_URL_TOKENS: u64 = 6000;

/// One block's size in characters for [`estimate_tokens`]: an image or a
/// document by its estimated tokens (×4), never its base64 length.
fn block_chars(block: &ContentBlock) -> u64 {
    match block {
        ContentBlock::Text { text } => char_count(text),
        ContentBlock::ToolUse { name, input, .. } => char_count(name) + json_chars(input),
        ContentBlock::ToolResult { content, .. } => match media_blocks(content) {
            Some(blocks) => blocks.iter().map(block_chars).sum(),
            None => char_count(&tool_result_text(content)),
        },
        ContentBlock::Image { .. } => IMAGE_TOKENS * 4,
        ContentBlock::Document { source } => match source {
            // Base64: four characters for three bytes.
            MediaSource::Base64 { data, .. } => data.len() as u64 * 3 / 4 / PDF_BYTES_PER_TOKEN * 4,
            MediaSource::Attachment { size_bytes, .. } => size_bytes / PDF_BYTES_PER_TOKEN * 4,
            MediaSource::Url { .. } => DOCUMENT_URL_TOKENS * 4,
        },
        ContentBlock::Raw(raw) => json_chars(raw),
    }
}

fn char_count(text: &str) -> u64 {
    text.chars().count() as u64
}

/// The length in characters of `value`'s JSON text, counted as it is
/// written instead of from a string of it: a step estimates its whole
/// history, tool inputs and schemas included.
fn json_chars(value: &serde_json::Value) -> u64 {
    struct Chars(u64);
    impl std::io::Write for Chars {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            // A character starts at each byte that is not a UTF-8
            // continuation byte (10xxxxxx).
            self.0 += bytes.iter().filter(|b| **b & 0xC0 != 0x80).count() as u64;
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut chars = Chars(0);
    // A Value always serialises, and this writer never fails.
    let _ = serde_json::to_writer(&mut chars, value);
    chars.0
}

/// Where the kept tail of `messages` begins when compacting with the last
/// `keep_last` messages kept: `messages[..split]` is summarised,
/// `messages[split..]` kept. Moved earlier when needed so that no kept tool
/// result answers a tool call that would be summarised away (providers
/// reject a `tool_result` without its `tool_use`). 0 means there is nothing
/// to summarise; a caller that must shrink the context anyway passes a
/// smaller `keep_last` (0 summarises everything).
pub fn compaction_split(messages: &[Message], keep_last: usize) -> usize {
    let mut split = messages.len().saturating_sub(keep_last);
    while split > 0 && has_orphan_tool_results(&messages[split..]) {
        split -= 1;
    }
    split
}

fn has_orphan_tool_results(tail: &[Message]) -> bool {
    let calls: std::collections::HashSet<&str> = tail
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            ContentBlock::ToolUse { id, .. } => Some(id.as_str()),
            _ => None,
        })
        .collect();
    tail.iter().flat_map(|m| &m.content).any(|b| {
        matches!(b, ContentBlock::ToolResult { tool_use_id, .. } if !calls.contains(tool_use_id.as_str()))
    })
}

/// The model call that summarises `request.messages[..compaction_split(..)]`:
/// the same model, no tools, a summariser's system prompt, and one user
/// message holding the older history as a transcript (tool calls and
/// results as text, each cut to a few thousand characters). The agent's own
/// system prompt is included as context, so the summary keeps what matters
/// for the agent's task.
pub fn summary_request(request: &ModelRequest, keep_last: usize) -> ModelRequest {
    let split = compaction_split(&request.messages, keep_last);
    let mut prompt = String::new();
    if let Some(system) = request.system.as_deref().filter(|s| !s.is_empty()) {
        prompt.push_str("The agent's instructions (for context only):\n<instructions>\n");
        prompt.push_str(&clip(system));
        prompt.push_str("\n</instructions>\n\n");
    }
    prompt.push_str("The conversation so far:\n<transcript>\n");
    for message in &request.messages[..split] {
        prompt.push_str(match message.role {
            Role::User => "\nUser:\n",
            Role::Assistant => "\nAgent:\n",
        });
        for block in &message.content {
            if is_thinking(block) {
                // The model's private reasoning (an encrypted blob, for
                // redacted thinking) says nothing the summary needs.
                continue;
            }
            match block {
                ContentBlock::Text { text } => prompt.push_str(text),
                ContentBlock::ToolUse { name, input, .. } => {
                    prompt.push_str(&format!(
                        "[called tool {name} with input {}]",
                        clip(&input.to_string())
                    ));
                }
                ContentBlock::ToolResult {
                    content, is_error, ..
                } => {
                    let label = if *is_error {
                        "tool error"
                    } else {
                        "tool result"
                    };
                    prompt.push_str(&format!("[{label}: {}]", clip(&tool_result_text(content))));
                }
                ContentBlock::Image { .. } => prompt.push_str("[image]"),
                ContentBlock::Document { .. } => prompt.push_str("[document]"),
                raw @ ContentBlock::Raw(value) => match raw.text() {
                    Some(text) => prompt.push_str(text),
                    None => prompt.push_str(&format!("[{}]", clip(&value.to_string()))),
                },
            }
            prompt.push('\n');
        }
    }
    prompt.push_str("</transcript>\n\nSummarise the conversation above.");
    ModelRequest {
        model: request.model.clone(),
        system: Some(SUMMARY_SYSTEM.to_owned()),
        messages: vec![Message {
            role: Role::User,
            content: vec![ContentBlock::Text { text: prompt }],
        }],
        tools: Vec::new(),
        provider_tools: Vec::new(),
    }
}

/// A `thinking` or `redacted_thinking` block.
fn is_thinking(block: &ContentBlock) -> bool {
    matches!(block, ContentBlock::Raw(raw)
        if matches!(raw.get("type").and_then(serde_json::Value::as_str),
                    Some("thinking" | "redacted_thinking")))
}

/// The message that takes the summarised messages' place in the history.
pub fn summary_message(summary: &str) -> Message {
    Message {
        role: Role::User,
        content: vec![ContentBlock::Text {
            text: format!(
                "[Earlier messages of this conversation were compacted into this summary.]\n\n{summary}"
            ),
        }],
    }
}

fn clip(text: &str) -> String {
    match text.char_indices().nth(TRANSCRIPT_BLOCK_LIMIT) {
        Some((at, _)) => format!(
            "{} … [{} more characters omitted]",
            &text[..at],
            text[at..].chars().count()
        ),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_wire::config::{ModelConfig, Provider};
    use serde_json::json;

    #[test]
    fn json_chars_counts_the_characters_of_the_json_text() {
        for value in [
            json!({"city": "Zürich", "emoji": "🦀", "quote": "say \"hi\"\n", "n": [1, 2.5, null]}),
            json!("日本語"),
            json!({}),
        ] {
            assert_eq!(
                json_chars(&value),
                value.to_string().chars().count() as u64,
                "{value}"
            );
        }
    }

    fn text(role: Role, t: &str) -> Message {
        Message {
            role,
            content: vec![ContentBlock::Text { text: t.into() }],
        }
    }

    fn call(id: &str) -> Message {
        Message {
            role: Role::Assistant,
            content: vec![ContentBlock::ToolUse {
                id: id.into(),
                name: "read_file".into(),
                input: json!({"path": "/etc/hosts"}),
            }],
        }
    }

    fn result(id: &str, output: &str) -> Message {
        Message {
            role: Role::User,
            content: vec![ContentBlock::ToolResult {
                tool_use_id: id.into(),
                content: json!(output),
                is_error: false,
            }],
        }
    }

    fn request(messages: Vec<Message>) -> ModelRequest {
        ModelRequest {
            model: ModelConfig::new(Provider::Anthropic, "claude-test"),
            system: Some("You are a careful sysadmin.".into()),
            messages,
            tools: Vec::new(),
            provider_tools: Vec::new(),
        }
    }

    #[test]
    fn estimate_is_a_quarter_of_the_characters_plus_framing() {
        let r = ModelRequest {
            system: None,
            ..request(vec![text(Role::User, &"x".repeat(400))])
        };
        assert_eq!(estimate_tokens(&r), 100 + TOKENS_PER_MESSAGE);
        let bigger = request(vec![text(Role::User, &"x".repeat(4000))]);
        assert!(estimate_tokens(&bigger) > 1000);
    }

    #[test]
    fn an_image_counts_its_estimated_tokens_not_its_base64_whether_input_or_tool_result() {
        let image = json!({"type": "image",
                           "source": {"type": "base64", "media_type": "image/png",
                                      "data": "A".repeat(4_000_000)}});
        let input = ModelRequest {
            system: None,
            ..request(vec![Message {
                role: Role::User,
                content: vec![serde_json::from_value(image.clone()).unwrap()],
            }])
        };
        assert_eq!(estimate_tokens(&input), IMAGE_TOKENS + TOKENS_PER_MESSAGE);
        let tool_result = ModelRequest {
            system: None,
            ..request(vec![Message {
                role: Role::User,
                content: vec![ContentBlock::ToolResult {
                    tool_use_id: "t1".into(),
                    content: json!([{"type": "text", "text": "abcd"}, image]),
                    is_error: false,
                }],
            }])
        };
        assert_eq!(
            estimate_tokens(&tool_result),
            1 + IMAGE_TOKENS + TOKENS_PER_MESSAGE
        );
    }

    #[test]
    fn split_never_orphans_a_tool_result() {
        let history = vec![
            text(Role::User, "check the hosts file"),
            call("t1"),
            text(Role::User, "and be quick"),
            result("t1", "127.0.0.1 localhost"),
            text(Role::Assistant, "done"),
        ];
        assert_eq!(compaction_split(&history, 1), 4);
        // Keeping the last two would keep t1's result without its call.
        assert_eq!(compaction_split(&history, 2), 1);
        assert_eq!(compaction_split(&history, 10), 0);
        assert_eq!(compaction_split(&history, 0), 5);
    }

    #[test]
    fn the_transcript_leaves_out_thinking() {
        let history = vec![
            text(Role::User, "check the hosts file"),
            Message {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::Raw(json!({"type": "thinking", "thinking": "PRIVATE-THOUGHT",
                                             "signature": "SIGNATURE-BLOB"})),
                    ContentBlock::Raw(
                        json!({"type": "redacted_thinking", "data": "REDACTED-BLOB"}),
                    ),
                    ContentBlock::Text {
                        text: "it maps localhost".into(),
                    },
                ],
            },
            text(Role::User, "KEPT MESSAGE"),
        ];
        let r = summary_request(&request(history), 1);
        let ContentBlock::Text { text } = &r.messages[0].content[0] else {
            panic!("a text prompt")
        };
        assert!(text.contains("it maps localhost"));
        for hidden in ["PRIVATE-THOUGHT", "SIGNATURE-BLOB", "REDACTED-BLOB"] {
            assert!(!text.contains(hidden), "{hidden} in {text}");
        }
    }

    #[test]
    fn summary_request_holds_the_older_history_as_a_transcript() {
        let history = vec![
            text(Role::User, "check the hosts file"),
            call("t1"),
            result("t1", &"A".repeat(10_000)),
            text(Role::Assistant, "it maps localhost"),
            text(Role::User, "KEPT MESSAGE"),
        ];
        let r = summary_request(&request(history), 1);
        assert!(r.tools.is_empty());
        assert_eq!(r.messages.len(), 1);
        let ContentBlock::Text { text } = &r.messages[0].content[0] else {
            panic!("a text prompt")
        };
        assert!(text.contains("check the hosts file"));
        assert!(text.contains("[called tool read_file"));
        assert!(text.contains("it maps localhost"));
        assert!(text.contains("careful sysadmin"));
        assert!(!text.contains("KEPT MESSAGE"));
        assert!(text.contains("6000 more characters omitted"));
        assert!(text.len() < 6000);
    }
}
