"""The Holdfast clients, sync (:class:`Holdfast`) and async
(:class:`AsyncHoldfast`), with the protocol's hard parts built in (docs/concepts.md,
"What your code should handle"): an Idempotency-Key on every send and
retries with the same key, streams that resume with Last-Event-ID and
re-read what waits, 409s read as "look at the state", and ``run``: send,
serve the custom tools, stream, and return the answer."""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, AsyncGenerator, AsyncIterator, Dict, Generator, Iterator, List, Mapping, Optional, Tuple, Union

import httpx

from ._policy import (
    Retry,
    RetryClock,
    RetryPolicy,
    StreamCursor,
    StreamItem,
    answer_accepted,
    decision_accepted,
    parse_retry_after,
    pending_items,
    retryable_status,
    stored_files,
    tool_result_settled,
    transient_stream_status,
)
from ._run import RunResult, TextChunk, TurnWatch, queued_ids
from ._sse import SseDecoder
from .errors import APIConnectionError, APIError, APITimeoutError, ConflictError, HoldfastError, error_for
from .schema import (
    AgentConfig,
    AgentView,
    ApprovalView,
    CancelView,
    ConfigVersionView,
    CreatedWebhookView,
    CreateScheduleRequest,
    EventList,
    EventView,
    ForkAt,
    InboxItem,
    InboxKind,
    InputMode,
    InputView,
    ProjectUsage,
    QuestionView,
    ReplayReport,
    ReplaySummary,
    ScheduleView,
    ToolCallView,
    TurnRange,
    TurnOutcome,
    WebhookView,
)

if TYPE_CHECKING:
    from .tools import ToolHandler

DEFAULT_URL = "http://127.0.0.1:8080"
#: Reads on a stream: the server sends a heartbeat every 15 s.
STREAM_TIMEOUT = httpx.Timeout(10.0, read=60.0)
#: A stream open this long (seconds) was healthy: its end starts the backoff afresh.
STREAM_HEALTHY = 5.0


@dataclass(frozen=True)
class SendResult:
    """What ``send`` did: the input as saved, and whether this was a replay of an earlier try."""

    input: InputView
    replayed: bool


class RunStream:
    """``text_stream``'s answer: iterate it for the text as it streams
    (:class:`TextChunk`; ``restart`` marks a retried model call streaming
    again); once the iteration ends, ``result`` is the :class:`RunResult`."""

    def __init__(self, run: Generator[TextChunk, None, RunResult]) -> None:
        self._run = run
        self.result: Optional[RunResult] = None

    def __iter__(self) -> Generator[TextChunk, None, None]:
        self.result = yield from self._run


class AsyncRunStream:
    """:class:`RunStream` for the async client (``async for``)."""

    def __init__(self, run: AsyncIterator[Union[TextChunk, RunResult]]) -> None:
        self._run = run
        self.result: Optional[RunResult] = None

    async def __aiter__(self) -> AsyncIterator[TextChunk]:
        async for item in self._run:
            if isinstance(item, RunResult):
                self.result = item
            else:
                yield item


def _query(**params: Any) -> Dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None}


def _inbox_query(
    kind: Optional[str], metadata: Optional[Mapping[str, Any]], limit: Optional[int], cursor: Optional[str]
) -> Dict[str, Any]:
    return _query(
        kind=kind,
        metadata=json.dumps(dict(metadata)) if metadata is not None else None,
        limit=limit,
        cursor=cursor,
    )


def _input_body(content: Any, mode: Optional[InputMode]) -> Dict[str, Any]:
    """An input request: the mode only when chosen (the server's default is steer)."""
    return {"content": content} if mode is None else {"content": content, "mode": mode}


def _with_apply(patch: Mapping[str, Any], apply: Optional[str]) -> Dict[str, Any]:
    body = dict(patch)
    if apply is not None:
        body["apply"] = apply
    return body


def _request_args(
    api_key: str, body: Any, headers: Optional[Mapping[str, str]]
) -> Dict[str, Any]:
    merged = {"authorization": f"Bearer {api_key}", "accept": "application/json"}
    merged.update(headers or {})
    args: Dict[str, Any] = {"headers": merged}
    if body is not None:
        args["json"] = body
    return args


def _error(response: httpx.Response) -> APIError:
    try:
        body = response.json()
    except ValueError:
        body = None
    return error_for(response.status_code, body, parse_retry_after(response.headers.get("retry-after")))


def _connection_error(method: str, url: str, cause: httpx.TransportError) -> APIConnectionError:
    """No answer: the message names the request and the cause (httpx's own text is often empty)."""
    kind = APITimeoutError if isinstance(cause, httpx.TimeoutException) else APIConnectionError
    reason = f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__
    return kind(f"{method} {url}: no answer ({reason})")


def _settings(api_key: Optional[str], base_url: Optional[str]) -> Tuple[str, str]:
    """The key and URL given, else ``HOLDFAST_API_KEY`` and ``HOLDFAST_URL``."""
    key = api_key or os.environ.get("HOLDFAST_API_KEY")
    if not key:
        raise HoldfastError(
            "no API key: pass api_key=... or set HOLDFAST_API_KEY. `holdfast up` prints one at start; "
            "against a server of your own, `holdfast keys create --project NAME` makes one"
        )
    return key, (base_url or os.environ.get("HOLDFAST_URL") or DEFAULT_URL).rstrip("/")


