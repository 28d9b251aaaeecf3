"""What ``run`` and ``text_stream`` share between the sync and async
clients: following one input's turn through the stream items. No IO here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from ._policy import StreamItem
from .errors import TurnFailedError
from .schema import EventView, InputView

#: The events that end a turn.
TURN_ENDS = ("turn.completed", "turn.failed", "turn.cancelled")


@dataclass(frozen=True)
class TextChunk:
    """Answer text as it streams. ``restart``: a model call was retried (a
    crash, a lost lease) and streams again from its start, so the text
    streamed since the last saved model response is void; this chunk is the
    first of the new try."""

    text: str
    restart: bool = False


@dataclass(frozen=True)
class RunResult:
    """The answer to ``run``: its ``text`` (the text blocks of the turn's
    last model response), that response's ``message`` (its content blocks),
    the ``turn.completed`` event, and the input as saved."""

    text: str
    message: List[Dict[str, Any]]
    event: EventView
    input: InputView
    #: The send was a replay of an earlier one with the same Idempotency-Key.
    replayed: bool


class TurnWatch:
    """Follows the stream for the turn of a queued ``input``: each queued
    input opens a turn of its own, oldest first (docs/api.md, steering
    modes), so replaying the queue from a known state finds the turn that
    admits it; then its text as it streams, its last model response, its end.

    ``queued``: the inputs queued at the seq the stream starts after, oldest
    first."""

    def __init__(self, input: InputView, replayed: bool, queued: List[str]) -> None:
        self.input = input
        self.replayed = replayed
        self._queue = list(queued)
        self._in_turn = False
        self._message: List[Dict[str, Any]] = []
        # The epoch of the model call streaming now, None between calls.
        self._streaming_epoch: Optional[int] = None

    def text(self, item: StreamItem) -> Optional[TextChunk]:
        """The answer text an item carries, if any."""
        if item["type"] != "delta" or not self._in_turn:
            return None
        epoch = item["delta"].get("epoch")
        restart = self._streaming_epoch is not None and epoch != self._streaming_epoch
        self._streaming_epoch = epoch
        return TextChunk(item["delta"]["text"], restart)

    def result(self, item: StreamItem) -> Optional[RunResult]:
        """The answer, once ``item`` ends the input's turn (raises if the
        turn failed or was cancelled)."""
        if item["type"] != "event":
            return None
        event = item["event"]
        kind, data = event["type"], event["data"]
        if kind == "input.received" and data.get("mode") == "queue" and data.get("input_id") not in self._queue:
            self._queue.append(data["input_id"])
        elif kind == "input.removed" and data.get("input_id") in self._queue:
            self._queue.remove(data["input_id"])
        elif kind == "turn.started" and self._queue:
            # A turn that opens admits the oldest queued input.
            self._in_turn = self._queue.pop(0) == self.input["id"]
        elif kind == "model.response" and self._in_turn:
            self._message = data.get("message") or []
            self._streaming_epoch = None
        elif kind in TURN_ENDS and self._in_turn:
            return self._answer(event)
        return None

    def _answer(self, ended: EventView) -> RunResult:
        if ended["type"] != "turn.completed":
            error = ended["data"].get("error") or {}
            why = f"{error.get('type')}: {error.get('message')}" if error else "cancelled"
            raise TurnFailedError(f"the turn of input {self.input['id']} ended with {ended['type']} ({why})", ended)
        text = "".join(block.get("text", "") for block in self._message if block.get("type") == "text")
        return RunResult(text, self._message, ended, self.input, self.replayed)


def queued_ids(inputs: Any) -> List[str]:
    """The ids in a ``GET .../inputs?status=queued`` answer, oldest first."""
    return [i["id"] for i in inputs["inputs"]]
