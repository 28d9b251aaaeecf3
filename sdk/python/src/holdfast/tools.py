"""Serving custom tools: the calls come from the stream (or from webhooks),
each handler runs at most once per tool-call id in this process, and its
result is posted until Holdfast has it.

Dedupe is per process: a call seen twice here (a stream replay, a
reconnect, a webhook retry) runs once. A call can still run again in
another process, or in this one after a restart, until its result is saved:
make each handler idempotent by ``call["id"]`` (a unique key on it in your
own database) when that matters."""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Awaitable, Callable, Dict, List, Mapping, Optional, Set, Tuple, Union

from ._policy import StreamItem
from .client import AsyncHoldfast, Holdfast
from .errors import APIConnectionError, ConflictError, RateLimitedError, ToolHandlerError, UnavailableError
from .schema import EventView, ToolCallView

log = logging.getLogger("holdfast")

#: A custom tool's implementation: ``handler(input, call) -> output`` (any
#: JSON); raising posts an error result. Async handlers for the async server.
#: A mistake (raising, an output that is not JSON, a sync handler returning
#: an awaitable) posts an error result the model sees, and is logged.
ToolHandler = Callable[[Any, ToolCallView], Union[Any, Awaitable[Any]]]

_TRANSIENT = (APIConnectionError, UnavailableError, RateLimitedError)


def _waiting_call(event: EventView) -> Optional[ToolCallView]:
    """The custom call a ``tool_call.created`` event opens, if it waits for its result."""
    data = event["data"]
    if event["type"] == "tool_call.created" and data.get("kind") == "custom" and data.get("status") == "waiting":
        return dict(data, agent_id=event["agent_id"])  # type: ignore[return-value]
    return None


#: Told about a handler's mistake (a :class:`ToolHandlerError`, posted as
#: the call's error result), a result that could not be posted (someone else
#: answered first, the turn was cancelled; the call given) or a failed
#: re-read of waiting calls (``None``). Default: logged, 409s aside.
OnError = Callable[[Exception, Optional[ToolCallView]], None]


def _report(on_error: Optional[OnError], error: Exception, call: Optional[ToolCallView]) -> None:
    if on_error is not None:
        on_error(error, call)
    elif not isinstance(error, ConflictError):
        log.error("serving tools (call %s): %s", call["id"] if call else None, error)


Outcome = Tuple[Any, bool]


def _mistake(on_error: Optional["OnError"], call: ToolCallView, why: str) -> Outcome:
    """An error result for the model, and the reason logged (or given to ``on_error``)."""
    _report(on_error, ToolHandlerError(why), call)
    return {"error": why}, True


def _checked(on_error: Optional["OnError"], call: ToolCallView, output: Any) -> Outcome:
    """A sync handler's output, or the error result for a mistake in it."""
    if inspect.isawaitable(output):
        if inspect.iscoroutine(output):
            output.close()  # never awaited: no "never awaited" warning
        return _mistake(
            on_error,
            call,
            f"the handler of tool {call['name']!r} returned an awaitable: a sync handler must return its "
            "output (make it `async def` and serve it with the async client)",
        )
    try:
        json.dumps(output, allow_nan=False)
    except (TypeError, ValueError) as e:
        return _mistake(on_error, call, f"the handler of tool {call['name']!r} returned something that is not JSON: {e}")
    return output, False


def _raised(on_error: Optional["OnError"], call: ToolCallView, error: Exception) -> Outcome:
    return _mistake(on_error, call, f"the handler of tool {call['name']!r} raised {type(error).__name__}: {error}")


def _unserved(on_error: Optional["OnError"], call: ToolCallView) -> Outcome:
    return _mistake(on_error, call, f"no handler for tool {call['name']!r} in this process")


def _run_sync(on_error: Optional["OnError"], handler: Callable[[Any, ToolCallView], Any], call: ToolCallView) -> Outcome:
    try:
        output = handler(call["input"], call)
    except Exception as e:  # the handler's failure is the tool's result
        return _raised(on_error, call, e)
    return _checked(on_error, call, output)