def _with_key(error: HoldfastError, key: str) -> HoldfastError:
    error.idempotency_key = key
    return error


#: ``run``'s custom tools: name to handler.
Tools = Mapping[str, "ToolHandler"]


def _pending_paths(agent_id: str) -> List[Tuple[str, Dict[str, str], str]]:
    return [
        (f"/v1/agents/{agent_id}/tool-calls", {"status": "waiting", "kind": "custom"}, "tool_calls"),
        (f"/v1/agents/{agent_id}/approvals", {"status": "pending"}, "approvals"),
        (f"/v1/agents/{agent_id}/questions", {"status": "pending"}, "questions"),
    ]


class Holdfast:
    """The sync client. ``Holdfast()`` reads ``HOLDFAST_API_KEY`` and
    ``HOLDFAST_URL`` (default ``http://127.0.0.1:8080``), or
    ``Holdfast(api_key, base_url)``; use as a context manager or ``close()``."""

    def __init__(
        self,
        api_key: Optional[str] = None,
        base_url: Optional[str] = None,
        *,
        retry: RetryPolicy = RetryPolicy(),
        http: Optional[httpx.Client] = None,
    ) -> None:
        self._api_key, self.base_url = _settings(api_key, base_url)
        self.retry = retry
        self._http = http or httpx.Client(base_url=self.base_url, timeout=retry.timeout)
        self.agents = Agents(self)
        self.schedules = Schedules(self)
        self.webhooks = Webhooks(self)
        self.replays = Replays(self)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Holdfast":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Optional[Mapping[str, Any]] = None,
        headers: Optional[Mapping[str, str]] = None,
        retry: Retry = "transient",
    ) -> httpx.Response:
        """One request, retried per the policy (the same body and headers on
        every try); a non-2xx answer raises its typed error."""
        args = _request_args(self._api_key, body, headers)
        clock = RetryClock(self.retry)
        while True:
            try:
                response = self._http.request(method, path, params=params, **args)
            except httpx.TransportError as e:
                delay = None if retry == "rate_limit_only" else clock.next_delay()
                if delay is None:
                    raise _connection_error(method, self.base_url + path, e) from e
                time.sleep(delay)
                continue
            if response.is_success:
                return response
            if retryable_status(response.status_code, retry):
                delay = clock.next_delay(parse_retry_after(response.headers.get("retry-after")))
                if delay is not None:
                    time.sleep(delay)
                    continue
            raise _error(response)

    def json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.request(method, path, **kwargs).json()

    def send(
        self, agent_id: str, content: Any, *, idempotency_key: Optional[str] = None, mode: Optional[InputMode] = None
    ) -> SendResult:
        """Send an input. One Idempotency-Key per call (yours, e.g. your
        message id, or a fresh UUID), reused by every retry of a connection
        error, timeout, 429, 502, 503 or 504, so the input is recorded once. ``mode`` (default
        ``steer``): ``queue`` waits for the open turn to end, ``interrupt``
        aborts the model call in flight (docs/api.md). An error that ends
        it carries the key (``idempotency_key``): a send retried with it
        later is still recorded once."""
        key = idempotency_key or str(uuid.uuid4())
        try:
            response = self.request(
                "POST", f"/v1/agents/{agent_id}/inputs", body=_input_body(content, mode), headers={"Idempotency-Key": key}
            )
        except HoldfastError as e:
            raise _with_key(e, key)
        return SendResult(response.json(), response.headers.get("idempotent-replayed") == "true")

    def run(
        self,
        agent_id: str,
        content: Any,
        *,
        tools: Optional[Tools] = None,
        idempotency_key: Optional[str] = None,
    ) -> RunResult:
        """Send ``content`` and return the answer: serves the custom
        ``tools`` (name to handler; a call of any other custom tool gets an
        error result) while the turn runs, follows the stream through
        reconnects and API restarts, and returns once the turn that answers
        the input ends. The input is queued (``mode="queue"``): it gets a
        turn of its own, after any open one. A failed or cancelled turn raises
        :class:`TurnFailedError`. Retrying a failed ``run`` with the same
        ``idempotency_key`` sends nothing twice and returns the same answer."""
        stream = self.text_stream(agent_id, content, tools=tools, idempotency_key=idempotency_key)
        for _ in stream:
            pass
        assert stream.result is not None
        return stream.result

    def text_stream(
        self,
        agent_id: str,
        content: Any,
        *,
        tools: Optional[Tools] = None,
        idempotency_key: Optional[str] = None,
    ) -> RunStream:
        """:meth:`run`, yielding the answer's text as it streams; ``result``
        holds the answer once the iteration ends."""
        return RunStream(self._run(agent_id, content, tools or {}, idempotency_key))

    def _run(
        self, agent_id: str, content: Any, tools: Tools, key: Optional[str]
    ) -> Generator[TextChunk, None, RunResult]:
        from .tools import ToolServer

        start, queued = self._queue_at(agent_id)
        history = start
        sent = self.send(agent_id, content, idempotency_key=key, mode="queue")
        if sent.replayed:
            # Its input was received before `start`: replay from the first event.
            start, queued = 0, []
        watch = TurnWatch(sent.input, sent.replayed, queued)
        server = ToolServer(self, tools)
        try:
            for item in self.stream(agent_id, after=start):
                # Calls that waited before are re-read with each (re)connect;
                # a replay's older events are history.
                if item["type"] != "event" or item["event"]["seq"] > history:
                    server.handle_item(item)
                chunk = watch.text(item)
                if chunk is not None:
                    yield chunk
                result = watch.result(item)
                if result is not None:
                    return result
            raise AssertionError("the stream ended")  # stream() reconnects for ever
        finally:
            server.close()

    def _queue_at(self, agent_id: str) -> Tuple[int, List[str]]:
        """The agent's last seq and its queued inputs then: read until no
        event came between (admitting or removing an input writes one)."""
        while True:
            seq = self.agents.get(agent_id)["last_event_seq"]
            queued = queued_ids(self.json("GET", f"/v1/agents/{agent_id}/inputs", params={"status": "queued"}))
            if self.agents.get(agent_id)["last_event_seq"] == seq:
                return seq, queued

    def list_events(self, agent_id: str, *, after: int = 0, limit: Optional[int] = None) -> EventList:
        """One page of an agent's saved events after ``after``."""
        return self.json("GET", f"/v1/agents/{agent_id}/events", params=_query(after=after, limit=limit))

    def pending_tool_calls(self, agent_id: str) -> List[ToolCallView]:
        """Custom tool calls waiting for their result."""
        path, params, key = _pending_paths(agent_id)[0]
        return self.json("GET", path, params=params)[key]

    def pending_approvals(self, agent_id: str) -> List[ApprovalView]:
        path, params, key = _pending_paths(agent_id)[1]
        return self.json("GET", path, params=params)[key]

    def pending_questions(self, agent_id: str) -> List[QuestionView]:
        path, params, key = _pending_paths(agent_id)[2]
        return self.json("GET", path, params=params)[key]

    def inbox(
        self,
        *,
        kind: Optional[InboxKind] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        page_size: Optional[int] = None,
    ) -> Iterator[InboxItem]:
        """Everything in the project waiting on a person or a client (approvals,
        budget approvals, questions, custom tool calls, commands no machine has
        accepted), oldest first, of one ``kind`` and of agents whose metadata
        contains ``metadata`` if given, fetching pages as it goes."""
        cursor: Optional[str] = None
        while True:
            page = self.json("GET", "/v1/inbox", params=_inbox_query(kind, metadata, page_size, cursor))
            yield from page["items"]
            if not page["has_more"]:
                return
            cursor = page["next_cursor"]

    def project_usage(self, *, days: Optional[int] = None) -> ProjectUsage:
        """The project's model usage by UTC day and model over the last ``days``
        days (default 30), newest first, and its sum, with cost in USD."""
        return self.json("GET", "/v1/usage", params=_query(days=days))

    def stream(self, agent_id: str, *, after: int = 0) -> Iterator[StreamItem]:
        """Everything an agent does, live: every saved event once and in
        order, live deltas, and after each (re)connect what waits on you. A
        dropped connection or an API restart reconnects with backoff and
        ``Last-Event-ID``; an answer that will not change (401, 404) raises.
        Stop by breaking out of the loop."""
        cursor = StreamCursor(after)
        # Connections in a row that failed, or ended before delivering
        # anything or lasting a while: the backoff grows with them, so a
        # stream that opens and drops at once is not reopened in a tight loop.
        failures = 0
        while True:
            try:
                with self._http.stream(
                    "GET", f"/v1/agents/{agent_id}/stream", headers=cursor.headers(self._api_key), timeout=STREAM_TIMEOUT
                ) as response:
                    if not response.is_success:
                        response.read()
                        raise _error(response)
                    opened = time.monotonic()
                    # Re-read after the stream is open: whatever starts
                    # waiting in between is in the stream too.
                    yield from pending_items(
                        self.pending_tool_calls(agent_id), self.pending_approvals(agent_id), self.pending_questions(agent_id)
                    )
                    decoder = SseDecoder()
                    try:
                        for line in response.iter_lines():
                            message = decoder.feed(line)
                            if message is not None:
                                failures = 0
                                yield from cursor.items(message)
                    finally:
                        if time.monotonic() - opened >= STREAM_HEALTHY:
                            failures = 0
            except APIError as e:
                if not transient_stream_status(e.status):
                    raise
            except (httpx.TransportError, APIConnectionError):
                pass
            failures += 1
            time.sleep(self.retry.backoff(failures))

    def events(self, agent_id: str, *, after: int = 0) -> Iterator[EventView]:
        """Every saved event once, in order, following the agent live (no deltas)."""
        for item in self.stream(agent_id, after=after):
            if item["type"] == "event":
                yield item["event"]

    def submit_tool_result(self, tool_call_id: str, output: Any, *, is_error: bool = False) -> ToolCallView:
        """Post a custom tool call's result. A 409 whose call already holds
        this output is success (an earlier try got through); any other 409
        raises :class:`ConflictError` whose ``current`` is the call as it stands."""
        try:
            return self.json("POST", f"/v1/tool-calls/{tool_call_id}/result", body={"output": output, "is_error": is_error})
        except ConflictError as e:
            current = e.current
            if (
                current is not None
                and tool_result_settled(current, is_error)
                and self.same_content(current["agent_id"], current.get("output"), output)
            ):
                return current  # type: ignore[return-value]
            raise

    def attachment(self, agent_id: str, attachment_id: str) -> bytes:
        """The bytes of an image or document the agent was sent, by the
        ``attachment_id`` of its reference (``{"type": "attachment", ...}``)."""
        return self.request("GET", f"/v1/agents/{agent_id}/attachments/{attachment_id}").content

    def same_content(self, agent_id: str, stored: Any, sent: Any) -> bool:
        """Whether ``stored`` (an input's content, a tool call's output or an
        event's, as read back from the server) is ``sent`` (what a client
        posted): the server keeps each base64 image or document as an
        attachment reference, which is equal to the source it replaced when
        the attachment's bytes are the bytes sent (fetched to compare)."""
        files = stored_files(stored, sent)
        return files is not None and all(self.attachment(agent_id, id) == data for id, data in files)

    def approve(self, approval_id: str, *, by: str, reason: Optional[str] = None) -> ApprovalView:
        """Approve a tool call (a 409 whose approval is already approved is success)."""
        return self._decide(approval_id, "approve", by, reason)

    def deny(self, approval_id: str, *, by: str, reason: Optional[str] = None) -> ApprovalView:
        """Deny a tool call (a 409 whose approval is already denied is success)."""
        return self._decide(approval_id, "deny", by, reason)

    def answer(self, question_id: str, answer: str, *, by: str) -> QuestionView:
        """Answer a question (a 409 whose question already holds this answer is success)."""
        try:
            return self.json("POST", f"/v1/questions/{question_id}/answer", body={"answer": answer, "by": by})
        except ConflictError as e:
            if answer_accepted(e.current, answer):
                return e.current  # type: ignore[return-value]
            raise

    def _decide(self, approval_id: str, decision: str, by: str, reason: Optional[str]) -> ApprovalView:
        try:
            return self.json("POST", f"/v1/approvals/{approval_id}", body=_query(decision=decision, by=by, reason=reason))
        except ConflictError as e:
            if decision_accepted(e.current, decision):
                return e.current  # type: ignore[return-value]
            raise


