"""The retry policy, with a scripted transport: what is retried, with which
key, after how long."""

from __future__ import annotations

import time
from typing import Callable, List

import httpx
import pytest

from holdfast import APIConnectionError, Holdfast, RetryPolicy, UnavailableError

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