class ToolServer:
    """Runs sync handlers (in a thread pool) for custom tool calls."""

    def __init__(
        self,
        client: Holdfast,
        handlers: Mapping[str, ToolHandler],
        *,
        max_workers: int = 8,
        on_error: Optional[OnError] = None,
    ) -> None:
        self._client = client
        self._handlers = dict(handlers)
        self._on_error = on_error
        self._started: Set[str] = set()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="holdfast-tool")
        self._in_flight: Set["Future[None]"] = set()

    def serve(self, agent_id: str, stop: Optional[threading.Event] = None) -> None:
        """Follow one agent, answering its custom tool calls, until ``stop``
        is set; then wait for results in flight to be posted. A stream that
        ends with an error (401, 404) raises it here."""
        stop = stop or threading.Event()
        # From now on: calls that already wait are re-read on each connect,
        # and older events are history (their calls may be long answered).
        after = self._client.agents.get(agent_id)["last_event_seq"]
        items: "queue.Queue[Optional[StreamItem]]" = queue.Queue()
        failed: List[BaseException] = []

        def follow() -> None:
            # A blocking read cannot be interrupted: the stream is read on a
            # thread of its own, which notices `stop` at its next item (a
            # heartbeat comes every 15 s) and then closes the connection,
            # while serve() returns at once.
            try:
                for item in self._client.stream(agent_id, after=after):
                    if stop.is_set():
                        return
                    items.put(item)
            except BaseException as e:
                failed.append(e)
            finally:
                items.put(None)

        threading.Thread(target=follow, name="holdfast-stream", daemon=True).start()
        try:
            while not stop.is_set():
                try:
                    item = items.get(timeout=0.1)
                except queue.Empty:
                    continue
                if item is None:
                    if failed:
                        raise failed[0]
                    return
                self.handle_item(item)
        finally:
            self.idle()

    def handle_item(self, item: StreamItem) -> None:
        """Act on one item of :meth:`Holdfast.stream`: a waiting call is
        handled; a failed re-read after an approval is not the end of
        serving (the stream's next reconnect re-reads what waits anyway)."""
        if item["type"] == "tool_call":
            self.handle(item["tool_call"])
        elif item["type"] == "event":
            try:
                self.handle_event(item["event"])
            except Exception as e:
                self._report(e, None)

    def close(self) -> None:
        """Wait for the results in flight, then stop the thread pool."""
        self.idle()
        self._pool.shutdown()

    def handle_event(self, event: EventView) -> None:
        """Act on an event, from the stream or a verified webhook: a custom
        call that waits is handled; after an approval, the calls it let
        through are re-read."""
        call = _waiting_call(event)
        if call is not None:
            self.handle(call)
        elif event["type"] == "approval.answered":
            for call in self._client.pending_tool_calls(event["agent_id"]):
                self.handle(call)

    def handle(self, call: ToolCallView) -> None:
        """Run the handler for ``call`` unless this process has already started it."""
        handler = self._handlers.get(call["name"])
        with self._lock:
            if call["id"] in self._started:
                return
            self._started.add(call["id"])
        future = self._pool.submit(self._run, handler, call)
        with self._lock:
            self._in_flight.add(future)
        future.add_done_callback(self._done)

    def idle(self) -> None:
        """Return once every handler started so far has finished and posted."""
        while True:
            with self._lock:
                pending = list(self._in_flight)
            if not pending:
                return
            for future in pending:
                future.result()

    def _done(self, future: "Future[None]") -> None:
        with self._lock:
            self._in_flight.discard(future)

    def _run(self, handler: Optional[ToolHandler], call: ToolCallView) -> None:
        if handler is None:
            output, is_error = _unserved(self._on_error, call)
        else:
            output, is_error = _run_sync(self._on_error, handler, call)
        # The work is done: post its result until Holdfast has it, through
        # API restarts, rather than ever running the handler again.
        failures = 0
        while True:
            try:
                self._client.submit_tool_result(call["id"], output, is_error=is_error)
                return
            except _TRANSIENT:
                failures += 1
                time.sleep(min(10.0, 0.25 * 2 ** min(failures, 6)))
            except Exception as e:
                self._report(e, call)
                return

    def _report(self, error: Exception, call: Optional[ToolCallView]) -> None:
        _report(self._on_error, error, call)


