"""What the sync and async clients share: the retry policy, the stream's
bookkeeping and the 409 rules. No IO here."""

from __future__ import annotations

import email.utils
import json
import random
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterator, Mapping, Optional, Union

from ._sse import SseMessage
from .schema import ApprovalView, EventView, QuestionView, ToolCallView

from typing import Literal, TypedDict


@dataclass(frozen=True)
class RetryPolicy:
    """How failed requests are retried: network errors, 429 and 503."""

    #: Retries after the first try.
    max_retries: int = 6
    #: First backoff delay in seconds, doubled per retry, with full jitter.
    base_delay: float = 0.25
    #: Longest backoff delay, and longest ``Retry-After`` honoured, in seconds.
    max_delay: float = 30.0

    def backoff(self, failures: int) -> float:
        """Full-jitter exponential backoff before the ``failures``-th retry."""
        if failures <= 0:
            return 0.0
        return random.random() * min(self.max_delay, self.base_delay * 2 ** min(failures - 1, 20))

    def delay(self, failures: int, retry_after: Optional[float]) -> float:
        """The server's ``Retry-After`` when it gave one (capped), else backoff."""
        if retry_after is None:
            return self.backoff(failures)
        return min(self.max_delay, retry_after)


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """``Retry-After`` in seconds: delta-seconds or an HTTP date."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        at = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, at.timestamp() - time.time())


#: Which failures a request may retry: every transient one, or only a 429
#: (the request did nothing; a retried create after a network error could make two).
Retry = Literal["transient", "rate_limit_only"]


def retryable_status(status: int, retry: Retry) -> bool:
    return status == 429 or (retry == "transient" and status == 503)


def transient_stream_status(status: int) -> bool:
    """A stream answer worth reconnecting after (anything else ends the stream)."""
    return status in (429, 502, 503, 504)


class EventItem(TypedDict):
    """A saved event, each once, in ``seq`` order."""

    type: Literal["event"]
    event: EventView


class DeltaItem(TypedDict):
    """A live text delta: a preview, never saved (the saved ``model.response`` has the text)."""

    type: Literal["delta"]
    delta: Dict[str, Any]


class ToolCallItem(TypedDict):
    """After every (re)connect: a custom tool call waiting for its result."""

    type: Literal["tool_call"]
    tool_call: ToolCallView


class ApprovalItem(TypedDict):
    """After every (re)connect: an approval waiting for a decision."""

    type: Literal["approval"]
    approval: ApprovalView


class QuestionItem(TypedDict):
    """After every (re)connect: a question waiting for its answer."""

    type: Literal["question"]
    question: QuestionView


StreamItem = Union[EventItem, DeltaItem, ToolCallItem, ApprovalItem, QuestionItem]


class StreamCursor:
    """The stream's position: the last seq yielded, so a reconnect resumes
    after it (``Last-Event-ID``) and a replayed event is never yielded twice."""

    def __init__(self, after: int) -> None:
        self.last = after

    def headers(self, api_key: str) -> Dict[str, str]:
        headers = {"authorization": f"Bearer {api_key}", "accept": "text/event-stream"}
        if self.last > 0:
            headers["last-event-id"] = str(self.last)
        return headers

    def items(self, message: SseMessage) -> Iterator[StreamItem]:
        if message.event == "delta":
            yield DeltaItem(type="delta", delta=json.loads(message.data))
            return
        if message.id is None:
            return
        seq = int(message.id)
        if seq <= self.last:
            return
        self.last = seq
        yield EventItem(type="event", event=json.loads(message.data))


def pending_items(tool_calls: Any, approvals: Any, questions: Any) -> Iterator[StreamItem]:
    for call in tool_calls:
        yield ToolCallItem(type="tool_call", tool_call=call)
    for approval in approvals:
        yield ApprovalItem(type="approval", approval=approval)
    for question in questions:
        yield QuestionItem(type="question", question=question)


def tool_result_accepted(current: Optional[Mapping[str, Any]], output: Any, is_error: bool) -> bool:
    """A 409 whose call already holds this output: an earlier try got through."""
    return (
        current is not None
        and current.get("status") == "completed"
        and current.get("output") == output
        and bool(current.get("is_error")) == is_error
    )


def decision_accepted(current: Optional[Mapping[str, Any]], decision: str) -> bool:
    """A 409 whose approval already has this decision."""
    decided = "approved" if decision == "approve" else "denied"
    return current is not None and current.get("status") == decided


def answer_accepted(current: Optional[Mapping[str, Any]], answer: str) -> bool:
    """A 409 whose question already holds this answer."""
    return current is not None and current.get("status") == "answered" and current.get("answer") == answer
