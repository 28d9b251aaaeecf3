//! An incremental reader of `text/event-stream` bodies (the WHATWG format):
//! `field: value` lines, a blank line dispatches the event, lines starting
//! with `:` are comments (Holdfast's heartbeats). Unlike the providers'
//! decoder in the engine, this one keeps `id:`, which is how the client
//! resumes a stream with `Last-Event-ID`.

/// One dispatched event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// `id:` — a saved event's seq; absent on live deltas.
    pub id: Option<String>,
    /// `event:` — the event type (`delta` for live text).
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// Buffers a partial line between chunks.
#[derive(Default)]
pub struct SseDecoder {
    pending: Vec<u8>,
    current: SseEvent,
    has_data: bool,
}

impl SseDecoder {
    /// Feed a chunk; returns the events it completed, in order.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        self.pending.extend_from_slice(chunk);
        let mut events = Vec::new();
        let mut start = 0;
        while let Some(offset) = self.pending[start..].iter().position(|&b| b == b'\n') {
            let end = start + offset;
            let mut line = &self.pending[start..end];
            if line.last() == Some(&b'\r') {
                line = &line[..line.len() - 1];
            }
            let line = String::from_utf8_lossy(line).into_owned();
            if let Some(event) = self.line(&line) {
                events.push(event);
            }
            start = end + 1;
        }
        self.pending.drain(..start);
        events
    }

    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            let event = std::mem::take(&mut self.current);
            let has_data = std::mem::take(&mut self.has_data);
            return has_data.then_some(event);
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "id" => self.current.id = Some(value.to_owned()),
            "event" => self.current.event = Some(value.to_owned()),
            "data" => {
                if self.has_data {
                    self.current.data.push('\n');
                }
                self.current.data.push_str(value);
                self.has_data = true;
            }
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_chunks_come_out_whole_with_their_ids() {
        let mut decoder = SseDecoder::default();
        assert!(decoder
            .push(b": heartbeat\n\nid: 4\nevent: turn.sta")
            .is_empty());
        let events = decoder.push(b"rted\ndata: {}\n\nevent: delta\r\ndata: a\ndata: b\n\n");
        assert_eq!(
            events,
            vec![
                SseEvent {
                    id: Some("4".into()),
                    event: Some("turn.started".into()),
                    data: "{}".into(),
                },
                SseEvent {
                    id: None,
                    event: Some("delta".into()),
                    data: "a\nb".into(),
                },
            ]
        );
    }
}