class AsyncToolServer:
    """Runs handlers (async, or sync in a thread) for custom tool calls."""

    def __init__(
        self,
        client: AsyncHoldfast,
        handlers: Mapping[str, ToolHandler],
        *,
        on_error: Optional[OnError] = None,
    ) -> None:
        self._client = client
        self._handlers = dict(handlers)
        self._on_error = on_error
        self._started: Set[str] = set()
        self._in_flight: Set["asyncio.Task[None]"] = set()

    async def serve(self, agent_id: str) -> None:
        """Follow one agent, answering its custom tool calls, until the task
        is cancelled. Results in flight are still posted."""
        try:
            # As in ToolServer.serve: from the agent's last event on.
            after = (await self._client.agents.get(agent_id))["last_event_seq"]
            async for item in self._client.stream(agent_id, after=after):
                await self.handle_item(item)
        finally:
            await self.idle()

    async def handle_item(self, item: StreamItem) -> None:
        """See :meth:`ToolServer.handle_item`."""
        if item["type"] == "tool_call":
            self.handle(item["tool_call"])
        elif item["type"] == "event":
            try:
                await self.handle_event(item["event"])
            except Exception as e:
                _report(self._on_error, e, None)

    async def handle_event(self, event: EventView) -> None:
        """See :meth:`ToolServer.handle_event`."""
        call = _waiting_call(event)
        if call is not None:
            self.handle(call)
        elif event["type"] == "approval.answered":
            for call in await self._client.pending_tool_calls(event["agent_id"]):
                self.handle(call)

    def handle(self, call: ToolCallView) -> None:
        """Run the handler for ``call`` unless this process has already started it."""
        handler = self._handlers.get(call["name"])
        if call["id"] in self._started:
            return
        self._started.add(call["id"])
        task = asyncio.get_running_loop().create_task(self._run(handler, call))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def idle(self) -> None:
        """Return once every handler started so far has finished and posted."""
        while self._in_flight:
            # Shielded: a cancelled serve() still posts the results it owes.
            await asyncio.shield(asyncio.gather(*self._in_flight, return_exceptions=True))

    async def _run(self, handler: Optional[ToolHandler], call: ToolCallView) -> None:
        if handler is None:
            output, is_error = _unserved(self._on_error, call)
        elif inspect.iscoroutinefunction(handler):
            try:
                output, is_error = await handler(call["input"], call), False
            except Exception as e:
                output, is_error = _raised(self._on_error, call, e)
            else:
                output, is_error = _checked(self._on_error, call, output)
        else:
            run = functools.partial(_run_sync, self._on_error, handler, call)
            output, is_error = await asyncio.get_running_loop().run_in_executor(None, run)
        failures = 0
        while True:
            try:
                await self._client.submit_tool_result(call["id"], output, is_error=is_error)
                return
            except _TRANSIENT:
                failures += 1
                await asyncio.sleep(min(10.0, 0.25 * 2 ** min(failures, 6)))
            except Exception as e:
                _report(self._on_error, e, call)
                return


def serve_tools(client: Holdfast, agent_id: str, handlers: Dict[str, ToolHandler], *, stop: Optional[threading.Event] = None) -> None:
    """Answer an agent's custom tool calls with ``handlers`` until ``stop`` is set."""
    ToolServer(client, handlers).serve(agent_id, stop)


async def serve_tools_async(client: AsyncHoldfast, agent_id: str, handlers: Dict[str, ToolHandler]) -> None:
    """Answer an agent's custom tool calls with ``handlers`` until cancelled."""
    await AsyncToolServer(client, handlers).serve(agent_id)
