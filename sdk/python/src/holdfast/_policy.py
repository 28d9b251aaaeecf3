"""What the sync and async clients share: the retry policy, the stream's
bookkeeping and the 409 rules. No IO here."""

from __future__ import annotations

import base64
import binascii
import email.utils
import json
import random
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple, Union

from ._sse import SseMessage
from .schema import ApprovalView, EventView, QuestionView, ToolCallView

from typing import Literal, TypedDict


@dataclass(frozen=True)
class RetryPolicy:
    """How failed requests are retried: connection errors, tries that time
    out, 429, 502, 503 and 504, for up to ``budget`` seconds in all (longer
    than an ``up`` restart with its 20 s drain), each retry with the same
    body and headers (a send's Idempotency-Key)."""

    #: Seconds from the first try after which no retry starts.
    budget: float = 60.0
    #: At most this many retries after the first try (``None``: as many as the budget allows).
    max_retries: Optional[int] = None
    #: First backoff delay in seconds, doubled per retry, with full jitter.
    base_delay: float = 0.25
    #: Longest backoff delay in seconds (a ``Retry-After`` is honoured within the budget).
    max_delay: float = 5.0
    #: One try's time limit in seconds (streams read for longer: the server's heartbeat).
    timeout: float = 30.0

    def backoff(self, failures: int) -> float:
        """Full-jitter exponential backoff before the ``failures``-th retry."""
        if failures <= 0:
            return 0.0
        return random.random() * min(self.max_delay, self.base_delay * 2 ** min(failures - 1, 20))

    def delay(self, failures: int, retry_after: Optional[float]) -> float:
        """The server's ``Retry-After`` when it gave one, else backoff."""
        return self.backoff(failures) if retry_after is None else retry_after


class RetryClock:
    """One request's retries: how long to wait before the next, or ``None``
    once the policy's retries or budget are spent."""

    def __init__(self, policy: RetryPolicy) -> None:
        self._policy = policy
        self._started = time.monotonic()
        self._retries = 0

    def next_delay(self, retry_after: Optional[float] = None) -> Optional[float]:
        policy = self._policy
        self._retries += 1
        if policy.max_retries is not None and self._retries > policy.max_retries:
            return None
        delay = policy.delay(self._retries, retry_after)
        if time.monotonic() - self._started + delay > policy.budget:
            return None
        return delay


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
    return status == 429 or (retry == "transient" and status in (502, 503, 504))


def transient_stream_status(status: int) -> bool:
    """A stream answer worth reconnecting after (anything else ends the stream)."""
    return status in (429, 502, 503, 504)


class EventItem(TypedDict):
    """A saved event, each once, in ``seq`` order."""

    type: Literal["event"]
    event: EventView


class Delta(TypedDict):
    """Streamed text of a model call in flight; ``epoch`` is the lease epoch
    of the call that streamed it (a retried call streams again, from the
    start, under a new epoch)."""

    text: str
    epoch: int


class DeltaItem(TypedDict):
    """A live text delta: a preview, never saved (the saved ``model.response`` has the text)."""

    type: Literal["delta"]
    delta: Delta


class ThinkingDeltaItem(TypedDict):
    """A live delta of extended thinking (the saved ``model.response`` has the whole ``thinking`` block)."""

    type: Literal["thinking_delta"]
    delta: Delta


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


StreamItem = Union[EventItem, DeltaItem, ThinkingDeltaItem, ToolCallItem, ApprovalItem, QuestionItem]


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
        if message.event == "thinking_delta":
            yield ThinkingDeltaItem(type="thinking_delta", delta=json.loads(message.data))
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


def tool_result_settled(current: Optional[Mapping[str, Any]], is_error: bool) -> bool:
    """A 409 whose call is completed with this ``is_error``: an earlier try
    got through if its output is the one sent (:func:`stored_files` and the
    attachments' bytes say)."""
    return current is not None and current.get("status") == "completed" and bool(current.get("is_error")) == is_error


#: A file the server stored as an attachment: its reference's ``attachment_id``
#: and the bytes that were sent for it.
StoredFile = Tuple[str, bytes]


def stored_files(stored: Any, sent: Any) -> Optional[List[StoredFile]]:
    """Whether ``stored`` (content or a result as the server keeps it) can be
    ``sent``: the same JSON, except that the server keeps each base64 source
    of an image or document as an attachment reference (``{"type":
    "attachment", "attachment_id", "media_type", "size_bytes"}``). Returns
    the files whose bytes remain to be compared with the attachments' (of
    the same media type and size), or ``None`` when ``stored`` is not
    ``sent`` whatever the attachments hold."""
    files: List[StoredFile] = []

    def walk(a: Any, b: Any) -> bool:
        if isinstance(a, dict) and isinstance(b, dict):
            if a.get("type") == "attachment" and b.get("type") == "base64":
                data = _base64_bytes(b.get("data"))
                if data is None or a.get("media_type") != b.get("media_type") or a.get("size_bytes") != len(data):
                    return False
                files.append((str(a.get("attachment_id")), data))
                return True
            return a.keys() == b.keys() and all(walk(a[k], b[k]) for k in b)
        if isinstance(a, list) and isinstance(b, list):
            return len(a) == len(b) and all(walk(x, y) for x, y in zip(a, b))
        return bool(a == b)

    return files if walk(stored, sent) else None


def _base64_bytes(data: Any) -> Optional[bytes]:
    if not isinstance(data, str):
        return None
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def decision_accepted(current: Optional[Mapping[str, Any]], decision: str) -> bool:
    """A 409 whose approval already has this decision."""
    decided = "approved" if decision == "approve" else "denied"
    return current is not None and current.get("status") == decided


def answer_accepted(current: Optional[Mapping[str, Any]], answer: str) -> bool:
    """A 409 whose question already holds this answer."""
    return current is not None and current.get("status") == "answered" and current.get("answer") == answer
