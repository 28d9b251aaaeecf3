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

    mod properties {
        use super::*;
        use proptest::prelude::*;

        /// Bytes biased towards what the decoder branches on.
        fn stream_bytes() -> impl Strategy<Value = Vec<u8>> {
            let piece = prop_oneof![
                Just(b"\n".to_vec()),
                Just(b"\r\n".to_vec()),
                Just(b"data: ".to_vec()),
                Just(b"id:".to_vec()),
                Just(b"event: ".to_vec()),
                Just(b":".to_vec()),
                Just("é€😀".as_bytes().to_vec()),
                proptest::collection::vec(any::<u8>(), 0..8),
            ];
            proptest::collection::vec(piece, 0..64).prop_map(|p| p.concat())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn any_bytes_in_any_chunks_decode_as_they_do_whole(
                bytes in stream_bytes(),
                cut in any::<usize>(),
            ) {
                let whole = SseDecoder::default().push(&bytes);
                let cut = cut % (bytes.len() + 1);
                let mut decoder = SseDecoder::default();
                let mut split = decoder.push(&bytes[..cut]);
                split.extend(decoder.push(&bytes[cut..]));
                prop_assert_eq!(split, whole);
            }

            #[test]
            fn arbitrary_utf8_ids_and_data_come_back_exactly(
                id in "[^\r\n]*",
                data in "[^\r\n]*",
            ) {
                let body = format!("id: {id}\ndata: {data}\n\n");
                let events = SseDecoder::default().push(body.as_bytes());
                prop_assert_eq!(events, vec![SseEvent { id: Some(id), event: None, data }]);
            }
        }
    }
}
