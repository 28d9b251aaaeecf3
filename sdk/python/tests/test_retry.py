"""The retry policy, with a scripted transport: what is retried, with which
key, after how long; the errors when it gives up; settings from the
environment."""

from __future__ import annotations

import time
from typing import Callable, List

import httpx
import pytest

from holdfast import (
    APIConnectionError,
    APITimeoutError,
    AsyncHoldfast,
    Holdfast,
    HoldfastError,
    RetryPolicy,
    UnavailableError,
)
from holdfast._policy import StreamCursor
from holdfast._sse import SseMessage

INPUT = {"id": "i1", "agent_id": "a1", "content": "hi", "created_at": "2026-01-01T00:00:00Z"}
BUSY = {"error": {"type": "unavailable", "message": "busy"}}


def scripted(answers: List[Callable[[httpx.Request], httpx.Response]], policy: RetryPolicy):
    seen: List[tuple] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append((request.headers.get("idempotency-key"), time.monotonic()))
        return answers.pop(0)(request)

    http = httpx.Client(base_url="http://holdfast.test", transport=httpx.MockTransport(handle))
    return seen, Holdfast("hf_x", "http://holdfast.test", retry=policy, http=http)


def refuse(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("refused", request=request)


def test_429_and_503_are_retried_with_the_same_key_honouring_retry_after():
    seen, client = scripted(
        [
            lambda r: httpx.Response(429, json={"error": {"type": "rate_limited", "message": "slow"}}, headers={"retry-after": "1"}),
            refuse,
            lambda r: httpx.Response(503, json=BUSY),
            lambda r: httpx.Response(201, json=INPUT, headers={"idempotent-replayed": "true"}),
        ],
        RetryPolicy(base_delay=0.01),
    )
    sent = client.send("a1", "hi")
    assert sent.replayed
    assert len(seen) == 4
    assert len({key for key, _ in seen}) == 1
    assert len(seen[0][0]) == 36
    assert seen[1][1] - seen[0][1] >= 0.99


def test_an_own_key_is_used_and_retries_stop_after_max_retries_with_a_typed_error():
    seen, client = scripted([lambda r: httpx.Response(503, json=BUSY)] * 3, RetryPolicy(base_delay=0.001, max_retries=2))
    with pytest.raises(UnavailableError):
        client.send("a1", "hi", idempotency_key="msg-1")
    assert [key for key, _ in seen] == ["msg-1"] * 3


def test_creating_an_agent_is_not_retried_after_a_network_error():
    seen, client = scripted([refuse], RetryPolicy(base_delay=0.001))
    with pytest.raises(APIConnectionError):
        client.agents.create({"model": {"provider": "anthropic", "name": "m"}})
    assert len(seen) == 1


def test_502_and_504_are_retried_too():
    seen, client = scripted(
        [
            lambda r: httpx.Response(502, text="bad gateway"),
            lambda r: httpx.Response(504, text="gateway timeout"),
            lambda r: httpx.Response(201, json=INPUT),
        ],
        RetryPolicy(base_delay=0.001),
    )
    client.send("a1", "hi")
    assert len(seen) == 3 and len({key for key, _ in seen}) == 1


def test_retries_stop_at_the_budget_and_the_connection_error_is_a_holdfast_error_with_the_key_and_cause():
    seen, client = scripted([refuse] * 1000, RetryPolicy(budget=0.5, base_delay=0.01, max_delay=0.05))
    started = time.monotonic()
    with pytest.raises(HoldfastError) as failed:
        client.send("a1", "hi", idempotency_key="msg-2")
    assert 0.3 < time.monotonic() - started < 1.5
    assert isinstance(failed.value, APIConnectionError)
    assert failed.value.idempotency_key == "msg-2"
    assert "msg-2" in str(failed.value) and "ConnectError: refused" in str(failed.value)
    assert len(seen) > 3


def test_the_default_budget_outlasts_an_up_restart():
    assert RetryPolicy().budget >= 60 and RetryPolicy().max_retries is None


def test_a_try_that_times_out_is_an_api_timeout_error():
    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    _, client = scripted([slow] * 3, RetryPolicy(base_delay=0.001, max_retries=2))
    with pytest.raises(APITimeoutError):
        client.agents.get("a1")


def test_the_key_and_url_come_from_the_environment_and_a_missing_key_says_how_to_get_one(monkeypatch):
    monkeypatch.setenv("HOLDFAST_API_KEY", "hf_from_env")
    monkeypatch.setenv("HOLDFAST_URL", "http://holdfast.example:9000/")
    with Holdfast() as client:
        assert client.base_url == "http://holdfast.example:9000"
        assert client._api_key == "hf_from_env"
    monkeypatch.delenv("HOLDFAST_API_KEY")
    for make in (Holdfast, AsyncHoldfast):
        with pytest.raises(HoldfastError) as missing:
            make()
        assert "HOLDFAST_API_KEY" in str(missing.value) and "holdfast up" in str(missing.value)


def test_thinking_deltas_are_delivered():
    cursor = StreamCursor(0)
    [item] = list(cursor.items(SseMessage(None, "thinking_delta", '{"text": "hmm", "epoch": 3}')))
    assert item == {"type": "thinking_delta", "delta": {"text": "hmm", "epoch": 3}}
