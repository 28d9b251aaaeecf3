"""``run`` and ``text_stream`` against a real Holdfast (see conftest.py):
one call from a message to its answer, custom tools served meanwhile,
through a worker SIGKILL; handler mistakes end the call with an error
result the model sees."""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import logging
import pathlib
import re
import subprocess
import sys
import time
from typing import Any, Dict, List

import pytest

from holdfast import AsyncHoldfast, ConflictError, Holdfast, TextChunk, ToolCallView, TurnFailedError

from conftest import ROOT
from test_holdfast import FAST, LOOKUP, MODEL, all_events, directive

ORDER = {"order": 1001, "status": "shipped"}


@pytest.fixture
def client(stack):
    with Holdfast(stack.key, stack.url, retry=FAST) as client:
        yield client


def lookup(tool_input: Dict[str, Any], call: ToolCallView) -> Dict[str, Any]:
    return {"order": tool_input["order"], "status": "shipped"}


def calls_lookup(**extra: Any) -> str:
    return directive(call=[{"name": "lookup", "input": {"order": 1001}}], **extra)


def test_run_sends_once_serves_the_tool_and_returns_the_answer(client):
    agent = client.agents.create({"model": MODEL, "tools": [LOOKUP]})
    runs: List[str] = []

    def counted(tool_input: Dict[str, Any], call: ToolCallView) -> Dict[str, Any]:
        runs.append(call["id"])
        return lookup(tool_input, call)

    answer = client.run(agent["id"], calls_lookup(), tools={"lookup": counted}, idempotency_key="run-sync-1")
    assert answer.text == f"done: {json.dumps(ORDER, separators=(',', ':'))}"
    assert answer.message == [{"type": "text", "text": answer.text}]
    assert answer.event["type"] == "turn.completed"
    assert not answer.replayed
    assert len(runs) == 1
    # The same key again: nothing is sent twice, and the answer is the same.
    again = client.run(agent["id"], calls_lookup(), tools={"lookup": counted}, idempotency_key="run-sync-1")
    assert again.replayed and again.text == answer.text
    events = all_events(client, agent["id"])
    assert [e["type"] for e in events].count("input.received") == 1
    assert len(runs) == 1


def test_run_waits_for_the_turn_of_its_own_input_behind_an_open_one(client):
    agent = client.agents.create({"model": MODEL})
    client.send(agent["id"], directive(say="the first turn's slow answer", trickle_ms=100))
    answer = client.run(agent["id"], "second")
    assert answer.text == "echo: second"


def test_concurrent_runs_on_one_agent_each_get_the_answer_to_their_own_input(stack):
    async def main() -> List[str]:
        async with AsyncHoldfast(stack.key, stack.url, retry=FAST) as aclient:
            agent = await aclient.agents.create({"model": MODEL})
            await aclient.send(agent["id"], directive(say="a slow first turn", trickle_ms=50))
            answers = await asyncio.gather(*(aclient.run(agent["id"], f"message {i}") for i in range(5)))
            return [a.text for a in answers]

    assert asyncio.run(main()) == [f"echo: message {i}" for i in range(5)]


def test_async_run_serves_async_and_sync_handlers(stack):
    async def main() -> str:
        async with AsyncHoldfast(stack.key, stack.url, retry=FAST) as aclient:
            agent = await aclient.agents.create({"model": MODEL, "tools": [LOOKUP]})

            async def alookup(tool_input: Dict[str, Any], call: ToolCallView) -> Dict[str, Any]:
                await asyncio.sleep(0)
                return lookup(tool_input, call)

            first = await aclient.run(agent["id"], calls_lookup(), tools={"lookup": alookup})
            second = await aclient.run(agent["id"], calls_lookup(), tools={"lookup": lookup})
            assert first.text == second.text
            return first.text

    assert asyncio.run(main()) == f"done: {json.dumps(ORDER, separators=(',', ':'))}"


def test_a_cancelled_turn_raises_turn_failed_error_with_the_event(client):
    agent = client.agents.create({"model": MODEL})
    stream = client.text_stream(agent["id"], directive(say="an answer to cancel halfway", trickle_ms=200))
    with pytest.raises(TurnFailedError) as failed:
        for _ in stream:
            client.agents.cancel(agent["id"])
    assert failed.value.event["type"] == "turn.cancelled"
    assert "turn.cancelled" in str(failed.value)


def test_text_stream_marks_the_restart_after_a_worker_sigkill_and_run_returns_the_answer_once(stack, client):
    agent = client.agents.create({"model": MODEL})
    words = " ".join(f"word{i}" for i in range(12))
    shown: List[str] = []
    chunks: List[TextChunk] = []
    stream = client.text_stream(agent["id"], directive(say=words, trickle_ms=100))
    killed = False
    for chunk in stream:
        chunks.append(chunk)
        # What a terminal shows: a restart voids the text of the call so far.
        if chunk.restart:
            shown.clear()
        shown.append(chunk.text)
        if not killed:
            assert stack.command(f"kill-lease-holder {agent['id']}")["killed"]
            stack.command("start-worker")
            killed = True
    assert stream.result is not None
    assert stream.result.text == words
    assert any(c.restart for c in chunks)
    assert "".join(shown) == words
    events = all_events(client, agent["id"])
    assert [e["type"] for e in events].count("turn.completed") == 1
    assert [e["type"] for e in events].count("input.received") == 1


