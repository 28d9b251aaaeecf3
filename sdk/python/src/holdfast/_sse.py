"""A Server-Sent Events decoder fed one line at a time (httpx's
``iter_lines``): a message per blank line; comments (heartbeats) dropped."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional


@dataclass
class SseMessage:
    #: The ``id:`` field; ``None`` on live deltas.
    id: Optional[str]
    event: str
    data: str


class SseDecoder:
    def __init__(self) -> None:
        self._id: Optional[str] = None
        self._event = ""
        self._data: List[str] = []

    def feed(self, line: str) -> Optional[SseMessage]:
        line = line.rstrip("\r\n")
        if line == "":
            message = None
            if self._data:
                message = SseMessage(self._id, self._event or "message", "\n".join(self._data))
            self._id, self._event, self._data = None, "", []
            return message
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "id":
            self._id = value
        elif field == "event":
            self._event = value
        elif field == "data":
            self._data.append(value)
        return None
