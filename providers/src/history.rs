//! The saved history, shaped for the wire.
//!
//! Holdfast's history can hold consecutive messages of one role (a tool
//! result and a steering input arriving meanwhile are two user messages).
//! Anthropic requires roles to alternate, and both providers want a user
//! turn's tool results before its text (Anthropic rejects text before
//! `tool_result` blocks; OpenAI needs `tool` messages right after the
//! assistant message that made the calls). Empty text blocks are dropped:
//! Anthropic rejects them and they carry nothing.

use super::{media_blocks, ContentBlock, Message, Role};

/// Merge consecutive same-role messages, put tool results first within each
/// user message, drop empty text blocks and messages left empty.
pub(crate) fn normalise(messages: &[Message]) -> Vec<Message> {
    let mut merged: Vec<Message> = Vec::new();
    for message in messages {
        let blocks = message
            .content
            .iter()
            .filter(|b| !matches!(b, ContentBlock::Text { text } if text.is_empty()))
            .cloned();
        match merged.last_mut() {
            Some(last) if last.role == message.role => last.content.extend(blocks),
            _ => merged.push(Message {
                role: message.role,
                content: blocks.collect(),
            }),
        }
    }
    merged.retain(|m| !m.content.is_empty());
    for message in merged.iter_mut().filter(|m| m.role == Role::User) {
        // Stable: keeps the order within tool results and within the rest.
        message
            .content
            .sort_by_key(|b| !matches!(b, ContentBlock::ToolResult { .. }));
    }
    merged
}

/// A tool result's content as text: a JSON string as-is, content blocks
/// ([`media_blocks`]) as their text with a placeholder for each image or
/// document (never the base64), any other JSON as its JSON text.
pub(crate) fn tool_result_text(content: &serde_json::Value) -> String {
    if let Some(blocks) = media_blocks(content) {
        return blocks
            .iter()
            .map(|block| match block {
                ContentBlock::Image { .. } => "[image]",
                ContentBlock::Document { .. } => "[document]",
                other => other.text().unwrap_or_default(),
            })
            .collect::<Vec<_>>()
            .join("\n");
    }
    match content {
        serde_json::Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// A tool result as text for a protocol with no error flag on tool output
/// (Chat Completions, Responses): an error result is prefixed `Error: `.
pub(crate) fn tool_output_text(content: &serde_json::Value, is_error: bool) -> String {
    let output = tool_result_text(content);
    if is_error {
        format!("Error: {output}")
    } else {
        output
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(t: &str) -> ContentBlock {
        ContentBlock::Text { text: t.into() }
    }

    #[test]
    fn merges_same_role_runs_and_puts_tool_results_first() {
        let result = ContentBlock::ToolResult {
            tool_use_id: "t1".into(),
            content: json!("42"),
            is_error: false,
        };
        let history = vec![
            Message {
                role: Role::User,
                content: vec![text("hi")],
            },
            Message {
                role: Role::Assistant,
                content: vec![
                    text(""),
                    ContentBlock::ToolUse {
                        id: "t1".into(),
                        name: "calc".into(),
                        input: json!({}),
                    },
                ],
            },
            Message {
                role: Role::User,
                content: vec![text("also, hurry")],
            },
            Message {
                role: Role::User,
                content: vec![result.clone()],
            },
            Message {
                role: Role::User,
                content: vec![text("")],
            },
        ];
        let wire = normalise(&history);
        assert_eq!(wire.len(), 3);
        assert_eq!(wire[1].content.len(), 1, "empty text dropped");
        assert_eq!(wire[2].content, vec![result, text("also, hurry")]);
    }

    #[test]
    fn tool_result_text_keeps_strings_and_serialises_the_rest() {
        assert_eq!(tool_result_text(&json!("plain")), "plain");
        assert_eq!(tool_result_text(&json!({"a": 1})), r#"{"a":1}"#);
    }
}
