//! A minimal Server-Sent Events reader for tests (the WHATWG event-stream
//! format): `field: value` lines, a blank line ends an event, lines starting
//! with `:` are comments.

use std::time::Duration;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use reqwest::Response;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

impl SseEvent {
    /// The id as a seq (saved events have one).
    pub fn seq(&self) -> Option<i64> {
        self.id.as_deref().and_then(|id| id.parse().ok())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.data).expect("event data is JSON")
    }
}

/// What the reader saw next.
#[derive(Debug, PartialEq, Eq)]
pub enum SseItem {
    Event(SseEvent),
    Comment(String),
    /// The server ended the response.
    End,
}

pub struct SseReader {
    body: BoxStream<'static, reqwest::Result<Bytes>>,
    buffer: Vec<u8>,
    pending: SseEvent,
    has_data: bool,
}

impl SseReader {
    /// Read `response` (checked to be a 200 event stream) as events.
    pub fn new(response: Response) -> SseReader {
        assert_eq!(response.status(), 200, "stream status");
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        assert!(
            content_type.starts_with("text/event-stream"),
            "content-type {content_type}"
        );
        SseReader {
            body: response.bytes_stream().boxed(),
            buffer: Vec::new(),
            pending: SseEvent::default(),
            has_data: false,
        }
    }

    /// The next event, comment or end; panics after `timeout`.
    pub async fn next_item(&mut self, timeout: Duration) -> SseItem {
        tokio::time::timeout(timeout, self.read_item())
            .await
            .unwrap_or_else(|_| panic!("no SSE item within {timeout:?}"))
    }

    /// The next event (comments skipped); `None` at the end of the stream.
    pub async fn next_event(&mut self, timeout: Duration) -> Option<SseEvent> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next_item(left).await {
                SseItem::Event(event) => return Some(event),
                SseItem::Comment(_) => continue,
                SseItem::End => return None,
            }
        }
    }

    async fn read_item(&mut self) -> SseItem {
        loop {
            while let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
                let mut line: Vec<u8> = self.buffer.drain(..=end).collect();
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                let line = String::from_utf8(line).expect("SSE is UTF-8");
                if let Some(item) = self.take_line(&line) {
                    return item;
                }
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.buffer.extend_from_slice(&chunk),
                Some(Err(_)) | None => return SseItem::End,
            }
        }
    }

    fn take_line(&mut self, line: &str) -> Option<SseItem> {
        if line.is_empty() {
            let event = std::mem::take(&mut self.pending);
            let dispatch = std::mem::take(&mut self.has_data);
            return dispatch.then_some(SseItem::Event(event));
        }
        if let Some(comment) = line.strip_prefix(':') {
            return Some(SseItem::Comment(comment.trim_start().to_owned()));
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "id" => self.pending.id = Some(value.to_owned()),
            "event" => self.pending.event = Some(value.to_owned()),
            "data" => {
                if self.has_data {
                    self.pending.data.push('\n');
                }
                self.pending.data.push_str(value);
                self.has_data = true;
            }
            _ => {}
        }
        None
    }
}