class Agents:
    """``/v1/agents``: create, get, list (every page), search, update, cancel, archive."""

    def __init__(self, client: Holdfast) -> None:
        self._client = client

    def create(self, config: AgentConfig) -> AgentView:
        """Create an agent. Retried only on a 429 (a retried create could make two)."""
        return self._client.json("POST", "/v1/agents", body=config, retry="rate_limit_only")

    def get(self, agent_id: str) -> AgentView:
        return self._client.json("GET", f"/v1/agents/{agent_id}")

    def list(
        self,
        *,
        state: Optional[str] = None,
        outcome: Optional[TurnOutcome] = None,
        page_size: Optional[int] = None,
    ) -> Iterator[AgentView]:
        """Every agent (of a state, and whose last turn ended with ``outcome``,
        if given), oldest first, fetching pages as it goes."""
        after: Optional[str] = None
        while True:
            page = self._client.json(
                "GET", "/v1/agents", params=_query(state=state, outcome=outcome, limit=page_size, after=after)
            )
            yield from page["agents"]
            if not page["has_more"] or not page["agents"]:
                return
            after = page["agents"][-1]["id"]

    def search(
        self,
        q: str,
        *,
        state: Optional[str] = None,
        outcome: Optional[TurnOutcome] = None,
        page_size: Optional[int] = None,
    ) -> Iterator[AgentView]:
        """The agents ``q`` finds (an agent id; ``key=value`` on metadata; text
        in the metadata or id; or words of their inputs and saved messages),
        newest activity first, fetching pages as it goes."""
        cursor: Optional[str] = None
        while True:
            page = self._client.json(
                "GET",
                "/v1/agents",
                params=_query(order="activity", q=q, state=state, outcome=outcome, limit=page_size, cursor=cursor),
            )
            yield from page["agents"]
            if not page["has_more"] or not page.get("next_cursor"):
                return
            cursor = page["next_cursor"]

    def update(self, agent_id: str, patch: Mapping[str, Any], *, apply: Optional[str] = None) -> AgentView:
        """Change the config with a JSON merge patch (``None`` removes a field),
        saved as its next version; ``apply="next_turn"`` lets a running turn
        finish on its version."""
        return self._client.json("PATCH", f"/v1/agents/{agent_id}", body=_with_apply(patch, apply))

    def cancel(self, agent_id: str) -> CancelView:
        return self._client.json("POST", f"/v1/agents/{agent_id}/cancel")

    def archive(self, agent_id: str) -> AgentView:
        return self._client.json("POST", f"/v1/agents/{agent_id}/archive")

    def fork(
        self,
        agent_id: str,
        *,
        at: Optional[ForkAt] = None,
        config: Optional[Mapping[str, Any]] = None,
        version: Optional[int] = None,
    ) -> AgentView:
        """Fork an agent at one of its steps (``at={"seq": n}`` or
        ``at={"turn": k}``; default its last), with an optional config merge
        patch applied to its current config (or to its config ``version``):
        a new idle agent whose history is the source's up to there.
        Retried only on a 429 (a retried fork could make two)."""
        body = _query(at=at, config=config, version=version)
        return self._client.json("POST", f"/v1/agents/{agent_id}/fork", body=body, retry="rate_limit_only")

    def versions(self, agent_id: str) -> List[ConfigVersionView]:
        """The agent's config versions, oldest first."""
        return self._client.json("GET", f"/v1/agents/{agent_id}/versions")["versions"]

    def version(self, agent_id: str, version: int) -> ConfigVersionView:
        return self._client.json("GET", f"/v1/agents/{agent_id}/versions/{version}")

    def update_input(
        self, input_id: str, *, mode: Optional[InputMode] = None, position: Optional[int] = None
    ) -> InputView:
        """Change a waiting input: its mode (``queue`` <-> ``steer``) or its
        place (from 1) among its agent's queued inputs."""
        return self._client.json("PATCH", f"/v1/inputs/{input_id}", body=_query(mode=mode, position=position))


