//! Image and document URLs checked again before each model call that would
//! send them (`content_url` in the egress policy). The API checks them when
//! an input or tool result carries them, but the model provider fetches
//! them at every call, and a name may resolve somewhere else by then; a
//! self-hosted provider would fetch it from inside the operator's network.
//! A refused block is sent as a text block saying why it was left out, so
//! the model knows what it lacks, and the step records `content.left_out`
//! for each refused URL, so whoever reads the timeline knows too.

use std::collections::HashMap;

use holdfast_providers::egress::{EgressKind, EgressPolicy, EgressRefused};
use holdfast_providers::{ContentBlock, MediaSource, Message};
use reqwest::Url;
use serde_json::{json, Value};

/// Replaces each image or document block of `messages` whose URL the
/// policy refuses (tool results' blocks included) with a text block naming
/// the refusal, and returns the refused URLs with their reasons, in URL
/// order. Each distinct URL is checked once per call.
pub async fn leave_out_refused(
    egress: &EgressPolicy,
    messages: &mut [Message],
) -> Vec<(String, String)> {
    let mut verdicts: HashMap<String, Option<String>> = HashMap::new();
    for url in messages.iter().flat_map(|m| &m.content).flat_map(urls) {
        if let std::collections::hash_map::Entry::Vacant(slot) = verdicts.entry(url) {
            let verdict = check(egress, slot.key()).await.err().map(|e| e.to_string());
            slot.insert(verdict);
        }
    }
    let mut refused: Vec<(String, String)> = verdicts
        .iter()
        .filter_map(|(url, verdict)| Some((url.clone(), verdict.clone()?)))
        .collect();
    if refused.is_empty() {
        return refused;
    }
    refused.sort();
    let refusal = |url: &str| verdicts.get(url).cloned().flatten();
    for block in messages.iter_mut().flat_map(|m| m.content.iter_mut()) {
        match block {
            ContentBlock::Image {
                source: MediaSource::Url { url },
            }
            | ContentBlock::Document {
                source: MediaSource::Url { url },
            } => {
                if let Some(reason) = refusal(url) {
                    let kind = if matches!(block, ContentBlock::Image { .. }) {
                        "image"
                    } else {
                        "document"
                    };
                    *block = ContentBlock::Text {
                        text: left_out(kind, &reason),
                    };
                }
            }
            ContentBlock::ToolResult { content, .. } => {
                for inner in content.as_array_mut().into_iter().flatten() {
                    let (Some(kind), Some(url)) = (media_kind(inner), inner_url(inner)) else {
                        continue;
                    };
                    if let Some(reason) = refusal(&url) {
                        *inner = json!({"type": "text", "text": left_out(&kind, &reason)});
                    }
                }
            }
            _ => {}
        }
    }
    refused
}

/// The policy's verdict on `url`: an IP literal as it is, a name by what it
/// resolves to now. A name that does not resolve here passes, as at the
/// API ([`EgressPolicy::check_configured_url`]): the provider resolves it
/// itself, and nothing shows it points inside.
async fn check(egress: &EgressPolicy, url: &str) -> Result<(), EgressRefused> {
    match Url::parse(url) {
        Ok(parsed) => {
            egress
                .check_configured_url(EgressKind::ContentUrl, &parsed)
                .await
        }
        Err(_) => Err(EgressRefused::BadUrl {
            url: url.to_owned(),
        }),
    }
}

fn left_out(kind: &str, reason: &str) -> String {
    format!("[{kind} left out: {reason}]")
}

/// The URLs a block would have the provider fetch.
fn urls(block: &ContentBlock) -> Vec<String> {
    match block {
        ContentBlock::Image {
            source: MediaSource::Url { url },
        }
        | ContentBlock::Document {
            source: MediaSource::Url { url },
        } => vec![url.clone()],
        ContentBlock::ToolResult { content, .. } => content
            .as_array()
            .into_iter()
            .flatten()
            .filter(|b| media_kind(b).is_some())
            .filter_map(inner_url)
            .collect(),
        _ => Vec::new(),
    }
}

/// `image` or `document` for such a block of a tool's output.
fn media_kind(block: &Value) -> Option<String> {
    let kind = block.get("type")?.as_str()?;
    matches!(kind, "image" | "document").then(|| kind.to_owned())
}

fn inner_url(block: &Value) -> Option<String> {
    (block.pointer("/source/type")?.as_str()? == "url")
        .then(|| block.pointer("/source/url")?.as_str().map(str::to_owned))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use holdfast_providers::Role;

    #[tokio::test]
    async fn refused_urls_are_left_out_with_the_reason_and_public_ones_kept() {
        let egress = EgressPolicy::default();
        let image = |url: &str| ContentBlock::Image {
            source: MediaSource::Url { url: url.into() },
        };
        let mut messages = vec![
            Message {
                role: Role::User,
                content: vec![
                    image("http://169.254.169.254/latest/meta-data"),
                    image("https://93.184.216.34/cat.png"),
                ],
            },
            Message {
                role: Role::User,
                content: vec![ContentBlock::ToolResult {
                    tool_use_id: "t1".into(),
                    content: json!([
                        {"type": "text", "text": "chart"},
                        {"type": "document", "source": {"type": "url", "url": "http://localhost/a.pdf"}}
                    ]),
                    is_error: false,
                }],
            },
        ];
        let refused = leave_out_refused(&egress, &mut messages).await;
        let urls: Vec<&str> = refused.iter().map(|(url, _)| url.as_str()).collect();
        assert_eq!(
            urls,
            [
                "http://169.254.169.254/latest/meta-data",
                "http://localhost/a.pdf"
            ],
            "the refused URLs, for the timeline"
        );
        assert!(refused[0].1.starts_with("egress refused: "), "{refused:?}");
        let ContentBlock::Text { text } = &messages[0].content[0] else {
            panic!("not left out: {:?}", messages[0].content[0]);
        };
        assert!(
            text.starts_with("[image left out: egress refused: 169.254.169.254 is in link-local"),
            "{text}"
        );
        assert!(text.contains("content_url="), "{text}");
        assert_eq!(
            messages[0].content[1],
            image("https://93.184.216.34/cat.png")
        );
        let ContentBlock::ToolResult { content, .. } = &messages[1].content[0] else {
            panic!("the tool result changed kind");
        };
        let text = content[1]["text"].as_str().unwrap();
        assert!(
            text.starts_with("[document left out: egress refused: localhost resolves to "),
            "{text}"
        );
    }
}