@pytest.mark.parametrize(
    "name, handler, why",
    [
        ("raises", lambda i, c: 1 / 0, "raised ZeroDivisionError"),
        ("not_json", lambda i, c: {"at": datetime.datetime(2026, 1, 1)}, "not JSON"),
        ("nan", lambda i, c: {"x": float("nan")}, "not JSON"),
        ("awaitable", lambda i, c: asyncio.sleep(0), "returned an awaitable"),
        ("no_handler", None, "no handler for tool"),
    ],
)
def test_a_handler_mistake_ends_the_call_with_an_error_result_within_a_second(client, caplog, name, handler, why):
    agent = client.agents.create({"model": MODEL, "tools": [LOOKUP]})
    tools = {} if handler is None else {"lookup": handler}
    caplog.set_level(logging.ERROR, logger="holdfast")
    answer = client.run(agent["id"], calls_lookup(), tools=tools)
    completed = [e for e in all_events(client, agent["id"]) if e["type"] == "tool_call.completed"]
    assert len(completed) == 1
    assert completed[0]["data"]["is_error"] is True
    assert why in completed[0]["data"]["output"]["error"]
    # The model saw the error.
    assert why in answer.text
    assert why in caplog.text
    [call] = client.json("GET", f"/v1/agents/{agent['id']}/tool-calls")["tool_calls"]
    took = datetime.datetime.fromisoformat(call["completed_at"].replace("Z", "+00:00")) - datetime.datetime.fromisoformat(
        call["created_at"].replace("Z", "+00:00")
    )
    assert took < datetime.timedelta(seconds=1), took


def test_an_async_sync_handler_returning_a_coroutine_ends_with_an_error_result(stack):
    async def main() -> str:
        async with AsyncHoldfast(stack.key, stack.url, retry=FAST) as aclient:
            agent = await aclient.agents.create({"model": MODEL, "tools": [LOOKUP]})

            async def later() -> str:
                return "never awaited"

            answer = await aclient.run(agent["id"], calls_lookup(), tools={"lookup": lambda i, c: later()})
            return answer.text

    assert "returned an awaitable" in asyncio.run(main())


def test_an_image_result_posted_again_is_the_same_result_not_a_conflict(client):
    agent = client.agents.create({"model": MODEL, "tools": [LOOKUP]})
    client.send(agent["id"], calls_lookup())
    deadline = time.monotonic() + 30
    while not client.pending_tool_calls(agent["id"]):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    [call] = client.pending_tool_calls(agent["id"])
    # A 1x1 PNG.
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    output = [{"type": "text", "text": "the label"}, {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}]
    first = client.submit_tool_result(call["id"], output)
    assert first["output"][1]["source"]["type"] == "attachment"
    again = client.submit_tool_result(call["id"], output)
    assert again["id"] == call["id"]


# Two 1x1 PNGs: the same size and media type, other pixels.
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
OTHER_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


def with_image(text: str, png: str) -> List[Dict[str, Any]]:
    return [{"type": "text", "text": text}, {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}]


def test_content_read_back_from_the_timeline_is_the_content_sent_and_not_another_image(client, stack):
    agent = client.agents.create({"model": MODEL, "tools": [LOOKUP]})
    client.send(agent["id"], with_image(calls_lookup(), PNG))
    deadline = time.monotonic() + 30
    while not client.pending_tool_calls(agent["id"]):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    [call] = client.pending_tool_calls(agent["id"])
    output = with_image("the label", PNG)
    client.submit_tool_result(call["id"], output)
    # A different image of the same size and type is another result: a conflict.
    with pytest.raises(ConflictError):
        client.submit_tool_result(call["id"], with_image("the label", OTHER_PNG))

    events = all_events(client, agent["id"])
    [received] = [e for e in events if e["type"] == "input.received"]
    [completed] = [e for e in events if e["type"] == "tool_call.completed"]
    assert received["type"] == "input.received" and completed["type"] == "tool_call.completed"
    stored = completed["data"].get("output")
    assert stored[1]["source"]["type"] == "attachment"
    assert client.same_content(agent["id"], stored, output)
    assert client.same_content(agent["id"], received["data"]["content"], with_image(calls_lookup(), PNG))
    assert not client.same_content(agent["id"], stored, with_image("the label", OTHER_PNG))
    assert not client.same_content(agent["id"], stored, with_image("another label", PNG))
    assert client.attachment(agent["id"], stored[1]["source"]["attachment_id"]) == base64.b64decode(PNG)

    async def same_async(sent: Any) -> bool:
        async with AsyncHoldfast(stack.key, stack.url, retry=FAST) as aclient:
            return await aclient.same_content(agent["id"], stored, sent)

    assert asyncio.run(same_async(output))
    assert not asyncio.run(same_async(with_image("the label", OTHER_PNG)))


def test_the_readme_quickstart_prints_the_answer(stack, tmp_path):
    readme = (ROOT / "sdk" / "python" / "README.md").read_text()
    code = re.search(r"## Quickstart\n.*?```python\n(.*?)```", readme, re.S)
    assert code, "the README has a ```python block under ## Quickstart"
    script = tmp_path / "quickstart.py"
    script.write_text(code.group(1))
    env = {"HOLDFAST_URL": stack.url, "HOLDFAST_API_KEY": stack.key, "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "echo: Where is order 1001?\n"