class Schedules:
    """``/v1/agents/{id}/schedules``: inputs sent on a cron schedule or every interval."""

    def __init__(self, client: Holdfast) -> None:
        self._client = client

    def create(self, agent_id: str, schedule: CreateScheduleRequest) -> ScheduleView:
        """Create a schedule. Retried only on a 429 (a retried create could make two)."""
        return self._client.json(
            "POST", f"/v1/agents/{agent_id}/schedules", body=schedule, retry="rate_limit_only"
        )

    def list(self, agent_id: str) -> List[ScheduleView]:
        return self._client.json("GET", f"/v1/agents/{agent_id}/schedules")["schedules"]

    def get(self, agent_id: str, schedule_id: str) -> ScheduleView:
        return self._client.json("GET", f"/v1/agents/{agent_id}/schedules/{schedule_id}")

    def pause(self, agent_id: str, schedule_id: str) -> ScheduleView:
        return self._client.json("PATCH", f"/v1/agents/{agent_id}/schedules/{schedule_id}", body={"paused": True})

    def resume(self, agent_id: str, schedule_id: str) -> ScheduleView:
        """Resume from the next slot on (slots passed while paused are not fired)."""
        return self._client.json("PATCH", f"/v1/agents/{agent_id}/schedules/{schedule_id}", body={"paused": False})

    def delete(self, agent_id: str, schedule_id: str) -> None:
        self._client.request("DELETE", f"/v1/agents/{agent_id}/schedules/{schedule_id}")


