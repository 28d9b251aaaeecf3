//! An incremental decoder for `text/event-stream` bodies (the WHATWG
//! server-sent events format): bytes in, whole events out.
//!
//! Both providers stream this way: Anthropic names each event (`event:`
//! line) and repeats the name in the JSON's `type`; OpenAI sends bare
//! `data:` lines and ends with `data: [DONE]`.

/// One dispatched event: its `event:` name (empty when none was given) and
/// its `data:` lines joined with `\n`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SseEvent {
    pub event: String,
    pub data: String,
}

/// Buffers a partial line between chunks; lines end with `\n` or `\r\n`
/// (what HTTP servers send in practice; a lone `\r` terminator is not
/// supported).
#[derive(Default)]
pub(crate) struct SseDecoder {
    pending: Vec<u8>,
    event: String,
    data: Vec<String>,
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
            if self.data.is_empty() {
                self.event.clear();
                return None;
            }
            let event = SseEvent {
                event: std::mem::take(&mut self.event),
                data: std::mem::take(&mut self.data).join("\n"),
            };
            return Some(event);
        }
        if line.starts_with(':') {
            return None; // comment (keep-alive)
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = value.to_owned(),
            "data" => self.data.push(value.to_owned()),
            _ => {} // id, retry: not used by either provider
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
        }
    }

    #[test]
    fn decodes_named_events_split_across_chunks() {
        let mut d = SseDecoder::default();
        assert!(d.push(b"event: ping\ndata: {\"ty").is_empty());
        assert_eq!(
            d.push(b"pe\":\"ping\"}\n\nevent: message_stop\r\ndata: {}\r\n\r\n"),
            vec![ev("ping", "{\"type\":\"ping\"}"), ev("message_stop", "{}")]
        );
    }

    #[test]
    fn joins_data_lines_and_skips_comments() {
        let mut d = SseDecoder::default();
        assert_eq!(
            d.push(b": keep-alive\n\ndata: a\ndata:b\n\ndata: [DONE]\n\n"),
            vec![ev("", "a\nb"), ev("", "[DONE]")]
        );
    }

    #[test]
    fn keeps_multibyte_text_split_between_chunks() {
        let mut d = SseDecoder::default();
        let bytes = "data: héllo\n\n".as_bytes();
        let split = bytes.iter().position(|&b| b == 0xC3).unwrap() + 1;
        assert!(d.push(&bytes[..split]).is_empty());
        assert_eq!(d.push(&bytes[split..]), vec![ev("", "héllo")]);
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
            fn arbitrary_utf8_data_comes_back_exactly(
                lines in proptest::collection::vec("[^\r\n]*", 1..4),
                cuts in proptest::collection::vec(any::<usize>(), 0..8),
            ) {
                let mut body = String::from("event: x\n");
                for line in &lines {
                    body.push_str("data: ");
                    body.push_str(line);
                    body.push('\n');
                }
                body.push('\n');
                let events = decode_in_chunks(body.as_bytes(), &cuts);
                prop_assert_eq!(events, vec![ev("x", &lines.join("\n"))]);
            }
        }
    }
}
