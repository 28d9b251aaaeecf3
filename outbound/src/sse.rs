//! An incremental decoder for `text/event-stream` bodies (the WHATWG
//! server-sent events format): bytes in, whole events out. `field: value`
//! lines; a blank line dispatches the event; lines starting with `:` are
//! comments (keep-alives, Holdfast's heartbeats).
//!
//! Its readers: the model providers (Anthropic names each event with an
//! `event:` line and repeats the name in the JSON's `type`; OpenAI sends bare
//! `data:` lines and ends with `data: [DONE]`) and the client CLI following
//! Holdfast's own stream, which resumes with `Last-Event-ID` from `id:`.

/// One dispatched event (also the schema of each event of Holdfast's own
/// stream in its OpenAPI document).
#[derive(Clone, Debug, Default, PartialEq, Eq, utoipa::ToSchema)]
pub struct SseEvent {
    /// `id:` (Holdfast: a saved event's seq; absent on live deltas).
    pub id: Option<String>,
    /// `event:`, the event's name.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// Buffers a partial line between chunks; lines end with `\n` or `\r\n`
/// (what HTTP servers send in practice; a lone `\r` terminator is not
/// supported).
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
            // A whole line never splits a UTF-8 sequence; invalid bytes
            // can only come from a broken server and become U+FFFD.
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
            // An event without data lines is not dispatched (WHATWG).
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
            _ => {} // retry: nobody here reconnects on the server's say
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            id: None,
            event: event.map(str::to_owned),
            data: data.into(),
        }
    }

    #[test]
    fn decodes_named_events_split_across_chunks() {
        let mut d = SseDecoder::default();
        assert!(d.push(b"event: ping\ndata: {\"ty").is_empty());
        assert_eq!(
            d.push(b"pe\":\"ping\"}\n\nevent: message_stop\r\ndata: {}\r\n\r\n"),
            vec![
                ev(Some("ping"), "{\"type\":\"ping\"}"),
                ev(Some("message_stop"), "{}")
            ]
        );
    }

    #[test]
    fn joins_data_lines_and_skips_comments() {
        let mut d = SseDecoder::default();
        assert_eq!(
            d.push(b": keep-alive\n\ndata: a\ndata:b\n\ndata: [DONE]\n\n"),
            vec![ev(None, "a\nb"), ev(None, "[DONE]")]
        );
    }

    #[test]
    fn keeps_multibyte_text_split_between_chunks() {
        let mut d = SseDecoder::default();
        let bytes = "data: héllo\n\n".as_bytes();
        let split = bytes.iter().position(|&b| b == 0xC3).unwrap() + 1;
        assert!(d.push(&bytes[..split]).is_empty());
        assert_eq!(d.push(&bytes[split..]), vec![ev(None, "héllo")]);
    }

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
                ev(Some("delta"), "a\nb"),
            ]
        );
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// Bytes biased towards what the decoder branches on.
        fn stream_bytes() -> impl Strategy<Value = Vec<u8>> {
            let piece = prop_oneof![
                Just(b"\n".to_vec()),
                Just(b"\r\n".to_vec()),
                Just(b"data: ".to_vec()),
                Just(b"event:".to_vec()),
                Just(b"id:".to_vec()),
                Just(b": ".to_vec()),
                Just("é€😀".as_bytes().to_vec()),
                proptest::collection::vec(any::<u8>(), 0..8),
            ];
            proptest::collection::vec(piece, 0..64).prop_map(|p| p.concat())
        }

        fn decode_in_chunks(bytes: &[u8], cuts: &[usize]) -> Vec<SseEvent> {
            let mut decoder = SseDecoder::default();
            let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
            cuts.sort_unstable();
            let mut events = Vec::new();
            let mut from = 0;
            for cut in cuts.into_iter().chain([bytes.len()]) {
                events.extend(decoder.push(&bytes[from..cut]));
                from = cut;
            }
            events
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn any_bytes_in_any_chunks_decode_as_they_do_whole(
                bytes in stream_bytes(),
                cuts in proptest::collection::vec(any::<usize>(), 0..8),
            ) {
                let whole = SseDecoder::default().push(&bytes);
                prop_assert_eq!(decode_in_chunks(&bytes, &cuts), whole);
            }

            #[test]
            fn arbitrary_utf8_ids_and_data_come_back_exactly(
                id in "[^\r\n]*",
                lines in proptest::collection::vec("[^\r\n]*", 1..4),
                cuts in proptest::collection::vec(any::<usize>(), 0..8),
            ) {
                let mut body = format!("id: {id}\nevent: x\n");
                for line in &lines {
                    body.push_str("data: ");
                    body.push_str(line);
                    body.push('\n');
                }
                body.push('\n');
                let events = decode_in_chunks(body.as_bytes(), &cuts);
                prop_assert_eq!(events, vec![SseEvent {
                    id: Some(id),
                    event: Some("x".into()),
                    data: lines.join("\n"),
                }]);
            }
        }
    }
}