class Webhooks:
    """``/v1/webhooks``: endpoints that receive every event, signed per Standard Webhooks."""

    def __init__(self, client: Holdfast) -> None:
        self._client = client

    def create(self, url: str, *, events: Optional[List[str]] = None, description: Optional[str] = None) -> CreatedWebhookView:
        """Register an endpoint; the answer holds its ``whsec_…`` secret, shown once."""
        body = _query(url=url, events=events, description=description)
        return self._client.json("POST", "/v1/webhooks", body=body, retry="rate_limit_only")

    def list(self) -> List[WebhookView]:
        return self._client.json("GET", "/v1/webhooks")["webhooks"]

    def delete(self, webhook_id: str) -> None:
        self._client.request("DELETE", f"/v1/webhooks/{webhook_id}")


class Replays:
    """Replays: an agent's recorded turns sent again with a changed config,
    its tool calls answered from the recording (nothing runs)."""

    def __init__(self, client: Holdfast) -> None:
        self._client = client

    def create(
        self,
        agent_id: str,
        *,
        config: Optional[Mapping[str, Any]] = None,
        turns: Optional[TurnRange] = None,
        version: Optional[int] = None,
    ) -> ReplayReport:
        """Start a replay of ``agent_id`` (with its config, or its config
        ``version``, patched by ``config``); returns its report as it starts.
        Retried only on a 429."""
        body = _query(config=config, turns=turns, version=version)
        return self._client.json("POST", f"/v1/agents/{agent_id}/replays", body=body, retry="rate_limit_only")

    def get(self, replay_id: str) -> ReplayReport:
        """The report of a replay, as far as it has got."""
        return self._client.json("GET", f"/v1/replays/{replay_id}")

    def list(self, agent_id: str) -> List[ReplaySummary]:
        """The replays of ``agent_id``, oldest first, without their turns."""
        return self._client.json("GET", f"/v1/agents/{agent_id}/replays")["replays"]

    def wait_for_report(self, replay_id: str, *, interval: float = 0.5, timeout: float = 600.0) -> ReplayReport:
        """The report once the replay has ended (``completed`` or
        ``failed``), asking every ``interval`` seconds; raises
        :class:`HoldfastError` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            report = self.get(replay_id)
            if report["status"] != "running":
                return report
            if time.monotonic() >= deadline:
                raise HoldfastError(f"replay {replay_id} is still running after {timeout} s")
            time.sleep(interval)


class AsyncHoldfast:
    """The async client: the same calls as :class:`Holdfast`, awaited."""

    def __init__(
        self,
        api_key: Optional[str] = None,
        base_url: Optional[str] = None,
        *,
        retry: RetryPolicy = RetryPolicy(),
        http: Optional[httpx.AsyncClient] = None,
    ) -> None:
        self._api_key, self.base_url = _settings(api_key, base_url)
        self.retry = retry
        self._http = http or httpx.AsyncClient(base_url=self.base_url, timeout=retry.timeout)
        self.agents = AsyncAgents(self)
        self.schedules = AsyncSchedules(self)
        self.webhooks = AsyncWebhooks(self)
        self.replays = AsyncReplays(self)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncHoldfast":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Optional[Mapping[str, Any]] = None,
        headers: Optional[Mapping[str, str]] = None,
        retry: Retry = "transient",
    ) -> httpx.Response:
        """One request, retried per the policy (the same body and headers on
        every try); a non-2xx answer raises its typed error."""
        args = _request_args(self._api_key, body, headers)
        clock = RetryClock(self.retry)
        while True:
            try:
                response = await self._http.request(method, path, params=params, **args)
            except httpx.TransportError as e:
                delay = None if retry == "rate_limit_only" else clock.next_delay()
                if delay is None:
                    raise _connection_error(method, self.base_url + path, e) from e
                await asyncio.sleep(delay)
                continue
            if response.is_success:
                return response
            if retryable_status(response.status_code, retry):
                delay = clock.next_delay(parse_retry_after(response.headers.get("retry-after")))
                if delay is not None:
                    await asyncio.sleep(delay)
                    continue
            raise _error(response)

    async def json(self, method: str, path: str, **kwargs: Any) -> Any:
        return (await self.request(method, path, **kwargs)).json()

    async def send(
        self, agent_id: str, content: Any, *, idempotency_key: Optional[str] = None, mode: Optional[InputMode] = None
    ) -> SendResult:
        """See :meth:`Holdfast.send`."""
        key = idempotency_key or str(uuid.uuid4())
        try:
            response = await self.request(
                "POST", f"/v1/agents/{agent_id}/inputs", body=_input_body(content, mode), headers={"Idempotency-Key": key}
            )
        except HoldfastError as e:
            raise _with_key(e, key)
        return SendResult(response.json(), response.headers.get("idempotent-replayed") == "true")

    async def run(
        self,
        agent_id: str,
        content: Any,
        *,
        tools: Optional[Tools] = None,
        idempotency_key: Optional[str] = None,
    ) -> RunResult:
        """See :meth:`Holdfast.run` (handlers may be async)."""
        stream = self.text_stream(agent_id, content, tools=tools, idempotency_key=idempotency_key)
        async for _ in stream:
            pass
        assert stream.result is not None
        return stream.result

    def text_stream(
        self,
        agent_id: str,
        content: Any,
        *,
        tools: Optional[Tools] = None,
        idempotency_key: Optional[str] = None,
    ) -> AsyncRunStream:
        """See :meth:`Holdfast.text_stream` (``async for``)."""
        return AsyncRunStream(self._run(agent_id, content, tools or {}, idempotency_key))

    async def _run(
        self, agent_id: str, content: Any, tools: Tools, key: Optional[str]
    ) -> AsyncIterator[Union[TextChunk, RunResult]]:
        from .tools import AsyncToolServer

        start, queued = await self._queue_at(agent_id)
        history = start
        sent = await self.send(agent_id, content, idempotency_key=key, mode="queue")
        if sent.replayed:
            start, queued = 0, []
        watch = TurnWatch(sent.input, sent.replayed, queued)
        server = AsyncToolServer(self, tools)
        items = self.stream(agent_id, after=start)
        try:
            async for item in items:
                # Calls that waited before are re-read with each (re)connect;
                # a replay's older events are history.
                if item["type"] != "event" or item["event"]["seq"] > history:
                    await server.handle_item(item)
                chunk = watch.text(item)
                if chunk is not None:
                    yield chunk
                result = watch.result(item)
                if result is not None:
                    yield result
                    return
        finally:
            await items.aclose()
            await server.idle()

    async def _queue_at(self, agent_id: str) -> Tuple[int, List[str]]:
        """See :meth:`Holdfast._queue_at`."""
        while True:
            seq = (await self.agents.get(agent_id))["last_event_seq"]
            queued = queued_ids(await self.json("GET", f"/v1/agents/{agent_id}/inputs", params={"status": "queued"}))
            if (await self.agents.get(agent_id))["last_event_seq"] == seq:
                return seq, queued

    async def list_events(self, agent_id: str, *, after: int = 0, limit: Optional[int] = None) -> EventList:
        return await self.json("GET", f"/v1/agents/{agent_id}/events", params=_query(after=after, limit=limit))

    async def pending_tool_calls(self, agent_id: str) -> List[ToolCallView]:
        path, params, key = _pending_paths(agent_id)[0]
        return (await self.json("GET", path, params=params))[key]

    async def pending_approvals(self, agent_id: str) -> List[ApprovalView]:
        path, params, key = _pending_paths(agent_id)[1]
        return (await self.json("GET", path, params=params))[key]

    async def pending_questions(self, agent_id: str) -> List[QuestionView]:
        path, params, key = _pending_paths(agent_id)[2]
        return (await self.json("GET", path, params=params))[key]

    async def inbox(
        self,
        *,
        kind: Optional[InboxKind] = None,
        metadata: Optional[Mapping[str, Any]] = None,
        page_size: Optional[int] = None,
    ) -> AsyncIterator[InboxItem]:
        """As :meth:`Holdfast.inbox`."""
        cursor: Optional[str] = None
        while True:
            page = await self.json("GET", "/v1/inbox", params=_inbox_query(kind, metadata, page_size, cursor))
            for item in page["items"]:
                yield item
            if not page["has_more"]:
                return
            cursor = page["next_cursor"]

    async def project_usage(self, *, days: Optional[int] = None) -> ProjectUsage:
        """As :meth:`Holdfast.project_usage`."""
        return await self.json("GET", "/v1/usage", params=_query(days=days))

    async def stream(self, agent_id: str, *, after: int = 0) -> AsyncGenerator[StreamItem, None]:
        """See :meth:`Holdfast.stream`. Stop by breaking out or cancelling the task."""
        cursor = StreamCursor(after)
        failures = 0  # as in Holdfast.stream
        while True:
            try:
                async with self._http.stream(
                    "GET", f"/v1/agents/{agent_id}/stream", headers=cursor.headers(self._api_key), timeout=STREAM_TIMEOUT
                ) as response:
                    if not response.is_success:
                        await response.aread()
                        raise _error(response)
                    opened = time.monotonic()
                    pending = pending_items(
                        await self.pending_tool_calls(agent_id),
                        await self.pending_approvals(agent_id),
                        await self.pending_questions(agent_id),
                    )
                    for item in pending:
                        yield item
                    decoder = SseDecoder()
                    try:
                        async for line in response.aiter_lines():
                            message = decoder.feed(line)
                            if message is not None:
                                failures = 0
                                for item in cursor.items(message):
                                    yield item
                    finally:
                        if time.monotonic() - opened >= STREAM_HEALTHY:
                            failures = 0
            except APIError as e:
                if not transient_stream_status(e.status):
                    raise
            except (httpx.TransportError, APIConnectionError):
                pass
            failures += 1
            await asyncio.sleep(self.retry.backoff(failures))

    async def events(self, agent_id: str, *, after: int = 0) -> AsyncIterator[EventView]:
        async for item in self.stream(agent_id, after=after):
            if item["type"] == "event":
                yield item["event"]

    async def submit_tool_result(self, tool_call_id: str, output: Any, *, is_error: bool = False) -> ToolCallView:
        """See :meth:`Holdfast.submit_tool_result`."""
        try:
            return await self.json(
                "POST", f"/v1/tool-calls/{tool_call_id}/result", body={"output": output, "is_error": is_error}
            )
        except ConflictError as e:
            current = e.current
            if (
                current is not None
                and tool_result_settled(current, is_error)
                and await self.same_content(current["agent_id"], current.get("output"), output)
            ):
                return current  # type: ignore[return-value]
            raise

    async def attachment(self, agent_id: str, attachment_id: str) -> bytes:
        """See :meth:`Holdfast.attachment`."""
        return (await self.request("GET", f"/v1/agents/{agent_id}/attachments/{attachment_id}")).content

    async def same_content(self, agent_id: str, stored: Any, sent: Any) -> bool:
        """See :meth:`Holdfast.same_content`."""
        files = stored_files(stored, sent)
        if files is None:
            return False
        for id, data in files:
            if await self.attachment(agent_id, id) != data:
                return False
        return True

    async def approve(self, approval_id: str, *, by: str, reason: Optional[str] = None) -> ApprovalView:
        return await self._decide(approval_id, "approve", by, reason)

    async def deny(self, approval_id: str, *, by: str, reason: Optional[str] = None) -> ApprovalView:
        return await self._decide(approval_id, "deny", by, reason)

    async def answer(self, question_id: str, answer: str, *, by: str) -> QuestionView:
        try:
            return await self.json("POST", f"/v1/questions/{question_id}/answer", body={"answer": answer, "by": by})
        except ConflictError as e:
            if answer_accepted(e.current, answer):
                return e.current  # type: ignore[return-value]
            raise

    async def _decide(self, approval_id: str, decision: str, by: str, reason: Optional[str]) -> ApprovalView:
        try:
            return await self.json(
                "POST", f"/v1/approvals/{approval_id}", body=_query(decision=decision, by=by, reason=reason)
            )
        except ConflictError as e:
            if decision_accepted(e.current, decision):
                return e.current  # type: ignore[return-value]
            raise


class AsyncAgents:
    """See :class:`Agents`."""

    def __init__(self, client: AsyncHoldfast) -> None:
        self._client = client

    async def create(self, config: AgentConfig) -> AgentView:
        return await self._client.json("POST", "/v1/agents", body=config, retry="rate_limit_only")

    async def get(self, agent_id: str) -> AgentView:
        return await self._client.json("GET", f"/v1/agents/{agent_id}")

    async def list(
        self,
        *,
        state: Optional[str] = None,
        outcome: Optional[TurnOutcome] = None,
        page_size: Optional[int] = None,
    ) -> AsyncIterator[AgentView]:
        after: Optional[str] = None
        while True:
            page = await self._client.json(
                "GET", "/v1/agents", params=_query(state=state, outcome=outcome, limit=page_size, after=after)
            )
            for agent in page["agents"]:
                yield agent
            if not page["has_more"] or not page["agents"]:
                return
            after = page["agents"][-1]["id"]

    async def search(
        self,
        q: str,
        *,
        state: Optional[str] = None,
        outcome: Optional[TurnOutcome] = None,
        page_size: Optional[int] = None,
    ) -> AsyncIterator[AgentView]:
        cursor: Optional[str] = None
        while True:
            page = await self._client.json(
                "GET",
                "/v1/agents",
                params=_query(order="activity", q=q, state=state, outcome=outcome, limit=page_size, cursor=cursor),
            )
            for agent in page["agents"]:
                yield agent
            if not page["has_more"] or not page.get("next_cursor"):
                return
            cursor = page["next_cursor"]

    async def update(self, agent_id: str, patch: Mapping[str, Any], *, apply: Optional[str] = None) -> AgentView:
        return await self._client.json("PATCH", f"/v1/agents/{agent_id}", body=_with_apply(patch, apply))

    async def cancel(self, agent_id: str) -> CancelView:
        return await self._client.json("POST", f"/v1/agents/{agent_id}/cancel")

    async def archive(self, agent_id: str) -> AgentView:
        return await self._client.json("POST", f"/v1/agents/{agent_id}/archive")

    async def fork(
        self,
        agent_id: str,
        *,
        at: Optional[ForkAt] = None,
        config: Optional[Mapping[str, Any]] = None,
        version: Optional[int] = None,
    ) -> AgentView:
        body = _query(at=at, config=config, version=version)
        return await self._client.json("POST", f"/v1/agents/{agent_id}/fork", body=body, retry="rate_limit_only")

    async def versions(self, agent_id: str) -> List[ConfigVersionView]:
        return (await self._client.json("GET", f"/v1/agents/{agent_id}/versions"))["versions"]

    async def version(self, agent_id: str, version: int) -> ConfigVersionView:
        return await self._client.json("GET", f"/v1/agents/{agent_id}/versions/{version}")

    async def update_input(
        self, input_id: str, *, mode: Optional[InputMode] = None, position: Optional[int] = None
    ) -> InputView:
        return await self._client.json("PATCH", f"/v1/inputs/{input_id}", body=_query(mode=mode, position=position))


class AsyncSchedules:
    """See :class:`Schedules`."""

    def __init__(self, client: AsyncHoldfast) -> None:
        self._client = client

    async def create(self, agent_id: str, schedule: CreateScheduleRequest) -> ScheduleView:
        return await self._client.json(
            "POST", f"/v1/agents/{agent_id}/schedules", body=schedule, retry="rate_limit_only"
        )

    async def list(self, agent_id: str) -> List[ScheduleView]:
        return (await self._client.json("GET", f"/v1/agents/{agent_id}/schedules"))["schedules"]

    async def get(self, agent_id: str, schedule_id: str) -> ScheduleView:
        return await self._client.json("GET", f"/v1/agents/{agent_id}/schedules/{schedule_id}")

    async def pause(self, agent_id: str, schedule_id: str) -> ScheduleView:
        return await self._client.json(
            "PATCH", f"/v1/agents/{agent_id}/schedules/{schedule_id}", body={"paused": True}
        )

    async def resume(self, agent_id: str, schedule_id: str) -> ScheduleView:
        return await self._client.json(
            "PATCH", f"/v1/agents/{agent_id}/schedules/{schedule_id}", body={"paused": False}
        )

    async def delete(self, agent_id: str, schedule_id: str) -> None:
        await self._client.request("DELETE", f"/v1/agents/{agent_id}/schedules/{schedule_id}")


class AsyncWebhooks:
    """See :class:`Webhooks`."""

    def __init__(self, client: AsyncHoldfast) -> None:
        self._client = client

    async def create(
        self, url: str, *, events: Optional[List[str]] = None, description: Optional[str] = None
    ) -> CreatedWebhookView:
        body = _query(url=url, events=events, description=description)
        return await self._client.json("POST", "/v1/webhooks", body=body, retry="rate_limit_only")

    async def list(self) -> List[WebhookView]:
        return (await self._client.json("GET", "/v1/webhooks"))["webhooks"]

    async def delete(self, webhook_id: str) -> None:
        await self._client.request("DELETE", f"/v1/webhooks/{webhook_id}")


class AsyncReplays:
    """See :class:`Replays`."""

    def __init__(self, client: AsyncHoldfast) -> None:
        self._client = client

    async def create(
        self,
        agent_id: str,
        *,
        config: Optional[Mapping[str, Any]] = None,
        turns: Optional[TurnRange] = None,
        version: Optional[int] = None,
    ) -> ReplayReport:
        body = _query(config=config, turns=turns, version=version)
        return await self._client.json("POST", f"/v1/agents/{agent_id}/replays", body=body, retry="rate_limit_only")

    async def get(self, replay_id: str) -> ReplayReport:
        return await self._client.json("GET", f"/v1/replays/{replay_id}")

    async def list(self, agent_id: str) -> List[ReplaySummary]:
        return (await self._client.json("GET", f"/v1/agents/{agent_id}/replays"))["replays"]

    async def wait_for_report(self, replay_id: str, *, interval: float = 0.5, timeout: float = 600.0) -> ReplayReport:
        deadline = time.monotonic() + timeout
        while True:
            report = await self.get(replay_id)
            if report["status"] != "running":
                return report
            if time.monotonic() >= deadline:
                raise HoldfastError(f"replay {replay_id} is still running after {timeout} s")
            await asyncio.sleep(interval)
