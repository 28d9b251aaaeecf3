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
    """Follows the stream for the turn that answers ``input``: its text as
    it streams, its last model response, its end."""

    def __init__(self, input: InputView, replayed: bool) -> None:
        self.input = input
        self.replayed = replayed
        self._received = False
        self._message: List[Dict[str, Any]] = []
        # The epoch of the model call streaming now, None between calls.
        self._streaming_epoch: Optional[int] = None

    def text(self, item: StreamItem) -> Optional[TextChunk]:
        """The answer text an item carries, if any."""
        if item["type"] != "delta" or not self._received:
            return None
        epoch = item["delta"].get("epoch")
        restart = self._streaming_epoch is not None and epoch != self._streaming_epoch
        self._streaming_epoch = epoch
        return TextChunk(item["delta"]["text"], restart)

    def ended(self, item: StreamItem) -> Optional[EventView]:
        """The event that ends a turn, once the input has been received; the
        caller then asks whether the input still waits (``still_waiting``)."""
        if item["type"] != "event":
            return None
        event = item["event"]
        if event["type"] == "input.received" and event["data"].get("input_id") == self.input["id"]:
            self._received = True
        elif event["type"] == "model.response" and self._received:
            self._message = event["data"].get("message") or []
            self._streaming_epoch = None
        elif event["type"] in TURN_ENDS and self._received:
            return event
        return None

    def still_waiting(self, ended: EventView) -> None:
        """The turn that ended was not the input's (it waits for a later one)."""
        self._message = []
        self._streaming_epoch = None

    def result(self, ended: EventView) -> RunResult:
        """The answer, when ``ended`` ends the input's turn (raises if it failed or was cancelled)."""
        if ended["type"] != "turn.completed":
            error = ended["data"].get("error") or {}
            why = f"{error.get('type')}: {error.get('message')}" if error else "cancelled"
            raise TurnFailedError(f"the turn of input {self.input['id']} ended with {ended['type']} ({why})", ended)
        text = "".join(block.get("text", "") for block in self._message if block.get("type") == "text")
        return RunResult(text, self._message, ended, self.input, self.replayed)


def waiting_ids(queued: Any, pending: Any) -> List[str]:
    """The ids of the inputs in two ``GET .../inputs`` answers."""
    return [i["id"] for i in queued["inputs"]] + [i["id"] for i in pending["inputs"]]
