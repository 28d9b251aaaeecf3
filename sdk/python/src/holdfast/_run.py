"""What ``run`` and ``text_stream`` share between the sync and async
clients: following one input's turn through the stream items. No IO here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, NoReturn, Optional

from ._policy import StreamItem
from .errors import TurnFailedError
from .schema import EventView, InputView, TurnCompletedEvent

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
    event: TurnCompletedEvent
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
        # Each branch compares event["type"] itself, so the type checker
        # narrows the event to that type's variant (and its data).
        if event["type"] == "input.received":
            if event["data"]["mode"] == "queue" and event["data"]["input_id"] not in self._queue:
                self._queue.append(event["data"]["input_id"])
        elif event["type"] == "input.removed":
            if event["data"]["input_id"] in self._queue:
                self._queue.remove(event["data"]["input_id"])
        elif event["type"] == "turn.started":
            if self._queue:
                # A turn that opens admits the oldest queued input.
                self._in_turn = self._queue.pop(0) == self.input["id"]
        elif event["type"] == "model.response":
            if self._in_turn:
                self._message = event["data"]["message"]
                self._streaming_epoch = None
        elif event["type"] == "turn.completed":
            if self._in_turn:
                text = "".join(block.get("text", "") for block in self._message if block.get("type") == "text")
                return RunResult(text, self._message, event, self.input, self.replayed)
        elif event["type"] == "turn.failed":
            if self._in_turn:
                error = event["data"]["error"]
                self._ended(event, f"{error['type']}: {error['message']}")
        elif event["type"] == "turn.cancelled":
            if self._in_turn:
                self._ended(event, "cancelled")
        return None

    def _ended(self, ended: EventView, why: str) -> NoReturn:
        raise TurnFailedError(f"the turn of input {self.input['id']} ended with {ended['type']} ({why})", ended)


def queued_ids(inputs: Any) -> List[str]:
    """The ids in a ``GET .../inputs?status=queued`` answer, oldest first."""
    return [i["id"] for i in inputs["inputs"]]
