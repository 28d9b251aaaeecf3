"""The SSE decoder: fields, comments, multi-line data, messages without an id."""

from holdfast._sse import SseDecoder, SseMessage


def test_messages_ids_comments_and_multi_line_data():
    decoder = SseDecoder()
    lines = [": heartbeat", "", "id: 7", "event: turn.started", 'data: {"a":', "data: 1}", "", "event: delta", "data: {}", ""]
    messages = [m for m in (decoder.feed(line) for line in lines) if m is not None]
    assert messages == [SseMessage("7", "turn.started", '{"a":\n1}'), SseMessage(None, "delta", "{}")]
